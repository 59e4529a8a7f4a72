//! Reaching a cluster: clients and kubeconfigs (the admin's, a ServiceAccount's), raw
//! requests, namespaces, CRDs, and the operator's `/metrics`.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::{Cluster, poll};

impl Cluster {
    /// `GET path` on the API server as the admin, whatever the answer: its status and body
    /// (for proxied answers, which a client library would read as its own errors).
    pub async fn get_raw(&self, path: &str) -> Result<(u16, String)> {
        let resp = self
            .https(Duration::from_secs(30))?
            .get(format!("{}{path}", self.server_url()))
            .bearer_auth(&self.admin_token)
            .send()
            .await?;
        Ok((resp.status().as_u16(), resp.text().await?))
    }

    /// An HTTP client that trusts the cluster's CA, for raw requests to the API server.
    pub(crate) fn https(&self, timeout: Duration) -> Result<reqwest::Client> {
        let ca = reqwest::Certificate::from_pem(&std::fs::read(&self.pki.ca_cert)?)?;
        Ok(reqwest::Client::builder()
            .add_root_certificate(ca)
            .timeout(timeout)
            .build()?)
    }

    /// An admin client.
    pub async fn client(&self) -> Result<Client> {
        client_from_kubeconfig(&self.kubeconfig).await
    }

    /// Writes a kubeconfig for `token` against this cluster.
    pub fn write_kubeconfig(&self, path: &Path, token: &str) -> Result<()> {
        let yaml = kubeconfig_yaml(&self.server_url(), &self.pki.ca_cert, token);
        std::fs::write(path, yaml)?;
        Ok(())
    }

    /// The PEM file of the cluster's CA, which signed the API server's certificate.
    pub fn ca_cert(&self) -> &Path {
        &self.pki.ca_cert
    }

    /// The admin kubeconfig in `dir` with its own copy of the CA (`dir/ca.crt`), for a
    /// process that sees `dir` as `seen_as`.
    pub(crate) fn write_movable_kubeconfig(&self, dir: &Path, seen_as: &Path) -> Result<()> {
        std::fs::copy(&self.pki.ca_cert, dir.join("ca.crt"))?;
        let ca = seen_as.join("ca.crt");
        let yaml = kubeconfig_yaml(&self.server_url(), &ca, &self.admin_token);
        std::fs::write(dir.join("kubeconfig"), yaml)?;
        Ok(())
    }

    /// A kubeconfig authenticating as ServiceAccount `ns/name` (a TokenRequest token), so
    /// a process using it gets exactly that account's RBAC.
    pub async fn service_account_kubeconfig(&self, ns: &str, name: &str) -> Result<PathBuf> {
        self.service_account_kubeconfig_at(ns, name, &self.server_url())
            .await
    }

    /// As [`Self::service_account_kubeconfig`], against `server` (a [`crate::proxy::FaultProxy`]
    /// in front of the API server, say).
    pub async fn service_account_kubeconfig_at(
        &self,
        ns: &str,
        name: &str,
        server: &str,
    ) -> Result<PathBuf> {
        self.service_account_kubeconfig_trusting(ns, name, server, &self.pki.ca_cert)
            .await
    }

    /// As [`Self::service_account_kubeconfig_at`], trusting the CA in file `ca` rather than
    /// the cluster's: for a server that terminates TLS itself (a
    /// [`crate::sieve::SieveProxy`]).
    pub async fn service_account_kubeconfig_trusting(
        &self,
        ns: &str,
        name: &str,
        server: &str,
        ca: &Path,
    ) -> Result<PathBuf> {
        let token = self.service_account_token(ns, name).await?;
        let tag = match server.rsplit_once(':') {
            Some((_, port)) if server != self.server_url() => format!("-via-{port}"),
            _ => String::new(),
        };
        let file = format!("kubeconfig-sa-{ns}-{name}{tag}");
        let path = self.dir().join(&file);
        // Written aside and renamed over: an operator started with this path a moment ago
        // may be reading it now, and must never read it truncated.
        let aside = self.dir().join(format!("{file}.new"));
        std::fs::write(&aside, kubeconfig_yaml(server, ca, &token))?;
        std::fs::rename(&aside, &path)?;
        Ok(path)
    }

    /// The API server's address, for a [`crate::proxy::FaultProxy`] to forward to.
    pub fn api_addr(&self) -> std::net::SocketAddr {
        (self.api_host, self.api_port).into()
    }

