//! The cap on the controllers' writes in flight.

use std::sync::Arc;

use http::Request;
use tokio::sync::Semaphore;
use tower::BoxError;

use super::guard::{Answer, Guard, mutating};

/// Holds every request that changes state until one of `permits` is free. Reads, and with
/// them the long-running watches, pass untouched.
#[derive(Clone)]
pub struct MutatingLimit {
    permits: Arc<Semaphore>,
}

impl MutatingLimit {
    pub fn new(permits: usize) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(permits.max(1))),
        }
    }
}

impl Guard for MutatingLimit {
    fn keeps<B>(&self, req: &Request<B>) -> bool {
        mutating(req.method())
    }

    async fn around<T: Send + 'static>(self, answer: impl Answer<T>) -> Result<T, BoxError> {
        let _permit = self
            .permits
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        answer.await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;
    use tower::{Layer, ServiceExt};

    /// A service that records how many requests it holds at once, and never answers until
    /// told to.
    #[tokio::test]
    async fn mutating_requests_wait_for_a_permit_and_reads_do_not() {
        let (in_flight, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let release = Arc::new(tokio::sync::Notify::new());
        let inner = {
            let (in_flight, peak, release) = (in_flight.clone(), peak.clone(), release.clone());
            tower::service_fn(move |_req: Request<()>| {
                let (in_flight, peak, release) = (in_flight.clone(), peak.clone(), release.clone());
                async move {
                    let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    release.notified().await;
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                    Ok::<_, BoxError>(())
                }
            })
        };
        let svc = MutatingLimit::new(2).layer(inner);
        let request = |m: Method| Request::builder().method(m).body(()).unwrap();
        let mut calls = Vec::new();
        for m in [
            Method::POST,
            Method::PATCH,
            Method::DELETE,
            Method::GET,
            Method::GET,
        ] {
            calls.push(tokio::spawn(svc.clone().oneshot(request(m))));
        }
        // Two mutating requests and both reads reach the server; the third write waits.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while in_flight.load(Ordering::SeqCst) < 4 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "requests never arrived"
            );
            tokio::task::yield_now().await;
        }
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(in_flight.load(Ordering::SeqCst), 4);
        while calls.iter().any(|c| !c.is_finished()) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "requests never finished"
            );
            release.notify_waiters();
            tokio::task::yield_now().await;
        }
        assert_eq!(peak.load(Ordering::SeqCst), 4);
    }
}
