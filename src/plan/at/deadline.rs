//! A command that cannot start: its pod is never scheduled, or its image never pulled. The
//! At says why while it waits (the `Completed` condition, in the scheduler's or kubelet's
//! words), for good by default, as a Job does. With `spec.startDeadlineSeconds` it gives up
//! once the command has not started that long after the At started: the pod, never started,
//! is deleted, and the At ends DONE, failed, `DeadlineExceeded` (issue 45, fault 8). A pod
//! that starts in the moment before its delete is stopped: the message says the pod was
//! deleted, as a Job's `activeDeadlineSeconds` stops what runs.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Resource;

use super::{AtPhase, AtStatus, CONDITION_COMPLETED, MAX_WAIT, Step, after_start_conditions};
use crate::api::At;
use crate::conditions::{self, Desired};
use crate::pod::{CachedPod, Phase};

pub const REASON_DEADLINE_EXCEEDED: &str = "DeadlineExceeded";

/// What follows `status`, the progress of `pod`, the At's recorded pod: it is recorded; and,
/// while the command has not started under a start deadline, looked at again at the deadline,
/// or, past it, the pod is deleted and the At ends.
pub(super) fn unstarted(at: &At, pod: &CachedPod, status: AtStatus, now: Timestamp) -> Step {
    let deadline = deadline(at, &status);
    match deadline {
        Some(deadline) if status.phase == Some(AtPhase::Running) && !started(pod) => {
            if now < deadline {
                // A wall-clock time: a clock stepped back would push a far one back as far.
                Step::Wait(status, deadline.min(now + MAX_WAIT))
            } else {
                let ended = exceeded(at, pod, status, now);
                Step::Discard(pod.uid.clone(), Box::new(Step::Record(ended)))
            }
        }
        _ => Step::Record(status),
    }
}

/// When the command must have started by: the At's start plus its start deadline.
fn deadline(at: &At, status: &AtStatus) -> Option<Timestamp> {
    let seconds = at.spec.start_deadline_seconds?;
    let started = status.start_time.as_ref()?.0;
    started.checked_add(SignedDuration::from_secs(seconds)).ok()
}

/// Whether the pod's containers started: it left Pending, or its command already ended.
fn started(pod: &CachedPod) -> bool {
    pod.phase != Phase::Pending || pod.command().is_some()
}

fn exceeded(at: &At, pod: &CachedPod, previous: AtStatus, now: Timestamp) -> AtStatus {
    let seconds = at.spec.start_deadline_seconds.unwrap_or_default();
    let why = pod
        .trouble()
        .map(|t| format!(" ({}: {})", t.reason, t.message))
        .unwrap_or_default();
    let completed = conditions::condition(
        &previous.conditions,
        Desired {
            type_: CONDITION_COMPLETED,
            status: true,
            reason: REASON_DEADLINE_EXCEEDED,
            message: format!(
                "the command did not start within {seconds} s of the At's start{why}: pod {} was deleted, and the command is not run",
                pod.name
            ),
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
    use super::super::tests::{at_with, condition, pod, ts};
    use super::*;
    use crate::plan::at::step_for;

    /// A RUNNING At, started at 10:12:00, whose recorded pod is `pod-uid`.
    fn running(deadline: Option<i64>) -> At {
        let mut at = at_with(Some(AtStatus {
            phase: Some(AtPhase::Running),
            pod_name: Some("example-at-pod".into()),
            pod_uid: Some("pod-uid".into()),
            start_time: Some(Time(ts("2019-04-12T10:12:00Z"))),
            ..Default::default()
        }));
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
