//! The PodSet reconcile: act on the plan (respecting expectations), then write the status if
//! it changed.

use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use futures::future::join_all;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Api, Resource, ResourceExt};
use tracing::{info, warn};

use super::context::{Context, api_message, publish, reconcile_within_deadline, retry_after};
use crate::api::PodSet;
use crate::cache::CachedPod;
use crate::client;
use crate::error::{Error, Result};
use crate::expectations::{Readiness, Unanswered};
use crate::jitter::jittered;
use crate::plan::podset::{self as plan, Failure, Outcome, Plan};
use crate::plan::{admitted, name};
use crate::uid::Uid;

const CONTROLLER: &str = "podset";

pub async fn reconcile(ps: Arc<PodSet>, ctx: Arc<Context>) -> Result<Action> {
    reconcile_within_deadline(&ctx, CONTROLLER, ps.as_ref(), reconcile_podset(&ps, &ctx)).await
}

/// Only decides the delay: the failure is logged once, where the controller reports it.
pub fn error_policy(ps: Arc<PodSet>, _error: &Error, ctx: Arc<Context>) -> Action {
    retry_after(ps.as_ref(), &ctx)
}

async fn reconcile_podset(ps: &PodSet, ctx: &Context) -> Result<Action> {
    let (uid, namespace) = (
        ps.uid().unwrap_or_default(),
        ps.namespace().unwrap_or_default(),
    );
    let (readiness, pods) = snapshot(
        || ctx.expectations.readiness(&uid, Instant::now()),
        || ctx.pods.owned_by(&namespace, &uid),
    );
    // Deleted, as a write found, though the watch has not said so yet.
    if ctx.gone.is_gone(&uid) {
        return Ok(Action::await_change());
    }
    let deleting = ps.meta().deletion_timestamp.is_some();
    let outcome = match readiness {
        // Being deleted: the garbage collector removes the pods; creating more would race it.
        _ if deleting => Outcome::NotActed,
        Readiness::Satisfied => {
            let plan = plan::plan(ps.spec.replicas, &pods);
            if matches!(plan, Plan::Create(_)) {
                if doubtful(ps, ctx) && !exists(ps, ctx).await? {
                    return Ok(Action::await_change());
                }
                ctx.rounds.made(&uid, generation(ps), Instant::now());
            }
            manage(ps, plan, &pods, ctx).await
        }
        Readiness::Waiting(_) => settle::settle(ps, ctx).await,
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
        status::write(ps, &ctx.pods.owned_by(&namespace, &uid), &outcome, ctx).await?;
    }
    Ok(match (&outcome, pending) {
        (Outcome::Failed(_), _) => retry_after(ps, ctx),
        (_, Some(left)) => Action::requeue(left),
        // Settled, and nothing left to wait for: the scale-up goes on at once. The pods that
        // settled it may all have been seen already, so no watch event would bring it back.
        (Outcome::Succeeded, None) if matches!(readiness, Readiness::Waiting(_)) => {
            Action::requeue(Duration::ZERO)
        }
        // Spread out, so that PodSets made together are not all looked at in one burst.
        _ => {
            ctx.backoff.reset(&uid);
            Action::requeue(jittered(ctx.resync))
        }
    })
}

/// The expectations and the pods a reconcile acts on, read in that order as the ReplicaSet
/// controller does. The pod watch puts a pod in the cache before it lowers the expectation,
/// so every pod that met an expectation read here is in the pods read after. The other way
/// round, a pod landing between the reads is counted by the expectations yet missing from
/// the snapshot, and made (or deleted) a second time.
fn snapshot(
    readiness: impl FnOnce() -> Readiness,
    pods: impl FnOnce() -> Vec<Arc<CachedPod>>,
) -> (Readiness, Vec<Arc<CachedPod>>) {
    let readiness = readiness();
    (readiness, pods())
}

