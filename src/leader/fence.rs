//! The leader's fence: no write leaves the process once the leadership it was made under may
//! have lapsed.
//!
//! A timer that tells the controllers to stop races with the work already queued: a process
//! that was paused (a stopped container, a migrated VM, a long GC or swap storm) past its renew
//! deadline wakes with both due at once, and whichever task runs first wins. So the check is
//! made where a request is sent, against a monotonic deadline: the moment the last renewal
//! that landed was sent, plus the renew deadline. The monotonic clock runs on while the
//! process is paused. A request refused there was never sent (see `client::may_have_acted`).
//!
//! This is the fence's state, which the leader election moves; the client checks it (its
//! fence layer, `client::fence`, and its write connections, `client::gated`).

use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

const CLOSED: u64 = 0;
const ALWAYS: u64 = u64::MAX;

/// Until when writes may leave; shared by the leader election (which moves it) and the
/// controllers' client (which checks it, and counts the writes it let through).
#[derive(Clone, Debug)]
pub struct Fence(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    until: AtomicU64,
    /// Writes let through whose answer has not come.
    in_flight: AtomicUsize,
    /// Whether a write let through in this term was dropped before its answer came: it may
    /// still land.
    abandoned: AtomicBool,
    /// Told when the last write in flight is answered or dropped.
    settled: Notify,
}

impl Fence {
    fn new(until: u64) -> Self {
        Self(Arc::new(Inner {
            until: AtomicU64::new(until),
            in_flight: AtomicUsize::new(0),
            abandoned: AtomicBool::new(false),
            settled: Notify::new(),
        }))
    }

    /// A fence that never closes: no leader election.
    pub fn always_open() -> Self {
        Self::new(ALWAYS)
    }

    /// A fence closed until a lease is held.
    pub fn closed() -> Self {
        Self::new(CLOSED)
    }

    /// Writes may leave until `deadline`, if that is later than now allowed (renewals that
    /// land out of order never shorten it).
    pub fn open_until(&self, deadline: Instant) {
        self.0.until.fetch_max(ticks(deadline), Ordering::SeqCst);
    }

    /// No write leaves from now on, until the next term opens the fence again.
    pub fn close(&self) {
        self.0.until.store(CLOSED, Ordering::SeqCst);
    }

    /// A new leadership term begins: none of its writes was abandoned yet.
    pub fn begin_term(&self) {
        self.0.abandoned.store(false, Ordering::SeqCst);
    }

    pub fn is_open(&self) -> bool {
        self.open_at(Instant::now())
    }

    fn open_at(&self, now: Instant) -> bool {
        ticks(now) < self.0.until.load(Ordering::SeqCst)
    }

    /// When the fence closes by itself; `None` if it is closed or never closes.
    pub fn deadline(&self) -> Option<Instant> {
        match self.0.until.load(Ordering::SeqCst) {
            CLOSED | ALWAYS => None,
            t => Some(base() + Duration::from_nanos(t)),
        }
    }

    /// Whether a write of this term may still land though nobody waits for its answer any
    /// more: handing the lease over at once would let a successor act before it lands.
    pub fn writes_abandoned(&self) -> bool {
        self.0.abandoned.load(Ordering::SeqCst) || self.0.in_flight.load(Ordering::SeqCst) > 0
    }

    /// Returns once no write let through is waiting for its answer.
    pub async fn settled(&self) {
        let in_flight = &self.0.in_flight;
        crate::notify::until(&self.0.settled, || in_flight.load(Ordering::SeqCst) == 0).await;
    }

    /// A write let through: counted until its answer comes, abandoned if dropped first.
    pub fn let_through(&self) -> InFlight {
        self.0.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight {
            fence: self.clone(),
            answered: false,
        }
    }
}

/// A write the fence let through, until its answer comes.
pub struct InFlight {
    fence: Fence,
    answered: bool,
}

impl InFlight {
    /// Its answer came: it is no longer in flight, and not abandoned.
    pub fn answered(mut self) {
        self.answered = true;
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if !self.answered {
            self.fence.0.abandoned.store(true, Ordering::SeqCst);
        }
        if self.fence.0.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.fence.0.settled.notify_waiters();
        }
    }
}

/// A fixed point of the monotonic clock, so that an instant fits in a u64.
fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(|| Instant::now() - Duration::from_secs(1))
}

fn ticks(at: Instant) -> u64 {
    (at.saturating_duration_since(base()).as_nanos() as u64).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fence_is_open_until_its_deadline_and_never_moves_back() {
        let fence = Fence::closed();
        let now = Instant::now();
        assert!(!fence.open_at(now));
        fence.open_until(now + Duration::from_secs(10));
        assert!(fence.open_at(now + Duration::from_secs(9)));
        assert!(!fence.open_at(now + Duration::from_secs(10)));
        fence.open_until(now + Duration::from_secs(5));
        assert_eq!(fence.deadline(), Some(now + Duration::from_secs(10)));
        fence.close();
        assert!(!fence.open_at(now));
        assert_eq!(fence.deadline(), None);
        assert!(Fence::always_open().is_open());
    }
}
