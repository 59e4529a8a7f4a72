//! An in-memory Lease API that keeps resourceVersions as the API server does (a write over a
//! stale one is a 409), fails requests on demand, holds a create at the server, and serves
//! watches that never deliver.

use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response};
use http_body_util::{Either, Full, StreamBody};
use hyper::body::{Bytes, Frame};
use kube::Client;
use kube::client::Body;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tower::BoxError;

use super::NAME;

#[derive(Default)]
pub(super) struct State {
    /// The Lease's spec and resourceVersion, if there is one.
    pub(super) lease: Option<(Value, u64)>,
    /// How many more requests to answer with a 500.
    pub(super) fail: usize,
    /// How long the next create is held at the server before it is carried out.
    pub(super) hold_create: Duration,
    /// Every request but watches: (method, the holder it wrote, if any).
    pub(super) seen: Vec<(Method, Option<String>)>,
    /// Done when a PUT arrives, before it is answered.
    pub(super) on_put: Option<Box<dyn FnMut() + Send>>,
}

impl State {
    pub(super) fn lease_json(&self) -> Option<Value> {
        self.lease.as_ref().map(|(spec, rv)| {
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": NAME, "namespace": "ns", "resourceVersion": rv.to_string()},
                "spec": spec})
        })
    }

    /// Someone else writes the Lease (a standby, an administrator).
    pub(super) fn write(&mut self, spec: Value) {
        let rv = self.lease.as_ref().map_or(1, |(_, rv)| rv + 1);
        self.lease = Some((spec, rv));
    }

    pub(super) fn holder(&self) -> Option<String> {
        let (spec, _) = self.lease.as_ref()?;
        spec["holderIdentity"].as_str().map(String::from)
    }
}

pub(super) type ApiState = Arc<Mutex<State>>;
/// A whole JSON reply, or a watch that never delivers.
type Reply = Response<
    Either<Full<Bytes>, StreamBody<futures::stream::Pending<Result<Frame<Bytes>, BoxError>>>>,
>;

fn reply(code: u16, body: Value) -> Reply {
    Response::builder()
        .status(code)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Either::Left(Full::new(Bytes::from(body.to_string()))))
        .unwrap()
}

fn status(code: u16, reason: &str) -> Reply {
    reply(
        code,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "code": code, "reason": reason, "message": reason}),
    )
}

fn answer(state: &ApiState, method: Method, query: &str, body: Value) -> Reply {
    let mut s = state.lock();
    if query.contains("watch=true") {
        return Response::new(Either::Right(StreamBody::new(futures::stream::pending())));
    }
    let holder = body["spec"]["holderIdentity"].as_str().map(String::from);
    s.seen.push((method.clone(), holder));
    if s.fail > 0 {
        s.fail -= 1;
        return status(500, "InternalError");
    }
    if method == Method::PUT
        && let Some(on_put) = s.on_put.as_mut()
    {
        on_put();
    }
    let list = query.contains("fieldSelector");
    match method {
        Method::GET if list => {
            let items: Vec<Value> = s.lease_json().into_iter().collect();
            reply(
                200,
                json!({"kind": "LeaseList", "apiVersion": "coordination.k8s.io/v1",
                "metadata": {"resourceVersion": "1"}, "items": items}),
            )
        }
        Method::GET => match s.lease_json() {
            Some(l) => reply(200, l),
            None => status(404, "NotFound"),
        },
        Method::POST if s.lease.is_some() => status(409, "AlreadyExists"),
        Method::POST => {
            s.write(body["spec"].clone());
            reply(201, s.lease_json().unwrap())
        }
        Method::PUT => {
            let Some((_, rv)) = &s.lease else {
                return status(404, "NotFound");
            };
            if body["metadata"]["resourceVersion"].as_str() != Some(&rv.to_string()) {
                return status(409, "Conflict");
            }
            s.write(body["spec"].clone());
            reply(200, s.lease_json().unwrap())
        }
        _ => status(405, "MethodNotAllowed"),
    }
}

pub(super) fn api(state: ApiState) -> Client {
    let svc = tower::service_fn(move |req: Request<Body>| {
        let state = state.clone();
        async move {
            let (parts, body) = req.into_parts();
            let bytes = body.collect_bytes().await?;
            let body = serde_json::from_slice(&bytes).unwrap_or_default();
            let query = parts.uri.query().unwrap_or_default().to_string();
            if parts.method == Method::POST {
                let held = std::mem::take(&mut state.lock().hold_create);
                tokio::time::sleep(held).await;
            }
            Ok::<_, BoxError>(answer(&state, parts.method, &query, body))
        }
    });
    Client::new(svc, "ns")
}
