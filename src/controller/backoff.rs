//! Per-object retry delays after failed reconciles.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::Duration;
use tokio::time::Instant;

use crate::jitter::jittered;

/// Per-object retry delays that double on each failure: 1 s, 2 s, 4 s ... up to 5 minutes,
/// each jittered (see [`jittered`]) so that objects failing together do not retry together.
#[derive(Default)]
pub struct Backoff {
    failures: Mutex<HashMap<String, Failures>>,
}

struct Failures {
    count: u32,
    last: Instant,
}

impl Backoff {
    const BASE: Duration = Duration::from_secs(1);
    const MAX: Duration = Duration::from_secs(300);

    pub fn next(&self, key: &str) -> Duration {
        self.next_at(key, Instant::now())
    }

    fn next_at(&self, key: &str, now: Instant) -> Duration {
        let mut failures = self.failures.lock();
        if !failures.contains_key(key) {
            // An object deleted while the watch was away is never reset. One that still fails
            // comes back within MAX, so an entry idle for twice that is stale.
            failures.retain(|_, f| now.duration_since(f.last) < Self::MAX * 2);
        }
        let f = failures.entry(key.to_string()).or_insert(Failures {
            count: 0,
            last: now,
        });
        f.last = now;
        let delay = Self::BASE
            .saturating_mul(1u32 << f.count.min(16))
            .min(Self::MAX);
        f.count += 1;
        jittered(delay)
    }

    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.failures.lock().is_empty()
    }

    /// Whether the object's last reconcile failed (and none has succeeded since).
    pub fn is_failing(&self, key: &str) -> bool {
        self.failures.lock().contains_key(key)
    }

    pub fn reset(&self, key: &str) {
        self.failures.lock().remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_jittered() {
        let b = Backoff::default();
        let delays: std::collections::HashSet<_> =
            (0..32).map(|i| b.next(&i.to_string())).collect();
        assert!(delays.len() > 1, "failures retry in lockstep: {delays:?}");
    }

    #[test]
    fn stale_backoff_entries_are_dropped() {
        let (b, t0) = (Backoff::default(), Instant::now());
        b.next_at("gone", t0);
        b.next_at("failing", t0 + Backoff::MAX);
        b.next_at("new", t0 + Backoff::MAX * 2);
        let failures = b.failures.lock();
        let mut keys: Vec<_> = failures.keys().map(String::as_str).collect();
        keys.sort();
        assert_eq!(keys, ["failing", "new"]);
    }

    #[test]
    fn backoff_doubles_to_a_cap_and_resets() {
        let b = Backoff::default();
        let delays: Vec<Duration> = (0..12).map(|_| b.next("x")).collect();
        let within = |d: Duration, full: u64| {
            d >= Duration::from_secs(full) / 2 && d <= Duration::from_secs(full)
        };
        for (d, full) in delays.iter().zip([1, 2, 4, 8, 16]) {
            assert!(within(*d, full), "{d:?} for {full} s");
        }
        assert!(within(*delays.last().unwrap(), 300));
        assert!(within(b.next("y"), 1), "per object");
        b.reset("x");
        assert!(within(b.next("x"), 1));
    }
}
