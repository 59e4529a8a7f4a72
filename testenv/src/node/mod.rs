//! Real nodes: a kubelet and a containerd 2 of its own (runc, the CNI bridge plugin), so pods
//! run real containers. Everything a node creates is named after it or lives under its
//! directory, so any number of clusters with real nodes run at once on one machine; nothing
//! it does reaches the host's netfilter tables (see [`path_without_iptables`]).

pub mod cleanup;
pub mod config;
pub mod network;

use std::net::{Ipv4Addr, TcpListener};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::pki::Pki;
use crate::process::Process;
use crate::versions;
use cleanup::Footprint;
use network::Bridge;

/// The kubelet's port, on the node's own loopback address.
const KUBELET_PORT: u16 = 10250;

/// One running real node. Dropping it stops the kubelet and containerd and removes every
/// trace (see [`cleanup`]).
pub struct RealNode {
    /// The node's name: its loopback address.
    pub name: String,
    pub bridge: Bridge,
    footprint: Footprint,
    kubelet: Process,
    containerd: Process,
}

/// What a node needs from its cluster.
pub struct ClusterRef<'a> {
    pub server_url: &'a str,
    pub pki: &'a Pki,
    pub registry: &'a str,
    pub kubelet_path: &'a Path,
}

impl RealNode {
    /// Starts containerd, then the kubelet, on `bridge`. The node registers itself; the
    /// caller waits for it to be Ready.
    pub fn start(dir: &Path, bridge: Bridge, cluster: &ClusterRef) -> Result<Self> {
        let address = node_address(dir)?;
        let name = address.to_string();
        for sub in [
            "containerd",
            "cni/net.d",
            "cni/ipam",
            "kubelet",
            "kubelet-pki",
        ] {
            std::fs::create_dir_all(dir.join(sub))?;
        }
        let footprint = Footprint {
            owner: std::process::id(),
            dir: dir.to_path_buf(),
            bridge: bridge.name.clone(),
        };
        footprint
            .record()
            .context("recording the node's footprint in /run/podset-testenv")?;
        for (host, toml) in config::registry_hosts(cluster.registry) {
            let host_dir = dir.join("certs.d").join(host);
            std::fs::create_dir_all(&host_dir)?;
            std::fs::write(host_dir.join("hosts.toml"), toml)?;
        }
        let containerd = start_containerd(dir, &name)?;
        std::fs::write(
            dir.join("cni/net.d/10-podset-testenv.conflist"),
            config::cni_conflist(&bridge, &dir.join("cni/ipam")),
        )?;
        let namespace = format!("/proc/{}/ns/mnt", containerd.pid().unwrap_or_default());
        let kubelet = start_kubelet(dir, address, cluster, &namespace)?;
        Ok(Self {
            name,
            bridge,
            footprint,
            kubelet,
            containerd,
        })
    }

    /// The kubelet's and containerd's resident memory, in bytes (for the benchmarks' notes).
    pub fn rss_bytes(&self) -> u64 {
        [&self.kubelet, &self.containerd]
            .iter()
            .filter_map(|p| p.pid())
            .map(crate::process::rss_bytes)
            .sum()
    }

    pub fn logs(&self, lines: usize) -> String {
        [&self.kubelet, &self.containerd]
            .iter()
            .map(|p| format!("----- {} -----\n{}\n", p.name, p.log_tail(lines)))
            .collect()
    }
}

impl Drop for RealNode {
    fn drop(&mut self) {
        if crate::failing() {
            eprint!("{}", self.logs(60));
        }
        // The kubelet first, so it does not restart what the teardown kills.
        self.kubelet
            .stop_with(libc::SIGTERM, Duration::from_secs(5));
        self.containerd
            .stop_with(libc::SIGTERM, Duration::from_secs(5));
        self.footprint.tear_down();
    }
}

