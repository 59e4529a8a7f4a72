//! Pods and PodSets for the plan and controller tests.

use std::sync::Arc;

use jiff::Timestamp;

use crate::api::{At, AtSpec, PodSet, PodSetSpec};
use crate::pod::{CachedPod, Phase, Stamp};

pub fn at(s: i64) -> Option<Stamp> {
    Some(Timestamp::from_second(s).unwrap().into())
}

pub fn pod(name: &str) -> CachedPod {
    CachedPod {
        name: name.into(),
        uid: format!("uid-{name}").as_str().into(),
        home: crate::pod::Home::shared("ns", None),
        phase: Phase::Running,
        ready: true,
        ready_since: at(100),
        node_name: Some("node".into()),
        terminating: false,
        gate: None,
        created: at(50),
        deletion_cost: 0,
        restarts: 0,
        notes: None,
    }
}

pub fn arcs(pods: Vec<CachedPod>) -> Vec<Arc<CachedPod>> {
    pods.into_iter().map(Arc::new).collect()
}

pub fn names(pods: &[Arc<CachedPod>]) -> Vec<&str> {
    pods.iter().map(|p| &*p.name).collect()
}

/// PodSet `ns/web` with UID `ps-uid`, generation 3 and `replicas`.
pub fn podset(replicas: i32) -> PodSet {
    let mut ps = PodSet::new(
        "web",
        PodSetSpec {
            replicas,
            template: None,
        },
    );
    ps.metadata.namespace = Some("ns".into());
    ps.metadata.uid = Some("ps-uid".into());
    ps.metadata.generation = Some(3);
    ps
}

/// At `ns/<name>` (UID `at-uid`, generation 1) running `echo YAY` at `schedule`.
pub fn an_at(name: &str, schedule: &str) -> At {
    let mut at = At::new(name, AtSpec::shell(schedule, "echo YAY"));
    at.metadata.namespace = Some("ns".into());
    at.metadata.uid = Some("at-uid".into());
    at.metadata.generation = Some(1);
    at
}
