//! The At reconcile: carry out the plan's step (create the pod gated, record it RUNNING and
//! release it, delete a gated pod that can never be recorded, or read the pod live when the
//! cache shows none or another), then write the status if it changed and publish an event per
//! change. `plan::at` says why the command runs at most once, and is never lost to a crash or
//! a lost reply.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::context::{Context, api_message, reconcile_within_deadline, retry_after};
use super::fresh;
use super::pods::{self, Created, Written};
use crate::api::{At, AtStatus};
use crate::client;
use crate::error::{Error, Result};
use crate::plan::at::{self as plan, Answer, Seen, Step};
use crate::pod::CachedPod;
use crate::uid::Uid;

const CONTROLLER: &str = "at";

pub async fn reconcile(at: Arc<At>, ctx: Arc<Context>) -> Result<Action> {
    reconcile_within_deadline(&ctx, CONTROLLER, at.as_ref(), reconcile_at(&at, &ctx)).await
}

/// Only decides the delay: the failure is logged once, where the controller reports it.
pub fn error_policy(at: Arc<At>, _error: &Error, ctx: Arc<Context>) -> Action {
    retry_after(at.as_ref(), &ctx)
}

async fn reconcile_at(at: &At, ctx: &Context) -> Result<Action> {
    let fresher = fresher(at, ctx);
    let at = fresher.as_ref().unwrap_or(at);
    let (uid, pod_name) = (at.uid().unwrap_or_default(), plan::pod_name(at));
    let cached = ctx
        .pods
        .owned_by(&at.namespace().unwrap_or_default(), &uid)
        .into_iter()
        .find(|p| *p.name == *pod_name);
    let seen = Seen {
        at,
        pod: cached.as_deref(),
        gone: ctx.memory.is_gone(&uid),
        in_doubt: ctx.memory.is_failing(&uid),
        now: ctx.clock.now(),
    };
    carry_out(&seen, ctx).await
}

/// Asks the plan for the At seen, carries out each request it makes and tells it the answer,
/// until it says what to record and when to look again.
async fn carry_out(seen: &Seen<'_>, ctx: &Context) -> Result<Action> {
    let at = seen.at;
    // The At as the release's status write left it, for the last write to go over.
    let mut released = None;
    let mut step = plan::decide(seen);
    let (status, wake) = loop {
        let answer = match &step {
            Step::Wait(status, wake) => break (status, Look::At(*wake)),
            Step::Poll(status) => break (status, Look::In(plan::UNWATCHED_POD_POLL)),
            Step::Record(status) => break (status, Look::OnChange),
            Step::Report(status) => {
                write_status(at, status, ctx).await?;
                return Ok(retry_after(at, ctx));
            }
            Step::End => return Ok(Action::await_change()),
            Step::Again => return Ok(retry_after(at, ctx)),
            Step::Create { read_first } => create(at, *read_first, ctx).await?,
            Step::Confirm => Answer::Pod(read_live(at, ctx).await?),
            Step::Release(status) => match release(at, status, ctx).await? {
                Some(written) => {
                    released = Some(written);
                    Answer::Released
                }
                None => Answer::Changed,
            },
            Step::Discard(uid, _) => discard(at, &uid.to_string(), ctx).await?,
            Step::Stop(uid, _) => stop(at, uid, ctx).await?,
            Step::Expire => expire(at, ctx).await?,
        };
        step = plan::after(seen, step, answer);
    };
    if write_status(released.as_ref().unwrap_or(at), status, ctx)
        .await?
        .is_none()
    {
        return Ok(retry_after(at, ctx));
    }
    ctx.memory.succeeded(&at.uid().unwrap_or_default());
    Ok(match wake {
        // Counted from now, after the write, however long that took.
        Look::At(wake) => Action::requeue(plan::wait_for(wake, ctx.clock.now())),
        Look::In(delay) => Action::requeue(delay),
        Look::OnChange => Action::await_change(),
    })
}

/// When an At whose status is recorded is looked at again.
enum Look {
    At(jiff::Timestamp),
    In(std::time::Duration),
    OnChange,
}

/// The At as this instance's own status write over `at` made it, if the store has not shown
/// that write yet: a reconcile woken by the pod (whose events come first) would otherwise
/// decide from the copy before it, write the same status again, meet a conflict, and tell
/// its events twice.
fn fresher(at: &At, ctx: &Context) -> Option<At> {
    let (uid, seen) = (at.uid()?, at.resource_version()?);
    let written = ctx
        .memory
        .written_over::<AtStatus>(&uid, &seen, Instant::now())?;
    let mut fresher = at.clone();
    fresher.status = Some(written.status);
    fresher.metadata.resource_version = Some(written.version);
    Some(fresher)
}

