//! The provisioned webhook certificate renews in place: the Secret's `tls-not-after` set to an
//! hour from now (inside the 30 days before expiry in which the operator renews), a replica
//! writes a new serving certificate, and every replica serves it, checked by a TLS handshake
//! to each pod's IP on the webhook port from the host (over the node's bridge), verified
//! against the Secret's CA for the Service's name, with no pod restarted; conversions are read
//! throughout ([`crate::reads`]).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use podset_operator::webhook::certs::{CA_CRT, TLS_CRT, TLS_NOT_AFTER};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

use crate::common::{TestNs, poll_some};
use crate::install::{Install, pod_ready};

const WEBHOOK_PORT: u16 = 9443;
/// From the annotation's change to every replica serving the new certificate: each watches
/// the Secret and takes up a change within a second.
const SERVED_WITHIN: Duration = Duration::from_secs(30);

/// Forces a renewal of the certificate in Secret `secret` of the install's namespace, for
/// Service `service`, while Ats of `kept` (`name` among them) are read at both versions.
pub async fn renews_without_restart(
    install: &Install,
    secret: &str,
    service: &str,
    kept: &TestNs,
    name: &str,
) -> Result<()> {
    let secrets = install.api::<Secret>();
    let host = format!("{service}.{}.svc", install.ns);
    let old = secrets.get(secret).await?;
    let restarts = |pods: &[Pod]| -> BTreeMap<String, i32> {
        pods.iter()
            .map(|p| {
                let status = p
                    .status
                    .as_ref()
                    .and_then(|s| s.container_statuses.as_ref());
                let restarts = status.map_or(0, |s| s.iter().map(|c| c.restart_count).sum());
                (p.uid().unwrap_or_default(), restarts)
            })
            .collect()
    };
    let pods = install.live_pods().await?;
    ensure!(pods.iter().all(pod_ready), "an operator pod is not Ready");
    let before = restarts(&pods);
    serve_all(&pods, &old, &host).await?;

    let began = Instant::now();
    let renew = async {
        let soon = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(1);
        let patch =
            serde_json::json!({"metadata": {"annotations": {TLS_NOT_AFTER: soon.to_string()}}});
        secrets
            .patch(secret, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        let new = poll_some(
            SERVED_WITHIN,
            "a renewed certificate in the Secret",
            || async {
                let now = secrets.get(secret).await?;
                Ok((tls_crt(&now)? != tls_crt(&old)?).then_some(now))
            },
        )
        .await?;
        let written = began.elapsed();
        ensure!(
            new.data.as_ref().and_then(|d| d.get(CA_CRT))
                == old.data.as_ref().and_then(|d| d.get(CA_CRT)),
            "a renewal replaced the CA too"
        );
        poll_some(
            SERVED_WITHIN,
            "every replica serving the renewed certificate",
            || async { Ok(serve_all(&pods, &new, &host).await.ok()) },
        )
        .await?;
        Ok((written, began.elapsed()))
    };
    let what = "the certificate's renewal";
    let ((written, served), reads) = crate::reads::none_refused(kept, name, what, renew).await?;
    let after = restarts(&install.live_pods().await?);
    ensure!(
        after == before,
        "operator pods restarted or were replaced: {before:?} -> {after:?}"
    );
    println!(
        "{}: the webhook certificate renewed: written to the Secret {:?} and served by all {} \
         replicas {:?} after the annotation changed, without a restart; {reads} reads, none refused",
        install.deployment,
        written,
        pods.len(),
        served
    );
    Ok(())
}

fn tls_crt(secret: &Secret) -> Result<CertificateDer<'static>> {
    let pem = secret
        .data
        .as_ref()
        .and_then(|d| d.get(TLS_CRT))
        .context("no tls.crt")?;
    Ok(CertificateDer::from_pem_slice(&pem.0)?)
}

/// Each of `pods` serves the Secret's certificate on the webhook port, trusted by its CA for
/// `host`.
async fn serve_all(pods: &[Pod], secret: &Secret, host: &str) -> Result<()> {
    let want = tls_crt(secret)?;
    let ca = secret
        .data
        .as_ref()
        .and_then(|d| d.get(CA_CRT))
        .context("no ca.crt")?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&ca.0) {
        roots.add(cert?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    for pod in pods {
        let ip: IpAddr = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.as_deref())
            .context("a pod without an IP")?
            .parse()?;
        let tcp = tokio::net::TcpStream::connect((ip, WEBHOOK_PORT)).await?;
        let name = ServerName::try_from(host.to_string())?;
        let tls = connector.connect(name, tcp).await?;
        let served = tls.get_ref().1.peer_certificates().and_then(|c| c.first());
        ensure!(
            served == Some(&want),
            "{} serves another certificate than the Secret's",
            pod.name_any()
        );
    }
    Ok(())
}
