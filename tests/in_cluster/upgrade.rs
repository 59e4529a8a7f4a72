//! A rolling upgrade from the previous release loses nothing (issue 19, issue 59): what that
//! release had in its care, all written at v1alpha1 (PodSets converged, Ats DONE, an At
//! RUNNING, Ats falling due before, during and after the rollout) comes through: PodSets keep
//! their pods, DONE stays DONE, the running At ends DONE in its one pod, each due At runs
//! exactly once; leadership passes without a gap longer than the lease, and the operator never
//! has fewer Ready pods than its PodDisruptionBudget's `minAvailable`. Then every object reads
//! at both versions and the leader's migration trims both CRDs' storedVersions. The upgrade
//! itself is the caller's: `helm upgrade` or the new install.yaml, CRDs first, as
//! docs/versioning.md says.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use futures::{AsyncBufReadExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{ListParams, LogParams};
use kube::runtime::{WatchStreamExt, watcher};
use podset_operator::api::{At, AtPhase};
use tokio_util::sync::CancellationToken;

use crate::common::{TestNs, converged, poll};
use crate::install::{Install, LEASE_DURATION, pod_ready};
use crate::versions::{self, BETA};

/// Ats fall due every [`AT_SPACING`], from one spacing after the upgrade begins.
const ATS: u32 = 12;
const AT_SPACING: Duration = Duration::from_secs(5);
const PODSETS: usize = 3;
pub const REPLICAS: usize = 2;
/// The chart's and config/default's PodDisruptionBudget.
const MIN_AVAILABLE: usize = 1;

/// What was seen while the upgrade ran, sampled every [`SAMPLE`].
#[derive(Debug, Default)]
struct Seen {
    /// The UIDs of pods released to run (no scheduling gate), by the pods' `app` label (a
    /// PodSet's or an At's name). An At's gated pod deleted unreleased never ran.
    uids: BTreeMap<String, BTreeSet<String>>,
    /// The longest time the Lease named no live operator pod.
    longest_gap: Duration,
    gap_since: Option<Instant>,
    fewest_ready: Option<usize>,
    holders: Vec<String>,
    /// What each operator pod logged about the leader lease: why a gap was as long as it was.
    lease_lines: Vec<String>,
}

const SAMPLE: Duration = Duration::from_millis(200);

impl Seen {
    /// One sample: the Lease's holder, the Ready operator pods, whether the holder is one.
    fn note(&mut self, holder: String, ready: usize, led: bool) {
        self.fewest_ready = Some(self.fewest_ready.map_or(ready, |f| f.min(ready)));
        if self.holders.last() != Some(&holder) {
            self.holders.push(holder);
        }
        match (led, self.gap_since) {
            (true, Some(since)) => {
                self.longest_gap = self.longest_gap.max(since.elapsed());
                self.gap_since = None;
            }
            (false, None) => self.gap_since = Some(Instant::now()),
            _ => {}
        }
    }
}

/// What the previous release had in its care, kept through the upgrade: the namespace, its
/// PodSets' pods, and the pod of every At, all DONE.
pub struct Kept {
    pub ns: TestNs,
    pub podsets: BTreeSet<String>,
    pub pods: BTreeSet<String>,
    /// Each At's pod: every one is DONE.
    pub done: BTreeMap<String, Option<String>>,
}

/// Ats that ran before the upgrade, and the one running across it: its command waits for
/// [`GO`], which the test writes once the upgrade is over.
const RAN: [&str; 2] = ["ran-1", "ran-2"];
const RUNNING: &str = "running";
const GO: &str = "/tmp/go";
/// The leader's migration, from the rollout's end.
const MIGRATED_WITHIN: Duration = Duration::from_secs(30);

