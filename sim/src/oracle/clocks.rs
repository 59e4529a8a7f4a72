//! The replicas' wall clocks, as the faults set them. An At's times are read on the clock of
//! the replica that acts, and nothing tells a process its clock is wrong: one whose clock runs
//! ahead rightly acts that much early, one behind that much late. So a check of when an act
//! came allows the lead (or lag) its replica's clock had while it may have decided it: in the
//! [`STALE`] before its request was sent.

use jiff::{SignedDuration, Timestamp};
use std::collections::HashMap;
use tokio::time::Instant;

use super::{Actor, Oracle, STALE, Write, in_force_since};

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

    /// The times the clock of the replica that made write `w` may have read, while it decided
    /// it, for the true time `at`: the earliest and the latest.
    pub(super) fn read_by(&self, w: &Write, at: Timestamp) -> (Timestamp, Timestamp) {
        let Actor::Replica { id, .. } = w.actor else {
            return (at, at);
        };
        let history = self.clocks.0.get(&id).map(Vec::as_slice);
        let leads: Vec<i64> = in_force_since(history.unwrap_or_default(), decided_since(w))
            .copied()
            .collect();
        let lead = |pick: fn(i64, i64) -> i64| {
            let lead = leads.iter().copied().reduce(pick).unwrap_or(0);
            at + SignedDuration::from_secs(lead)
        };
        (lead(i64::min), lead(i64::max))
    }

    /// The latest time any replica's clock may have read while write `w` was decided: what
    /// one replica recorded, another may carry out.
    pub(super) fn latest_read(&self, w: &Write) -> Timestamp {
        let leads = self.clocks.0.values();
        let lead = leads
            .flat_map(|history| in_force_since(history, decided_since(w)).copied())
            .fold(0, i64::max);
        w.wall + SignedDuration::from_secs(lead)
    }
}

/// Since when a write may have been decided: [`STALE`] before it was sent.
fn decided_since(w: &Write) -> Option<Instant> {
    w.now.checked_sub(w.held + STALE)
}
