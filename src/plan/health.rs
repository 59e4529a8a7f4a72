//! `PodsHealthy`: whether a PodSet's pods are getting on. A Pending pod counts as available
//! (the PodSet API says so), so `Available` alone shows a PodSet whose pods can never be
//! scheduled, or whose image cannot be pulled, as fine; this condition and its events say what
//! the scheduler or kubelet said instead, as `kubectl describe podset` shows.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::runtime::events::EventType;

use crate::conditions::{self, Desired};
use crate::pod::CachedPod;

pub const CONDITION_PODS_HEALTHY: &str = "PodsHealthy";
pub const REASON_HEALTHY: &str = "AllPodsHealthy";

/// `PodsHealthy` for `pods`: False, with the reason and words of the first active pod in
/// trouble (by name), while any is; True once none is. A pod that failed (evicted, say) is
/// replaced, and its reason stays on it (`kubectl get pods`), not on the PodSet. `None` while none ever was (the condition is
/// absent): a PodSet whose pods start as they should never carries it, and costs no write.
pub fn pods_healthy<'a>(previous: &[Condition], pods: &'a [Arc<CachedPod>]) -> Option<Desired<'a>> {
    let mut troubled: Vec<&CachedPod> = pods
        .iter()
        .filter(|p| p.is_active() && p.trouble().is_some())
        .map(|p| &**p)
        .collect();
    troubled.sort_by(|a, b| a.name.cmp(&b.name));
    let Some(first) = troubled.first() else {
        return conditions::find(previous, CONDITION_PODS_HEALTHY).map(|_| Desired {
            type_: CONDITION_PODS_HEALTHY,
            status: true,
            reason: REASON_HEALTHY,
            message: "no pod is in trouble".into(),
        });
    };
    let trouble = first.trouble().expect("filtered on it");
    let mut message = format!("pod {}: {}", first.name, trouble.message);
    if troubled.len() > 1 {
        message.push_str(&format!(" ({} pods in trouble)", troubled.len()));
    }
    Some(Desired {
        type_: CONDITION_PODS_HEALTHY,
        status: false,
        reason: &trouble.reason,
        message,
    })
}

/// The event for a `PodsHealthy` that appeared or changed its status or reason from `old` to
/// `new`: a Warning when pods are in trouble, Normal once they are not.
pub fn note<'a>(old: &[Condition], new: &'a [Condition]) -> Option<(EventType, &'a Condition)> {
    let now = conditions::find(new, CONDITION_PODS_HEALTHY)?;
    let before = conditions::find(old, CONDITION_PODS_HEALTHY);
    if before.is_some_and(|b| b.status == now.status && b.reason == now.reason) {
        return None;
    }
    let type_ = if now.status == "True" {
        EventType::Normal
    } else {
        EventType::Warning
    };
    Some((type_, now))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::fixtures;
    use crate::pod::{Notes, Trouble};
    use jiff::Timestamp;

    fn troubled(name: &str, reason: &str) -> Arc<CachedPod> {
        let mut pod = fixtures::pod(name);
        pod.notes = Some(Box::new(Notes {
            ended: None,
            trouble: Some(Trouble {
                reason: reason.into(),
                message: "0/1 nodes are available".into(),
            }),
            ..Notes::default()
        }));
        Arc::new(pod)
    }

    fn written(want: Desired<'_>) -> Vec<Condition> {
        let t = Timestamp::from_second(1_000).unwrap();
        vec![conditions::condition(&[], want, Some(1), t)]
    }

    #[test]
    fn absent_until_a_pod_is_in_trouble_then_kept_until_none_is() {
        let fine = vec![Arc::new(fixtures::pod("web-a"))];
        assert_eq!(pods_healthy(&[], &fine), None);

        let pods = vec![
            Arc::new(fixtures::pod("web-a")),
            troubled("web-c", "ImagePullBackOff"),
            troubled("web-b", "Unschedulable"),
        ];
        let want = pods_healthy(&[], &pods).unwrap();
        assert_eq!((want.status, want.reason), (false, "Unschedulable"));
        assert_eq!(
            want.message,
            "pod web-b: 0/1 nodes are available (2 pods in trouble)"
        );
        let unhealthy = written(want);
        let (type_, c) = note(&[], &unhealthy).unwrap();
        assert_eq!(
            (type_, c.reason.as_str()),
            (EventType::Warning, "Unschedulable")
        );
        assert_eq!(note(&unhealthy, &unhealthy), None, "unchanged: no event");

        let recovered = pods_healthy(&unhealthy, &fine).unwrap();
        assert_eq!((recovered.status, recovered.reason), (true, REASON_HEALTHY));
        let healthy = written(recovered);
        assert_eq!(note(&unhealthy, &healthy).unwrap().0, EventType::Normal);
    }
}
