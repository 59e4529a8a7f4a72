//! blackhole (issue 28): every connection a controller has open to the API server goes silent
//! for good (no byte either way, no reset: a path that died), while new connections pass; 20
//! objects of 3 are created at that instant and timed until all converged. The operator and
//! kube-controller-manager's replicaset controller (QPS 1000), each on a fresh control plane,
//! talking to it through its own fault proxy (`testenv::proxy`); the harness talks to it
//! directly. tests/network_faults.rs makes the same fault for the operator alone.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use testenv::poll;
use testenv::proxy::{Fault, FaultProxy};

use crate::NS;
use crate::cli::BenchArgs;
use crate::env::{
    Env, Target, Worker, admin_kubeconfig_via, start_controller_manager, start_operator_with,
};
use crate::report::Sample;
use crate::system::pod_watches;
use crate::workload::{self, Convergence, names};

pub const SCENARIO: &str = "Blackhole: open connections silent -> 20x3 converged";

const OBJECTS: usize = 20;
const REPLICAS: i32 = 3;
/// The object converged before the fault: other replicas, so the watch counts it apart.
const BEFORE_REPLICAS: i32 = 2;
/// From the fault until all converged, at most.
const DEADLINE: Duration = Duration::from_secs(120);
/// The worker's start until its first object converged and its pod watch is open.
const STARTUP: Duration = Duration::from_secs(120);
/// Nothing in flight when the fault strikes: the connections idle but open, the watches on
/// them. Shorter than the operator's 5 s after which a write takes a new connection.
const SETTLE: Duration = Duration::from_secs(2);

/// One run: a fresh control plane, the worker through a fault proxy, one object converged;
/// then the blackhole and the 20 objects. The seconds from the fault to all converged, and
/// to the first.
pub async fn blackhole_run(target: Target, args: &BenchArgs) -> Result<Sample> {
    let Some(kind) = target.kind() else {
        bail!("{} converges no PodSets or ReplicaSets", target.label());
    };
    let env = Env::without_worker(&args.operator).await?;
    // Declared after the control plane, so dropped before it; the worker before its proxy.
    let proxy = FaultProxy::start(env.cluster.api_addr()).await?;
    let watches_before = pod_watches(&env.client).await?;
    let _worker = start_worker(&env, &proxy, target, args).await?;

    let mut conv = Convergence::start(&env.client, NS, kind);
    let before = [String::from("before")];
    workload::create_all(&env.client, NS, kind, &before, BEFORE_REPLICAS).await?;
    conv.wait(1, BEFORE_REPLICAS, STARTUP).await?;
    poll(STARTUP, "the worker's pod watch open", || async {
        Ok(pod_watches(&env.client).await? > watches_before)
    })
    .await?;
    tokio::time::sleep(SETTLE).await; // a condition of the measurement, not a wait

    proxy.set(Fault::Blackhole);
    let t0 = Instant::now();
    let after = names("after", OBJECTS);
    workload::create_all(&env.client, NS, kind, &after, REPLICAS).await?;
    conv.wait(1, REPLICAS, DEADLINE).await?;
    let first = t0.elapsed();
    conv.wait(OBJECTS, REPLICAS, DEADLINE.saturating_sub(first))
        .await?;
    Ok(Sample {
        seconds: t0.elapsed().as_secs_f64(),
        pods: OBJECTS * REPLICAS as usize,
        note: format!(
            "{OBJECTS}x{REPLICAS} created at the fault, connections idle {}s before it",
            SETTLE.as_secs()
        ),
        figures: vec![("first converged s", first.as_secs_f64())],
        ..Sample::default()
    })
}

/// The target's worker with the admin's credentials, its server the proxy; once it is up.
/// kube-controller-manager without leader election: a renewal stuck on a silent connection
/// would end it.
async fn start_worker(
    env: &Env,
    proxy: &FaultProxy,
    target: Target,
    args: &BenchArgs,
) -> Result<Worker> {
    let cluster = &env.cluster;
    let kubeconfig = admin_kubeconfig_via(cluster, proxy.addr())?;
    Ok(match target {
        Target::Operator => {
            let bin = &args.operator;
            let op = start_operator_with(cluster, &kubeconfig, bin, "podset", &[]).await?;
            Worker::Operator(op)
        }
        _ => {
            let alone = ["--leader-elect=false".to_string()];
            let name = "bench";
            let cm = start_controller_manager(cluster, &kubeconfig, target, name, &alone).await?;
            Worker::ControllerManager(cm)
        }
    })
}
