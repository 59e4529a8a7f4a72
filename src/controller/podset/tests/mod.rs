//! The PodSet reconcile's tests against a scripted API: a pod seen between the reads, and
//! creates and deletes whose replies were lost. What it reads before acting: `reads.rs`.

use super::*;
use crate::cache::PodCache;
use crate::controller::fixtures::{Answer, Sent, podset, scripted_context};
use crate::controller::memory::Memory;
use http::Method;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use std::cell::Cell;

/// A Pending pod of PodSet `ns/web`.
fn owned_pod(name: &str, uid: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": uid,
            "ownerReferences": [{"apiVersion": "app.example.com/v1beta1", "kind": "PodSet",
                "name": "web", "uid": "ps-uid", "controller": true}]},
        "status": {"phase": "Pending"}
    }))
    .unwrap()
}

/// The watch adds the one expected pod before a reconcile takes its snapshot, or while it
/// does (whichever read comes first, the event lands right after it): either way the
/// reconcile acts on a snapshot that holds the pod, or waits. Read the other way round, the
/// pods before the expectations, the second case would create the pod again.
#[test]
fn a_pod_seen_between_the_reads_is_not_created_again() {
    for land_first in [true, false] {
        let (cache, expectations, now) = (PodCache::default(), Memory::default(), Instant::now());
        let write = crate::expectations::Write::Create("web-pod1".into());
        expectations.expect("ps-uid", "ns", [&write], now);
        let pod = owned_pod("web-pod1", "p1");
        let landed = Cell::new(false);
        let land = || {
            if !landed.replace(true) {
                for t in cache.apply(kube::runtime::watcher::Event::Apply(pod.clone())) {
                    expectations.observe(&t, now);
                }
            }
        };
        if land_first {
            land();
        }
        let (readiness, pods) = snapshot(
            || {
                let r = expectations.readiness("ps-uid", now);
                land();
                r
            },
            || {
                let p = cache.owned_by("ns", "ps-uid");
                land();
                p
            },
        );
        let step = plan::decide(&Seen {
            replicas: 1,
            deleting: false,
            gone: false,
            in_doubt: false,
            readiness: &readiness,
            pods: &pods,
            held: None,
        });
        if land_first {
            assert_eq!(readiness, Readiness::Satisfied);
            let steady = Step::Act {
                plan: Plan::Steady,
                read_first: false,
                trim: vec![],
            };
            assert_eq!(step, steady, "acted on a snapshot that lacks the pod");
        } else {
            assert!(matches!(readiness, Readiness::Waiting(_)), "{readiness:?}");
            assert_eq!(
                step,
                Step::SendAgain { read_first: false },
                "acted before the watch showed the pod"
            );
        }
    }
}

const PODS: &str = "/api/v1/namespaces/ns/pods";
const STATUS: &str = "/apis/app.example.com/v1beta1/namespaces/ns/podsets/web/status";

const PODSETS: &str = "/apis/app.example.com/v1beta1/namespaces/ns/podsets";

/// What the scripted API answers to anything a test does not script: status patches succeed,
/// the PodSet is there, and nothing else exists.
fn otherwise(sent: &Sent) -> Answer {
    if sent.is(&Method::PATCH, STATUS) {
        Answer::Reply(200, serde_json::to_value(podset()).unwrap())
    } else if sent.is(&Method::GET, PODSETS) {
        Answer::Reply(200, podset_list(json!([podset()])))
    } else {
        Answer::status(404, "NotFound")
    }
}

fn podset_list(items: Value) -> Value {
    json!({"apiVersion": "app.example.com/v1beta1", "kind": "PodSetList",
        "metadata": {"resourceVersion": "9"}, "items": items})
}

