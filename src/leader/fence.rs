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
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use http::{Method, Request};
use tokio::time::Instant;
use tower::{BoxError, Layer, Service};

const CLOSED: u64 = 0;
const ALWAYS: u64 = u64::MAX;

/// Until when writes may leave; shared by the leader election (which moves it) and the
/// controllers' client (which checks it).
#[derive(Clone, Debug)]
pub struct Fence(Arc<AtomicU64>);

impl Fence {
    /// A fence that never closes: no leader election.
    pub fn always_open() -> Self {
        Self(Arc::new(AtomicU64::new(ALWAYS)))
    }

    /// A fence closed until a lease is held.
    pub fn closed() -> Self {
        Self(Arc::new(AtomicU64::new(CLOSED)))
    }

    /// Writes may leave until `deadline`, if that is later than now allowed (renewals that
    /// land out of order never shorten it).
    pub fn open_until(&self, deadline: Instant) {
        self.0.fetch_max(ticks(deadline), Ordering::SeqCst);
    }

    /// No write leaves from now on, until the next term opens the fence again.
    pub fn close(&self) {
        self.0.store(CLOSED, Ordering::SeqCst);
    }

    pub fn is_open(&self) -> bool {
        self.open_at(Instant::now())
    }

    fn open_at(&self, now: Instant) -> bool {
        ticks(now) < self.0.load(Ordering::SeqCst)
    }

    /// When the fence closes by itself; `None` if it is closed or never closes.
    pub fn deadline(&self) -> Option<Instant> {
        match self.0.load(Ordering::SeqCst) {
            CLOSED | ALWAYS => None,
            t => Some(base() + Duration::from_nanos(t)),
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
        let mutating = !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
        let fence = mutating.then(|| self.fence.clone());
        // The HTTP client sends nothing until its future is polled: the check, made when this
        // future is first polled, comes after any wait outside this layer (a write slot).
        let response = self.inner.call(req);
        Box::pin(async move {
            if fence.is_some_and(|f| !f.is_open()) {
                return Err(NotLeading.into());
            }
            response.await.map_err(Into::into)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
