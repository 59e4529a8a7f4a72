//! `podset-bench`: the PodSet and At operators measured against the ReplicaSet controller
//! (kube-controller-manager from the same 1.20.2 source, replicaset controller only) and the
//! API floor, each on a fresh local control plane, medians over repeated runs. Prints a table
//! and writes CSV. `--smoke` runs tiny sizes once (as `make test` does, so the harness cannot
//! rot); `soak` runs the soak test.

mod node;
mod system;
mod workload;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use podset_operator::api::{At, AtSpec, PodSet};
use system::{ProcStats, apiserver_mutations, median, proc_stats, quantile, slope_kib_per_minute};
use testenv::MaxPods;
use testenv::{Cluster, Options, Process};
use workload::{Convergence, Kind};

pub(crate) const NS: &str = "bench";

#[derive(Parser)]
#[command(
    about = "Benchmarks and soak test of podset-operator on a local Kubernetes 1.20 control plane"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    bench: BenchArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Random scaling of 50 PodSets plus random pod deletions; RSS sampled over time.
    Soak {
        #[arg(long, default_value_t = 20)]
        minutes: u64,
        #[arg(long, default_value = "target/release/podset-operator")]
        operator: PathBuf,
    },
    /// A real node: time to Ready, pod start latency, At lateness, kubelet + containerd RSS.
    Node {
        #[arg(long, default_value = "target/release/podset-operator")]
        operator: PathBuf,
        /// Pods created at once for the start latency.
        #[arg(long, default_value_t = 20)]
        pods: usize,
    },
}

#[derive(clap::Args, Clone)]
struct BenchArgs {
    /// The operator binary to measure (build it with --release for real figures).
    #[arg(long, default_value = "target/release/podset-operator")]
    operator: PathBuf,
    /// Repetitions of each measurement; medians are reported.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Tiny sizes, one run: checks the harness, not the speed.
    #[arg(long)]
    smoke: bool,
    /// Only these scenarios (w1,w2,w3,w4,at).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Only these targets (operator, replicaset, replicaset-qps1000, floor).
    #[arg(long, value_delimiter = ',')]
    targets: Vec<String>,
    /// CSV output.
    #[arg(long, default_value = "target/bench/results.csv")]
    csv: PathBuf,
    /// Save a CPU profile of the API server, taken over this many seconds from the start of each
    /// W1/W2/W4 measurement, below target/bench/profiles (read with `go tool pprof -top`).
    #[arg(long)]
    profile_seconds: Option<u64>,
}

/// The sizes of a run.
struct Sizes {
    w1_replicas: i32,
    w2_objects: usize,
    w2_replicas: i32,
    w3_objects: usize,
    w3_toggles: usize,
    w3_high: i32,
    w4_objects: usize,
    w4_replicas: i32,
    ats: usize,
    idle_window: Duration,
    steady_wait: Duration,
}

impl Sizes {
    fn new(smoke: bool) -> Self {
        if smoke {
            Self {
                w1_replicas: 3,
                w2_objects: 4,
                w2_replicas: 2,
                w3_objects: 3,
                w3_toggles: 2,
                w3_high: 3,
                w4_objects: 5,
                w4_replicas: 3,
                ats: 5,
                idle_window: Duration::from_secs(3),
                steady_wait: Duration::from_secs(1),
            }
        } else {
            Self {
                w1_replicas: 10,
                w2_objects: 200,
                w2_replicas: 5,
                w3_objects: 100,
                w3_toggles: 4,
                w3_high: 10,
                w4_objects: 1000,
                w4_replicas: 10,
                ats: 500,
                idle_window: Duration::from_secs(60),
                steady_wait: Duration::from_secs(15),
            }
        }
    }
}

/// Who does the work in a run.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Target {
    Operator,
    /// kube-controller-manager's replicaset controller, with its client QPS/burst (None:
    /// its defaults, 20/30).
    ReplicaSet(Option<u32>),
    /// The bench client itself creating the pods.
    Floor,
}

