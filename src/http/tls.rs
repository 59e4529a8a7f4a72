//! TLS for the metrics endpoint: the certificate mounted in a directory (`tls.crt`,
//! `tls.key`, as a `kubernetes.io/tls` Secret mounts them), else a self-signed one made at
//! start, as controller-runtime does. Prometheus scrapes pods by IP, so a self-signed
//! certificate is verified by no one; what it buys is an encrypted channel for the bearer
//! token and the metrics.
//!
//! A mounted certificate is read again whenever its files change (cert-manager renews it
//! in the Secret, the kubelet swaps the files), as controller-runtime's `certwatcher` does:
//! the next handshake presents the new one, no restart. A pair that does not load (a key
//! that does not match, a file half written) is logged and the one in use kept.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use parking_lot::RwLock;
use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// How often the mounted files are compared with what is served: the kubelet refreshes a
/// Secret's files within a minute or so anyway; controller-runtime polls every 10 s too.
pub const RELOAD_EVERY: Duration = Duration::from_secs(10);

/// The server's TLS settings: the certificate in `cert_dir`, kept current until `shutdown`
/// (looked at every `every`), or a fresh self-signed one.
pub fn server_config(
    cert_dir: Option<&Path>,
    every: Duration,
    shutdown: &CancellationToken,
) -> anyhow::Result<Arc<ServerConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let serving = match cert_dir {
        Some(dir) => {
            let serving = Arc::new(Serving::mounted(dir, &provider)?);
            info!(dir = %dir.display(), "serving metrics with the mounted certificate");
            tokio::spawn(
                serving
                    .clone()
                    .keep_current(provider.clone(), every, shutdown.clone()),
            );
            serving
        }
        None => Arc::new(Serving::self_signed(&provider)?),
    };
    config_for(provider, serving)
}

/// The server's TLS settings, presenting what `serving` resolves.
fn config_for(
    provider: Arc<CryptoProvider>,
    serving: Arc<dyn ResolvesServerCert>,
) -> anyhow::Result<Arc<ServerConfig>> {
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(serving);
    // Only what the server speaks (hyper's HTTP/1): offering h2 made Go clients (the API
    // server's pod proxy, Prometheus) negotiate it and fail with "unexpected EOF".
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A certificate held in memory and replaced as it is renewed: the conversion webhook's,
/// which the operator provisions in a Secret (`crate::webhook`). The next handshake
/// presents the new one.
#[derive(Clone, Debug)]
pub struct Held(Arc<Serving>);

impl Held {
    /// Holds the certificate chain `crt` with its key `key` (both PEM).
    pub fn new(crt: &[u8], key: &[u8]) -> anyhow::Result<Self> {
        let provider = rustls::crypto::ring::default_provider();
        let mut pem = crt.to_vec();
        pem.extend(key);
        let certified = certified(crt, key, &provider)?;
        Ok(Self(Arc::new(Serving {
            dir: None,
            current: RwLock::new((pem, Arc::new(certified))),
        })))
    }

    /// Serves `crt` and `key` from now on, if they differ from what is served; whether they
    /// did. A pair that does not load is refused, and the one before kept.
    pub fn replace(&self, crt: &[u8], key: &[u8]) -> anyhow::Result<bool> {
        let mut pem = crt.to_vec();
        pem.extend(key);
        if pem == self.0.current.read().0 {
            return Ok(false);
        }
        let certified = certified(crt, key, &rustls::crypto::ring::default_provider())?;
        *self.0.current.write() = (pem, Arc::new(certified));
        Ok(true)
    }

    /// The TLS settings that present it.
    pub fn config(&self) -> anyhow::Result<Arc<ServerConfig>> {
        config_for(
            Arc::new(rustls::crypto::ring::default_provider()),
            self.0.clone(),
        )
    }
}

/// The certificate handshakes present, and the files it was read from (if mounted).
#[derive(Debug)]
struct Serving {
    dir: Option<PathBuf>,
    current: RwLock<(Vec<u8>, Arc<CertifiedKey>)>,
}

impl ResolvesServerCert for Serving {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().1.clone())
    }
}

impl Serving {
    fn mounted(dir: &Path, provider: &CryptoProvider) -> anyhow::Result<Self> {
        let (files, key) = load(dir, provider)?;
        Ok(Self {
            dir: Some(dir.to_path_buf()),
            current: RwLock::new((files, Arc::new(key))),
        })
    }

    fn self_signed(provider: &CryptoProvider) -> anyhow::Result<Self> {
        let names = vec!["localhost".to_string(), "podset-operator".to_string()];
        let made = rcgen::generate_simple_self_signed(names)?;
        let key = PrivatePkcs8KeyDer::from(made.signing_key.serialize_der());
        let key = CertifiedKey::from_der(vec![made.cert.der().clone()], key.into(), provider)?;
        info!("serving metrics with a self-signed certificate made at start");
        Ok(Self {
            dir: None,
            current: RwLock::new((Vec::new(), Arc::new(key))),
        })
    }

