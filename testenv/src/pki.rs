//! Certificates and keys for one cluster: a CA, the apiserver's serving certificate (for
//! loopback and, with real nodes, the address pods reach it at), client certificates (the
//! kubelets', the apiserver's to the kubelets), and the ServiceAccount token signing key.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use anyhow::Result;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};

pub struct Pki {
    dir: PathBuf,
    ca: Issuer<'static, KeyPair>,
    pub ca_cert: PathBuf,
    pub serving_cert: PathBuf,
    pub serving_key: PathBuf,
    pub service_account_key: PathBuf,
    pub service_account_pub: PathBuf,
}

/// A certificate and its key, as PEM files.
pub struct KeyPairFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

fn ca_params() -> Result<CertificateParams> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "podset-testenv-ca");
    Ok(params)
}

impl Pki {
    /// The CA and ServiceAccount signing key that `dir` holds, else new ones; and a new
    /// serving certificate for loopback and `extra_ips`. A restarted `make cluster-up` keeps
    /// its CA and signing key: the kubeconfigs, and the tokens its pods hold, stay valid.
    pub fn load_or_generate(dir: &Path, extra_ips: &[IpAddr]) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let ca_key_file = dir.join("ca.key");
        let kept = ["ca.crt", "sa.key", "sa.pub"]
            .iter()
            .all(|f| dir.join(f).exists());
        let ca_key = match std::fs::read_to_string(&ca_key_file) {
            Ok(pem) if kept => KeyPair::from_pem(&pem)?,
            _ => {
                let key = KeyPair::generate()?;
                std::fs::write(dir.join("ca.crt"), ca_params()?.self_signed(&key)?.pem())?;
                std::fs::write(&ca_key_file, key.serialize_pem())?;
                let sa = KeyPair::generate()?;
                std::fs::write(dir.join("sa.key"), sa.serialize_pem())?;
                std::fs::write(dir.join("sa.pub"), sa.public_key_pem())?;
                key
            }
        };
        // The same name and key: what it signs chains to the certificate on disk.
        let ca = Issuer::new(ca_params()?, ca_key);

        let mut names = vec![
            "localhost".to_string(),
            "127.0.0.1".to_string(),
            "kubernetes".to_string(),
            "kubernetes.default.svc".to_string(),
        ];
        names.extend(extra_ips.iter().map(IpAddr::to_string));
        let mut serving = CertificateParams::new(names)?;
        serving
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        let serving_key = KeyPair::generate()?;
        let serving_cert = serving.signed_by(&serving_key, &ca)?;

        let pki = Self {
            dir: dir.to_path_buf(),
            ca_cert: dir.join("ca.crt"),
            serving_cert: dir.join("apiserver.crt"),
            serving_key: dir.join("apiserver.key"),
            service_account_key: dir.join("sa.key"),
            service_account_pub: dir.join("sa.pub"),
            ca,
        };
        std::fs::write(&pki.serving_cert, serving_cert.pem())?;
        std::fs::write(&pki.serving_key, serving_key.serialize_pem())?;
        Ok(pki)
    }

    /// A client certificate for user `cn` in groups `orgs`, written as `<file>.crt/.key`.
    pub fn client_cert(&self, file: &str, cn: &str, orgs: &[&str]) -> Result<KeyPairFiles> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, cn);
        for org in orgs {
            params
                .distinguished_name
                .push(DnType::OrganizationName, *org);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.ca)?;
        let files = KeyPairFiles {
            cert: self.dir.join(format!("{file}.crt")),
            key: self.dir.join(format!("{file}.key")),
        };
        std::fs::write(&files.cert, cert.pem())?;
        std::fs::write(&files.key, key.serialize_pem())?;
        Ok(files)
    }
}
