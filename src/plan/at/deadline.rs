//! An At's two deadlines, each counted from its start (`status.startTime`, when RUNNING was
//! recorded), as a Job's. A command that cannot start (its pod never scheduled, its image
//! never pulled) is waited for, saying why (the `Completed` condition, in the scheduler's or
//! kubelet's words), for good by default, as a Job does; with `spec.startDeadlineSeconds` it
//! is given up that long after the start: the pod, never started, is deleted (only while it
//! has not started), and the At ends DONE, failed, `DeadlineExceeded`. With
//! `spec.activeDeadlineSeconds`, as a Job's, whatever the pod is doing that long after the
//! start, it is stopped (deleted) and the At ends the same way; a run that ended after it
//! (seen late: the operator was down) ends so too, one that ended by it keeps its verdict.
//! Past either deadline, a gated pod is not released: it is deleted, and the At ends so.

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
/// pod is deleted (stopped, for the active deadline) and the At ends. A run that ended is
/// judged by its active deadline first, as a Job is ([`ended_past`]).
pub(super) fn deadlines(at: &At, pod: &CachedPod, status: AtStatus, now: Timestamp) -> Step {
    let active = deadline(&status, at.spec.active_deadline_seconds);
    if status.phase == Some(AtPhase::Done) {
        return match active {
            Some(active) if ended_past(pod, active, now) => stopped_at(at, pod, status, now),
            _ => Step::Record(status),
        };
    }
    if status.phase != Some(AtPhase::Running) {
        return Step::Record(status);
    }
    let start = deadline(&status, at.spec.start_deadline_seconds).filter(|_| !started(pod));
    match (start, active) {
        (_, Some(active)) if now >= active => stopped_at(at, pod, status, now),
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

/// The release of `pod`, gated, which `status` records: unless a deadline has passed, as a
/// Job starts no pod past its own. Then the pod, which never ran, is deleted unreleased, and
/// the At ends.
pub(super) fn released(at: &At, pod: &CachedPod, status: AtStatus, now: Timestamp) -> Step {
    let past = |seconds| deadline(&status, seconds).is_some_and(|d| now >= d);
    let why = if past(at.spec.active_deadline_seconds) {
        not_released(at, pod)
    } else if past(at.spec.start_deadline_seconds) {
        never_started(at, pod)
    } else {
        return Step::Release(status);
    };
    let ended = exceeded(at, &why, status, now);
    Step::Discard(pod.uid.clone(), Box::new(Step::Record(ended)))
}

/// Whether the run of `pod`, which ended, ended past its active deadline `active`. A Job is
/// judged when its controller looks: past its deadline, it is `DeadlineExceeded` whatever its
/// pods did. An At's run is judged by when it ended, where the kubelet says so (its command's
/// `finishedAt`, to the second: a run stamped with the deadline's second ended by it), so a
/// run that ended in time keeps its verdict however late the operator sees it; with no such
/// time (the pod ended without its command's container), as a Job, by `now`.
fn ended_past(pod: &CachedPod, active: Timestamp, now: Timestamp) -> bool {
    match pod.command().and_then(|c| c.finished) {
        Some(finished) => finished.timestamp() > active,
        None => now >= active,
    }
}

/// `pod` stopped (deleted) for running past its active deadline, then the At ended.
fn stopped_at(at: &At, pod: &CachedPod, status: AtStatus, now: Timestamp) -> Step {
    let ended = exceeded(at, &running_too_long(at, &pod.name), status, now);
    Step::Stop(pod.uid.clone(), Box::new(Step::Record(ended)))
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

fn not_released(at: &At, pod: &CachedPod) -> String {
    let seconds = at.spec.active_deadline_seconds.unwrap_or_default();
    format!(
        "the command was not started within its active deadline of {seconds} s: pod {} was deleted, and the command is not run",
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

    /// A RUNNING At, started at 10:12:00, with an active deadline of a minute: 10:13:00.
    fn active() -> At {
        let mut at = super::super::tests::running();
        at.spec.active_deadline_seconds = Some(60);
        at
    }

    /// A pod that ended in `phase`, its command's container with `code` at `finished`.
    fn ended(phase: Phase, code: i32, finished: Option<&str>) -> CachedPod {
        let mut pod = super::super::tests::exited(phase, code);
        let notes = pod.notes.as_mut().expect("exited has notes");
        notes.command.as_mut().expect("a command").finished =
            finished.map(|t| ts(&format!("2019-04-12T{t}Z")).into());
        pod
    }

    /// The step's pod deleted (`discard`: unreleased; else stopped), then the At DONE,
    /// failed, `DeadlineExceeded`.
    fn exceeded_by(step: Step, discard: bool) {
        let (uid, then) = match step {
            Step::Discard(uid, then) if discard => (uid, then),
            Step::Stop(uid, then) if !discard => (uid, then),
            other => panic!("expected the pod deleted (unreleased: {discard}), got {other:?}"),
        };
        assert_eq!(uid.to_string(), "pod-uid");
        let Step::Record(done) = *then else {
            panic!("expected the At ended, got {then:?}");
        };
        assert_eq!(
            (done.phase, done.succeeded),
            (Some(AtPhase::Done), Some(false))
        );
        assert_eq!(
            condition(&done, CONDITION_COMPLETED),
            ("True", REASON_DEADLINE_EXCEEDED)
        );
    }

    /// Sim seeds 6 and 8: a run that ended past its deadline, seen once it had ended (the
    /// operator down at the deadline), got the run's verdict.
    #[test]
    fn a_run_that_ended_past_its_active_deadline_is_stopped_there() {
        let at = active();
        for pod in [
            ended(Phase::Succeeded, 0, Some("10:13:01")),
            ended(Phase::Failed, 1, Some("10:13:10")),
            ended(Phase::Running, 0, Some("10:13:10")), // a sidecar runs on
        ] {
            exceeded_by(step_for(&at, Some(&pod), ts("2019-04-12T10:13:30Z")), false);
        }
    }

    /// What the kubelet stamped settles it: a run that ended by its deadline (stamped to the
    /// second: by the deadline's second) keeps its verdict, however late it is seen.
    #[test]
    fn a_run_that_ended_by_its_active_deadline_keeps_its_verdict() {
        let at = active();
        for (pod, succeeded) in [
            (ended(Phase::Succeeded, 0, Some("10:12:59")), true),
            (ended(Phase::Failed, 2, Some("10:13:00")), false),
        ] {
            let done =
                super::super::tests::record(step_for(&at, Some(&pod), ts("2019-04-12T11:00:00Z")));
            assert_eq!(
                (done.phase, done.succeeded),
                (Some(AtPhase::Done), Some(succeeded))
            );
        }
    }

    /// With no time the run ended (a pod that ended without its command's container, say,
    /// refused by its kubelet), it is judged as a Job is, when seen.
    #[test]
    fn a_run_that_ended_at_no_known_time_is_judged_when_seen() {
        let at = active();
        let failed = pod(Phase::Failed);
        let before = step_for(&at, Some(&failed), ts("2019-04-12T10:12:59Z"));
        let done = super::super::tests::record(before);
        assert_eq!(
            condition(&done, CONDITION_COMPLETED).1,
            super::super::REASON_FAILED
        );
        exceeded_by(
            step_for(&at, Some(&failed), ts("2019-04-12T10:13:00Z")),
            false,
        );
        let unstamped = ended(Phase::Succeeded, 0, None);
        exceeded_by(
            step_for(&at, Some(&unstamped), ts("2019-04-12T10:13:00Z")),
            false,
        );
    }

    /// `at`'s gated pod released at `before`, and at `past` deleted unreleased, the At ended.
    fn released_until(at: &At, before: &str, past: &str) {
        let gated = super::super::pod_tests::gated();
        let at_time = |t: &str| step_for(at, Some(&gated), ts(&format!("2019-04-12T{t}Z")));
        assert!(matches!(at_time(before), Step::Release(_)), "at {before}");
        exceeded_by(at_time(past), true);
    }

    /// Sim seed 94: a recorded pod released (its release lost, or the operator down) after
    /// its deadline ran its command anyway. Past a deadline it is deleted unreleased.
    #[test]
    fn a_recorded_pod_still_gated_past_a_deadline_is_not_released() {
        released_until(&active(), "10:12:59", "10:13:00");
        released_until(&running(Some(30)), "10:12:29", "10:12:30");
    }

    /// A PENDING At's gated pod, made at 10:12:01, is not released once its run's start (the
    /// pod's creation) is more than its active deadline ago.
    #[test]
    fn an_unrecorded_gated_pod_past_the_deadline_is_not_released() {
        let mut at = super::super::tests::at_with(None);
        at.spec.active_deadline_seconds = Some(60);
        released_until(&at, "10:13:00", "10:13:01");
    }
}
