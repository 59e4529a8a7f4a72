//! A DONE At's time to live, as Job's TTL-after-finished controller keeps a Job's: with
//! `spec.ttlSecondsAfterFinished`, the At is deleted that long after it became DONE, and its
//! pod with it (by the garbage collector, in the foreground: the At goes once its pod is
//! gone). The time counts from `status.completionTime`, as a Job's from its finish.

use jiff::{SignedDuration, Timestamp};

use kube::Resource;

use super::{MAX_WAIT, Step};
use crate::api::{At, AtPhase, AtStatus};

/// What follows `status`, a DONE At's: recorded, then, under a TTL, looked at again when it
/// expires (at most [`MAX_WAIT`] away: the wall clock may be stepped), and deleted once it has.
pub(super) fn finished(at: &At, status: AtStatus, now: Timestamp) -> Step {
    match expiry(at, &status) {
        Some(expires) if now >= expires => Step::Expire,
        Some(expires) => Step::Wait(status, expires.min(now + MAX_WAIT)),
        None => Step::Record(status),
    }
}

/// `step`, a DONE status it records, under a TTL, looking again when the TTL runs out (at
/// most [`MAX_WAIT`] away): nothing else may wake the At that has just become DONE. Its own
/// status writes wake nothing (the watch has a generation predicate), and its pod may send
/// no further event: the pod an operator finds ended as it starts ended before it. An At
/// being deleted is only recorded: its deletion is under way, and a look would find it so.
pub(super) fn armed(at: &At, step: Step, now: Timestamp) -> Step {
    match step {
        Step::Record(status)
            if status.phase == Some(AtPhase::Done) && at.meta().deletion_timestamp.is_none() =>
        {
            match expiry(at, &status) {
                Some(expires) => Step::Wait(status, expires.min(now + MAX_WAIT)),
                None => Step::Record(status),
            }
        }
        Step::Discard(uid, then) => Step::Discard(uid, Box::new(armed(at, *then, now))),
        Step::Stop(uid, then) => Step::Stop(uid, Box::new(armed(at, *then, now))),
        other => other,
    }
}

/// When a DONE At expires: its completion plus its TTL.
fn expiry(at: &At, status: &AtStatus) -> Option<Timestamp> {
    let ttl = at.spec.ttl_seconds_after_finished?;
    let done = status.completion_time.as_ref()?.0;
    done.checked_add(SignedDuration::from_secs(i64::from(ttl)))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::super::tests::{at_with, ts};
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn done(ttl: Option<i32>) -> (At, AtStatus) {
        let status = AtStatus {
            phase: Some(AtPhase::Done),
            succeeded: Some(true),
            completion_time: Some(Time(ts("2019-04-12T10:12:00Z"))),
            ..Default::default()
        };
        let mut at = at_with(Some(status.clone()));
        at.spec.ttl_seconds_after_finished = ttl;
        (at, status)
    }

    #[test]
    fn a_done_at_stays_without_a_ttl() {
        let (at, status) = done(None);
        let later = ts("2029-04-12T10:12:00Z");
        assert_eq!(finished(&at, status.clone(), later), Step::Record(status));
    }

    #[test]
    fn a_done_at_is_deleted_once_its_ttl_has_passed_and_looked_at_until_then() {
        let (at, status) = done(Some(90));
        let wait = |now| finished(&at, status.clone(), ts(now));
        assert_eq!(
            wait("2019-04-12T10:12:10Z"),
            Step::Wait(status.clone(), ts("2019-04-12T10:13:10Z")),
            "a minute at most"
        );
        assert_eq!(
            wait("2019-04-12T10:13:00Z"),
            Step::Wait(status.clone(), ts("2019-04-12T10:13:30Z"))
        );
        assert_eq!(wait("2019-04-12T10:13:30Z"), Step::Expire);
        let (at, status) = done(Some(0));
        assert_eq!(
            finished(&at, status, ts("2019-04-12T10:12:00Z")),
            Step::Expire
        );
    }

    /// The reconcile that makes an At DONE under a TTL looks again when it runs out: no event
    /// may come (real_node's a_ttl_holds_for_an_at_that_ended_while_no_operator_ran found the
    /// At recorded DONE by an operator that had just started, its pod long ended, kept past
    /// its TTL until the resync). Being deleted, it is only recorded.
    #[test]
    fn an_at_that_becomes_done_under_a_ttl_is_looked_at_when_it_runs_out() {
        use super::super::tests::{exited, running};
        use super::super::{Seen, decide};
        use crate::pod::Phase;
        let mut at = running();
        at.spec.ttl_seconds_after_finished = Some(5);
        let ended = exited(Phase::Succeeded, 0);
        let now = ts("2019-04-12T10:13:00Z");
        let seen = |at: &At| {
            decide(&Seen {
                at,
                pod: Some(&ended),
                gone: false,
                in_doubt: false,
                now,
            })
        };
        let Step::Wait(done, wake) = seen(&at) else {
            panic!("the DONE At is not looked at again");
        };
        assert_eq!(done.phase, Some(AtPhase::Done));
        assert_eq!(wake, ts("2019-04-12T10:13:05Z"));
        at.status = Some(done);
        at.metadata.deletion_timestamp = Some(Time(ts("2019-04-12T10:13:05Z")));
        assert!(matches!(seen(&at), Step::Record(_)));
    }
}
