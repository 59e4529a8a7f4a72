//! The replicas' wall clocks, as the faults set them. An At's times are read on the clock of
//! the replica that acts, and nothing tells a process its clock is wrong: one whose clock runs
//! ahead rightly acts that much early, one behind that much late. So a check of when an act
//! came allows the lead (or lag) its replica's clock had while it may have decided it: in the
//! [`STALE`] before its request was sent.

use std::collections::HashMap;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use tokio::time::Instant;

use super::{Actor, Oracle, STALE, in_force_since};

/// Per replica: since when its clock was how many seconds ahead of the true time.
#[derive(Default)]
pub(super) struct Clocks(HashMap<usize, Vec<(Instant, i64)>>);

impl Oracle {
    /// Replica `id`'s wall clock is now `seconds` ahead of the true time (behind: negative).
    pub fn clock_jumped(&mut self, id: usize, seconds: i64) {
        let history = self.clocks.0.entry(id).or_default();
        if history.is_empty() {
            // True until now.
            history.push((Instant::now(), 0));
        }
        history.push((Instant::now(), seconds));
    }

    /// The times `actor`'s clock may have read while it decided a write that arrived at true
    /// time `wall`, `held` after it was sent: the earliest and the latest.
    pub(super) fn read_by(
        &self,
        actor: Actor,
        wall: Timestamp,
        held: Duration,
        now: Instant,
    ) -> (Timestamp, Timestamp) {
        let Actor::Replica { id, .. } = actor else {
            return (wall, wall);
        };
        let history = self
            .clocks
            .0
            .get(&id)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let leads: Vec<i64> = in_force_since(history, now.checked_sub(held + STALE))
            .copied()
            .collect();
        let lead = |pick: fn(i64, i64) -> i64| {
            let lead = leads.iter().copied().reduce(pick).unwrap_or(0);
            wall + SignedDuration::from_secs(lead)
        };
        (lead(i64::min), lead(i64::max))
    }

    /// The latest time any replica's clock may have read while the write was decided: what
    /// one replica recorded, another may carry out.
    pub(super) fn latest_read(&self, wall: Timestamp, held: Duration, now: Instant) -> Timestamp {
        let since = now.checked_sub(held + STALE);
        let leads = self.clocks.0.values();
        let lead = leads
            .flat_map(|history| in_force_since(history, since).copied())
            .fold(0, i64::max);
        wall + SignedDuration::from_secs(lead)
    }
}
