//! The probe and metrics endpoints: `/livez`, `/readyz` and `/metrics` (Prometheus text).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use crate::health::Health;

struct Shared {
    health: Arc<Health>,
    registry: Registry,
}

/// Serves the endpoints on `addr` until `shutdown`. Returns the bound address (`addr` may
/// ask for port 0).
pub async fn serve(
    addr: SocketAddr,
    health: Arc<Health>,
    registry: Registry,
    shutdown: CancellationToken,
) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let app = Router::new()
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(Arc::new(Shared { health, registry }));
    tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown.cancelled_owned())
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "probe and metrics server failed");
        }
    });
    Ok(bound)
}

fn probe(ok: bool) -> (StatusCode, &'static str) {
    if ok {
        (StatusCode::OK, "ok\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ok\n")
    }
}

async fn livez(State(s): State<Arc<Shared>>) -> impl IntoResponse {
    probe(s.health.is_live())
}

async fn readyz(State(s): State<Arc<Shared>>) -> impl IntoResponse {
    probe(s.health.is_ready())
}

async fn metrics(State(s): State<Arc<Shared>>) -> impl IntoResponse {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &s.registry) {
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
