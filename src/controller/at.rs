//! The At reconcile: carry out the plan's step (create the pod gated, record it RUNNING and
//! release it, delete a gated pod that can never be recorded, or read the pod live when the
//! cache shows none or another), then write the status if it changed and publish an event per
//! change. `plan::at` says why the command runs at most once, and is never lost to a crash or
//! a lost reply.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::context::{Context, api_message, reconcile_within_deadline, retry_after};
use super::fresh;
use super::pods::{self, Created, Written};
use crate::api::{At, AtPhase, AtStatus};
use crate::error::{Error, Result};
use crate::plan::at::{self as plan, Step};
use crate::pod::CachedPod;

const CONTROLLER: &str = "at";

pub async fn reconcile(at: Arc<At>, ctx: Arc<Context>) -> Result<Action> {
    reconcile_within_deadline(&ctx, CONTROLLER, at.as_ref(), reconcile_at(&at, &ctx)).await
}

/// Only decides the delay: the failure is logged once, where the controller reports it.
pub fn error_policy(at: Arc<At>, _error: &Error, ctx: Arc<Context>) -> Action {
    retry_after(at.as_ref(), &ctx)
}

/// What to do after the status is written.
enum Next {
    Then(Action),
    /// Look again at this time, the wait counted from when it is armed: after the write,
    /// however long that took.
    Until(Timestamp),
    /// Something outside the operator is in the way: try again with a growing delay.
    Retry,
}

/// What a step came to.
enum Outcome {
    /// Write `status` (over `over`, the At as a step already wrote it), then `next`.
    Write {
        over: Option<Box<At>>,
        status: AtStatus,
        next: Next,
    },
    /// Nothing to write.
    Then(Action),
}

impl Outcome {
    fn record(status: AtStatus, next: Next) -> Self {
        Outcome::Write {
            over: None,
            status,
            next,
        }
    }
}

/// How often a RUNNING At whose pod the watch does not show reads its pod.
const UNWATCHED_POD_POLL: Duration = Duration::from_secs(15);

async fn reconcile_at(at: &At, ctx: &Context) -> Result<Action> {
    // A write found it deleted, though the watch has not said so yet: each pod made for it
    // would be removed by the garbage collector, and that removal would bring the next round
    // (found by the Sieve walkthrough of an At deleted before it is due).
    if ctx.gone.is_gone(&at.uid().unwrap_or_default()) {
        return Ok(Action::await_change());
    }
    let fresher = fresher(at, ctx);
    let at = fresher.as_ref().unwrap_or(at);
    let pod_name = plan::pod_name(at);
    let cached = ctx
        .pods
        .owned_by(
            &at.namespace().unwrap_or_default(),
            &at.uid().unwrap_or_default(),
        )
        .into_iter()
        .find(|p| *p.name == *pod_name);
    let now = ctx.clock.now();
    let step = plan::decide(at, cached.as_deref(), now);
    let (over, status, next) = match carry_out(at, step, ctx, now).await? {
        Outcome::Write { over, status, next } => (over, status, next),
        Outcome::Then(action) => return Ok(action),
    };
    // A running pod the watch does not show (its reply or event not in yet, or the
    // operator's label taken off it): no event may come, so look again.
    let unwatched =
        cached.is_none() && status.phase == Some(AtPhase::Running) && status.pod_uid.is_some();
    let next = match next {
        Next::Then(_) if unwatched => Next::Then(Action::requeue(UNWATCHED_POD_POLL)),
        other => other,
    };
    if write_status(over.as_deref().unwrap_or(at), &status, ctx)
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
        Next::Until(wake) => {
            ctx.backoff.reset(&at.uid().unwrap_or_default());
            let left = plan::until_due(wake, ctx.clock.now()).unwrap_or_default();
            Action::requeue(left)
        }
        Next::Retry => retry_after(at, ctx),
    })
}

