//! The network between one replica and the API server model: the transport under the
//! operator's real client (`client::over`), in place of kube's HTTP stack. It carries out the
//! fault schedule's plan for each request: a connection refused or slow to open, a refusal
//! before anything is done, a reply lost or never sent after the request was carried out, a
//! slow reply; and for a watch, a stall or an early end. A request that left is carried out
//! even if the replica dies meanwhile, as a real API server would. Writes are checked against
//! the replica's fence as they leave, as the operator's own write connections check them.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use futures::future::BoxFuture;
use http::{Request, Response};
use http_body::Frame;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use kube::client::Body;
use podset_operator::client::Admit as _;
use podset_operator::client::NotSent;
use podset_operator::fence::Fence;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, sleep, sleep_until};
use tower::{BoxError, Service};

use crate::faults::{self, After, Before, Connect, Fault, Sidecar, WatchPlan};
use crate::model::error::ApiError;
use crate::model::http::{self as api, Answer};
use crate::oracle::Actor;
use crate::replica::Replica;
use crate::world::Sim;

pub type Reply = Response<UnsyncBoxBody<Bytes, BoxError>>;

/// One way across the network and back, for a request that met no fault.
const LATENCY: Duration = Duration::from_millis(2);

#[derive(Clone)]
pub struct Transport {
    sim: Arc<Sim>,
    replica: Arc<Replica>,
    /// The replica's incarnation that sends through this transport.
    actor: Actor,
    /// The fence of the controllers' writes, for the oracle: none may arrive while closed.
    fence: Option<Fence>,
}

impl Transport {
    pub fn new(sim: Arc<Sim>, replica: Arc<Replica>, actor: Actor, fence: Option<Fence>) -> Self {
        Self {
            sim,
            replica,
            actor,
            fence,
        }
    }

    /// Waits while the replica is frozen; forever once its incarnation is dead.
    async fn alive(&self) {
        self.replica.gate.pass().await;
        if !self.replica.is_alive(self.actor) {
            std::future::pending::<()>().await;
        }
    }

    async fn send(self, req: Request<Body>) -> Result<Reply, BoxError> {
        let (parts, body) = req.into_parts();
        let body = body.collect().await?.to_bytes();
        let (method, path) = (parts.method, parts.uri.path().to_string());
        let query = parts.uri.query().unwrap_or_default().to_string();
        let Actor::Replica { id, .. } = self.actor else {
            unreachable!("a transport carries a replica's requests")
        };
        let request = faults::Request {
            replica: id,
            method: &method,
            path: &format!("{path}?{query}"),
        };
        let plan = self.sim.with(|w| w.faults.plan_request(&request));
        self.alive().await;
        if plan.connect == Connect::Refused {
            return Err(NotSent("connection refused".into()).into());
        }
        if let Connect::Slow(d) = plan.connect {
            sleep(d).await;
        }
        self.alive().await;
        // As the operator's write connections do (`client::gated`): the fence is checked as
        // the bytes would leave.
        let mutating = api::mutating(&method);
        if mutating && let Some(Err(refused)) = self.fence.as_ref().map(Fence::admit) {
            return Err(Box::new(std::io::Error::other(refused)));
        }
        // The request leaves the process now: whatever comes back, it may have been done.
        if mutating {
            self.leaving(&method, &path);
        }
        let mut body = body;
        let hold = match plan.before {
            Before::Status(code, reason) => return Ok(json_reply(code, &status(code, reason))),
            Before::WebhookDown => return Ok(json_reply(500, &webhook_down())),
            Before::StripLabel => {
                body = strip_managed_by(&body);
                Duration::ZERO
            }
            Before::Sidecar(sidecar) => {
                body = add_sidecar(&body, sidecar);
                Duration::ZERO
            }
            Before::Hang => return hang().await,
            Before::Hold(d) => d,
            Before::Pass => Duration::ZERO,
        };
        let (tx, rx) = oneshot::channel();
        let (sim, actor) = (self.sim.clone(), self.actor);
        let (m, p, q) = (method.clone(), path.clone(), query.clone());
        // Detached: once sent, the request is carried out whatever happens to the replica.
        tokio::spawn(async move {
            sleep(LATENCY + hold).await;
            let _ = tx.send(sim.serve(actor, hold, &m, &p, &q, &body));
        });
        let answer = rx.await?;
        self.trace(&method, &path, &query, &answer);
        if mutating && self.sim.with(|w| w.faults.fire(Fault::CrashAfterWrite)) {
            self.replica.crash_and_restart(&self.sim, self.actor);
        }
        sleep(LATENCY + plan.slow_reply).await;
        self.alive().await;
        match plan.after {
            After::Reply => Ok(self.reply(answer, plan.watch)),
            After::Lost => Err(reset()),
            After::Hang => hang().await,
            After::Timeout => Ok(json_reply(504, &status(504, "Timeout"))),
        }
    }

    /// A write leaves the replica: the oracle checks that it leads.
    fn leaving(&self, method: &http::Method, path: &str) {
        let fenced = self.fence.as_ref().map(Fence::is_open);
        let what = format!("{method} {path}");
        self.sim
            .with(|w| w.oracle.departs(self.actor, fenced, &what));
    }

