//! The operator's API client. Layers over kube's HTTP stack:
//!
//! - **a retry policy** (`retry`) that re-sends what the server refused before doing
//!   anything (429), and re-sends requests that are safe to repeat after a timeout or
//!   unavailability (503, 504), but never a create: a create that timed out may still land,
//!   and only a create that names its object can be sent again safely. The controller decides
//!   (PodSet pods are named, and their creates are settled by sending them again; see
//!   `expectations`);
//! - **a window of writes in flight** (`limit`), inside the retries, so that a burst of
//!   reconciles queues here instead of being turned away by the API server's priority level
//!   (API Priority and Fairness) with 429s; it shrinks when the server throttles a write and
//!   grows back as writes are served, and a write waiting out a `Retry-After` holds no slot;
//! - a counter of every request sent, by the answer's code, method and resource, and of
//!   those throttled, for `/metrics` (`counted`);
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

use futures::future::Either;
use http::{HeaderValue, Request, Response};
use hyper::body::Incoming;
use kube::client::{Body, ClientBuilder, ConfigExt};
use tower::retry::RetryLayer;
use tower::util::option_layer;
use tower::{BoxError, Service, ServiceBuilder, ServiceExt as _};

use crate::fence::Fence;
use crate::metrics::Metrics;

mod acted;
mod connection;
mod counted;
mod deadline;
mod fence;
mod gated;
mod guard;
mod limit;
mod metadata;
mod proxy;
mod retry;
mod warnings;
pub use acted::{NotSent, may_have_acted};
pub use connection::{PING_AFTER_IDLE, PING_TIMEOUT, READ_IDLE_TIMEOUT};
use connection::{reads_client, reads_connector, with_timeouts, writes_client};
use counted::Counted;
pub use deadline::REQUEST_TIMEOUT;
use fence::FenceLayer;
pub use fence::{Admit, NotLeading};
pub use guard::mutating;
pub use limit::MutatingLimit;
pub use metadata::{ACCEPT_METADATA, Listed, Owner, PAGE, list_metadata_paged};
pub use retry::retry_delay;
use retry::{Retry, backoff};
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
    let count = Counted::new(metrics.clone());
    let (fence, limit) = match controller_writes {
        Some(l) => (
            Some(FenceLayer(l.fence)),
            Some(MutatingLimit::new(
                l.max_in_flight,
                metrics.write_window.clone(),
            )),
        ),
        None => (None, None),
    };
    let retry = Retry::new(limit.clone(), metrics.clone());
    // Innermost first: the fence is checked as a request is sent, after any wait outside it.
    ClientBuilder::new(transport, default_namespace.to_string())
        .with_layer(&deadline::RequestDeadline)
        .with_layer(&option_layer(fence))
        .with_layer(&ServiceBuilder::new().map_response(warnings::log))
        .with_layer(&count)
        .with_layer(&option_layer(limit))
        .with_layer(&RetryLayer::new(retry))
        .build()
}

/// `podset-operator/<version> (<instance>)`.
pub fn user_agent(instance: &str) -> String {
    format!("podset-operator/{} ({instance})", env!("CARGO_PKG_VERSION"))
}

/// kube's default stack (kubeconfig TLS and auth, impersonation headers, connect and read
/// timeouts) over a connector with `TCP_NODELAY`, through the kubeconfig's proxy if it names
/// one (`proxy`), without kube's retry policy.
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
                inner: config.rustls_https_connector_with_connector(proxy::Dial::new(&config)?)?,
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

/// Deletes the object named `name` only if it is still the one with this UID: one made since
/// under the same name is never the one deleted.
pub async fn delete_exact<K>(api: &kube::Api<K>, name: &str, uid: &str) -> kube::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    delete_unchanged(api, name, uid, None).await
}

/// As [`delete_exact`], and only if it is still at `resource_version` (if given): one
/// changed since it was read is never the one deleted (409).
pub async fn delete_unchanged<K>(
    api: &kube::Api<K>,
    name: &str,
    uid: &str,
    resource_version: Option<String>,
) -> kube::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = kube::api::DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: Some(uid.to_string()),
            resource_version,
        }),
        ..Default::default()
    };
    api.delete(name, &params).await.map(drop)
}

/// Deletes `name` in the foreground (what it owns first, then it) if it is still `uid` at
/// `resource_version`: as Job's TTL controller deletes a finished Job.
pub async fn delete_expired<K>(
    api: &kube::Api<K>,
    name: &str,
    uid: &str,
    resource_version: Option<String>,
) -> kube::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = kube::api::DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: Some(uid.to_string()),
            resource_version,
        }),
        propagation_policy: Some(kube::api::PropagationPolicy::Foreground),
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

#[cfg(test)]
mod tests;
