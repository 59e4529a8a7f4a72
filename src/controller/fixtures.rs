//! What the controller tests share, including a scripted API for exact request sequences.

use std::sync::Arc;

use http::{Method, Request, Response};
use http_body_util::BodyExt;
use kube::Client;
use kube::client::Body;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tower::BoxError;

use super::context::Context;
use crate::api::PodSet;

/// A Context whose API answers nothing (for tests that never call it).
pub fn context() -> Arc<Context> {
    let svc = tower::service_fn(|_req: Request<Body>| async {
        Err::<Response<Body>, BoxError>("no API in unit tests".into())
    });
    context_over(Client::new(svc, "default"))
}

fn context_over(client: Client) -> Arc<Context> {
    Arc::new(Context::new(
        client,
        Default::default(),
        Default::default(),
        "test",
        Default::default(),
    ))
}

/// A request the scripted API received.
#[derive(Clone, Debug)]
pub struct Sent {
    pub method: Method,
    /// The path and query.
    pub path: String,
    /// The JSON body; `Null` when there was none.
    pub body: Value,
}

impl Sent {
    pub fn is(&self, method: &Method, path: &str) -> bool {
        self.method == method && self.path.split('?').next() == Some(path)
    }
}

/// What the scripted API does with a request.
pub enum Answer {
    /// A reply with this status code and JSON body.
    Reply(u16, Value),
    /// The request reached the server, the reply never came back (a connection reset).
    Lost,
}

impl Answer {
    /// The API server's error for `code` and `reason`.
    pub fn status(code: u16, reason: &str) -> Self {
        let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "code": code, "reason": reason, "message": format!("scripted {reason}")});
        Self::Reply(code, status)
    }
}

/// The requests the scripted API received, in order.
pub type Log = Arc<Mutex<Vec<Sent>>>;

/// A Context whose API answers each request with `answer(request, requests before it)`,
/// except events, which it accepts (no test here is about them).
pub fn scripted_context(
    answer: impl Fn(&Sent, &[Sent]) -> Answer + Send + Sync + 'static,
) -> (Arc<Context>, Log) {
    let (log, answer) = (Log::default(), Arc::new(answer));
    let received = log.clone();
    let svc = tower::service_fn(move |req: Request<Body>| {
        let (log, answer) = (received.clone(), answer.clone());
        async move {
            let (parts, body) = req.into_parts();
            let bytes = body.collect().await?.to_bytes();
            let sent = Sent {
                method: parts.method,
                path: parts
                    .uri
                    .path_and_query()
                    .map(|p| p.to_string())
                    .unwrap_or_default(),
                body: serde_json::from_slice(&bytes).unwrap_or_default(),
            };
            let mut log = log.lock();
            let answer = match sent.path.contains("/events") {
                true => Answer::Reply(201, sent.body.clone()),
                false => answer(&sent, &log),
            };
            log.push(sent);
            match answer {
                Answer::Lost => Err::<_, BoxError>("connection reset by peer".into()),
                Answer::Reply(code, body) => Ok(Response::builder()
                    .status(code)
                    .header(http::header::CONTENT_TYPE, "application/json")
                    .body(Body::from(serde_json::to_vec(&body)?))?),
            }
        }
    });
    (context_over(Client::new(svc, "default")), log)
}

/// PodSet `ns/web` with UID `ps-uid` and one replica.
pub fn podset() -> PodSet {
    crate::plan::fixtures::podset(1)
}