    fn trace(&self, method: &http::Method, path: &str, query: &str, answer: &Answer) {
        self.sim.trace(|| {
            let code = match answer {
                Answer::Reply(code, _) => code.to_string(),
                Answer::Watch(..) => "watch".into(),
            };
            let query = if query.is_empty() {
                String::new()
            } else {
                format!("?{query}")
            };
            format!("{} {method} {path}{query} -> {code}", self.actor)
        });
    }

    fn reply(&self, answer: Answer, watch: Option<WatchPlan>) -> Reply {
        match answer {
            Answer::Reply(code, body) => json_reply(code, &body),
            Answer::Watch(events, timeout) => {
                let plan = watch.unwrap_or_else(|| self.sim.with(|w| w.faults.plan_watch()));
                let body = watch_body(events, plan, timeout, self.replica.clone());
                Response::builder()
                    .status(200)
                    .header(http::header::CONTENT_TYPE, "application/json")
                    .body(body)
                    .expect("a valid response")
            }
        }
    }
}

impl Service<Request<Body>> for Transport {
    type Response = Reply;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Reply, BoxError>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), BoxError>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        Box::pin(self.clone().send(req))
    }
}

fn status(code: u16, reason: &'static str) -> Value {
    ApiError::new(code, reason, format!("simulated {reason}")).status()
}

/// kube-apiserver's answer when a webhook with `failurePolicy: Fail` cannot be called.
fn webhook_down() -> Value {
    let message = "Internal error occurred: failed calling webhook \"validate.sim\": failed to call webhook: Post \"https://validate.sim:443/pods?timeout=10s\": dial tcp 10.96.0.10:443: connect: connection refused";
    ApiError::new(500, "InternalError", message.to_string()).status()
}

/// The pod as a mutating webhook that takes away the operator's label would store it.
fn strip_managed_by(body: &Bytes) -> Bytes {
    let Ok(mut pod) = serde_json::from_slice::<Value>(body) else {
        return body.clone();
    };
    if let Some(labels) = pod
        .pointer_mut("/metadata/labels")
        .and_then(Value::as_object_mut)
    {
        labels.remove(podset_operator::api::MANAGED_BY_LABEL);
    }
    Bytes::from(serde_json::to_vec(&pod).expect("a pod serializes"))
}

/// What a service mesh's injector does to a pod: its proxy, as a container named to sort
/// first, or as a sidecar init container. What the proxy does once the pod's own container
/// ended is in its command (`sleep infinity`: it runs on; `exit N`: it ends so).
fn add_sidecar(body: &Bytes, sidecar: Sidecar) -> Bytes {
    let Ok(mut pod) = serde_json::from_slice::<Value>(body) else {
        return body.clone();
    };
    let command = match sidecar.exits {
        Some(code) => format!("proxy; exit {code}"),
        None => "sleep infinity".into(),
    };
    let mut proxy = serde_json::json!({"name": "a-proxy", "image": "proxy",
        "command": ["sh", "-c", command]});
    let list = if sidecar.native {
        proxy["restartPolicy"] = "Always".into();
        "/spec/initContainers"
    } else {
        "/spec/containers"
    };
    if pod.pointer(list).is_none() {
        pod["spec"]["initContainers"] = serde_json::json!([]);
    }
    if let Some(containers) = pod.pointer_mut(list).and_then(Value::as_array_mut) {
        containers.insert(0, proxy);
    }
    Bytes::from(serde_json::to_vec(&pod).expect("a pod serializes"))
}

fn json_reply(code: u16, body: &Value) -> Reply {
    let mut builder = Response::builder()
        .status(code)
        .header(http::header::CONTENT_TYPE, "application/json");
    if code == 429 {
        builder = builder.header(http::header::RETRY_AFTER, "1");
    }
    let bytes = Bytes::from(serde_json::to_vec(body).expect("JSON serializes"));
    builder
        .body(Full::new(bytes).map_err(|e| match e {}).boxed_unsync())
        .expect("a valid response")
}

fn reset() -> BoxError {
    Box::new(std::io::Error::new(
        std::io::ErrorKind::ConnectionReset,
        "connection reset by peer",
    ))
}

/// No answer: the request waits for its deadline (a watch's too: its head never comes).
async fn hang() -> Result<Reply, BoxError> {
    std::future::pending().await
}

/// A watch's events as a streaming body: held through a stall, ended at the timeout or the
/// cut, and not read while the replica is frozen. A quiet watch goes on: its HTTP/2
/// connection's PINGs are answered.
fn watch_body(
    events: mpsc::UnboundedReceiver<Bytes>,
    plan: WatchPlan,
    timeout: Duration,
    replica: Arc<Replica>,
) -> UnsyncBoxBody<Bytes, BoxError> {
    let start = Instant::now();
    let end = start + plan.cut.unwrap_or(timeout).min(timeout);
    let stall = plan
        .stall
        .map(|(from, len)| (start + from, start + from + len));
    let state = Some((events, replica));
    let stream = futures::stream::unfold(state, move |state| async move {
        let (mut events, replica) = state?;
        tokio::select! {
            biased;
            _ = sleep_until(end) => None,
            line = events.recv() => {
                let line = line?;
                if let Some((from, until)) = stall
                    && (from..until).contains(&Instant::now())
                {
                    sleep_until(until).await;
                }
                replica.gate.pass().await;
                Some((Ok(Frame::data(line)), Some((events, replica))))
            }
        }
    });
    StreamBody::new(stream.boxed()).boxed_unsync()
}
