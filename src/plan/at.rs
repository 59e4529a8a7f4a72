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

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use jiff::civil::DateTime;
use jiff::tz::TimeZone;
use k8s_openapi::api::core::v1::{Container, Pod, PodSchedulingGate, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use kube::{Resource, ResourceExt};

use crate::api::decoded::Reported;
use crate::api::{
    AT_COMMAND_CONTAINER, AT_GENERATION_ANNOTATION, At, AtPhase, AtStatus, BUSYBOX_IMAGE,
    MANAGED_BY_LABEL, MANAGED_BY_VALUE,
};
use crate::conditions::{self, Desired};
use crate::plan::owned;
use crate::pod::{CachedPod, Phase};
use crate::uid::Uid;

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

/// The status for our pod, which it records: RUNNING while it runs (or waits to be
/// released), DONE once its command's container ended (a sidecar admission added may run on)
/// or the pod ended without it (a kubelet that refused the pod, a deadline).
pub fn progress(at: &At, pod: &CachedPod, now: Timestamp) -> AtStatus {
    let previous = at.status.clone().unwrap_or_default();
    let generation = at.meta().generation;
    let (completed, done) = match outcome(pod) {
        Some(true) => (finished(REASON_SUCCEEDED, pod), Some(true)),
        Some(false) => (finished(REASON_FAILED, pod), Some(false)),
        None => (running(pod), None),
    };
    let completed = conditions::condition(&previous.conditions, completed, generation, now);
    AtStatus {
        phase: Some(if done.is_some() {
            AtPhase::Done
        } else {
            AtPhase::Running
        }),
        pod_name: Some(pod.name.to_string()),
        pod_uid: Some(pod.uid.to_string()),
        start_time: previous
            .start_time
            .clone()
            .or_else(|| pod.created.map(|s| Time(s.timestamp())))
            .or(Some(Time(now))),
        completion_time: done.map(|_| previous.completion_time.clone().unwrap_or(Time(now))),
        succeeded: done,
        conditions: after_start_conditions(at, &previous, Some(completed), now),
    }
}

/// Whether the command succeeded, once known: its container's exit code, whatever other
/// containers did; else the pod's phase, for a pod that ended with the container never run.
fn outcome(pod: &CachedPod) -> Option<bool> {
    match (pod.command(), pod.phase) {
        (Some(exited), _) => Some(exited.code == 0),
        (None, Phase::Succeeded) => Some(true),
        (None, Phase::Failed) => Some(false),
        _ => None,
    }
}

/// `Completed` while the pod has not ended: Started, or what keeps it from running, in the
/// scheduler's or kubelet's words (Unschedulable, ImagePullBackOff, ...), a Warning.
fn running(pod: &CachedPod) -> Desired<'_> {
    let (reason, message) = match pod.trouble() {
        Some(t) => (&*t.reason, format!("pod {}: {}", pod.name, t.message)),
        None => (
            REASON_STARTED,
            format!("pod {} created; waiting for it to finish", pod.name),
        ),
    };
    Desired {
        type_: CONDITION_COMPLETED,
        status: false,
        reason,
        message,
    }
}

/// DONE as not run: the recorded pod is gone before its end was seen. It may have run, so it
/// is not run again.
fn vanished(at: &At, now: Timestamp) -> AtStatus {
    let previous = at.status.clone().unwrap_or_default();
    let name = previous.pod_name.clone().unwrap_or_else(|| pod_name(at));
    let completed = conditions::condition(
        &previous.conditions,
        Desired {
            type_: CONDITION_COMPLETED,
            status: true,
            reason: REASON_POD_VANISHED,
            message: format!(
                "pod {name} is gone before its end was seen (it was deleted); the command is not run again, so that it never runs twice"
            ),
        },
        at.meta().generation,
        now,
    );
    AtStatus {
        phase: Some(AtPhase::Done),
        pod_name: Some(name),
        completion_time: Some(Time(now)),
        succeeded: Some(false),
        conditions: after_start_conditions(at, &previous, Some(completed), now),
        ..previous
    }
}

/// The status of a due At whose pod could not be created: still PENDING, with why.
pub fn blocked(at: &At, reason: &str, message: String, now: Timestamp) -> AtStatus {
    let want = Desired {
        type_: CONDITION_SCHEDULED,
        status: false,
        reason,
        message,
    };
    pending(at, want, now)
}

