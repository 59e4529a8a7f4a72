//! The status a PodSet reports, decided without I/O.

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};

use super::pod::selector;
use crate::api::decoded::Reported;
use crate::api::{PodSet, PodSetStatus};
use crate::conditions::{self, Desired};
use crate::plan::health;
use crate::plan::kstatus::{self, Progress};
use crate::pod::CachedPod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use std::cmp::Ordering;

pub const CONDITION_AVAILABLE: &str = "Available";
pub const CONDITION_REPLICA_FAILURE: &str = "ReplicaFailure";

impl Reported for PodSet {
    const CONDITION: (&'static str, &'static str) = (CONDITION_REPLICA_FAILURE, "True");

    fn placeholder(metadata: ObjectMeta) -> Self {
        PodSet {
            metadata,
            spec: crate::api::PodSetSpec {
                replicas: 0,
                template: None,
            },
            status: None,
        }
    }
}

/// Why the last create or delete failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub reason: &'static str,
    pub message: String,
}

/// What this reconcile's pod actions came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing was attempted (waiting for the watch): keep the failure condition as it was.
    NotActed,
    /// Nothing more is done for it: it is being deleted. As the ReplicaSet controller's
    /// `calculateStatus` with no error from `manageReplicas` (which it skips for a ReplicaSet
    /// being deleted), no failure is reported.
    Stopped,
    /// Creates wait this long more, after its pods failed: the failure is reported.
    Held(Failure, std::time::Duration),
    Succeeded,
    Failed(Failure),
}

/// The status for the pods observed, keeping the condition timestamps of `previous` (the
/// freshest status known) that did not change.
pub fn status(
    ps: &PodSet,
    previous: Option<&PodSetStatus>,
    pods: &[Arc<CachedPod>],
    outcome: &Outcome,
    now: Timestamp,
) -> PodSetStatus {
    let previous = previous.cloned().unwrap_or_default();
    let mut pod_names: Vec<String> = pods
        .iter()
        .filter(|p| p.is_active())
        .map(|p| p.name.to_string())
        .collect();
    pod_names.sort();
    let available = i32::try_from(pod_names.len()).unwrap_or(i32::MAX);
    let ready = pods.iter().filter(|p| p.is_active() && p.ready).count();
    let generation = ps.meta().generation;
    let replicas = ps.spec.replicas;
    let available_condition = Desired {
        type_: CONDITION_AVAILABLE,
        status: available >= replicas,
        reason: if available >= replicas {
            "AllReplicasAvailable"
        } else {
            "ReplicasMissing"
        },
        message: format!("{available} of {replicas} pods available"),
    };
    let failure_condition = match outcome {
        Outcome::Failed(f) | Outcome::Held(f, _) => Some(Desired {
            type_: CONDITION_REPLICA_FAILURE,
            status: true,
            reason: f.reason,
            message: f.message.clone(),
        }),
        Outcome::Succeeded | Outcome::Stopped => Some(no_failure()),
        Outcome::NotActed => None,
    };
    let mut conds = vec![conditions::condition(
        &previous.conditions,
        available_condition,
        generation,
        now,
    )];
    match failure_condition {
        Some(want) => conds.push(conditions::condition(
            &previous.conditions,
            want,
            generation,
            now,
        )),
        None => conds.push(
            conditions::find(&previous.conditions, CONDITION_REPLICA_FAILURE)
                .cloned()
                .unwrap_or_else(|| conditions::condition(&[], no_failure(), generation, now)),
        ),
    }
    if let Some(want) = health::pods_healthy(&previous.conditions, pods) {
        conds.push(conditions::condition(
            &previous.conditions,
            want,
            generation,
            now,
        ));
    }
    let ready = i32::try_from(ready).unwrap_or(i32::MAX);
    let progress = progress(&conds, replicas, available, ready);
    PodSetStatus {
        pod_names,
        available_replicas: available,
        ready_replicas: ready,
        observed_generation: generation,
        selector: Some(selector(&ps.name_any())),
        conditions: kstatus::summarized(conds, &previous.conditions, progress, generation, now),
    }
}

