//! Whether the cache shows what a consistent read of the pods showed (a warm standby that won
//! the lease checks before it acts, see `controller::watching`).

use std::sync::atomic::Ordering;

use super::PodCache;
use crate::uid::Uid;

impl PodCache {
    /// Resolves once the cache reflects a consistent list made at `version` that held the
    /// pods `uids`: it holds them all, or its watch has shown a later version (a listed pod
    /// it lacks was deleted since). A new leader whose watch ran while it stood by waits for
    /// this before it counts pods: its predecessor's last creates may still be on their way.
    pub async fn caught_up(&self, version: &str, uids: &[Uid]) {
        let version = version.parse::<u64>().ok();
        let past = || version.is_some_and(|v| self.version.load(Ordering::Acquire) >= v);
        crate::notify::until(&self.applied, || past() || self.holds_all(uids)).await;
    }

    fn holds_all(&self, uids: &[Uid]) -> bool {
        let index = self.index.read();
        uids.iter().all(|uid| index.get(uid).is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::runtime::watcher::Event;
    use std::time::Duration;

    fn pod(uid: &str, version: u64) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some(format!("pod-{uid}"));
        pod.metadata.namespace = Some("ns".into());
        pod.metadata.uid = Some(uid.into());
        pod.metadata.resource_version = Some(version.to_string());
        pod.metadata.owner_references = Some(vec![OwnerReference {
            kind: "PodSet".into(),
            name: "web".into(),
            uid: "web-uid".into(),
            controller: Some(true),
            ..Default::default()
        }]);
        pod
    }

    fn uids(uids: &[&str]) -> Vec<Uid> {
        uids.iter().map(|u| Uid::from(*u)).collect()
    }

    async fn resolves(cache: &PodCache, version: &str, listed: &[&str]) -> bool {
        let listed = uids(listed);
        let waiting = cache.caught_up(version, &listed);
        tokio::time::timeout(Duration::from_millis(50), waiting)
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn caught_up_once_it_holds_every_listed_pod() {
        let cache = PodCache::default();
        cache.apply(Event::Apply(pod("a", 5)));
        assert!(resolves(&cache, "7", &["a"]).await);
        assert!(!resolves(&cache, "7", &["a", "b"]).await, "b not shown yet");
        cache.apply(Event::Apply(pod("b", 7)));
        assert!(resolves(&cache, "7", &["a", "b"]).await);
    }

    #[tokio::test]
    async fn caught_up_once_the_watch_passed_the_lists_version() {
        let cache = PodCache::default();
        cache.apply(Event::Apply(pod("a", 5)));
        // b was listed at 7, then deleted at 9: the cache never holds it.
        assert!(!resolves(&cache, "7", &["a", "b"]).await);
        cache.apply(Event::Delete(pod("a", 9)));
        assert!(resolves(&cache, "7", &["a", "b"]).await);
    }

    #[tokio::test]
    async fn a_relist_counts_once_it_replaced_the_cache() {
        let cache = PodCache::default();
        cache.apply(Event::Init);
        cache.apply(Event::InitApply(pod("a", 8)));
        assert!(!resolves(&cache, "7", &["b"]).await, "a relist under way");
        cache.apply(Event::InitDone);
        assert!(resolves(&cache, "7", &["b"]).await);
    }

    #[tokio::test]
    async fn a_waiter_wakes_when_the_pod_comes() {
        let cache = std::sync::Arc::new(PodCache::default());
        let waiter = {
            let cache = cache.clone();
            tokio::spawn(async move { cache.caught_up("3", &uids(&["a"])).await })
        };
        tokio::task::yield_now().await;
        cache.apply(Event::Apply(pod("a", 2)));
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .expect("no panic");
    }
}
