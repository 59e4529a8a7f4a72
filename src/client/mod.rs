//! The operator's API client. Three layers over kube's HTTP stack:
//!
//! - **a cap on mutating requests in flight**, so that a burst of reconciles queues here
//!   instead of crossing the API server's `--max-mutating-requests-inflight` (200 by default)
//!   and being turned away with 429s that cost a second each (their `Retry-After`);
//! - **a retry policy** that re-sends what the server refused before doing anything (429), and
//!   re-sends requests that are safe to repeat after a timeout or unavailability (503, 504),
//!   but never a create: a create that timed out may still land, and only a create that
//!   names its object can be sent again safely. The controller decides (PodSet pods are
//!   named, and their creates are settled by sending them again; see `expectations`).
//!   It replaces kube's default policy, which re-sends creates on 503 and 504;
//! - a counter of every request sent, by verb, for `/metrics`;
//! - a log of every distinct `Warning` header the API server answers with (a deprecated API,
//!   a field it ignored), as client-go's default warning handler prints them: kube drops them.
//!
//! Every request names the instance in its User-Agent (as client-go names the binary), so
//! that the API server's audit log says which replica did what.
//!
//! The HTTP stack itself is kube's, rebuilt here for two things kube does not offer:
//! `TCP_NODELAY` (hyper writes a request's headers and body separately; with Nagle's
//! algorithm on, the body waits for the ACK of the headers, which the server delays by 40 ms:
//! every create and patch paid that), and HTTP/2 with a health check for reads and watches
//! (see `connection`).

use std::sync::Arc;
use std::time::Duration;

use futures::future::Either;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use kube::client::{Body, ClientBuilder, ConfigExt};
use tower::retry::{Policy, RetryLayer};
use tower::util::option_layer;
use tower::{BoxError, Service, ServiceBuilder, ServiceExt as _};

use crate::leader::Fence;
use crate::metrics::Metrics;

mod acted;
mod connection;
mod deadline;
mod fence;
mod gated;
mod guard;
mod limit;
mod warnings;
pub use acted::{NotSent, may_have_acted};
pub use connection::{PING_AFTER_IDLE, PING_TIMEOUT, READ_IDLE_TIMEOUT};
use connection::{reads_client, reads_connector, tcp_connector, with_timeouts, writes_client};
pub use deadline::REQUEST_TIMEOUT;
use fence::FenceLayer;
pub use fence::{Admit, NotLeading};
pub use guard::mutating;
pub use limit::MutatingLimit;
pub use warnings::LOGGED_AS as WARNING_LOGGED_AS;

/// The controllers' controller_writes: their writes wait for one of `max_in_flight` slots, and leave only
/// while `fence` is open (see `client::fence`).
pub struct ControllerWrites {
    pub max_in_flight: usize,
    pub fence: Fence,
}

/// Builds a client of the operator from a kubeconfig or in-cluster config, for the instance
/// named `instance`: the controllers' (`controller_writes`), or, without one, a client whose requests
/// never wait behind the controllers' writes nor stop at their fence (the Lease's, and the
/// reviews of `/metrics` callers).
pub fn build(
    mut config: kube::Config,
    instance: &str,
    metrics: Arc<Metrics>,
    controller_writes: Option<ControllerWrites>,
) -> Result<kube::Client, kube::Error> {
    let agent = HeaderValue::from_str(&user_agent(instance))
        .map_err(|e| kube::Error::HttpError(e.into()))?;
    config.headers.push((http::header::USER_AGENT, agent));
    let namespace = config.default_namespace.clone();
    let fence = controller_writes.as_ref().map(|l| l.fence.clone());
    Ok(over(
        http_stack(config, fence)?,
        &namespace,
        metrics,
        controller_writes,
    ))
}

