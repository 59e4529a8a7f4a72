//! The leader's fence: no write leaves the process once the leadership it was made under may
//! have lapsed.
//!
//! A timer that tells the controllers to stop races with the work already queued: a process
//! that was paused (a stopped container, a migrated VM, a long GC or swap storm) past its renew
//! deadline wakes with both due at once, and whichever task runs first wins. So the check is
//! made where a request is sent, against a monotonic deadline: the moment the last renewal
//! that landed was sent, plus the renew deadline. The monotonic clock runs on while the
//! process is paused. A request refused here was never sent (see `client::may_have_acted`).

use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use http::Request;
use tokio::time::Instant;
use tower::{BoxError, Layer, Service};

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
}

impl Fence {
    fn new(until: u64) -> Self {
        Self(Arc::new(Inner {
            until: AtomicU64::new(until),
            in_flight: AtomicUsize::new(0),
            abandoned: AtomicBool::new(false),
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

    /// The check made as a write's bytes leave: `NotLeading` once the fence closed.
    pub fn admit(&self) -> Result<(), NotLeading> {
        match self.is_open() {
            true => Ok(()),
            false => Err(NotLeading),
        }
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

    /// A write let through: counted until its answer comes, abandoned if dropped first.
    fn let_through(&self) -> InFlight {
        self.0.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight {
            fence: self.clone(),
            answered: false,
        }
    }
}

/// A write the fence let through, until its answer comes.
struct InFlight {
    fence: Fence,
    answered: bool,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.fence.0.in_flight.fetch_sub(1, Ordering::SeqCst);
        if !self.answered {
            self.fence.0.abandoned.store(true, Ordering::SeqCst);
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

/// The error of a write the fence refused.
#[derive(Debug, thiserror::Error)]
#[error(
    "not sent: this instance's leadership may have lapsed (renew deadline passed, or another holder)"
)]
pub struct NotLeading;

/// Refuses every request that changes state while the fence is closed. Reads pass.
#[derive(Clone)]
pub struct FenceLayer(pub Fence);

impl<S> Layer<S> for FenceLayer {
    type Service = Fenced<S>;

    fn layer(&self, inner: S) -> Fenced<S> {
        Fenced {
            inner,
            fence: self.0.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Fenced<S> {
    inner: S,
    fence: Fence,
}

impl<S, B> Service<Request<B>> for Fenced<S>
where
    S: Service<Request<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<S::Response, BoxError>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let fence = crate::client::mutating(req.method()).then(|| self.fence.clone());
        // The HTTP client sends nothing until its future is polled: the check, made when this
        // future is first polled, comes after any wait outside this layer (a write slot). The
        // transport checks again as the bytes leave (`client::gated`): a connection can take
        // seconds to open, and a process can be paused at any point in between.
        let response = self.inner.call(req);
        Box::pin(async move {
            let Some(fence) = fence else {
                return response.await.map_err(Into::into);
            };
            fence.admit()?;
            let mut in_flight = fence.let_through();
            let answer = response.await;
            in_flight.answered = true;
            answer.map_err(Into::into)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;
    use std::sync::atomic::AtomicUsize;
    use tower::ServiceExt;

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

    /// Issue 26, fault 8: a write let through and dropped before its answer may still land;
    /// one answered, or refused, leaves nothing behind. A new term starts clean.
    #[tokio::test]
    async fn writes_dropped_unanswered_are_abandoned() {
        let fence = Fence::closed();
        fence.open_until(Instant::now() + Duration::from_secs(60));
        let answers = tower::service_fn(|_req: Request<()>| async { Ok::<_, BoxError>(()) });
        let svc = FenceLayer(fence.clone()).layer(answers);
        let post = || {
            Request::builder()
                .method(http::Method::POST)
                .body(())
                .unwrap()
        };
        svc.clone().oneshot(post()).await.unwrap();
        assert!(!fence.writes_abandoned());
        let silent =
            tower::service_fn(|_req: Request<()>| std::future::pending::<Result<(), BoxError>>());
        let mut dropped = FenceLayer(fence.clone()).layer(silent).oneshot(post());
        assert!(futures::poll!(&mut dropped).is_pending());
        drop(dropped);
        assert!(fence.writes_abandoned());
        fence.begin_term();
        assert!(!fence.writes_abandoned());
    }

    /// A write that waited past the deadline (a paused process, a full write queue) is refused
    /// when it would be sent, never reaching the server; reads pass.
    #[tokio::test]
    async fn a_closed_fence_refuses_writes_at_the_moment_they_would_be_sent() {
        let sent = Arc::new(AtomicUsize::new(0));
        let counted = sent.clone();
        // Counts what is sent: the HTTP client sends when its future is polled.
        let inner = tower::service_fn(move |_req: Request<()>| {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok::<_, BoxError>(())
            }
        });
        let fence = Fence::closed();
        fence.open_until(Instant::now() + Duration::from_secs(60));
        let svc = FenceLayer(fence.clone()).layer(inner);
        let request = |m: Method| Request::builder().method(m).body(()).unwrap();
        // Made while open, sent after the fence closed.
        let queued = svc.clone().oneshot(request(Method::POST));
        fence.close();
        let refused = queued.await.expect_err("refused");
        assert!(refused.downcast_ref::<NotLeading>().is_some(), "{refused}");
        svc.clone().oneshot(request(Method::GET)).await.unwrap();
        assert_eq!(
            sent.load(Ordering::SeqCst),
            1,
            "only the read reached the server"
        );
    }
}
