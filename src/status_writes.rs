//! The status writes of this instance whose watch events have not arrived yet, as an
//! object's record keeps them (`controller::memory`). The pod events that a scale-up causes
//! reach the controller before the event of its own status write, so the next reconcile
//! holds the old copy and would send the same status again (an expensive no-op for the API
//! server: a custom resource's patch is decoded, merged and validated in full).

use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use crate::api::{AtStatus, PodSetStatus};

/// Long enough for any watch to deliver a write; afterwards the store is trusted.
const KEEP: Duration = Duration::from_secs(60);

/// An object's status writes: the last that landed, and the one being sent. Held inline:
/// the record that keeps them boxes them whole, as they last a minute and it an hour.
#[derive(Debug, Default)]
pub struct Statuses {
    podset: Option<StatusWrite<PodSetStatus>>,
    at: Option<StatusWrite<AtStatus>>,
    /// The hash of the status being written, until its answer is recorded.
    sending: Option<u64>,
}

/// A status kind, and where an object's [`Statuses`] keep its writes.
pub trait Status: Clone + Serialize {
    fn slot(statuses: &Statuses) -> &Option<StatusWrite<Self>>;
    fn slot_mut(statuses: &mut Statuses) -> &mut Option<StatusWrite<Self>>;
}

impl Status for PodSetStatus {
    fn slot(statuses: &Statuses) -> &Option<StatusWrite<Self>> {
        &statuses.podset
    }
    fn slot_mut(statuses: &mut Statuses) -> &mut Option<StatusWrite<Self>> {
        &mut statuses.podset
    }
}

impl Status for AtStatus {
    fn slot(statuses: &Statuses) -> &Option<StatusWrite<Self>> {
        &statuses.at
    }
    fn slot_mut(statuses: &mut Statuses) -> &mut Option<StatusWrite<Self>> {
        &mut statuses.at
    }
}

#[derive(Debug)]
pub struct StatusWrite<S> {
    /// The resourceVersion of the copy the store holds, which the writes went over.
    over: String,
    /// The versions this instance's earlier writes made on the way to `written`, oldest
    /// first: the store may show each of them before the last.
    between: Vec<String>,
    /// The object's resourceVersion after the write: the next write goes over it.
    written: String,
    status: S,
    at: Instant,
}

impl<S> StatusWrite<S> {
    fn fresh(&self, now: Instant) -> bool {
        now.duration_since(self.at) < KEEP
    }

    /// The watch showed the object at `resource_version`: whether the record can still serve
    /// a reconcile (see [`Statuses::observed`]).
    fn observed(&mut self, resource_version: &str) -> bool {
        if self.over == resource_version {
            return true;
        }
        match self.between.iter().position(|v| v == resource_version) {
            Some(i) => {
                self.over = self.between.drain(..=i).next_back().expect("drained one");
                true
            }
            None => false,
        }
    }
}

/// The status this instance wrote over a copy, and the version that write made.
#[derive(Clone, Debug, PartialEq)]
pub struct Written<S> {
    pub status: S,
    pub version: String,
}

impl Statuses {
    /// The status this instance wrote over the copy (at resourceVersion `seen`) that a
    /// reconcile holds, fresher than that copy's own, and the version it made. The copy may be
    /// one an earlier write of this instance made: the watch can show a write before its
    /// answer comes, so the store may already hold it when it is recorded.
    pub fn written_over<S: Status>(&self, seen: &str, now: Instant) -> Option<Written<S>> {
        S::slot(self)
            .as_ref()
            .filter(|w| w.over == seen || w.between.iter().any(|v| v == seen))
            .filter(|w| w.fresh(now))
            .map(|w| Written {
                status: w.status.clone(),
                version: w.written.clone(),
            })
    }

    /// A status about to be written: the watch may show it before the answer comes.
    pub fn sending<S: Serialize>(&mut self, status: &S) {
        self.sending = Some(status_hash(Some(status)));
    }

    /// Whether the object's version `resource_version`, whose status hashes to `status`
    /// ([`status_hash`]), is this instance's status write, of either kind: the version its
    /// answer named, or, before the answer, the status it sent. Taken for another's, it would
    /// wake a reconcile at once; after a failure that reconcile fails again at once, and each
    /// failure doubles the retry delay (four in 30 ms made a PodSet wait four minutes after
    /// an API server restart).
    pub fn wrote(&self, resource_version: &str, status: u64) -> bool {
        let podset = self.podset.as_ref().map(|w| &w.written);
        let at = self.at.as_ref().map(|w| &w.written);
        [podset, at]
            .into_iter()
            .flatten()
            .any(|v| v == resource_version)
            || self.sending == Some(status)
    }

    /// The status being written did not land, or may not have: the watch event that shows
    /// it, if it did, is news to this instance.
    pub fn unsent(&mut self) {
        self.sending = None;
    }

    /// The watch showed the object at `resource_version`. One of this instance's own writes
    /// on the way to the last is now the copy the store holds; any other version means the
    /// record can serve no reconcile any more (they hold this copy or a newer one), and it is
    /// dropped at once rather than after a minute, or 10,000 PodSets scaling at once would
    /// hold 10,000 statuses for a minute.
    pub fn observed(&mut self, resource_version: &str) {
        self.podset.take_if(|w| !w.observed(resource_version));
        self.at.take_if(|w| !w.observed(resource_version));
    }

