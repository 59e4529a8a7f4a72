//! When a request is sent again: a refusal (429) always, honouring `Retry-After`; a timeout
//! or unavailability (503, 504) if the request is safe to repeat, never a create (a create
//! that timed out may still land; the controller settles its own, see `expectations`).
//! kube's default policy re-sends creates on 503 and 504. Each answer also tells the write
//! window how much the server admits (`client::limit`).

use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use tower::BoxError;
use tower::retry::Policy;

use super::guard::mutating;
use super::limit::MutatingLimit;
use crate::metrics::Metrics;

/// How long to wait before sending a request again, or `None` to hand the response back.
/// `retry_after` is the server's `Retry-After` in seconds; `attempt` counts from 0.
pub fn retry_delay(
    method: &Method,
    status: StatusCode,
    retry_after: Option<u64>,
    attempt: u32,
) -> Option<Duration> {
    const ATTEMPTS: u32 = 8;
    const MAX_DELAY: Duration = Duration::from_secs(10);
    let repeatable = match status {
        StatusCode::TOO_MANY_REQUESTS => true,
        StatusCode::SERVICE_UNAVAILABLE | StatusCode::GATEWAY_TIMEOUT => method != Method::POST,
        _ => false,
    };
    if !repeatable || attempt >= ATTEMPTS {
        return None;
    }
    // The server's Retry-After is its own spreading of load.
    Some(
        retry_after
            .map(Duration::from_secs)
            .unwrap_or_else(|| backoff(attempt))
            .min(MAX_DELAY),
    )
}

/// 50 ms doubled per `attempt` (from 0), jittered so that requests refused together are not
/// sent again together.
pub(super) fn backoff(attempt: u32) -> Duration {
    crate::jitter::jittered(Duration::from_millis(50) * 2u32.pow(attempt))
}

/// Per-request retry state for [`retry_delay`], and where the API server's answers tell the
/// write window (`limit`) how much it admits.
#[derive(Clone)]
pub(super) struct Retry {
    attempt: u32,
    /// The write window the attempt about to be sent is sent under.
    generation: u64,
    limit: Option<MutatingLimit>,
    metrics: Arc<Metrics>,
}

impl Retry {
    pub(super) fn new(limit: Option<MutatingLimit>, metrics: Arc<Metrics>) -> Self {
        Self {
            attempt: 0,
            generation: 0,
            limit,
            metrics,
        }
    }

    /// Tells the write window and the metrics what the server made of one attempt; whether
    /// it was throttled.
    fn answered(&self, method: &Method, status: StatusCode) -> bool {
        let throttled = status == StatusCode::TOO_MANY_REQUESTS;
        if throttled {
            self.metrics.throttled(method.as_str());
        }
        match &self.limit {
            Some(limit) if mutating(method) && throttled => limit.throttled(self.generation),
            Some(limit) if mutating(method) => limit.served(),
            _ => {}
        }
        throttled
    }
}

impl<B> Policy<Request<Body>, Response<B>, BoxError> for Retry {
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        req: &mut Request<Body>,
        result: &mut Result<Response<B>, BoxError>,
    ) -> Option<Self::Future> {
        let response = result.as_ref().ok()?;
        let throttled = self.answered(req.method(), response.status());
        let retry_after = response
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok()?.parse().ok());
        let delay = retry_delay(req.method(), response.status(), retry_after, self.attempt)?;
        if throttled {
            self.metrics.throttled_wait(delay);
        }
        self.attempt += 1;
        Some(tokio::time::sleep(delay))
    }

    /// Called as each attempt is sent, with a copy for the next one.
    fn clone_request(&mut self, req: &Request<Body>) -> Option<Request<Body>> {
        if let Some(limit) = &self.limit {
            self.generation = limit.generation();
        }
        // Streaming bodies cannot be sent twice; kube's requests carry whole bodies.
        let mut copy = Request::new(req.body().try_clone()?);
        *copy.method_mut() = req.method().clone();
        *copy.uri_mut() = req.uri().clone();
        *copy.version_mut() = req.version();
        *copy.headers_mut() = req.headers().clone();
        *copy.extensions_mut() = req.extensions().clone();
        Some(copy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_retried_for_every_verb_honouring_retry_after() {
        for method in [Method::GET, Method::POST, Method::PATCH, Method::DELETE] {
            assert_eq!(
                retry_delay(&method, StatusCode::TOO_MANY_REQUESTS, Some(1), 0),
                Some(Duration::from_secs(1)),
                "{method}"
            );
        }
    }

    #[test]
    fn a_create_that_timed_out_is_never_sent_again() {
        for status in [StatusCode::GATEWAY_TIMEOUT, StatusCode::SERVICE_UNAVAILABLE] {
            assert_eq!(retry_delay(&Method::POST, status, None, 0), None);
            assert!(retry_delay(&Method::GET, status, None, 0).is_some());
            assert!(retry_delay(&Method::DELETE, status, None, 0).is_some());
        }
    }

    #[test]
    fn errors_the_server_meant_are_returned_at_once() {
        for status in [
            StatusCode::CONFLICT,
            StatusCode::NOT_FOUND,
            StatusCode::UNPROCESSABLE_ENTITY,
            StatusCode::FORBIDDEN,
            StatusCode::INTERNAL_SERVER_ERROR,
        ] {
            assert_eq!(retry_delay(&Method::GET, status, None, 0), None, "{status}");
        }
    }

    #[test]
    fn backoff_doubles_is_capped_and_gives_up() {
        let delays: Vec<_> = (0..9)
            .map(|a| retry_delay(&Method::GET, StatusCode::TOO_MANY_REQUESTS, None, a))
            .collect();
        for (attempt, full) in [(0, 50), (1, 100), (7, 6400)] {
            let delay = delays[attempt].expect("retried");
            let full = Duration::from_millis(full);
            assert!(delay >= full / 2 && delay <= full, "{attempt}: {delay:?}");
        }
        assert_eq!(delays[8], None);
        assert_eq!(
            retry_delay(&Method::GET, StatusCode::TOO_MANY_REQUESTS, Some(3600), 0),
            Some(Duration::from_secs(10))
        );
    }

    #[test]
    fn retry_delays_are_jittered() {
        let delays: std::collections::HashSet<_> = (0..32)
            .map(|_| retry_delay(&Method::GET, StatusCode::TOO_MANY_REQUESTS, None, 3))
            .collect();
        assert!(
            delays.len() > 1,
            "every client retries in lockstep: {delays:?}"
        );
    }
}