fn scheduled(at: &At) -> Desired<'static> {
    Desired {
        type_: CONDITION_SCHEDULED,
        status: true,
        reason: REASON_SCHEDULED,
        message: format!("the command runs at {}", at.spec.schedule),
    }
}

fn pending(at: &At, want: Desired<'_>, now: Timestamp) -> AtStatus {
    let previous = at.status.clone().unwrap_or_default();
    AtStatus {
        phase: Some(AtPhase::Pending),
        conditions: vec![conditions::condition(
            &previous.conditions,
            want,
            at.meta().generation,
            now,
        )],
        ..AtStatus::default()
    }
}

/// `Completed` for a command that ended, with the kubelet's words: its container's reason
/// where it says more than the exit code (OOMKilled, say), the pod's reason and message, and
/// the exit code.
fn finished<'a>(reason: &'a str, pod: &CachedPod) -> Desired<'a> {
    let mut message = format!("pod {} {}", pod.name, reason.to_lowercase());
    let ended = pod.ended().cloned().unwrap_or_default();
    let container = pod
        .command()
        .and_then(|e| e.reason.clone())
        .filter(|r| !["Completed", "Error"].contains(&&**r));
    for detail in [container, ended.reason, ended.message]
        .into_iter()
        .flatten()
    {
        message.push_str(&format!(": {detail}"));
    }
    if let Some(exited) = pod.command() {
        message.push_str(&format!(" (exit code {})", exited.code));
    }
    Desired {
        type_: CONDITION_COMPLETED,
        status: true,
        reason,
        message,
    }
}

/// The conditions once the command started. `Scheduled` keeps the generation that ran; a
/// newer generation means the spec changed afterwards, which an At never acts on, and the
/// condition says so.
pub(super) fn after_start_conditions(
    at: &At,
    previous: &AtStatus,
    completed: Option<Condition>,
    now: Timestamp,
) -> Vec<Condition> {
    let generation = at.meta().generation;
    let started_before = matches!(previous.phase, Some(AtPhase::Running | AtPhase::Done));
    let old = conditions::find(&previous.conditions, CONDITION_SCHEDULED);
    let scheduled = match old {
        Some(c) if started_before && c.observed_generation >= generation => c.clone(),
        Some(_) if started_before => conditions::condition(
            &previous.conditions,
            Desired {
                type_: CONDITION_SCHEDULED,
                status: false,
                reason: REASON_SPEC_CHANGE_IGNORED,
                message: format!(
                    "the spec changed (generation {}) after the command started; an At runs once, so the change is ignored",
                    generation.unwrap_or_default()
                ),
            },
            generation,
            now,
        ),
        _ => conditions::condition(&previous.conditions, scheduled(at), generation, now),
    };
    let completed =
        completed.or_else(|| conditions::find(&previous.conditions, CONDITION_COMPLETED).cloned());
    std::iter::once(scheduled).chain(completed).collect()
}

/// The pod that runs the command once: `sh -c`, so shell syntax works, and
/// `restartPolicy: Never`, so a failing command ends as Failed instead of restarting. Gated
/// ([`GATE`]): no node runs it until the At has recorded it and released it.
pub fn pod_for(at: &At) -> Pod {
    let labels = BTreeMap::from([
        ("app".to_string(), at.name_any()),
        (MANAGED_BY_LABEL.to_string(), MANAGED_BY_VALUE.to_string()),
    ]);
    Pod {
        metadata: ObjectMeta {
            name: Some(pod_name(at)),
            namespace: at.namespace(),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([(
                AT_GENERATION_ANNOTATION.to_string(),
                at.meta().generation.unwrap_or_default().to_string(),
            )])),
            owner_references: Some(vec![owned::controller_ref(at)]),
            ..Default::default()
        },
        spec: Some(PodSpec {
            scheduling_gates: Some(vec![PodSchedulingGate { name: GATE.into() }]),
            restart_policy: Some("Never".into()),
            automount_service_account_token: Some(false),
            security_context: Some(owned::restricted_pod_security_context()),
            containers: vec![Container {
                name: AT_COMMAND_CONTAINER.into(),
                image: Some(at.spec.image.as_deref().unwrap_or(BUSYBOX_IMAGE).into()),
                command: Some(vec!["sh".into(), "-c".into(), at.spec.command.clone()]),
                security_context: Some(owned::restricted_container_security_context()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    }
}

mod deadline;
mod events;
pub mod outcome;
pub use deadline::REASON_DEADLINE_EXCEEDED;
pub use events::{StatusEvent, status_events};
#[cfg(test)]
mod pod_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod verdict_tests;