/// Deletes the At's gated pod `uid`, which never ran, as a live read shows it: discarded
/// once nothing of it is left (already gone, or another pod has the name). Someone else may
/// have taken its gate off since a cache showed it (it may have run), so it is deleted only
/// still gated or Pending (never started), and unchanged since the read; `Changed`
/// otherwise (the next round sees it as it is): deleted, it would let the command run again.
async fn discard(at: &At, uid: &str, ctx: &Context) -> Result<Answer> {
    let name = plan::pod_name(at);
    let live = read_pod(at, ctx).await?;
    let Some(pod) = live.filter(|p| p.uid().as_deref() == Some(uid)) else {
        return Ok(Answer::Discarded);
    };
    // Pending and ungated: released by the At past its start deadline, never started.
    let seen = CachedPod::from_pod(&pod);
    if !seen.gated() && seen.phase != crate::pod::Phase::Pending {
        warn!(
            pod = name,
            "a pod this At was to delete unreleased was released by someone else; it is not deleted"
        );
        return Ok(Answer::Changed);
    }
    info!(
        pod = name,
        "deleting a pod that never ran and is not to run"
    );
    let version = pod.resource_version();
    match pods::delete_unchanged(&ctx.api::<Pod>(at), &name, uid, version).await {
        Written::Sent | Written::Gone => Ok(Answer::Discarded),
        Written::Changed(_) => Ok(Answer::Changed),
        Written::Refused(e) | Written::Unknown(e) => Err(Error::PodApi(e)),
    }
}

/// Deletes the At's recorded pod `uid`, whatever it is doing: it ran past the At's active
/// deadline. Gone already, it is stopped as well.
async fn stop(at: &At, uid: &Uid, ctx: &Context) -> Result<Answer> {
    let name = plan::pod_name(at);
    info!(
        pod = name,
        "the command ran past its active deadline: deleting its pod"
    );
    match pods::delete(&ctx.api::<Pod>(at), &name, uid).await {
        Written::Sent | Written::Gone => Ok(Answer::Discarded),
        // Another pod has the name: the recorded one is gone.
        Written::Changed(_) => Ok(Answer::Discarded),
        Written::Refused(e) | Written::Unknown(e) => Err(Error::PodApi(e)),
    }
}

/// Deletes the At, DONE for its TTL, in the foreground (its pod goes first), as this
/// instance last saw it: if it changed since, the next round decides again.
async fn expire(at: &At, ctx: &Context) -> Result<Answer> {
    info!("DONE for its ttlSecondsAfterFinished: deleting the At");
    let uid = at.uid().unwrap_or_default();
    Ok(
        match client::delete_expired(
            &ctx.api::<At>(at),
            &at.name_any(),
            &uid,
            at.resource_version(),
        )
        .await
        {
            Ok(()) => Answer::Gone,
            Err(kube::Error::Api(s)) if s.code == 404 => Answer::Gone,
            Err(kube::Error::Api(s)) if s.code == 409 => Answer::Changed,
            Err(e) => return Err(Error::Expire(e)),
        },
    )
}

/// Creates the pod of a due At, gated: it cannot start until recorded. The name is
/// deterministic, so a create meets any pod already there (an earlier attempt whose reply
/// was lost, a predecessor's), answered as this At's or someone else's. A create whose
/// outcome is unknown is an error: the next reconcile creates again, or finds the pod.
async fn create(at: &At, read_first: bool, ctx: &Context) -> Result<Answer> {
    // After a failed round, the status write that would have answered 404 may have gone
    // unanswered: on a cache whose At watch is quiet, the pod would be made again each
    // round (found by the search, seed 953).
    if read_first && !fresh::exists(at, ctx).await? {
        debug!("the At is gone or being deleted");
        return Ok(Answer::Gone);
    }
    info!(schedule = %at.spec.schedule, "schedule due: creating pod");
    Ok(
        match pods::create(&ctx.api::<Pod>(at), &plan::pod_for(at)).await {
            // Still gated, so it never ran: deleted, it is as if refused.
            Created::Hidden { message, .. } => Answer::Refused(message),
            Created::Made(made) => {
                if let Some(late) = plan::outcome::lateness(at, ctx.clock.now()) {
                    ctx.metrics.at_started(late);
                }
                Answer::Pod(Some(CachedPod::from_pod(&made)))
            }
            Created::Exists(_) => match read_live(at, ctx).await? {
                Some(pod) => Answer::Pod(Some(pod)),
                None => Answer::Taken,
            },
            Created::Unknown(e) => return Err(Error::PodApi(e)),
            Created::Refused(e) => {
                let name = plan::pod_name(at);
                Answer::Refused(format!("creating pod {name}: {}", api_message(&e)))
            }
        },
    )
}

/// Records `status`, which names the pod, then releases that pod (and only that UID) from
/// its gate: from then on it may run. Returns the At as written, or `None` if it changed
/// since it was read (nothing is released).
async fn release(at: &At, status: &AtStatus, ctx: &Context) -> Result<Option<At>> {
    let Some(written) = write_quietly(at, status, ctx).await? else {
        return Ok(None);
    };
    let (api, uid) = (ctx.api::<Pod>(at), status.pod_uid.as_deref());
    let hint = plan::gate_index(at);
    match pods::ungate(&api, &plan::pod_name(at), uid.unwrap_or_default(), hint).await {
        // Gone, or another pod now has the name: the next reconcile finds the recorded pod
        // gone.
        Written::Sent | Written::Gone => {}
        Written::Changed(e) | Written::Refused(e) | Written::Unknown(e) => {
            return Err(Error::PodApi(e));
        }
    }
    // Told once the pod may run: the events are not what it waits for.
    announce(at, status, ctx).await;
    Ok(Some(written))
}

/// The pod of the At's name as the API server has it, if this At controls it.
async fn read_live(at: &At, ctx: &Context) -> Result<Option<CachedPod>> {
    let live = read_pod(at, ctx).await?;
    Ok(live
        .filter(|p| controlled_by(at, p))
        .map(|p| CachedPod::from_pod(&p)))
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
