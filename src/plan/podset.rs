//! What a PodSet needs, decided without I/O: how many pods to create, which to delete and in
//! what order, the status to report, and the pod to create.

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};

use crate::api::decoded::Reported;
use crate::api::{MANAGED_BY_LABEL, MANAGED_BY_VALUE, PodSet, PodSetStatus};
use crate::cache::CachedPod;
use crate::conditions::{self, Want};
use crate::plan::health;

/// The `version` label of every PodSet pod, as in the seeds.
pub const POD_VERSION: &str = "v0.1";

/// Finished (Succeeded/Failed) pods kept per PodSet for `kubectl logs`; older ones are deleted
/// so that replaced pods do not pile up.
pub const MAX_FINISHED_PODS: usize = 3;

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

/// The change a PodSet needs.
#[derive(Debug, PartialEq)]
pub enum Plan {
    Create(usize),
    Delete(Vec<Arc<CachedPod>>),
    Steady,
}

/// Compares the available pods with `replicas`.
pub fn plan(replicas: i32, pods: &[Arc<CachedPod>]) -> Plan {
    let active: Vec<_> = pods.iter().filter(|p| p.is_active()).cloned().collect();
    let want = usize::try_from(replicas.max(0)).unwrap_or(0);
    match want.cmp(&active.len()) {
        std::cmp::Ordering::Greater => Plan::Create(want - active.len()),
        std::cmp::Ordering::Less => {
            let excess = active.len() - want;
            Plan::Delete(super::rank::victims(active, excess))
        }
        std::cmp::Ordering::Equal => Plan::Steady,
    }
}

/// Finished pods beyond [`MAX_FINISHED_PODS`], oldest first.
pub fn finished_excess(pods: &[Arc<CachedPod>]) -> Vec<Arc<CachedPod>> {
    let mut finished: Vec<_> = pods
        .iter()
        .filter(|p| p.phase.finished() && !p.terminating)
        .cloned()
        .collect();
    finished.sort_by_key(|p| (Reverse(p.created), p.name.clone()));
    finished.split_off(finished.len().min(MAX_FINISHED_PODS))
}

/// Create batch sizes: 1, 2, 4, ... summing to `total`. Stopping at the first batch with a
/// failure makes a systematic error (a quota, say) cost one request instead of `total`.
pub fn slow_start_batches(total: usize) -> Vec<usize> {
    let mut batches = Vec::new();
    let (mut left, mut size) = (total, 1);
    while left > 0 {
        let batch = size.min(left);
        batches.push(batch);
        left -= batch;
        size *= 2;
    }
    batches
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
    Succeeded,
    Failed(Failure),
}

/// The label selector of a PodSet's pods.
pub fn selector(name: &str) -> String {
    format!("app={name},version={POD_VERSION}")
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
    let generation = ps.meta().generation;
    let replicas = ps.spec.replicas;
    let available_condition = Want {
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
        Outcome::Failed(f) => Some(Want {
            type_: CONDITION_REPLICA_FAILURE,
            status: true,
            reason: f.reason,
            message: f.message.clone(),
        }),
        Outcome::Succeeded => Some(no_failure()),
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
    PodSetStatus {
        pod_names,
        available_replicas: available,
        observed_generation: generation,
        selector: Some(selector(&ps.name_any())),
        conditions: conds,
    }
}

fn no_failure() -> Want<'static> {
    Want {
        type_: CONDITION_REPLICA_FAILURE,
        status: false,
        reason: "NoFailure",
        message: "the last pod creates and deletes succeeded".into(),
    }
}

