//! A watch that records the most live pods each controlling owner ever had at once, and how
//! many it ever had, and ever released to run: the evidence that a controller never
//! over-created, whatever it did in between.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};

/// Counts pods that are neither terminating nor finished, per controller owner UID. The watch
/// rides out API server restarts; a pod deleted during such a gap still counts, so the
/// maximum can only be overstated, never hidden.
pub struct MaxPods {
    counts: Arc<Mutex<Counts>>,
    /// How many distinct owned pods the watch has seen, ever.
    seen: tokio::sync::watch::Receiver<usize>,
    task: tokio::task::JoinHandle<()>,
}

/// Per controller owner UID.
#[derive(Default)]
struct Counts {
    /// The most live pods at once.
    most: HashMap<String, usize>,
    /// Distinct pods ever seen.
    ever: HashMap<String, usize>,
    /// Distinct pods ever seen with no scheduling gate: free to run.
    released: HashMap<String, HashSet<String>>,
}

impl MaxPods {
    pub fn start(api: Api<Pod>) -> Self {
        let counts: Arc<Mutex<Counts>> = Arc::default();
        let recorded = counts.clone();
        let (seen_tx, seen) = tokio::sync::watch::channel(0);
        let task = tokio::spawn(async move {
            let mut live: HashMap<String, HashMap<String, bool>> = HashMap::new();
            let mut stream =
                std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
            while let Some(event) = stream.next().await {
                // A deleted pod's last object need not carry a deletionTimestamp (an
                // unscheduled pod is deleted at once): the event kind says it is gone.
                let (pod, deleted) = match event {
                    Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => (pod, false),
                    Ok(watcher::Event::Delete(pod)) => (pod, true),
                    _ => continue,
                };
                let Some(owner) = controller_uid(&pod) else {
                    continue;
                };
                let alive = !deleted && is_live(&pod);
                let pods = live.entry(owner.clone()).or_default();
                if pods.insert(pod.uid().unwrap_or_default(), alive).is_none() {
                    seen_tx.send_modify(|n| *n += 1);
                }
                let n = pods.values().filter(|a| **a).count();
                let ever = pods.len();
                let mut counts = recorded.lock().expect("max pods lock");
                counts.ever.insert(owner.clone(), ever);
                if !gated(&pod) {
                    let released = counts.released.entry(owner.clone()).or_default();
                    released.insert(pod.uid().unwrap_or_default());
                }
                let m = counts.most.entry(owner).or_insert(0);
                *m = (*m).max(n);
            }
        });
        Self { counts, seen, task }
    }

    /// Waits until the watch has seen `n` distinct owned pods: the trigger for a fault that
    /// must land mid scale-up. A watch event arrives milliseconds after the create, where a
    /// 100 ms poll let a fast operator finish the whole scale-up first.
    pub async fn wait_seen(&self, n: usize, timeout: std::time::Duration) -> anyhow::Result<()> {
        let mut seen = self.seen.clone();
        tokio::time::timeout(timeout, seen.wait_for(|seen| *seen >= n))
            .await
            .map_err(|_| crate::timed_out(timeout, &format!("{n} pods")))?
            .map_err(|_| anyhow::anyhow!("the pod watch ended before {n} pods were seen"))?;
        Ok(())
    }

    /// The most pods each owner UID has had at once, so far.
    pub fn snapshot(&self) -> HashMap<String, usize> {
        self.counts.lock().expect("max pods lock").most.clone()
    }

    /// How many distinct pods each owner UID has had, so far: a command run once has 1.
    pub fn ever(&self) -> HashMap<String, usize> {
        self.counts.lock().expect("max pods lock").ever.clone()
    }

    /// How many distinct pods each owner UID has had with no scheduling gate, so far: an At's
    /// command run once has 1, whatever gated pods were made and deleted unreleased.
    pub fn ever_released(&self) -> HashMap<String, usize> {
        let counts = self.counts.lock().expect("max pods lock");
        let released = counts.released.iter();
        released
            .map(|(owner, pods)| (owner.clone(), pods.len()))
            .collect()
    }

    /// The most pods any one owner has had at once, so far.
    pub fn overall(&self) -> usize {
        self.snapshot().into_values().max().unwrap_or(0)
    }
}

impl Drop for MaxPods {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The UID of the pod's controlling owner.
pub fn controller_uid(p: &Pod) -> Option<String> {
    p.owner_references()
        .iter()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.clone())
}

/// Whether a scheduling gate holds the pod back: no node may run it.
fn gated(p: &Pod) -> bool {
    p.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| !g.is_empty())
}

/// Whether a pod counts against its owner's spec: neither terminating nor finished.
fn is_live(p: &Pod) -> bool {
    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
    p.metadata.deletion_timestamp.is_none()
        && matches!(phase, None | Some("" | "Pending" | "Running"))
}

/// The names of each controlling owner's live pods, sorted, by owner UID.
pub fn live_pods_by_owner(pods: &[Pod]) -> HashMap<String, Vec<String>> {
    let mut live: HashMap<String, Vec<String>> = HashMap::new();
    for p in pods.iter().filter(|p| is_live(p)) {
        if let Some(owner) = controller_uid(p) {
            live.entry(owner).or_default().push(p.name_any());
        }
    }
    live.values_mut().for_each(|names| names.sort());
    live
}
