//! The connections under the client: TCP options, and the timeouts that find a dead path.
//!
//! The timeouts are ours whatever the `kube::Config` says: its constructors set a connect
//! timeout of 30 s and a write timeout of 295 s, which would leave a hung connect to the
//! request deadline (30 s too), and a request cut off there "may have acted" although it
//! never left. A connect (TCP and TLS) that has not finished in [`CONNECT_TIMEOUT`] fails as
//! a connect error: surely never sent.

use std::time::Duration;

use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use tower::{BoxError, Service};

/// How long a connection may deliver no byte before it counts as dead, whatever it carries:
/// a watch gets a bookmark from the API server about every minute even when nothing changes
/// (`allowWatchBookmarks`), so only a dead path stays silent longer. kube leaves it unset, and
/// a watch or request on a connection that hangs (no reset) then waits forever. Counted from
/// the last byte read or written: a request sent on a connection idle for a minute gets all
/// of it.
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

/// Against local sockets, on paused time (it advances whenever everything waits, so
/// nothing here may take real time: a local socket is ready at once).
#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;
    use kube::Api;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use crate::client::{ControllerWrites, REQUEST_TIMEOUT, build, may_have_acted};
    use crate::leader::Fence;

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
