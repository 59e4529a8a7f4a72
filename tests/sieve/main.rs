//! Sieve-style perturbation tests (OSDI '22; issue 26, item 3) on the real API server. The
//! operator talks to it through testenv's Sieve proxy, which sees each request. A scenario
//! (the PodSet and At walkthroughs) runs once fault-free, recording the operator's N writes
//! and its end state; then, for every k in 1..=N, again with the operator killed right after
//! its k-th write was answered and restarted (intermediate states); then with the pod watch
//! lagging, and with its intermediate events dropped (stale and unobserved states). Every
//! run must end as the fault-free one did.
//!
//! No nodes: the test plays the kubelet (a PodSet's pods go Running, the At's pod succeeds),
//! and Pending pods count as available too.

mod walkthroughs;

use std::collections::BTreeMap;
use std::pin::pin;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use futures::future::{Either, join_all, select};
use k8s_openapi::api::core::v1::Pod;
use testenv::MaxPods;
use testenv::harness::{TestNs, cluster_without_nodes};
use testenv::sieve::{Perturbation, SieveProxy, Tally, Write};
use tokio::sync::Semaphore;
use walkthroughs::*;

/// Runs at once across this binary, each with its own namespace, proxy and operator: what
/// 2 shared cores carry.
static SLOTS: Semaphore = Semaphore::const_new(4);

/// How long one step may take to converge: a kill, the restart's start-up grace (2 s) and a
/// held-back watch included.
const CONVERGE: Duration = Duration::from_secs(90);

/// The facts of an end state, by name: what runs are compared on.
type Facts = BTreeMap<&'static str, String>;

#[derive(Clone, Copy, Debug)]
enum Scenario {
    /// Create a PodSet of 3, scale it to 5, then down to 1.
    PodSet,
    /// An At due now (`echo YAY`) whose pod succeeds.
    At,
    /// A PodSet of 2 one of whose pods is unlabelled (released, replaced), then deleted in
    /// the foreground.
    Released,
    /// An At deleted while it waits for its schedule.
    DeletedAt,
}

impl Scenario {
    /// The collection of the scenario's own objects (PodSets or Ats) in `ns`, as watched.
    fn owners(self, ns: &str) -> String {
        match self {
            Scenario::PodSet | Scenario::Released => {
                format!("/apis/app.example.com/v1beta1/namespaces/{ns}/podsets")
            }
            Scenario::At | Scenario::DeletedAt => {
                format!("/apis/cnat.programming-kubernetes.info/v1beta1/namespaces/{ns}/ats")
            }
        }
    }

    fn args(self) -> &'static [&'static str] {
        match self {
            Scenario::PodSet | Scenario::Released => &["--controllers=podset"],
            Scenario::At | Scenario::DeletedAt => &["--controllers=at"],
        }
    }

    /// The perturbed watches that give it stale or unobserved states: the pod watch lagging
    /// and thinned out, and the watch of its own objects lagging. An At deleted before it is
    /// due has no pod to watch: its own watch lags, or shows only the last of its changes.
    fn stale_faults(self) -> Vec<Fault> {
        let hold = Perturbation::Hold(Duration::from_secs(3));
        let thin = Perturbation::LastOnly(Duration::from_secs(2));
        match self {
            Scenario::DeletedAt => vec![Fault::OwnerWatch(hold), Fault::OwnerWatch(thin)],
            _ => vec![
                Fault::PodWatch(hold),
                Fault::PodWatch(thin),
                Fault::OwnerWatch(hold),
            ],
        }
    }

    /// Runs the scenario step by step, each once the last has converged; its end state.
    async fn drive(self, ns: &TestNs, pods: &MaxPods) -> Result<Facts> {
        match self {
            Scenario::PodSet => podset_scenario(ns, pods).await,
            Scenario::At => at_scenario(ns, pods).await,
            Scenario::Released => released_scenario(ns, pods).await,
            Scenario::DeletedAt => deleted_at_scenario(ns, pods).await,
        }
    }
}

/// What a run does to the operator.
#[derive(Clone, Copy, Debug)]
enum Fault {
    None,
    /// Killed right after its k-th write was answered, then restarted.
    CrashAfter(usize),
    /// Its pod watch perturbed.
    PodWatch(Perturbation),
    /// Its watch of the scenario's own objects perturbed: it acts on stale copies of them,
    /// and its status writes meet conflicts.
    OwnerWatch(Perturbation),
}

