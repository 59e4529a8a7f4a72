//! The controllers' writes leave only while the leader's fence is open (`leader::fence` says
//! why the check is made where a request is sent, against a monotonic deadline). A write is
//! checked when its future is first polled ([`FenceLayer`]), and again as its bytes leave
//! (`client::gated`). A request refused here was never sent (see `client::may_have_acted`).

use http::Request;
use tower::BoxError;

use super::guard::{Answer, Guard, Reply, mutating};
use crate::fence::Fence;

/// The error of a write the fence refused.
#[derive(Debug, thiserror::Error)]
#[error(
    "not sent: this instance's leadership may have lapsed (renew deadline passed, or another holder)"
)]
pub struct NotLeading;

/// The check made of the fence as a write leaves.
pub trait Admit {
    /// `NotLeading` once the fence closed.
    fn admit(&self) -> Result<(), NotLeading>;
}

impl Admit for Fence {
    fn admit(&self) -> Result<(), NotLeading> {
        match self.is_open() {
            true => Ok(()),
            false => Err(NotLeading),
        }
    }
}

/// Refuses every request that changes state while the fence is closed, and counts the writes
/// it lets through until their answers come (`Fence::writes_abandoned`). Reads pass.
#[derive(Clone)]
pub struct FenceLayer(pub Fence);

impl Guard for FenceLayer {
    fn keeps<B>(&self, req: &Request<B>) -> bool {
        mutating(req.method())
    }

    // A connection can take seconds to open, and a process can be paused at any point in
    // between: the transport checks again as the bytes leave (`client::gated`).
    async fn around<T: Reply>(self, answer: impl Answer<T>) -> Result<T, BoxError> {
        self.0.admit()?;
        let in_flight = self.0.let_through();
        let answer = answer.await;
        in_flight.answered();
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;
    use tokio::time::Instant;
    use tower::{Layer, ServiceExt};

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
