//! The objects a benchmark creates and scales (PodSets, or the equivalent ReplicaSets), and
//! watches that tell when they converged and how many pods each ever had at once.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use podset_operator::api::{PodSet, PodSetSpec};
use tokio::sync::watch;

/// How many API calls the benchmark client keeps in flight when it submits objects.
const SUBMIT_CONCURRENCY: usize = 32;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    PodSet,
    ReplicaSet,
}

fn replica_set(name: &str, replicas: i32) -> Result<ReplicaSet> {
    Ok(serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "busybox", "image": "busybox", "command": ["sleep", "3600"]}]}
            }
        }
    }))?)
}

/// A plain pod like the ones the controllers create, for the API floor.
pub fn floor_pod() -> Result<Pod> {
    Ok(serde_json::from_value(serde_json::json!({
        "metadata": {"generateName": "floor-"},
        "spec": {"containers": [{"name": "busybox", "image": "busybox", "command": ["sleep", "3600"]}]}
    }))?)
}

pub async fn create_all(
    client: &Client,
    ns: &str,
    kind: Kind,
    names: &[String],
    replicas: i32,
) -> Result<()> {
    let pp = PostParams::default();
    stream::iter(names.iter().map(Ok::<_, anyhow::Error>))
        .try_for_each_concurrent(SUBMIT_CONCURRENCY, |name| {
            let (client, pp) = (client.clone(), pp.clone());
            async move {
                match kind {
                    Kind::PodSet => {
                        let ps = PodSet::new(
                            name,
                            PodSetSpec {
                                replicas,
                                template: None,
                            },
                        );
                        Api::<PodSet>::namespaced(client, ns)
                            .create(&pp, &ps)
                            .await?;
                    }
                    Kind::ReplicaSet => {
                        Api::<ReplicaSet>::namespaced(client, ns)
                            .create(&pp, &replica_set(name, replicas)?)
                            .await?;
                    }
                }
                Ok(())
            }
        })
        .await
}

pub async fn scale_all(
    client: &Client,
    ns: &str,
    kind: Kind,
    names: &[String],
    replicas: i32,
) -> Result<()> {
    let patch = Patch::Merge(serde_json::json!({"spec": {"replicas": replicas}}));
    let pp = PatchParams::default();
    stream::iter(names.iter().map(Ok::<_, anyhow::Error>))
        .try_for_each_concurrent(SUBMIT_CONCURRENCY, |name| {
            let (client, pp, patch) = (client.clone(), pp.clone(), patch.clone());
            async move {
                match kind {
                    Kind::PodSet => drop(
                        Api::<PodSet>::namespaced(client, ns)
                            .patch(name, &pp, &patch)
                            .await?,
                    ),
                    Kind::ReplicaSet => drop(
                        Api::<ReplicaSet>::namespaced(client, ns)
                            .patch(name, &pp, &patch)
                            .await?,
                    ),
                }
                Ok(())
            }
        })
        .await
}

/// Creates `n` pods at high concurrency from one client: the floor any controller pays.
pub async fn create_pods(client: &Client, ns: &str, n: usize, concurrency: usize) -> Result<()> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod = floor_pod()?;
    let pp = PostParams::default();
    stream::iter(0..n)
        .map(|_| api.create(&pp, &pod))
        .buffer_unordered(concurrency)
        .try_for_each(|_| async { Ok(()) })
        .await?;
    Ok(())
}

/// Watches the objects of `kind` and counts how many report `replicas` for their current
/// generation: availableReplicas for a PodSet, status.replicas for a ReplicaSet (no node runs
/// the pods here, and both count Pending pods).
pub struct Convergence {
    rx: watch::Receiver<BTreeMap<String, (i32, bool)>>,
    task: tokio::task::JoinHandle<()>,
}

