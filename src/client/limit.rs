//! The cap on the controllers' writes in flight, which adapts to what the API server admits.
//!
//! API Priority and Fairness gives the operator's user a share of the server's seats and
//! short queues; a write beyond them is turned away with 429, a request the server and every
//! other tenant of that priority level paid for, and the server lengthens its `Retry-After`
//! while they go on. So the cap starts low, grows by half with each window of writes served
//! (slow start), is halved when a write is throttled, and then grows by one per window
//! served, but for [`HOLD`] no further than just below the size that was throttled: a 429
//! answers at once, so growing on by one per window would find the limit again within a
//! second, and again. It never exceeds the configured `--max-mutating-requests`, nor falls
//! below one.
//!
//! A window grows only while few of its writes waited in the server's queues, as their
//! answer times tell ([`queueing`]); once they did, slow start is over. APF queues a flow's
//! requests before it rejects any, so the window stops short of the level's seats and queues
//! instead of crossing them; a server short of CPU queues the writes too, and more of them in
//! flight would be served no sooner. Slow start grows by half, not TCP's double: a window's
//! answers vouch for its own size only, and the 429s of a doubling that crossed the level
//! (from 8 to 16 writes against the bench's level of 13) come back before any answer of the
//! larger window could have told.
//!
//! Events wait in a lane of their own: one takes a slot only while no other write waits for
//! one. They say what happened, and nothing waits on them but the reconcile that publishes
//! them; a pod create or an At's release that waits behind them is late.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Request;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{Notify, Semaphore, SemaphorePermit};
use tokio::time::Instant;
use tower::BoxError;

use super::guard::{Answer, Guard, Reply, mutating};
use queueing::{Kind, Queueing};

mod queueing;

/// Writes in flight before the first window is served: one slow-start round trip reaches 12.
const INITIAL: usize = 8;
/// How long after a throttle the window stays below the size throttled. The level's share
/// changes only as other tenants come and go, so a probe beyond it every half a minute costs
/// one 429 then.
const HOLD: Duration = Duration::from_secs(30);
/// Writes waiting in the server's queues, on average over a window served, beyond which the
/// window grows no further: a burst of 8 on a level of 3 seats shows about 2.3 (see
/// `queueing`'s tests), a level of 3 seats kept 8 writes about 5.
const WAITING_MAX: f64 = 2.0;

/// Holds every request that changes state until one of the window's slots is free. Reads, and
/// with them the long-running watches, pass untouched.
#[derive(Clone)]
pub struct MutatingLimit {
    shared: Arc<Shared>,
    lane: Lane,
    /// What the request passing under this limit writes.
    kind: Kind,
}

/// Which writes go first when both wait for a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lane {
    Work,
    Event,
}

struct Shared {
    slots: Semaphore,
    window: Mutex<Window>,
    /// The window's size, for `/metrics`.
    gauge: Gauge,
    /// Writes other than events waiting for a slot.
    work_waiting: AtomicUsize,
    /// Woken when no such write waits any longer.
    work_gone: Notify,
    /// Woken when one comes to wait.
    work_came: Notify,
}

/// A write other than an event, counted while it waits for a slot.
struct Waiting<'a>(&'a Shared);

impl<'a> Waiting<'a> {
    fn new(shared: &'a Shared) -> Self {
        shared.work_waiting.fetch_add(1, Ordering::AcqRel);
        shared.work_came.notify_waiters();
        Self(shared)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.0.work_waiting.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.work_gone.notify_waiters();
        }
    }
}

impl Shared {
    /// Resolves once no write other than an event waits for a slot.
    async fn no_work_waiting(&self) {
        let waiting = &self.work_waiting;
        crate::notify::until(&self.work_gone, || waiting.load(Ordering::Acquire) == 0).await;
    }
}

/// Whether `req` writes an event (`events.k8s.io` or core): the resource after the namespace.
fn is_event<B>(req: &Request<B>) -> bool {
    let mut segments = req.uri().path().split('/');
    segments.by_ref().find(|s| *s == "namespaces");
    segments.nth(1) == Some("events")
}

impl MutatingLimit {
    pub fn new(max: usize, gauge: Gauge) -> Self {
        let window = Window::new(max);
        gauge.set(window.size as i64);
        Self {
            shared: Arc::new(Shared {
                slots: Semaphore::new(window.size),
                window: Mutex::new(window),
                gauge,
                work_waiting: AtomicUsize::new(0),
                work_gone: Notify::new(),
                work_came: Notify::new(),
            }),
            lane: Lane::Work,
            kind: Kind::default(),
        }
    }

    /// A write answered by the server without throttling.
    pub fn served(&self) {
        let mut window = self.window();
        self.shared.slots.add_permits(window.served(Instant::now()));
        self.shared.gauge.set(window.size as i64);
    }

    /// Which window a write about to be sent is sent under: its answer is news of that one.
    pub fn generation(&self) -> u64 {
        self.window().generation
    }

    /// A write sent under window `generation` was throttled (429).
    pub fn throttled(&self, generation: u64) {
        // Under one lock: a slot coming back between the cut and the debt would be given
        // out again.
        let mut window = self.window();
        let cut = window.throttled(generation, Instant::now());
        let forgotten = self.shared.slots.forget_permits(cut);
        window.owe(cut - forgotten);
        self.shared.gauge.set(window.size as i64);
    }

