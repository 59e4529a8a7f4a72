//! Lateness of pods due at once, shared by the At operator and the CronJob baseline: when each
//! owner's (an At's, a CronJob's) first pod is first seen by a watch, after their due time.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use futures::StreamExt;
use jiff::{RoundMode, Timestamp, TimestampRound, Unit};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
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

/// Creates `objects`, 32 requests at a time.
pub async fn create_each<K>(api: &Api<K>, objects: Vec<K>) -> Result<()>
where
    K: Resource + Clone + Debug + Serialize + DeserializeOwned,
{
    let pp = PostParams::default();
    let results: Vec<_> = futures::stream::iter(objects)
        .map(|object| {
            let pp = &pp;
            async move { api.create(pp, &object).await }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    for result in results {
        result?;
    }
    Ok(())
}

/// Per owner: when its first pod was seen, and the names of all its pods.
type Seen = HashMap<String, (SystemTime, HashSet<String>)>;

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

    /// Waits (until 120 s after `due`) for a pod of each of `owners` owners; their lateness.
    pub async fn measure(self, owners: usize, due: Timestamp) -> Result<Sample> {
        let due_at = SystemTime::from(due);
        let ahead = due_at
            .duration_since(SystemTime::now())
            .ok()
            .context("creating the objects took past their due time; raise the lead time")?;
        let what = format!("a pod for each of {owners} objects");
        testenv::poll(ahead + Duration::from_secs(120), &what, || async {
            Ok(self.seen.lock().unwrap().len() >= owners)
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
            let mut seen = seen.lock().unwrap();
            let (_, names) = seen
                .entry(owner)
                .or_insert_with(|| (SystemTime::now(), HashSet::new()));
            names.insert(pod.name_any());
        }
    }
}

/// The lateness of each owner's first pod (a pod seen before its due time counts 0), its
/// quantiles, and the pods beyond one per owner (`max_pods`, checked by the invariants).
fn lateness_sample(seen: &Seen, due_at: SystemTime) -> Sample {
    let lateness: Vec<f64> = seen
        .values()
        .map(|(first, _)| {
            first
                .duration_since(due_at)
                .map_or(0.0, |d| d.as_secs_f64())
        })
        .collect();
    let pods: usize = seen.values().map(|(_, pods)| pods.len()).sum();
    let duplicates = pods - seen.len();
    let q = |q| quantile(&lateness, q);
    Sample {
        seconds: q(0.5),
        pods,
        max_pods: duplicates,
        note: format!(
            "lateness of {}: p50 {:.3}s p99 {:.3}s max {:.3}s; duplicate pods {duplicates}",
            lateness.len(),
            q(0.5),
            q(0.99),
            q(1.0)
        ),
        ..Sample::default()
    }
}
