//! What this process knows of the creates of At pods, for Ats recorded RUNNING whose pod it
//! cannot see. Kept for the life of the process (across its leadership terms), in memory,
//! and timed on the monotonic clock: a verdict that the command will not run rests on what
//! this process saw and sent, never on another host's wall clock.
//!
//! - An At this process recorded RUNNING (its `startTime` matches) and whose create it has not
//!   sent: nothing can land, and the create is sent now. (Its RUNNING write's reply may have
//!   been lost: the write landed, and this process knows it sent no pod. Only the writer of a
//!   RUNNING ever creates its pod, so no other process did either.)
//! - Otherwise a create may still land (this process's, or another's: another leader's
//!   writes stopped at its fence, before this process's term began), for
//!   [`plan::at::A_CREATE_MAY_LAND_FOR`](crate::plan::at::A_CREATE_MAY_LAND_FOR) after the
//!   later of this process's first look at that RUNNING and the end of its own last create.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::leader::fence::DEPARTED;
use crate::plan::at::Creates;
use crate::uid::Uid;

#[derive(Default)]
pub struct AtCreates {
    by_at: Mutex<HashMap<Uid, Record>>,
}

#[derive(Debug)]
struct Record {
    /// The `startTime` (in seconds) of the RUNNING this record is about.
    start_time: Option<i64>,
    /// Whether this process wrote that RUNNING (or tried to).
    ours: bool,
    /// When this process's last create of the pod ended (answered, or dropped); `None` if it
    /// sent none that may have acted.
    sent: Option<Instant>,
    first_seen: Instant,
}

/// Records kept this long at most: an At is long DONE by then, or looked at anew.
const KEEP: std::time::Duration = std::time::Duration::from_secs(3600);

impl AtCreates {
    /// This process is about to record the At RUNNING with this `startTime`; no create of
    /// it is sent yet.
    pub fn running(&self, at: &Uid, start_time: i64, now: Instant) {
        let mut by_at = self.by_at.lock();
        by_at.retain(|_, r| now.saturating_duration_since(r.first_seen) < KEEP);
        let record = Record {
            ours: true,
            ..Record::new(Some(start_time), now)
        };
        by_at.insert(at.clone(), record);
    }

    /// A create of the At's pod ended at `now`: answered, or dropped unanswered. Either way
    /// it may have left, and may still land.
    pub fn sent(&self, at: &Uid, now: Instant) {
        let mut by_at = self.by_at.lock();
        let record = by_at
            .entry(at.clone())
            .or_insert_with(|| Record::new(None, now));
        record.sent = Some(now);
    }

    /// What is known of the creates of an At recorded RUNNING at `start_time` whose pod this
    /// process cannot see.
    pub fn knowledge(&self, at: &Uid, start_time: Option<i64>, now: Instant) -> Creates {
        let mut by_at = self.by_at.lock();
        let record = by_at
            .entry(at.clone())
            .or_insert_with(|| Record::new(start_time, now));
        // Another RUNNING than the one known (written again since): looked at anew.
        if record.start_time != start_time {
            *record = Record::new(start_time, now);
        }
        if record.ours && record.sent.is_none() {
            return Creates::NotSent;
        }
        let since = record
            .sent
            .map_or(record.first_seen, |s| s.max(record.first_seen));
        Creates::MayLand {
            waited: now.saturating_duration_since(since),
        }
    }

    /// Drops what is known of a deleted At.
    pub fn forget(&self, at: &Uid) {
        self.by_at.lock().remove(at);
    }
}

impl Record {
    fn new(start_time: Option<i64>, now: Instant) -> Self {
        Self {
            start_time,
            ours: false,
            sent: None,
            first_seen: now,
        }
    }
}

/// A create of an At's pod under way. Once the fence let it through towards the server
/// (`leader::fence::DEPARTED`), it counts as sent when it ends, answered or dropped (see
/// [`AtCreates::sent`]), unless [`Sending::refused`] says the server surely made nothing. One
/// dropped before it left (waiting for a write slot when the leader stepped down) was not.
pub struct Sending<'a> {
    creates: &'a AtCreates,
    at: Uid,
    departed: Arc<AtomicBool>,
    refused: bool,
}

