//! A real, local Kubernetes 1.20 control plane for tests, benchmarks and `make run`.
//!
//! `Cluster::start` brings up etcd, kube-apiserver (RBAC on, ServiceAccount tokens on),
//! and optionally kube-controller-manager, kube-scheduler and kubemark hollow nodes, each on
//! free loopback ports in a private directory. Dropping the `Cluster` stops everything; a
//! test binary that dies takes its children with it (see [`process`]).
//!
//! The binaries come from `hack/build-kubernetes.sh` (its cache directory, or
//! `$KUBE_BIN_DIR`); etcd from Debian's `etcd-server`.

pub mod audit;
mod max_pods;
pub mod node;
pub mod pki;
mod ports;
pub mod process;
pub mod proxy;
pub mod registry;

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, anyhow, bail};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, Node, ServiceAccount};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

pub use max_pods::{MaxPods, controller_uid, live_pods_by_owner};
pub use ports::free_port;
pub use process::{Process, run_command, spawn_tied};

const ADMIN_TOKEN_USER: &str = "testenv-admin";

/// Which components to run. The default is etcd, apiserver and controller-manager.
#[derive(Clone, Debug)]
pub struct Options {
    /// Run kube-controller-manager (service accounts, node lifecycle, garbage collector...).
    pub controller_manager: bool,
    /// The controller-manager's `--controllers` value; `None` keeps its defaults.
    pub controllers: Option<String>,
    /// Extra controller-manager flags (for example client QPS for benchmarks).
    pub controller_manager_args: Vec<String>,
    /// Run kube-scheduler.
    pub scheduler: bool,
    /// kubemark hollow nodes; pods bound to them go Running, but no container starts.
    /// Needs the scheduler. With real nodes too, they carry [`HOLLOW_TAINT`].
    pub nodes: usize,
    /// Real nodes (kubelet + containerd + runc): pods run real containers. Needs the
    /// scheduler; the cluster then also runs its own image registry.
    pub real_nodes: usize,
    /// Extra kube-apiserver flags.
    pub apiserver_args: Vec<String>,
    /// Keep the state here instead of a temporary directory (for `make cluster-up`).
    pub dir: Option<PathBuf>,
    /// CRD manifests to install before the controller-manager starts, so its garbage
    /// collector knows them at once instead of at its next discovery resync (~30 s).
    pub crds: Option<String>,
    /// Have the apiserver write an audit log (see [`audit`]). Benchmarks turn it off: it
    /// costs a write per request.
    pub audit: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            controller_manager: true,
            controllers: None,
            controller_manager_args: Vec::new(),
            scheduler: false,
            nodes: 0,
            real_nodes: 0,
            apiserver_args: Vec::new(),
            dir: None,
            crds: None,
            audit: true,
        }
    }
}

impl Options {
    /// Scheduler plus `n` hollow nodes, so pods really go Running.
    pub fn with_nodes(mut self, n: usize) -> Self {
        self.scheduler = n > 0 || self.scheduler;
        self.nodes = n;
        self
    }

    /// Scheduler plus `n` real nodes.
    pub fn with_real_nodes(mut self, n: usize) -> Self {
        self.scheduler = n > 0 || self.scheduler;
        self.real_nodes = n;
        self
    }

    pub fn without_controller_manager(mut self) -> Self {
        self.controller_manager = false;
        self
    }
}

/// The taint hollow nodes carry in a cluster that also has real nodes: only pods that want
/// a hollow node (scale tests) tolerate it, so everything else runs for real.
pub const HOLLOW_TAINT: &str = "podset-testenv/hollow";