    fn window(&self) -> std::sync::MutexGuard<'_, Window> {
        self.shared
            .window
            .lock()
            .expect("no panic holds the window")
    }

    /// A slot for an event, taken only while no other write waits: an event in the slots'
    /// queue (first come, first served) steps out of it when another write comes to wait.
    async fn event_slot(&self) -> Result<SemaphorePermit<'_>, tokio::sync::AcquireError> {
        let shared = &self.shared;
        loop {
            shared.no_work_waiting().await;
            let came = shared.work_came.notified();
            let mut came = std::pin::pin!(came);
            came.as_mut().enable();
            if shared.work_waiting.load(Ordering::Acquire) > 0 {
                continue;
            }
            tokio::select! {
                biased;
                _ = came => continue,
                slot = shared.slots.acquire() => {
                    let slot = slot?;
                    if shared.work_waiting.load(Ordering::Acquire) == 0 {
                        return Ok(slot);
                    }
                    self.release(slot);
                }
            }
        }
    }

    /// Gives a slot back, or keeps it if the window shrank while it was out.
    fn release(&self, slot: SemaphorePermit<'_>) {
        if self.window().repay() {
            slot.forget();
        }
    }
}

impl Guard for MutatingLimit {
    fn keeps<B>(&self, req: &Request<B>) -> bool {
        mutating(req.method())
    }

    fn for_request<B>(&self, req: &Request<B>) -> Option<Self> {
        let lane = match is_event(req) {
            true => Lane::Event,
            false => Lane::Work,
        };
        self.keeps(req).then(|| Self {
            shared: self.shared.clone(),
            lane,
            kind: Kind::of(req),
        })
    }

    async fn around<T: Reply>(self, answer: impl Answer<T>) -> Result<T, BoxError> {
        let slot = match self.lane {
            Lane::Event => self.event_slot().await,
            Lane::Work => {
                let _waiting = Waiting::new(&self.shared);
                self.shared.slots.acquire().await
            }
        };
        let slot = slot.expect("the semaphore is never closed");
        let sent = Instant::now();
        let answer = answer.await;
        if answer.as_ref().is_ok_and(Reply::succeeded) {
            // Counted before the retry layer counts the write served: its window's news.
            self.window()
                .queueing
                .answered(&self.kind, sent, Instant::now());
        }
        self.release(slot);
        answer
    }
}

/// How many writes may be in flight, decided without I/O.
#[derive(Debug)]
struct Window {
    size: usize,
    max: usize,
    slow_start: bool,
    /// Writes served since the window last changed.
    served: usize,
    /// Slots out when the window shrank, kept as they come back.
    debt: usize,
    /// When it last shrank.
    cut_at: Option<Instant>,
    /// How many times it shrank: the writes throttled together were sent under one window, and
    /// are one signal, as TCP takes the losses of one round trip as one.
    generation: u64,
    /// Below the size last throttled, it grows no further until [`HOLD`] after that.
    ceiling: usize,
    /// The served writes' waiting in the server's queues.
    queueing: Queueing,
}

impl Window {
    fn new(max: usize) -> Self {
        let max = max.max(1);
        Self {
            size: INITIAL.min(max),
            max,
            slow_start: true,
            served: 0,
            debt: 0,
            cut_at: None,
            generation: 0,
            ceiling: max,
            queueing: Queueing::default(),
        }
    }

    /// Counts a write served at `now`; returns how many slots the window grew by.
    fn served(&mut self, now: Instant) -> usize {
        self.served += 1;
        if self.served < self.size {
            return 0;
        }
        self.served = 0;
        if self.queueing.read(now) > WAITING_MAX {
            // Found where the server queues: held there.
            self.slow_start = false;
            return 0;
        }
        let top = match self.cut_at {
            Some(cut) if now < cut + HOLD => self.ceiling,
            _ => self.max,
        };
        let step = match self.slow_start {
            true => (self.size / 2).max(1),
            false => 1,
        };
        let grown = step.min(top.saturating_sub(self.size));
        self.size += grown;
        let repaid = grown.min(self.debt);
        self.debt -= repaid;
        grown - repaid
    }

    /// Halves the window for a write sent under window `generation` and throttled at `now`,
    /// unless that window was cut already; returns by how many slots.
    fn throttled(&mut self, generation: u64, now: Instant) -> usize {
        if generation != self.generation {
            return 0;
        }
        self.generation += 1;
        let size = (self.size / 2).max(1);
        let cut = self.size - size;
        self.ceiling = (self.size - 1).max(1);
        (self.size, self.slow_start, self.served, self.cut_at) = (size, false, 0, Some(now));
        cut
    }

    /// Slots the window shrank by that were out at the time.
    fn owe(&mut self, slots: usize) {
        self.debt += slots;
    }

    /// Whether a slot coming back pays a debt (and is not given out again).
    fn repay(&mut self) -> bool {
        let owed = self.debt > 0;
        self.debt -= usize::from(owed);
        owed
    }
}

#[cfg(test)]
mod tests;