/// The operator's request layers over `transport`, which sends a request and returns the
/// API server's answer: kube's HTTP stack in a process, a model of the API server in a
/// simulation.
pub fn over<S, B>(
    transport: S,
    default_namespace: &str,
    metrics: Arc<Metrics>,
    controller_writes: Option<ControllerWrites>,
) -> kube::Client
where
    S: Service<Request<Body>, Response = Response<B>, Error = BoxError> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let count = ServiceBuilder::new().map_request(move |req: Request<Body>| {
        metrics.api_request(req.method().as_str());
        req
    });
    let (fence, limit) = match controller_writes {
        Some(l) => (
            Some(FenceLayer(l.fence)),
            Some(MutatingLimit::new(l.max_in_flight)),
        ),
        None => (None, None),
    };
    // Innermost first: the fence is checked as a request is sent, after any wait outside it.
    ClientBuilder::new(transport, default_namespace.to_string())
        .with_layer(&deadline::RequestDeadline)
        .with_layer(&option_layer(fence))
        .with_layer(&ServiceBuilder::new().map_response(warnings::log))
        .with_layer(&count)
        .with_layer(&RetryLayer::new(Retry::default()))
        .with_layer(&option_layer(limit))
        .build()
}

/// `podset-operator/<version> (<instance>)`.
pub fn user_agent(instance: &str) -> String {
    format!("podset-operator/{} ({instance})", env!("CARGO_PKG_VERSION"))
}

/// kube's default stack (kubeconfig TLS and auth, impersonation headers, connect and read
/// timeouts) over a connector with `TCP_NODELAY`, without kube's retry policy. Proxies from
/// the kubeconfig are not supported (an operator talks to its own cluster's API server).
/// Cloneable, so a retry can send a request again. Reads and watches share an HTTP/2
/// connection with a health check; writes go on HTTP/1.1 connections of their own, [`gated`]
/// by `fence` when there is one (see `connection`).
fn http_stack(
    config: kube::Config,
    fence: Option<Fence>,
) -> Result<
    impl Service<Request<Body>, Response = Response<Incoming>, Error = BoxError, Future: Send>
    + Clone
    + Send
    + 'static,
    kube::Error,
> {
    let reads = reads_client().build(with_timeouts(reads_connector(&config)?));
    let writes = match fence {
        Some(fence) => {
            let gated = gated::GatedConnector {
                inner: config.rustls_https_connector_with_connector(tcp_connector())?,
                fence,
            };
            tower::util::Either::Left(writes_client().build(with_timeouts(gated)))
        }
        None => tower::util::Either::Right(reads.clone()),
    };
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .service(ByMethod {
            reads: reads.map_err(BoxError::from),
            writes: writes.map_err(BoxError::from),
        });
    Ok(service)
}

/// Sends reads (and watches) on one client, writes on another.
#[derive(Clone)]
struct ByMethod<R, W> {
    reads: R,
    writes: W,
}

impl<R, W, B> Service<Request<B>> for ByMethod<R, W>
where
    R: Service<Request<B>>,
    W: Service<Request<B>, Response = R::Response, Error = R::Error>,
{
    type Response = R::Response;
    type Error = R::Error;
    type Future = Either<R::Future, W::Future>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), R::Error>> {
        match self.reads.poll_ready(cx) {
            std::task::Poll::Ready(Ok(())) => self.writes.poll_ready(cx),
            other => other,
        }
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        match mutating(req.method()) {
            true => Either::Right(self.writes.call(req)),
            false => Either::Left(self.reads.call(req)),
        }
    }
}

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
fn backoff(attempt: u32) -> Duration {
    crate::jitter::jittered(Duration::from_millis(50) * 2u32.pow(attempt))
}

/// Deletes the object named `name` only if it is still the one with this UID: one made since
/// under the same name is never the one deleted.
pub async fn delete_exact<K>(api: &kube::Api<K>, name: &str, uid: &str) -> kube::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = kube::api::DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: Some(uid.to_string()),
            resource_version: None,
        }),
        ..Default::default()
    };
    api.delete(name, &params).await.map(drop)
}

