//! A PodSet's expectations ([`crate::expectations`]) in its record: what its creates and
//! deletes expect the pod watch to show, and what an expired record leaves to look up.

use tokio::time::Instant;

use super::{Memory, Record};
use crate::cache::PodChange;
use crate::expectations::{Answer, Expected, Lapsed, Unsettled, Write};
use crate::plan::podset::Readiness;

impl Record {
    /// An expired record counts as nothing, as the ReplicaSet controller's `SetExpectations`
    /// starts afresh: what it still expected will never be seen, and adding to it would make
    /// every later round wait the full TTL. What it made that the watch never showed is kept.
    pub(super) fn lapse(&mut self, now: Instant) {
        if let Some(expected) = self.expected.take_if(|e| e.expired(now)) {
            Lapsed::keep(&mut self.lapsed, &expected, now);
        }
    }

    /// Runs `f` on the owner's live expectations, made if there are none; met, they are
    /// dropped.
    fn expecting<T>(&mut self, now: Instant, f: impl FnOnce(&mut Expected) -> T) -> T {
        self.lapse(now);
        let expected = self
            .expected
            .get_or_insert_with(|| Box::new(Expected::new(now)));
        let t = f(expected);
        self.expected.take_if(|e| e.met());
        t
    }

    /// Runs `f` on the owner's expectations if there are any, expired or not, then lapses
    /// and drops them as `expecting` does. An answer or a watch event is news of writes
    /// already sent: an expired record takes it before it lapses, so a pod made that the
    /// watch never showed is kept to look up, even when its create is answered after the
    /// TTL.
    fn settling(&mut self, now: Instant, f: impl FnOnce(&mut Expected)) {
        if let Some(expected) = self.expected.as_mut() {
            f(expected);
        }
        self.lapse(now);
        self.expected.take_if(|e| e.met());
    }
}

impl Memory {
    /// Records creates and deletes about to be sent for the owner in `namespace`.
    pub fn expect<'a>(
        &self,
        owner_uid: &str,
        namespace: &str,
        writes: impl IntoIterator<Item = &'a Write>,
        now: Instant,
    ) {
        self.with(owner_uid, now, |r| {
            r.expecting(now, |e| e.expect(namespace, writes))
        });
    }

    /// What the answer to `write` says, sent the first time or again.
    pub fn answered(&self, owner_uid: &str, write: &Write, answer: Answer, now: Instant) {
        self.change(owner_uid, now, |r| {
            r.settling(now, |e| e.record(write, answer))
        });
    }

    /// The owner's creates and deletes to send again, and creates to look up (none once its
    /// record expired), marked as being sent again.
    pub fn to_send_again(&self, owner_uid: &str, now: Instant) -> Unsettled {
        self.change(owner_uid, now, |r| {
            let expected = r.expected.as_mut().filter(|e| !e.expired(now))?;
            Some(expected.to_send_again())
        })
        .flatten()
        .unwrap_or_default()
    }

    /// Lowers expectations by what a pod watch event shows. Only an existing record is
    /// lowered: an owner's pods changing expects nothing of it.
    pub fn observe(&self, touched: &PodChange, now: Instant) {
        self.change(&touched.owner.uid, now, |r| {
            r.settling(now, |e| e.observe(touched))
        });
    }

    /// Satisfied once the watch showed everything expected, or the record expired (it is then
    /// dropped).
    pub fn readiness(&self, owner_uid: &str, now: Instant) -> Readiness {
        self.change(owner_uid, now, |r| {
            r.lapse(now);
            r.expected.as_ref().map(|e| Readiness::Waiting(e.left(now)))
        })
        .flatten()
        .unwrap_or(Readiness::Satisfied)
    }

    /// The pods (name, UID) that the owner's expired records said were made and the watch
    /// never showed, each handed out once, for a TTL after the record expired.
    pub fn take_lapsed(&self, owner_uid: &str, now: Instant) -> Vec<(String, crate::uid::Uid)> {
        self.change(owner_uid, now, |r| r.lapsed.take())
            .flatten()
            .filter(|l| l.kept(now))
            .map(|l| l.pods())
            .unwrap_or_default()
    }
}
