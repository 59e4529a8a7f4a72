//! What this process knows of the creates of At pods, for Ats recorded RUNNING whose pod it
//! cannot see. Kept per leadership term (with the controllers' `Context`), in memory, and
//! timed on the monotonic clock: a verdict that the command will not run rests on what this
//! process saw and sent, never on another host's wall clock.
//!
//! - An At this term recorded RUNNING (its `startTime` matches) and whose create it has not
//!   sent: nothing can land, and the create is sent now. (Its RUNNING write's reply may have
//!   been lost: the write landed, and this process knows it sent no pod.)
//! - Otherwise a create may still land (this process's, or a predecessor's: a predecessor's
//!   writes stopped at its fence, before this term began), for
//!   [`plan::at::A_CREATE_MAY_LAND_FOR`](crate::plan::at::A_CREATE_MAY_LAND_FOR) after the
//!   later of this process's first look at the At and the end of its own last create.

use std::collections::HashMap;

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::plan::at::Creates;
use crate::uid::Uid;

#[derive(Default)]
pub struct AtCreates {
    by_at: Mutex<HashMap<Uid, Record>>,
}

#[derive(Debug)]
struct Record {
    /// The `startTime` (in seconds) of the RUNNING this process wrote, or tried to.
    running: Option<i64>,
    /// When this process's last create of the pod ended (answered, or dropped); `None` if it
    /// sent none that may have acted.
    sent: Option<Instant>,
    first_seen: Instant,
}

impl AtCreates {
    /// This process is about to record the At RUNNING with this `startTime`; no create of
    /// it is sent yet.
    pub fn running(&self, at: &Uid, start_time: i64, now: Instant) {
        let mut by_at = self.by_at.lock();
        let record = by_at.entry(at.clone()).or_insert_with(|| Record::new(now));
        record.running = Some(start_time);
        record.sent = None;
    }

    /// A create of the At's pod ended at `now`: answered, or dropped unanswered. Either way
    /// it may have left, and may still land.
    pub fn sent(&self, at: &Uid, now: Instant) {
        let mut by_at = self.by_at.lock();
        by_at
            .entry(at.clone())
            .or_insert_with(|| Record::new(now))
            .sent = Some(now);
    }

    /// What is known of the creates of an At recorded RUNNING at `start_time` whose pod this
    /// process cannot see.
    pub fn knowledge(&self, at: &Uid, start_time: Option<i64>, now: Instant) -> Creates {
        let mut by_at = self.by_at.lock();
        let record = by_at.entry(at.clone()).or_insert_with(|| Record::new(now));
        if record.sent.is_none() && record.running.is_some() && record.running == start_time {
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
    fn new(now: Instant) -> Self {
        Self {
            running: None,
            sent: None,
            first_seen: now,
        }
    }
}

/// A create of an At's pod under way: dropped or answered, it counts as sent (see
/// [`AtCreates::sent`]), unless [`Sending::refused`] says it surely made nothing.
pub struct Sending<'a> {
    creates: &'a AtCreates,
    at: Uid,
    may_have_acted: bool,
}

impl<'a> Sending<'a> {
    pub fn new(creates: &'a AtCreates, at: Uid) -> Self {
        Self {
            creates,
            at,
            may_have_acted: true,
        }
    }

    /// The create was never sent, or the API server refused it: nothing can land.
    pub fn refused(mut self) {
        self.may_have_acted = false;
    }
}

impl Drop for Sending<'_> {
    fn drop(&mut self) {
        if self.may_have_acted {
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
        let (c, t0) = (AtCreates::default(), Instant::now());
        let later = |s| t0 + Duration::from_secs(s);
        // A predecessor's RUNNING: timed from the first look.
        assert_eq!(
            waited(c.knowledge(&at(), Some(100), t0)),
            Some(Duration::ZERO)
        );
        assert_eq!(
            waited(c.knowledge(&at(), Some(100), later(30))),
            Some(Duration::from_secs(30))
        );
        // Our own create, ended late: timed from its end.
        c.running(&at(), 200, later(40));
        let sending = Sending::new(&c, at());
        assert_eq!(c.knowledge(&at(), Some(200), later(41)), Creates::NotSent);
        drop(sending);
        let ended = Instant::now();
        let since_end = waited(c.knowledge(&at(), Some(200), ended + Duration::from_secs(5)));
        assert_eq!(since_end, Some(Duration::from_secs(5)));
    }

    #[test]
    fn a_refused_create_is_not_sent() {
        let (c, t0) = (AtCreates::default(), Instant::now());
        c.running(&at(), 100, t0);
        Sending::new(&c, at()).refused();
        assert_eq!(c.knowledge(&at(), Some(100), t0), Creates::NotSent);
        c.forget(&at());
        assert!(c.by_at.lock().is_empty());
    }
}