/// containerd in a mount namespace of the node's own. The kubelet joins it: everything the
/// node mounts (volumes, container root filesystems) stays in it and goes with it. Its shim
/// is found on its PATH, beside it.
fn start_containerd(dir: &Path, name: &str) -> Result<Process> {
    let conf = dir.join("containerd.toml");
    std::fs::write(&conf, config::containerd_toml(dir))?;
    std::fs::create_dir_all(dir.join("pod-logs"))?;
    let bin = versions::containerd_bin_dir();
    let containerd = bin.join("containerd");
    if !containerd.exists() {
        bail!(
            "{} is missing: run hack/build-kubernetes.sh (make kubernetes) first",
            containerd.display()
        );
    }
    let args = [
        "--mount",
        "--propagation=private",
        &containerd.to_string_lossy(),
        "--config",
        &conf.to_string_lossy(),
    ];
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut p = Process::new(
        &format!("containerd-{name}"),
        "unshare",
        args.map(String::from).into(),
        dir,
    )
    .env("PATH", &path);
    p.start()?;
    let socket = dir.join("containerd.sock");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !socket.exists() {
        if let Some(status) = p.exited() {
            bail!("containerd exited ({status}):\n{}", p.log_tail(30));
        }
        if Instant::now() > deadline {
            bail!("containerd socket not up after 30s:\n{}", p.log_tail(30));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(p)
}

/// Where every kubelet serves its device plugin registry (not configurable).
const DEVICE_PLUGINS: &str = "/var/lib/kubelet/device-plugins";

fn start_kubelet(
    dir: &Path,
    address: Ipv4Addr,
    cluster: &ClusterRef,
    mount_namespace: &str,
) -> Result<Process> {
    let name = address.to_string();
    let cert = cluster.pki.client_cert(
        &format!("kubelet-{name}"),
        &format!("system:node:{name}"),
        &["system:nodes"],
    )?;
    std::fs::write(
        dir.join("kubelet.json"),
        config::kubelet_config(dir, address, &cluster.pki.ca_cert),
    )?;
    let kubeconfig = dir.join("kubelet.kubeconfig");
    std::fs::write(
        &kubeconfig,
        config::cert_kubeconfig(
            cluster.server_url,
            &cluster.pki.ca_cert,
            &cert.cert,
            &cert.key,
        ),
    )?;
    // The device plugin registry's socket has a fixed path, /var/lib/kubelet/device-plugins:
    // two kubelets starting at once on one host race for it, and the loser exits ("Failed to
    // start ContainerManager ... address already in use"). Each node's own directory is
    // mounted over it, in the node's mount namespace only.
    let plugins = dir.join("device-plugins");
    std::fs::create_dir_all(&plugins)?;
    std::fs::create_dir_all(DEVICE_PLUGINS)?;
    let mut args = vec![
        format!("--mount={mount_namespace}"),
        "--".into(),
        "sh".into(),
        "-c".into(),
        format!("mount --bind \"$0\" {DEVICE_PLUGINS} && exec \"$@\""),
        plugins.to_string_lossy().into_owned(),
        cluster.kubelet_path.to_string_lossy().into_owned(),
    ];
    args.extend(config::kubelet_args(dir, address, &kubeconfig));
    let mut p = Process::new(&format!("kubelet-{name}"), "nsenter", args, dir)
        .env("PATH", &path_without_iptables());
    p.start()?;
    Ok(p)
}

/// A kubelet's PATH (real or hollow): ours without the directories that hold `iptables`. A
/// kubelet that finds iptables puts chains and rules into the host's tables (KUBE-FIREWALL in
/// INPUT and OUTPUT, KUBE-IPTABLES-HINT, KUBE-KUBELET-CANARY) and never removes them; one that
/// does not logs "No iptables support on this system" and goes on, as on an nftables-only
/// host. Nothing of a test node needs them: its pods reach nothing beyond their bridge and
/// the API server.
pub(crate) fn path_without_iptables() -> String {
    std::env::var("PATH")
        .unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into())
        .split(':')
        .filter(|dir| !Path::new(dir).join("iptables").exists())
        .collect::<Vec<_>>()
        .join(":")
}

/// The node's address, which is also its name: the one it had before in `dir` (a restarted
/// `make cluster-up` keeps its node, instead of leaving a ghost that still looks Ready to the
/// scheduler), or a new one.
fn node_address(dir: &Path) -> Result<Ipv4Addr> {
    let file = dir.join("address");
    let before = std::fs::read_to_string(&file)
        .ok()
        .and_then(|a| a.trim().parse::<Ipv4Addr>().ok())
        .filter(|a| TcpListener::bind((*a, KUBELET_PORT)).is_ok());
    let address = match before {
        Some(a) => a,
        None => free_loopback_address()?,
    };
    std::fs::create_dir_all(dir)?;
    std::fs::write(&file, address.to_string())?;
    Ok(address)
}

/// A loopback address (127.x.y.z) whose kubelet port nobody holds.
fn free_loopback_address() -> Result<Ipv4Addr> {
    for _ in 0..50 {
        let r = random_u32();
        let addr = Ipv4Addr::new(
            127,
            1 + (r % 250) as u8,
            (r >> 8) as u8,
            2 + (r >> 16) as u8 % 250,
        );
        if TcpListener::bind((addr, KUBELET_PORT)).is_ok() {
            return Ok(addr);
        }
    }
    bail!("no free loopback address for a kubelet")
}

pub(crate) fn random_u32() -> u32 {
    crate::rand_u128() as u32
}