impl Target {
    fn key(self) -> &'static str {
        match self {
            Target::Operator => "operator",
            Target::ReplicaSet(None) => "replicaset",
            Target::ReplicaSet(Some(_)) => "replicaset-qps1000",
            Target::Floor => "floor",
        }
    }

    fn label(self) -> String {
        match self {
            Target::Operator => "podset-operator".into(),
            Target::ReplicaSet(None) => "replicaset (default qps)".into(),
            Target::ReplicaSet(Some(q)) => format!("replicaset (qps {q})"),
            Target::Floor => "API floor".into(),
        }
    }
}

/// A fresh control plane with whatever does the work.
struct Env {
    cluster: Cluster,
    client: Client,
    /// The operator process and its metrics port.
    operator: Option<(Process, u16)>,
}

impl Env {
    async fn start(target: Target, operator_bin: &PathBuf, controllers: &str) -> Result<Self> {
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
        })
    }

    /// CPU seconds the API server and etcd have used: the control plane's share of the work.
    fn control_plane_cpu(&self) -> Result<f64> {
        let mut total = 0.0;
        for name in ["kube-apiserver", "etcd"] {
            if let Some(pid) = self.cluster.component(name).and_then(Process::pid) {
                total += proc_stats(pid)?.cpu_seconds;
            }
        }
        Ok(total)
    }

    /// The process doing the work, for memory and CPU.
    fn worker_pid(&self) -> Option<u32> {
        match &self.operator {
            Some((op, _)) => op.pid(),
            None => self
                .cluster
                .component("kube-controller-manager")
                .and_then(Process::pid),
        }
    }
}