/// Creates `obj`, sending it again while the API server answers ServerTimeout: it says "try
/// again" and made nothing. A `generateName` that collides with an existing name gets that
/// answer (1000 pods with one prefix collide about once in 30 runs), as does a pod whose
/// namespace's ServiceAccount is not ready yet. Each re-send waits a jittered 50, 100, 200,
/// 400 ms: a ServiceAccount is not ready the instant after.
pub async fn create<K>(api: &kube::Api<K>, obj: &K) -> kube::Result<K>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    const RESENDS: u32 = 4;
    let params = kube::api::PostParams::default();
    let mut attempt = 0;
    loop {
        match api.create(&params, obj).await {
            Err(kube::Error::Api(s)) if s.reason == "ServerTimeout" && attempt < RESENDS => {
                tokio::time::sleep(backoff(attempt)).await;
                attempt += 1;
            }
            result => return result,
        }
    }
}

/// Per-request retry state for [`retry_delay`].
#[derive(Clone, Default)]
struct Retry {
    attempt: u32,
}

impl<B> Policy<Request<Body>, Response<B>, BoxError> for Retry {
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        req: &mut Request<Body>,
        result: &mut Result<Response<B>, BoxError>,
    ) -> Option<Self::Future> {
        let response = result.as_ref().ok()?;
        let retry_after = response
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok()?.parse().ok());
        let delay = retry_delay(req.method(), response.status(), retry_after, self.attempt)?;
        self.attempt += 1;
        Some(tokio::time::sleep(delay))
    }

    fn clone_request(&mut self, req: &Request<Body>) -> Option<Request<Body>> {
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
    use std::sync::atomic::{AtomicUsize, Ordering};

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

    /// An API server that answers the first `collisions` creates with ServerTimeout, as a
    /// colliding generateName gets, and counts the creates it sees.
    fn colliding_server(collisions: usize) -> (kube::Client, Arc<AtomicUsize>) {
        let seen = Arc::new(AtomicUsize::new(0));
        let counter = seen.clone();
        let svc = tower::service_fn(move |_req: Request<Body>| {
            let n = counter.fetch_add(1, Ordering::SeqCst);
            async move {
                let (code, body) = if n < collisions {
                    (
                        500,
                        serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "code": 500, "reason": "ServerTimeout", "message": "try again"}),
                    )
                } else {
                    (
                        201,
                        serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": "p-abcde", "namespace": "default"}}),
                    )
                };
                let body = Body::from(serde_json::to_vec(&body).unwrap());
                Ok::<_, BoxError>(Response::builder().status(code).body(body).unwrap())
            }
        });
        (kube::Client::new(svc, "default"), seen)
    }

    #[tokio::test]
    async fn a_create_told_to_try_again_is_sent_again() {
        let (client, seen) = colliding_server(2);
        let api: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::default_namespaced(client);
        let pod = api_pod();
        let created = create(&api, &pod)
            .await
            .expect("created on the third attempt");
        assert_eq!(created.metadata.name.as_deref(), Some("p-abcde"));
        assert_eq!(seen.load(Ordering::SeqCst), 3);
    }

    /// A collision says "try again", not "at once": an immediate re-send mostly collides
    /// with the same load.
    #[tokio::test]
    async fn a_create_told_to_try_again_waits_before_sending_again() {
        let (client, _) = colliding_server(2);
        let api: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::default_namespaced(client);
        let start = std::time::Instant::now();
        create(&api, &api_pod())
            .await
            .expect("created on the third attempt");
        assert!(
            start.elapsed() >= Duration::from_millis(50),
            "{:?}",
            start.elapsed()
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

    #[tokio::test]
    async fn a_create_gives_up_after_five_attempts() {
        let (client, seen) = colliding_server(usize::MAX);
        let api: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::default_namespaced(client);
        let err = create(&api, &api_pod()).await.expect_err("never created");
        assert!(matches!(err, kube::Error::Api(s) if s.reason == "ServerTimeout"));
        assert_eq!(seen.load(Ordering::SeqCst), 5);
    }

    fn api_pod() -> k8s_openapi::api::core::v1::Pod {
        serde_json::from_value(serde_json::json!({"metadata": {"generateName": "p-"}})).unwrap()
    }
}