    /// Records a status written over the copy at resourceVersion `over`, which made version
    /// `written`. A write over the version this instance's last write made continues that
    /// record: a reconcile holding the copy the first went over still learns of the last.
    pub fn record<S: Status>(&mut self, over: &str, written: &str, status: S, now: Instant) {
        self.sending = None;
        let slot = S::slot_mut(self);
        let (over, between) = match slot.take().filter(|w| w.fresh(now)) {
            Some(mut last) if last.written == over => {
                last.between.push(last.written);
                (last.over, last.between)
            }
            _ => (over.to_string(), Vec::new()),
        };
        *slot = Some(StatusWrite {
            over,
            between,
            written: written.to_string(),
            status,
            at: now,
        });
    }

    /// Drops the writes past their time, and says whether nothing is left.
    pub fn expire(&mut self, now: Instant) -> bool {
        self.podset.take_if(|w| !w.fresh(now));
        self.at.take_if(|w| !w.fresh(now));
        self.podset.is_none() && self.at.is_none() && self.sending.is_none()
    }
}

/// Whether two statuses are the same as the API server keeps them (timestamps to the second).
pub fn alike<S: Serialize>(a: Option<&S>, b: Option<&S>) -> bool {
    serde_json::to_value(a).ok() == serde_json::to_value(b).ok()
}

/// A stable hash (the same in every process and run) of a status.
pub fn status_hash<S: Serialize>(status: Option<&S>) -> u64 {
    let mut hasher = DefaultHasher::new();
    serde_json::to_vec(&status)
        .unwrap_or_default()
        .hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A PodSet status, told apart by its count.
    fn status(n: i32) -> PodSetStatus {
        PodSetStatus {
            available_replicas: n,
            ..PodSetStatus::default()
        }
    }

    fn hash(n: i32) -> u64 {
        status_hash(Some(&status(n)))
    }

    /// The watch can show a status write before its answer comes back.
    #[test]
    fn a_status_seen_before_its_answer_is_this_instances_own() {
        let mut w = Statuses::default();
        let t0 = Instant::now();
        w.sending(&status(3));
        assert!(w.wrote("11", hash(3)), "seen first");
        assert!(!w.wrote("11", hash(4)), "another status");
        w.record("10", "11", status(3), t0);
        assert!(w.wrote("11", hash(3)), "seen after");
        assert!(!w.wrote("12", hash(5)), "a later write of another");
    }

    /// A write that met a conflict, or no answer, may still have landed (a first send before
    /// the client's re-send): the event that shows it is news, and wakes a reconcile.
    #[test]
    fn a_status_that_did_not_land_as_far_as_this_instance_knows_is_not_its_own() {
        let mut w = Statuses::default();
        w.sending(&status(3));
        w.unsent();
        assert!(!w.wrote("11", hash(3)));
        assert!(w.expire(Instant::now()), "nothing left");
    }

    #[test]
    fn statuses_are_alike_as_the_api_server_keeps_their_times() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let at = |ms| Some(Time(jiff::Timestamp::from_millisecond(ms).unwrap()));
        assert!(alike(at(1_000_337).as_ref(), at(1_000_000).as_ref()));
        assert!(!alike(at(1_001_000).as_ref(), at(1_000_000).as_ref()));
        assert!(!alike(at(1_000_000).as_ref(), None));
    }

    #[test]
    fn a_status_written_over_a_stale_copy_is_not_written_again() {
        let mut w = Statuses::default();
        let t0 = Instant::now();
        w.record("10", "11", status(3), t0);
        // The store still holds version 10: status 3 is already on its way.
        assert_eq!(
            w.written_over("10", t0),
            Some(Written {
                status: status(3),
                version: "11".into()
            })
        );
        // A copy that moved on, another kind, or an old record: the store is right.
        assert_eq!(w.written_over::<PodSetStatus>("11", t0), None);
        assert_eq!(w.written_over::<AtStatus>("10", t0), None);
        let later = t0 + KEEP + Duration::from_secs(1);
        assert_eq!(w.written_over::<PodSetStatus>("10", later), None);
        assert!(w.expire(later), "an old record dropped");
        // And as soon as the watch shows another version of the object.
        w.record("1", "2", status(1), t0);
        w.observed("1");
        assert_eq!(
            w.written_over::<PodSetStatus>("1", t0).map(|w| w.status),
            Some(status(1)),
            "still the version it was over"
        );
        w.observed("2");
        assert!(w.expire(t0));
    }

    /// Issue 45, fault 3: two writes in a row (RUNNING, then DONE) while the store still holds
    /// the copy before both. A reconcile holding that copy, or the one the first write made,
    /// learns of the last; only another's version ends the record.
    #[test]
    fn writes_in_a_row_are_known_over_every_copy_before_the_last() {
        let mut w = Statuses::default();
        let t0 = Instant::now();
        w.record("7", "8", status(1), t0);
        w.record("8", "9", status(2), t0);
        let last = Some(Written {
            status: status(2),
            version: "9".into(),
        });
        assert_eq!(w.written_over("7", t0), last);
        // The watch showed the first write before its answer came: the store holds 8.
        assert_eq!(w.written_over("8", t0), last, "seed 4214");
        w.observed("8");
        assert_eq!(
            w.written_over::<PodSetStatus>("7", t0),
            None,
            "the store moved on"
        );
        assert_eq!(w.written_over("8", t0), last);
        w.observed("9");
        assert!(w.expire(t0));
        // A write over someone else's version starts anew.
        w.record("7", "8", status(1), t0);
        w.record("12", "13", status(2), t0);
        assert_eq!(w.written_over::<PodSetStatus>("7", t0), None);
    }
}
