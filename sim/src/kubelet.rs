//! The rest of the cluster, as the operator sees it through the API: the scheduler and the
//! kubelet (a pod is bound once no scheduling gate holds it, starts, and an At's pod runs its
//! command and ends; a deleted pod is stopped and removed after a while). The garbage
//! collector is [`crate::gc`].

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::faults::Fault;
use crate::model::objects::{self, command_container, command_of};
use crate::model::resource::Kind;
use crate::model::store::{Change, Key, Store, seconds};
use crate::oracle::Actor;
use crate::world::{Sim, pick};

/// Something the world does in response to a write.
#[derive(Debug)]
pub enum Reaction {
    /// Bind and start a new pod (and run an At's command to its end).
    Start(Key, String),
    /// Remove a terminating pod once it stopped.
    Remove(Key, String),
}

pub fn reactions(change: &Change) -> Vec<Reaction> {
    let key = &change.key;
    match (key.kind, &change.old, &change.new) {
        (Kind::Pod, None, Some(new)) => {
            let uid = objects::uid(new).to_string();
            let starts = !objects::terminating(new) && !objects::gated(new);
            starts
                .then(|| Reaction::Start(key.clone(), uid))
                .into_iter()
                .collect()
        }
        (Kind::Pod, Some(old), Some(new))
            if !objects::terminating(old) && objects::terminating(new) =>
        {
            vec![Reaction::Remove(key.clone(), objects::uid(new).to_string())]
        }
        (Kind::Pod, Some(old), Some(new))
            if objects::gated(old) && !objects::gated(new) && !objects::terminating(new) =>
        {
            vec![Reaction::Start(key.clone(), objects::uid(new).to_string())]
        }
        _ => Vec::new(),
    }
}

pub async fn react(sim: Arc<Sim>, reaction: Reaction) {
    let ms = Duration::from_millis;
    match reaction {
        Reaction::Start(key, uid) => {
            tokio::time::sleep(pick(&sim, ms(100), ms(1500))).await;
            if !bind(&sim, &key, &uid) {
                return;
            }
            if reject(&sim, &key, &uid) {
                return;
            }
            tokio::time::sleep(pick(&sim, ms(100), ms(1000))).await;
            let Some(command) = start(&sim, &key, &uid) else {
                return;
            };
            let runs = pick(&sim, ms(300), ms(3000)) + sleeps(&command);
            tokio::time::sleep(runs).await;
            let ended = Ended {
                code: exit_code(&command),
                oom: sim.with(|w| w.faults.fire(Fault::OomKilled)),
                sidecars: false,
            };
            finish(&sim, &key, &uid, ended);
            // A sidecar container that ends does so a little later: a second status.
            tokio::time::sleep(pick(&sim, ms(100), ms(2000))).await;
            let sidecars = true;
            finish(&sim, &key, &uid, Ended { sidecars, ..ended });
        }
        Reaction::Remove(key, uid) => {
            if sim.with(|w| w.faults.fire(Fault::StuckTerminating)) {
                let pod = format!("{}/{}", key.namespace, key.name);
                sim.trace(|| format!("the node of pod {pod} is lost: it stays Terminating"));
                return;
            }
            // Its containers get SIGTERM and end; then it is removed.
            let grace = pick(&sim, ms(100), ms(2000));
            tokio::time::sleep(grace / 2).await;
            stop(&sim, &key, &uid);
            tokio::time::sleep(grace / 2).await;
            sim.act(Actor::Kubelet, |w| {
                if current(&w.store, &key, &uid).is_some() {
                    w.store.remove(&key);
                }
            });
        }
    }
}

pub(crate) fn current(store: &Store, key: &Key, uid: &str) -> Option<Value> {
    store
        .get(key)
        .filter(|p| objects::uid(p) == uid)
        .map(|p| (**p).clone())
}

