//! Who does the work (the targets) and the fresh control plane each measurement runs on.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding};
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use podset_operator::rbac;
use serde_json::json;
use testenv::harness::OPERATOR_SA;
use testenv::operator::{Launcher, Operator};
use testenv::{Cluster, Options, Process, free_port, poll, versions};

use crate::NS;
use crate::system::{metric_sum, proc_stats};
use crate::workload::Kind;

/// Who does the work in a run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Target {
    Operator,
    /// kube-controller-manager's replicaset controller, with its client QPS/burst (None:
    /// its defaults, 20/30).
    ReplicaSet(Option<u32>),
    /// kube-controller-manager's cronjob and job controllers at QPS/burst 1000 (scenario at).
    CronJob,
    /// The bench client itself creating the pods.
    Floor,
}

impl Target {
    pub fn key(self) -> &'static str {
        match self {
            Target::Operator => "operator",
            Target::ReplicaSet(None) => "replicaset",
            Target::ReplicaSet(Some(_)) => "replicaset-qps1000",
            Target::CronJob => "cronjob-qps1000",
            Target::Floor => "floor",
        }
    }

    pub fn label(self) -> String {
        match self {
            Target::Operator => "podset-operator".into(),
            Target::ReplicaSet(None) => "replicaset (default qps)".into(),
            Target::ReplicaSet(Some(q)) => format!("replicaset (qps {q})"),
            Target::CronJob => "cronjob + job (qps 1000)".into(),
            Target::Floor => "API floor".into(),
        }
    }

    /// The ServiceAccount (namespace, name) the worker authenticates as when it runs as its
    /// own user (see [`Env::start_as`]).
    pub fn account(self) -> Option<(&'static str, &'static str)> {
        match self {
            Target::Operator => Some((NS, OPERATOR_SA)),
            // kube-controller-manager's own name for the controller's account.
            Target::ReplicaSet(_) => Some(("kube-system", "replicaset-controller")),
            Target::CronJob => Some(("kube-system", "cronjob-controller")),
            Target::Floor => None,
        }
    }

    /// The objects it converges, or None if it converges neither kind.
    pub fn kind(self) -> Option<Kind> {
        match self {
            Target::Operator => Some(Kind::PodSet),
            Target::ReplicaSet(_) => Some(Kind::ReplicaSet),
            Target::CronJob | Target::Floor => None,
        }
    }

    /// The kube-controller-manager controllers doing the work and their client QPS/burst
    /// (None: the defaults), or None if it is not kube-controller-manager.
    pub fn controllers(self) -> Option<(&'static [&'static str], Option<u32>)> {
        match self {
            Target::ReplicaSet(qps) => Some((&["replicaset"], qps)),
            Target::CronJob => Some((&["cronjob", "job"], Some(1000))),
            Target::Operator | Target::Floor => None,
        }
    }
}

/// A worker process a scenario starts itself, on a control plane without one of its own
/// ([`Env::without_worker`]). Killed when dropped.
pub enum Worker {
    Operator(Operator),
    ControllerManager(Process),
}

impl Worker {
    pub fn process(&self) -> &Process {
        match self {
            Worker::Operator(op) => &op.process,
            Worker::ControllerManager(p) => p,
        }
    }
}

/// A fresh control plane with whatever does the work.
pub struct Env {
    pub cluster: Cluster,
    pub client: Client,
    /// The operator process.
    pub operator: Option<Operator>,
    operator_bin: PathBuf,
    /// The credentials the operator runs with.
    operator_kubeconfig: PathBuf,
    controllers: String,
}

impl Env {
    /// The worker authenticates as the admin.
    pub async fn start(target: Target, operator_bin: &Path, controllers: &str) -> Result<Self> {
        Self::start_as(target, operator_bin, controllers, false).await
    }