/// Runs `upgrade` against `install` while the previous release's objects are in its care;
/// checks that the upgrade lost nothing, and returns them with what `upgrade` returned.
pub async fn loses_nothing<T>(
    install: &Install,
    upgrade: impl Future<Output = Result<T>>,
) -> Result<(Kept, T)> {
    let ns = TestNs::new_in(install.cluster.clone(), "upgrade").await?;
    let podsets: BTreeSet<String> = (0..PODSETS).map(|i| format!("kept-{i}")).collect();
    let mut ats = BTreeMap::new();
    for name in &podsets {
        versions::create_podset(&ns, name, REPLICAS).await?;
    }
    let past = "2019-04-12T10:12:00Z";
    let waits = format!("until [ -e {GO} ]; do sleep 0.2; done; echo finished");
    for (name, command) in RAN
        .map(|n| (n, "echo ran".to_string()))
        .into_iter()
        .chain([(RUNNING, waits)])
    {
        versions::create_at(&ns, name, past, &command).await?;
        ats.insert(name.to_string(), command);
    }
    let mut before = BTreeSet::new();
    for name in &podsets {
        before.extend(versions::running_pods(&ns, name, REPLICAS).await?);
    }
    let mut ran = BTreeMap::new();
    for name in RAN {
        let done = versions::at_in(&ns, name, AtPhase::Done, Duration::from_secs(120)).await?;
        ran.insert(name, done.pod_name);
    }
    let running = versions::at_in(&ns, RUNNING, AtPhase::Running, Duration::from_secs(120))
        .await?
        .pod_name
        .context("a RUNNING At names no pod")?;

    // The previous release's pods run under this release's ServiceAccount: the audit, which
    // checks this release's requests against its RBAC, leaves theirs out.
    let previous: Vec<String> = install
        .live_pods()
        .await?
        .iter()
        .map(|p| p.name_any())
        .collect();
    install.cluster.another_release_pods(previous);
    let seen = Arc::new(Mutex::new(Seen::default()));
    let stop = CancellationToken::new();
    let watching = tokio::spawn(record_pods(ns.api::<Pod>(), seen.clone()));
    let sampling = tokio::spawn(sample(install.clone(), seen.clone(), stop.clone()));

    let began = jiff::Timestamp::now();
    for i in 1..=ATS {
        let name = format!("due-{i:02}");
        let when = began + jiff::SignedDuration::try_from(AT_SPACING * i)?;
        let schedule = when.round(jiff::Unit::Second)?.to_string();
        versions::create_at(&ns, &name, &schedule, "echo upgraded").await?;
        ats.insert(name, "echo upgraded".into());
    }
    let started = Instant::now();
    let upgraded = upgrade.await?;
    rolled_out(install).await?;
    let rollout = started.elapsed();
    let migrated = versions::stored_only_at(&ns.client, BETA, MIGRATED_WITHIN).await?;
    println!(
        "{}: storedVersions [v1beta1] on both CRDs {migrated:?} after the rollout, {:?} after the \
         upgrade began",
        install.deployment,
        rollout + migrated
    );
    let exec = ["-n", &ns.name, "exec", &running, "--", "touch", GO];
    crate::kubectl(&install.cluster, &exec).await?;

    let last_due = AT_SPACING * ATS;
    poll(
        last_due + Duration::from_secs(120),
        "every At DONE",
        || async {
            let list = ns.api::<At>().list(&ListParams::default()).await?;
            Ok(list.items.len() == ats.len()
                && list
                    .items
                    .iter()
                    .all(|a| a.status.as_ref().and_then(|s| s.phase) == Some(AtPhase::Done)))
        },
    )
    .await?;
    stop.cancel();
    sampling.await??;
    watching.abort();

    let seen = std::mem::take(&mut *seen.lock().unwrap());
    println!(
        "{}: rolled out in {rollout:?}; Lease holders {:?}, longest without a live holder {:?}; \
         fewest Ready operator pods {:?}",
        install.deployment, seen.holders, seen.longest_gap, seen.fewest_ready
    );
    let mut done = BTreeMap::new();
    for at in ns.api::<At>().list(&ListParams::default()).await? {
        let (name, status) = (at.name_any(), at.status.clone().unwrap_or_default());
        done.insert(name.clone(), status.pod_name.clone());
        ensure!(
            status.succeeded == Some(true),
            "{name} did not succeed: {status:?}"
        );
        let pods = seen.uids.get(&name).map_or(0, BTreeSet::len);
        ensure!(pods == 1, "{name} ran in {pods} pods");
        if let Some(pod) = ran.get(name.as_str()) {
            ensure!(
                status.pod_name == *pod,
                "{name}, DONE before the upgrade, now names pod {:?}, not {pod:?}",
                status.pod_name
            );
        }
    }
    let mut after = BTreeSet::new();
    for name in &podsets {
        after.extend(
            converged(&ns, name, REPLICAS)
                .await?
                .iter()
                .filter_map(|p| p.uid()),
        );
        let ever = seen.uids.get(name).cloned().unwrap_or_default();
        ensure!(
            ever.is_subset(&before),
            "{name} got new pods during the upgrade: {ever:?}"
        );
    }
    ensure!(
        after == before,
        "PodSet pods were replaced: {before:?} -> {after:?}"
    );
    // A rolling upgrade replaces every operator pod, the leader's too: a run in which the
    // Lease never changed hands did not test a handover.
    ensure!(
        seen.holders.first() != seen.holders.last(),
        "the Lease never changed hands ({:?}): the Deployment did not roll",
        seen.holders
    );
    ensure!(
        seen.longest_gap < LEASE_DURATION,
        "leaderless for {:?}, longer than the lease; the operator pods said of the lease:\n{}",
        seen.longest_gap,
        seen.lease_lines.join("\n")
    );
    ensure!(
        seen.fewest_ready.unwrap_or(0) >= MIN_AVAILABLE,
        "Ready operator pods fell to {:?}",
        seen.fewest_ready
    );
    versions::readable_at_both(&ns, &podsets, &ats).await?;
    let kept = Kept {
        ns,
        podsets,
        pods: after,
        done,
    };
    Ok((kept, upgraded))
}