/// The scheduler binds the pod to the node; `false` if it is gone or going.
fn bind(sim: &Arc<Sim>, key: &Key, uid: &str) -> bool {
    sim.act(Actor::Kubelet, |w| {
        if current(&w.store, key, uid)
            .is_none_or(|p| objects::terminating(&p) || objects::gated(&p))
        {
            return false;
        }
        let patch = json!({"spec": {"nodeName": "node-1"}});
        w.store.merge_patch(key, &patch, None).is_ok()
    })
}

/// The kubelet rejects a PodSet's or an At's pod at admission, if that fault fires: `true`
/// if it did.
fn reject(sim: &Arc<Sim>, key: &Key, uid: &str) -> bool {
    sim.act(Actor::Kubelet, |w| {
        let Some(pod) = current(&w.store, key, uid) else {
            return false;
        };
        if !objects::controller(&pod).is_some_and(|(_, name, _)| w.faults.rejects(name)) {
            return false;
        }
        let status = json!({"status": {"phase": "Failed", "reason": "OutOfpods",
            "message": "Pod was rejected: Node didn't have enough resource: pods, requested: 1, used: 110, capacity: 110"}});
        w.store.merge_patch(key, &status, Some("status")).is_ok()
    })
}

/// The kubelet starts the pod's containers, sidecars first: Running and ready. Returns an
/// At's command, whose run then ends.
fn start(sim: &Arc<Sim>, key: &Key, uid: &str) -> Option<String> {
    let now = seconds(sim.now());
    sim.act(Actor::Kubelet, |w| {
        let pod = current(&w.store, key, uid).filter(|p| !objects::terminating(p))?;
        let running = json!({"running": {"startedAt": now}});
        let status = json!({"status": {
            "phase": "Running", "startTime": now,
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}],
            "initContainerStatuses": statuses(&pod, "initContainers", |_| running.clone()),
            "containerStatuses": statuses(&pod, "containers", |_| running.clone()),
        }});
        w.store.merge_patch(key, &status, Some("status")).ok()?;
        let runs_once = pod["spec"]["restartPolicy"] == "Never";
        runs_once.then(|| command_of(command_container(&pod)).to_string())
    })
}

/// The statuses of the pod's `list` of containers, each in the `state` it is given, sorted
/// by name as the kubelet sorts them.
fn statuses(pod: &Value, list: &str, state: impl Fn(&Value) -> Value) -> Value {
    let mut out: Vec<Value> = pod["spec"][list]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            json!({"name": c["name"], "ready": false, "restartCount": 0, "image": c["image"],
                "imageID": "", "state": state(c)})
        })
        .collect();
    out.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    Value::Array(out)
}

/// How an At's run ends.
#[derive(Clone, Copy)]
struct Ended {
    /// The command's exit code.
    code: i64,
    /// Killed for its memory instead.
    oom: bool,
    /// Sidecar containers ended too, as their commands say (else they still run).
    sidecars: bool,
}