    /// With `own_user`, the worker authenticates as its own ServiceAccount
    /// ([`Target::account`]) rather than as the admin, whom API Priority and Fairness exempts
    /// (system:masters).
    pub async fn start_as(
        target: Target,
        operator_bin: &Path,
        controllers: &str,
        own_user: bool,
    ) -> Result<Self> {
        let mut controllers_list = vec!["serviceaccount", "serviceaccount-token"];
        let mut cm_args = Vec::new();
        if let Some((own, qps)) = target.controllers() {
            controllers_list.extend(own);
            cm_args = qps_args(qps);
            if own_user {
                // Each controller then requests a token of its own ServiceAccount.
                cm_args.push("--use-service-account-credentials=true".into());
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
        let operator_kubeconfig = match (target, own_user) {
            (Target::Operator, true) => operator_account(&cluster, &client).await?,
            _ => cluster.kubeconfig().to_path_buf(),
        };
        let mut env = Self {
            cluster,
            client,
            operator: None,
            operator_bin: operator_bin.to_path_buf(),
            operator_kubeconfig,
            controllers: controllers.into(),
        };
        if target == Target::Operator {
            env.restart_operator(&[]).await?;
        }
        Ok(env)
    }

    /// A control plane with no worker of its own: the caller starts its own (scenario
    /// failover runs two). The floor's worker is the harness, so nothing is started for it.
    pub async fn without_worker(operator_bin: &Path) -> Result<Self> {
        Self::start(Target::Floor, operator_bin, "podset").await
    }

    /// Stops the operator if any and starts a new one with `vars` added to its environment;
    /// returns how long the new one took from its start to ready (its initial lists).
    pub async fn restart_operator(&mut self, vars: &[(&str, String)]) -> Result<Duration> {
        if let Some(mut old) = self.operator.take() {
            old.process.stop();
        }
        let start = Instant::now();
        let (bin, controllers) = (&self.operator_bin, &self.controllers);
        let kubeconfig = &self.operator_kubeconfig;
        self.operator =
            Some(start_operator_with(&self.cluster, kubeconfig, bin, controllers, vars).await?);
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
            Some(op) => op.pid(),
            None => self
                .cluster
                .component("kube-controller-manager")
                .and_then(Process::pid),
        }
    }
}

/// kube-controller-manager's client QPS and burst flags (None: its defaults).
pub fn qps_args(qps: Option<u32>) -> Vec<String> {
    qps.map(|q| {
        vec![
            format!("--kube-api-qps={q}"),
            format!("--kube-api-burst={q}"),
        ]
    })
    .unwrap_or_default()
}

pub async fn start_operator(cluster: &Cluster, bin: &Path, controllers: &str) -> Result<Operator> {
    start_operator_with(cluster, cluster.kubeconfig(), bin, controllers, &[]).await
}

/// ServiceAccount [`OPERATOR_SA`] in the bench namespace, bound there to the generated rules
/// as the tests bind it: a kubeconfig authenticating as it.
async fn operator_account(cluster: &Cluster, client: &Client) -> Result<PathBuf> {
    let pp = PostParams::default();
    let role = rbac::manager_cluster_role();
    let role_name = role.name_any();
    Api::<ClusterRole>::all(client.clone())
        .create(&pp, &role)
        .await?;
    let account: ServiceAccount =
        serde_json::from_value(json!({ "metadata": { "name": OPERATOR_SA } }))?;
    Api::<ServiceAccount>::namespaced(client.clone(), NS)
        .create(&pp, &account)
        .await?;
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": { "name": role_name },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role_name },
        "subjects": [{ "kind": "ServiceAccount", "name": OPERATOR_SA, "namespace": NS }],
    }))?;
    Api::<RoleBinding>::namespaced(client.clone(), NS)
        .create(&pp, &binding)
        .await?;
    cluster.service_account_kubeconfig(NS, OPERATOR_SA).await
}

/// testenv's launcher with the benchmark's knobs: process `name` (its log's name) with
/// `kubeconfig`'s credentials, warnings only in the log, `/metrics` over plain HTTP.
pub fn operator_launcher(
    cluster: &Cluster,
    kubeconfig: &Path,
    bin: &Path,
    controllers: &str,
    name: &str,
) -> Launcher {
    Launcher::new(bin, name, cluster.dir(), kubeconfig, NS)
        .instance(&format!("podset-testenv-{name}"))
        .log_level("warn")
        .plain_metrics()
        .args([format!("--controllers={controllers}")])
}

