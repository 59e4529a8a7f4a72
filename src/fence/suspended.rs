//! The time the monotonic clock did not count: the host's suspends.
//!
//! Deadlines here run on tokio's `Instant`, which is the monotonic clock (`CLOCK_MONOTONIC`),
//! and that clock stops while the host is suspended (a laptop's lid, a VM saved to disk and
//! resumed, a hibernated node). A Lease's other candidates count the lease on their own
//! clocks, which ran on: a leader that wakes from a suspend longer than its renew deadline
//! would find its fence still open and act beside its successor. client-go has the same gap:
//! Go's timers and `time.Since` read `CLOCK_MONOTONIC` too. `CLOCK_BOOTTIME` is the same
//! clock with the suspends counted, so the time suspended since the process began is the
//! growth of the one over the other, and the fence adds it to the time it measures.

use std::sync::Arc;
use std::sync::OnceLock;
use std::time::Duration;

/// How long the host has been suspended since the process began; never less than before.
#[derive(Clone)]
pub struct Suspended(Arc<dyn Fn() -> Duration + Send + Sync>);

impl Suspended {
    /// The host's: `CLOCK_BOOTTIME` less `CLOCK_MONOTONIC`, grown since the first reading.
    pub fn host() -> Self {
        Self(Arc::new(host_suspended))
    }

    /// Read from `source` (a test's, or a simulation's).
    pub fn new(source: impl Fn() -> Duration + Send + Sync + 'static) -> Self {
        Self(Arc::new(source))
    }

    pub fn now(&self) -> Duration {
        (self.0)()
    }
}

impl std::fmt::Debug for Suspended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Suspended({:?})", self.now())
    }
}

/// The two clocks are read one after the other, so their difference wobbles by the time
/// between the reads (well under a microsecond): growth is counted in whole milliseconds,
/// so that a process that was never suspended always reads zero (a simulation's replay
/// stays the same), and a suspend is counted to within a millisecond.
fn host_suspended() -> Duration {
    static START: OnceLock<i128> = OnceLock::new();
    let Some(offset) = boottime_over_monotonic() else {
        return Duration::ZERO;
    };
    let grown = offset - *START.get_or_init(|| offset);
    Duration::from_millis(u64::try_from(grown / 1_000_000).unwrap_or(0))
}

/// `CLOCK_BOOTTIME - CLOCK_MONOTONIC` in nanoseconds; `None` where there is no boot clock.
fn boottime_over_monotonic() -> Option<i128> {
    #[cfg(target_os = "linux")]
    {
        let read = |clock| {
            let mut t = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: `t` is a valid timespec for clock_gettime to write.
            let rc = unsafe { libc::clock_gettime(clock, &mut t) };
            (rc == 0).then(|| i128::from(t.tv_sec) * 1_000_000_000 + i128::from(t.tv_nsec))
        };
        let boot = read(libc::CLOCK_BOOTTIME)?;
        let monotonic = read(libc::CLOCK_MONOTONIC)?;
        Some(boot - monotonic)
    }
    #[cfg(not(target_os = "linux"))]
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_never_suspended_reads_zero() {
        let host = Suspended::host();
        for _ in 0..10_000 {
            assert_eq!(host.now(), Duration::ZERO);
        }
        // Never suspended, or suspended before the process began: never negative, but for
        // the wobble of the two reads.
        assert!(boottime_over_monotonic().is_some_and(|d| d > -1_000_000));
    }
}
