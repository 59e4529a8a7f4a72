//! TLS for the metrics endpoint: the certificate mounted in a directory (`tls.crt`,
//! `tls.key`, as a `kubernetes.io/tls` Secret mounts them), else a self-signed one made at
//! start, as controller-runtime does. Prometheus scrapes pods by IP, so a self-signed
//! certificate is verified by no one; what it buys is an encrypted channel for the bearer
//! token and the metrics.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tracing::info;

/// The server's TLS settings: the certificate in `cert_dir`, or a fresh self-signed one.
pub fn server_config(cert_dir: Option<&Path>) -> anyhow::Result<Arc<ServerConfig>> {
    let (chain, key) = match cert_dir {
        Some(dir) => load(dir)?,
        None => self_signed()?,
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .context("the metrics certificate and key do not match")?;
    // Only what the server speaks (hyper's HTTP/1): offering h2 made Go clients (the API
    // server's pod proxy, Prometheus) negotiate it and fail with "unexpected EOF".
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

fn load(dir: &Path) -> anyhow::Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let (crt, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    let chain = CertificateDer::pem_file_iter(&crt)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .with_context(|| format!("reading the metrics certificate {}", crt.display()))?;
    anyhow::ensure!(!chain.is_empty(), "{} holds no certificate", crt.display());
    let key = PrivateKeyDer::from_pem_file(&key)
        .with_context(|| format!("reading the metrics key {}", key.display()))?;
    info!(dir = %dir.display(), "serving metrics with the mounted certificate");
    Ok((chain, key))
}

fn self_signed() -> anyhow::Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    let names = vec!["localhost".to_string(), "podset-operator".to_string()];
    let made = rcgen::generate_simple_self_signed(names)?;
    let key = PrivatePkcs8KeyDer::from(made.signing_key.serialize_der());
    info!("serving metrics with a self-signed certificate made at start");
    Ok((vec![made.cert.der().clone()], key.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mounted_certificate_is_used_and_a_bad_one_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let made = rcgen::generate_simple_self_signed(vec!["metrics.example".into()]).unwrap();
        std::fs::write(dir.join("tls.crt"), made.cert.pem()).unwrap();
        std::fs::write(dir.join("tls.key"), made.signing_key.serialize_pem()).unwrap();
        assert!(server_config(Some(dir)).is_ok());

        let other = rcgen::generate_simple_self_signed(vec!["other".into()]).unwrap();
        std::fs::write(dir.join("tls.key"), other.signing_key.serialize_pem()).unwrap();
        let err = server_config(Some(dir)).unwrap_err();
        assert!(format!("{err:#}").contains("do not match"), "{err:#}");

        std::fs::remove_file(dir.join("tls.crt")).unwrap();
        let err = server_config(Some(dir)).unwrap_err();
        assert!(format!("{err:#}").contains("tls.crt"), "{err:#}");
    }

    #[test]
    fn without_a_directory_a_self_signed_certificate_is_made() {
        let config = server_config(None).unwrap();
        assert_eq!(config.alpn_protocols, [b"http/1.1".to_vec()]);
    }
}
