//! Lateness of pods due at once, shared by the At operator and the CronJob baseline: when each
//! owner's (an At's, a CronJob's) first pod is first seen by a watch, after their due time.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use futures::StreamExt;
use jiff::{RoundMode, Timestamp, TimestampRound, Unit};
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::task::JoinHandle;

use crate::NS;
use crate::report::Sample;
use crate::system::quantile;

/// The owner a pod counts for, or None for a pod of no interest.
pub type OwnerOf = fn(&Pod) -> Option<String>;

/// The due time: at least `lead` from now, rounded up to a whole `unit`.
pub fn due_after(lead: Duration, unit: Unit) -> Result<Timestamp> {
    let round = TimestampRound::new().smallest(unit).mode(RoundMode::Ceil);
    Ok(Timestamp::now().checked_add(lead)?.round(round)?)
}

/// Per owner: when its first pod was seen, when one was first seen runnable (no scheduling
/// gate: an At's pod is created gated and released once recorded), and all its pods' names.
#[derive(Default)]
struct Owned {
    created: Option<SystemTime>,
    runnable: Option<SystemTime>,
    pods: HashSet<String>,
}

type Seen = HashMap<String, Owned>;

/// A watch of the bench namespace's pods, started before their owners exist.
pub struct FirstPods {
    seen: Arc<Mutex<Seen>>,
    task: JoinHandle<()>,
}

impl FirstPods {
    pub fn start(client: &Client, owner_of: OwnerOf) -> Self {
        let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
        let seen = Arc::new(Mutex::new(Seen::new()));
        let task = tokio::spawn(record(pods, owner_of, seen.clone()));
        Self { seen, task }
    }

    /// Waits (until 120 s after `due`) for a runnable pod of each of `owners` owners; their
    /// lateness.
    pub async fn measure(self, owners: usize, due: Timestamp) -> Result<Sample> {
        let due_at = SystemTime::from(due);
        let ahead = due_at
            .duration_since(SystemTime::now())
            .ok()
            .context("creating the objects took past their due time; raise the lead time")?;
        let what = format!("a runnable pod for each of {owners} objects");
        testenv::poll(ahead + Duration::from_secs(120), &what, || async {
            let seen = self.seen.lock().unwrap();
            Ok(seen.values().filter(|o| o.runnable.is_some()).count() >= owners)
        })
        .await?;
        self.task.abort();
        Ok(lateness_sample(&self.seen.lock().unwrap(), due_at))
    }
}

async fn record(pods: Api<Pod>, owner_of: OwnerOf, seen: Arc<Mutex<Seen>>) {
    let mut events = std::pin::pin!(
        watcher(pods, watcher::Config::default())
            .default_backoff()
            .applied_objects()
    );
    while let Some(event) = events.next().await {
        let Ok(pod) = event else { continue };
        if let Some(owner) = owner_of(&pod) {
            let now = SystemTime::now();
            let gated = pod
                .spec
                .as_ref()
                .and_then(|s| s.scheduling_gates.as_ref())
                .is_some_and(|g| !g.is_empty());
            let mut seen = seen.lock().unwrap();
            let owned = seen.entry(owner).or_default();
            owned.created.get_or_insert(now);
            if !gated {
                owned.runnable.get_or_insert(now);
            }
            owned.pods.insert(pod.name_any());
        }
    }
}

/// The lateness of each owner's first pod (a pod seen before its due time counts 0), and of
/// its first runnable one; their quantiles, and the pods beyond one per owner (`max_pods`,
/// checked by the invariants).
fn lateness_sample(seen: &Seen, due_at: SystemTime) -> Sample {
    let late = |at: fn(&Owned) -> Option<SystemTime>| -> Vec<f64> {
        seen.values()
            .filter_map(at)
            .map(|t| t.duration_since(due_at).map_or(0.0, |d| d.as_secs_f64()))
            .collect()
    };
    let (created, runnable) = (late(|o| o.created), late(|o| o.runnable));
    let pods: usize = seen.values().map(|o| o.pods.len()).sum();
    let duplicates = pods - seen.len();
    let q = |v: &[f64]| {
        let q = |q| quantile(v, q);
        format!("p50 {:.3}s p99 {:.3}s max {:.3}s", q(0.5), q(0.99), q(1.0))
    };
    Sample {
        seconds: quantile(&created, 0.5),
        pods,
        max_pods: duplicates,
        note: format!(
            "lateness of {}: created {}; runnable {}; duplicate pods {duplicates}",
            created.len(),
            q(&created),
            q(&runnable)
        ),
        ..Sample::default()
    }
}
