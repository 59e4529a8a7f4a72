//! The At reconcile's tests: the exact requests it sends, against a scripted API.

use super::*;
use crate::api::AtPhase;
use crate::controller::context::status_patch;
use crate::controller::fixtures::{Answer, Sent, scripted_context};
use crate::plan::at::REASON_STARTED;
use http::Method;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::{Value, json};

/// Every field of a full status is in the patch of an empty one, as a null.
#[test]
fn an_exact_patch_names_every_status_field() {
    let full = AtStatus {
        phase: Some(AtPhase::Done),
        pod_name: Some("p".into()),
        pod_uid: Some("u".into()),
        start_time: Some(Time(Timestamp::UNIX_EPOCH)),
        completion_time: Some(Time(Timestamp::UNIX_EPOCH)),
        succeeded: Some(true),
        observed_generation: Some(1),
        conditions: vec![Condition {
            type_: "Completed".into(),
            status: "False".into(),
            reason: REASON_STARTED.into(),
            message: "m".into(),
            observed_generation: None,
            last_transition_time: Time(Timestamp::UNIX_EPOCH),
        }],
    };
    let keys = |v: serde_json::Value| {
        let mut keys: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        keys
    };
    let exact = |status: &AtStatus| status_patch("1", status)["status"].clone();
    let empty = exact(&AtStatus::default());
    assert!(empty.as_object().unwrap().values().all(|v| v.is_null()));
    assert_eq!(keys(exact(&full)), keys(empty));
    assert_eq!(exact(&full), serde_json::to_value(&full).unwrap());
}

const STATUS: &str = "/apis/cnat.programming-kubernetes.info/v1beta1/namespaces/ns/ats/job/status";
const PODS: &str = "/api/v1/namespaces/ns/pods";
const POD: &str = "/api/v1/namespaces/ns/pods/job-pod";

/// At `ns/job`, due long ago and never reconciled, read at resourceVersion 7 (generation 1).
fn due_at() -> At {
    let mut at = crate::plan::fixtures::an_at("job", "2020-01-01T00:00:00Z");
    at.metadata.resource_version = Some("7".into());
    at
}

/// The At as the API server returns it after a status patch: the patch applied, at
/// resourceVersion 8.
fn patched(sent: &Sent) -> Answer {
    let mut status = sent.body["status"].clone();
    if let Some(fields) = status.as_object_mut() {
        fields.retain(|_, v| !v.is_null());
    }
    let mut at = serde_json::to_value(due_at()).unwrap();
    at["status"] = status;
    at["metadata"]["resourceVersion"] = "8".into();
    Answer::Reply(200, at)
}

/// The pod a create sent, as the API server returns it: with its UID.
fn created(sent: &Sent) -> Value {
    let mut pod = sent.body.clone();
    pod["metadata"]["uid"] = "pod-uid".into();
    pod
}

/// The pod as the API server answers its release: ungated.
fn released() -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "job-pod", "uid": "pod-uid"}})
}

/// Status patches succeed, pods are answered by `pods`.
fn script(
    pods: impl Fn(&Sent) -> Answer + Send + Sync + 'static,
) -> impl Fn(&Sent, &[Sent]) -> Answer + Send + Sync + 'static {
    move |sent, _| match () {
        _ if sent.is(&Method::PATCH, STATUS) => patched(sent),
        _ if sent.is(&Method::POST, PODS) => pods(sent),
        _ => Answer::status(404, "NotFound"),
    }
}

/// The status patches and pod creates, in order: ("status", rv, phase, podName) or
/// ("create", name).
fn writes(log: &[Sent]) -> Vec<Vec<Value>> {
    log.iter()
        .filter_map(|s| {
            if s.is(&Method::PATCH, STATUS) {
                let (meta, status) = (&s.body["metadata"], &s.body["status"]);
                let fields = [
                    &meta["resourceVersion"],
                    &status["phase"],
                    &status["podName"],
                ];
                Some([vec!["status".into()], fields.map(Value::clone).to_vec()].concat())
            } else if s.is(&Method::POST, PODS) {
                Some(vec!["create".into(), s.body["metadata"]["name"].clone()])
            } else {
                None
            }
        })
        .collect()
}

fn status(rv: &str, phase: &str, pod: Value) -> Vec<Value> {
    vec!["status".into(), rv.into(), phase.into(), pod]
}

async fn reconcile_due(
    pods: impl Fn(&Sent) -> Answer + Send + Sync + 'static,
) -> (Result<Action>, Vec<Vec<Value>>) {
    let (ctx, log) = scripted_context(script(pods));
    let result = reconcile(Arc::new(due_at()), ctx).await;
    let writes = writes(&log.lock());
    (result, writes)
}

/// The pod is created first, gated: it is what a due At waits for. Then RUNNING, the pod's
/// name and UID are recorded under the resourceVersion the pod was made from.
#[tokio::test]
async fn a_due_at_creates_its_pod_then_records_it_running() {
    let (result, writes) = reconcile_due(|sent| Answer::Reply(201, created(sent))).await;
    result.unwrap();
    assert_eq!(
        writes,
        [
            vec!["create".into(), "job-pod".into()],
            status("7", "RUNNING", "job-pod".into()),
        ],
        "{writes:#?}"
    );
}

