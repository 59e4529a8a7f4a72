//! The status writes of this instance whose watch events have not arrived yet.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;

use parking_lot::Mutex;
use serde::Serialize;
use tokio::time::Instant;

/// Status writes whose watch event has not arrived yet. The pod events that a scale-up
/// causes reach the controller before the event of its own status write, so the next
/// reconcile holds the old copy and would send the same status again (an expensive no-op for
/// the API server: a custom resource's patch is decoded, merged and validated in full).
#[derive(Debug)]
pub struct StatusWrites<S> {
    by_uid: Mutex<HashMap<String, StatusWrite<S>>>,
    /// The hash of the status being written to each object, until its answer is recorded.
    sending: Mutex<HashMap<String, u64>>,
}

#[derive(Debug)]
struct StatusWrite<S> {
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

/// The status this instance wrote over a copy, and the version that write made.
#[derive(Clone, Debug, PartialEq)]
pub struct Written<S> {
    pub status: S,
    pub version: String,
}

impl<S> Default for StatusWrites<S> {
    fn default() -> Self {
        Self {
            by_uid: Mutex::default(),
            sending: Mutex::default(),
        }
    }
}

impl<S> StatusWrites<S> {
    /// Long enough for any watch to deliver a write; afterwards the store is trusted.
    const KEEP: Duration = Duration::from_secs(60);

    /// The status this instance wrote over the copy (at resourceVersion `seen`) that a
    /// reconcile holds, fresher than that copy's own, and the version it made. The copy may be
    /// one an earlier write of this instance made: the watch can show a write before its
    /// answer comes, so the store may already hold it when it is recorded.
    pub fn written_over(&self, uid: &str, seen: &str, now: Instant) -> Option<Written<S>>
    where
        S: Clone,
    {
        let by_uid = self.by_uid.lock();
        by_uid
            .get(uid)
            .filter(|w| w.over == seen || w.between.iter().any(|v| v == seen))
            .filter(|w| now.duration_since(w.at) < Self::KEEP)
            .map(|w| Written {
                status: w.status.clone(),
                version: w.written.clone(),
            })
    }

    /// A status about to be written: the watch may show it before the answer comes.
    pub fn sending(&self, uid: &str, status: &S)
    where
        S: Serialize,
    {
        let hash = status_hash(Some(status));
        self.sending.lock().insert(uid.to_string(), hash);
    }

    /// Whether the object's version `resource_version`, whose status hashes to `status`
    /// ([`status_hash`]), is this instance's status write: the version its answer named, or,
    /// before the answer, the status it sent. Taken for another's, it would wake a reconcile
    /// at once; after a failure that reconcile fails again at once, and each failure doubles
    /// the retry delay (four in 30 ms made a PodSet wait four minutes after an API server
    /// restart).
    pub fn wrote(&self, uid: &str, resource_version: &str, status: u64) -> bool {
        let by_uid = self.by_uid.lock();
        by_uid
            .get(uid)
            .is_some_and(|w| w.written == resource_version)
            || self.sending.lock().get(uid) == Some(&status)
    }

    /// The status being written to the object did not land, or may not have: the watch event
    /// that shows it, if it did, is news to this instance.
    pub fn unsent(&self, uid: &str) {
        self.sending.lock().remove(uid);
    }

    /// Drops the records of a deleted object.
    pub fn forget(&self, uid: &str) {
        self.by_uid.lock().remove(uid);
        self.sending.lock().remove(uid);
    }

    /// The watch showed the object at `resource_version`. One of this instance's own writes
    /// on the way to the last is now the copy the store holds; any other version means the
    /// record can serve no reconcile any more (they hold this copy or a newer one), and it is
    /// dropped at once rather than after [`Self::KEEP`], or 10,000 PodSets scaling at once
    /// would hold 10,000 statuses for a minute.
    pub fn observed(&self, uid: &str, resource_version: &str) {
        let mut by_uid = self.by_uid.lock();
        let Some(w) = by_uid.get_mut(uid) else {
            return;
        };
        if w.over == resource_version {
            return;
        }
        match w.between.iter().position(|v| v == resource_version) {
            Some(i) => {
                w.over = w.between.drain(..=i).next_back().expect("drained one");
            }
            None => {
                by_uid.remove(uid);
            }
        }
    }