/// The At as this instance's own status write over `at` made it, if the store has not shown
/// that write yet: a reconcile woken by the pod (whose events come first) would otherwise
/// decide from the copy before it, write the same status again, meet a conflict, and tell
/// its events twice.
fn fresher(at: &At, ctx: &Context) -> Option<At> {
    let (uid, seen) = (at.uid()?, at.resource_version()?);
    let written = ctx.at_statuses.written_over(&uid, &seen, Instant::now())?;
    let mut fresher = at.clone();
    fresher.status = Some(written.status);
    fresher.metadata.resource_version = Some(written.version);
    Some(fresher)
}

async fn carry_out(at: &At, step: Step, ctx: &Context, now: Timestamp) -> Result<Outcome> {
    Ok(match step {
        Step::Wait(status, wake) => {
            debug!(phase = ?status.phase, %wake, "looking again later");
            Outcome::record(status, Next::Until(wake))
        }
        Step::Record(status) => Outcome::record(status, Next::Then(Action::await_change())),
        Step::Release(status) => release(at, status, ctx).await?,
        Step::Create => create(at, ctx, now).await?,
        Step::Confirm => {
            let live = read_pod(at, ctx)
                .await?
                .filter(|p| controlled_by(at, p))
                .map(|p| CachedPod::from_pod(&p));
            settle(at, plan::confirmed(at, live.as_ref(), now), ctx).await?
        }
        Step::Discard(uid, then) => match discard(at, &uid.to_string(), ctx).await? {
            true => Box::pin(carry_out(at, *then, ctx, now)).await?,
            false => Outcome::Then(retry_after(at, ctx)),
        },
    })
}

/// Carries out what a pod seen live settles: a record or a release. A gated pod that can
/// never be recorded is deleted, and the next reconcile creates anew if the At is due.
async fn settle(at: &At, step: Step, ctx: &Context) -> Result<Outcome> {
    Ok(match step {
        Step::Release(status) => release(at, status, ctx).await?,
        Step::Record(status) => Outcome::record(status, Next::Then(Action::await_change())),
        Step::Wait(status, wake) => Outcome::record(status, Next::Until(wake)),
        Step::Discard(uid, then) => match (discard(at, &uid.to_string(), ctx).await?, *then) {
            (true, Step::Record(status)) => {
                Outcome::record(status, Next::Then(Action::await_change()))
            }
            _ => Outcome::Then(retry_after(at, ctx)),
        },
        other => unreachable!("a pod seen settles a record, a release or a discard, not {other:?}"),
    })
}

/// Deletes the At's gated pod `uid`, which never ran, as a live read shows it: `true` once
/// nothing of it is left (already gone, or another pod has the name). Someone else may have
/// taken its gate off since a cache showed it (it may have run), so it is deleted only
/// still gated or Pending (never started), and unchanged since the read; `false` otherwise (the next round sees it as
/// it is): deleted, it would let the command run again.
async fn discard(at: &At, uid: &str, ctx: &Context) -> Result<bool> {
    let api = ctx.api::<Pod>(at);
    let name = plan::pod_name(at);
    let live = read_pod(at, ctx).await?;
    let Some(pod) = live.filter(|p| p.uid().as_deref() == Some(uid)) else {
        return Ok(true);
    };
    // Pending and ungated: released by the At past its start deadline, never started.
    let seen = CachedPod::from_pod(&pod);
    if !seen.gated && seen.phase != crate::pod::Phase::Pending {
        warn!(
            pod = name,
            "a pod this At was to delete unreleased was released by someone else; it is not deleted"
        );
        return Ok(false);
    }
    info!(
        pod = name,
        "deleting a pod that never ran and is not to run"
    );
    let version = pod.resource_version();
    match pods::delete_unchanged(&api, &name, uid, version).await {
        Written::Sent | Written::Gone => Ok(true),
        Written::Changed(_) => Ok(false),
        Written::Refused(e) | Written::Unknown(e) => Err(Error::PodApi(e)),
    }
}

