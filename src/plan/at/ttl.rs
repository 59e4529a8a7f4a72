//! A DONE At's time to live, as Job's TTL-after-finished controller keeps a Job's: with
//! `spec.ttlSecondsAfterFinished`, the At is deleted that long after it became DONE, and its
//! pod with it (by the garbage collector, in the foreground: the At goes once its pod is
//! gone). The time counts from `status.completionTime`, as a Job's from its finish.

use jiff::{SignedDuration, Timestamp};

use super::{MAX_WAIT, Step};
use crate::api::{At, AtStatus};

/// What follows `status`, a DONE At's: recorded, then, under a TTL, looked at again when it
/// expires (at most [`MAX_WAIT`] away: the wall clock may be stepped), and deleted once it has.
pub(super) fn finished(at: &At, status: AtStatus, now: Timestamp) -> Step {
    match expiry(at, &status) {
        Some(expires) if now >= expires => Step::Expire,
        Some(expires) => Step::Wait(status, expires.min(now + MAX_WAIT)),
        None => Step::Record(status),
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
    use crate::api::AtPhase;
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
}
