//! A real, local Kubernetes control plane (1.37 by default, 1.33 too: see [`versions`]) for
//! tests, benchmarks and `make run`.
//!
//! `Cluster::start` brings up etcd, kube-apiserver (RBAC on, ServiceAccount tokens on),
//! and optionally kube-controller-manager, kube-scheduler, kubemark hollow nodes and real
//! nodes, each on free loopback ports in a private directory. Dropping the `Cluster` stops
//! everything; a test binary that dies takes its children with it (see [`process`]).
//!
//! The binaries come from `hack/build-kubernetes.sh`, built from the Go module proxy.
//!
//! On top: [`operator`], the operator binary's one launcher (tests and benchmarks), and
//! [`harness`], the end-to-end tests' namespaces, grants, fixtures and waits.

mod access;
pub mod audit;
mod components;
pub mod connect_proxy;
pub mod conversion;
pub mod harness;
pub mod helm;
mod max_pods;
pub mod node;
pub mod operator;
mod options;
pub mod pki;
mod ports;
pub mod process;
pub mod proxy;
pub mod registry;
mod shared;
pub mod sieve;
pub mod versions;
mod wait;

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};

pub use access::{apply_crds, client_from_kubeconfig, get_metrics, get_metrics_from};
pub use max_pods::{MaxPods, controller_uid, live_pods_by_owner};
pub use options::Options;
pub use ports::free_port;
pub use process::{Process, run_command, spawn_tied};
pub use shared::shared;
pub(crate) use wait::timed_out;
pub use wait::{failing, poll, poll_some};

const ADMIN_TOKEN_USER: &str = "testenv-admin";

/// The taint hollow nodes carry in a cluster that also has real nodes: only pods that want
/// a hollow node (scale tests) tolerate it, so everything else runs for real.
pub const HOLLOW_TAINT: &str = "podset-testenv/hollow";

