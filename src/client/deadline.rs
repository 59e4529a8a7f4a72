//! Every request but a watch has a deadline: one sent on a connection that took it and then
//! went silent, or to an API server stuck on it, fails after [`REQUEST_TIMEOUT`] instead of
//! holding its reconcile (and a write slot) forever. A watch is long by design; a dead one is
//! found by the connection's read timeout (`client::READ_IDLE_TIMEOUT`).

use std::time::Duration;

use futures::future::BoxFuture;
use http::Request;
use tower::{BoxError, Layer, Service};

/// How long a request may take, answer included. The API server gives up on a request after
/// 60 s (`--request-timeout`); a create or patch that long is already in trouble, and one
/// sent again under its name (creates) or its resourceVersion (patches) is safe.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Clone)]
pub struct RequestDeadline;

impl<S> Layer<S> for RequestDeadline {
    type Service = Deadlined<S>;

    fn layer(&self, inner: S) -> Deadlined<S> {
        Deadlined { inner }
    }
}

#[derive(Clone)]
pub struct Deadlined<S> {
    inner: S,
}

/// The error of a request that ran out of time.
#[derive(Debug, thiserror::Error)]
#[error("no answer within {REQUEST_TIMEOUT:?}")]
pub struct TimedOut;

fn is_watch<B>(req: &Request<B>) -> bool {
    req.uri()
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"))
}

impl<S, B> Service<Request<B>> for Deadlined<S>
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
        let watch = is_watch(&req);
        let response = self.inner.call(req);
        Box::pin(async move {
            if watch {
                return response.await.map_err(Into::into);
            }
            match tokio::time::timeout(REQUEST_TIMEOUT, response).await {
                Ok(answer) => answer.map_err(Into::into),
                Err(_) => Err(TimedOut.into()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

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