/// Whether the cache's word that the PodSet exists is in doubt, before pods are made for it:
/// its last reconcile failed, or pods were made for this spec already. Either way a status
/// write that would have answered 404 may not have been sent, or not answered, and the pods
/// made for a deleted PodSet are removed by the garbage collector, which brings the next
/// round: made again on a cache whose PodSet watch has gone quiet, a loop until it returns.
fn doubtful(ps: &PodSet, ctx: &Context) -> bool {
    let uid = ps.uid().unwrap_or_default();
    ctx.backoff.is_failing(&uid) || ctx.rounds.replaces(&uid, generation(ps))
}

fn generation(ps: &PodSet) -> i64 {
    ps.meta().generation.unwrap_or_default()
}

/// Whether the PodSet is still there, read from the API server. If not, it is remembered
/// gone.
async fn exists(ps: &PodSet, ctx: &Context) -> Result<bool> {
    Ok(read(ps, ctx).await?.is_some())
}

/// The PodSet as the API server has it now (a list of its one name, a consistent read the
/// operator's `list` permission covers), or `None`, remembered gone, if it is not there.
async fn read(ps: &PodSet, ctx: &Context) -> Result<Option<PodSet>> {
    let one = ListParams::default().fields(&format!("metadata.name={}", ps.name_any()));
    let found = podsets_api(ps, ctx)
        .list(&one)
        .await
        .map_err(Error::ApiRead)?;
    // Another PodSet of the same name is a new object: the cache's is gone all the same.
    let now = found.items.into_iter().find(|p| p.uid() == ps.uid());
    if now.is_none() {
        ctx.gone
            .found(&ps.uid().unwrap_or_default(), Instant::now());
    }
    Ok(now)
}

