//! The PodSet reconcile: act on the plan (respecting expectations), then write the status if
//! it changed.

use std::sync::Arc;
use tokio::time::Instant;

use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};

use act::act;

use super::context::{Context, publish, reconcile_within_deadline, retry_after};
use super::memory::{Failing, REASON_POD_FAILED};
use super::{fresh, strays};
use crate::api::PodSet;
use crate::error::{Error, Result};
use crate::plan::podset::Readiness;
use crate::plan::podset::{self as plan, Next, Outcome, Plan, Seen, Step};
use crate::pod::CachedPod;
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
        || ctx.memory.readiness(&uid, Instant::now()),
        || ctx.pods.owned_by(&namespace, &uid),
    );
    let failing = ctx.memory.saw_pods(&uid, &pods, Instant::now());
    let step = plan::decide(&Seen {
        replicas: ps.spec.replicas,
        deleting: ps.meta().deletion_timestamp.is_some(),
        gone: ctx.memory.is_gone(&uid),
        in_doubt: doubtful(ps, ctx),
        readiness: &readiness,
        pods: &pods,
        held: failing.held.as_ref().map(|(left, _)| *left),
    });
    if step.reads_first() && !fresh::exists(ps, ctx).await? {
        return Ok(Action::await_change());
    }
    if step != Step::AwaitChange {
        report_failures(ps, &failing, ctx).await;
        for (name, pod) in ctx.memory.take_lapsed(&uid, Instant::now()) {
            ctx.memory.suspect(&Uid::from(uid.as_str()), &name, &pod);
        }
        strays::release(ps, ctx).await?;
    }
    let outcome = match step {
        Step::AwaitChange => return Ok(Action::await_change()),
        Step::Report => Outcome::Stopped,
        Step::SendAgain { .. } => settle::settle(ps, ctx).await,
        Step::Hold { trim, .. } => match (act(ps, Plan::Steady, &trim, ctx).await, failing.held) {
            (Outcome::Succeeded, Some((left, why))) => Outcome::Held(why, left),
            (outcome, _) => outcome,
        },
        Step::Act { plan, trim, .. } => {
            if let Plan::Create(_) = plan {
                ctx.memory.made_pods(&uid, generation(ps), Instant::now());
            }
            act(ps, plan, &trim, ctx).await
        }
    };
    let now = ctx.memory.readiness(&uid, Instant::now());
    let after = plan::after(&outcome, &readiness, &now);
    if after.write_status {
        // Read again: the watch may have shown this reconcile's own creates by now.
        status::write(ps, &ctx.pods.owned_by(&namespace, &uid), &outcome, ctx).await?;
    }
    Ok(match after.next {
        Next::Retry => retry_after(ps, ctx),
        Next::In(delay) => Action::requeue(delay),
        // The resync sweep looks at it again (`controller::resync`): no timer of its own.
        Next::Resync => {
            ctx.memory.succeeded(&uid);
            Action::await_change()
        }
    })
}

/// A Warning for the pods counted failed now, naming the last: the PodSet's creates wait.
async fn report_failures(ps: &PodSet, failing: &Failing, ctx: &Context) {
    let Some((_, why)) = failing.held.as_ref().filter(|_| !failing.new.is_empty()) else {
        return;
    };
    let note = why.message.clone();
    publish(
        ps,
        ctx,
        EventType::Warning,
        REASON_POD_FAILED,
        "Replace",
        note,
    )
    .await;
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
    ctx.memory.is_failing(&uid) || ctx.memory.replaces(&uid, generation(ps))
}

fn generation(ps: &PodSet) -> i64 {
    ps.meta().generation.unwrap_or_default()
}

mod act;
mod calls;
mod settle;
mod status;
#[cfg(test)]
mod tests;
