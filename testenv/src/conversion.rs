//! The At's conversion webhook for a local cluster whose operator runs on the host (the tests'
//! shared clusters, `make run`): the operator's own handler (`podset_operator::webhook`),
//! served on loopback from a thread of the cluster's, with a certificate for 127.0.0.1 from a
//! CA of its own; the CRDs the cluster installs point their conversion at it. An operator
//! deployed into the cluster (`tests/in_cluster`) points the At CRD at its own Service.

use std::net::SocketAddr;

use anyhow::{Context, Result, anyhow};
use k8s_openapi::ByteString;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, WebhookClientConfig,
};
use podset_operator::http::{serve::Limits, serve_on, tls::Held};
use podset_operator::webhook::certs::{self, CA_CRT, Need, TLS_CRT, TLS_KEY};
use tokio_util::sync::CancellationToken;

/// A conversion webhook served until dropped.
pub struct Conversion {
    pub url: String,
    ca: Vec<u8>,
    stop: CancellationToken,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Conversion {
    /// Serves the webhook on a free loopback port, from a thread of its own (the cluster
    /// outlives any one test's runtime).
    pub fn start() -> Result<Self> {
        let Need::Write(stored) = certs::need(None, &["127.0.0.1".into()], jiff::Timestamp::now())?
        else {
            return Err(anyhow!("no certificate made"));
        };
        let held = Held::new(
            stored.get(TLS_CRT).unwrap_or_default(),
            stored.get(TLS_KEY).unwrap_or_default(),
        )?;
        let tls = tokio_rustls::TlsAcceptor::from(held.config()?);
        let stop = CancellationToken::new();
        let (bound_tx, bound_rx) = std::sync::mpsc::channel();
        let serving = stop.clone();
        let thread = std::thread::Builder::new()
            .name("conversion-webhook".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime");
                runtime.block_on(async move {
                    let addr = SocketAddr::from(([127, 0, 0, 1], 0));
                    let app = podset_operator::webhook::router();
                    let bound =
                        serve_on(addr, Some(tls), app, Limits::WEBHOOK, serving.clone()).await;
                    let _ = bound_tx.send(bound.map_err(|e| e.to_string()));
                    serving.cancelled().await;
                });
            })?;
        let bound = bound_rx
            .recv()
            .context("the webhook thread ended")?
            .map_err(|e| anyhow!("serving the conversion webhook: {e}"))?;
        Ok(Self {
            url: format!("https://{bound}{}", podset_operator::api::CONVERT_PATH),
            ca: stored.get(CA_CRT).unwrap_or_default().to_vec(),
            stop,
            thread: Some(thread),
        })
    }

    /// `crd` with its conversion, if a webhook's, pointed here.
    pub fn point(&self, crd: &mut CustomResourceDefinition) {
        let webhook = crd
            .spec
            .conversion
            .as_mut()
            .and_then(|c| c.webhook.as_mut());
        if let Some(webhook) = webhook {
            webhook.client_config = Some(WebhookClientConfig {
                url: Some(self.url.clone()),
                ca_bundle: Some(ByteString(self.ca.clone())),
                service: None,
            });
        }
    }
}

impl Drop for Conversion {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