impl Convergence {
    pub fn start(client: &Client, ns: &str, kind: Kind) -> Self {
        let (tx, rx) = watch::channel(BTreeMap::new());
        let task = match kind {
            Kind::PodSet => tokio::spawn(track(
                Api::<PodSet>::namespaced(client.clone(), ns),
                tx,
                |ps: &PodSet| {
                    let s = ps.status.clone().unwrap_or_default();
                    (
                        s.available_replicas,
                        s.observed_generation == ps.metadata.generation,
                    )
                },
            )),
            Kind::ReplicaSet => tokio::spawn(track(
                Api::<ReplicaSet>::namespaced(client.clone(), ns),
                tx,
                |rs: &ReplicaSet| {
                    let s = rs.status.clone().unwrap_or_default();
                    (s.replicas, s.observed_generation == rs.metadata.generation)
                },
            )),
        };
        Self { rx, task }
    }

    /// Waits until `count` objects report `replicas` for their current spec.
    pub async fn wait(
        &mut self,
        count: usize,
        replicas: i32,
        timeout: Duration,
    ) -> Result<Duration> {
        let start = Instant::now();
        let done = |m: &BTreeMap<String, (i32, bool)>| {
            m.values()
                .filter(|(r, current)| *r == replicas && *current)
                .count()
                >= count
        };
        let waited = tokio::time::timeout(timeout, self.rx.wait_for(done))
            .await
            .map(|r| r.is_ok());
        match waited {
            Ok(true) => Ok(start.elapsed()),
            Ok(false) => bail!("the convergence watch ended"),
            Err(_) => {
                let ok = self
                    .rx
                    .borrow()
                    .values()
                    .filter(|(r, c)| *r == replicas && *c)
                    .count();
                bail!("{ok} of {count} objects at {replicas} replicas after {timeout:?}")
            }
        }
    }
}

impl Drop for Convergence {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn track<K, F>(api: Api<K>, tx: watch::Sender<BTreeMap<String, (i32, bool)>>, read: F)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    F: Fn(&K) -> (i32, bool),
{
    let mut events = std::pin::pin!(
        watcher(api, watcher::Config::default())
            .default_backoff()
            .applied_objects()
    );
    while let Some(obj) = events.next().await {
        if let Ok(obj) = obj {
            tx.send_modify(|m| {
                m.insert(obj.name_any(), read(&obj));
            });
        }
    }
}

/// Records the most non-terminating pods each owner ever had at once.
pub struct MaxPods {
    max: Arc<Mutex<HashMap<String, usize>>>,
    task: tokio::task::JoinHandle<()>,
}

impl MaxPods {
    pub fn start(client: &Client, ns: &str) -> Self {
        let api: Api<Pod> = Api::namespaced(client.clone(), ns);
        let max: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let seen = max.clone();
        let task = tokio::spawn(async move {
            let mut live: HashMap<String, HashMap<String, bool>> = HashMap::new();
            let mut events = std::pin::pin!(
                watcher(api, watcher::Config::default())
                    .default_backoff()
                    .touched_objects()
            );
            while let Some(pod) = events.next().await {
                let Ok(pod) = pod else { continue };
                let Some(owner) = pod
                    .owner_references()
                    .iter()
                    .find(|r| r.controller == Some(true))
                    .map(|r| r.uid.clone())
                else {
                    continue;
                };
                let phase = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.phase.clone())
                    .unwrap_or_default();
                let alive = pod.metadata.deletion_timestamp.is_none()
                    && matches!(phase.as_str(), "" | "Pending" | "Running");
                let pods = live.entry(owner.clone()).or_default();
                pods.insert(pod.uid().unwrap_or_default(), alive);
                let n = pods.values().filter(|a| **a).count();
                let mut max = seen.lock().unwrap();
                let m = max.entry(owner).or_insert(0);
                *m = (*m).max(n);
            }
        });
        Self { max, task }
    }

    /// The largest number of pods any one owner had at once.
    pub fn overall(&self) -> usize {
        self.max
            .lock()
            .unwrap()
            .values()
            .copied()
            .max()
            .unwrap_or(0)
    }
}

impl Drop for MaxPods {
    fn drop(&mut self) {
        self.task.abort();
    }
}
