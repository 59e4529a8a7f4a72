//! The PodSet reconcile: act on the plan (respecting expectations), then write the status if
//! it changed.

use std::sync::Arc;
use std::time::Instant;

use futures::future::join_all;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};
use tracing::{info, warn};

use super::{Context, api_message, publish, retry_after, status_patch_params, timed};
use crate::api::PodSet;
use crate::cache::CachedPod;
use crate::client;
use crate::error::{Error, Result};
use crate::expectations::Readiness;
use crate::plan::podset::{self as plan, Failure, Outcome, Plan};

const CONTROLLER: &str = "podset";

pub async fn reconcile(ps: Arc<PodSet>, ctx: Arc<Context>) -> Result<Action> {
    timed(&ctx, CONTROLLER, reconcile_podset(&ps, &ctx)).await
}

pub fn error_policy(ps: Arc<PodSet>, error: &Error, ctx: Arc<Context>) -> Action {
    warn!(controller = CONTROLLER, namespace = ps.namespace(), name = ps.name_any(), %error, "reconcile failed");
    retry_after(ps.as_ref(), &ctx)
}

async fn reconcile_podset(ps: &PodSet, ctx: &Context) -> Result<Action> {
    let uid = ps.uid().unwrap_or_default();
    let pods = ctx.pods.owned_by(&uid);
    let deleting = ps.meta().deletion_timestamp.is_some();
    let outcome = match ctx.expectations.readiness(&uid, Instant::now()) {
        // Being deleted: the garbage collector removes the pods; creating more would race it.
        Readiness::Satisfied if !deleting => manage(ps, &pods, ctx).await,
        _ => Outcome::NotActed,
    };
    // While our own creates or deletes are still on their way to the watch, a status would
    // describe a moment already over: it is written once the watch has shown them all (one
    // write per scale-up instead of one per pod). A failure is reported at once.
    let pending = match ctx.expectations.readiness(&uid, Instant::now()) {
        Readiness::Satisfied => None,
        Readiness::Waiting(left) => Some(left),
    };
    if pending.is_none() || matches!(outcome, Outcome::Failed(_)) {
        // Read again: the watch may have shown this reconcile's own creates by now.
        write_status(ps, &ctx.pods.owned_by(&uid), &outcome, ctx).await?;
    }
    Ok(match (&outcome, pending) {
        (Outcome::Failed(_), _) => retry_after(ps, ctx),
        (_, Some(left)) => Action::requeue(left),
        _ => {
            ctx.backoff.reset(&uid);
            Action::await_change()
        }
    })
}

async fn manage(ps: &PodSet, pods: &[Arc<CachedPod>], ctx: &Context) -> Outcome {
    let failure = match plan::plan(ps.spec.replicas, pods) {
        Plan::Create(n) => create_pods(ps, n, ctx).await,
        Plan::Delete(victims) => delete_pods(ps, &victims, ctx).await,
        Plan::Steady => None,
    };
    let failure = match failure {
        None => delete_pods(ps, &plan::finished_excess(pods), ctx).await,
        failed => failed,
    };
    match failure {
        Some(f) => Outcome::Failed(f),
        None => Outcome::Succeeded,
    }
}

/// Creates `n` pods in slow-start batches, stopping at the first batch with a failure.
async fn create_pods(ps: &PodSet, n: usize, ctx: &Context) -> Option<Failure> {
    let uid = ps.uid().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ps.namespace().unwrap_or_default());
    let pod = plan::pod_for(ps);
    let mut created = Vec::new();
    let mut error = None;
    for batch in plan::slow_start_batches(n) {
        ctx.expectations.expect_creates(&uid, batch, Instant::now());
        let results = join_all((0..batch).map(|_| client::create(&api, &pod))).await;
        let (mut failed, mut refused) = (0, 0);
        for result in results {
            match result {
                Ok(p) => created.push(p.name_any()),
                Err(e) => {
                    failed += 1;
                    if !may_have_landed(&e) {
                        refused += 1;
                    }
                    error.get_or_insert(e);
                }
            }
        }
        // A create that timed out stays expected: if it landed, the watch shows the pod; if
        // not, the expectation expires and the pod is created then. Never both.
        if refused > 0 {
            ctx.expectations
                .creates_failed(&uid, refused, Instant::now());
        }
        if failed > 0 {
            break;
        }
    }
    report(ps, ctx, Verb::Create, &created, error).await
}

/// Whether a failed create may still have made its pod: the API server gave up waiting on
/// storage (504, reason Timeout), not on the request.
fn may_have_landed(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s) if s.code == 504 || s.reason == "Timeout")
}

