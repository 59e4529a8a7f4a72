//! The connections under the client: TCP options, HTTP/2 for reads and watches, and the
//! timeouts and health checks that find a dead path.
//!
//! Reads and watches share one HTTP/2 connection with client-go's health check: after
//! [`PING_AFTER_IDLE`] without a byte read, a PING; no answer within [`PING_TIMEOUT`] and the
//! connection is closed, failing its watches, which start again on a new one. A quiet watch
//! is not a dead one: the API server sends a bookmark only once its resource changed, so an
//! idle cluster's watches may say nothing for their whole timeout, and only the PING tells a
//! live path from a dead one. Writes stay on HTTP/1.1, a connection each: hyper opens one
//! HTTP/2 connection per host and the API server allows 100 streams on it, fewer than the
//! writes in flight at a scale-up; and the fence closes a writer's connections, which on a
//! shared one would end the reads too (`client::gated`). A dead write connection is found by
//! the request deadline.
//!
//! The timeouts are ours whatever the `kube::Config` says: its constructors set a connect
//! timeout of 30 s and a write timeout of 295 s, which would leave a hung connect to the
//! request deadline (30 s too), and a request cut off there "may have acted" although it
//! never left. A connect (TCP and TLS) that has not finished in [`CONNECT_TIMEOUT`] fails as
//! a connect error: surely never sent.

use std::time::Duration;

use hyper_rustls::{FixedServerNameResolver, HttpsConnector};
use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::{Builder, connect::HttpConnector};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::{ConfigExt, RustlsTlsError};

use super::proxy::Dial;
use tower::{BoxError, Service};

/// How long the reads' HTTP/2 connection may deliver no byte before it is asked for a sign of
/// life. client-go waits 30 s and gives the answer 15 s: a blackholed path costs it up to
/// 45 s before its work moves on. Ours costs at most 25 s; an idle connection pays a 17-byte
/// frame and its answer every 15 s for it.
pub const PING_AFTER_IDLE: Duration = Duration::from_secs(15);
/// How long the answer to that PING may take before the connection counts as dead. The API
/// server answers a PING from its connection's own loop, ahead of any data it queues.
pub const PING_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a write's connection may sit idle in the pool and still be used again. Nothing
/// vouches for an idle HTTP/1.1 connection's path: a write sent on a dead one waits out the
/// request deadline (30 s). After a quiet spell (the reads' health check found a dead path at
/// least 10 s after it died) a write opens a new connection, a TLS handshake of a millisecond
/// or two; while writes flow, their connections are reused.
const WRITE_REUSE_IDLE: Duration = Duration::from_secs(5);
/// How long any connection may deliver no byte before it counts as dead: on HTTP/2 only a
/// backstop (the PINGs keep a live one talking); on a write's HTTP/1.1 connection the end of
/// one that hangs without a reset, idle in the pool. Counted from the last byte read or
/// written.
pub const READ_IDLE_TIMEOUT: Duration = Duration::from_secs(75);
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Well inside the request deadline (`client::REQUEST_TIMEOUT`).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
const KEEPALIVE_RETRIES: u32 = 3;

pub(super) fn tcp_connector() -> HttpConnector {
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    // A peer that vanished without a reset (its host died behind a load balancer) is found
    // by the kernel's probes of an idle connection.
    tcp.set_keepalive(Some(KEEPALIVE_IDLE));
    tcp.set_keepalive_interval(Some(KEEPALIVE_INTERVAL));
    tcp.set_keepalive_retries(Some(KEEPALIVE_RETRIES));
    tcp
}

/// The reads' connector: kube's TLS settings from the kubeconfig, offering HTTP/2 before
/// HTTP/1.1 (kube's own connector offers HTTP/1.1 only: kube-rs/kube#1923). An API server
/// that does not speak HTTP/2 gets HTTP/1.1.
pub(super) fn reads_connector(config: &kube::Config) -> Result<HttpsConnector<Dial>, kube::Error> {
    let builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config.rustls_client_config()?)
        .https_or_http();
    let builder = match &config.tls_server_name {
        Some(name) => {
            let name = name
                .clone()
                .try_into()
                .map_err(|e| kube::Error::RustlsTls(RustlsTlsError::InvalidServerName(e)))?;
            builder.with_server_name_resolver(FixedServerNameResolver::new(name))
        }
        None => builder,
    };
    Ok(builder
        .enable_http1()
        .enable_http2()
        .wrap_connector(Dial::new(config)?))
}

/// The reads' client, with the HTTP/2 health check.
pub(super) fn reads_client() -> Builder {
    pinging(PING_AFTER_IDLE, PING_TIMEOUT)
}

