//! The cached pods, by UID and by the UID of their controlling owner.

use std::collections::HashMap;
use std::sync::Arc;

use crate::pod::CachedPod;
use crate::uid::Uid;

/// Only pods with a controlling owner are kept: no controller reads any other.
#[derive(Default)]
pub(super) struct Index {
    by_uid: HashMap<Uid, Arc<CachedPod>>,
    /// An owner has few pods (a PodSet at most 10 active, plus a few finished): a list is
    /// smaller than a map and as fast.
    by_owner: HashMap<Uid, Vec<Arc<CachedPod>>>,
}

impl Index {
    pub(super) fn get(&self, pod_uid: &Uid) -> Option<&Arc<CachedPod>> {
        self.by_uid.get(pod_uid)
    }

    pub(super) fn owned_by(&self, owner_uid: &Uid) -> &[Arc<CachedPod>] {
        self.by_owner.get(owner_uid).map_or(&[], Vec::as_slice)
    }

    pub(super) fn pods(&self) -> impl Iterator<Item = &Arc<CachedPod>> {
        self.by_uid.values()
    }

    /// Keeps `pod` (if it has an owner) in place of the pod with its UID; returns that one.
    pub(super) fn insert(&mut self, pod: CachedPod) -> Option<Arc<CachedPod>> {
        let previous = self.remove(&pod.uid);
        if let Some(owner) = pod.owner().map(|o| o.uid.clone()) {
            let pod = Arc::new(pod);
            self.by_owner.entry(owner).or_default().push(pod.clone());
            self.by_uid.insert(pod.uid.clone(), pod);
        }
        previous
    }

    pub(super) fn remove(&mut self, pod_uid: &Uid) -> Option<Arc<CachedPod>> {
        let pod = self.by_uid.remove(pod_uid)?;
        let owner = &pod.owner()?.uid;
        if let Some(pods) = self.by_owner.get_mut(owner) {
            pods.retain(|p| p.uid != *pod_uid);
            if pods.is_empty() {
                self.by_owner.remove(owner);
            }
        }
        Some(pod)
    }

    pub(super) fn len(&self) -> usize {
        self.by_uid.len()
    }

    /// Gives back what the maps grew to for pods since gone (a scale-down of thousands).
    pub(super) fn shrink(&mut self) {
        self.by_uid.shrink_to_fit();
        self.by_owner.shrink_to_fit();
        self.by_owner.values_mut().for_each(Vec::shrink_to_fit);
    }
}