/// A running control plane. Dropping it stops every component.
pub struct Cluster {
    root: Root,
    bin: PathBuf,
    pki: pki::Pki,
    admin_token: String,
    /// Where the API server listens: loopback, or with real nodes the gateway address of
    /// the first node's bridge, so that pods reach it too (and nothing beyond the machine).
    pub api_host: IpAddr,
    pub api_port: u16,
    pub etcd_port: u16,
    kubeconfig: PathBuf,
    components: Vec<Process>,
    nodes: Vec<node::RealNode>,
    /// The image registry's `host:port`, with real nodes.
    registry: Option<String>,
    audit: bool,
    /// When the API server was starting, each time (see [`audit::NotReady`]).
    not_ready: Vec<audit::NotReady>,
    /// How long the real nodes took from their registry's start to Ready (benchmarks).
    pub real_nodes_ready_in: Option<Duration>,
}

enum Root {
    Temp(Option<tempfile::TempDir>),
    Fixed(PathBuf),
}

impl Root {
    fn path(&self) -> &Path {
        match self {
            Root::Temp(t) => t.as_ref().expect("temp dir present").path(),
            Root::Fixed(p) => p,
        }
    }
}

/// Where `hack/build-kubernetes.sh` leaves the binaries.
pub fn kube_bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("KUBE_BIN_DIR") {
        return dir.into();
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into())).join(".cache")
        });
    cache.join("podset-operator/kubernetes-v1.20.2/bin")
}

impl Cluster {
    pub async fn start(opts: Options) -> Result<Self> {
        let bin = kube_bin_dir();
        for b in [
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "kubemark",
            "kubelet",
        ] {
            if !bin.join(b).exists() {
                bail!(
                    "{} is missing: run hack/build-kubernetes.sh (make kubernetes) first",
                    bin.join(b).display()
                );
            }
        }
        let root = match &opts.dir {
            Some(dir) => {
                std::fs::create_dir_all(dir)?;
                Root::Fixed(dir.clone())
            }
            None => Root::Temp(Some(
                tempfile::Builder::new()
                    .prefix("podset-testenv-")
                    .tempdir()?,
            )),
        };
        let dir = root.path().to_path_buf();
        let first_bridge = match opts.real_nodes {
            0 => None,
            _ => {
                node::cleanup::sweep();
                let prefix = if matches!(root, Root::Temp(_)) {
                    "pst"
                } else {
                    "psl"
                };
                Some(node::network::Bridge::create(prefix)?)
            }
        };
        let api_host = first_bridge
            .as_ref()
            .map_or(IpAddr::V4(Ipv4Addr::LOCALHOST), |b| IpAddr::V4(b.gateway()));
        let extra_ips: Vec<IpAddr> = first_bridge
            .iter()
            .map(|b| IpAddr::V4(b.gateway()))
            .collect();
        let pki = pki::Pki::generate(&dir.join("pki"), &extra_ips)?;
        let admin_token = format!("{:032x}", rand_u128());
        std::fs::write(
            dir.join("tokens.csv"),
            format!("{admin_token},{ADMIN_TOKEN_USER},{ADMIN_TOKEN_USER},\"system:masters\"\n"),
        )?;
        let api_port = free_port()?;
        let etcd_port = free_port()?;
        let kubeconfig = dir.join("kubeconfig");
        let mut cluster = Self {
            root,
            bin,
            pki,
            admin_token,
            api_host,
            api_port,
            etcd_port,
            kubeconfig,
            components: Vec::new(),
            nodes: Vec::new(),
            registry: None,
            audit: opts.audit,
            not_ready: Vec::new(),
            real_nodes_ready_in: None,
        };
        cluster.write_kubeconfig(&cluster.kubeconfig, &cluster.admin_token.clone())?;
        cluster.start_etcd()?;
        let mut apiserver_args = opts.apiserver_args.clone();
        if opts.real_nodes > 0 {
            let kc = cluster.pki.client_cert(
                "apiserver-kubelet-client",
                "kube-apiserver-kubelet-client",
                &["system:masters"],
            )?;
            apiserver_args.push(format!(
                "--kubelet-client-certificate={}",
                kc.cert.display()
            ));
            apiserver_args.push(format!("--kubelet-client-key={}", kc.key.display()));
        }
        if opts.audit {
            apiserver_args.extend(audit::apiserver_args(&dir)?);
        }
        cluster.start_apiserver(&apiserver_args).await?;
        if let Some(crds) = &opts.crds {
            apply_crds(&cluster.client().await?, crds).await?;
        }
        if opts.controller_manager {
            cluster.start_controller_manager(&opts)?;
        }
        if opts.scheduler {
            cluster.start_scheduler()?;
        }
        for i in 0..opts.nodes {
            cluster.start_hollow_node(i, opts.real_nodes > 0)?;
        }
        let nodes_began = Instant::now();
        if let Some(bridge) = first_bridge {
            cluster.start_real_nodes(bridge, opts.real_nodes).await?;
        }
        if opts.controller_manager {
            cluster
                .wait_for_service_account("default", "default")
                .await?;
        }
        if opts.nodes + opts.real_nodes > 0 {
            cluster
                .wait_for_ready_nodes(opts.nodes + opts.real_nodes)
                .await?;
        }
        if opts.real_nodes > 0 {
            cluster.real_nodes_ready_in = Some(nodes_began.elapsed());
        }
        Ok(cluster)
    }