    /// Records a status written over the copy at resourceVersion `over`, which made version
    /// `written`. A write over the version this instance's last write made continues that
    /// record: a reconcile holding the copy the first went over still learns of the last.
    pub fn record(&self, uid: &str, over: &str, written: &str, status: S, now: Instant) {
        let mut by_uid = self.by_uid.lock();
        self.sending.lock().remove(uid);
        by_uid.retain(|_, w| now.duration_since(w.at) < Self::KEEP);
        let (over, between) = match by_uid.remove(uid) {
            Some(mut last) if last.written == over => {
                last.between.push(last.written);
                (last.over, last.between)
            }
            _ => (over.to_string(), Vec::new()),
        };
        by_uid.insert(
            uid.to_string(),
            StatusWrite {
                over,
                between,
                written: written.to_string(),
                status,
                at: now,
            },
        );
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

    /// The watch can show a status write before its answer comes back.
    #[test]
    fn a_status_seen_before_its_answer_is_this_instances_own() {
        let w = StatusWrites::default();
        let t0 = Instant::now();
        w.sending("o", &3);
        assert!(w.wrote("o", "11", status_hash(Some(&3))), "seen first");
        assert!(!w.wrote("o", "11", status_hash(Some(&4))), "another status");
        assert!(!w.wrote("p", "11", status_hash(Some(&3))), "another object");
        w.record("o", "10", "11", 3, t0);
        assert!(w.wrote("o", "11", status_hash(Some(&3))), "seen after");
        assert!(
            !w.wrote("o", "12", status_hash(Some(&5))),
            "a later write of another"
        );
    }

    /// A write that met a conflict, or no answer, may still have landed (a first send before
    /// the client's re-send): the event that shows it is news, and wakes a reconcile.
    #[test]
    fn a_status_that_did_not_land_as_far_as_this_instance_knows_is_not_its_own() {
        let w = StatusWrites::<i32>::default();
        w.sending("o", &3);
        w.unsent("o");
        assert!(!w.wrote("o", "11", status_hash(Some(&3))));
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
        let w = StatusWrites::default();
        let t0 = Instant::now();
        w.record("o", "10", "11", 3, t0);
        // The store still holds version 10: status 3 is already on its way.
        assert_eq!(
            w.written_over("o", "10", t0),
            Some(Written {
                status: 3,
                version: "11".into()
            })
        );
        // A copy that moved on, another object, or an old record: the store is right.
        assert_eq!(w.written_over("o", "11", t0), None);
        assert_eq!(w.written_over("p", "10", t0), None);
        assert_eq!(
            w.written_over("o", "10", t0 + Duration::from_secs(61)),
            None
        );
        // Old records are dropped as new ones come.
        w.record("p", "1", "2", 1, t0 + Duration::from_secs(61));
        assert_eq!(w.by_uid.lock().len(), 1);
        // And as soon as the watch shows another version of the object.
        w.observed("p", "1");
        assert_eq!(
            w.written_over("p", "1", t0).map(|w| w.status),
            Some(1),
            "still the version it was over"
        );
        w.observed("p", "2");
        assert!(w.by_uid.lock().is_empty());
    }

    /// Issue 45, fault 3: two writes in a row (RUNNING, then DONE) while the store still holds
    /// the copy before both. A reconcile holding that copy, or the one the first write made,
    /// learns of the last; only another's version ends the record.
    #[test]
    fn writes_in_a_row_are_known_over_every_copy_before_the_last() {
        let w = StatusWrites::default();
        let t0 = Instant::now();
        w.record("o", "7", "8", "RUNNING", t0);
        w.record("o", "8", "9", "DONE", t0);
        let last = Some(Written {
            status: "DONE",
            version: "9".into(),
        });
        assert_eq!(w.written_over("o", "7", t0), last);
        // The watch showed the first write before its answer came: the store holds 8.
        assert_eq!(w.written_over("o", "8", t0), last, "seed 4214");
        w.observed("o", "8");
        assert_eq!(w.written_over("o", "7", t0), None, "the store moved on");
        assert_eq!(w.written_over("o", "8", t0), last);
        w.observed("o", "9");
        assert!(w.by_uid.lock().is_empty());
        // A write over someone else's version starts anew.
        w.record("o", "7", "8", "RUNNING", t0);
        w.record("o", "12", "13", "DONE", t0);
        assert_eq!(w.written_over("o", "7", t0), None);
    }
}