/// The names of the pods created, in order.
fn creates(log: &[Sent]) -> Vec<String> {
    log.iter()
        .filter(|s| s.is(&Method::POST, PODS))
        .map(|s| {
            s.body["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .into()
        })
        .collect()
}

async fn reconcile_times(n: usize, ps: &PodSet, ctx: &Arc<Context>) {
    for _ in 0..n {
        let _ = reconcile(Arc::new(ps.clone()), ctx.clone()).await;
    }
}

/// The first create's reply is lost; the reconcile after sends the same pod again, under the
/// same name, and a 409 AlreadyExists, then a read naming the pod, settle it as made: no
/// second pod, and nothing more sent while the watch has yet to show that pod.
#[tokio::test]
async fn a_create_whose_reply_was_lost_is_sent_again_under_its_name_and_made_once() {
    let (ctx, log) = scripted_context(|sent, before| match creates(before).first() {
        None if sent.is(&Method::POST, PODS) => Answer::Lost,
        Some(_) if sent.is(&Method::POST, PODS) => Answer::status(409, "AlreadyExists"),
        Some(first) if sent.is(&Method::GET, &format!("{PODS}/{first}")) => {
            Answer::Reply(200, serde_json::to_value(owned_pod(first, "p1")).unwrap())
        }
        _ => otherwise(sent),
    });
    reconcile_times(3, &podset(), &ctx).await;
    let log = log.lock();
    let sent = creates(&log);
    assert_eq!(sent.len(), 2, "{log:#?}");
    assert_eq!(sent[0], sent[1], "the re-send must name the same pod");
    assert!(sent[0].starts_with("web-pod"), "{}", sent[0]);
    assert!(
        matches!(
            ctx.memory.readiness("ps-uid", Instant::now()),
            Readiness::Waiting(_)
        ),
        "the pod was made, and the watch has not shown it yet"
    );
}

/// The first create's reply is lost; the re-send meets 409 AlreadyExists, and the read that
/// would say whose pod has the name fails. The create is still unsettled: the reconcile
/// failed, says so, and is retried as a failure is (found by the simulation, seed
/// 7357935581167412930: taken for success, the PodSet waited out its expectations).
#[tokio::test]
async fn a_resend_whose_look_up_failed_is_reported_as_a_failure() {
    let (ctx, log) = scripted_context(|sent, before| match creates(before).first() {
        None if sent.is(&Method::POST, PODS) => Answer::Lost,
        Some(_) if sent.is(&Method::POST, PODS) => Answer::status(409, "AlreadyExists"),
        Some(first) if sent.is(&Method::GET, &format!("{PODS}/{first}")) => {
            Answer::status(500, "InternalError")
        }
        _ => otherwise(sent),
    });
    reconcile_times(2, &podset(), &ctx).await;
    let log = log.lock();
    let last_status = log
        .iter()
        .rfind(|s| s.is(&Method::PATCH, STATUS))
        .expect("a status written");
    let conditions = last_status.body["status"]["conditions"].as_array().unwrap();
    let failure = conditions
        .iter()
        .find(|c| c["type"] == "ReplicaFailure")
        .unwrap();
    assert_eq!(failure["status"], "True", "{log:#?}");
    assert!(
        failure["message"]
            .as_str()
            .is_some_and(|m| m.contains("scripted InternalError")),
        "the failed read is not what the status reports: {failure}"
    );
}

/// The first create's reply is lost and the re-send is refused: a refusal now says nothing
/// of the first send, so a GET decides. A pod that is there counts as made; one that is not
/// is made afresh, under a new name.
#[tokio::test]
async fn a_refused_resend_is_decided_by_reading_the_pod() {
    for found in [true, false] {
        let (ctx, log) = scripted_context(move |sent, before| {
            let made = creates(before);
            match made.first() {
                None if sent.is(&Method::POST, PODS) => Answer::Lost,
                Some(_) if sent.is(&Method::POST, PODS) && made.len() == 1 => {
                    Answer::status(403, "Forbidden")
                }
                Some(_) if sent.is(&Method::POST, PODS) => Answer::Reply(201, sent.body.clone()),
                Some(first) if found && sent.is(&Method::GET, &format!("{PODS}/{first}")) => {
                    Answer::Reply(200, serde_json::to_value(owned_pod(first, "p1")).unwrap())
                }
                _ => otherwise(sent),
            }
        });
        reconcile_times(3, &podset(), &ctx).await;
        let log = log.lock();
        let sent = creates(&log);
        let reads: Vec<&Sent> = log
            .iter()
            .filter(|s| s.method == Method::GET && s.path.starts_with(PODS))
            .collect();
        assert_eq!(reads.len(), 1, "found {found}: {log:#?}");
        assert_eq!(reads[0].path, format!("{PODS}/{}", sent[0]));
        if found {
            assert_eq!(sent.len(), 2, "made twice: {log:#?}");
        } else {
            assert_eq!(sent.len(), 3, "never made: {log:#?}");
            assert_ne!(sent[2], sent[0], "a fresh create takes a new name");
        }
    }
}

/// The delete's reply is lost; the reconcile after sends it again, with the same UID
/// precondition (a pod since made under that name is never the one deleted), and a 404
/// settles it.
#[tokio::test]
async fn a_delete_whose_reply_was_lost_is_sent_again_with_its_uid_precondition() {
    let (ctx, log) = scripted_context(|sent, before| {
        let deleted_before = before.iter().any(|s| s.method == Method::DELETE);
        match sent.method {
            Method::DELETE if deleted_before => Answer::status(404, "NotFound"),
            Method::DELETE => Answer::Lost,
            _ => otherwise(sent),
        }
    });
    for (name, uid) in [("web-poda", "pa"), ("web-podb", "pb")] {
        ctx.pods
            .apply(kube::runtime::watcher::Event::Apply(owned_pod(name, uid)));
    }
    reconcile_times(1, &podset(), &ctx).await;
    assert!(
        matches!(
            ctx.memory.readiness("ps-uid", Instant::now()),
            Readiness::Waiting(_)
        ),
        "a delete whose reply was lost may still have been carried out"
    );
    reconcile_times(1, &podset(), &ctx).await;
    let log = log.lock();
    let deletes: Vec<&Sent> = log.iter().filter(|s| s.method == Method::DELETE).collect();
    assert_eq!(deletes.len(), 2, "{log:#?}");
    assert_eq!(deletes[0].path, deletes[1].path);
    let uid = &deletes[0].body["preconditions"]["uid"];
    assert!(uid == "pa" || uid == "pb", "{deletes:#?}");
    assert_eq!(&deletes[1].body["preconditions"]["uid"], uid);
    assert!(creates(&log).is_empty(), "{log:#?}");
    assert_eq!(
        ctx.memory.readiness("ps-uid", Instant::now()),
        Readiness::Satisfied,
        "a 404 settles the delete"
    );
}

mod reads;
