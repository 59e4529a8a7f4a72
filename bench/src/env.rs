//! Who does the work (the targets) and the fresh control plane each measurement runs on.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result};
use kube::Client;
use testenv::{Cluster, Options, Process};

use crate::NS;
use crate::system::proc_stats;

/// Who does the work in a run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Target {
    Operator,
    /// kube-controller-manager's replicaset controller, with its client QPS/burst (None:
    /// its defaults, 20/30).
    ReplicaSet(Option<u32>),
    /// The bench client itself creating the pods.
    Floor,
}

impl Target {
    pub fn key(self) -> &'static str {
        match self {
            Target::Operator => "operator",
            Target::ReplicaSet(None) => "replicaset",
            Target::ReplicaSet(Some(_)) => "replicaset-qps1000",
            Target::Floor => "floor",
        }
    }

    pub fn label(self) -> String {
        match self {
            Target::Operator => "podset-operator".into(),
            Target::ReplicaSet(None) => "replicaset (default qps)".into(),
            Target::ReplicaSet(Some(q)) => format!("replicaset (qps {q})"),
            Target::Floor => "API floor".into(),
        }
    }
}

/// A fresh control plane with whatever does the work.
pub struct Env {
    pub cluster: Cluster,
    pub client: Client,
    /// The operator process and its metrics port.
    pub operator: Option<(Process, u16)>,
    operator_bin: PathBuf,
    controllers: String,
}

impl Env {
    pub async fn start(target: Target, operator_bin: &PathBuf, controllers: &str) -> Result<Self> {
        let mut controllers_list = vec!["serviceaccount", "serviceaccount-token"];
        let mut cm_args = Vec::new();
        if let Target::ReplicaSet(qps) = target {
            controllers_list.push("replicaset");
            if let Some(q) = qps {
                cm_args = vec![
                    format!("--kube-api-qps={q}"),
                    format!("--kube-api-burst={q}"),
                ];
            }
        }
        let cluster = Cluster::start(Options {
            controllers: Some(controllers_list.join(",")),
            controller_manager_args: cm_args,
            crds: Some(podset_operator::api::crds_yaml()),
            // An audit log costs a write per request: keep the figures comparable.
            audit: false,
            ..Options::default()
        })
        .await?;
        cluster.create_namespace(NS).await?;
        let client = cluster.client().await?;
        let operator = match target {
            Target::Operator => Some(start_operator(&cluster, operator_bin, controllers).await?),
            _ => None,
        };
        Ok(Self {
            cluster,
            client,
            operator,
            operator_bin: operator_bin.clone(),
            controllers: controllers.into(),
        })
    }

    /// Stops the operator and starts a new one with `vars` added to its environment; returns
    /// how long the new one took from its start to ready (its initial lists).
    pub async fn restart_operator(&mut self, vars: &[(&str, String)]) -> Result<Duration> {
        if let Some((mut old, _)) = self.operator.take() {
            old.stop();
        }
        let start = Instant::now();
        let (bin, controllers) = (&self.operator_bin, &self.controllers);
        self.operator = Some(start_operator_with(&self.cluster, bin, controllers, vars).await?);
        Ok(start.elapsed())
    }

    /// CPU seconds the API server and etcd have used: the control plane's share of the work.
    pub fn control_plane_cpu(&self) -> Result<f64> {
        let mut total = 0.0;
        for name in ["kube-apiserver", "etcd"] {
            if let Some(pid) = self.cluster.component(name).and_then(Process::pid) {
                total += proc_stats(pid)?.cpu_seconds;
            }
        }
        Ok(total)
    }

    /// The process doing the work, for memory and CPU.
    pub fn worker_pid(&self) -> Option<u32> {
        match &self.operator {
            Some((op, _)) => op.pid(),
            None => self
                .cluster
                .component("kube-controller-manager")
                .and_then(Process::pid),
        }
    }
}

pub async fn start_operator(
    cluster: &Cluster,
    bin: &PathBuf,
    controllers: &str,
) -> Result<(Process, u16)> {
    start_operator_with(cluster, bin, controllers, &[]).await
}

async fn start_operator_with(
    cluster: &Cluster,
    bin: &PathBuf,
    controllers: &str,
    vars: &[(&str, String)],
) -> Result<(Process, u16)> {
    let health = testenv::free_port()?;
    let metrics = testenv::free_port()?;
    let args = vec![
        "run".to_string(),
        format!("--namespace={NS}"),
        format!("--controllers={controllers}"),
        "--log-level=warn".into(),
        format!("--metrics-bind-address=127.0.0.1:{metrics}"),
        // The benchmark scrapes its own operator over plain HTTP on loopback.
        "--metrics-secure=false".into(),
        format!("--health-probe-bind-address=127.0.0.1:{health}"),
        "--instance=podset-testenv-bench".into(),
    ];
    let mut op = Process::new("operator", bin, args, cluster.dir())
        .env("KUBECONFIG", &cluster.kubeconfig().to_string_lossy());
    for (key, value) in vars {
        op = op.env(key, value);
    }
    op.start()
        .with_context(|| format!("starting {}", bin.display()))?;
    // Long enough for the initial list of W5's 100,000 pods.
    testenv::poll(
        Duration::from_secs(300),
        "the operator's /readyz",
        || async {
            let r = reqwest::get(format!("http://127.0.0.1:{health}/readyz")).await;
            Ok(r.is_ok_and(|r| r.status().is_success()))
        },
    )
    .await?;
    Ok((op, metrics))
}

/// The mutating requests the operator itself has sent (its own client's counter).
pub async fn operator_writes(metrics_port: u16) -> Result<f64> {
    let text = reqwest::get(format!("http://127.0.0.1:{metrics_port}/metrics"))
        .await?
        .text()
        .await?;
    Ok(text
        .lines()
        .filter(|l| l.starts_with("podset_operator_api_requests_total{"))
        .filter(|l| {
            ["POST", "PUT", "PATCH", "DELETE"]
                .iter()
                .any(|v| l.contains(&format!("verb=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum())
}

/// Fetches a CPU profile from the API server's `/debug/pprof` and writes it to a file.
pub async fn save_apiserver_profile(client: Client, seconds: u64, name: String) -> Result<()> {
    let request =
        http::Request::get(format!("/debug/pprof/profile?seconds={seconds}")).body(Vec::new())?;
    let response = client.send(request.map(Into::into)).await?;
    let bytes = response.into_body().collect_bytes().await?;
    let dir = PathBuf::from("target/bench/profiles");
    std::fs::create_dir_all(&dir)?;
    let stamp = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)?
        .as_secs();
    let path = dir.join(format!("{name}-{stamp}.pprof"));
    std::fs::write(&path, bytes)?;
    eprintln!("[bench]   API server CPU profile: {}", path.display());
    Ok(())
}