async fn manage(ps: &PodSet, plan: Plan, pods: &[Arc<CachedPod>], ctx: &Context) -> Outcome {
    let failure = match plan {
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
    let (api, template) = (pods_api(ps, ctx), plan::pod_for(ps));
    let mut created = Vec::new();
    let mut error = None;
    for batch in plan::slow_start_batches(n) {
        let names: Vec<String> = (0..batch)
            .map(|_| name::random(prefix(&template)))
            .collect();
        let namespace = ps.namespace().unwrap_or_default();
        let expected = names.iter().map(String::as_str);
        ctx.expectations
            .expect_creates(&uid, &namespace, expected, Instant::now());
        let results = join_all(names.iter().map(|n| async {
            let unanswered = Unanswered::create(&ctx.expectations, &uid, n);
            let result = create(&api, &template, n).await;
            unanswered.answered();
            result
        }))
        .await;
        for (name, result) in names.into_iter().zip(results) {
            let now = Instant::now();
            match result {
                Created::Made(_) => created.push(name),
                Created::Unknown(e) => {
                    ctx.expectations.create_unsettled(&uid, &name, now);
                    error.get_or_insert(api_message(&e));
                }
                // Refused, or the name was taken (a one in 14 million chance): no pod of ours.
                Created::Refused(e) | Created::Exists(e) => {
                    ctx.expectations.create_failed(&uid, &name, now);
                    error.get_or_insert(api_message(&e));
                }
                // Its watch will never show it: as if refused (it was deleted).
                Created::Hidden(message) => {
                    ctx.expectations.create_failed(&uid, &name, now);
                    error.get_or_insert(message);
                }
            }
        }
        // Only this batch can have failed: an earlier failure ended the loop.
        if error.is_some() {
            break;
        }
    }
    report(ps, ctx, Verb::Create, &created, error).await
}

/// Deletes exactly these pods, each guarded by a UID precondition so that a pod of the same
/// name created meanwhile is never the one deleted.
async fn delete_pods(ps: &PodSet, victims: &[Arc<CachedPod>], ctx: &Context) -> Option<Failure> {
    if victims.is_empty() {
        return None;
    }
    let (uid, api) = (ps.uid().unwrap_or_default(), pods_api(ps, ctx));
    let namespace = ps.namespace().unwrap_or_default();
    ctx.expectations.expect_deletes(
        &uid,
        &namespace,
        victims.iter().map(|p| &p.uid),
        Instant::now(),
    );
    let results = join_all(victims.iter().map(|p| async {
        let unanswered = Unanswered::delete(&ctx.expectations, &uid, &p.uid, &p.name);
        let result = delete(&api, &p.name, &p.uid).await;
        unanswered.answered();
        result
    }))
    .await;
    let mut deleted = Vec::new();
    let mut error = None;
    for (pod, result) in victims.iter().zip(results) {
        let now = Instant::now();
        match result {
            Deleted::Sent => deleted.push(pod.name.to_string()),
            Deleted::Gone => ctx.expectations.delete_done(&uid, &pod.uid, now),
            Deleted::Unknown(e) => {
                let (pod_uid, name) = (&pod.uid, &pod.name);
                ctx.expectations.delete_unsettled(&uid, pod_uid, name, now);
                error.get_or_insert(api_message(&e));
            }
            Deleted::Refused(e) => {
                ctx.expectations.delete_done(&uid, &pod.uid, now);
                error.get_or_insert(api_message(&e));
            }
        }
    }
    report(ps, ctx, Verb::Delete, &deleted, error).await
}

fn pods_api(ps: &PodSet, ctx: &Context) -> Api<Pod> {
    Api::namespaced(ctx.client.clone(), &ps.namespace().unwrap_or_default())
}

fn podsets_api(ps: &PodSet, ctx: &Context) -> Api<PodSet> {
    Api::namespaced(ctx.client.clone(), &ps.namespace().unwrap_or_default())
}

fn prefix(template: &Pod) -> &str {
    template
        .metadata
        .generate_name
        .as_deref()
        .unwrap_or_default()
}

/// What the API server answered to a create.
enum Created {
    /// This pod.
    Made(Uid),
    /// 409 AlreadyExists: a pod has the name.
    Exists(kube::Error),
    /// Turned away before anything was stored.
    Refused(kube::Error),
    /// The reply was lost: the pod may have been made.
    Unknown(kube::Error),
    /// Made, but admission changed what the operator finds its pods by (why, in words): it
    /// is deleted at once, as the operator would never see it.
    Hidden(String),
}

async fn create(api: &Api<Pod>, template: &Pod, name: &str) -> Created {
    let mut pod = template.clone();
    pod.metadata.name = Some(name.to_string());
    match client::create(api, &pod).await {
        Ok(made) => {
            let uid = Uid::from(made.uid().unwrap_or_default().as_str());
            let Some(message) = admitted::hidden(&pod, &made) else {
                return Created::Made(uid);
            };
            if let Deleted::Refused(e) | Deleted::Unknown(e) = delete(api, name, &uid).await {
                warn!(pod = name, error = %e, "could not delete a pod admission hid");
            }
            Created::Hidden(message)
        }
        Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists" => {
            Created::Exists(kube::Error::Api(s))
        }
        Err(e) if client::may_have_acted(&e) => Created::Unknown(e),
        Err(e) => Created::Refused(e),
    }
}

/// What the API server answered to a delete.
enum Deleted {
    Sent,
    /// Gone already, or a different pod now has the name: nothing of ours to delete.
    Gone,
    Refused(kube::Error),
    /// The reply was lost: the pod may be terminating.
    Unknown(kube::Error),
}

async fn delete(api: &Api<Pod>, name: &str, uid: &Uid) -> Deleted {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid.to_string()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Deleted::Sent,
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Deleted::Gone,
        Err(e) if client::may_have_acted(&e) => Deleted::Unknown(e),
        Err(e) => Deleted::Refused(e),
    }
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
    error: Option<String>,
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
    let message = error?;
    warn!(controller = CONTROLLER, namespace, name, error = %message, "{action} pods failed");
    let note = format!("Error: {action} pods: {message}");
    publish(ps, ctx, EventType::Warning, failure, action, note).await;
    Some(Failure {
        reason: failure,
        message,
    })
}
mod settle;
mod status;
#[cfg(test)]
mod tests;