/// A client that PINGs a connection silent for `after`, and drops it if the answer takes
/// longer than `timeout`. hyper opens no second HTTP/2 connection while one is up.
fn pinging(after: Duration, timeout: Duration) -> Builder {
    let mut builder = hyper_util::client::legacy::Client::builder(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .http2_keep_alive_interval(after)
        .http2_keep_alive_timeout(timeout)
        .http2_keep_alive_while_idle(true);
    builder
}

/// The writes' client: HTTP/1.1, a connection each, not reused after [`WRITE_REUSE_IDLE`].
pub(super) fn writes_client() -> Builder {
    let mut builder = hyper_util::client::legacy::Client::builder(TokioExecutor::new());
    builder
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(WRITE_REUSE_IDLE);
    builder
}

pub(super) fn with_timeouts<C>(connector: C) -> TimeoutConnector<C>
where
    C: Service<http::Uri> + Send,
    C::Response: hyper::rt::Read + hyper::rt::Write + Send + Unpin,
    C::Future: Send + 'static,
    C::Error: Into<BoxError>,
{
    let mut connector = TimeoutConnector::new(connector);
    connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
    connector.set_read_timeout(Some(READ_IDLE_TIMEOUT));
    connector.set_write_timeout(Some(WRITE_TIMEOUT));
    connector.set_reset_reader_on_write(true);
    connector
}

#[cfg(test)]
mod health_check_tests;

/// Against local sockets, on paused time (it advances whenever everything waits, so
/// nothing here may take real time: a local socket is ready at once).
#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;
    use kube::Api;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use crate::client::{ControllerWrites, REQUEST_TIMEOUT, build, may_have_acted};
    use crate::fence::Fence;

    async fn api(scheme: &str, listener: &TcpListener) -> Api<Pod> {
        let addr = listener.local_addr().unwrap();
        let mut config = kube::Config::new(format!("{scheme}://{addr}").parse().unwrap());
        config.accept_invalid_certs = true;
        let controller_writes = ControllerWrites {
            max_in_flight: 1,
            fence: Fence::always_open(),
        };
        let client = build(config, "test", Default::default(), Some(controller_writes)).unwrap();
        Api::namespaced(client, "ns")
    }

    /// Issue 26, fault 1: a server that takes the connection and never answers the TLS
    /// handshake. The connect timeout ends it, not the request deadline (which could not
    /// tell it from a request sent): never sent.
    #[tokio::test(start_paused = true)]
    async fn a_hung_tls_handshake_is_a_request_never_sent() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let api = api("https", &listener).await;
        let server = tokio::spawn(async move {
            let (socket, _) = listener.accept().await.unwrap();
            std::future::pending::<()>().await;
            drop(socket);
        });
        let pod = serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}})).unwrap();
        let began = tokio::time::Instant::now();
        let error = api.create(&Default::default(), &pod).await.unwrap_err();
        assert!(!may_have_acted(&error), "taken as maybe sent: {error}");
        assert!(began.elapsed() < REQUEST_TIMEOUT, "{:?}", began.elapsed());
        server.abort();
    }

    /// Reads one request's head (these requests have no body).
    async fn read_request(socket: &mut TcpStream) {
        let mut request = Vec::new();
        while !request.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            assert_eq!(
                socket.read(&mut byte).await.unwrap(),
                1,
                "the client closed"
            );
            request.push(byte[0]);
        }
    }

    /// In one write: paused time jumps ahead whenever nothing is ready, so a reply split
    /// into segments that Nagle's algorithm holds back for a real 40 ms would time out.
    async fn answer(socket: &mut TcpStream) {
        let body = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"}}"#;
        let reply = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        socket.write_all(reply.as_bytes()).await.unwrap();
    }

    /// Issue 26, fault 1: the read timeout counted from the last byte read, so a request on
    /// a connection idle for a minute had a quarter of it left: a server answering in 20 s
    /// timed it out.
    #[tokio::test(start_paused = true)]
    async fn a_request_on_an_idle_connection_gets_the_whole_read_timeout() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let api = api("http", &listener).await;
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            read_request(&mut socket).await;
            answer(&mut socket).await;
            read_request(&mut socket).await;
            tokio::time::sleep(std::time::Duration::from_secs(20)).await;
            answer(&mut socket).await;
            std::future::pending::<()>().await;
        });
        api.get("p").await.expect("the first read");
        tokio::time::sleep(std::time::Duration::from_secs(60)).await;
        api.get("p").await.expect("the read on the idle connection");
        server.abort();
    }
}