/// The command ended with `code` (or was killed for its memory). A sidecar container added
/// beside it ends as its own command says, or runs on, and the pod with it: the pod ends once
/// all its containers did, Failed if any failed. A sidecar init container is stopped as the
/// pod ends, and its end does not count.
fn finish(sim: &Arc<Sim>, key: &Key, uid: &str, end: Ended) {
    let now = seconds(sim.now());
    let Ended {
        code,
        oom,
        sidecars,
    } = end;
    sim.act(Actor::Kubelet, |w| {
        // A deleted pod's containers were stopped (`stop`): none ends by itself.
        let Some(pod) = current(&w.store, key, uid)
            .filter(|p| objects::phase(p) == "Running" && !objects::terminating(p))
        else {
            return;
        };
        let ended = |code: i64, reason: &str| {
            json!({"terminated": {"exitCode": code, "reason": reason,
                "startedAt": now, "finishedAt": now}})
        };
        let running = json!({"running": {"startedAt": now}});
        // How each container ended, if it has: the command as drawn, a sidecar container as
        // its own command says once sidecars end, or never (`sleep`).
        let command = objects::command_container_name(&pod);
        let own = |c: &Value| match c["name"] == command {
            true if oom => Some((137, "OOMKilled")),
            true => Some((code, exit_reason(code))),
            false if !sidecars || command_of(c).starts_with("sleep") => None,
            false => Some((
                exit_code(command_of(c)),
                exit_reason(exit_code(command_of(c))),
            )),
        };
        let codes: Vec<_> = pod["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .map(own)
            .collect();
        let all_ended = codes.iter().all(Option::is_some);
        let phase = match all_ended {
            false => "Running",
            true if codes.iter().flatten().all(|(c, _)| *c == 0) => "Succeeded",
            true => "Failed",
        };
        let state = |c: &Value| own(c).map_or(running.clone(), |(code, why)| ended(code, why));
        let init = |c: &Value| match all_ended {
            true => ended(
                exit_code(command_of(c)),
                exit_reason(exit_code(command_of(c))),
            ),
            false => running.clone(),
        };
        let containers = statuses(&pod, "containers", state);
        if pod["status"]["containerStatuses"] == containers {
            return; // nothing ended since the last status: a kubelet writes none
        }
        let status = json!({"status": {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": now}],
            "initContainerStatuses": statuses(&pod, "initContainers", init),
            "containerStatuses": containers,
        }});
        let _ = w.store.merge_patch(key, &status, Some("status"));
    });
}

/// The kubelet stops a deleted pod that runs once (an At's): each container still running
/// ends as SIGTERM ends `sh` (exit code 143) at this moment, and the pod is Failed. (Pods that
/// restart in place are removed as they are: what they say while they stop is nothing the
/// operator reads.)
fn stop(sim: &Arc<Sim>, key: &Key, uid: &str) {
    let now = seconds(sim.now());
    sim.act(Actor::Kubelet, |w| {
        let Some(pod) = current(&w.store, key, uid)
            .filter(|p| objects::phase(p) == "Running" && p["spec"]["restartPolicy"] == "Never")
        else {
            return;
        };
        let killed = json!({"terminated": {"exitCode": 143, "reason": "Error",
            "startedAt": now, "finishedAt": now}});
        let state = |list: &str| {
            let had = pod["status"][list].as_array().cloned().unwrap_or_default();
            let killed = killed.clone();
            move |c: &Value| {
                let ended = had.iter().find(|s| s["name"] == c["name"]);
                ended
                    .filter(|s| s["state"]["terminated"].is_object())
                    .map_or(killed.clone(), |s| s["state"].clone())
            }
        };
        let status = json!({"status": {
            "phase": "Failed",
            "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": now}],
            "initContainerStatuses": statuses(&pod, "initContainers", state("initContainerStatuses")),
            "containerStatuses": statuses(&pod, "containers", state("containerStatuses")),
        }});
        let _ = w.store.merge_patch(key, &status, Some("status"));
    });
}

/// The kubelet's reason for a container that exited with `code`.
fn exit_reason(code: i64) -> &'static str {
    if code == 0 { "Completed" } else { "Error" }
}

/// `sh -c` ends with the code of an `exit N` in the command, else 0.
fn exit_code(command: &str) -> i64 {
    command
        .split("exit ")
        .nth(1)
        .and_then(|rest| {
            rest.split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// How long `sh -c` spends in the `sleep N` of the command (whole seconds), beside its own
/// start and end: none without one.
fn sleeps(command: &str) -> Duration {
    let seconds = command
        .split("sleep ")
        .skip(1)
        .filter_map(|rest| {
            rest.split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    Duration::from_secs(seconds)
}

#[cfg(test)]
mod tests {
    use super::{exit_code, sleeps};
    use std::time::Duration;

    #[test]
    fn a_command_exits_with_its_exit_code() {
        assert_eq!(exit_code("echo YAY"), 0);
        assert_eq!(exit_code("echo no; exit 3"), 3);
    }

    #[test]
    fn a_command_runs_as_long_as_it_sleeps() {
        assert_eq!(sleeps("echo YAY"), Duration::ZERO);
        assert_eq!(sleeps("sleep 12; exit 3"), Duration::from_secs(12));
        assert_eq!(sleeps("sleep infinity"), Duration::ZERO);
    }
}