pub(crate) async fn start_operator(
    cluster: &Cluster,
    bin: &PathBuf,
    controllers: &str,
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
    op.start()
        .with_context(|| format!("starting {}", bin.display()))?;
    testenv::poll(
        Duration::from_secs(60),
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
async fn operator_writes(metrics_port: u16) -> Result<f64> {
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

/// One measurement.
#[derive(Clone, Debug, Default)]
struct Sample {
    seconds: f64,
    pods: usize,
    mutations: f64,
    /// Measured on a target's first run only (the window is long).
    idle_writes_per_min: Option<f64>,
    max_pods: usize,
    peak_rss_mib: f64,
    steady_rss_mib: f64,
    cpu_seconds: f64,
    /// CPU seconds of the API server and etcd while the work was done.
    control_plane_cpu: f64,
    note: String,
}

/// Fetches a CPU profile from the API server's `/debug/pprof` and writes it to a file.
async fn save_apiserver_profile(client: Client, seconds: u64, name: String) -> Result<()> {
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

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// Creates `objects` x `replicas` and times it until every status shows them (W1, W2, W4).
async fn converge_run(
    target: Target,
    args: &BenchArgs,
    s: &Sizes,
    objects: usize,
    replicas: i32,
    measure_idle: bool,
) -> Result<Sample> {
    let env = Env::start(target, &args.operator, "podset").await?;
    let pods = objects * replicas as usize;
    let before = apiserver_mutations(&env.client).await?;
    let start_cpu = env
        .worker_pid()
        .map(proc_stats)
        .transpose()?
        .unwrap_or_default();
    let control_plane_before = env.control_plane_cpu()?;
    let profile = args.profile_seconds.map(|secs| {
        let name = format!("{}-{pods}pods", target.label().replace([' ', '(', ')'], ""));
        tokio::spawn(save_apiserver_profile(env.client.clone(), secs, name))
    });
    let t0 = Instant::now();
    let seconds = match target {
        Target::Floor => {
            workload::create_pods(&env.client, NS, pods, 64).await?;
            t0.elapsed().as_secs_f64()
        }
        Target::Operator | Target::ReplicaSet(_) => {
            let kind = if target == Target::Operator {
                Kind::PodSet
            } else {
                Kind::ReplicaSet
            };
            let mut conv = Convergence::start(&env.client, NS, kind);
            workload::create_all(&env.client, NS, kind, &names("w", objects), replicas).await?;
            conv.wait(objects, replicas, Duration::from_secs(600))
                .await?;
            t0.elapsed().as_secs_f64()
        }
    };
    let control_plane_cpu = env.control_plane_cpu()? - control_plane_before;
    if let Some(profile) = profile {
        profile.await??;
    }
    let after = apiserver_mutations(&env.client).await?;
    // The bench's own creates are not the controller's work.
    let own = match target {
        Target::Floor => pods,
        _ => objects,
    };
    let mut sample = Sample {
        seconds,
        pods,
        mutations: (after - before - own as f64) / pods as f64,
        control_plane_cpu,
        ..Sample::default()
    };
    if let Some(pid) = env.worker_pid() {
        tokio::time::sleep(s.steady_wait).await; // let it settle before the steady reading
        let stats = proc_stats(pid)?;
        sample.steady_rss_mib = mib(stats.rss_kib);
        sample.peak_rss_mib = mib(stats.peak_rss_kib);
        sample.cpu_seconds = stats.cpu_seconds - start_cpu.cpu_seconds;
    }
    if measure_idle {
        let per_minute = 60.0 / s.idle_window.as_secs_f64();
        let own_port = env.operator.as_ref().map(|(_, port)| *port);
        let own_before = match own_port {
            Some(port) => Some(operator_writes(port).await?),
            None => None,
        };
        let idle_before = apiserver_mutations(&env.client).await?;
        tokio::time::sleep(s.idle_window).await; // the observation window itself
        let idle_after = apiserver_mutations(&env.client).await?;
        sample.idle_writes_per_min = Some((idle_after - idle_before) * per_minute);
        if let (Some(port), Some(before)) = (own_port, own_before) {
            let own = (operator_writes(port).await? - before) * per_minute;
            sample.note = format!("the operator's own writes while idle: {own:.1}/min");
        }
    }
    Ok(sample)
}

/// W3: every object toggled between 1 and `high` several times; total time, and the most pods
/// any object ever had.
async fn storm_run(target: Target, args: &BenchArgs, s: &Sizes) -> Result<Sample> {
    let env = Env::start(target, &args.operator, "podset").await?;
    let kind = if target == Target::Operator {
        Kind::PodSet
    } else {
        Kind::ReplicaSet
    };
    let names = names("storm", s.w3_objects);
    let mut conv = Convergence::start(&env.client, NS, kind);
    let max = MaxPods::start(Api::namespaced(env.client.clone(), NS));
    workload::create_all(&env.client, NS, kind, &names, 1).await?;
    conv.wait(names.len(), 1, Duration::from_secs(300)).await?;
    let t0 = Instant::now();
    for i in 0..s.w3_toggles {
        let replicas = if i % 2 == 0 { s.w3_high } else { 1 };
        workload::scale_all(&env.client, NS, kind, &names, replicas).await?;
        conv.wait(names.len(), replicas, Duration::from_secs(300))
            .await?;
    }
    Ok(Sample {
        seconds: t0.elapsed().as_secs_f64(),
        pods: names.len() * s.w3_high as usize,
        max_pods: max.overall(),
        ..Sample::default()
    })
}

/// Ats all due in the same second: lateness of their pods, and duplicates.
async fn at_run(args: &BenchArgs, s: &Sizes) -> Result<Sample> {
    let env = Env::start(Target::Operator, &args.operator, "at").await?;
    let lead = Duration::from_secs(if s.ats > 100 { 15 } else { 5 });
    let due = jiff::Timestamp::now()
        .checked_add(lead)?
        .round(jiff::Unit::Second)?;
    let due_at = SystemTime::UNIX_EPOCH + Duration::from_secs(due.as_second() as u64);
    let schedule = due.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    // Record when each pod is first seen, by a watch started before the Ats exist.
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), NS);
    let seen = std::sync::Arc::new(std::sync::Mutex::new(HashMap::<String, SystemTime>::new()));
    let recorder = {
        let seen = seen.clone();
        tokio::spawn(async move {
            let mut events = std::pin::pin!(
                watcher(pods, watcher::Config::default())
                    .default_backoff()
                    .applied_objects()
            );
            while let Some(Ok(p)) = events.next().await {
                seen.lock()
                    .unwrap()
                    .entry(p.name_any())
                    .or_insert_with(SystemTime::now);
            }
        })
    };
    let ats: Api<At> = Api::namespaced(env.client.clone(), NS);
    let pp = PostParams::default();
    futures::stream::iter(names("at", s.ats))
        .map(|name| {
            let at = At::new(
                &name,
                AtSpec {
                    schedule: schedule.clone(),
                    command: "echo YAY".into(),
                },
            );
            let (ats, pp) = (ats.clone(), pp.clone());
            async move { ats.create(&pp, &at).await }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
    if SystemTime::now() > due_at {
        bail!(
            "creating {} Ats took past their schedule; raise the lead time",
            s.ats
        );
    }
    testenv::poll(
        lead + Duration::from_secs(120),
        "a pod for every At",
        || async { Ok(seen.lock().unwrap().len() >= s.ats) },
    )
    .await?;
    recorder.abort();
    let lateness: Vec<f64> = seen
        .lock()
        .unwrap()
        .values()
        .map(|t| {
            t.duration_since(due_at)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0)
        })
        .collect();
    let list = Api::<Pod>::namespaced(env.client.clone(), NS)
        .list(&ListParams::default())
        .await?;
    let mut per_owner: HashMap<String, usize> = HashMap::new();
    for p in &list.items {
        for r in p.owner_references() {
            *per_owner.entry(r.uid.clone()).or_default() += 1;
        }
    }
    let duplicates = per_owner
        .values()
        .map(|n| n.saturating_sub(1))
        .sum::<usize>();
    Ok(Sample {
        seconds: quantile(&lateness, 0.5),
        pods: list.items.len(),
        max_pods: duplicates,
        note: format!(
            "lateness p50 {:.3}s p99 {:.3}s max {:.3}s; duplicate pods {duplicates}",
            quantile(&lateness, 0.5),
            quantile(&lateness, 0.99),
            quantile(&lateness, 1.0)
        ),
        ..Sample::default()
    })
}

struct Row {
    scenario: &'static str,
    target: String,
    samples: Vec<Sample>,
}

impl Row {
    fn med(&self, f: impl Fn(&Sample) -> f64) -> f64 {
        median(&self.samples.iter().map(f).collect::<Vec<_>>())
    }
}

async fn repeat<F, Fut>(
    runs: usize,
    scenario: &'static str,
    target: String,
    mut f: F,
) -> Result<Row>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Sample>>,
{
    let mut samples = Vec::new();
    for run in 1..=runs {
        eprintln!("[bench] {scenario} / {target}: run {run} of {runs}");
        let sample = f()
            .await
            .with_context(|| format!("{scenario} / {target}, run {run}"))?;
        eprintln!("[bench]   {:.3} s {}", sample.seconds, sample.note);
        samples.push(sample);
    }
    Ok(Row {
        scenario,
        target,
        samples,
    })
}

fn wanted(args: &BenchArgs, scenario: &str) -> bool {
    args.only.is_empty() || args.only.iter().any(|s| s == scenario)
}

fn targets<const N: usize>(args: &BenchArgs, all: [Target; N]) -> Vec<Target> {
    all.into_iter()
        .filter(|t| args.targets.is_empty() || args.targets.iter().any(|k| k == t.key()))
        .collect()
}

async fn bench(args: BenchArgs) -> Result<()> {
    let s = Sizes::new(args.smoke);
    let runs = if args.smoke { 1 } else { args.runs };
    let mut rows: Vec<Row> = Vec::new();
    let qps = Target::ReplicaSet(Some(1000));
    let all_targets = [
        Target::Operator,
        Target::ReplicaSet(None),
        qps,
        Target::Floor,
    ];
    if wanted(&args, "w1") {
        for t in targets(&args, all_targets) {
            rows.push(
                repeat(runs, "W1 1x10 cold", t.label(), || {
                    converge_run(t, &args, &s, 1, s.w1_replicas, false)
                })
                .await?,
            );
        }
    }
    if wanted(&args, "w2") {
        for t in targets(&args, all_targets) {
            // The idle window is long: measured on each target's first run only.
            let mut first = true;
            let run = || {
                let idle = std::mem::take(&mut first);
                converge_run(t, &args, &s, s.w2_objects, s.w2_replicas, idle)
            };
            rows.push(repeat(runs, "W2 200x5", t.label(), run).await?);
        }
    }
    if wanted(&args, "w3") {
        for t in targets(&args, [Target::Operator, qps]) {
            rows.push(
                repeat(runs, "W3 storm 100x(1<->10)", t.label(), || {
                    storm_run(t, &args, &s)
                })
                .await?,
            );
        }
    }
    if wanted(&args, "w4") {
        for t in targets(&args, [Target::Operator, qps]) {
            rows.push(
                repeat(1.min(runs), "W4 1000x10", t.label(), || {
                    converge_run(t, &args, &s, s.w4_objects, s.w4_replicas, false)
                })
                .await?,
            );
        }
    }
    if wanted(&args, "at") {
        rows.push(
            repeat(runs, "At 500 same second", "podset-operator".into(), || {
                at_run(&args, &s)
            })
            .await?,
        );
    }
    report(&rows, &args)?;
    check_invariants(&rows, &s)
}

/// The ratios the issue asks for, against baselines of the same run.
fn ratio(rows: &[Row], scenario: &str, target: &str, base: &str) -> Option<f64> {
    let find = |t: &str| {
        rows.iter()
            .find(|r| r.scenario == scenario && r.target == t)
            .map(|r| r.med(|s| s.seconds))
    };
    Some(find(target)? / find(base)?)
}

fn report(rows: &[Row], args: &BenchArgs) -> Result<()> {
    let header = [
        "scenario",
        "target",
        "runs",
        "pods",
        "median s",
        "x replicaset(qps1000)",
        "x floor",
        "mutating/pod",
        "idle writes/min",
        "max pods/object",
        "peak RSS MiB",
        "steady RSS MiB",
        "CPU s",
        "apiserver+etcd CPU s",
        "note",
    ];
    let mut table = vec![header.iter().map(|h| h.to_string()).collect::<Vec<_>>()];
    for r in rows {
        let fmt = |v: f64, digits: usize| {
            if v.is_finite() && v != 0.0 {
                format!("{v:.digits$}")
            } else {
                "-".into()
            }
        };
        let note = r
            .samples
            .iter()
            .map(|s| s.note.clone())
            .find(|n| !n.is_empty())
            .unwrap_or_default();
        table.push(vec![
            r.scenario.to_string(),
            r.target.clone(),
            r.samples.len().to_string(),
            r.samples.last().map_or(0, |s| s.pods).to_string(),
            format!("{:.3}", r.med(|s| s.seconds)),
            ratio(
                rows,
                r.scenario,
                &r.target,
                &Target::ReplicaSet(Some(1000)).label(),
            )
            .map(|x| format!("{x:.2}"))
            .unwrap_or("-".into()),
            ratio(rows, r.scenario, &r.target, &Target::Floor.label())
                .map(|x| format!("{x:.2}"))
                .unwrap_or("-".into()),
            fmt(r.med(|s| s.mutations), 2),
            {
                let idle: Vec<f64> = r
                    .samples
                    .iter()
                    .filter_map(|s| s.idle_writes_per_min)
                    .collect();
                if idle.is_empty() {
                    "-".into()
                } else {
                    format!("{:.1}", median(&idle))
                }
            },
            if r.scenario.starts_with("W3") {
                r.med(|s| s.max_pods as f64).to_string()
            } else {
                "-".into()
            },
            fmt(r.med(|s| s.peak_rss_mib), 1),
            fmt(r.med(|s| s.steady_rss_mib), 1),
            fmt(r.med(|s| s.cpu_seconds), 2),
            fmt(r.med(|s| s.control_plane_cpu), 2),
            note,
        ]);
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|c| table.iter().map(|row| row[c].len()).max().unwrap_or(0))
        .collect();
    for row in &table {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        println!("| {} |", line.join(" | "));
    }
    if let Some(dir) = args.csv.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let csv: Vec<String> = table
        .iter()
        .map(|row| {
            row.iter()
                .map(|c| format!("\"{}\"", c.replace('"', "'")))
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect();
    std::fs::write(&args.csv, csv.join("\n") + "\n")?;
    eprintln!("[bench] wrote {}", args.csv.display());
    Ok(())
}

/// Correctness the benchmarks must show whatever the timings: never more pods than the spec,
/// never a duplicate At pod.
fn check_invariants(rows: &[Row], s: &Sizes) -> Result<()> {
    for r in rows {
        for sample in &r.samples {
            if r.scenario.starts_with("W3") && sample.max_pods > s.w3_high as usize {
                bail!(
                    "{} / {}: an object had {} pods, over its spec of {}",
                    r.scenario,
                    r.target,
                    sample.max_pods,
                    s.w3_high
                );
            }
            if r.scenario.starts_with("At") && sample.max_pods > 0 {
                bail!("{}: {} duplicate pods", r.scenario, sample.max_pods);
            }
        }
    }
    eprintln!("[bench] invariants hold: no object over its spec, no duplicate At pod");
    Ok(())
}

/// Random scaling of 50 PodSets and random pod deletions for `minutes`, RSS sampled.
async fn soak(minutes: u64, operator: PathBuf) -> Result<()> {
    let env = Env::start(Target::Operator, &operator, "podset").await?;
    let pid = env.worker_pid().context("operator pid")?;
    let names = names("soak", 50);
    workload::create_all(&env.client, NS, Kind::PodSet, &names, 3).await?;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), NS);
    let api: Api<PodSet> = Api::namespaced(env.client.clone(), NS);
    let mut rng = Rng(SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)?
        .as_nanos() as u64
        | 1);
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs(minutes * 60);
    let mut samples = Vec::new();
    let mut next_sample = t0;
    let (mut scalings, mut deletions) = (0u64, 0u64);
    while Instant::now() < end {
        let name = &names[rng.below(names.len())];
        let replicas = 1 + rng.below(10) as i32;
        workload::scale_all(
            &env.client,
            NS,
            Kind::PodSet,
            std::slice::from_ref(name),
            replicas,
        )
        .await?;
        scalings += 1;
        let list = pods.list(&ListParams::default()).await?;
        if !list.items.is_empty() {
            let victim = &list.items[rng.below(list.items.len())];
            let _ = pods
                .delete(&victim.name_any(), &DeleteParams::default())
                .await;
            deletions += 1;
        }
        if Instant::now() >= next_sample {
            let ProcStats { rss_kib, .. } = proc_stats(pid)?;
            samples.push((t0.elapsed(), rss_kib));
            eprintln!(
                "[soak] {:>5.1} min  RSS {:.1} MiB  scalings {scalings}  pod deletions {deletions}",
                t0.elapsed().as_secs_f64() / 60.0,
                mib(rss_kib)
            );
            next_sample += Duration::from_secs(10);
        }
        tokio::time::sleep(Duration::from_millis(500)).await; // the soak's pace, not a wait
    }
    // Memory growth after warm-up: the first fifth is the caches filling.
    let warm: Vec<_> = samples.iter().copied().skip(samples.len() / 5).collect();
    let slope = slope_kib_per_minute(&warm);
    let quiet = Instant::now();
    testenv::poll(
        Duration::from_secs(120),
        "every PodSet at its last spec, in pods and in status",
        || all_at_spec(&api, &pods),
    )
    .await?;
    println!(
        "soak: {minutes} min, {scalings} scalings, {deletions} pod deletions; all {} PodSets at \
         their last spec {:.1} s after the last change",
        names.len(),
        quiet.elapsed().as_secs_f64()
    );
    println!(
        "soak: RSS first {:.1} MiB, last {:.1} MiB, max {:.1} MiB; slope after warm-up {slope:.1} KiB/min",
        mib(samples.first().map_or(0, |s| s.1)),
        mib(samples.last().map_or(0, |s| s.1)),
        mib(samples.iter().map(|s| s.1).max().unwrap_or(0))
    );
    Ok(())
}

/// Whether every PodSet has exactly its spec's live pods, and says so in a status written for
/// its current generation.
async fn all_at_spec(api: &Api<PodSet>, pods: &Api<Pod>) -> Result<bool> {
    let live = testenv::live_pods_by_owner(&pods.list(&ListParams::default()).await?.items);
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .all(|ps| {
            let want = ps.spec.replicas;
            let has = live.get(&ps.uid().unwrap_or_default()).map_or(0, Vec::len);
            ps.status.as_ref().is_some_and(|s| {
                s.available_replicas == want && s.observed_generation == ps.metadata.generation
            }) && has == want as usize
        }))
}

/// xorshift64: enough randomness for choosing what to scale, with no dependency.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Soak { minutes, operator }) => soak(minutes, operator).await,
        Some(Command::Node { operator, pods }) => node::node(operator, pods).await,
        None => bench(cli.bench).await,
    }
}
