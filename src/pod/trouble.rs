//! Why a pod is not getting on, in the scheduler's or the kubelet's words. Counted alone, a
//! pod that can never be scheduled or whose image cannot be pulled is "available" (Pending),
//! and nothing would tell a user why nothing runs; this is what the PodSet's `PodsHealthy`
//! and the At's `Completed` conditions carry instead (issue 31).

use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodStatus};

/// A pod's trouble: a reason a user can search for (`Unschedulable`, `ImagePullBackOff`,
/// `CrashLoopBackOff`, `OOMKilled`, `Evicted`, ...) and the message that came with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trouble {
    pub reason: Box<str>,
    pub message: Box<str>,
}

/// Waiting reasons of a container that is on its way: not trouble.
const STARTING: [&str; 2] = ["ContainerCreating", "PodInitializing"];

/// The pod's trouble, if any: the scheduler found no node, or a container waits on an error
/// (its last run OOMKilled, if so). How a pod ended (evicted, say) is its `Ended`, not
/// trouble: nothing reads the trouble of a pod that will not start again.
pub fn trouble(pod: &Pod) -> Option<Trouble> {
    let status = pod.status.as_ref()?;
    unschedulable(status).or_else(|| waiting(status))
}

fn unschedulable(status: &PodStatus) -> Option<Trouble> {
    let scheduled = status
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled")?;
    (scheduled.status == "False" && scheduled.reason.as_deref() == Some("Unschedulable")).then(
        || Trouble {
            reason: "Unschedulable".into(),
            message: scheduled.message.as_deref().unwrap_or_default().into(),
        },
    )
}

fn waiting(status: &PodStatus) -> Option<Trouble> {
    let containers = status.init_container_statuses.iter().flatten();
    let containers = containers.chain(status.container_statuses.iter().flatten());
    containers.into_iter().find_map(container_trouble)
}

fn container_trouble(c: &ContainerStatus) -> Option<Trouble> {
    let waiting = c.state.as_ref()?.waiting.as_ref()?;
    let reason = waiting.reason.as_deref().unwrap_or_default();
    if reason.is_empty() || STARTING.contains(&reason) {
        return None;
    }
    let oom = c
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .is_some_and(|t| t.reason.as_deref() == Some("OOMKilled"));
    let mut message = format!("container {}: {reason}", c.name);
    if let Some(words) = waiting.message.as_deref().filter(|m| !m.is_empty()) {
        message.push_str(&format!(": {words}"));
    }
    if oom {
        message = format!(
            "container {} was OOMKilled (its memory limit is too low for it), restarted {} times; {message}",
            c.name, c.restart_count
        );
    }
    Some(Trouble {
        reason: if oom { "OOMKilled" } else { reason }.into(),
        message: message.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "status": status})).unwrap()
    }

    fn found(status: serde_json::Value) -> Option<(String, String)> {
        trouble(&pod(status)).map(|t| (t.reason.to_string(), t.message.to_string()))
    }

    #[test]
    fn a_pod_on_its_way_is_no_trouble() {
        assert_eq!(found(json!({"phase": "Pending"})), None);
        assert_eq!(
            found(
                json!({"phase": "Pending", "conditions": [{"type": "PodScheduled",
                "status": "False", "reason": "SchedulingGated"}]})
            ),
            None
        );
        assert_eq!(
            found(
                json!({"phase": "Pending", "containerStatuses": [{"name": "c",
                "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": "ContainerCreating"}}}]})
            ),
            None
        );
        assert_eq!(found(json!({"phase": "Failed"})), None);
    }

    #[test]
    fn the_scheduler_and_the_kubelet_say_what_is_wrong() {
        let unschedulable = json!({"phase": "Pending", "conditions": [{"type": "PodScheduled",
            "status": "False", "reason": "Unschedulable",
            "message": "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."}]});
        let (reason, message) = found(unschedulable).unwrap();
        assert_eq!(reason, "Unschedulable");
        assert!(message.starts_with("0/1 nodes are available"), "{message}");

        let pull = json!({"phase": "Pending", "containerStatuses": [{"name": "web",
            "image": "nope", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ImagePullBackOff",
                "message": "Back-off pulling image \"nope\""}}}]});
        assert_eq!(
            found(pull).unwrap(),
            (
                "ImagePullBackOff".into(),
                "container web: ImagePullBackOff: Back-off pulling image \"nope\"".into()
            )
        );

        let oom = json!({"phase": "Running", "containerStatuses": [{"name": "web",
            "image": "i", "imageID": "", "ready": false, "restartCount": 4,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}]});
        let (reason, message) = found(oom).unwrap();
        assert_eq!(reason, "OOMKilled");
        assert!(message.contains("restarted 4 times"), "{message}");

        let evicted = json!({"phase": "Failed", "reason": "Evicted",
            "message": "The node was low on resource: memory."});
        assert_eq!(found(evicted), None, "an ended pod is not in trouble");
    }
}
