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

use std::collections::BTreeMap;
use std::pin::pin;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use futures::StreamExt;
use futures::future::{Either, join_all, select};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use podset_operator::api::{At, AtPhase, PodSet};
use podset_operator::plan::at::CONDITION_COMPLETED;
use serde_json::json;
use testenv::MaxPods;
use testenv::harness::{self, TestNs, at, cluster_without_nodes, podset, poll_some, set_pod_phase};
use testenv::sieve::{Perturbation, SieveProxy, Tally, Write};
use tokio::sync::Semaphore;

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
}

impl Scenario {
    /// The collection of the scenario's own objects (PodSets or Ats) in `ns`, as watched.
    fn owners(self, ns: &str) -> String {
        match self {
            Scenario::PodSet => format!("/apis/app.example.com/v1alpha1/namespaces/{ns}/podsets"),
            Scenario::At => {
                format!("/apis/cnat.programming-kubernetes.info/v1alpha1/namespaces/{ns}/ats")
            }
        }
    }

    fn args(self) -> &'static [&'static str] {
        match self {
            Scenario::PodSet => &["--controllers=podset"],
            Scenario::At => &["--controllers=at"],
        }
    }

    /// Runs the scenario step by step, each once the last has converged; its end state.
    async fn drive(self, ns: &TestNs, pods: &MaxPods) -> Result<Facts> {
        match self {
            Scenario::PodSet => podset_scenario(ns, pods).await,
            Scenario::At => at_scenario(ns, pods).await,
        }
    }
}

async fn podset_scenario(ns: &TestNs, pods: &MaxPods) -> Result<Facts> {
    match select(pin!(podset_steps(ns, pods)), pin!(run_pods(ns))).await {
        Either::Left((facts, _)) => facts,
        Either::Right(((), _)) => anyhow::bail!("the kubelet's pod watch ended"),
    }
}

/// Plays the kubelet: each new pod goes Running at once. Each pod then has two states
/// (Pending, Running) that a perturbed watch can show late or not at all; available
/// counts both.
async fn run_pods(ns: &TestNs) {
    let mut pods = pin!(
        watcher(ns.api::<Pod>(), watcher::Config::default())
            .default_backoff()
            .applied_objects()
    );
    while let Some(pod) = pods.next().await {
        let Ok(pod) = pod else { continue };
        if harness::phase(&pod) == "Pending" && pod.metadata.deletion_timestamp.is_none() {
            // A pod deleted meanwhile (a scale-down) cannot start: nothing to do.
            let _ = set_pod_phase(ns, &pod.name_any(), "Running", None).await;
        }
    }
}

async fn podset_steps(ns: &TestNs, pods: &MaxPods) -> Result<Facts> {
    let api = ns.api::<PodSet>();
    let created = api
        .create(&PostParams::default(), &podset("web", 3))
        .await?;
    let uid = created.uid().context("no uid")?;
    settled(ns, 3).await?;
    let most_at_3 = pods.snapshot().get(&uid).copied().unwrap_or(0);
    let replicas = |n: i32| Patch::Merge(json!({"spec": {"replicas": n}}));
    api.patch("web", &PatchParams::default(), &replicas(5))
        .await?;
    settled(ns, 5).await?;
    let most_at_5 = pods.snapshot().get(&uid).copied().unwrap_or(0);
    api.patch_scale("web", &PatchParams::default(), &replicas(1))
        .await?;
    let ps = settled(ns, 1).await?;

    let all = ns.api::<Pod>().list(&ListParams::default()).await?.items;
    let live = testenv::live_pods_by_owner(&all);
    let owned = live.get(&uid).cloned().unwrap_or_default();
    let status = ps.status.clone().unwrap_or_default();
    Ok(Facts::from([
        ("live pods of the PodSet", owned.len().to_string()),
        ("pods in the namespace", all.len().to_string()),
        (
            "status.availableReplicas",
            status.available_replicas.to_string(),
        ),
        ("status.podNames", names_are(&status.pod_names, &owned)),
        ("most pods at once at 3 replicas", most_at_3.to_string()),
        ("most pods at once at 5 replicas", most_at_5.to_string()),
        ("pods ever created", ever(pods, &uid)),
    ]))
}

/// Whether `names` are the PodSet's live pods, as a fact.
fn names_are(names: &[String], live: &[String]) -> String {
    if names == live {
        "its live pods".into()
    } else {
        format!("{names:?}, not its live pods {live:?}")
    }
}

fn ever(pods: &MaxPods, uid: &str) -> String {
    pods.ever().get(uid).copied().unwrap_or(0).to_string()
}