/// Creates the pod of a due At, gated: it cannot start until recorded. The name is
/// deterministic, so a create meets any pod already there (an earlier attempt whose reply
/// was lost, a predecessor's): one of this At's is settled as seen, and someone else's is
/// left alone, the At staying PENDING, as it does when the API server refuses the create. A
/// create whose outcome is unknown is an error: the next reconcile creates again, or finds
/// the pod.
async fn create(at: &At, ctx: &Context, now: Timestamp) -> Result<Outcome> {
    // After a failed round, the status write that would have answered 404 may have gone
    // unanswered: on a cache whose At watch is quiet, the pod would be made again each
    // round (found by the search, seed 953).
    if ctx.backoff.is_failing(&at.uid().unwrap_or_default()) && !fresh::exists(at, ctx).await? {
        debug!("the At is gone or being deleted");
        return Ok(Outcome::Then(Action::await_change()));
    }
    let api = ctx.api::<Pod>(at);
    let pod_name = plan::pod_name(at);
    info!(command = %at.spec.command, "schedule due: creating pod");
    let blocked = |reason, message| {
        let status = plan::blocked(at, reason, message, now);
        Ok(Outcome::record(status, Next::Retry))
    };
    let sent = plan::pod_for(at);
    let pod = match pods::create(&api, &sent).await {
        // Still gated, so it never ran: deleted, it is as if refused.
        Created::Hidden { message, .. } => return blocked(plan::REASON_FAILED_CREATE, message),
        Created::Made(made) => {
            if let Some(late) = plan::outcome::lateness(at, ctx.clock.now()) {
                ctx.metrics.at_started(late);
            }
            *made
        }
        Created::Exists(_) => match read_pod(at, ctx).await? {
            Some(pod) if controlled_by(at, &pod) => pod,
            _ => {
                let message = format!(
                    "pod {pod_name} exists and is not controlled by this At; it is left alone, and the command runs once the name is free"
                );
                return blocked(plan::REASON_POD_NAME_TAKEN, message);
            }
        },
        Created::Unknown(e) => return Err(Error::PodApi(e)),
        Created::Refused(e) => {
            let message = format!("creating pod {pod_name}: {}", api_message(&e));
            return blocked(plan::REASON_FAILED_CREATE, message);
        }
    };
    settle(
        at,
        plan::confirmed(at, Some(&CachedPod::from_pod(&pod)), now),
        ctx,
    )
    .await
}

/// Records `status`, which names the pod, then releases that pod (and only that UID) from
/// its gate: from then on it may run.
async fn release(at: &At, status: AtStatus, ctx: &Context) -> Result<Outcome> {
    let Some(written) = write_quietly(at, &status, ctx).await? else {
        return Ok(Outcome::Then(retry_after(at, ctx)));
    };
    let (api, uid) = (ctx.api::<Pod>(at), status.pod_uid.as_deref());
    match pods::ungate(&api, &plan::pod_name(at), uid.unwrap_or_default()).await {
        // Gone, or another pod now has the name: the next reconcile finds the recorded pod
        // gone.
        Written::Sent | Written::Gone => {}
        Written::Changed(e) | Written::Refused(e) | Written::Unknown(e) => {
            return Err(Error::PodApi(e));
        }
    }
    // Told once the pod may run: the events are not what it waits for.
    announce(at, &status, ctx).await;
    Ok(Outcome::Write {
        over: Some(Box::new(written)),
        status,
        next: Next::Then(Action::await_change()),
    })
}

async fn read_pod(at: &At, ctx: &Context) -> Result<Option<Pod>> {
    ctx.api::<Pod>(at)
        .get_opt(&plan::pod_name(at))
        .await
        .map_err(Error::ApiRead)
}

fn controlled_by(at: &At, pod: &Pod) -> bool {
    let uid = at.uid();
    pod.owner_references()
        .iter()
        .any(|r| r.controller == Some(true) && Some(&r.uid) == uid.as_ref())
}

mod status;
use status::{announce, write_quietly, write_status};

#[cfg(test)]
mod tests;
