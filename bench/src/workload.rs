//! The objects a benchmark creates and scales (PodSets, or the equivalent ReplicaSets), and
//! watches that tell when they converged and how many pods each ever had at once.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::apps::v1::ReplicaSet;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::ObjectList;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use podset_operator::api::{PodSet, PodSetSpec};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde::de::IgnoredAny;
use tokio::sync::watch;

/// How many API calls the benchmark client keeps in flight when it submits objects.
pub const SUBMIT_CONCURRENCY: usize = 32;

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

impl Kind {
    /// The kind's API, as untyped objects: the benchmark treats both kinds alike.
    fn api(self, client: &Client, ns: &str) -> Api<DynamicObject> {
        let resource = match self {
            Kind::PodSet => ApiResource::erase::<PodSet>(&()),
            Kind::ReplicaSet => ApiResource::erase::<ReplicaSet>(&()),
        };
        Api::namespaced_with(client.clone(), ns, &resource)
    }

    fn object(self, name: &str, replicas: i32) -> Result<DynamicObject> {
        let value = match self {
            Kind::PodSet => serde_json::to_value(PodSet::new(
                name,
                PodSetSpec {
                    replicas,
                    template: None,
                },
            ))?,
            Kind::ReplicaSet => serde_json::to_value(replica_set(name, replicas)?)?,
        };
        Ok(serde_json::from_value(value)?)
    }
}

/// Runs `call` for every name, `SUBMIT_CONCURRENCY` at a time.
async fn for_each<'a, F, Fut, T>(
    api: &Api<DynamicObject>,
    names: &'a [String],
    call: F,
) -> Result<()>
where
    F: Fn(Api<DynamicObject>, &'a str) -> Fut,
    Fut: Future<Output = kube::Result<T>>,
{
    stream::iter(names.iter().map(Ok::<_, anyhow::Error>))
        .try_for_each_concurrent(SUBMIT_CONCURRENCY, |name| {
            let call = call(api.clone(), name);
            async move { Ok(call.await.map(drop)?) }
        })
        .await
}

pub async fn create_all(
    client: &Client,
    ns: &str,
    kind: Kind,
    names: &[String],
    replicas: i32,
) -> Result<()> {
    let objects = names
        .iter()
        .map(|name| Ok((name.clone(), kind.object(name, replicas)?)))
        .collect::<Result<BTreeMap<_, _>>>()?;
    let objects = &objects;
    for_each(&kind.api(client, ns), names, |api, name| async move {
        api.create(&PostParams::default(), &objects[name]).await
    })
    .await
}

/// Writes `status` (a merge patch of the status subresource) to every named object of `kind`,
/// as its controller would have: a relist then reads converged objects.
pub async fn write_status_all(
    client: &Client,
    ns: &str,
    kind: Kind,
    names: &[String],
    status: impl Fn(&str) -> serde_json::Value,
) -> Result<()> {
    let status = &status;
    for_each(&kind.api(client, ns), names, |api, name| async move {
        let patch = Patch::Merge(serde_json::json!({ "status": status(name) }));
        api.patch_status(name, &PatchParams::default(), &patch)
            .await
    })
    .await
}

/// The list of `kind` in `ns` as the API server sends it, in pages of `limit`: each page's
/// text.
pub async fn list_pages(
    client: &Client,
    ns: &str,
    kind: Kind,
    limit: usize,
) -> Result<Vec<String>> {
    let api = kind.api(client, ns);
    let mut pages = Vec::new();
    let mut next = None::<String>;
    loop {
        let mut params = ListParams::default().limit(limit as u32);
        params.continue_token = next.take();
        let request = kube::core::Request::new(api.resource_url()).list(&params)?;
        let text = client.request_text(request).await?;
        // Only the continue token is read: the items are skipped, not built into a tree.
        let page: ObjectList<IgnoredAny> = serde_json::from_str(&text)?;
        next = page.metadata.continue_.filter(|c| !c.is_empty());
        pages.push(text);
        if next.is_none() {
            return Ok(pages);
        }
    }
}

/// Creates `objects`, `SUBMIT_CONCURRENCY` at a time.
pub async fn create_each<K>(api: &Api<K>, objects: Vec<K>) -> Result<()>
where
    K: Resource + Clone + std::fmt::Debug + Serialize + DeserializeOwned,
{
    let pp = &PostParams::default();
    stream::iter(objects.into_iter().map(Ok::<_, anyhow::Error>))
        .try_for_each_concurrent(SUBMIT_CONCURRENCY, |object| async move {
            Ok(api.create(pp, &object).await.map(drop)?)
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
    let patch = &Patch::Merge(serde_json::json!({"spec": {"replicas": replicas}}));
    for_each(&kind.api(client, ns), names, |api, name| async move {
        api.patch(name, &PatchParams::default(), patch).await
    })
    .await
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

pub fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}
