//! The conversion webhook: every replica, leader or not, answers the API server's
//! `ConversionReview`s for Ats ([`crate::api::conversion`]) over TLS on `POST /convert`, so
//! that the API server can read and write an At at either version whichever replica it
//! reaches, and while leadership changes hands. Its certificate is mounted (cert-manager's,
//! renewed in place and read again: `http::tls`) or provisioned by the operator in a Secret
//! ([`keeper`]), with the CRD's `caBundle` kept current.
//!
//! Any pod can reach the port: a review's body is bounded ([`MAX_REVIEW_BYTES`], a list of
//! some 20,000 Ats), as are the reviews converted at once ([`CONVERTING_AT_ONCE`]) and the
//! connections (`http::serve`).

pub mod certs;
pub mod keeper;

use std::net::SocketAddr;
use std::path::PathBuf;

use axum::Router;
use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use kube::core::conversion::ConversionReview;
use tokio_util::sync::CancellationToken;
use tower::limit::ConcurrencyLimitLayer;

use crate::api::{CONVERT_PATH, conversion};
use crate::http::{self, serve::Limits, tls};
use keeper::{Provisioned, Service};

/// The largest review read: the API server sends a list's objects in one review, and an At
/// is about 1.5 KiB.
pub const MAX_REVIEW_BYTES: usize = 32 << 20;
/// Reviews read and converted at once; more wait their turn (the API server allows a
/// conversion 30 s).
pub const CONVERTING_AT_ONCE: usize = 4;
/// How long the webhook is still served once the operator has stopped: the API server picks
/// the replica it calls from the Service's endpoints, which drop a terminating pod a moment
/// after it got SIGTERM.
pub const DRAIN: std::time::Duration = std::time::Duration::from_secs(5);

/// Where the webhook's certificate comes from.
#[derive(Clone, Debug)]
pub enum Certificate {
    /// `tls.crt` and `tls.key` in a directory (a mounted Secret, cert-manager's), read again
    /// when they change; with a Service, the At CRD kept pointed at it, trusting the `ca.crt`
    /// beside them.
    Mounted(PathBuf, Option<Service>),
    /// Made and renewed by the operator in a Secret.
    Provisioned(Provisioned),
}

/// Serves the webhook on `addr` until `stop`, once it has a certificate (a provisioned one
/// is waited for, until `shutdown`); the bound address, or `None` if shut down first.
pub async fn serve(
    addr: SocketAddr,
    certificate: Certificate,
    client: kube::Client,
    shutdown: &CancellationToken,
    stop: CancellationToken,
) -> anyhow::Result<Option<SocketAddr>> {
    let config = match certificate {
        Certificate::Mounted(dir, service) => {
            let config = tls::server_config(Some(&dir), tls::RELOAD_EVERY, &stop)?;
            if let Some(service) = service {
                tokio::spawn(keeper::keep_pointed(client, service, dir, stop.clone()));
            }
            config
        }
        Certificate::Provisioned(provisioned) => {
            let Some(held) = keeper::first(&client, &provisioned, shutdown).await else {
                return Ok(None);
            };
            let config = held.config()?;
            tokio::spawn(keeper::keep(client, provisioned, held, stop.clone()));
            config
        }
    };
    let tls = tokio_rustls::TlsAcceptor::from(config);
    let bound = http::serve_on(addr, Some(tls), router(), Limits::WEBHOOK, stop).await?;
    Ok(Some(bound))
}

/// `POST /convert`, bounded.
pub fn router() -> Router {
    Router::new()
        .route(CONVERT_PATH, post(convert))
        .layer(DefaultBodyLimit::max(MAX_REVIEW_BYTES))
        .layer(ConcurrencyLimitLayer::new(CONVERTING_AT_ONCE))
}

/// Converts off the runtime's threads: a list's review can take milliseconds.
async fn convert(body: Bytes) -> Response {
    let answered = tokio::task::spawn_blocking(move || {
        let review: ConversionReview = serde_json::from_slice(&body)?;
        serde_json::to_vec(&conversion::review(review))
    })
    .await;
    match answered {
        Ok(Ok(answer)) => ([(header::CONTENT_TYPE, "application/json")], answer).into_response(),
        Ok(Err(e)) => (
            StatusCode::BAD_REQUEST,
            format!("not a ConversionReview: {e}\n"),
        )
            .into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

#[cfg(test)]
mod tests;
