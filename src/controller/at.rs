//! The At reconcile: carry out the plan's step (create the pod, or read it live when the
//! cache shows none), then write the status if it changed and publish an event per change.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Patch;
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use tracing::{debug, info};

use super::{Context, api_message, publish, retry_after, status_patch_params, timed};
use crate::api::{At, AtPhase, AtStatus};
use crate::at_creates::Sending;
use crate::cache::CachedPod;
use crate::client;
use crate::error::{Error, Result};
use crate::plan::at::{self as plan, Confirmed, Step};
use crate::uid::Uid;
use tokio::time::Instant;

const CONTROLLER: &str = "at";

pub async fn reconcile(at: Arc<At>, ctx: Arc<Context>) -> Result<Action> {
    timed(&ctx, CONTROLLER, reconcile_at(&at, &ctx)).await
}

/// Only decides the delay: the failure is logged once, where the controller reports it.
pub fn error_policy(at: Arc<At>, _error: &Error, ctx: Arc<Context>) -> Action {
    retry_after(at.as_ref(), &ctx)
}

/// What to do after the status is written.
enum Next {
    Then(Action),
    /// Something outside the operator is in the way: try again with a growing delay.
    Retry,
}

/// How often a RUNNING At whose pod the watch does not show (someone took the operator's
/// label off it) reads its pod, since no watch event will tell of its end.
const UNWATCHED_POD_POLL: Duration = Duration::from_secs(15);

async fn reconcile_at(at: &At, ctx: &Context) -> Result<Action> {
    let pod_name = plan::pod_name(at);
    let uid = Uid::from(at.uid().unwrap_or_default().as_str());
    let cached = ctx
        .pods
        .owned_by(
            &at.namespace().unwrap_or_default(),
            &at.uid().unwrap_or_default(),
        )
        .into_iter()
        .find(|p| *p.name == *pod_name);
    let now = ctx.clock.now();
    let mut base = None;
    let (status, next) = match plan::decide(at, cached.as_deref(), now) {
        Step::Wait(status, left) => {
            debug!(
                controller = CONTROLLER,
                namespace = at.namespace(),
                name = at.name_any(),
                phase = "PENDING",
                ?left,
                "waiting for the schedule"
            );
            (status, Next::Then(Action::requeue(left)))
        }
        Step::Record(status) => (status, Next::Then(Action::await_change())),
        Step::Confirm => {
            let live = read_pod(at, ctx)
                .await?
                .filter(|p| controlled_by(at, p))
                .map(|p| CachedPod::from_pod(&p));
            let start_time = status_start(at.status.as_ref());
            let creates = ctx.at_creates.knowledge(&uid, start_time, Instant::now());
            match plan::confirmed(at, live.as_ref(), creates, now) {
                // A pod the watch does not show: no event will tell of its end.
                Confirmed::Status(status)
                    if live.is_some() && status.phase != Some(AtPhase::Done) =>
                {
                    (status, Next::Then(Action::requeue(UNWATCHED_POD_POLL)))
                }
                Confirmed::Status(status) => (status, Next::Then(Action::await_change())),
                Confirmed::Create => start(at, ctx, now).await?,
                // The pod's watch event brings it back sooner if the create lands.
                Confirmed::LookAgainIn(left) => return Ok(Action::requeue(left)),
            }
        }
        Step::Start => {
            let running = plan::starting(at, now);
            let start_time = status_start(Some(&running)).unwrap_or_default();
            ctx.at_creates.running(&uid, start_time, Instant::now());
            match write_status(at, &running, ctx).await? {
                Some(running) => {
                    let (status, next) = start(&running, ctx, now).await?;
                    base = Some(running);
                    (status, next)
                }
                // A stale copy: whatever was recorded since, nothing is created.
                None => return Ok(retry_after(at, ctx)),
            }
        }
    };
    if write_status(base.as_ref().unwrap_or(at), &status, ctx)
        .await?
        .is_none()
    {
        return Ok(retry_after(at, ctx));
    }
    Ok(match next {
        Next::Then(action) => {
            ctx.backoff.reset(&at.uid().unwrap_or_default());
            action
        }
        Next::Retry => retry_after(at, ctx),
    })
}

