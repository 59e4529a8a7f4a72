//! The operator's two endpoints: probes (`/livez`, `/readyz`) in plain HTTP for the kubelet,
//! which has no token, and `/metrics` (Prometheus text), by default over HTTPS for callers
//! the API server authenticates and authorizes (see [`auth`]).

pub mod auth;
mod connection;
pub mod serve;
pub mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;
use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::health::Health;
use serve::Limits;

/// How `/metrics` is served.
pub enum MetricsSecurity {
    /// HTTPS, each scrape authenticated and authorized through the API server.
    Secure {
        /// `tls.crt` and `tls.key`; `None` makes a self-signed certificate.
        cert_dir: Option<PathBuf>,
        client: kube::Client,
    },
    /// Plain HTTP to anyone who can reach the port: local development only.
    Plain,
}

/// Serves `/livez` and `/readyz` on `addr` until `shutdown`. Returns the bound address
/// (`addr` may ask for port 0).
pub async fn serve_probes(
    addr: SocketAddr,
    health: Arc<Health>,
    shutdown: CancellationToken,
) -> std::io::Result<SocketAddr> {
    let app = Router::new()
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .with_state(health);
    serve_on(addr, None, app, Limits::PROBES_AND_METRICS, shutdown).await
}

/// Serves `/metrics` on `addr` until `shutdown`. Returns the bound address.
pub async fn serve_metrics(
    addr: SocketAddr,
    registry: Registry,
    security: MetricsSecurity,
    shutdown: CancellationToken,
) -> anyhow::Result<SocketAddr> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .with_state(Arc::new(registry));
    match security {
        MetricsSecurity::Plain => {
            Ok(serve_on(addr, None, app, Limits::PROBES_AND_METRICS, shutdown).await?)
        }
        MetricsSecurity::Secure { cert_dir, client } => {
            let config = tls::server_config(cert_dir.as_deref(), tls::RELOAD_EVERY, &shutdown)?;
            let app = app.layer(axum::middleware::from_fn_with_state(
                auth::MetricsAuth::new(client),
                auth::require,
            ));
            let tls = tokio_rustls::TlsAcceptor::from(config);
            Ok(serve_on(addr, Some(tls), app, Limits::PROBES_AND_METRICS, shutdown).await?)
        }
    }
}

/// Binds `addr` and serves `app` there within `limits` (see [`serve`]); the bound address.
pub async fn serve_on(
    addr: SocketAddr,
    tls: Option<tokio_rustls::TlsAcceptor>,
    app: Router,
    limits: Limits,
    shutdown: CancellationToken,
) -> std::io::Result<SocketAddr> {
    let listener = bind(addr)?;
    let bound = listener.local_addr()?;
    tokio::spawn(serve::serve(listener, tls, app, limits, shutdown));
    Ok(bound)
}

/// Listens on `addr`. IPv6's unspecified address (`:PORT` on the command line) listens on
/// both families, as Go's `:8443` does, so that a pod on an IPv6-only or dual-stack cluster
/// is probed and scraped on its IPv6 address too; a host without IPv6 gets IPv4's.
fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let any = addr.is_ipv6() && addr.ip().is_unspecified();
    let socket = match Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP)) {
        Err(e) if any && e.raw_os_error() == Some(libc_eafnosupport()) => {
            return bind(SocketAddr::from(([0, 0, 0, 0], addr.port())));
        }
        socket => socket?,
    };
    if any {
        socket.set_only_v6(false)?;
    }
    // As `TcpListener::bind` does: a restarted operator rebinds a port in TIME_WAIT.
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    TcpListener::from_std(socket.into())
}

/// `EAFNOSUPPORT`: the kernel has no IPv6 (booted with `ipv6.disable=1`).
const fn libc_eafnosupport() -> i32 {
    97
}

fn probe(ok: bool) -> (StatusCode, &'static str) {
    if ok {
        (StatusCode::OK, "ok\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ok\n")
    }
}

async fn livez(State(health): State<Arc<Health>>) -> impl IntoResponse {
    probe(health.is_live())
}

async fn readyz(State(health): State<Arc<Health>>) -> impl IntoResponse {
    probe(health.is_ready())
}

async fn metrics(State(registry): State<Arc<Registry>>) -> impl IntoResponse {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        )
            .into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `:PORT`, the default, answers probes on IPv4 and IPv6 loopback alike (issue 46: the
    /// listeners bound IPv4 only, so an IPv6-only pod was never probed).
    #[tokio::test]
    async fn a_port_alone_answers_on_both_families() {
        let health = Arc::new(Health::default());
        let addr = crate::flags::bind_address(":0").unwrap();
        let shutdown = CancellationToken::new();
        let bound = serve_probes(addr, health, shutdown.clone()).await.unwrap();
        for host in ["127.0.0.1", "[::1]"] {
            let url = format!("http://{host}:{}/livez", bound.port());
            let answer = reqwest::get(&url).await.unwrap();
            assert_eq!(answer.status(), 200, "{url}");
        }
        shutdown.cancel();
    }

    /// Writes a fresh self-signed certificate for `name` into `dir`; its DER.
    fn rotate(dir: &std::path::Path, name: &str) -> Vec<u8> {
        let made = rcgen::generate_simple_self_signed(vec![name.into()]).unwrap();
        std::fs::write(dir.join("tls.key"), made.signing_key.serialize_pem()).unwrap();
        std::fs::write(dir.join("tls.crt"), made.cert.pem()).unwrap();
        made.cert.der().to_vec()
    }

    /// The certificate an HTTPS request to `port` is shown.
    async fn presented(port: u16) -> Vec<u8> {
        let client = reqwest::Client::builder()
            .danger_accept_invalid_certs(true)
            .tls_info(true)
            .build()
            .unwrap();
        let answer = client
            .get(format!("https://127.0.0.1:{port}/"))
            .send()
            .await
            .unwrap();
        let info = answer.extensions().get::<reqwest::tls::TlsInfo>().unwrap();
        info.peer_certificate().unwrap().to_vec()
    }

    /// Issue 46: the metrics certificate was read once; cert-manager's renewal was never
    /// served until a restart. A rotation is served by the next handshakes.
    #[tokio::test]
    async fn a_rotated_certificate_is_served_without_a_restart() {
        let tmp = tempfile::tempdir().unwrap();
        let first = rotate(tmp.path(), "first");
        let shutdown = CancellationToken::new();
        let every = std::time::Duration::from_millis(20);
        let config = tls::server_config(Some(tmp.path()), every, &shutdown).unwrap();
        let tls = Some(tokio_rustls::TlsAcceptor::from(config));
        let addr = SocketAddr::from(([127, 0, 0, 1], 0));
        let app = Router::new().route("/", get(|| async { "ok" }));
        let port = serve_on(addr, tls, app, Limits::PROBES_AND_METRICS, shutdown.clone())
            .await
            .unwrap()
            .port();
        assert_eq!(presented(port).await, first);

        let second = rotate(tmp.path(), "second");
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        while presented(port).await != second {
            assert!(
                tokio::time::Instant::now() < deadline,
                "never served the rotated one"
            );
            tokio::time::sleep(every).await;
        }
        shutdown.cancel();
    }
}
