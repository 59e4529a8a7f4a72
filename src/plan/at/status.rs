//! The statuses an At reports, from what its pod shows: RUNNING while it runs, DONE with the
//! command's verdict in the kubelet's words, DONE as not run when the pod vanished, PENDING
//! with why.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::Resource;

use super::*;
use crate::api::{At, AtPhase, AtStatus};
use crate::conditions::{self, Desired};
use crate::pod::{CachedPod, Phase};

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
        observed_generation: previous.observed_generation,
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
pub(super) fn vanished(at: &At, now: Timestamp) -> AtStatus {
    let previous = at.status.clone().unwrap_or_default();
    if let Some(stopped) = deadline::stopped(at, &previous, now) {
        return stopped;
    }
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

/// `Scheduled` for an At whose schedule reads: when it runs, in UTC, and as written in its
/// zone.
pub(super) fn scheduled(at: &At, due: Timestamp) -> Desired<'static> {
    let when = due.strftime("%Y-%m-%dT%H:%M:%SZ");
    let message = match &at.spec.time_zone {
        Some(zone) => format!("the command runs at {when} ({} {zone})", at.spec.schedule),
        None => format!("the command runs at {when}"),
    };
    Desired {
        type_: CONDITION_SCHEDULED,
        status: true,
        reason: REASON_SCHEDULED,
        message,
    }
}

pub(super) fn pending(at: &At, want: Desired<'_>, now: Timestamp) -> AtStatus {
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
pub(in crate::plan::at) fn after_start_conditions(
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
        _ => match due(&at.spec) {
            Ok(due) => {
                conditions::condition(&previous.conditions, scheduled(at, due), generation, now)
            }
            Err(why) => conditions::condition(
                &previous.conditions,
                Desired {
                    type_: CONDITION_SCHEDULED,
                    status: false,
                    reason: why.reason,
                    message: why.message,
                },
                generation,
                now,
            ),
        },
    };
    let completed =
        completed.or_else(|| conditions::find(&previous.conditions, CONDITION_COMPLETED).cloned());
    std::iter::once(scheduled).chain(completed).collect()
}
