//! The pod cache's tests: what a watch event does to the index, and what it reports.

use super::*;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};

fn pod(uid: &str, owner: Option<&str>, phase: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("pod-{uid}")),
            namespace: Some("ns".into()),
            uid: Some(uid.into()),
            owner_references: owner.map(|o| {
                vec![OwnerReference {
                    api_version: "app.example.com/v1beta1".into(),
                    kind: "PodSet".into(),
                    name: format!("ps-{o}"),
                    uid: o.into(),
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                }]
            }),
            ..Default::default()
        },
        status: Some(k8s_openapi::api::core::v1::PodStatus {
            phase: Some(phase.into()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn changes_of(t: &[PodChange]) -> Vec<(Uid, Change)> {
    t.iter()
        .map(|t| (t.owner.uid.clone(), t.change.clone()))
        .collect()
}

#[test]
fn indexes_pods_by_controlling_owner_only() {
    let cache = PodCache::default();
    cache.apply(Event::Apply(pod("a", Some("o1"), "Pending")));
    cache.apply(Event::Apply(pod("b", Some("o1"), "Running")));
    cache.apply(Event::Apply(pod("c", Some("o2"), "Running")));
    let orphan = cache.apply(Event::Apply(pod("d", None, "Running")));
    assert!(
        orphan.is_empty(),
        "a pod without a controller touches no owner"
    );
    let mut names: Vec<_> = cache
        .owned_by("ns", "o1")
        .iter()
        .map(|p| p.name.to_string())
        .collect();
    names.sort();
    assert_eq!(names, ["pod-a", "pod-b"]);
    assert_eq!(cache.owned_by("ns", "o2").len(), 1);
    assert!(cache.owned_by("ns", "nobody").is_empty());
    assert_eq!(cache.len(), 3);
}

#[test]
fn a_pod_in_another_namespace_is_not_its_controllers() {
    let cache = PodCache::default();
    cache.apply(Event::Apply(pod("a", Some("o"), "Running")));
    let mut forged = pod("f", Some("o"), "Running");
    forged.metadata.namespace = Some("elsewhere".into());
    cache.apply(Event::Apply(forged));
    assert_eq!(cache.owned_by("ns", "o").len(), 1);
    assert_eq!(cache.owned_by("elsewhere", "o").len(), 1);
}

#[test]
fn reports_added_updated_removed() {
    let cache = PodCache::default();
    assert_eq!(
        changes_of(&cache.apply(Event::Apply(pod("a", Some("o"), "Pending")))),
        [("o".into(), Change::Added)]
    );
    assert!(
        cache
            .apply(Event::Apply(pod("a", Some("o"), "Pending")))
            .is_empty(),
        "no change, no touch"
    );
    assert_eq!(
        changes_of(&cache.apply(Event::Apply(pod("a", Some("o"), "Running")))),
        [("o".into(), Change::Updated)]
    );
    let mut terminating = pod("a", Some("o"), "Running");
    terminating.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
    assert_eq!(
        changes_of(&cache.apply(Event::Apply(terminating.clone()))),
        [("o".into(), Change::Removed)]
    );
    assert_eq!(
        changes_of(&cache.apply(Event::Delete(terminating))),
        [("o".into(), Change::Removed)]
    );
    assert!(cache.owned_by("ns", "o").is_empty());
}

/// Issue 45, fault 6: an active pod gone without terminating first may have left the
/// watch by a label edit; a finished one is of no count either way.
#[test]
fn an_active_pod_gone_without_terminating_vanished() {
    let cache = PodCache::default();
    cache.apply(Event::Apply(pod("a", Some("o"), "Running")));
    cache.apply(Event::Apply(pod("b", Some("o"), "Succeeded")));
    assert_eq!(
        changes_of(&cache.apply(Event::Delete(pod("a", Some("o"), "Running")))),
        [("o".into(), Change::Vanished)]
    );
    assert_eq!(
        changes_of(&cache.apply(Event::Delete(pod("b", Some("o"), "Succeeded")))),
        [("o".into(), Change::Removed)]
    );
}

#[test]
fn owner_change_moves_the_pod() {
    let cache = PodCache::default();
    cache.apply(Event::Apply(pod("a", Some("o1"), "Running")));
    let t = cache.apply(Event::Apply(pod("a", Some("o2"), "Running")));
    assert_eq!(
        changes_of(&t),
        [("o1".into(), Change::Removed), ("o2".into(), Change::Added)]
    );
    assert!(cache.owned_by("ns", "o1").is_empty());
    assert_eq!(cache.owned_by("ns", "o2").len(), 1);
}

#[test]
fn relist_swaps_atomically_and_reports_the_difference() {
    let cache = PodCache::default();
    assert!(!cache.is_ready());
    cache.apply(Event::Init);
    cache.apply(Event::InitApply(pod("a", Some("o"), "Running")));
    cache.apply(Event::InitApply(pod("b", Some("o"), "Running")));
    assert!(
        cache.owned_by("ns", "o").is_empty(),
        "nothing visible before InitDone"
    );
    assert_eq!(cache.apply(Event::InitDone).len(), 2);
    assert!(cache.is_ready());
    // A watch gap: b was deleted and c created meanwhile; a is unchanged.
    cache.apply(Event::Init);
    cache.apply(Event::InitApply(pod("a", Some("o"), "Running")));
    cache.apply(Event::InitApply(pod("c", Some("o"), "Pending")));
    let mut t: Vec<_> = cache
        .apply(Event::InitDone)
        .into_iter()
        .map(|t| (t.pod_uid, t.change))
        .collect();
    t.sort_by(|x, y| x.0.cmp(&y.0));
    // b was active and did not terminate in view: it may have left by a label edit.
    assert_eq!(
        t,
        [("b".into(), Change::Vanished), ("c".into(), Change::Added)]
    );
    assert_eq!(cache.owned_by("ns", "o").len(), 2);
}

#[test]
fn reads_what_scale_down_ranking_needs() {
    let mut p = pod("a", Some("o"), "Running");
    p.metadata.annotations = Some(
        [(
            "controller.kubernetes.io/pod-deletion-cost".to_string(),
            "-5".to_string(),
        )]
        .into(),
    );
    p.spec = Some(k8s_openapi::api::core::v1::PodSpec {
        node_name: Some("n1".into()),
        ..Default::default()
    });
    let c = CachedPod::from_pod(&p);
    assert_eq!(c.deletion_cost, -5);
    assert_eq!(c.node_name.as_deref(), Some("n1"));
    assert!(c.is_active());
    assert!(!c.ready);
    assert!(!CachedPod::from_pod(&pod("b", Some("o"), "Succeeded")).is_active());
}