/// Creates the pod of an At already recorded RUNNING ([`plan::starting`]). The name is
/// deterministic, so a create that finds the pod already there means an earlier attempt made
/// it, unless someone else's pod has the name: then it is left alone, and the At goes back to
/// PENDING, as it does when the API server refuses the create. A create whose reply was lost
/// keeps RUNNING: the pod shows, or the At ends as PodVanished once it can no longer land
/// (`at_creates` times that).
async fn start(at: &At, ctx: &Context, now: Timestamp) -> Result<(AtStatus, Next)> {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &at.namespace().unwrap_or_default());
    let pod_name = plan::pod_name(at);
    info!(controller = CONTROLLER, namespace = at.namespace(), name = at.name_any(), phase = "RUNNING", command = %at.spec.command, "schedule due: creating pod");
    let blocked = |reason, message, next| Ok((plan::blocked(at, reason, message, now), next));
    let sending = Sending::new(
        &ctx.at_creates,
        Uid::from(at.uid().unwrap_or_default().as_str()),
    );
    let created = sending.send(client::create(&api, &plan::pod_for(at))).await;
    match &created {
        Err(e) if !client::may_have_acted(e) => sending.refused(),
        _ => drop(sending),
    }
    let pod = match created {
        Ok(pod) => pod,
        Err(kube::Error::Api(s)) if s.code == 409 => match read_pod(at, ctx).await? {
            Some(pod) if controlled_by(at, &pod) => pod,
            _ => {
                let message = format!(
                    "pod {pod_name} exists and is not controlled by this At; it is left alone, and the command runs once the name is free"
                );
                return blocked(plan::REASON_POD_NAME_TAKEN, message, Next::Retry);
            }
        },
        Err(e) if client::may_have_acted(&e) => return Err(Error::PodApi(e)),
        Err(e) => {
            let message = format!("creating pod {pod_name}: {}", api_message(&e));
            return blocked(plan::REASON_FAILED_CREATE, message, Next::Retry);
        }
    };
    Ok((
        plan::progress(at, &CachedPod::from_pod(&pod), now),
        Next::Then(Action::await_change()),
    ))
}

async fn read_pod(at: &At, ctx: &Context) -> Result<Option<Pod>> {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &at.namespace().unwrap_or_default());
    api.get_opt(&plan::pod_name(at))
        .await
        .map_err(Error::ApiRead)
}

/// The `startTime` of a status, to the second (as the API server keeps it).
fn status_start(status: Option<&AtStatus>) -> Option<i64> {
    Some(status?.start_time.as_ref()?.0.as_second())
}

fn controlled_by(at: &At, pod: &Pod) -> bool {
    let uid = at.uid();
    pod.owner_references()
        .iter()
        .any(|r| r.controller == Some(true) && Some(&r.uid) == uid.as_ref())
}

/// Writes `status` if it differs from what `at` shows, then publishes the events of the
/// change. The patch carries the At's resourceVersion: a read that lagged behind an earlier
/// write (a DONE, say) must not overwrite it. Returns the At as written, or `None` on such a
/// conflict.
async fn write_status(at: &At, status: &AtStatus, ctx: &Context) -> Result<Option<At>> {
    if at.status.as_ref() == Some(status) {
        return Ok(Some(at.clone()));
    }
    let api: Api<At> = Api::namespaced(ctx.client.clone(), &at.namespace().unwrap_or_default());
    let patch = serde_json::json!({
        "metadata": { "resourceVersion": at.resource_version() },
        "status": exact(status),
    });
    let written = match api
        .patch_status(
            &at.name_any(),
            &status_patch_params(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(written) => written,
        // Our own write may be what changed it: the client re-sends a patch whose answer was
        // a 503 or 504, and one that had landed then meets a conflict with itself.
        Err(kube::Error::Api(s)) if s.code == 409 => match ours_landed(&api, at, status).await? {
            Some(written) => written,
            None => {
                debug!(
                    controller = CONTROLLER,
                    namespace = at.namespace(),
                    name = at.name_any(),
                    "the At changed since it was read; retrying"
                );
                return Ok(None);
            }
        },
        Err(e) => return Err(Error::StatusWrite(e)),
    };
    let phase = phase_name(status.phase);
    for note in plan::notes(at.status.as_ref(), status) {
        info!(controller = CONTROLLER, namespace = at.namespace(), name = at.name_any(), phase, reason = %note.reason, message = %note.note, "status changed");
        publish(at, ctx, note.type_, &note.reason, note.action, note.note).await;
    }
    Ok(Some(written))
}

/// The At as it is now if it shows exactly `status`: a write of ours that landed (its
/// timestamps make it ours alone), not someone else's.
async fn ours_landed(api: &Api<At>, at: &At, status: &AtStatus) -> Result<Option<At>> {
    let now = api
        .get_status(&at.name_any())
        .await
        .map_err(Error::ApiRead)?;
    // Compared as written: the API server keeps timestamps to the second.
    let as_written = |s: Option<&AtStatus>| serde_json::to_value(s).ok();
    Ok((as_written(now.status.as_ref()) == as_written(Some(status))).then_some(now))
}

/// `status` as a merge patch that leaves nothing of the old one: a field it lacks is removed
/// (an At sent back to PENDING names no pod).
fn exact(status: &AtStatus) -> serde_json::Value {
    let mut value = serde_json::to_value(status).expect("a status serializes");
    if let Some(fields) = value.as_object_mut() {
        for key in STATUS_FIELDS {
            fields.entry(key).or_insert(serde_json::Value::Null);
        }
    }
    value
}

fn phase_name(phase: Option<AtPhase>) -> &'static str {
    match phase {
        None => "",
        Some(AtPhase::Pending) => "PENDING",
        Some(AtPhase::Running) => "RUNNING",
        Some(AtPhase::Done) => "DONE",
    }
}