/// A running control plane. Dropping it stops every component.
pub struct Cluster {
    root: Root,
    /// The Kubernetes version it runs (`1.37.2`).
    pub version: String,
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
    /// When this release ran under another release's RBAC, and the pods of another release
    /// under the same ServiceAccount (see [`Cluster::another_release_ran`]).
    other_release: std::sync::Mutex<(Vec<audit::NotReady>, Vec<String>)>,
    /// How long the real nodes took from their registry's start to Ready (benchmarks).
    pub real_nodes_ready_in: Option<Duration>,
    /// The At's conversion webhook the installed CRDs point at.
    conversion: Option<conversion::Conversion>,
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

impl Cluster {
    pub async fn start(opts: Options) -> Result<Self> {
        let version = opts
            .version
            .clone()
            .unwrap_or_else(versions::default_version);
        let bin = versions::kube_bin_dir(&version);
        for b in [
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "kubemark",
            "kubelet",
        ]
        .map(|b| bin.join(b))
        .into_iter()
        .chain([versions::etcd()])
        {
            if !b.exists() {
                bail!(
                    "{} is missing: run `K8S_VERSION={version} hack/build-kubernetes.sh` (make kubernetes) first",
                    b.display()
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
                Some(node::network::Bridge::create(prefix, &dir.join("node-0"))?)
            }
        };
        let api_host = first_bridge
            .as_ref()
            .map_or(IpAddr::V4(Ipv4Addr::LOCALHOST), |b| IpAddr::V4(b.gateway()));
        let extra_ips: Vec<IpAddr> = first_bridge
            .iter()
            .map(|b| IpAddr::V4(b.gateway()))
            .collect();
        let pki = pki::Pki::load_or_generate(&dir.join("pki"), &extra_ips)?;
        let admin_token = format!("{:032x}", rand_u128());
        std::fs::write(
            dir.join("tokens.csv"),
            format!("{admin_token},{ADMIN_TOKEN_USER},{ADMIN_TOKEN_USER},\"system:masters\"\n"),
        )?;
        let api_port = ports::sticky_port(&dir, "kube-apiserver")?;
        let etcd_port = free_port()?;
        let kubeconfig = dir.join("kubeconfig");
        let mut cluster = Self {
            root,
            version,
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
            other_release: Default::default(),
            real_nodes_ready_in: None,
            conversion: None,
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
            let conversion = conversion::Conversion::start()?;
            apply_crds(&cluster.client().await?, crds, Some(&conversion)).await?;
            cluster.conversion = Some(conversion);
        }
        if opts.controller_manager {
            cluster.start_controller_manager(&opts)?;
        }
        for i in 0..opts.nodes {
            cluster.start_hollow_node(i, opts.real_nodes > 0)?;
        }
        let nodes_began = Instant::now();
        if let Some(bridge) = first_bridge {
            cluster.start_real_nodes(bridge, opts.real_nodes).await?;
        }
        // Before anything is scheduled: a node a restarted cluster no longer runs would still
        // look Ready for a while, and pods bound to it would never start.
        cluster.delete_nodes_not_run(opts.nodes).await?;
        if opts.scheduler {
            cluster.start_scheduler()?;
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

    /// Starts the registry, pushes busybox and pause into it, then `n` real nodes (the
    /// first on `first`, the bridge the API server listens on).
    async fn start_real_nodes(&mut self, first: node::network::Bridge, n: usize) -> Result<()> {
        let (registry, addr) = registry::start(self.dir()).await?;
        self.components.push(registry);
        // Under `latest` for pods that name no tag, and under the tag the operator pins.
        let pinned = podset_operator::api::BUSYBOX_IMAGE;
        for repo in [
            "library/busybox:latest".to_string(),
            format!("library/{pinned}"),
        ] {
            let archive = versions::images_dir().join("busybox.tar");
            registry::push(&addr, &archive, &repo).await?;
        }
        let pause = versions::pause_image().trim_start_matches("registry.k8s.io/");
        registry::push(&addr, &versions::pause_archive(), pause).await?;
        let prefix = first.name[..3].to_string();
        let mut bridge = Some(first);
        for i in 0..n {
            let dir = self.dir().join(format!("node-{i}"));
            let b = match bridge.take() {
                Some(b) => b,
                None => node::network::Bridge::create(&prefix, &dir)?,
            };
            let server_url = self.server_url();
            let kubelet_path = self.bin.join("kubelet");
            let cluster = node::ClusterRef {
                server_url: &server_url,
                pki: &self.pki,
                registry: &addr,
                kubelet_path: &kubelet_path,
            };
            let node = node::RealNode::start(&dir, b, &cluster)?;
            self.nodes.push(node);
        }
        // hack/deploy-local.sh finds the registry here.
        std::fs::write(self.dir().join("registry-address"), &addr)?;
        self.registry = Some(addr);
        Ok(())
    }

    /// Deletes the nodes registered before that this cluster does not run now (a
    /// `make cluster-up` restarted with fewer nodes).
    async fn delete_nodes_not_run(&self, hollow: usize) -> Result<()> {
        let nodes: Api<Node> = Api::all(self.client().await?);
        let run: Vec<String> = (0..hollow)
            .map(|i| format!("hollow-node-{i}"))
            .chain(self.real_nodes())
            .collect();
        for node in nodes.list(&Default::default()).await? {
            if !run.contains(&node.name_any()) {
                eprintln!(
                    "testenv: deleting node {}, which this cluster no longer runs",
                    node.name_any()
                );
                nodes
                    .delete(&node.name_any(), &DeleteParams::default())
                    .await?;
            }
        }
        Ok(())
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

    /// Says that from `from` to `to` another release ran under the operator's ServiceAccount
    /// and this one under the other's RBAC (a rollback rolling out): what was sent then is
    /// left out of the audit, which checks this release's requests against its own RBAC.
    pub fn another_release_ran(&self, from: std::time::SystemTime, to: std::time::SystemTime) {
        if let Ok(mut other) = self.other_release.lock() {
            other.0.push((from, to));
        }
    }

    /// Says that the operator pods `pods` ran another release: their requests (each names its
    /// pod in its User-Agent) are left out of the audit.
    pub fn another_release_pods(&self, pods: impl IntoIterator<Item = String>) {
        if let Ok(mut other) = self.other_release.lock() {
            other.1.extend(pods);
        }
    }

    /// With `$PODSET_AUDIT_DIR` set, leaves there the operator's requests from the audit
    /// log, once the apiserver has stopped and logged them all.
    fn collect_audit(&self) {
        let Some(out) = std::env::var_os(audit::DIR_ENV).filter(|_| self.audit) else {
            return;
        };
        let (other_release, other_pods) = self
            .other_release
            .lock()
            .map(|w| w.clone())
            .unwrap_or_default();
        let windows = audit::Windows {
            not_ready: &self.not_ready,
            other_release: &other_release,
            other_pods: &other_pods,
        };
        let collected = audit::collect(self.dir(), Path::new(&out), self.api_port, windows);
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

fn rand_u128() -> u128 {
    let mut buf = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut buf))
        .expect("read /dev/urandom");
    u128::from_le_bytes(buf)
}