/// Waits until the Deployment runs only pods of its newest template, all Ready.
pub async fn rolled_out(install: &Install) -> Result<()> {
    let deployments = install.api::<Deployment>();
    poll(
        Duration::from_secs(240),
        "the rollout to finish",
        || async {
            let d = deployments.get(&install.deployment).await?;
            let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
            let generation = d.metadata.generation;
            let s = d.status.unwrap_or_default();
            Ok(s.observed_generation == generation
                && s.updated_replicas == Some(want)
                && s.replicas == Some(want)
                && s.ready_replicas == Some(want))
        },
    )
    .await
}

/// Every UID of a pod released to run in the namespace, by its `app` label, as the watch
/// delivers them.
async fn record_pods(pods: kube::Api<Pod>, seen: Arc<Mutex<Seen>>) -> Result<()> {
    let stream = watcher(pods, watcher::Config::default()).applied_objects();
    futures::pin_mut!(stream);
    while let Some(pod) = stream.try_next().await? {
        let gated = pod.spec.as_ref().and_then(|s| s.scheduling_gates.as_ref());
        if gated.is_some_and(|g| !g.is_empty()) {
            continue;
        }
        if let (Some(app), Some(uid)) = (pod.labels().get("app").cloned(), pod.uid()) {
            seen.lock()
                .unwrap()
                .uids
                .entry(app)
                .or_default()
                .insert(uid);
        }
    }
    Ok(())
}

/// Samples the Lease's holder and the Ready operator pods until `stop`, and follows each
/// operator pod's log.
async fn sample(install: Install, seen: Arc<Mutex<Seen>>, stop: CancellationToken) -> Result<()> {
    let mut followed = BTreeMap::new();
    while !stop.is_cancelled() {
        let holder = install.holder().await?;
        let live = install.live_pods().await?;
        let ready: Vec<&Pod> = live.iter().filter(|p| pod_ready(p)).collect();
        for pod in &ready {
            followed.entry(pod.name_any()).or_insert_with_key(|name| {
                let follow = follow_lease_lines(install.clone(), name.clone(), seen.clone());
                tokio_util::task::AbortOnDropHandle::new(tokio::spawn(follow))
            });
        }
        let led = live.iter().any(|p| p.name_any() == holder);
        seen.lock().unwrap().note(holder, ready.len(), led);
        tokio::select! {
            _ = tokio::time::sleep(SAMPLE) => {}
            _ = stop.cancelled() => {}
        }
    }
    drop(followed);
    let mut s = seen.lock().unwrap();
    if let Some(since) = s.gap_since {
        s.longest_gap = s.longest_gap.max(since.elapsed());
    }
    Ok(())
}

/// Keeps the lines `pod` logs about the leader lease, until its log ends.
async fn follow_lease_lines(install: Install, pod: String, seen: Arc<Mutex<Seen>>) -> Result<()> {
    let params = LogParams {
        follow: true,
        ..LogParams::default()
    };
    let mut lines = install
        .api::<Pod>()
        .log_stream(&pod, &params)
        .await?
        .lines();
    while let Some(line) = lines.try_next().await? {
        if line.contains("lease") {
            seen.lock()
                .unwrap()
                .lease_lines
                .push(format!("{pod}: {line}"));
        }
    }
    Ok(())
}
