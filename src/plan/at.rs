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
//! never deleted (the copy read may be stale, the pod recorded) but past a deadline, when no
//! gated pod is released. One made from an older
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
use kube::{Resource, ResourceExt};

use crate::api::decoded::Reported;
use crate::api::{At, AtPhase, AtStatus};
use crate::pod::CachedPod;
use crate::uid::Uid;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Whether the schedule is valid and the current spec is (or was) the one that runs.
pub const CONDITION_SCHEDULED: &str = "Scheduled";
/// How the run went: False while the pod runs, True once DONE.
pub const CONDITION_COMPLETED: &str = "Completed";

pub const REASON_SCHEDULED: &str = "Scheduled";
pub const REASON_INVALID_SCHEDULE: &str = "InvalidSchedule";
/// The At's `timeZone` is no zone the operator knows (CronJob's event reason).
pub const REASON_UNKNOWN_TIME_ZONE: &str = "UnknownTimeZone";
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
            spec: crate::api::AtSpec::shell(String::new(), String::new()),
            status: None,
        }
    }
}

/// The deterministic name of an At's pod: a second create can only fail, so nothing ever
/// runs the command twice, even across operator restarts.
pub fn pod_name(at: &At) -> String {
    format!("{}-pod", at.name_any())
}

pub use crate::api::AT_GATE as GATE;

/// What the shell knows of an At when it decides.
pub struct Seen<'a> {
    /// The At, as this instance last wrote or read it.
    pub at: &'a At,
    /// Its pod (the one of its name that it controls), as the cache shows it.
    pub pod: Option<&'a CachedPod>,
    /// A write found it deleted, though its watch has not said so yet.
    pub gone: bool,
    /// The cache's word that it exists is in doubt (its last reconcile failed): it is read
    /// from the API server before its pod is made.
    pub in_doubt: bool,
    pub now: Timestamp,
}

/// What an At needs next: a request, or what a reconcile ends with.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Record this status and look again at this time, at most [`MAX_WAIT`] from now:
    /// PENDING, not due yet; RUNNING, its command not started, until its start deadline; or
    /// DONE, until its `ttlSecondsAfterFinished` runs out.
    /// A time, not a duration: the wait is armed after the write, and counted from then.
    Wait(AtStatus, Timestamp),
    /// Record this status and look again in [`UNWATCHED_POD_POLL`], on the monotonic clock:
    /// RUNNING with a pod the watch does not show.
    Poll(AtStatus),
    /// Due, with no pod of this At in the cache: create it (gated), after reading the At if
    /// `read_first`; answered by the pod made or found.
    Create { read_first: bool },
    /// Record this status, which names the pod, then release the pod from its gate.
    Release(AtStatus),
    /// RUNNING with its pod recorded, yet the cache shows none, or another (it can lag, or
    /// the pod left the operator's watch): read it live.
    Confirm,
    /// Delete this pod, which never ran (gated, and not to be released; or not started by
    /// its start deadline), then do the step.
    Discard(Uid, Box<Step>),
    /// Delete this pod, the recorded one, whatever it is doing (it ran past the At's active
    /// deadline), then do the step.
    Stop(Uid, Box<Step>),
    /// Delete the At, DONE for its `ttlSecondsAfterFinished`, and its pod with it.
    Expire,
    /// Record this status; nothing else happens until the At or its pod changes.
    Record(AtStatus),
    /// Record this status, which says what stands in the way, and try again with a growing
    /// delay.
    Report(AtStatus),
    /// Nothing to write: the At is gone.
    End,
    /// Nothing written: something changed under a write; try again with a growing delay.
    Again,
}

/// What a request of a [`Step`] came to.
#[derive(Debug, PartialEq)]
pub enum Answer {
    /// The At's pod as the API server has it (made, found by a create, or read live); `None`
    /// if it has none.
    Pod(Option<CachedPod>),
    /// The pod's name is taken by a pod this At does not control.
    Taken,
    /// The create was refused (or admission hid the pod, deleted since), saying why.
    Refused(String),
    /// Read first, the At is gone or being deleted.
    Gone,
    /// The status is recorded and the pod released.
    Released,
    /// The pod is deleted (or stopped).
    Discarded,
    /// A write met a change: the At's version moved on, or the pod to delete was released by
    /// someone else.
    Changed,
}

/// How often a RUNNING At whose pod the watch does not show reads its pod: no event may
/// come (its create's reply or event not in yet, or the operator's label taken off it).
pub const UNWATCHED_POD_POLL: Duration = Duration::from_secs(15);

/// The one step for the At seen.
pub fn decide(seen: &Seen) -> Step {
    if seen.gone {
        // Each pod made for it would be removed by the garbage collector, and that removal
        // would bring the next round (found by the Sieve walkthrough of an At deleted before
        // it is due).
        return Step::End;
    }
    let step = doubting(step_for(seen.at, seen.pod, seen.now), seen.in_doubt);
    summarized(seen, unwatched(seen, ttl::armed(seen.at, step, seen.now)))
}