    /// A bound token of ServiceAccount `ns/name`, valid for a day.
    pub async fn service_account_token(&self, ns: &str, name: &str) -> Result<String> {
        let client = self.client().await?;
        let sas: Api<ServiceAccount> = Api::namespaced(client, ns);
        let req = TokenRequest {
            spec: TokenRequestSpec {
                expiration_seconds: Some(24 * 3600),
                ..Default::default()
            },
            ..Default::default()
        };
        Ok(sas
            .create_token_request(name, &PostParams::default(), &req)
            .await
            .with_context(|| format!("token request for serviceaccount {ns}/{name}"))?
            .status
            .ok_or_else(|| anyhow!("token request returned no status"))?
            .token)
    }

    /// Creates a namespace and waits for its `default` ServiceAccount: pods are refused
    /// until the service-account controller made it.
    pub async fn create_namespace(&self, name: &str) -> Result<()> {
        let nss: Api<Namespace> = Api::all(self.client().await?);
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        nss.create(&PostParams::default(), &ns).await?;
        self.wait_for_service_account(name, "default").await
    }

    /// Waits until ServiceAccount `ns/name` exists: pods using it are refused until then.
    /// (Tokens are bound, issued to each pod; no token Secret is made since 1.24.)
    pub async fn wait_for_service_account(&self, ns: &str, name: &str) -> Result<()> {
        let sas: Api<ServiceAccount> = Api::namespaced(self.client().await?, ns);
        poll(
            Duration::from_secs(60),
            &format!("serviceaccount {ns}/{name}"),
            || async { Ok(sas.get_opt(name).await?.is_some()) },
        )
        .await
    }
}

/// A kubeconfig for `token` at `server`, trusting the CA in file `ca`.
fn kubeconfig_yaml(server: &str, ca: &Path, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\nusers:\n- name: user\n  user:\n    token: {token}\ncontexts:\n- name: local\n  context:\n    cluster: local\n    user: user\n    namespace: default\ncurrent-context: local\n",
        ca = ca.display(),
    )
}

pub async fn client_from_kubeconfig(path: &Path) -> Result<Client> {
    let kc = Kubeconfig::read_from(path)?;
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

/// Applies CRD manifests (server-side), their conversion pointed at `conversion` if given,
/// and waits until each is Established.
pub async fn apply_crds(
    client: &Client,
    yaml: &str,
    conversion: Option<&crate::conversion::Conversion>,
) -> Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{Patch, PatchParams};
    use serde::Deserialize;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut names = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(yaml) {
        let mut crd = CustomResourceDefinition::deserialize(doc)?;
        if let Some(conversion) = conversion {
            conversion.point(&mut crd);
        }
        let name = crd
            .metadata
            .name
            .clone()
            .ok_or_else(|| anyhow!("CRD without a name"))?;
        crds.patch(
            &name,
            &PatchParams::apply("podset-operator-install").force(),
            &Patch::Apply(&crd),
        )
        .await
        .with_context(|| format!("applying CRD {name}"))?;
        names.push(name);
    }
    for name in names {
        let crds = crds.clone();
        poll(
            Duration::from_secs(30),
            &format!("CRD {name} Established"),
            || {
                let crds = crds.clone();
                let name = name.clone();
                async move {
                    let crd = crds.get(&name).await?;
                    Ok(crd.status.and_then(|s| s.conditions).is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c.type_ == "Established" && c.status == "True")
                    }))
                }
            },
        )
        .await?;
    }
    Ok(())
}

/// `GET https://127.0.0.1:<port>/metrics` as a scraper would, with `token` as the bearer
/// token if any, trusting any certificate (the operator's is self-signed): status and body.
pub async fn get_metrics(port: u16, token: Option<&str>) -> Result<(u16, String)> {
    get_metrics_from(IpAddr::V4(Ipv4Addr::LOCALHOST), port, token).await
}

/// [`get_metrics`] from any address, a pod's IP on a real node's bridge for instance.
pub async fn get_metrics_from(
    host: IpAddr,
    port: u16,
    token: Option<&str>,
) -> Result<(u16, String)> {
    let client = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .build()?;
    let mut req = client.get(format!("https://{host}:{port}/metrics"));
    if let Some(token) = token {
        req = req.bearer_auth(token);
    }
    let resp = req.send().await?;
    Ok((resp.status().as_u16(), resp.text().await?))
}
