//! A namespace of one test, and the operator started in it as its ServiceAccount.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Result, anyhow, bail};
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};

use super::{OPERATOR_SA, cluster};
use crate::operator::{Launcher, Operator};
use crate::{Cluster, controller_uid};

/// The operator binary under test: `$PODSET_OPERATOR_BIN` (an older build, to show that a test
/// fails on it), else this build's: the one cargo names to the running integration test, else
/// the one beside the test binary's `deps/` directory, where cargo builds it for integration
/// tests.
pub fn operator_binary() -> Result<PathBuf> {
    if let Some(bin) = std::env::var_os("PODSET_OPERATOR_BIN") {
        return Ok(bin.into());
    }
    if let Some(bin) = std::env::var_os("CARGO_BIN_EXE_podset-operator") {
        return Ok(bin.into());
    }
    let exe = std::env::current_exe()?;
    let beside = exe
        .parent()
        .and_then(Path::parent)
        .map(|dir| dir.join("podset-operator"));
    match beside {
        Some(bin) if bin.exists() => Ok(bin),
        _ => bail!(
            "no podset-operator binary beside {}: set PODSET_OPERATOR_BIN",
            exe.display()
        ),
    }
}

/// A namespace of one test, with the operator's ServiceAccount bound to the manager rules.
pub struct TestNs {
    pub cluster: Arc<Cluster>,
    pub name: String,
    pub client: Client,
}

/// Numbers the namespaces and operators of this test binary.
static COUNTER: AtomicUsize = AtomicUsize::new(0);

impl TestNs {
    /// A namespace on this test binary's shared cluster with hollow nodes.
    pub async fn new(prefix: &str) -> Result<Self> {
        Self::new_in(cluster().await?, prefix).await
    }

