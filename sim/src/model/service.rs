//! The model under a `kube::Client`, with no network and no faults: each request is carried
//! out at once by a function of the model (a bare [`super::store::Store`] through
//! [`super::http::handle`], or a whole simulated world), and answered as the API server
//! answers, a watch as a stream of event lines that ends at its timeout.

use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use futures::future::BoxFuture;
use http::{Method, Request, Response};
use http_body::Frame;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use kube::client::Body;
use tokio::time::{Instant, sleep_until};
use tower::{BoxError, Service};

use super::http::Answer;

type Reply = Response<UnsyncBoxBody<Bytes, BoxError>>;

/// What carries out one request: its method, path, query and body.
type Serve = dyn Fn(&Method, &str, &str, &Bytes) -> Answer + Send + Sync;

/// A client whose every request `serve` carries out.
pub fn client(
    serve: impl Fn(&Method, &str, &str, &Bytes) -> Answer + Send + Sync + 'static,
) -> kube::Client {
    kube::Client::new(Direct(Arc::new(serve)), "default")
}

#[derive(Clone)]
struct Direct(Arc<Serve>);

impl Service<Request<Body>> for Direct {
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
        let serve = self.0.clone();
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            let body = body.collect().await?.to_bytes();
            let query = parts.uri.query().unwrap_or_default();
            Ok(reply(serve(&parts.method, parts.uri.path(), query, &body)))
        })
    }
}

/// The answer as a response: JSON, or a watch's events until its timeout (or until the model
/// ends the watch).
fn reply(answer: Answer) -> Reply {
    let builder = Response::builder().header(http::header::CONTENT_TYPE, "application/json");
    let (code, body) = match answer {
        Answer::Reply(code, body) => {
            let bytes = Bytes::from(serde_json::to_vec(&body).expect("JSON serializes"));
            (
                code,
                Full::new(bytes).map_err(|e| match e {}).boxed_unsync(),
            )
        }
        Answer::Watch(events, timeout) => {
            let end = Instant::now() + timeout;
            let stream = futures::stream::unfold(events, move |mut events| async move {
                tokio::select! {
                    _ = sleep_until(end) => None,
                    line = events.recv() => Some((Ok::<_, BoxError>(Frame::data(line?)), events)),
                }
            });
            (200, StreamBody::new(stream.boxed()).boxed_unsync())
        }
    };
    builder.status(code).body(body).expect("a valid response")
}