const STATUS_FIELDS: [&str; 6] = [
    "phase",
    "podName",
    "startTime",
    "completionTime",
    "succeeded",
    "conditions",
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::AtSpec;
    use crate::controller::fixtures::{Answer, Sent, scripted_context};
    use crate::plan::at::REASON_STARTED;
    use http::Method;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use serde_json::Value;

    /// Every field of a full status is in the patch of an empty one, as a null.
    #[test]
    fn an_exact_patch_names_every_status_field() {
        let full = AtStatus {
            phase: Some(AtPhase::Done),
            pod_name: Some("p".into()),
            start_time: Some(Time(Timestamp::UNIX_EPOCH)),
            completion_time: Some(Time(Timestamp::UNIX_EPOCH)),
            succeeded: Some(true),
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
        let empty = exact(&AtStatus::default());
        assert!(empty.as_object().unwrap().values().all(|v| v.is_null()));
        assert_eq!(keys(exact(&full)), keys(empty));
        assert_eq!(exact(&full), serde_json::to_value(&full).unwrap());
    }

    const STATUS: &str =
        "/apis/cnat.programming-kubernetes.info/v1alpha1/namespaces/ns/ats/job/status";
    const PODS: &str = "/api/v1/namespaces/ns/pods";

    /// At `ns/job`, due long ago and never reconciled, read at resourceVersion 7.
    fn due_at() -> At {
        let mut at = At::new(
            "job",
            AtSpec {
                schedule: "2020-01-01T00:00:00Z".into(),
                command: "echo hi".into(),
            },
        );
        at.metadata.namespace = Some("ns".into());
        at.metadata.uid = Some("at-uid".into());
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

    /// RUNNING and the pod's name are recorded, under the resourceVersion read, before the
    /// pod is created: a lost status write can no longer leave a PENDING At with a pod.
    #[tokio::test]
    async fn a_due_at_is_recorded_running_before_its_pod_is_created() {
        let (result, writes) = reconcile_due(|sent| Answer::Reply(201, sent.body.clone())).await;
        result.unwrap();
        assert_eq!(
            writes[..2],
            [
                status("7", "RUNNING", "job-pod".into()),
                vec!["create".into(), "job-pod".into()],
            ],
            "{writes:#?}"
        );
        assert!(
            writes[2..].iter().all(|w| w[0] == "status" && w[1] == "8"),
            "{writes:#?}"
        );
    }

    /// A stale copy (the At changed since it was read: here someone made it DONE) is refused
    /// its RUNNING: no pod.
    #[tokio::test]
    async fn a_stale_at_creates_no_pod() {
        let (ctx, log) = scripted_context(|sent, _| match sent.method {
            Method::PATCH => Answer::status(409, "Conflict"),
            Method::GET if sent.is(&Method::GET, STATUS) => {
                let mut done = serde_json::to_value(due_at()).unwrap();
                done["status"] = serde_json::json!({"phase": "DONE"});
                Answer::Reply(200, done)
            }
            _ if sent.is(&Method::POST, PODS) => Answer::Reply(201, sent.body.clone()),
            _ => Answer::status(404, "NotFound"),
        });
        reconcile(Arc::new(due_at()), ctx).await.unwrap();
        let writes = writes(&log.lock());
        assert_eq!(writes, [status("7", "RUNNING", "job-pod".into())]);
    }

    /// A create whose reply was lost may have made the pod: the At stays RUNNING (the pod
    /// shows, or it ends PodVanished), and the command is never started a second time.
    #[tokio::test]
    async fn a_create_whose_reply_was_lost_keeps_the_at_running() {
        let (result, writes) = reconcile_due(|_| Answer::Lost).await;
        assert!(result.is_err());
        assert_eq!(
            writes,
            [
                status("7", "RUNNING", "job-pod".into()),
                vec!["create".into(), "job-pod".into()],
            ]
        );
    }

    /// A create the API server refused made nothing: the At goes back to PENDING, and the
    /// patch removes the pod name RUNNING recorded.
    #[tokio::test]
    async fn a_refused_create_puts_the_at_back_to_pending() {
        let (result, writes) = reconcile_due(|_| Answer::status(403, "Forbidden")).await;
        result.unwrap();
        assert_eq!(
            writes,
            [
                status("7", "RUNNING", "job-pod".into()),
                vec!["create".into(), "job-pod".into()],
                status("8", "PENDING", Value::Null),
            ]
        );
    }

    const AT: &str = "/apis/cnat.programming-kubernetes.info/v1alpha1/namespaces/ns/ats/job";

    /// Issue 19, item 9: the client re-sent a RUNNING write that had landed (a 504 on the
    /// first send), and the re-send met a 409: our own write, not a stale copy. A read of the
    /// At settles it, and the pod is created.
    #[tokio::test]
    async fn a_conflict_with_our_own_running_write_still_creates_the_pod() {
        let landed: Arc<parking_lot::Mutex<Option<Value>>> = Default::default();
        let stored = landed.clone();
        let (ctx, log) = scripted_context(move |sent, _| match () {
            _ if sent.is(&Method::PATCH, STATUS) => {
                if let Answer::Reply(_, at) = patched(sent) {
                    *stored.lock() = Some(at);
                }
                Answer::status(409, "Conflict")
            }
            _ if sent.is(&Method::GET, STATUS) || sent.is(&Method::GET, AT) => {
                Answer::Reply(200, stored.lock().clone().unwrap())
            }
            _ if sent.is(&Method::POST, PODS) => Answer::Reply(201, sent.body.clone()),
            _ => Answer::status(404, "NotFound"),
        });
        reconcile(Arc::new(due_at()), ctx).await.unwrap();
        let writes = writes(&log.lock());
        assert!(
            writes.contains(&vec!["create".into(), "job-pod".into()]),
            "{writes:#?}"
        );
    }

    /// Issue 19, item 8, and issue 26, fault 3: a create whose reply was lost (or a previous
    /// leader's) can still land for as long as the API server works on a request: no
    /// PodVanished verdict before then, however old the `startTime` another process wrote.
    /// The window runs on this process's monotonic clock, from its first look.
    #[tokio::test(start_paused = true)]
    async fn no_pod_vanished_verdict_while_a_create_may_still_land() {
        let mut at = due_at();
        let an_hour_ago = Timestamp::now() - jiff::SignedDuration::from_hours(1);
        at.status = Some(plan::starting(&at, an_hour_ago));
        let (ctx, log) = scripted_context(|sent, _| match () {
            _ if sent.is(&Method::PATCH, STATUS) => patched(sent),
            _ => Answer::status(404, "NotFound"),
        });
        let at = Arc::new(at);
        reconcile(at.clone(), ctx.clone()).await.unwrap();
        assert!(writes(&log.lock()).is_empty(), "{:#?}", writes(&log.lock()));
        tokio::time::advance(plan::A_CREATE_MAY_LAND_FOR).await;
        reconcile(at, ctx).await.unwrap();
        assert_eq!(writes(&log.lock()), [status("7", "DONE", "job-pod".into())]);
    }

    /// Issue 26, fault 4: the RUNNING write landed but its reply was lost; this process sent
    /// no create, so the next reconcile creates the pod instead of waiting for one.
    #[tokio::test]
    async fn a_running_write_whose_reply_was_lost_is_followed_by_the_create() {
        let landed: Arc<parking_lot::Mutex<Option<Value>>> = Default::default();
        let stored = landed.clone();
        let (ctx, log) = scripted_context(move |sent, _| match () {
            _ if sent.is(&Method::PATCH, STATUS) && stored.lock().is_none() => {
                if let Answer::Reply(_, at) = patched(sent) {
                    *stored.lock() = Some(at);
                }
                Answer::Lost
            }
            _ if sent.is(&Method::PATCH, STATUS) => patched(sent),
            _ if sent.is(&Method::POST, PODS) => Answer::Reply(201, sent.body.clone()),
            _ => Answer::status(404, "NotFound"),
        });
        assert!(reconcile(Arc::new(due_at()), ctx.clone()).await.is_err());
        let running: At = serde_json::from_value(landed.lock().clone().unwrap()).unwrap();
        reconcile(Arc::new(running), ctx).await.unwrap();
        let writes = writes(&log.lock());
        assert!(
            writes.contains(&vec!["create".into(), "job-pod".into()]),
            "{writes:#?}"
        );
    }
}