    /// A namespace in `cluster` (this test binary's choice of shared cluster).
    pub async fn new_in(cluster: Arc<Cluster>, prefix: &str) -> Result<Self> {
        let name = format!(
            "{prefix}-{}-{}",
            std::process::id() % 10_000,
            COUNTER.fetch_add(1, Ordering::SeqCst)
        );
        cluster.create_namespace(&name).await?;
        let client = cluster.client().await?;
        let ns = Self {
            cluster,
            name,
            client,
        };
        ns.grant_operator_rbac().await?;
        Ok(ns)
    }

    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }

    /// Creates the object a manifest (`path`, from the repository's root) holds, at the
    /// version it names, as `kubectl create -f` does: a sample at v1alpha1 goes through the
    /// conversion the API server does for that version.
    pub async fn create_manifest(&self, path: &str) -> Result<DynamicObject> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let text = std::fs::read_to_string(root.join(path))?;
        let object: DynamicObject = serde_yaml::from_str(&text)?;
        let types = object
            .types
            .clone()
            .ok_or_else(|| anyhow!("{path} names no kind"))?;
        let (group, version) = types
            .api_version
            .split_once('/')
            .unwrap_or(("", &types.api_version));
        let gvk = GroupVersionKind::gvk(group, version, &types.kind);
        let resource =
            ApiResource::from_gvk_with_plural(&gvk, &format!("{}s", types.kind.to_lowercase()));
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &self.name, &resource);
        Ok(api.create(&PostParams::default(), &object).await?)
    }

    /// Pods in this namespace whose controller is the object with `owner_uid`.
    pub async fn pods_of(&self, owner_uid: &str) -> Result<Vec<Pod>> {
        let pods = self.api::<Pod>().list(&ListParams::default()).await?;
        Ok(pods
            .items
            .into_iter()
            .filter(|p| controller_uid(p).as_deref() == Some(owner_uid))
            .collect())
    }

    /// Starts the operator binary watching this namespace, as its ServiceAccount.
    pub async fn start_operator(&self, extra_args: &[&str]) -> Result<Operator> {
        self.start_operator_as(OPERATOR_SA, extra_args).await
    }

    /// Starts the operator binary watching this namespace, as ServiceAccount `account`.
    pub async fn start_operator_as(&self, account: &str, extra_args: &[&str]) -> Result<Operator> {
        let server = self.cluster.server_url();
        self.start_operator_at(account, &server, extra_args).await
    }

    /// Starts the operator as its ServiceAccount, talking to the API server through `proxy`.
    pub async fn start_operator_through(
        &self,
        proxy: &crate::proxy::FaultProxy,
        extra_args: &[&str],
    ) -> Result<Operator> {
        let server = format!("https://{}", proxy.addr());
        self.start_operator_at(OPERATOR_SA, &server, extra_args)
            .await
    }

    /// Starts the operator as its ServiceAccount with a kubeconfig whose `proxy-url` is the
    /// CONNECT `proxy`: the API server is reached through it.
    pub async fn start_operator_via(
        &self,
        proxy: &crate::connect_proxy::ConnectProxy,
        extra_args: &[&str],
    ) -> Result<Operator> {
        let direct = self
            .cluster
            .service_account_kubeconfig(&self.name, OPERATOR_SA)
            .await?;
        let yaml = std::fs::read_to_string(&direct)?.replacen(
            "    certificate-authority:",
            &format!(
                "    proxy-url: {}\n    certificate-authority:",
                proxy.url(None)
            ),
            1,
        );
        let proxied = direct.with_extension("proxied");
        std::fs::write(&proxied, yaml)?;
        self.start_operator_with(&proxied, extra_args)
    }

    /// Starts the operator as its ServiceAccount, talking to the API server through the
    /// Sieve `proxy`, which it trusts as its server.
    pub async fn start_operator_behind(
        &self,
        proxy: &crate::sieve::SieveProxy,
        extra_args: &[&str],
    ) -> Result<Operator> {
        let kubeconfig = self
            .cluster
            .service_account_kubeconfig_trusting(
                &self.name,
                OPERATOR_SA,
                &proxy.url(),
                proxy.ca_cert(),
            )
            .await?;
        self.start_operator_with(&kubeconfig, extra_args)
    }

    async fn start_operator_at(
        &self,
        account: &str,
        server: &str,
        extra_args: &[&str],
    ) -> Result<Operator> {
        let kubeconfig = self
            .cluster
            .service_account_kubeconfig_at(&self.name, account, server)
            .await?;
        self.start_operator_with(&kubeconfig, extra_args)
    }

    /// Starts the operator as this namespace's ServiceAccount, watching the list `watched`
    /// (`WATCH_NAMESPACE=a,b`): each of them binds it the manager rules.
    pub async fn start_operator_watching(
        &self,
        watched: &[&TestNs],
        extra_args: &[&str],
    ) -> Result<Operator> {
        for ns in watched.iter().filter(|ns| ns.name != self.name) {
            ns.grant_operator_rbac_to(self).await?;
        }
        let server = self.cluster.server_url();
        let kubeconfig = (self.cluster)
            .service_account_kubeconfig_at(&self.name, OPERATOR_SA, &server)
            .await?;
        let names: Vec<&str> = watched.iter().map(|ns| ns.name.as_str()).collect();
        self.launch(&kubeconfig, &names.join(","), extra_args)
    }

    /// Starts the operator binary watching this namespace, with `kubeconfig`.
    fn start_operator_with(&self, kubeconfig: &Path, extra_args: &[&str]) -> Result<Operator> {
        self.launch(kubeconfig, &self.name, extra_args)
    }

    /// Starts the operator binary watching `watched`, with `kubeconfig`.
    fn launch(&self, kubeconfig: &Path, watched: &str, extra_args: &[&str]) -> Result<Operator> {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let name = format!("operator-{}-{n}", self.name);
        Launcher::new(
            operator_binary()?,
            &name,
            self.cluster.dir(),
            kubeconfig,
            watched,
        )
        .instance(&format!("podset-testenv-op-{}-{n}", self.name))
        .log_format("json")
        .log_level("info,podset_operator=debug")
        .args(extra_args.iter().copied())
        .start()
    }
}