/// [`operator_launcher`]'s operator, named "bench", with `vars` added to its environment (a
/// heap profiler's preload); waits until ready.
pub async fn start_operator_with(
    cluster: &Cluster,
    kubeconfig: &Path,
    bin: &Path,
    controllers: &str,
    vars: &[(&str, String)],
) -> Result<Operator> {
    let mut launcher = operator_launcher(cluster, kubeconfig, bin, controllers, "bench");
    for (key, value) in vars {
        launcher = launcher.env(key, value);
    }
    let op = launcher.start()?;
    // Long enough for the initial list of W5's 100,000 pods.
    op.wait_ready(Duration::from_secs(300)).await?;
    Ok(op)
}

/// kube-controller-manager as process `kube-controller-manager-<name>`, running `target`'s
/// controllers with its client limits and `kubeconfig`'s credentials (each controller under
/// the manager's own), serving on a port of its own, with `extra` flags (leader election);
/// waits until its `/healthz` answers.
pub async fn start_controller_manager(
    cluster: &Cluster,
    kubeconfig: &Path,
    target: Target,
    name: &str,
    extra: &[String],
) -> Result<Process> {
    let (controllers, qps) = target.controllers().context("no controllers")?;
    let port = free_port()?;
    let mut args = vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--controllers={}", controllers.join(",")),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={port}"),
        "--use-service-account-credentials=false".into(),
        "--v=1".into(),
    ];
    args.extend(qps_args(qps));
    args.extend(extra.iter().cloned());
    let bin = versions::kube_bin_dir(&cluster.version).join("kube-controller-manager");
    let name = format!("kube-controller-manager-{name}");
    let mut process = Process::new(&name, bin, args, cluster.dir());
    process.start()?;
    // Its certificate is a self-signed one made at start; /healthz needs no credentials.
    let http = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .build()?;
    let url = format!("https://127.0.0.1:{port}/healthz");
    poll(
        Duration::from_secs(120),
        &format!("{name}'s /healthz"),
        || async {
            let answer = http.get(&url).send().await;
            Ok(answer.is_ok_and(|r| r.status().is_success()))
        },
    )
    .await?;
    Ok(process)
}

/// A copy of the admin kubeconfig whose server is `addr` (a [`testenv::proxy::FaultProxy`]
/// on the API server's IP, which the server's certificate names).
pub fn admin_kubeconfig_via(cluster: &Cluster, addr: SocketAddr) -> Result<PathBuf> {
    let admin = std::fs::read_to_string(cluster.kubeconfig())?;
    let server = format!("server: {}\n", cluster.server_url());
    if !admin.contains(&server) {
        bail!("{} names no {server}", cluster.kubeconfig().display());
    }
    let path = cluster
        .dir()
        .join(format!("kubeconfig-via-{}", addr.port()));
    std::fs::write(
        &path,
        admin.replace(&server, &format!("server: https://{addr}\n")),
    )?;
    Ok(path)
}

/// The operator's `/metrics` (plain HTTP, see [`operator_launcher`]).
pub async fn operator_metrics(metrics_port: u16) -> Result<String> {
    let url = format!("http://127.0.0.1:{metrics_port}/metrics");
    Ok(reqwest::get(url).await?.text().await?)
}

/// The mutating requests the operator itself has sent (its own client's counter).
pub async fn operator_writes(metrics_port: u16) -> Result<f64> {
    let text = operator_metrics(metrics_port).await?;
    let mutating = |labels: &str| {
        ["POST", "PUT", "PATCH", "DELETE"]
            .iter()
            .any(|v| labels.contains(&format!("method=\"{v}\"")))
    };
    Ok(metric_sum(&text, "rest_client_requests_total", mutating))
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
    let table = crate::pprof::table(&crate::pprof::split(&path)?);
    for line in &table {
        eprintln!("[bench]     {line}");
    }
    std::fs::write(path.with_extension("txt"), table.join("\n") + "\n")?;
    Ok(())
}