/// Where a PodSet stands for kstatus: Ready once exactly the wanted pods run and are Ready;
/// Stalled while its creates or deletes fail (a quota, a webhook) or its pods cannot start
/// (the scheduler's or kubelet's reason); Reconciling while it scales or its pods get ready.
fn progress(own: &[Condition], replicas: i32, available: i32, ready: i32) -> Progress {
    let failing = conditions::find(own, CONDITION_REPLICA_FAILURE).filter(|c| c.status == "True");
    let troubled =
        conditions::find(own, health::CONDITION_PODS_HEALTHY).filter(|c| c.status == "False");
    if let Some(c) = failing.or(troubled) {
        return Progress::Stalled(c.reason.clone(), c.message.clone());
    }
    let (reason, message) = match available.cmp(&replicas) {
        Ordering::Less => (
            "ScalingUp",
            format!("{available} of {replicas} pods available"),
        ),
        Ordering::Greater => (
            "ScalingDown",
            format!("{available} pods for {replicas} wanted"),
        ),
        Ordering::Equal if ready < replicas => {
            ("PodsNotReady", format!("{ready} of {replicas} pods ready"))
        }
        Ordering::Equal => {
            let message = format!("{ready} of {replicas} pods ready");
            return Progress::Ready("AllPodsReady".into(), message);
        }
    };
    Progress::Reconciling(reason.into(), message)
}

fn no_failure() -> Desired<'static> {
    Desired {
        type_: CONDITION_REPLICA_FAILURE,
        status: false,
        reason: "NoFailure",
        message: "the last pod creates and deletes succeeded".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::fixtures::{arcs, pod, podset};

    #[test]
    fn status_names_available_pods_sorted_with_conditions() {
        let ps = podset(3);
        let mut gone = pod("c-gone");
        gone.terminating = true;
        let mut starting = pod("b");
        starting.ready = false;
        let pods = arcs(vec![starting, pod("a"), gone]);
        let now = Timestamp::from_second(1_000).unwrap();
        let s = status(&ps, ps.status.as_ref(), &pods, &Outcome::Succeeded, now);
        assert_eq!(s.pod_names, ["a", "b"]);
        assert_eq!(s.available_replicas, 2);
        assert_eq!(
            s.ready_replicas, 1,
            "a terminating pod's readiness counts for nothing"
        );
        assert_eq!(s.observed_generation, Some(3));
        assert_eq!(s.selector.as_deref(), Some("app=web,version=v0.1"));
        let available = conditions::find(&s.conditions, CONDITION_AVAILABLE).unwrap();
        assert_eq!(
            (available.status.as_str(), available.reason.as_str()),
            ("False", "ReplicasMissing")
        );
        assert_eq!(available.message, "2 of 3 pods available");
        let failure = conditions::find(&s.conditions, CONDITION_REPLICA_FAILURE).unwrap();
        assert_eq!(failure.status, "False");
    }

    #[test]
    fn status_is_stable_when_nothing_changed() {
        let mut ps = podset(2);
        let pods = arcs(vec![pod("a"), pod("b")]);
        let first = status(
            &ps,
            ps.status.as_ref(),
            &pods,
            &Outcome::Succeeded,
            Timestamp::from_second(1_000).unwrap(),
        );
        ps.status = Some(first.clone());
        let later = Timestamp::from_second(9_000).unwrap();
        assert_eq!(
            status(&ps, ps.status.as_ref(), &pods, &Outcome::Succeeded, later),
            first
        );
        assert_eq!(
            status(&ps, ps.status.as_ref(), &pods, &Outcome::NotActed, later),
            first
        );
    }

    #[test]
    fn failure_is_reported_and_kept_until_an_action_succeeds() {
        let mut ps = podset(2);
        let failure = Failure {
            reason: "FailedCreate",
            message: "pods \"web-pod\" is forbidden: exceeded quota".into(),
        };
        let t = Timestamp::from_second(1_000).unwrap();
        let failed = status(&ps, ps.status.as_ref(), &[], &Outcome::Failed(failure), t);
        let cond = conditions::find(&failed.conditions, CONDITION_REPLICA_FAILURE)
            .unwrap()
            .clone();
        assert_eq!(
            (cond.status.as_str(), cond.reason.as_str()),
            ("True", "FailedCreate")
        );
        assert!(cond.message.contains("exceeded quota"));
        ps.status = Some(failed);
        let waiting = status(&ps, ps.status.as_ref(), &[], &Outcome::NotActed, t);
        assert_eq!(
            conditions::find(&waiting.conditions, CONDITION_REPLICA_FAILURE),
            Some(&cond)
        );
        for outcome in [Outcome::Succeeded, Outcome::Stopped] {
            let recovered = status(&ps, ps.status.as_ref(), &[], &outcome, t);
            let failure = conditions::find(&recovered.conditions, CONDITION_REPLICA_FAILURE);
            assert_eq!(failure.unwrap().status, "False", "{outcome:?}");
        }
    }
}