/// One run of a scenario.
struct Run {
    /// Every write forwarded, the restarted operator's included.
    writes: Vec<Write>,
    /// The write the operator was killed after, if it came to that.
    crashed_after: Option<Write>,
    facts: Result<Facts>,
    /// The events of its perturbed watches.
    watch: Tally,
    took: Duration,
}

async fn run(scenario: Scenario, fault: Fault) -> Result<Run> {
    let _slot = SLOTS.acquire().await?;
    let start = Instant::now();
    let ns = TestNs::new_in(cluster_without_nodes().await?, "sieve").await?;
    let cluster = &ns.cluster;
    let proxy = SieveProxy::start(cluster.api_addr(), cluster.ca_cert(), cluster.dir()).await?;
    match fault {
        Fault::PodWatch(perturbation) => {
            let pods = format!("/api/v1/namespaces/{}/pods", ns.name);
            proxy.perturb_watch(&pods, perturbation);
        }
        Fault::OwnerWatch(perturbation) => {
            proxy.perturb_watch(&scenario.owners(&ns.name), perturbation)
        }
        Fault::None | Fault::CrashAfter(_) => {}
    }
    let pods = MaxPods::start(ns.api::<Pod>());
    let mut operator = ns.start_operator_behind(&proxy, scenario.args()).await?;
    if let Fault::CrashAfter(k) = fault {
        let kill = operator
            .process
            .killer()
            .context("the operator is not running")?;
        proxy.crash_after(k, kill)?;
    }
    let facts = {
        let drive = pin!(scenario.drive(&ns, &pods));
        let restart = pin!(async {
            proxy.crashed().await;
            operator.kill(); // reaps it
            operator.restart()
        });
        match select(drive, restart).await {
            Either::Left((facts, _)) => facts,
            Either::Right((Ok(()), drive)) => drive.await,
            Either::Right((Err(e), _)) => Err(e),
        }
    };
    if facts.is_ok() {
        operator.assert_healthy();
    }
    Ok(Run {
        writes: proxy.writes(),
        crashed_after: proxy.crashed_after(),
        facts,
        watch: proxy.watch_events(),
        took: start.elapsed(),
    })
}

/// The facts on which `run` differs from `reference`, one line each.
fn diff(reference: &Facts, run: &Facts) -> Vec<String> {
    reference
        .iter()
        .filter(|(name, value)| run.get(*name) != Some(value))
        .map(|(name, value)| {
            let got = run.get(name).map_or("nothing", String::as_str);
            format!("{name}: fault-free {value}, here {got}")
        })
        .collect()
}

/// Compares `run` with the fault-free `reference`: `None` if it ended the same, else why not.
/// A perturbed run may write again what a crash or a stale copy lost (a restart rewrites
/// its statuses and events), not loop: at most twice the fault-free run's writes, and ten.
fn judge(reference: &Facts, writes: usize, run: &Run) -> Option<String> {
    let most = 2 * writes + 10;
    if run.writes.len() > most {
        let first: Vec<String> = run.writes.iter().take(12).map(|w| w.to_string()).collect();
        return Some(format!(
            "a loop: {} writes, over {most} (the fault-free run made {writes}); the first: {}",
            run.writes.len(),
            first.join(", ")
        ));
    }
    match &run.facts {
        Ok(facts) => {
            let lines = diff(reference, facts);
            (!lines.is_empty()).then(|| lines.join("; "))
        }
        Err(e) => Some(format!("did not converge: {e:#}")),
    }
}

/// The fault-free run, which must itself end as `expected`.
async fn reference(scenario: Scenario, expected: Facts) -> Result<Run> {
    let run = run(scenario, Fault::None).await?;
    let facts = run.facts.as_ref().map_err(|e| anyhow::anyhow!("{e:#}"))?;
    assert_eq!(facts, &expected, "{scenario:?}: the fault-free run");
    Ok(run)
}

