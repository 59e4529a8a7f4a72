//! Every request but a watch has a deadline: one sent on a connection that took it and then
//! went silent, or to an API server stuck on it, fails after [`REQUEST_TIMEOUT`] instead of
//! holding its reconcile (and a write slot) forever. A watch is long by design; a dead one is
//! found by the connection's read timeout (`client::READ_IDLE_TIMEOUT`).

use std::time::Duration;

use http::Request;
use tower::BoxError;

use super::guard::{Answer, Guard};

/// How long a request may take, answer included. The API server gives up on a request after
/// 60 s (`--request-timeout`); a create or patch that long is already in trouble, and one
/// sent again under its name (creates) or its resourceVersion (patches) is safe.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Gives every request but a watch [`REQUEST_TIMEOUT`] to be answered.
#[derive(Clone)]
pub struct RequestDeadline;

/// The error of a request that ran out of time.
#[derive(Debug, thiserror::Error)]
#[error("no answer within {REQUEST_TIMEOUT:?}")]
pub struct TimedOut;

fn is_watch<B>(req: &Request<B>) -> bool {
    req.uri()
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"))
}

impl Guard for RequestDeadline {
    fn keeps<B>(&self, req: &Request<B>) -> bool {
        !is_watch(req)
    }

    async fn around<T: Send + 'static>(self, answer: impl Answer<T>) -> Result<T, BoxError> {
        match tokio::time::timeout(REQUEST_TIMEOUT, answer).await {
            Ok(answer) => answer,
            Err(_) => Err(TimedOut.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::{Layer, Service, ServiceExt};

    /// A server that takes the request and never answers.
    fn silent() -> impl Service<Request<()>, Response = (), Error = BoxError, Future: Send> + Clone
    {
        tower::service_fn(|_req: Request<()>| async {
            std::future::pending::<()>().await;
            Ok::<(), BoxError>(())
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_gives_up_at_its_deadline_and_a_watch_does_not() {
        let svc = RequestDeadline.layer(silent());
        let get = Request::get("/api/v1/namespaces/ns/pods/p")
            .body(())
            .unwrap();
        let err = svc.clone().oneshot(get).await.expect_err("timed out");
        assert!(err.is::<TimedOut>(), "{err}");

        let watch = Request::get("/api/v1/pods?watch=true&timeoutSeconds=290")
            .body(())
            .unwrap();
        let waited = tokio::time::timeout(REQUEST_TIMEOUT * 10, svc.oneshot(watch)).await;
        assert!(waited.is_err(), "the watch was cut short");
    }
}
