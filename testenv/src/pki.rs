//! Certificates and keys for one cluster: a CA, the apiserver's serving certificate for
//! loopback, and the ServiceAccount token signing key.

use std::path::{Path, PathBuf};

use anyhow::Result;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

pub struct Pki {
    pub ca_cert: PathBuf,
    pub serving_cert: PathBuf,
    pub serving_key: PathBuf,
    pub service_account_key: PathBuf,
    pub service_account_pub: PathBuf,
}

impl Pki {
    pub fn generate(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "podset-testenv-ca");
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;

        let mut serving = CertificateParams::new(vec![
            "localhost".to_string(),
            "127.0.0.1".to_string(),
            "kubernetes".to_string(),
            "kubernetes.default.svc".to_string(),
        ])?;
        serving
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        let serving_key = KeyPair::generate()?;
        let serving_cert = serving.signed_by(&serving_key, &ca)?;

        let sa_key = KeyPair::generate()?;
        let pki = Self {
            ca_cert: dir.join("ca.crt"),
            serving_cert: dir.join("apiserver.crt"),
            serving_key: dir.join("apiserver.key"),
            service_account_key: dir.join("sa.key"),
            service_account_pub: dir.join("sa.pub"),
        };
        std::fs::write(&pki.ca_cert, ca.pem())?;
        std::fs::write(&pki.serving_cert, serving_cert.pem())?;
        std::fs::write(&pki.serving_key, serving_key.serialize_pem())?;
        std::fs::write(&pki.service_account_key, sa_key.serialize_pem())?;
        std::fs::write(&pki.service_account_pub, sa_key.public_key_pem())?;
        Ok(pki)
    }
}
