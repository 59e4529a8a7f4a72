//! `local-cluster up`: runs the local control plane in the foreground until SIGINT/SIGTERM,
//! with its state (kubeconfig, logs) in `--dir`. `make cluster-up` runs it in the background.

use std::path::PathBuf;

use anyhow::Result;
use clap::Parser;
use testenv::{Cluster, Options};

#[derive(Parser)]
#[command(about = "Run a local Kubernetes 1.20 control plane with real and kubemark hollow nodes")]
struct Args {
    /// State directory: kubeconfig, certificates, component logs.
    #[arg(long, default_value = ".local/cluster")]
    dir: PathBuf,
    /// Real nodes (kubelet + containerd + runc): pods run real containers. Needs root.
    #[arg(long, default_value_t = 1)]
    real_nodes: usize,
    /// kubemark hollow nodes (no container ever starts), for scale; with real nodes too they
    /// carry the taint `podset-testenv/hollow=true:NoSchedule`.
    #[arg(long, default_value_t = 0)]
    nodes: usize,
    /// CRD manifests to install once the apiserver is ready (YAML, `---` separated).
    #[arg(long)]
    crds: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let dir = std::path::absolute(&args.dir)?;
    let ready_marker = dir.join("ready");
    let _ = std::fs::remove_file(&ready_marker);
    eprintln!(
        "local-cluster: starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler, {} real and {} hollow nodes in {}",
        args.real_nodes,
        args.nodes,
        dir.display()
    );
    let crds = args
        .crds
        .as_ref()
        .map(std::fs::read_to_string)
        .transpose()?;
    let cluster = Cluster::start(Options {
        dir: Some(dir.clone()),
        crds,
        ..Options::default()
            .with_nodes(args.nodes)
            .with_real_nodes(args.real_nodes)
    })
    .await?;
    std::fs::write(
        &ready_marker,
        cluster.kubeconfig().to_string_lossy().as_bytes(),
    )?;
    eprintln!(
        "local-cluster: ready; export KUBECONFIG={}",
        cluster.kubeconfig().display()
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    eprintln!("local-cluster: stopping");
    let _ = std::fs::remove_file(&ready_marker);
    drop(cluster);
    Ok(())
}
