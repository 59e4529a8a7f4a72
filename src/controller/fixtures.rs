//! What the controller tests share, including a scripted API for exact request sequences.

use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response};
use http_body_util::BodyExt;
use kube::Client;
use kube::client::Body;
use kube::runtime::controller::Action;
use kube::runtime::events::{Recorder, Reporter};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tower::BoxError;

use super::{Backoff, Context};
use crate::api::PodSet;
use crate::expectations::{Expectations, StatusWrites};

/// A Context whose API answers nothing (for tests that never call it).
pub fn context() -> Arc<Context> {
    let svc = tower::service_fn(|_req: Request<Body>| async {
        Err::<Response<Body>, BoxError>("no API in unit tests".into())
    });
    context_over(Client::new(svc, "default"))
}

fn context_over(client: Client) -> Arc<Context> {
    Arc::new(Context {
        client: client.clone(),
        pods: Default::default(),
        expectations: Expectations::default(),
        recorder: Recorder::new(
            client,
            Reporter {
                controller: "test".into(),
                instance: None,
            },
        ),
        metrics: Default::default(),
        backoff: Backoff::default(),
        podset_statuses: StatusWrites::default(),
        resync: std::time::Duration::from_secs(300),
    })
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

    /// A 1.20 API server's refusal of a pod owned by a kind its admission has not mapped yet
    /// (the first 30 s after the CRDs are installed, or after it restarts).
    pub fn unmapped_owner_kind() -> Self {
        let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "code": 403, "reason": "Forbidden", "message": UNMAPPED_OWNER_KIND});
        Self::Reply(403, status)
    }
}

/// The message of that refusal, as a 1.20 API server words it.
pub const UNMAPPED_OWNER_KIND: &str = "pods \"web-pod7z7ts\" is forbidden: cannot set \
    blockOwnerDeletion in this case because cannot find RESTMapping for APIVersion \
    app.example.com/v1alpha1 Kind PodSet: no matches for kind \"PodSet\" in version \
    \"app.example.com/v1alpha1\"";

/// The delay `action` requeues after: kube's Action keeps it private, and its Debug shows
/// it as a Duration (`Some(2.5s)`, `Some(800ms)`).
pub fn requeue_after(action: &Action) -> Option<Duration> {
    let debug = format!("{action:?}");
    let shown = debug.split("Some(").nth(1)?.split(')').next()?;
    let (number, unit) = match shown.strip_suffix("ms") {
        Some(ms) => (ms, 1e-3),
        None => (shown.strip_suffix('s')?, 1.0),
    };
    Some(Duration::from_secs_f64(number.parse::<f64>().ok()? * unit))
}

/// Reconciles `reconcile` 8 times: a refusal that clears by itself within seconds must be
/// retried within seconds every time, not after a backoff that doubles (8 s by the 4th).
pub async fn assert_retried_within_seconds<F: std::future::Future<Output = Action>>(
    mut reconcile: impl FnMut() -> F,
) {
    for attempt in 1..=8 {
        let after = requeue_after(&reconcile().await);
        assert!(
            after.is_some_and(|d| d <= Duration::from_secs(5)),
            "attempt {attempt} retries after {after:?}"
        );
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
