//! What the operator remembers of each object between its reconciles, one record per object
//! UID behind one lock, dropped by one [`Memory::forget`] when the watch shows the object
//! deleted:
//! - **gone**: a write found it deleted while the watch still shows it. A stale cache must
//!   not keep acting on it: each pod made for a deleted PodSet is removed by the garbage
//!   collector, and that removal brings the next reconcile, a loop until the watch catches up
//!   (a quiet watch is given up only after its read timeout, 75 s).
//! - **round**: the generation of the spec pods were last made for, by this process. A second
//!   round of creates for the same spec replaces pods that went away, and the garbage
//!   collector removing the pods of a PodSet deleted behind a quiet watch looks just the
//!   same; such a round is made only once a read shows the PodSet still there.
//! - **failures**: its failed reconciles in a row, which set its retry delay: 1 s, 2 s, 4 s
//!   ... up to 5 minutes, each jittered so that objects failing together do not retry
//!   together.
//! - **streak**: a PodSet's pod failures in a row, which hold its creates back
//!   ([`plan::podset::replacing`]).
//! - **expected** and **lapsed**: a PodSet's expectations, and the pods its expired
//!   expectations said were made that the watch never showed (`expected.rs`).
//! - **statuses**: its status writes whose watch events have not come (`written.rs`).
//! - **strays**: its pods that left the watch, for its next reconcile (`strays.rs`).
//!
//! A record left empty by a change is dropped at once. A deletion the watch never shows (a
//! relist drops the object without a delete event) is never forgotten, so each part also
//! expires: a record whose parts all did is dropped when another object's record is made.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::strays::Vanished;
use crate::expectations::{Expected, Lapsed};
use crate::jitter::jittered;
use crate::plan::podset::Failure;
use crate::plan::podset::replacing::{Failed, Streak, delay};
use crate::pod::{CachedPod, Phase};
use crate::status_writes::Statuses;
use crate::uid::Uid;

mod expected;
mod strays;
mod unanswered;
mod written;
pub use unanswered::Unanswered;

/// How long a deletion, or a round, is remembered: far past any read timeout. Past that, one
/// round goes unread.
const REMEMBERED: Duration = Duration::from_secs(60 * 60);

/// The reason a PodSet reports, in its `ReplicaFailure` condition and events, while creates
/// wait.
pub const REASON_POD_FAILED: &str = "PodFailed";

#[derive(Default)]
pub struct Memory {
    records: Mutex<HashMap<Uid, Record>>,
}

#[derive(Default, Debug)]
struct Record {
    gone: Option<Instant>,
    round: Option<(i64, Instant)>,
    /// Boxed, as everything below is: only an object whose reconciles fail has them, and
    /// every PodSet's record lasts an hour (its round); at W5's 10,000 PodSets, 16,384
    /// buckets of a map hold each part inline whether it is used or not.
    failures: Option<Box<Failures>>,
    /// Only a PodSet whose pods failed has one.
    streak: Option<Box<Streak>>,
    /// A PodSet's creates and deletes its pod watch is yet to show. Boxed, as the status
    /// writes are: held for seconds, in a record that lasts an hour.
    expected: Option<Box<Expected>>,
    /// What its expired expectations said were made, which the watch never showed.
    lapsed: Option<Box<Lapsed>>,
    /// The status writes whose watch events have not arrived yet.
    statuses: Option<Box<Statuses>>,
    /// A PodSet's pods that vanished from the watch, for its next reconcile to look up.
    #[expect(
        clippy::box_collection,
        reason = "a Vec is 24 bytes inline in every record, a box 8; few records hold strays"
    )]
    strays: Option<Box<Vec<Vanished>>>,
}

#[derive(Debug)]
struct Failures {
    count: u32,
    last: Instant,
}

impl Failures {
    const BASE: Duration = Duration::from_secs(1);
    const MAX: Duration = Duration::from_secs(300);
}

impl Record {
    /// Drops the parts past their time, and says whether nothing is left: a failing object
    /// comes back within the longest delay, so failures idle for twice that are stale. A
    /// streak, strays and a status being sent last as long as their object.
    fn expire(&mut self, now: Instant) -> bool {
        let within = |t: Instant, d: Duration| now.duration_since(t) < d;
        self.gone = self.gone.filter(|t| within(*t, REMEMBERED));
        self.round = self.round.filter(|(_, t)| within(*t, REMEMBERED));
        self.failures = (self.failures.take()).filter(|f| within(f.last, Failures::MAX * 2));
        self.lapse(now);
        self.lapsed = self.lapsed.take().filter(|l| l.kept(now));
        self.statuses.take_if(|s| s.expire(now));
        let no_status = self.statuses.is_none();
        self.gone.is_none()
            && self.round.is_none()
            && self.failures.is_none()
            && self.streak.is_none()
            && self.expected.is_none()
            && self.lapsed.is_none()
            && no_status
            && self.strays.is_none()
    }
}