    pub fn dir(&self) -> &Path {
        self.root.path()
    }

    /// The admin kubeconfig (system:masters, bypasses RBAC).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    pub fn server_url(&self) -> String {
        format!("https://{}:{}", self.api_host, self.api_port)
    }

    /// The image registry's `host:port`, when the cluster has real nodes. An image pushed
    /// there as `R/name:tag` is pulled by pods as `localhost:PORT/name:tag`, see
    /// [`Cluster::image_ref`].
    pub fn registry(&self) -> Option<&str> {
        self.registry.as_deref()
    }

    /// How pods name an image pushed to [`Cluster::registry`] as `repo` (`name:tag`):
    /// containerd pulls from `localhost:PORT` over plain HTTP.
    pub fn image_ref(&self, repo: &str) -> Option<String> {
        let port = self.registry.as_deref()?.rsplit(':').next()?;
        Some(format!("localhost:{port}/{repo}"))
    }

    /// The names of the real nodes.
    pub fn real_nodes(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.name.clone()).collect()
    }

    /// The kubelets' and containerds' resident memory, in bytes.
    pub fn real_nodes_rss_bytes(&self) -> u64 {
        self.nodes.iter().map(node::RealNode::rss_bytes).sum()
    }

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
    fn https(&self, timeout: Duration) -> Result<reqwest::Client> {
        let ca = reqwest::Certificate::from_pem(&std::fs::read(&self.pki.ca_cert)?)?;
        Ok(reqwest::Client::builder()
            .add_root_certificate(ca)
            .timeout(timeout)
            .build()?)
    }

    /// Starts the registry, pushes busybox and pause into it, then `n` real nodes (the
    /// first on `first`, the bridge the API server listens on).
    async fn start_real_nodes(&mut self, first: node::network::Bridge, n: usize) -> Result<()> {
        let (registry, addr) = registry::start(self.dir()).await?;
        self.components.push(registry);
        let images = node::images_dir();
        registry::push(&addr, &images.join("busybox.tar"), "library/busybox:latest").await?;
        registry::push(&addr, &images.join("pause.tar"), "pause:3.2").await?;
        let prefix = first.name[..3].to_string();
        let mut bridge = Some(first);
        for i in 0..n {
            let b = match bridge.take() {
                Some(b) => b,
                None => node::network::Bridge::create(&prefix)?,
            };
            let server_url = self.server_url();
            let kubelet_path = self.bin.join("kubelet");
            let cluster = node::ClusterRef {
                server_url: &server_url,
                pki: &self.pki,
                registry: &addr,
                kubelet_path: &kubelet_path,
            };
            let node = node::RealNode::start(&self.dir().join(format!("node-{i}")), b, &cluster)?;
            self.nodes.push(node);
        }
        // hack/deploy-local.sh finds the registry here.
        std::fs::write(self.dir().join("registry-address"), &addr)?;
        self.registry = Some(addr);
        Ok(())
    }

    /// An admin client.
    pub async fn client(&self) -> Result<Client> {
        client_from_kubeconfig(&self.kubeconfig).await
    }

    fn start_etcd(&mut self) -> Result<()> {
        let peer = free_port()?;
        // A throwaway cluster keeps etcd on tmpfs: fsync latency, not CPU, bounds the apiserver
        // here. A fixed directory (make cluster-up) keeps its data across restarts.
        let data = match (&self.root, Path::new("/dev/shm").is_dir()) {
            (Root::Temp(_), true) => tempfile::Builder::new()
                .prefix("podset-testenv-etcd-")
                .tempdir_in("/dev/shm")?
                .keep(),
            _ => self.dir().join("etcd"),
        };
        std::fs::write(
            self.dir().join("etcd-data-dir"),
            data.to_string_lossy().as_bytes(),
        )?;
        let client_url = format!("http://127.0.0.1:{}", self.etcd_port);
        let peer_url = format!("http://127.0.0.1:{peer}");
        let args = vec![
            format!("--data-dir={}", data.display()),
            format!("--listen-client-urls={client_url}"),
            format!("--advertise-client-urls={client_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster=default={peer_url}"),
            "--log-level=warn".into(),
            "--quota-backend-bytes=4294967296".into(),
        ];
        let mut p = Process::new("etcd", "etcd", args, self.dir());
        p.start()?;
        self.components.push(p);
        Ok(())
    }

    async fn start_apiserver(&mut self, extra: &[String]) -> Result<()> {
        let d = self.dir().to_path_buf();
        let mut args = vec![
            format!("--etcd-servers=http://127.0.0.1:{}", self.etcd_port),
            format!("--bind-address={}", self.api_host),
            format!("--advertise-address={}", self.api_host),
            format!("--secure-port={}", self.api_port),
            "--insecure-port=0".into(),
            format!("--tls-cert-file={}", self.pki.serving_cert.display()),
            format!("--tls-private-key-file={}", self.pki.serving_key.display()),
            format!("--client-ca-file={}", self.pki.ca_cert.display()),
            format!("--token-auth-file={}", d.join("tokens.csv").display()),
            // Node: kubelets get exactly what their pods need, as on a real cluster.
            "--authorization-mode=Node,RBAC".into(),
            format!(
                "--service-account-key-file={}",
                self.pki.service_account_pub.display()
            ),
            format!(
                "--service-account-signing-key-file={}",
                self.pki.service_account_key.display()
            ),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
            "--service-cluster-ip-range=10.0.0.0/24".into(),
            "--allow-privileged=true".into(),
            "--enable-priority-and-fairness=false".into(),
            // Not in 1.20's defaults: setting blockOwnerDeletion on an ownerReference then
            // needs update on the owner's finalizers, as on most production clusters.
            "--enable-admission-plugins=OwnerReferencesPermissionEnforcement,NodeRestriction"
                .into(),
            format!("--cert-dir={}", d.join("apiserver-certs").display()),
            "--v=1".into(),
        ];
        args.extend(extra.iter().cloned());
        let mut p = Process::new("kube-apiserver", self.bin.join("kube-apiserver"), args, &d);
        p.start()?;
        self.components.push(p);
        self.wait_for_apiserver().await
    }

    /// Polls `/readyz` until it answers 200, or fails with the apiserver's log.
    pub async fn wait_for_apiserver(&mut self) -> Result<()> {
        let began = SystemTime::now();
        let http = self.https(Duration::from_secs(2))?;
        let url = format!("{}/readyz", self.server_url());
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let ok = http
                .get(&url)
                .bearer_auth(&self.admin_token)
                .send()
                .await
                .map(|r| r.status().is_success())
                .unwrap_or(false);
            if ok {
                self.not_ready.push((began, SystemTime::now()));
                return Ok(());
            }
            for name in ["etcd", "kube-apiserver"] {
                if let Some(p) = self.component_mut(name)
                    && let Some(status) = p.exited()
                {
                    bail!(
                        "{name} exited ({status}) during start-up:\n{}",
                        p.log_tail(40)
                    );
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "kube-apiserver not ready after 90s:\n{}",
                    self.component("kube-apiserver")
                        .map(|p| p.log_tail(40))
                        .unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn start_controller_manager(&mut self, opts: &Options) -> Result<()> {
        let mut args = vec![
            format!("--kubeconfig={}", self.kubeconfig.display()),
            "--port=0".into(),
            "--secure-port=0".into(),
            "--leader-elect=false".into(),
            format!(
                "--service-account-private-key-file={}",
                self.pki.service_account_key.display()
            ),
            format!("--root-ca-file={}", self.pki.ca_cert.display()),
            "--use-service-account-credentials=false".into(),
            "--v=1".into(),
        ];
        if let Some(c) = &opts.controllers {
            args.push(format!("--controllers={c}"));
        }
        args.extend(opts.controller_manager_args.iter().cloned());
        let mut p = Process::new(
            "kube-controller-manager",
            self.bin.join("kube-controller-manager"),
            args,
            self.dir(),
        );
        p.start()?;
        self.components.push(p);
        Ok(())
    }

    fn start_scheduler(&mut self) -> Result<()> {
        let args = vec![
            format!("--kubeconfig={}", self.kubeconfig.display()),
            "--port=0".into(),
            "--secure-port=0".into(),
            "--leader-elect=false".into(),
            "--v=1".into(),
        ];
        let mut p = Process::new(
            "kube-scheduler",
            self.bin.join("kube-scheduler"),
            args,
            self.dir(),
        );
        p.start()?;
        self.components.push(p);
        Ok(())
    }

    fn start_hollow_node(&mut self, i: usize, tainted: bool) -> Result<()> {
        let name = format!("hollow-node-{i}");
        let mut args = vec![
            "--morph=kubelet".into(),
            format!("--name={name}"),
            format!("--kubeconfig={}", self.kubeconfig.display()),
            format!("--kubelet-port={}", free_port()?),
            format!("--kubelet-read-only-port={}", free_port()?),
            "--v=1".into(),
        ];
        if tainted {
            args.push(format!(
                "--register-with-taints={HOLLOW_TAINT}=true:NoSchedule"
            ));
        }
        let mut p = Process::new(&name, self.bin.join("kubemark"), args, self.dir());
        p.start()?;
        self.components.push(p);
        Ok(())
    }

    pub fn component(&self, name: &str) -> Option<&Process> {
        self.components.iter().find(|p| p.name == name)
    }

    pub fn component_mut(&mut self, name: &str) -> Option<&mut Process> {
        self.components.iter_mut().find(|p| p.name == name)
    }

    /// Stops a component (SIGTERM, then SIGKILL) so a fault test can restart it.
    pub fn stop(&mut self, name: &str) -> Result<()> {
        self.component_mut(name)
            .ok_or_else(|| anyhow!("no component {name}"))?
            .stop();
        Ok(())
    }

    /// Starts a stopped component again with the same flags; waits for the apiserver.
    pub async fn restart(&mut self, name: &str) -> Result<()> {
        let p = self
            .component_mut(name)
            .ok_or_else(|| anyhow!("no component {name}"))?;
        p.stop();
        p.start()?;
        if name == "kube-apiserver" || name == "etcd" {
            self.wait_for_apiserver().await?;
        }
        Ok(())
    }

    /// Writes a kubeconfig for `token` against this cluster.
    pub fn write_kubeconfig(&self, path: &Path, token: &str) -> Result<()> {
        self.write_kubeconfig_at(path, token, &self.server_url())
    }

    fn write_kubeconfig_at(&self, path: &Path, token: &str, server: &str) -> Result<()> {
        let yaml = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\nusers:\n- name: user\n  user:\n    token: {token}\ncontexts:\n- name: local\n  context:\n    cluster: local\n    user: user\n    namespace: default\ncurrent-context: local\n",
            ca = self.pki.ca_cert.display(),
        );
        std::fs::write(path, yaml)?;
        Ok(())
    }

    /// A kubeconfig authenticating as ServiceAccount `ns/name` (a TokenRequest token), so
    /// a process using it gets exactly that account's RBAC.
    pub async fn service_account_kubeconfig(&self, ns: &str, name: &str) -> Result<PathBuf> {
        self.service_account_kubeconfig_at(ns, name, &self.server_url())
            .await
    }

    /// As [`Self::service_account_kubeconfig`], against `server` (a [`proxy::FaultProxy`]
    /// in front of the API server, say).
    pub async fn service_account_kubeconfig_at(
        &self,
        ns: &str,
        name: &str,
        server: &str,
    ) -> Result<PathBuf> {
        let token = self.service_account_token(ns, name).await?;
        let tag = match server.rsplit_once(':') {
            Some((_, port)) if server != self.server_url() => format!("-via-{port}"),
            _ => String::new(),
        };
        let path = self.dir().join(format!("kubeconfig-sa-{ns}-{name}{tag}"));
        self.write_kubeconfig_at(&path, &token, server)?;
        Ok(path)
    }

    /// The API server's address, for a [`proxy::FaultProxy`] to forward to.
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
    /// until the service-account controllers made it (and its token).
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

    /// Waits until the service-account controllers gave `ns/name` its token: pods using the
    /// account are refused until then.
    pub async fn wait_for_service_account(&self, ns: &str, name: &str) -> Result<()> {
        let sas: Api<ServiceAccount> = Api::namespaced(self.client().await?, ns);
        poll(
            Duration::from_secs(60),
            &format!("serviceaccount {ns}/{name} with a token"),
            || async {
                Ok(sas
                    .get_opt(name)
                    .await?
                    .is_some_and(|sa| !sa.secrets.unwrap_or_default().is_empty()))
            },
        )
        .await
    }

    async fn wait_for_ready_nodes(&self, n: usize) -> Result<()> {
        let nodes: Api<Node> = Api::all(self.client().await?);
        poll(
            Duration::from_secs(120),
            &format!("{n} Ready nodes"),
            || async {
                let list = nodes.list(&Default::default()).await?;
                let ready = list.items.iter().filter(|n| node_schedulable(n)).count();
                Ok(ready >= n)
            },
        )
        .await
    }

    /// With `$PODSET_AUDIT_DIR` set, leaves there the operator's requests from the audit
    /// log, once the apiserver has stopped and logged them all.
    fn collect_audit(&self) {
        let Some(out) = std::env::var_os(audit::DIR_ENV).filter(|_| self.audit) else {
            return;
        };
        let collected = audit::collect(self.dir(), Path::new(&out), self.api_port, &self.not_ready);
        if let Err(e) = collected {
            eprintln!(
                "testenv: collecting the audit log of {}: {e:#}",
                self.dir().display()
            );
        }
    }

    /// The tail of every component's log, for a failing test.
    pub fn logs(&self, lines: usize) -> String {
        self.components
            .iter()
            .map(|p| {
                format!(
                    "----- {} ({}) -----\n{}\n",
                    p.name,
                    p.log.display(),
                    p.log_tail(lines)
                )
            })
            .collect()
    }
}

/// Ready, and free of the taints a node carries until it is (`node.kubernetes.io/...`).
fn node_schedulable(node: &Node) -> bool {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let tainted = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| {
            ts.iter()
                .any(|t| t.effect == "NoSchedule" && t.key.starts_with("node.kubernetes.io/"))
        });
    ready && !tainted
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let failing = failing();
        // Real nodes first: their teardown needs nothing else, and nothing then restarts
        // their pods.
        self.nodes.clear();
        // Reverse order: nodes and controllers before the apiserver, etcd last.
        while let Some(mut p) = self.components.pop() {
            p.stop_with(libc::SIGTERM, Duration::from_secs(3));
            if failing {
                eprintln!(
                    "----- {} log ({}) -----\n{}",
                    p.name,
                    p.log.display(),
                    p.log_tail(60)
                );
            }
        }
        self.collect_audit();
        if let Ok(data) = std::fs::read_to_string(self.dir().join("etcd-data-dir"))
            && data.starts_with("/dev/shm/podset-testenv-etcd-")
        {
            let _ = std::fs::remove_dir_all(data.trim());
        }
        if let Root::Temp(t) = &mut self.root {
            let t = t.take().expect("temp dir present");
            if failing {
                eprintln!("testenv: kept {} for inspection", t.keep().display());
            }
        }
    }
}

