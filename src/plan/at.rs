//! What an At needs, decided without I/O: when its schedule is due, the next step of its
//! PENDING -> RUNNING -> DONE life, the status to report, the events telling that story, and
//! the pod that runs the command.
//!
//! The command runs at most once, and a crash or a lost reply never loses it:
//! 1. the pod is created gated ([`GATE`]), annotated with the At's generation: no node may
//!    run it yet;
//! 2. RUNNING and the pod's UID are recorded in the At (`status.podUID`, reason Started),
//!    under the resourceVersion of a copy of the generation the pod was made from: the spec
//!    that runs is the spec the At had when it was recorded RUNNING;
//! 3. only then is that pod, and only that UID, released.
//!
//! The create comes first because it is what a due At waits for. A gated pod of a PENDING At
//! that holds its current generation is recorded and released once due, whoever made it, and
//! never deleted (the copy read may be stale, the pod recorded). One made from an older
//! generation, or a DONE At's that it did not record, never ran and can never be recorded (a
//! spec edit and DONE are final, and every record is written under the version it read): it
//! is deleted, and made again if the At is due by its spec. A pod of a newer generation than
//! the copy read means the copy is stale: nothing is done until the newer one is read. A
//! recorded pod that is gone ends the At as [`REASON_POD_VANISHED`], and no pod is ever
//! created for it again.
//!
//! An operator from before this order recorded RUNNING first, with no UID, then created the
//! pod: such an At's pod is created (again), and a create that finds one (409) takes it.

use std::time::Duration;

use jiff::Timestamp;
use jiff::civil::DateTime;
use jiff::tz::TimeZone;
use kube::{Resource, ResourceExt};

use crate::api::decoded::Reported;
use crate::api::{At, AtPhase, AtStatus};
use crate::conditions;
use crate::pod::CachedPod;
use crate::uid::Uid;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The only shape `spec.schedule` has (the CRD's pattern enforces it).
const SCHEDULE_FORMAT: &str = "%Y-%m-%dT%H:%M:%SZ";

/// The longest single wait. The wait is timed on the monotonic clock but computed from the
/// wall clock, which can be stepped (NTP, a VM resumed): a look every minute bounds how late a
/// clock stepped back and then corrected can make an At. It costs a reconcile a minute per
/// waiting At, and no request.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// Whether the schedule is valid and the current spec is (or was) the one that runs.
pub const CONDITION_SCHEDULED: &str = "Scheduled";
/// How the run went: False while the pod runs, True once DONE.
pub const CONDITION_COMPLETED: &str = "Completed";

pub const REASON_SCHEDULED: &str = "Scheduled";
pub const REASON_INVALID_SCHEDULE: &str = "InvalidSchedule";
pub const REASON_POD_NAME_TAKEN: &str = "PodNameTaken";
pub const REASON_FAILED_CREATE: &str = "FailedCreate";
pub const REASON_SPEC_CHANGE_IGNORED: &str = "SpecChangeIgnored";
/// RUNNING is recorded and the pod is being created: written by operators from before the
/// pod was created first.
pub const REASON_STARTING: &str = "Starting";
/// The pod exists.
pub const REASON_STARTED: &str = "Started";
pub const REASON_SUCCEEDED: &str = "Succeeded";
pub const REASON_FAILED: &str = "Failed";
pub const REASON_POD_VANISHED: &str = "PodVanished";

impl Reported for At {
    const CONDITION: (&'static str, &'static str) = (CONDITION_SCHEDULED, "False");

    fn placeholder(metadata: ObjectMeta) -> Self {
        At {
            metadata,
            spec: crate::api::AtSpec {
                schedule: String::new(),
                command: String::new(),
                image: None,
                start_deadline_seconds: None,
            },
            status: None,
        }
    }
}

/// Parses `spec.schedule` as a UTC time. The schema's pattern lets through dates that do not
/// exist (February 30th, hour 25); those are refused here, with jiff's explanation.
pub fn parse_schedule(schedule: &str) -> Result<Timestamp, String> {
    DateTime::strptime(SCHEDULE_FORMAT, schedule)
        .and_then(|dt| dt.to_zoned(TimeZone::UTC))
        .map(|z| z.timestamp())
        .map_err(|e| {
            format!("schedule {schedule:?} is not a valid UTC time (YYYY-MM-DDThh:mm:ssZ): {e}")
        })
}

/// How long until `schedule`, or `None` once it is due (a past schedule is due at once).
pub fn until_due(schedule: Timestamp, now: Timestamp) -> Option<Duration> {
    Duration::try_from(schedule.duration_since(now))
        .ok()
        .filter(|d| !d.is_zero())
}

/// The deterministic name of an At's pod: a second create can only fail, so nothing ever
/// runs the command twice, even across operator restarts.
pub fn pod_name(at: &At) -> String {
    format!("{}-pod", at.name_any())
}

/// The scheduling gate an At's pod is created with, and released from once the At has
/// recorded it.
pub const GATE: &str = "cnat.programming-kubernetes.info/recorded";

/// What an At needs next.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Record this status and look again at this time: PENDING, not due yet (the schedule,
    /// or [`MAX_WAIT`] from now); or RUNNING, its command not started, until its start
    /// deadline. A time, not a duration: the wait is armed after the write, and counted from
    /// then.
    Wait(AtStatus, Timestamp),
    /// Due, with no pod of this At in the cache: create it (gated), then record it and
    /// release it ([`made`]).
    Create,
    /// Record this status, which names the pod, then release the pod from its gate.
    Release(AtStatus),
    /// RUNNING with its pod recorded, yet the cache shows none, or another (it can lag, or
    /// the pod left the operator's watch): read it live, then act on [`confirmed`].
    Confirm,
    /// Delete this pod, which never ran (gated, and not to be released; or not started by
    /// its start deadline), then do the step.
    Discard(Uid, Box<Step>),
    /// Record this status; nothing else happens until the At or its pod changes.
    Record(AtStatus),
}

