//! Which pods a scale-down deletes first: the ReplicaSet controller's order
//! (`ActivePodsWithRanks`), without the logarithmic bucketing of ages that 1.22 turned on.

use std::cmp::Reverse;
use std::collections::HashMap;
use std::sync::Arc;

use crate::pod::CachedPod;

/// The `n` pods to delete first, ranked as the ReplicaSet controller ranks them.
pub fn victims(mut active: Vec<Arc<CachedPod>>, n: usize) -> Vec<Arc<CachedPod>> {
    // As upstream's `getPodsRankedByRelatedPodsOnSameNode`: a pod sharing its node with more
    // of its owner's active pods goes first, spreading the survivors across nodes.
    let mut on_node: HashMap<Option<Arc<str>>, usize> = HashMap::new();
    for p in &active {
        *on_node.entry(p.node_name.clone()).or_default() += 1;
    }
    active.sort_by_cached_key(|p| deletion_rank(p, on_node[&p.node_name]));
    active.truncate(n);
    active
}

/// Lower sorts first, so is deleted first: unscheduled before scheduled, Pending before
/// Unknown before Running, not ready before ready, lower pod-deletion-cost first, more pods on
/// the same node first, ready for less time first, more restarts (of the most restarted
/// container) first, newer first. An unknown ready or creation time sorts first, as upstream's
/// `afterOrZero`.
fn deletion_rank(p: &CachedPod, on_same_node: usize) -> impl Ord + use<> {
    (
        p.node_name.is_some(),
        p.phase,
        p.ready,
        p.deletion_cost,
        Reverse(on_same_node),
        p.ready_since.filter(|_| p.ready).map(Reverse),
        Reverse(p.restarts),
        p.created.map(Reverse),
        p.name.clone(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::fixtures::{arcs, at, names, pod};
    use crate::pod::Phase;
    use k8s_openapi::api::core::v1::Pod;

    #[test]
    fn ranks_victims_like_the_replicaset_controller() {
        let mut unscheduled = pod("unscheduled");
        unscheduled.node_name = None;
        unscheduled.phase = Phase::Pending;
        let mut pending = pod("pending");
        pending.phase = Phase::Pending;
        let mut unknown = pod("unknown");
        unknown.phase = Phase::Unknown;
        let mut not_ready = pod("not-ready");
        not_ready.ready = false;
        let mut cheap = pod("cheap");
        cheap.deletion_cost = -10;
        let mut recently_ready = pod("recently-ready");
        recently_ready.ready_since = at(200);
        let mut restarted = pod("restarted");
        restarted.restarts = 4;
        let mut newer = pod("newer");
        newer.created = at(60);
        let mut precious = pod("precious");
        precious.deletion_cost = 10;
        let old = pod("old");
        let all = vec![
            old,
            precious,
            newer,
            restarted,
            recently_ready,
            cheap,
            not_ready,
            unknown,
            pending,
            unscheduled,
        ];
        let ranked = victims(arcs(all.clone()), all.len());
        assert_eq!(
            names(&ranked),
            [
                "unscheduled",
                "pending",
                "unknown",
                "not-ready",
                "cheap",
                "recently-ready",
                "restarted",
                "newer",
                "old",
                "precious"
            ]
        );
        assert_eq!(names(&victims(arcs(all), 2)), ["unscheduled", "pending"]);
    }

    /// The parts of upstream's `ActivePodsWithRanks` order beyond the basic keys.
    #[test]
    fn ranks_doubled_up_pods_and_empty_times_as_upstream() {
        let mut alone = pod("a-alone");
        alone.node_name = Some("n2".into());
        let pods = arcs(vec![alone, pod("b1"), pod("b2")]);
        assert_ne!(
            names(&victims(pods, 1)),
            ["a-alone"],
            "a pod sharing its node with more of its PodSet's pods goes first"
        );
        let mut no_time = pod("y-no-ready-time");
        no_time.ready_since = None;
        let pods = arcs(vec![pod("x"), no_time]);
        assert_eq!(
            names(&victims(pods, 1)),
            ["y-no-ready-time"],
            "ready for an unknown time goes first"
        );
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "status": {"containerStatuses": [
                {"name": "a", "image": "i", "imageID": "", "ready": true, "restartCount": 3},
                {"name": "b", "image": "i", "imageID": "", "ready": true, "restartCount": 3}
            ]}
        }))
        .unwrap();
        assert_eq!(
            CachedPod::from_pod(&pod).restarts,
            3,
            "ranked by the most restarted container"
        );
    }
}
