//! The leader's fence: no write leaves the process once the leadership it was made under may
//! have lapsed.
//!
//! A timer that tells the controllers to stop races with the work already queued: a process
//! that was paused (a stopped container, a migrated VM, a long GC or swap storm) past its renew
//! deadline wakes with both due at once, and whichever task runs first wins. So the check is
//! made where a request is sent, against a monotonic deadline: the moment the last renewal
//! that landed was sent, plus the renew deadline. The monotonic clock runs on while the
//! process is paused, but not while its host is suspended: the fence adds the time the host
//! was suspended, both after it opened and while the renewal that opened it was in flight
//! (see [`suspended`]). A request refused here was never sent (see
//! `client::may_have_acted`).
//!
//! This is the fence's state, which the leader election moves (`leader`); the client checks
//! it (its fence layer, `client::fence`, and its write connections, `client::gated`). It is
//! a module of its own, beside both, so that neither imports the other.

use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

pub mod suspended;

use suspended::Suspended;

const CLOSED: i64 = i64::MIN;
const ALWAYS: i64 = i64::MAX;

/// Until when writes may leave; shared by the leader election (which moves it) and the
/// controllers' client (which checks it, and counts the writes it let through).
#[derive(Clone, Debug)]
pub struct Fence(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    /// The deadline on the monotonic clock plus the time suspended when it was set: open
    /// while the monotonic clock plus the time suspended now is before it.
    until: AtomicI64,
    suspended: Suspended,
    /// Writes let through whose answer has not come.
    in_flight: AtomicUsize,
    /// Whether a write let through in this term was dropped before its answer came: it may
    /// still land.
    abandoned: AtomicBool,
    /// Told when the last write in flight is answered or dropped.
    settled: Notify,
}

impl Fence {
    fn new(until: i64, suspended: Suspended) -> Self {
        Self(Arc::new(Inner {
            until: AtomicI64::new(until),
            suspended,
            in_flight: AtomicUsize::new(0),
            abandoned: AtomicBool::new(false),
            settled: Notify::new(),
        }))
    }

    /// A fence that never closes: no leader election.
    pub fn always_open() -> Self {
        Self::new(ALWAYS, Suspended::host())
    }

    /// A fence closed until a lease is held, counting the host's suspends.
    pub fn closed() -> Self {
        Self::counting(Suspended::host())
    }

    /// A fence closed until a lease is held, counting the suspends `suspended` says.
    pub fn counting(suspended: Suspended) -> Self {
        Self::new(CLOSED, suspended)
    }

    /// Writes may leave until `deadline`, if that is later than now allowed (renewals that
    /// land out of order never shorten it), less any time the host is suspended from now.
    pub fn open_until(&self, deadline: Instant) {
        let until = ticks(deadline).saturating_add(self.suspended_ns());
        self.0.until.fetch_max(until, Ordering::SeqCst);
    }

    /// A request about to be sent whose answer may open the fence: see [`Self::sent_at`].
    pub fn sending(&self) -> Sending {
        Sending {
            at: Instant::now(),
            suspended: self.0.suspended.now(),
        }
    }

    /// When a request counts as sent, once its answer came: as much earlier than it left as
    /// the host was suspended while it was in flight, so that the renew deadline it opens
    /// the fence to counts that time too.
    pub fn sent_at(&self, sending: Sending) -> Instant {
        let asleep = self.0.suspended.now().saturating_sub(sending.suspended);
        // Earlier than the clock can say only after a suspend longer than the time since
        // boot: then the deadline is long past.
        (sending.at.checked_sub(asleep)).unwrap_or_else(|| base() - Duration::from_secs(1))
    }

    fn suspended_ns(&self) -> i64 {
        i64::try_from(self.0.suspended.now().as_nanos()).unwrap_or(i64::MAX)
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
        ticks(now).saturating_add(self.suspended_ns()) < self.0.until.load(Ordering::SeqCst)
    }

    /// When the fence closes by itself, if the host is not suspended from now; `None` if it
    /// is closed or never closes.
    pub fn deadline(&self) -> Option<Instant> {
        match self.0.until.load(Ordering::SeqCst) {
            CLOSED | ALWAYS => None,
            t => Some(instant(t.saturating_sub(self.suspended_ns()))),
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

/// A request's departure: when it left, and how long the host had been suspended by then.
#[derive(Clone, Copy, Debug)]
pub struct Sending {
    at: Instant,
    suspended: Duration,
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

/// A fixed point of the monotonic clock, so that an instant fits in an i64.
fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(|| Instant::now() - Duration::from_secs(1))
}

/// Nanoseconds from the base, negative before it, kept clear of [`CLOSED`] and [`ALWAYS`].
fn ticks(at: Instant) -> i64 {
    let nanos = |d: Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX - 1);
    let ticks = match at.checked_duration_since(base()) {
        Some(after) => nanos(after),
        None => -nanos(base() - at),
    };
    ticks.clamp(CLOSED + 1, ALWAYS - 1)
}

/// The instant `ticks` nanoseconds from the base.
fn instant(ticks: i64) -> Instant {
    let from_base = Duration::from_nanos(ticks.unsigned_abs());
    match ticks >= 0 {
        true => base() + from_base,
        false => base() - from_base,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

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

    /// An instant before the base keeps its place among instants: in tests, each runtime with
    /// paused time has a clock of its own, and one may lag the clock that set the base. Each
    /// such instant counted as the base itself (leader::tests' suspended leader, under load,
    /// saw a deadline later than its now).
    #[test]
    fn instants_before_the_base_keep_their_order() {
        let fence = Fence::closed();
        let early = base() - Duration::from_secs(30);
        fence.open_until(early + Duration::from_secs(10));
        assert!(fence.open_at(early + Duration::from_secs(9)));
        assert!(!fence.open_at(early + Duration::from_secs(10)));
        assert_eq!(fence.deadline(), Some(early + Duration::from_secs(10)));
    }

    /// Issue 45, fault 11: the time the host was suspended counts against the deadline, both
    /// after the fence opened and while the renewal that opened it was in flight.
    #[test]
    fn the_hosts_suspends_count_against_the_deadline() {
        let asleep = Arc::new(AtomicU64::new(0));
        let told = asleep.clone();
        let suspended = Suspended::new(move || Duration::from_secs(told.load(Ordering::SeqCst)));
        let fence = Fence::counting(suspended);
        let now = Instant::now();
        fence.open_until(now + Duration::from_secs(10));
        asleep.store(4, Ordering::SeqCst);
        assert!(fence.open_at(now + Duration::from_secs(5)));
        assert!(!fence.open_at(now + Duration::from_secs(6)));
        assert_eq!(fence.deadline(), Some(now + Duration::from_secs(6)));

        let sending = fence.sending();
        asleep.store(7, Ordering::SeqCst);
        assert_eq!(fence.sent_at(sending), sending.at - Duration::from_secs(3));
    }
}