/// The next step for `at`, given its pod as the cache shows it.
pub fn decide(at: &At, pod: Option<&CachedPod>, now: Timestamp) -> Step {
    let previous = at.status.clone().unwrap_or_default();
    if at.meta().deletion_timestamp.is_some() {
        // The garbage collector is removing the pod; starting or finishing now means nothing.
        return Step::Record(previous);
    }
    match (previous.phase, pod) {
        // Not the recorded pod, which a lagging cache may still show gated though it ran.
        (Some(AtPhase::Done), Some(pod)) if pod.gated && recorded(&previous, pod) != Some(true) => {
            Step::Discard(pod.uid.clone(), Box::new(decide(at, None, now)))
        }
        (Some(AtPhase::Done), _) => Step::Record(AtStatus {
            conditions: after_start_conditions(at, &previous, None, now),
            ..previous
        }),
        // Another pod than the one recorded: the cache may still show one that is gone
        // (one this operator deleted unreleased, say) while the recorded one is not in yet.
        (_, Some(pod)) if recorded(&previous, pod) == Some(false) => Step::Confirm,
        // A pod of ours exists, whatever phase a lagging read of the At shows.
        (_, Some(pod)) => seen(at, pod, now),
        (Some(AtPhase::Running), None)
            if previous.pod_uid.is_some() || legacy_started(&previous) =>
        {
            Step::Confirm
        }
        (Some(AtPhase::Running), None) => Step::Create,
        (None | Some(AtPhase::Pending), None) => match parse_schedule(&at.spec.schedule) {
            Err(message) => Step::Record(blocked(at, REASON_INVALID_SCHEDULE, message, now)),
            Ok(due) => match until_due(due, now) {
                Some(left) if left > MAX_WAIT => {
                    Step::Wait(pending(at, scheduled(at), now), now + MAX_WAIT)
                }
                Some(_) => Step::Wait(pending(at, scheduled(at), now), due),
                None => Step::Create,
            },
        },
    }
}

/// What to do about `pod`, a pod this At controls: the pod it recorded; a gated one of a
/// PENDING At ([`unrecorded`]); one to record and release (created gated by an operator from
/// before this order, which recorded RUNNING first); or, ungated yet never recorded (created
/// by an operator from before the gate), one that may have run, recorded as it is.
pub fn seen(at: &At, pod: &CachedPod, now: Timestamp) -> Step {
    let status = at.status.clone().unwrap_or_default();
    let running = status.phase == Some(AtPhase::Running);
    match recorded(&status, pod) {
        // A gated one never ran, and is never recorded now: it is not left behind.
        Some(false) if pod.gated => {
            Step::Discard(pod.uid.clone(), Box::new(Step::Record(vanished(at, now))))
        }
        Some(false) => Step::Record(vanished(at, now)),
        None if pod.gated && !running => unrecorded(at, pod, now),
        _ if pod.gated => Step::Release(progress(at, pod, now)),
        _ => deadline::unstarted(at, pod, progress(at, pod, now), now),
    }
}

/// Whether `pod` is the pod `status` records; `None` when it records none.
fn recorded(status: &AtStatus, pod: &CachedPod) -> Option<bool> {
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
        Some(g) if g == generation => match decide(at, None, now) {
            Step::Create => Step::Release(progress(at, pod, now)),
            other => other,
        },
        _ => Step::Discard(pod.uid.clone(), Box::new(decide(at, None, now))),
    }
}

/// What a live read of a RUNNING At's recorded pod settles: `live` is the pod of the At's
/// name if it exists and this At controls it.
pub fn confirmed(at: &At, live: Option<&CachedPod>, now: Timestamp) -> Step {
    match live {
        Some(pod) => seen(at, pod, now),
        None => Step::Record(vanished(at, now)),
    }
}

/// A status written by an operator from before the gate: RUNNING, Started, no UID. Its pod
/// was created ungated and may have run.
fn legacy_started(status: &AtStatus) -> bool {
    conditions::find(&status.conditions, CONDITION_COMPLETED)
        .is_some_and(|c| c.reason == REASON_STARTED)
}

mod deadline;
mod events;
pub mod outcome;
mod pod;
mod status;
pub use deadline::REASON_DEADLINE_EXCEEDED;
pub use events::{StatusEvent, status_events};
pub use pod::pod_for;
use status::{after_start_conditions, pending, scheduled, vanished};
pub use status::{blocked, progress};
#[cfg(test)]
mod pod_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod verdict_tests;
