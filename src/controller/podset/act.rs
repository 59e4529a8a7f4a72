//! Carrying out a PodSet's plan: creates in slow-start batches, ranked deletes, each sent
//! under its expectation, and what they did logged and published.

use std::future::Future;
use std::sync::Arc;

use futures::future::join_all;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::runtime::events::EventType;
use tokio::time::Instant;
use tracing::{info, warn};

use super::super::memory::Unanswered;
use super::calls::{create, prefix};
use crate::api::PodSet;
use crate::controller::context::{Context, api_message, publish};
use crate::controller::pods::{self, Created, Written};
use crate::expectations::{Answer, Write};
use crate::plan::name;
use crate::plan::podset::{self as plan, Failure, Outcome, Plan};
use crate::pod::CachedPod;
use crate::uid::Uid;

/// Carries out `plan`, then, if it went well, deletes the finished pods in `trim`.
pub(super) async fn act(
    ps: &PodSet,
    plan: Plan,
    trim: &[Arc<CachedPod>],
    ctx: &Context,
) -> Outcome {
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
pub(super) async fn expected<R>(
    ctx: &Context,
    owner_uid: &str,
    write: Write,
    send: impl Future<Output = R>,
    says: impl FnOnce(&R) -> Answer,
) -> R {
    let unanswered = Unanswered::new(&ctx.memory, owner_uid, write);
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
    let (api, template) = (ctx.api::<Pod>(ps), plan::pod_for(ps));
    let mut created = Vec::new();
    let mut error = None;
    for batch in plan::slow_start_batches(n) {
        let names: Vec<String> = (0..batch)
            .map(|_| name::random(prefix(&template)))
            .collect();
        let writes: Vec<Write> = names.iter().cloned().map(Write::Create).collect();
        ctx.memory.expect(&uid, &namespace, &writes, Instant::now());
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
            if let Created::Hidden {
                left: Some(pod), ..
            } = &result
            {
                ctx.memory.suspect(&Uid::from(uid.as_str()), &name, pod);
            }
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
    let api = ctx.api::<Pod>(ps);
    let writes: Vec<Write> = victims
        .iter()
        .map(|p| Write::Delete(p.uid.clone(), p.name.to_string()))
        .collect();
    ctx.memory.expect(&uid, &namespace, &writes, Instant::now());
    let sends = victims.iter().zip(writes).map(|(pod, write)| {
        expected(
            ctx,
            &uid,
            write,
            pods::delete(&api, &pod.name, &pod.uid),
            Written::answer,
        )
    });
    let mut deleted = Vec::new();
    let mut error = None;
    for (pod, result) in victims.iter().zip(join_all(sends).await) {
        match result {
            Written::Sent => deleted.push(pod.name.to_string()),
            Written::Gone => {}
            Written::Unknown(e) | Written::Refused(e) | Written::Changed(e) => {
                error.get_or_insert(api_message(&e));
            }
        }
    }
    report(ps, ctx, Verb::Delete, &deleted, error).await
}

#[derive(Clone, Copy)]
pub(super) enum Verb {
    Create,
    Delete,
}

/// Logs and publishes what a round of creates or deletes did: one Normal event naming the
/// pods done, and a Warning with the API server's message if any call failed.
pub(super) async fn report(
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