/// Polls `check` every 100 ms until it returns true, failing after `timeout`.
pub async fn poll<F, Fut>(timeout: Duration, what: &str, mut check: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool>>,
{
    poll_some(timeout, what, || {
        let fut = check();
        async move { Ok(fut.await?.then_some(())) }
    })
    .await
}

/// Polls `check` every 100 ms until it returns `Some`, failing after `timeout` with the last
/// error seen.
pub async fn poll_some<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    let mut last_err = None;
    loop {
        match check().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last_err = Some(e),
        }
        if Instant::now() > deadline {
            let why = last_err
                .map(|e| format!(" (last error: {e:#})"))
                .unwrap_or_default();
            return Err(timed_out(timeout, &format!("{what}{why}")));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub async fn client_from_kubeconfig(path: &Path) -> Result<Client> {
    let kc = Kubeconfig::read_from(path)?;
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

fn rand_u128() -> u128 {
    let mut buf = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut buf))
        .expect("read /dev/urandom");
    u128::from_le_bytes(buf)
}

/// Applies CRD manifests (server-side) and waits until each is Established.
pub async fn apply_crds(client: &Client, yaml: &str) -> Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{Patch, PatchParams};
    use serde::Deserialize;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut names = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(yaml) {
        let crd = CustomResourceDefinition::deserialize(doc)?;
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

type SharedClusters = std::collections::BTreeMap<&'static str, std::sync::Arc<Cluster>>;

static SHARED: std::sync::Mutex<SharedClusters> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());
static SHARED_START: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
static FAILED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// One cluster per `key` for every test in this test binary (tests isolate themselves by
/// namespace), started on first use with `opts` and stopped when the process exits.
pub async fn shared(
    key: &'static str,
    opts: impl FnOnce() -> Options,
) -> Result<std::sync::Arc<Cluster>> {
    let _starting = SHARED_START.lock().await;
    if let Some(c) = SHARED.lock().expect("shared cluster lock").get(key) {
        return Ok(c.clone());
    }
    let cluster = std::sync::Arc::new(Cluster::start(opts()).await?);
    let mut shared = SHARED.lock().expect("shared cluster lock");
    if shared.is_empty() {
        // SAFETY: registering a plain extern "C" function.
        unsafe { libc::atexit(stop_shared) };
    }
    shared.insert(key, cluster.clone());
    Ok(cluster)
}

extern "C" fn stop_shared() {
    if let Ok(mut shared) = SHARED.lock() {
        drop(std::mem::take(&mut *shared));
    }
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

/// The error of a wait that timed out, which also marks the test as failing.
pub(crate) fn timed_out(timeout: Duration, what: &str) -> anyhow::Error {
    FAILED.store(true, std::sync::atomic::Ordering::Relaxed);
    anyhow::anyhow!("timed out after {timeout:?} waiting for {what}")
}

/// Whether a test is failing: panicking, or a [`poll`] timed out (a test that returns its
/// error instead of panicking). Drop impls print the logs then.
pub fn failing() -> bool {
    std::thread::panicking() || FAILED.load(std::sync::atomic::Ordering::Relaxed)
}
