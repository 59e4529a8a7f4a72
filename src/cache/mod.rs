//! The operator's one pod cache, fed by one pod watch shared by both controllers.
//!
//! It keeps only what the controllers read (a few hundred bytes a pod instead of the full
//! object), indexed by the UID of the controlling owner, so a reconcile looks at its own
//! pods without scanning every pod. Applying a watch event returns which owners it
//! touched, so the caller can observe expectations and route the owner to its controller.

mod caught_up;
mod index;

use crate::pod::{CachedPod, Owner, intern};

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use compact_str::CompactString;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::Event;
use tokio::sync::{Notify, watch};

use crate::uid::Uid;
use index::Index;

/// Pods removed between two purges of names no pod holds.
const PURGE_EVERY: usize = 4096;

/// How a watch event changed one owner's pods.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// A pod the cache did not have before.
    Added,
    /// A known pod changed (phase, readiness, ...).
    Updated,
    /// A pod is terminating, or gone from the cache.
    Removed,
    /// An active pod gone from the cache without terminating first: deleted at once (not
    /// yet scheduled), or its labels edited out of the operator's watch (see
    /// `plan::release`).
    Vanished,
}

/// One owner whose pods a watch event changed.
#[derive(Clone, Debug, PartialEq)]
pub struct PodChange {
    pub owner: Owner,
    pub namespace: Arc<str>,
    pub pod_uid: Uid,
    pub pod_name: CompactString,
    pub change: Change,
}

/// The pod cache. `apply` takes the pod watcher's events; `owned_by` serves reconciles.
pub struct PodCache {
    index: parking_lot::RwLock<Index>,
    relist: parking_lot::Mutex<Option<Index>>,
    ready: watch::Sender<bool>,
    removed: AtomicUsize,
    /// The highest `resourceVersion` an event carried, when numeric (as the API server's are).
    version: AtomicU64,
    /// The highest of the relist under way.
    relist_version: AtomicU64,
    /// Woken after every event applied.
    applied: Notify,
}

impl std::fmt::Debug for PodCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodCache")
            .field("pods", &self.len())
            .finish()
    }
}

impl Default for PodCache {
    fn default() -> Self {
        Self {
            index: parking_lot::RwLock::default(),
            relist: parking_lot::Mutex::default(),
            ready: watch::channel(false).0,
            removed: AtomicUsize::new(0),
            version: AtomicU64::new(0),
            relist_version: AtomicU64::new(0),
            applied: Notify::new(),
        }
    }
}

impl PodCache {
    /// The pods in `namespace` whose controlling owner has this UID. An ownerReference
    /// cannot cross namespaces (the garbage collector deletes such pods), but anyone may
    /// write one: a pod elsewhere that names the owner is none of its own.
    pub fn owned_by(&self, namespace: &str, owner_uid: &str) -> Vec<Arc<CachedPod>> {
        let index = self.index.read();
        let pods = index.owned_by(&Uid::from(owner_uid)).iter();
        pods.filter(|p| **p.namespace() == *namespace)
            .cloned()
            .collect()
    }

    pub fn len(&self) -> usize {
        self.index.read().len()
    }

