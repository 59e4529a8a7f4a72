//! The conversion webhook as the operator serves it with a mounted certificate (cert-manager's
//! Secret, as the kubelet mounts it: `tls.crt`, `tls.key`, `ca.crt`): the API server converts
//! every At read and written at v1alpha1 through it, and a renewed certificate is served by
//! the next handshakes, without a restart, while conversions go on.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::ByteString;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use podset_operator::api::At;
use podset_operator::api::at::v1alpha1;
use podset_operator::webhook::certs::{self, CA_CRT, Need, Stored, TLS_CRT, TLS_KEY};
use testenv::harness::{alpha_at, own_cluster_ns, poll};

/// A certificate for 127.0.0.1 from `found`'s CA (a new CA if none), issued as of `now`.
fn issued(found: Option<&Stored>, now: jiff::Timestamp) -> Result<Stored> {
    match certs::need(found, &["127.0.0.1".into()], now)? {
        Need::Write(stored) => Ok(stored),
        Need::Serve => anyhow::bail!("nothing to renew"),
    }
}

/// Writes `stored`'s files as a Secret's mount holds them.
fn mount(dir: &Path, stored: &Stored) -> Result<()> {
    for key in [TLS_CRT, TLS_KEY, CA_CRT] {
        std::fs::write(dir.join(key), stored.get(key).context(key)?)?;
    }
    Ok(())
}

/// The leaf certificate the webhook on `port` presents.
async fn presented(port: u16) -> Result<Vec<u8>> {
    let client = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .tls_info(true)
        .build()?;
    let answer = client
        .get(format!("https://127.0.0.1:{port}/"))
        .send()
        .await?;
    let info = answer
        .extensions()
        .get::<reqwest::tls::TlsInfo>()
        .context("no TLS info")?;
    Ok(info.peer_certificate().context("no certificate")?.to_vec())
}

#[tokio::test]
async fn a_mounted_certificate_is_served_and_its_renewal_without_a_restart() -> Result<()> {
    let ns = own_cluster_ns("webhook", &[]).await?;
    let dir = tempfile::tempdir()?;
    let first = issued(None, jiff::Timestamp::now())?;
    mount(dir.path(), &first)?;
    let port = testenv::free_port()?;
    let cert_dir = format!("--webhook-cert-dir={}", dir.path().display());
    let bind = format!("--webhook-bind-address=127.0.0.1:{port}");
    let mut operator = ns
        .start_operator(&["--controllers=at", &cert_dir, &bind])
        .await?;

    // The CRD pointed at this operator's webhook, trusting the mounted CA, as cert-manager's
    // CA injector would make it.
    let patch = serde_json::json!({"spec": {"conversion": {"webhook": {"clientConfig": {
        "url": format!("https://127.0.0.1:{port}/convert"),
        "caBundle": ByteString(first.get(CA_CRT).context("ca")?.to_vec()),
    }}}}});
    Api::<CustomResourceDefinition>::all(ns.client.clone())
        .patch(
            "ats.cnat.programming-kubernetes.info",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    let alpha = ns.api::<v1alpha1::At>();
    let book = alpha_at("later", "3000-01-01T00:00:00Z", "echo YAY");
    poll(
        Duration::from_secs(30),
        "a create at v1alpha1 converted",
        || async { Ok(alpha.create(&PostParams::default(), &book).await.is_ok()) },
    )
    .await?;
    let stored = ns.api::<At>().get("later").await?;
    ensure!(stored.spec.shell_line() == Some("echo YAY"), "{stored:?}");
    ensure!(
        presented(port).await? == der(&first)?,
        "the mounted certificate is not the one served"
    );

    // Renewed in place, as cert-manager renews a Secret and the kubelet swaps its files.
    let renewed = issued(
        Some(&first),
        jiff::Timestamp::now() + jiff::SignedDuration::from_hours(24 * 340),
    )?;
    ensure!(
        renewed.get(CA_CRT) == first.get(CA_CRT),
        "a renewal under the same CA"
    );
    mount(dir.path(), &renewed)?;
    let want = der(&renewed)?;
    poll(
        Duration::from_secs(30),
        "the renewed certificate served",
        || async { Ok(presented(port).await? == want) },
    )
    .await?;
    let read = alpha.get("later").await?;
    ensure!(read.spec.command == "echo YAY", "{read:?}");
    operator.assert_healthy();
    Ok(())
}

/// The DER of `stored`'s serving certificate.
fn der(stored: &Stored) -> Result<Vec<u8>> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let crt = stored.get(TLS_CRT).context("tls.crt")?;
    Ok(CertificateDer::from_pem_slice(crt)?.to_vec())
}