/// What follows `step`, which came to `answer`. A reconcile makes at most one create and one
/// live read: a pod made or found that calls for another is left to the next round.
pub fn after(seen: &Seen, step: Step, answer: Answer) -> Step {
    let (at, now) = (seen.at, seen.now);
    let next = match (step, answer) {
        (_, Answer::Gone) => Step::End,
        (_, Answer::Changed) => Step::Again,
        (Step::Discard(_, then) | Step::Stop(_, then), Answer::Discarded) => *then,
        (Step::Release(status), Answer::Released) => Step::Record(status),
        (_, Answer::Pod(pod)) => match confirmed(at, pod.as_ref(), now) {
            Step::Discard(uid, then) if !matches!(*then, Step::Record(_)) => {
                Step::Discard(uid, Box::new(Step::Again))
            }
            Step::Create { .. } | Step::Confirm => Step::Again,
            step => step,
        },
        (_, Answer::Taken) => {
            let message = format!(
                "pod {} exists and is not controlled by this At; it is left alone, and the command runs once the name is free",
                pod_name(at)
            );
            Step::Report(blocked(at, REASON_POD_NAME_TAKEN, message, now))
        }
        (_, Answer::Refused(message)) => {
            Step::Report(blocked(at, REASON_FAILED_CREATE, message, now))
        }
        (step, answer) => unreachable!("{step:?} cannot come to {answer:?}"),
    };
    summarized(seen, unwatched(seen, ttl::armed(at, next, now)))
}

/// `step`, each status it records carrying kstatus's conditions and the generation it
/// describes.
fn summarized(seen: &Seen, step: Step) -> Step {
    let done = |status| health::summarized(seen.at, status, seen.now);
    match step {
        Step::Wait(status, wake) => Step::Wait(done(status), wake),
        Step::Poll(status) => Step::Poll(done(status)),
        Step::Release(status) => Step::Release(done(status)),
        Step::Record(status) => Step::Record(done(status)),
        Step::Report(status) => Step::Report(done(status)),
        Step::Discard(uid, then) => Step::Discard(uid, Box::new(summarized(seen, *then))),
        Step::Stop(uid, then) => Step::Stop(uid, Box::new(summarized(seen, *then))),
        other => other,
    }
}

/// `step`, its creates reading the At first if it is in doubt.
fn doubting(step: Step, in_doubt: bool) -> Step {
    match step {
        Step::Create { .. } => Step::Create {
            read_first: in_doubt,
        },
        Step::Discard(uid, then) => Step::Discard(uid, Box::new(doubting(*then, in_doubt))),
        Step::Stop(uid, then) => Step::Stop(uid, Box::new(doubting(*then, in_doubt))),
        other => other,
    }
}

/// `step`, a RUNNING At's record polling while the watch does not show its pod: no event
/// may come. Timed on the monotonic clock: a wall clock stepped back would make a time
/// hours late (sim seed 19101306).
fn unwatched(seen: &Seen, step: Step) -> Step {
    match step {
        Step::Record(status)
            if seen.pod.is_none()
                && status.phase == Some(AtPhase::Running)
                && status.pod_uid.is_some() =>
        {
            Step::Poll(status)
        }
        Step::Discard(uid, then) => Step::Discard(uid, Box::new(unwatched(seen, *then))),
        Step::Stop(uid, then) => Step::Stop(uid, Box::new(unwatched(seen, *then))),
        other => other,
    }
}

/// The next step for `at`, given its pod as the cache shows it, or as read live.
fn step_for(at: &At, pod: Option<&CachedPod>, now: Timestamp) -> Step {
    let previous = at.status.clone().unwrap_or_default();
    if at.meta().deletion_timestamp.is_some() {
        // The garbage collector is removing the pod; starting or finishing now means nothing.
        return Step::Record(previous);
    }
    match (previous.phase, pod) {
        // Not the recorded pod, which a lagging cache may still show gated though it ran.
        (Some(AtPhase::Done), Some(pod))
            if pod.gated() && recorded(&previous, pod) != Some(true) =>
        {
            Step::Discard(pod.uid.clone(), Box::new(step_for(at, None, now)))
        }
        (Some(AtPhase::Done), _) => ttl::finished(
            at,
            AtStatus {
                conditions: after_start_conditions(at, &previous, None, now),
                ..previous
            },
            now,
        ),
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
        (Some(AtPhase::Running), None) => CREATE,
        (None | Some(AtPhase::Pending), None) => match due(&at.spec) {
            Err(why) => Step::Record(blocked(at, why.reason, why.message, now)),
            Ok(due) => match until_due(due, now) {
                Some(left) if left > MAX_WAIT => {
                    Step::Wait(pending(at, scheduled(at, due), now), now + MAX_WAIT)
                }
                Some(_) => Step::Wait(pending(at, scheduled(at, due), now), due),
                None => CREATE,
            },
        },
    }
}

/// A create, the At's existence not in doubt ([`decide`] says whether it is).
const CREATE: Step = Step::Create { read_first: false };

mod deadline;
mod events;
mod health;
pub mod outcome;
mod pod;
mod recorded;
mod schedule;
mod status;
mod ttl;
pub use deadline::REASON_DEADLINE_EXCEEDED;
pub use events::{StatusEvent, status_events};
pub use pod::{gate_index, pod_for};
use recorded::{confirmed, legacy_started, recorded, seen};
pub use schedule::{MAX_WAIT, Unscheduled, due, parse_schedule, until_due, wait_for};
use status::{after_start_conditions, pending, scheduled, vanished};
pub use status::{blocked, progress};
#[cfg(test)]
mod after_tests;
#[cfg(test)]
mod pod_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod verdict_tests;