/// Waits until the PodSet `web` has exactly `n` live pods of its own, named in its status
/// for its current generation.
async fn settled(ns: &TestNs, n: usize) -> Result<PodSet> {
    let api = ns.api::<PodSet>();
    poll_some(CONVERGE, &format!("podset web settled at {n}"), || async {
        let ps = api.get("web").await?;
        let pods = ns.api::<Pod>().list(&ListParams::default()).await?.items;
        let live = testenv::live_pods_by_owner(&pods)
            .remove(&ps.uid().unwrap_or_default())
            .unwrap_or_default();
        let status = ps.status.clone().unwrap_or_default();
        let ok = ps.spec.replicas == n as i32
            && live.len() == n
            && status.pod_names == live
            && status.available_replicas == n as i32
            && status.observed_generation == ps.metadata.generation;
        Ok(ok.then_some(ps))
    })
    .await
}

async fn at_scenario(ns: &TestNs, pods: &MaxPods) -> Result<Facts> {
    let api = ns.api::<At>();
    // Scheduled in the past: due at once.
    let created = api
        .create(
            &PostParams::default(),
            &at("yay", "2019-04-12T10:12:00Z", "echo YAY"),
        )
        .await?;
    let uid = created.uid().context("no uid")?;
    let done = || async {
        let status = api.get("yay").await?.status.unwrap_or_default();
        Ok((status.phase == Some(AtPhase::Done)).then_some(status))
    };
    // The kubelet's part: once the pod is released from its scheduling gate, the command runs
    // and exits 0, reported Running then Succeeded back to back, as a kubelet does for a
    // short command: a thinned watch then has a state (Running) to drop whatever the load.
    // A gated pod found after a crash, before it was recorded, is deleted and made again (it
    // never ran).
    let released = |pod: &Pod| {
        pod.spec
            .as_ref()
            .is_some_and(|s| s.scheduling_gates.as_ref().is_none_or(Vec::is_empty))
    };
    let pod_or_verdict = poll_some(
        CONVERGE,
        "the At's pod released, or its verdict",
        || async {
            let pods = ns.pods_of(&uid).await?;
            if let Some(pod) = pods.into_iter().find(released) {
                return Ok(Some(Either::Left(pod)));
            }
            Ok(done().await?.map(Either::Right))
        },
    )
    .await?;
    let done = match pod_or_verdict {
        Either::Left(pod) => {
            set_pod_phase(ns, &pod.name_any(), "Running", None).await?;
            set_pod_phase(ns, &pod.name_any(), "Succeeded", Some(0)).await?;
            poll_some(CONVERGE, "at yay DONE", done).await?
        }
        Either::Right(done) => done,
    };

    let verdict = done
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_COMPLETED)
        .map(|c| format!("{} {}", c.status, c.reason));
    let all = ns.api::<Pod>().list(&ListParams::default()).await?.items;
    Ok(Facts::from([
        ("phase", format!("{:?}", done.phase)),
        ("succeeded", format!("{:?}", done.succeeded)),
        ("condition Completed", format!("{verdict:?}")),
        ("status.podName", format!("{:?}", done.pod_name)),
        ("pods in the namespace", all.len().to_string()),
        // Gated pods made and deleted unreleased (the operator killed between the create and
        // the record) never ran: released ones are what ran.
        ("pods ever released", ever_released(pods, &uid)),
    ]))
}

fn ever_released(pods: &MaxPods, uid: &str) -> String {
    pods.ever_released()
        .get(uid)
        .copied()
        .unwrap_or(0)
        .to_string()
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
fn judge(reference: &Facts, run: &Run) -> Option<String> {
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

fn podset_expected() -> Facts {
    Facts::from([
        ("live pods of the PodSet", "1".into()),
        ("pods in the namespace", "1".into()),
        ("status.availableReplicas", "1".into()),
        ("status.podNames", "its live pods".into()),
        ("most pods at once at 3 replicas", "3".into()),
        ("most pods at once at 5 replicas", "5".into()),
        ("pods ever created", "5".into()),
    ])
}

fn at_expected() -> Facts {
    Facts::from([
        ("phase", "Some(Done)".into()),
        ("succeeded", "Some(true)".into()),
        ("condition Completed", "Some(\"True Succeeded\")".into()),
        ("status.podName", "Some(\"yay-pod\")".into()),
        ("pods in the namespace", "1".into()),
        ("pods ever released", "1".into()),
    ])
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
        let verdict = judge(facts, &run);
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
    let faults = [
        Fault::PodWatch(Perturbation::Hold(Duration::from_secs(3))),
        Fault::PodWatch(Perturbation::LastOnly(Duration::from_secs(2))),
        Fault::OwnerWatch(Perturbation::Hold(Duration::from_secs(3))),
    ];
    let (reference, runs) = tokio::join!(
        reference(scenario, expected),
        join_all(faults.map(|f| async move { (f, run(scenario, f).await) }))
    );
    let reference = reference?;
    let facts = reference.facts.as_ref().expect("checked");
    let mut failures = Vec::new();
    for (f, result) in runs {
        let run = result.with_context(|| format!("{f:?}: setting up"))?;
        let verdict = judge(facts, &run);
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