/// Deletes exactly these pods, each guarded by a UID precondition so that a pod of the same
/// name created meanwhile is never the one deleted.
async fn delete_pods(ps: &PodSet, victims: &[Arc<CachedPod>], ctx: &Context) -> Option<Failure> {
    if victims.is_empty() {
        return None;
    }
    let uid = ps.uid().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ps.namespace().unwrap_or_default());
    ctx.expectations
        .expect_deletes(&uid, victims.iter().map(|p| p.uid.as_str()), Instant::now());
    let results = join_all(victims.iter().map(|p| {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(p.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let api = api.clone();
        async move { api.delete(&p.name, &params).await }
    }))
    .await;
    let mut deleted = Vec::new();
    let mut error = None;
    for (pod, result) in victims.iter().zip(results) {
        match result {
            Ok(_) => deleted.push(pod.name.clone()),
            // Gone already, or a different pod now has the name: nothing of ours to delete.
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {
                ctx.expectations.delete_done(&uid, &pod.uid, Instant::now())
            }
            Err(e) => {
                ctx.expectations.delete_done(&uid, &pod.uid, Instant::now());
                error.get_or_insert(e);
            }
        }
    }
    report(ps, ctx, Verb::Delete, &deleted, error).await
}

#[derive(Clone, Copy)]
enum Verb {
    Create,
    Delete,
}

/// Logs and publishes what a round of creates or deletes did: one Normal event naming the
/// pods done, and a Warning with the API server's message if any call failed.
async fn report(
    ps: &PodSet,
    ctx: &Context,
    verb: Verb,
    done: &[String],
    error: Option<kube::Error>,
) -> Option<Failure> {
    let (action, past, success, failure) = match verb {
        Verb::Create => ("Create", "Created", "SuccessfulCreate", "FailedCreate"),
        Verb::Delete => ("Delete", "Deleted", "SuccessfulDelete", "FailedDelete"),
    };
    let (namespace, name) = (ps.namespace(), ps.name_any());
    if !done.is_empty() {
        info!(controller = CONTROLLER, namespace, name, pods = ?done, "{past} pods");
        let note = format!("{past} pods: {}", done.join(", "));
        publish(ps, ctx, EventType::Normal, success, action, note).await;
    }
    let message = api_message(&error?);
    warn!(controller = CONTROLLER, namespace, name, error = %message, "{action} pods failed");
    let note = format!("Error: {action} pods: {message}");
    publish(ps, ctx, EventType::Warning, failure, action, note).await;
    Some(Failure {
        reason: failure,
        message,
    })
}
/// Writes the status only when it differs from what the PodSet shows.
async fn write_status(
    ps: &PodSet,
    pods: &[Arc<CachedPod>],
    outcome: &Outcome,
    ctx: &Context,
) -> Result<()> {
    let (uid, seen) = (
        ps.uid().unwrap_or_default(),
        ps.resource_version().unwrap_or_default(),
    );
    // Compare with the freshest status known: ours, if the store has not shown it yet.
    let written = ctx
        .podset_statuses
        .written_over(&uid, &seen, Instant::now());
    let current = written.as_ref().or(ps.status.as_ref());
    let status = plan::status(ps, current, pods, outcome, Timestamp::now());
    if current == Some(&status) {
        return Ok(());
    }
    let api: Api<PodSet> = Api::namespaced(ctx.client.clone(), &ps.namespace().unwrap_or_default());
    let patch = serde_json::json!({ "status": status });
    api.patch_status(
        &ps.name_any(),
        &status_patch_params(),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(Error::StatusWrite)?;
    ctx.podset_statuses
        .record(&uid, &seen, status, Instant::now());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16, reason: &str) -> kube::Error {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": code, "reason": reason, "message": "m"
        }))
        .unwrap();
        kube::Error::Api(Box::new(status))
    }

    #[test]
    fn only_a_storage_timeout_leaves_a_create_in_doubt() {
        assert!(may_have_landed(&api_error(504, "Timeout")));
        assert!(may_have_landed(&api_error(500, "Timeout")));
        for (code, reason) in [
            (403, "Forbidden"),
            (422, "Invalid"),
            (429, "TooManyRequests"),
            (409, "AlreadyExists"),
            (500, "InternalError"),
        ] {
            assert!(
                !may_have_landed(&api_error(code, reason)),
                "{code} {reason}"
            );
        }
        assert!(!may_have_landed(
            &kube::Error::LinesCodecMaxLineLengthExceeded
        ));
    }
}
