//! Every request sent, counted by its answer's code, method and resource, as client-go's
//! `rest_client_requests_total` counts them; a write the leader's fence refused was never
//! sent, and is counted as such instead.

use std::sync::Arc;

use http::{Method, Request};
use tower::BoxError;

use super::acted::refused_by_fence;
use super::guard::{Answer, Guard, Reply};
use crate::metrics::Metrics;

/// Counts the answers of the requests it passes.
#[derive(Clone)]
pub struct Counted {
    metrics: Arc<Metrics>,
    request: Option<(Method, String)>,
}

impl Counted {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self {
            metrics,
            request: None,
        }
    }
}

impl Guard for Counted {
    fn keeps<B>(&self, _req: &Request<B>) -> bool {
        true
    }

    fn for_request<B>(&self, req: &Request<B>) -> Option<Self> {
        let request = (req.method().clone(), resource(req.uri().path()));
        Some(Self {
            metrics: self.metrics.clone(),
            request: Some(request),
        })
    }

    async fn around<T: Reply>(self, answer: impl Answer<T>) -> Result<T, BoxError> {
        let answer = answer.await;
        let Some((method, resource)) = &self.request else {
            return answer;
        };
        match &answer {
            Err(e) if refused_by_fence(e.as_ref()) => {
                self.metrics.fence_refusals.inc();
            }
            Err(_) => self.metrics.api_request(method.as_str(), resource, None),
            Ok(reply) => self
                .metrics
                .api_request(method.as_str(), resource, reply.code()),
        };
        answer
    }
}

/// The resource an API path names (`pods`, `podsets/status`), or `other`: a bounded label,
/// never a name.
pub fn resource(path: &str) -> String {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let rest = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => return "other".into(),
    };
    let rest = match rest {
        ["namespaces", _ns, inner @ ..] if !inner.is_empty() => inner,
        rest => rest,
    };
    match rest {
        [resource, _name, sub, ..] => format!("{resource}/{sub}"),
        [resource, ..] => (*resource).into(),
        [] => "other".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_counted_by_its_resource_never_its_names() {
        for (path, resource_) in [
            ("/api/v1/namespaces/ns/pods", "pods"),
            ("/api/v1/namespaces/ns/pods/web-pod7x2", "pods"),
            ("/api/v1/pods", "pods"),
            ("/api/v1/namespaces/ns", "namespaces"),
            (
                "/apis/app.example.com/v1alpha1/namespaces/ns/podsets/web/status",
                "podsets/status",
            ),
            (
                "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l",
                "leases",
            ),
            (
                "/apis/authentication.k8s.io/v1/tokenreviews",
                "tokenreviews",
            ),
            ("/version", "other"),
        ] {
            assert_eq!(resource(path), resource_, "{path}");
        }
    }
}
