//! Which pod is the At's: the one it recorded, a gated one it may still record, or one from
//! an operator before the gate; and what follows from seeing it.

use jiff::Timestamp;
use kube::Resource;

use super::{
    AtPhase, AtStatus, CONDITION_COMPLETED, REASON_STARTED, Step, deadline, progress, step_for,
    vanished,
};
use crate::api::At;
use crate::conditions;
use crate::pod::CachedPod;

/// What to do about `pod`, a pod this At controls: the pod it recorded; a gated one of a
/// PENDING At ([`unrecorded`]); one to record and release (created gated by an operator from
/// before this order, which recorded RUNNING first); or, ungated yet never recorded (created
/// by an operator from before the gate), one that may have run, recorded as it is.
pub(super) fn seen(at: &At, pod: &CachedPod, now: Timestamp) -> Step {
    let status = at.status.clone().unwrap_or_default();
    let running = status.phase == Some(AtPhase::Running);
    match recorded(&status, pod) {
        // A gated one never ran, and is never recorded now: it is not left behind.
        Some(false) if pod.gated() => {
            Step::Discard(pod.uid.clone(), Box::new(Step::Record(vanished(at, now))))
        }
        Some(false) => Step::Record(vanished(at, now)),
        None if pod.gated() && !running => unrecorded(at, pod, now),
        _ if pod.gated() => deadline::released(at, pod, progress(at, pod, now), now),
        _ => deadline::deadlines(at, pod, progress(at, pod, now), now),
    }
}

/// Whether `pod` is the pod `status` records; `None` when it records none.
pub(super) fn recorded(status: &AtStatus, pod: &CachedPod) -> Option<bool> {
    let uid = status.pod_uid.as_deref()?;
    Some(pod.uid == *uid)
}

/// A gated pod of an At that shows no pod recorded and is not RUNNING. Made from the At's
/// current generation, it is recorded and released once the At is due, whoever made it (a
/// create whose reply was lost, a predecessor that crashed), and never deleted: the copy
/// read may be stale, the pod recorded. Made from an older one, it can never be recorded,
/// and is deleted unreleased (as is one saying nothing: from an operator version before the
/// annotation, which made pods only for Ats it had recorded RUNNING). Made from a newer one,
/// the copy read is stale, and nothing is done until the newer one is read.
fn unrecorded(at: &At, pod: &CachedPod, now: Timestamp) -> Step {
    let generation = at.meta().generation.unwrap_or_default();
    match pod.made_from() {
        Some(g) if g > generation => Step::Record(at.status.clone().unwrap_or_default()),
        // Not due by this clock (made by a host whose clock ran ahead, or the copy read is
        // stale and the pod recorded already): it stays gated, and is released when due.
        Some(g) if g == generation => match step_for(at, None, now) {
            Step::Create { .. } => deadline::released(at, pod, progress(at, pod, now), now),
            other => other,
        },
        _ => Step::Discard(pod.uid.clone(), Box::new(step_for(at, None, now))),
    }
}

/// What a live read of a RUNNING At's recorded pod settles: `live` is the pod of the At's
/// name if it exists and this At controls it.
pub(super) fn confirmed(at: &At, live: Option<&CachedPod>, now: Timestamp) -> Step {
    match live {
        Some(pod) => seen(at, pod, now),
        None => Step::Record(vanished(at, now)),
    }
}

/// A status written by an operator from before the gate: RUNNING, Started, no UID. Its pod
/// was created ungated and may have run.
pub(super) fn legacy_started(status: &AtStatus) -> bool {
    conditions::find(&status.conditions, CONDITION_COMPLETED)
        .is_some_and(|c| c.reason == REASON_STARTED)
}
