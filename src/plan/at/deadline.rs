//! An At's two deadlines, each counted from its start (`status.startTime`, when RUNNING was
//! recorded), as a Job's. A command that cannot start (its pod never scheduled, its image
//! never pulled) is waited for, saying why (the `Completed` condition, in the scheduler's or
//! kubelet's words), for good by default, as a Job does; with `spec.startDeadlineSeconds` it
//! is given up that long after the start: the pod, never started, is deleted (only while it
//! has not started), and the At ends DONE, failed, `DeadlineExceeded`. With
//! `spec.activeDeadlineSeconds`, as a Job's, whatever the pod is doing that long after the
//! start, it is stopped (deleted) and the At ends the same way.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Resource;

use super::{AtPhase, AtStatus, CONDITION_COMPLETED, MAX_WAIT, Step, after_start_conditions};
use crate::api::At;
use crate::conditions::{self, Desired};
use crate::pod::{CachedPod, Phase};

pub const REASON_DEADLINE_EXCEEDED: &str = "DeadlineExceeded";

/// What follows `status`, the progress of `pod`, the At's recorded pod: it is recorded; and,
/// while it runs under a deadline, looked at again when the first falls due, or, past it, the
/// pod is deleted (stopped, for the active deadline) and the At ends.
pub(super) fn deadlines(at: &At, pod: &CachedPod, status: AtStatus, now: Timestamp) -> Step {
    if status.phase != Some(AtPhase::Running) {
        return Step::Record(status);
    }
    let start = deadline(&status, at.spec.start_deadline_seconds).filter(|_| !started(pod));
    let active = deadline(&status, at.spec.active_deadline_seconds);
    match (start, active) {
        (_, Some(active)) if now >= active => {
            let ended = exceeded(at, &running_too_long(at, &pod.name), status, now);
            Step::Stop(pod.uid.clone(), Box::new(Step::Record(ended)))
        }
        (Some(start), _) if now >= start => {
            let ended = exceeded(at, &never_started(at, pod), status, now);
            Step::Discard(pod.uid.clone(), Box::new(Step::Record(ended)))
        }
        (None, None) => Step::Record(status),
        // A wall-clock time: a clock stepped back would push a far one back as far.
        (start, active) => {
            let first = start.into_iter().chain(active).min().expect("one of them");
            Step::Wait(status, first.min(now + MAX_WAIT))
        }
    }
}

/// The DONE status of an At whose recorded pod is gone while RUNNING past its active
/// deadline: stopped there (the operator deleted it, and did not record why before it went).
pub(super) fn stopped(at: &At, previous: &AtStatus, now: Timestamp) -> Option<AtStatus> {
    let active = deadline(previous, at.spec.active_deadline_seconds)?;
    let name = previous
        .pod_name
        .clone()
        .unwrap_or_else(|| super::pod_name(at));
    (now >= active).then(|| exceeded(at, &running_too_long(at, &name), previous.clone(), now))
}

/// When `seconds` after the At's start falls.
fn deadline(status: &AtStatus, seconds: Option<i64>) -> Option<Timestamp> {
    let started = status.start_time.as_ref()?.0;
    started
        .checked_add(SignedDuration::from_secs(seconds?))
        .ok()
}

/// Whether the pod's containers started: it left Pending, or its command already ended.
fn started(pod: &CachedPod) -> bool {
    pod.phase != Phase::Pending || pod.command().is_some()
}

fn never_started(at: &At, pod: &CachedPod) -> String {
    let seconds = at.spec.start_deadline_seconds.unwrap_or_default();
    let why = pod
        .trouble()
        .map(|t| format!(" ({}: {})", t.reason, t.message))
        .unwrap_or_default();
    format!(
        "the command did not start within {seconds} s of the At's start{why}: pod {} was deleted, and the command is not run",
        pod.name
    )
}

fn running_too_long(at: &At, pod: &str) -> String {
    let seconds = at.spec.active_deadline_seconds.unwrap_or_default();
    format!("the command ran longer than its active deadline of {seconds} s: pod {pod} was deleted")
}

fn exceeded(at: &At, message: &str, previous: AtStatus, now: Timestamp) -> AtStatus {
    let completed = conditions::condition(
        &previous.conditions,
        Desired {
            type_: CONDITION_COMPLETED,
            status: true,
            reason: REASON_DEADLINE_EXCEEDED,
            message: message.to_string(),
        },
        at.meta().generation,
        now,
    );
    AtStatus {
        phase: Some(AtPhase::Done),
        completion_time: Some(Time(now)),
        succeeded: Some(false),
        conditions: after_start_conditions(at, &previous, Some(completed), now),
        ..previous
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{condition, pod, ts};
    use super::*;
    use crate::plan::at::step_for;

    /// A RUNNING At, started at 10:12:00, whose recorded pod is `pod-uid`.
    fn running(deadline: Option<i64>) -> At {
        let mut at = super::super::tests::running();
        at.spec.start_deadline_seconds = deadline;
        at
    }

    #[test]
    fn without_a_deadline_an_unstarted_command_is_waited_for() {
        let step = step_for(
            &running(None),
            Some(&pod(Phase::Pending)),
            ts("2019-04-13T10:12:00Z"),
        );
        assert!(matches!(step, Step::Record(s) if s.phase == Some(AtPhase::Running)));
    }

    #[test]
    fn an_unstarted_command_is_looked_at_again_at_its_deadline_then_given_up() {
        let at = running(Some(300));
        // Four minutes ahead: looked at within a minute (a clock stepped back would push the
        // deadline back as far); half a minute ahead: at the deadline.
        for (now, wake) in [("10:13:00", "10:14:00"), ("10:16:30", "10:17:00")] {
            let now = ts(&format!("2019-04-12T{now}Z"));
            match step_for(&at, Some(&pod(Phase::Pending)), now) {
                Step::Wait(s, at) => {
                    assert_eq!(s.phase, Some(AtPhase::Running));
                    assert_eq!(at, ts(&format!("2019-04-12T{wake}Z")));
                }
                other => panic!("expected a wait for the deadline, got {other:?}"),
            }
        }
        let past = step_for(&at, Some(&pod(Phase::Pending)), ts("2019-04-12T10:17:00Z"));
        let Step::Discard(uid, then) = past else {
            panic!("expected the pod deleted, got {past:?}");
        };
        assert_eq!(uid.to_string(), "pod-uid");
        let Step::Record(ended) = *then else {
            panic!("expected the At ended");
        };
        assert_eq!(ended.phase, Some(AtPhase::Done));
        assert_eq!(ended.succeeded, Some(false));
        assert_eq!(
            condition(&ended, CONDITION_COMPLETED).1,
            REASON_DEADLINE_EXCEEDED
        );
    }

    #[test]
    fn a_started_command_has_no_start_deadline() {
        let at = running(Some(300));
        let step = step_for(&at, Some(&pod(Phase::Running)), ts("2019-04-13T10:12:00Z"));
        assert!(matches!(step, Step::Record(s) if s.phase == Some(AtPhase::Running)));
    }
}
