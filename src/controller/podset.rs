//! The PodSet reconcile: act on the plan (respecting expectations), then write the status if
//! it changed.

use std::future::Future;
use std::sync::Arc;
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
use crate::expectations::{Answer, Readiness, Unanswered, Write};
use crate::jitter::jittered;
use crate::plan::podset::{self as plan, Failure, Next, Outcome, Plan, Seen, Step};
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
    let step = plan::decide(&Seen {
        replicas: ps.spec.replicas,
        deleting: ps.meta().deletion_timestamp.is_some(),
        gone: ctx.gone.is_gone(&uid),
        in_doubt: doubtful(ps, ctx),
        readiness: &readiness,
        pods: &pods,
    });
    let outcome = match step {
        Step::AwaitChange => return Ok(Action::await_change()),
        Step::Report => Outcome::NotActed,
        Step::SendAgain => settle::settle(ps, ctx).await,
        Step::Act {
            plan,
            read_first,
            trim,
        } => {
            if read_first && !exists(ps, ctx).await? {
                return Ok(Action::await_change());
            }
            if let Plan::Create(_) = plan {
                ctx.rounds.made(&uid, generation(ps), Instant::now());
            }
            act(ps, plan, &trim, ctx).await
        }
    };
    let now = ctx.expectations.readiness(&uid, Instant::now());
    let after = plan::after(&outcome, &readiness, &now);
    if after.write_status {
        // Read again: the watch may have shown this reconcile's own creates by now.
        status::write(ps, &ctx.pods.owned_by(&namespace, &uid), &outcome, ctx).await?;
    }
    Ok(match after.next {
        Next::Retry => retry_after(ps, ctx),
        Next::In(delay) => Action::requeue(delay),
        // Spread out, so that PodSets made together are not all looked at in one burst.
        Next::Resync => {
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

/// Carries out `plan`, then, if it went well, deletes the finished pods in `trim`.
async fn act(ps: &PodSet, plan: Plan, trim: &[Arc<CachedPod>], ctx: &Context) -> Outcome {
    let failure = match plan {
        Plan::Create(n) => create_pods(ps, n, ctx).await,
        Plan::Delete(victims) => delete_pods(ps, &victims, ctx).await,
        Plan::Steady => None,
    };
    let failure = match failure {
        None => delete_pods(ps, trim, ctx).await,
        failed => failed,
    };
    match failure {
        Some(f) => Outcome::Failed(f),
        None => Outcome::Succeeded,
    }
}

/// Sends `write` under its expectation, and records what its answer says (unknown, if it is
/// dropped unanswered).
async fn expected<R>(
    ctx: &Context,
    owner_uid: &str,
    write: Write,
    send: impl Future<Output = R>,
    says: impl FnOnce(&R) -> Answer,
) -> R {
    let unanswered = Unanswered::new(&ctx.expectations, owner_uid, write);
    let result = send.await;
    unanswered.answered(says(&result));
    result
}

/// Creates `n` pods in slow-start batches, stopping at the first batch with a failure.
async fn create_pods(ps: &PodSet, n: usize, ctx: &Context) -> Option<Failure> {
    let (uid, namespace) = (
        ps.uid().unwrap_or_default(),
        ps.namespace().unwrap_or_default(),
    );
    let (api, template) = (pods_api(ps, ctx), plan::pod_for(ps));
    let mut created = Vec::new();
    let mut error = None;
    for batch in plan::slow_start_batches(n) {
        let names: Vec<String> = (0..batch)
            .map(|_| name::random(prefix(&template)))
            .collect();
        let writes: Vec<Write> = names.iter().cloned().map(Write::Create).collect();
        ctx.expectations
            .expect(&uid, &namespace, &writes, Instant::now());
        let sends = names.iter().zip(writes).map(|(name, write)| {
            expected(
                ctx,
                &uid,
                write,
                create(&api, &template, name),
                Created::answer,
            )
        });
        let results = join_all(sends).await;
        for (name, result) in names.into_iter().zip(results) {
            match result.error() {
                None => created.push(name),
                Some(e) => {
                    error.get_or_insert(e);
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
    let (uid, namespace) = (
        ps.uid().unwrap_or_default(),
        ps.namespace().unwrap_or_default(),
    );
    let api = pods_api(ps, ctx);
    let writes: Vec<Write> = victims
        .iter()
        .map(|p| Write::Delete(p.uid.clone(), p.name.to_string()))
        .collect();
    ctx.expectations
        .expect(&uid, &namespace, &writes, Instant::now());
    let sends = victims.iter().zip(writes).map(|(pod, write)| {
        expected(
            ctx,
            &uid,
            write,
            delete(&api, &pod.name, &pod.uid),
            Deleted::answer,
        )
    });
    let mut deleted = Vec::new();
    let mut error = None;
    for (pod, result) in victims.iter().zip(join_all(sends).await) {
        match result {
            Deleted::Sent => deleted.push(pod.name.to_string()),
            Deleted::Gone => {}
            Deleted::Unknown(e) | Deleted::Refused(e) => {
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

impl Created {
    /// What it says of the expected create.
    fn answer(&self) -> Answer {
        match self {
            Created::Made(uid) => Answer::Made(uid.clone()),
            // Refused, or the name was taken (a one in 14 million chance): no pod of ours.
            // A pod admission hid was deleted: its watch will never show it.
            Created::Exists(_) | Created::Refused(_) | Created::Hidden(_) => Answer::Nothing,
            Created::Unknown(_) => Answer::Unknown,
        }
    }

    /// The API server's words for a create that made no pod of ours, or may not have.
    fn error(&self) -> Option<String> {
        match self {
            Created::Made(_) => None,
            Created::Exists(e) | Created::Refused(e) | Created::Unknown(e) => Some(api_message(e)),
            Created::Hidden(message) => Some(message.clone()),
        }
    }
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

impl Deleted {
    /// What it says of the expected delete.
    fn answer(&self) -> Answer {
        match self {
            Deleted::Sent => Answer::Deleting,
            Deleted::Gone | Deleted::Refused(_) => Answer::Nothing,
            Deleted::Unknown(_) => Answer::Unknown,
        }
    }
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
    if !done.is_empty() {
        info!(pods = ?done, "{past} pods");
        let note = format!("{past} pods: {}", done.join(", "));
        publish(ps, ctx, EventType::Normal, success, action, note).await;
    }
    let message = error?;
    warn!(error = %message, "{action} pods failed");
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
