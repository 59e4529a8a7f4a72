//! One accepted connection, served until it ends or is asked to close: for room (another
//! address needs the slot), at the end of its lifetime, or at shutdown. Asked to close, it
//! finishes the request in flight (HTTP/1's graceful shutdown: the response is sent, then the
//! connection closes) within a grace: a request is answered or never read, never cut off,
//! so the API server's conversion call on a connection closed for room is not a failed read
//! of an At for its client.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::serve::MAX_HEAD_BYTES;

/// A client that opens a connection and never finishes its handshake holds one task, not the
/// listener, and only this long.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client may take to send a request's headers.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one connection is served, idle or not: a scraper that keeps it alive opens
/// another, and a client that holds one open cannot keep its slot.
const CONNECTION_LIFETIME: Duration = Duration::from_secs(120);
/// How long a connection asked to close may take to finish its request in flight. One that
/// gave up its slot for room no longer counts against the endpoint's bounds, so it has
/// less: a client cannot hold more than the bounds by being made to give way.
const GRACE: Duration = Duration::from_secs(10);
const GRACE_AFTER_GIVING_WAY: Duration = Duration::from_secs(1);

/// What asks a connection to close.
pub struct Closing {
    pub shutdown: CancellationToken,
    /// Cancelled when the connection's slot is wanted for another address.
    pub for_room: CancellationToken,
    pub lifetime_ends: Instant,
}

impl Closing {
    pub fn new(shutdown: CancellationToken, for_room: CancellationToken) -> Self {
        let lifetime_ends = Instant::now() + CONNECTION_LIFETIME;
        Self {
            shutdown,
            for_room,
            lifetime_ends,
        }
    }

    /// Waits until the connection is asked to close; why, and its grace.
    async fn asked(&self) -> (&'static str, Duration) {
        tokio::select! {
            _ = self.shutdown.cancelled() => ("shutting down", GRACE),
            _ = self.for_room.cancelled() => ("making room", GRACE_AFTER_GIVING_WAY),
            _ = tokio::time::sleep_until(self.lifetime_ends) => ("at the end of its lifetime", GRACE),
        }
    }
}

/// Serves `tcp` from `peer`, over TLS if `tls` is given, until it ends or `closing` asks.
pub async fn serve(
    tcp: TcpStream,
    peer: SocketAddr,
    tls: Option<TlsAcceptor>,
    app: Router,
    closing: Closing,
) {
    let Some(tls) = tls else {
        return http(TokioIo::new(tcp), peer, app, &closing).await;
    };
    let accepted = tokio::select! {
        accepted = tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(tcp)) => accepted,
        (why, _) = closing.asked() => return debug!(%peer, "closing a connection in its handshake, {why}"),
    };
    match accepted {
        Ok(Ok(stream)) => http(TokioIo::new(stream), peer, app, &closing).await,
        Ok(Err(e)) => debug!(%peer, error = %e, "TLS handshake failed"),
        Err(_) => debug!(%peer, "TLS handshake timed out"),
    }
}

async fn http<S>(io: TokioIo<S>, peer: SocketAddr, app: Router, closing: &Closing)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = TowerToHyperService::new(app);
    // HTTP/1 alone: the bounds here are its own, and the TLS configs offer nothing else.
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_buf_size(MAX_HEAD_BYTES);
    let connection = builder.serve_connection(io, service);
    tokio::pin!(connection);
    let ended = tokio::select! {
        ended = connection.as_mut() => ended,
        (why, grace) = closing.asked() => {
            debug!(%peer, "closing a connection {why}, after its request in flight");
            connection.as_mut().graceful_shutdown();
            match tokio::time::timeout(grace, connection).await {
                Ok(ended) => ended,
                Err(_) => return debug!(%peer, "a request in flight outlasted the grace"),
            }
        }
    };
    if let Err(e) = ended {
        debug!(%peer, error = %e, "connection ended with an error");
    }
}