    /// How many pods each owner kind has in each state (for metrics).
    pub fn counts(&self) -> std::collections::BTreeMap<(String, &'static str), usize> {
        let index = self.index.read();
        let mut counts = std::collections::BTreeMap::new();
        for pod in index.pods() {
            let kind = pod.owner().map(|o| o.kind.to_string()).unwrap_or_default();
            *counts.entry((kind, pod.state())).or_insert(0) += 1;
        }
        counts
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The term that filled the cache is over: a standby manages no pods, and counts none.
    pub fn clear(&self) {
        self.unready();
        *self.relist.lock() = None;
        let old = std::mem::take(&mut *self.index.write());
        drop(old);
        intern::purge();
        crate::memory::release_soon();
    }

    /// A new watch starts (a new leadership term): what the cache holds may be stale until
    /// that watch's first full list, and [`Self::wait_ready`] waits for it again.
    pub fn unready(&self) {
        self.ready.send_replace(false);
    }

    /// Resolves once the first full list has been applied.
    pub async fn wait_ready(&self) {
        let mut rx = self.ready.subscribe();
        let _ = rx.wait_for(|ready| *ready).await;
    }

    pub fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    /// Applies one watch event and returns the owners whose pods it changed.
    pub fn apply(&self, event: Event<Pod>) -> Vec<PodChange> {
        let version = |pod: &Pod| {
            let version = pod.metadata.resource_version.as_deref();
            version.and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
        };
        // A relist's versions count once it replaced the index.
        let (seen, listed) = match &event {
            Event::Apply(pod) | Event::Delete(pod) => (version(pod), 0),
            Event::InitApply(pod) => (0, version(pod)),
            Event::Init => {
                self.relist_version.store(0, Ordering::Release);
                (0, 0)
            }
            Event::InitDone => (self.relist_version.swap(0, Ordering::AcqRel), 0),
        };
        self.relist_version.fetch_max(listed, Ordering::AcqRel);
        let changes = self.applied_event(event);
        self.version.fetch_max(seen, Ordering::AcqRel);
        self.applied.notify_waiters();
        changes
    }

    fn applied_event(&self, event: Event<Pod>) -> Vec<PodChange> {
        match event {
            Event::Init => {
                *self.relist.lock() = Some(Index::default());
                Vec::new()
            }
            Event::InitApply(pod) => {
                if let Some(buffer) = self.relist.lock().as_mut() {
                    buffer.insert(CachedPod::from_pod(&pod));
                }
                Vec::new()
            }
            Event::InitDone => {
                let Some(fresh) = self.relist.lock().take() else {
                    return Vec::new();
                };
                let mut index = self.index.write();
                let old = std::mem::replace(&mut *index, fresh);
                drop(index);
                let touched = diff(&old, &self.index.read());
                drop(old);
                intern::purge();
                crate::memory::release_soon();
                self.ready.send_replace(true);
                touched
            }
            Event::Apply(pod) => {
                let new = CachedPod::from_pod(&pod);
                let uid = new.uid.clone();
                let mut index = self.index.write();
                let previous = index.insert(new);
                let current = index.get(&uid).cloned();
                drop(index);
                changes(previous.as_deref(), current.as_deref())
            }
            Event::Delete(pod) => {
                let uid = Uid::from(pod.metadata.uid.as_deref().unwrap_or_default());
                let previous = self.index.write().remove(&uid);
                if previous.is_some() {
                    self.removed_one();
                }
                changes(previous.as_deref(), None)
            }
        }
    }
}

impl PodCache {
    /// Every [`PURGE_EVERY`] removals, drops the names no pod holds and the maps' room for
    /// pods since gone.
    fn removed_one(&self) {
        if self.removed.fetch_add(1, Ordering::Relaxed) % PURGE_EVERY == PURGE_EVERY - 1 {
            self.index.write().shrink();
            intern::purge();
        }
    }
}

/// What changed for the owners of one pod, from its previous to its current cached state.
fn changes(previous: Option<&CachedPod>, current: Option<&CachedPod>) -> Vec<PodChange> {
    let touched = |pod: &CachedPod, change: Change| {
        pod.owner().cloned().map(|owner| PodChange {
            owner,
            namespace: pod.namespace().clone(),
            pod_uid: pod.uid.clone(),
            pod_name: pod.name.clone(),
            change,
        })
    };
    let mut out = Vec::new();
    match (previous, current) {
        (None, Some(now)) => out.extend(touched(
            now,
            if now.terminating {
                Change::Removed
            } else {
                Change::Added
            },
        )),
        (Some(before), None) if before.is_active() => {
            out.extend(touched(before, Change::Vanished));
        }
        (Some(before), None) => out.extend(touched(before, Change::Removed)),
        (Some(before), Some(now)) if before.home != now.home => {
            out.extend(touched(before, Change::Removed));
            out.extend(touched(now, Change::Added));
        }
        (Some(before), Some(now)) if before != now => {
            let change = if now.terminating && !before.terminating {
                Change::Removed
            } else {
                Change::Updated
            };
            out.extend(touched(now, change));
        }
        _ => {}
    }
    out
}

/// Every owner change between two complete snapshots (after a relist).
fn diff(old: &Index, new: &Index) -> Vec<PodChange> {
    let mut out = Vec::new();
    for pod in new.pods() {
        out.extend(changes(old.get(&pod.uid).map(Arc::as_ref), Some(pod)));
    }
    for pod in old.pods().filter(|p| new.get(&p.uid).is_none()) {
        out.extend(changes(Some(pod), None));
    }
    out
}

#[cfg(test)]
mod tests;