/// The fault-free run, then one run crashing after each of its writes: each must end the
/// same.
async fn intermediate_states(scenario: Scenario, expected: Facts) -> Result<()> {
    let start = Instant::now();
    let reference = reference(scenario, expected).await?;
    let n = reference.writes.len();
    println!("{scenario:?}: the fault-free run made N = {n} writes:");
    for (i, w) in reference.writes.iter().enumerate() {
        println!("  {}: {w}", i + 1);
    }
    let runs =
        join_all((1..=n).map(|k| async move { (k, run(scenario, Fault::CrashAfter(k)).await) }))
            .await;
    let facts = reference.facts.as_ref().expect("checked");
    let mut failures = Vec::new();
    for (k, result) in runs {
        let run = result.with_context(|| format!("k = {k}: setting up"))?;
        let crash = match &run.crashed_after {
            Some(w) => format!("crashed after {w}"),
            None => format!("not reached: this run made {} writes", run.writes.len()),
        };
        let verdict = judge(facts, reference.writes.len(), &run);
        println!(
            "{scenario:?} k = {k}/{n}: {crash}; {} writes in all; {} in {:.1?}",
            run.writes.len(),
            verdict.as_deref().unwrap_or("same end state"),
            run.took
        );
        if let Some(why) = verdict {
            failures.push(format!("k = {k} ({crash}): {why}"));
        }
    }
    println!("{scenario:?}: {n} crash points in {:.1?}", start.elapsed());
    assert!(
        failures.is_empty(),
        "{scenario:?}: {} of {n} crash points ended unlike the fault-free run:\n{}",
        failures.len(),
        failures.join("\n")
    );
    Ok(())
}

/// The fault-free run, then runs with the pod watch lagging and thinned out, and with the
/// watch of the scenario's own objects lagging: each must end the same.
async fn stale_and_unobserved_states(scenario: Scenario, expected: Facts) -> Result<()> {
    let start = Instant::now();
    let (reference, runs) = tokio::join!(
        reference(scenario, expected),
        join_all(
            (scenario.stale_faults())
                .into_iter()
                .map(|f| async move { (f, run(scenario, f).await) })
        )
    );
    let reference = reference?;
    let facts = reference.facts.as_ref().expect("checked");
    let mut failures = Vec::new();
    for (f, result) in runs {
        let run = result.with_context(|| format!("{f:?}: setting up"))?;
        let verdict = judge(facts, reference.writes.len(), &run);
        let Tally { received, dropped } = run.watch;
        println!(
            "{scenario:?} with {f:?}: {received} events held, {dropped} dropped; \
             {} writes (fault-free {}); {} in {:.1?}",
            run.writes.len(),
            reference.writes.len(),
            verdict.as_deref().unwrap_or("same end state"),
            run.took
        );
        if let Some(why) = verdict {
            failures.push(format!("{f:?}: {why}"));
        }
        // Else the run would prove nothing about stale or unobserved states.
        assert!(received > 0, "{scenario:?}, {f:?}: no event was held");
        if let Fault::PodWatch(Perturbation::LastOnly(_)) = f {
            assert!(dropped > 0, "{scenario:?}, {f:?}: no pod event was dropped");
        }
    }
    println!(
        "{scenario:?}: stale and unobserved states in {:.1?}",
        start.elapsed()
    );
    assert!(
        failures.is_empty(),
        "{scenario:?}: perturbed runs ended unlike the fault-free run:\n{}",
        failures.join("\n")
    );
    Ok(())
}

#[tokio::test]
async fn podset_crashed_after_each_write_ends_as_without_faults() -> Result<()> {
    intermediate_states(Scenario::PodSet, podset_expected()).await
}

#[tokio::test]
async fn at_crashed_after_each_write_ends_as_without_faults() -> Result<()> {
    intermediate_states(Scenario::At, at_expected()).await
}

#[tokio::test]
async fn podset_with_a_stale_or_thinned_pod_watch_ends_as_without_faults() -> Result<()> {
    stale_and_unobserved_states(Scenario::PodSet, podset_expected()).await
}

#[tokio::test]
async fn at_with_a_stale_or_thinned_pod_watch_ends_as_without_faults() -> Result<()> {
    stale_and_unobserved_states(Scenario::At, at_expected()).await
}

#[tokio::test]
async fn released_pod_and_foreground_delete_crashed_after_each_write_end_as_without_faults()
-> Result<()> {
    intermediate_states(Scenario::Released, released_expected()).await
}

#[tokio::test]
async fn released_pod_and_foreground_delete_with_stale_watches_end_as_without_faults() -> Result<()>
{
    stale_and_unobserved_states(Scenario::Released, released_expected()).await
}

#[tokio::test]
async fn at_deleted_before_due_crashed_after_each_write_ends_as_without_faults() -> Result<()> {
    intermediate_states(Scenario::DeletedAt, deleted_at_expected()).await
}

#[tokio::test]
async fn at_deleted_before_due_with_stale_watches_ends_as_without_faults() -> Result<()> {
    stale_and_unobserved_states(Scenario::DeletedAt, deleted_at_expected()).await
}