/// The pod to create for `ps`: its template (or busybox `sleep 3600`), the PodSet's labels,
/// and a controller ownerReference that blocks the owner's foreground deletion. Its
/// `generateName` is the prefix of the name the controller gives each pod ([`super::name`]).
pub fn pod_for(ps: &PodSet) -> Pod {
    let name = ps.name_any();
    let template = ps.spec.template.as_deref().cloned().unwrap_or_default();
    let template_meta = template.metadata.unwrap_or_default();
    let mut labels: BTreeMap<String, String> = template_meta.labels.unwrap_or_default();
    labels.insert("app".into(), name.clone());
    labels.insert("version".into(), POD_VERSION.into());
    labels.insert(MANAGED_BY_LABEL.into(), MANAGED_BY_VALUE.into());
    let owner = super::controller_ref(ps);
    let mut spec = template.spec.unwrap_or_else(default_pod_spec);
    // As a ReplicaSet requires: a PodSet replaces pods that end, so containers restart in place.
    spec.restart_policy = Some("Always".into());
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{name}-pod")),
            namespace: ps.namespace(),
            labels: Some(labels),
            annotations: template_meta.annotations,
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// The seeds' busybox pod under the restricted pod security profile.
fn default_pod_spec() -> PodSpec {
    PodSpec {
        automount_service_account_token: Some(false),
        security_context: Some(super::restricted_pod_security_context()),
        containers: vec![Container {
            name: "busybox".into(),
            image: Some("busybox".into()),
            command: Some(vec!["sleep".into(), "3600".into()]),
            security_context: Some(super::restricted_container_security_context()),
            ..Default::default()
        }],
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Phase;
    use crate::plan::fixtures::{self, arcs, at, names, pod};
    use k8s_openapi::api::core::v1::PodTemplateSpec;

    fn podset(replicas: i32) -> PodSet {
        let mut ps = fixtures::podset(replicas);
        ps.metadata.generation = Some(3);
        ps
    }

    #[test]
    fn counts_only_active_pods() {
        let mut terminating = pod("t");
        terminating.terminating = true;
        let mut done = pod("d");
        done.phase = Phase::Succeeded;
        let mut failed = pod("f");
        failed.phase = Phase::Failed;
        let mut pending = pod("p");
        pending.phase = Phase::Pending;
        let pods = arcs(vec![pod("a"), pending, terminating, done, failed]);
        assert_eq!(plan(5, &pods), Plan::Create(3));
        assert_eq!(plan(2, &pods), Plan::Steady);
        match plan(1, &pods) {
            Plan::Delete(v) => assert_eq!(
                names(&v),
                ["p"],
                "the Pending pod goes before the Running one"
            ),
            other => panic!("expected a delete, got {other:?}"),
        }
        assert_eq!(plan(3, &[]), Plan::Create(3));
    }

    /// As upstream's `FilterActivePods`: a pod whose node stopped reporting still counts.
    #[test]
    fn pods_in_phase_unknown_count_as_active() {
        let mut unknown = pod("u");
        unknown.phase = Phase::Unknown;
        assert_eq!(plan(2, &arcs(vec![pod("a"), unknown])), Plan::Steady);
    }

    #[test]
    fn slow_start_doubles_and_sums_to_total() {
        assert_eq!(slow_start_batches(0), Vec::<usize>::new());
        assert_eq!(slow_start_batches(1), [1]);
        assert_eq!(slow_start_batches(5), [1, 2, 2]);
        assert_eq!(slow_start_batches(10), [1, 2, 4, 3]);
        assert_eq!(slow_start_batches(1000).iter().sum::<usize>(), 1000);
    }

    #[test]
    fn keeps_only_the_newest_finished_pods() {
        let mut pods = Vec::new();
        for (i, name) in ["f1", "f2", "f3", "f4", "f5"].iter().enumerate() {
            let mut p = pod(name);
            p.phase = if i % 2 == 0 {
                Phase::Failed
            } else {
                Phase::Succeeded
            };
            p.created = at(i as i64);
            pods.push(p);
        }
        pods.push(pod("running"));
        let excess = finished_excess(&arcs(pods));
        assert_eq!(names(&excess), ["f2", "f1"]);
    }

    #[test]
    fn status_names_available_pods_sorted_with_conditions() {
        let ps = podset(3);
        let mut gone = pod("c-gone");
        gone.terminating = true;
        let pods = arcs(vec![pod("b"), pod("a"), gone]);
        let now = Timestamp::from_second(1_000).unwrap();
        let s = status(&ps, ps.status.as_ref(), &pods, &Outcome::Succeeded, now);
        assert_eq!(s.pod_names, ["a", "b"]);
        assert_eq!(s.available_replicas, 2);
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
        let recovered = status(&ps, ps.status.as_ref(), &[], &Outcome::Succeeded, t);
        assert_eq!(
            conditions::find(&recovered.conditions, CONDITION_REPLICA_FAILURE)
                .unwrap()
                .status,
            "False"
        );
    }

    #[test]
    fn default_pod_is_the_seeds_busybox_restricted() {
        let p = pod_for(&podset(1));
        assert_eq!(p.metadata.generate_name.as_deref(), Some("web-pod"));
        assert_eq!(p.metadata.namespace.as_deref(), Some("ns"));
        let labels = p.metadata.labels.unwrap();
        assert_eq!(labels["app"], "web");
        assert_eq!(labels["version"], "v0.1");
        assert_eq!(labels[MANAGED_BY_LABEL], MANAGED_BY_VALUE);
        let owner = &p.metadata.owner_references.unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("PodSet", "web", "ps-uid")
        );
        assert_eq!(
            (owner.controller, owner.block_owner_deletion),
            (Some(true), Some(true))
        );
        let spec = p.spec.unwrap();
        let c = &spec.containers[0];
        assert_eq!(
            (c.name.as_str(), c.image.as_deref()),
            ("busybox", Some("busybox"))
        );
        assert_eq!(c.command.as_deref().unwrap(), ["sleep", "3600"]);
        let sc = c.security_context.as_ref().unwrap();
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(
            sc.capabilities.as_ref().unwrap().drop.as_deref().unwrap(),
            ["ALL"]
        );
        assert_eq!(sc.run_as_non_root, Some(true));
        assert!(
            sc.run_as_user.is_some_and(|u| u != 0),
            "busybox needs a non-root uid to start"
        );
        assert_eq!(sc.seccomp_profile.as_ref().unwrap().type_, "RuntimeDefault");
        assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
    }

    #[test]
    fn template_is_used_with_enforced_labels() {
        let mut ps = podset(1);
        let mut template: PodTemplateSpec = serde_json::from_value(serde_json::json!({
            "metadata": {"labels": {"tier": "web", "app": "spoofed"}, "annotations": {"a": "b"}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "nginx", "image": "nginx:1.25"}]}
        }))
        .unwrap();
        template.metadata.as_mut().unwrap().name = Some("ignored".into());
        ps.spec.template = Some(Box::new(template));
        let p = pod_for(&ps);
        let labels = p.metadata.labels.unwrap();
        assert_eq!(
            (labels["tier"].as_str(), labels["app"].as_str()),
            ("web", "web")
        );
        assert_eq!(p.metadata.annotations.unwrap()["a"], "b");
        assert_eq!(p.metadata.name, None);
        let spec = p.spec.unwrap();
        assert_eq!(spec.containers[0].image.as_deref(), Some("nginx:1.25"));
        assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
    }
}
