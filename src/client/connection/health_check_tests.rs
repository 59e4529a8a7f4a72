//! The reads' HTTP/2 health check against a local TLS server speaking HTTP/2, through a relay
//! that can go silent (a blackholed path: no byte, no reset). Real time, with the PINGs
//! scaled down: paused time would jump past a PING's answer still in a socket.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::{pinging, reads_connector, with_timeouts};

const AFTER: Duration = Duration::from_millis(200);
const TIMEOUT: Duration = Duration::from_millis(300);

/// An API server whose every answer is a watch that never says anything, over TLS offering
/// only HTTP/2.
async fn quiet_watch_server() -> std::net::SocketAddr {
    let never = tokio_util::sync::CancellationToken::new();
    let tls = crate::http::tls::server_config(None, crate::http::tls::RELOAD_EVERY, &never);
    let mut tls = (*tls.unwrap()).clone();
    tls.alpn_protocols = vec![b"h2".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(socket).await else {
                    return;
                };
                let watch = hyper::service::service_fn(|_req| async {
                    let silent = futures::stream::pending::<Result<Frame<Bytes>, Infallible>>();
                    Ok::<_, Infallible>(hyper::Response::new(StreamBody::new(silent)))
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), watch)
                    .await;
            });
        }
    });
    addr
}

/// Relays connections to `upstream` until `silent` is set; from then on, holds them open
/// and passes nothing either way.
async fn relay(upstream: std::net::SocketAddr, silent: Arc<AtomicBool>) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let server = TcpStream::connect(upstream).await.unwrap();
            let (client_read, client_write) = client.into_split();
            let (server_read, server_write) = server.into_split();
            tokio::spawn(pass(client_read, server_write, silent.clone()));
            tokio::spawn(pass(server_read, client_write, silent.clone()));
        }
    });
    addr
}

async fn pass(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    silent: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    while let Ok(n) = from.read(&mut buf).await {
        if n == 0 || silent.load(Ordering::SeqCst) {
            break;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    // Silent: hold both ends, pass nothing.
    std::future::pending::<()>().await;
}

/// Opens a watch through a relay; returns its body and the relay's switch.
async fn watch() -> (hyper::body::Incoming, Arc<AtomicBool>) {
    let silent = Arc::new(AtomicBool::new(false));
    let addr = relay(quiet_watch_server().await, silent.clone()).await;
    let mut config = kube::Config::new(format!("https://{addr}").parse().unwrap());
    config.accept_invalid_certs = true;
    let client = pinging(AFTER, TIMEOUT).build(with_timeouts(reads_connector(&config).unwrap()));
    let req = http::Request::get(format!("https://{addr}/api/v1/pods?watch=true"))
        .body(Empty::<Bytes>::new())
        .unwrap();
    let answer = client.request(req).await.expect("the watch's head");
    assert_eq!(answer.version(), http::Version::HTTP_2, "HTTP/2 negotiated");
    (answer.into_body(), silent)
}

/// Issue 28, item 3: a healthy watch that says nothing is kept, its PINGs answered.
#[tokio::test]
async fn a_quiet_watch_on_a_live_path_goes_on() {
    let (mut body, _silent) = watch().await;
    let quiet_for = (AFTER + TIMEOUT) * 5;
    let frame = tokio::time::timeout(quiet_for, body.frame()).await;
    assert!(frame.is_err(), "the quiet watch ended: {frame:?}");
}

/// Issue 28, item 3: once the path goes silent, the unanswered PING ends the connection and
/// the watch on it fails, within the idle time and the PING's timeout.
#[tokio::test]
async fn a_watch_on_a_silent_path_fails_once_its_ping_goes_unanswered() {
    let (mut body, silent) = watch().await;
    silent.store(true, Ordering::SeqCst);
    let began = Instant::now();
    let ended = tokio::time::timeout(Duration::from_secs(30), body.frame())
        .await
        .expect("the watch on a dead path was never ended");
    assert!(
        !matches!(ended, Some(Ok(_))),
        "the silent path delivered {ended:?}"
    );
    let took = began.elapsed();
    println!(
        "a silent path ended its watch after {took:?} (PING after {AFTER:?}, answer within {TIMEOUT:?})"
    );
    assert!(
        took >= TIMEOUT,
        "ended before its PING could go unanswered: {took:?}"
    );
}
