//! Every request has a deadline for its answer: one sent on a connection that took it and
//! then went silent, or to an API server stuck on it, fails after [`REQUEST_TIMEOUT`] instead
//! of holding its reconcile (and a write slot) forever. For a watch the answer is its head,
//! which the API server sends as the watch starts; its events stream on for as long as the
//! watch lasts, and a dead connection under them is found by the HTTP/2 health check
//! (`client::connection`).

use std::time::Duration;

use http::Request;
use tower::BoxError;

use super::guard::{Answer, Guard, Reply};

/// How long a request may take, answer included. The API server gives up on a request after
/// 60 s (`--request-timeout`); a create or patch that long is already in trouble, and one
/// sent again under its name (creates) or its resourceVersion (patches) is safe.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Gives every request [`REQUEST_TIMEOUT`] to be answered.
#[derive(Clone)]
pub struct RequestDeadline;

/// The error of a request that ran out of time.
#[derive(Debug, thiserror::Error)]
#[error("no answer within {REQUEST_TIMEOUT:?}")]
pub struct TimedOut;

impl Guard for RequestDeadline {
    fn keeps<B>(&self, _req: &Request<B>) -> bool {
        true
    }

    async fn around<T: Reply>(self, answer: impl Answer<T>) -> Result<T, BoxError> {
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

    /// Before, a watch had no deadline: on a live HTTP/2 connection (its PINGs answered), one
    /// whose head never came waited forever.
    #[tokio::test(start_paused = true)]
    async fn a_request_and_a_watch_give_up_on_their_answer_at_the_deadline() {
        let svc = RequestDeadline.layer(silent());
        for uri in [
            "/api/v1/namespaces/ns/pods/p",
            "/api/v1/pods?watch=true&timeoutSeconds=290",
        ] {
            let began = tokio::time::Instant::now();
            let req = Request::get(uri).body(()).unwrap();
            let err = svc.clone().oneshot(req).await.expect_err("timed out");
            assert!(err.is::<TimedOut>(), "{uri}: {err}");
            assert_eq!(began.elapsed(), REQUEST_TIMEOUT, "{uri}");
        }
    }
}