/// A stale copy (the At changed since it was read: here someone made it DONE) makes a
/// gated pod, but is refused the record: the pod is never released.
#[tokio::test]
async fn a_stale_at_never_releases_the_pod_it_made() {
    let (ctx, log) = scripted_context(|sent, _| match sent.method {
        Method::PATCH => Answer::status(409, "Conflict"),
        Method::GET if sent.is(&Method::GET, ATS) => {
            let mut done = serde_json::to_value(due_at()).unwrap();
            done["status"] = serde_json::json!({"phase": "DONE"});
            listed(done)
        }
        _ if sent.is(&Method::POST, PODS) => Answer::Reply(201, created(sent)),
        _ => Answer::status(404, "NotFound"),
    });
    reconcile(Arc::new(due_at()), ctx).await.unwrap();
    let log = log.lock();
    assert_eq!(
        writes(&log),
        [
            vec!["create".into(), "job-pod".into()],
            status("7", "RUNNING", "job-pod".into()),
        ]
    );
    assert!(!log.iter().any(|s| s.is(&Method::PATCH, POD)), "released");
}

/// A create whose reply was lost may have made the pod: nothing is recorded, and the pod,
/// gated, cannot run; the next reconcile finds it and deletes it (see `plan::at`).
#[tokio::test]
async fn a_create_whose_reply_was_lost_records_nothing() {
    let (result, writes) = reconcile_due(|_| Answer::Lost).await;
    assert!(result.is_err());
    assert_eq!(writes, [vec![Value::from("create"), "job-pod".into()]]);
}

/// A create the API server refused made nothing: the At stays PENDING and says why.
#[tokio::test]
async fn a_refused_create_leaves_the_at_pending() {
    let (result, writes) = reconcile_due(|_| Answer::status(403, "Forbidden")).await;
    result.unwrap();
    assert_eq!(
        writes,
        [
            vec!["create".into(), "job-pod".into()],
            status("7", "PENDING", Value::Null),
        ]
    );
}

/// The pod of the At's name as a live read shows it: `stray-uid`, at version 41.
fn live_stray(gated: bool) -> Value {
    let gates = if gated {
        json!([{"name": plan::GATE}])
    } else {
        Value::Null
    };
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "job-pod", "namespace": "ns", "uid": "stray-uid",
            "resourceVersion": "41"},
        "spec": {"containers": [{"name": "command", "image": "busybox"}],
            "schedulingGates": gates},
        "status": {"phase": if gated { "Pending" } else { "Running" }}})
}

/// Carries out the decision about a gated pod of this At that the reconcile did not make,
/// with the live read showing it `gated` or not: what was sent.
async fn discard_stray(gated: bool) -> Vec<Sent> {
    let (ctx, log) = scripted_context(move |sent, _| match () {
        _ if sent.is(&Method::PATCH, STATUS) => patched(sent),
        _ if sent.is(&Method::POST, PODS) => Answer::Reply(201, created(sent)),
        _ if sent.is(&Method::GET, POD) => Answer::Reply(200, live_stray(gated)),
        _ if sent.is(&Method::DELETE, POD) => Answer::Reply(200, sent.body.clone()),
        _ if sent.is(&Method::PATCH, POD) => Answer::Reply(200, released()),
        _ => Answer::status(404, "NotFound"),
    });
    let stray = CachedPod {
        uid: "stray-uid".into(),
        gate: Some(0),
        phase: crate::pod::Phase::Pending,
        ..crate::plan::fixtures::pod("job-pod")
    };
    let at = due_at();
    let seen = Seen {
        at: &at,
        pod: Some(&stray),
        gone: false,
        in_doubt: false,
        now: jiff::Timestamp::now(),
    };
    carry_out(&seen, &ctx).await.unwrap();
    log.lock().clone()
}

/// A gated pod of this At that the reconcile did not make is deleted, by its UID and the
/// version read live, before the At's pod is made again.
#[tokio::test]
async fn a_gated_pod_found_is_deleted_before_the_pod_is_made_again() {
    let log = discard_stray(true).await;
    let delete = log.iter().position(|s| s.is(&Method::DELETE, POD));
    let create = log.iter().position(|s| s.is(&Method::POST, PODS));
    assert!(delete.is_some() && delete < create, "{log:#?}");
    let delete = &log[delete.unwrap()];
    assert_eq!(delete.body["preconditions"]["uid"], "stray-uid");
    assert_eq!(delete.body["preconditions"]["resourceVersion"], "41");
}

/// One that someone else released since the cache showed it, and runs: neither deleted
/// nor made again.
#[tokio::test]
async fn a_pod_released_by_someone_else_is_not_deleted() {
    let log = discard_stray(false).await;
    let written = |m: &Method, p: &str| log.iter().any(|s| s.is(m, p));
    assert!(
        !written(&Method::DELETE, POD) && !written(&Method::POST, PODS),
        "{log:#?}"
    );
}

const ATS: &str = "/apis/cnat.programming-kubernetes.info/v1beta1/namespaces/ns/ats";

/// A list of `at` alone, as a read back by name answers.
fn listed(at: Value) -> Answer {
    Answer::Reply(
        200,
        serde_json::json!({"apiVersion": "cnat.programming-kubernetes.info/v1beta1",
            "kind": "AtList", "metadata": {"resourceVersion": "9"}, "items": [at]}),
    )
}

mod recorded;