    /// Reads the files again every `every` until `shutdown`, and serves what changed.
    async fn keep_current(
        self: Arc<Self>,
        provider: Arc<CryptoProvider>,
        every: Duration,
        shutdown: CancellationToken,
    ) {
        let Some(dir) = self.dir.clone() else {
            return;
        };
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
            if let Err(e) = self.refresh(&dir, &provider) {
                warn!(dir = %dir.display(), error = format!("{e:#}"), "the metrics certificate changed but does not load; still serving the one before");
            }
        }
    }

    /// Serves the files in `dir` if they changed and load; the error if they do not.
    fn refresh(&self, dir: &Path, provider: &CryptoProvider) -> anyhow::Result<()> {
        if read_files(dir).is_ok_and(|f| f == self.current.read().0) {
            return Ok(());
        }
        let (files, key) = load(dir, provider)?;
        *self.current.write() = (files, Arc::new(key));
        info!(dir = %dir.display(), "the metrics certificate changed; serving the new one");
        Ok(())
    }
}

/// Both files' bytes, as read: what a change is told by.
fn read_files(dir: &Path) -> std::io::Result<Vec<u8>> {
    let mut files = std::fs::read(dir.join("tls.crt"))?;
    files.extend(std::fs::read(dir.join("tls.key"))?);
    Ok(files)
}

fn load(dir: &Path, provider: &CryptoProvider) -> anyhow::Result<(Vec<u8>, CertifiedKey)> {
    let (crt, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    let crt_pem = std::fs::read(&crt)
        .with_context(|| format!("reading the certificate {}", crt.display()))?;
    let key_pem =
        std::fs::read(&key).with_context(|| format!("reading the key {}", key.display()))?;
    let certified = certified(&crt_pem, &key_pem, provider)
        .with_context(|| format!("loading {}", dir.display()))?;
    let files = read_files(dir).with_context(|| format!("reading {}", dir.display()))?;
    Ok((files, certified))
}

/// The chain in `crt` and the key in `key` (PEM), checked to belong together.
fn certified(crt: &[u8], key: &[u8], provider: &CryptoProvider) -> anyhow::Result<CertifiedKey> {
    let chain = CertificateDer::pem_slice_iter(crt)
        .collect::<Result<Vec<_>, _>>()
        .context("reading the certificate")?;
    anyhow::ensure!(!chain.is_empty(), "tls.crt holds no certificate");
    let key = PrivateKeyDer::from_pem_slice(key).context("reading the key")?;
    CertifiedKey::from_der(chain, key, provider).context("the certificate and key do not match")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir: Option<&Path>) -> anyhow::Result<Arc<ServerConfig>> {
        server_config(dir, RELOAD_EVERY, &CancellationToken::new())
    }

    #[tokio::test]
    async fn a_mounted_certificate_is_used_and_a_bad_one_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let made = rcgen::generate_simple_self_signed(vec!["metrics.example".into()]).unwrap();
        std::fs::write(dir.join("tls.crt"), made.cert.pem()).unwrap();
        std::fs::write(dir.join("tls.key"), made.signing_key.serialize_pem()).unwrap();
        assert!(config(Some(dir)).is_ok());

        let other = rcgen::generate_simple_self_signed(vec!["other".into()]).unwrap();
        std::fs::write(dir.join("tls.key"), other.signing_key.serialize_pem()).unwrap();
        let err = config(Some(dir)).unwrap_err();
        assert!(format!("{err:#}").contains("do not match"), "{err:#}");

        std::fs::remove_file(dir.join("tls.crt")).unwrap();
        let err = config(Some(dir)).unwrap_err();
        assert!(format!("{err:#}").contains("tls.crt"), "{err:#}");
    }

    /// A rotation that does not load (a key of another certificate, a file half written) is
    /// refused and the certificate before kept; the next good one is served.
    #[test]
    fn a_broken_rotation_keeps_the_certificate_before() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let write = |made: &rcgen::CertifiedKey<rcgen::KeyPair>| {
            std::fs::write(dir.join("tls.crt"), made.cert.pem()).unwrap();
            std::fs::write(dir.join("tls.key"), made.signing_key.serialize_pem()).unwrap();
        };
        let first = rcgen::generate_simple_self_signed(vec!["first".into()]).unwrap();
        write(&first);
        let provider = rustls::crypto::ring::default_provider();
        let serving = Serving::mounted(dir, &provider).unwrap();
        let served = |s: &Serving| s.current.read().1.cert[0].to_vec();
        assert_eq!(served(&serving), first.cert.der().to_vec());

        let other = rcgen::generate_simple_self_signed(vec!["other".into()]).unwrap();
        std::fs::write(dir.join("tls.key"), other.signing_key.serialize_pem()).unwrap();
        let err = serving.refresh(dir, &provider).unwrap_err();
        assert!(format!("{err:#}").contains("do not match"), "{err:#}");
        assert_eq!(served(&serving), first.cert.der().to_vec());

        write(&other);
        serving.refresh(dir, &provider).unwrap();
        assert_eq!(served(&serving), other.cert.der().to_vec());
    }

    #[tokio::test]
    async fn without_a_directory_a_self_signed_certificate_is_made() {
        let config = config(None).unwrap();
        assert_eq!(config.alpn_protocols, [b"http/1.1".to_vec()]);
    }
}
