//! The proxy's two TLS ends: it serves a certificate of its own CA (which the proxied
//! client's kubeconfig trusts instead of the cluster's), and it reaches the API server
//! trusting the cluster's CA.

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivatePkcs8KeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

fn ring() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A new CA (its certificate as PEM), and a server config with a certificate it signed for
/// `ip`.
pub(super) fn serving(ip: IpAddr) -> Result<(String, Arc<ServerConfig>)> {
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "podset-testenv-sieve-ca");
    let ca_key = KeyPair::generate()?;
    let ca_pem = ca.self_signed(&ca_key)?.pem();
    let issuer = Issuer::new(ca, ca_key);

    let leaf = CertificateParams::new(vec![ip.to_string()])?;
    let key = KeyPair::generate()?;
    let cert = leaf.signed_by(&key, &issuer)?;
    let mut config = ServerConfig::builder_with_provider(ring())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            PrivatePkcs8KeyDer::from(key.serialize_der()).into(),
        )?;
    // Requests are read one by one, as HTTP/1.1 frames them.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((ca_pem, Arc::new(config)))
}

/// A client config trusting only the CA certificate in file `ca`.
pub(super) fn trusting(ca: &Path) -> Result<Arc<ClientConfig>> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).with_context(|| format!("{}", ca.display()))? {
        roots.add(cert?)?;
    }
    let mut config = ClientConfig::builder_with_provider(ring())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