impl<'a> Sending<'a> {
    pub fn new(creates: &'a AtCreates, at: Uid) -> Self {
        Self {
            creates,
            at,
            departed: Arc::default(),
            refused: false,
        }
    }

    /// Sends the create `request`, noting whether it left.
    pub async fn send<F: Future>(&self, request: F) -> F::Output {
        DEPARTED.scope(self.departed.clone(), request).await
    }

    /// The API server refused the create: nothing can land.
    pub fn refused(mut self) {
        self.refused = true;
    }
}

impl Drop for Sending<'_> {
    fn drop(&mut self) {
        if self.departed.load(Ordering::SeqCst) && !self.refused {
            self.creates.sent(&self.at, Instant::now());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// How long the window has run.
    fn waited(creates: Creates) -> Option<Duration> {
        match creates {
            Creates::MayLand { waited } => Some(waited),
            Creates::NotSent => None,
        }
    }

    fn at() -> Uid {
        Uid::from("at")
    }

    /// Issue 26, fault 4: RUNNING written (its reply lost, say), no create sent: nothing can
    /// land, and the create goes out now.
    #[test]
    fn running_written_and_no_create_sent_is_known() {
        let (c, t0) = (AtCreates::default(), Instant::now());
        c.running(&at(), 100, t0);
        assert_eq!(c.knowledge(&at(), Some(100), t0), Creates::NotSent);
        // Another RUNNING than ours (a predecessor's, written again): not ours to judge.
        assert!(waited(c.knowledge(&at(), Some(99), t0)).is_some());
    }

    /// Issue 26, fault 3: the window runs from the end of our own create, and from this
    /// process's first look, on the monotonic clock.
    #[tokio::test(start_paused = true)]
    async fn the_window_runs_from_our_last_create_or_our_first_look() {
        let c = AtCreates::default();
        let secs = Duration::from_secs;
        // A predecessor's RUNNING: timed from the first look.
        assert_eq!(
            waited(c.knowledge(&at(), Some(100), Instant::now())),
            Some(secs(0))
        );
        tokio::time::advance(secs(30)).await;
        assert_eq!(
            waited(c.knowledge(&at(), Some(100), Instant::now())),
            Some(secs(30))
        );
        // Our own RUNNING, and our create, which ended late: timed from its end.
        c.running(&at(), 200, Instant::now());
        let sending = Sending::new(&c, at());
        sending.departed.store(true, Ordering::SeqCst);
        tokio::time::advance(secs(40)).await;
        assert_eq!(
            c.knowledge(&at(), Some(200), Instant::now()),
            Creates::NotSent
        );
        drop(sending);
        tokio::time::advance(secs(5)).await;
        assert_eq!(
            waited(c.knowledge(&at(), Some(200), Instant::now())),
            Some(secs(5))
        );
    }

    /// A RUNNING written again (another leader's, after the At went back to PENDING) is
    /// looked at anew: an old first look does not shorten its window.
    #[tokio::test(start_paused = true)]
    async fn another_running_is_looked_at_anew() {
        let (c, t0) = (AtCreates::default(), Instant::now());
        assert!(waited(c.knowledge(&at(), Some(100), t0)).is_some());
        let later = t0 + Duration::from_secs(600);
        assert_eq!(
            waited(c.knowledge(&at(), Some(700), later)),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn a_create_refused_or_never_departed_is_not_sent() {
        let (c, t0) = (AtCreates::default(), Instant::now());
        c.running(&at(), 100, t0);
        let refused = Sending::new(&c, at());
        refused.departed.store(true, Ordering::SeqCst);
        refused.refused();
        drop(Sending::new(&c, at()));
        assert_eq!(c.knowledge(&at(), Some(100), t0), Creates::NotSent);
        c.forget(&at());
        assert!(c.by_at.lock().is_empty());
    }
}