/// What a PodSet's pods failing comes to now.
pub struct Failing {
    /// Failures counted now, for the first time.
    pub new: Vec<Failed>,
    /// How long creates still wait, and why.
    pub held: Option<(Duration, Failure)>,
}

impl Memory {
    /// Runs `f` on the record of `uid`, made if there is none (dropping the expired), and
    /// drops it if `f` left nothing in it.
    fn with<T>(&self, uid: impl Into<Uid>, now: Instant, f: impl FnOnce(&mut Record) -> T) -> T {
        let (mut records, uid) = (self.records.lock(), uid.into());
        if !records.contains_key(&uid) {
            records.retain(|_, r| !r.expire(now));
        }
        let record = records.entry(uid.clone()).or_default();
        let t = f(record);
        if record.expire(now) {
            records.remove(&uid);
        }
        t
    }

    /// Reads the record of `uid`, if there is one.
    fn read<T>(&self, uid: &str, f: impl FnOnce(&Record) -> Option<T>) -> Option<T> {
        self.records.lock().get(&Uid::from(uid)).and_then(f)
    }

    /// Runs `f` on the record of `uid` if there is one, dropping it if nothing is left.
    fn change<T>(
        &self,
        uid: impl Into<Uid>,
        now: Instant,
        f: impl FnOnce(&mut Record) -> T,
    ) -> Option<T> {
        let (mut records, uid) = (self.records.lock(), uid.into());
        let record = records.get_mut(&uid)?;
        let t = f(record);
        if record.expire(now) {
            records.remove(&uid);
        }
        Some(t)
    }

    /// Drops everything remembered of `uid`: the watch showed it deleted.
    pub fn forget(&self, uid: &str) {
        self.records.lock().remove(&Uid::from(uid));
    }

    /// A write answered that the object `uid` is gone.
    pub fn found_gone(&self, uid: &str, now: Instant) {
        self.with(uid, now, |r| r.gone = Some(now));
    }

    pub fn is_gone(&self, uid: &str) -> bool {
        self.read(uid, |r| r.gone).is_some()
    }

    /// Pods are being made for PodSet `uid` at this generation.
    pub fn made_pods(&self, uid: &str, generation: i64, now: Instant) {
        self.with(uid, now, |r| r.round = Some((generation, now)));
    }

    /// Whether pods were made for PodSet `uid` at this generation already.
    pub fn replaces(&self, uid: &str, generation: i64) -> bool {
        self.read(uid, |r| r.round)
            .is_some_and(|(g, _)| g == generation)
    }

    /// The delay before the next reconcile of `uid`, whose reconcile failed: it doubles with
    /// each failure in a row.
    pub fn retry_delay(&self, uid: &str) -> Duration {
        self.retry_delay_at(uid, Instant::now())
    }

    fn retry_delay_at(&self, uid: &str, now: Instant) -> Duration {
        self.with(uid, now, |r| {
            let f = r.failures.get_or_insert_with(|| {
                Box::new(Failures {
                    count: 0,
                    last: now,
                })
            });
            f.last = now;
            let delay = Failures::BASE
                .saturating_mul(1u32 << f.count.min(16))
                .min(Failures::MAX);
            f.count += 1;
            jittered(delay)
        })
    }

    /// Whether the object's last reconcile failed (and none has succeeded since).
    pub fn is_failing(&self, uid: &str) -> bool {
        self.read(uid, |r| r.failures.as_ref().map(drop)).is_some()
    }

    /// Its reconcile succeeded: the failures in a row are over.
    pub fn succeeded(&self, uid: &str) {
        self.change(uid, Instant::now(), |r| r.failures = None);
    }

    /// Counts the failed pods of `pods`, PodSet `uid`'s. A PodSet none of whose pods ever
    /// failed keeps no streak.
    pub fn saw_pods(&self, uid: &str, pods: &[Arc<CachedPod>], now: Instant) -> Failing {
        let failed = pods.iter().any(|p| p.phase == Phase::Failed);
        if !failed && self.read(uid, |r| r.streak.as_ref().map(drop)).is_none() {
            return Failing {
                new: Vec::new(),
                held: None,
            };
        }
        self.with(uid, now, |r| {
            let streak = r.streak.get_or_insert_default();
            let new = streak.count(pods, now);
            let n = streak.failures();
            let held = streak.holds(now).map(|(left, last)| {
                let message = format!(
                    "pod {} failed ({}); {n} failures in a row: pods are made again {}s after the last",
                    last.pod,
                    last.why,
                    delay(n).as_secs()
                );
                let reason = REASON_POD_FAILED;
                (left, Failure { reason, message })
            });
            Failing { new, held }
        })
    }

    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.records.lock().is_empty()
    }
}

#[cfg(test)]
mod expected_tests;
#[cfg(test)]
mod tests;
