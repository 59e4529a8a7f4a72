//! An instance's pod watch and what it fills, from before the instance acts until its
//! controllers stop: the pod cache, and the router that hands pod changes to the controllers.
//!
//! A cold instance starts watching when it is to act (it won the lease, or runs alone). A warm
//! standby watches while it waits for the lease, so that a new leader counts pods at once
//! instead of listing them all; it first checks its cache against a consistent list of the
//! pods' metadata ([`PodCache::caught_up`]): the watch may still be carrying its predecessor's
//! last creates. A standby writes nothing and routes nothing; its controllers, when it leads,
//! list their own objects (a small share of the bytes: the pods are the many) and look at each.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;
use tracing::{Instrument, info, warn};

use super::context::Context;
use super::routing::{managed_pods, watch_pods};
use super::{Exported, STARTUP_GRACE, Settings};
use crate::client;
use crate::health::Health;
use crate::uid::Uid;

/// Empties the pod cache when the watch stops: what it held is no longer watched, nor managed.
struct Emptied(Arc<crate::cache::PodCache>);

impl Drop for Emptied {
    fn drop(&mut self) {
        self.0.clear();
    }
}

/// The watch of one instance's pods. Dropped, it stops and empties the cache.
pub struct Watching {
    pub(super) client: kube::Client,
    pub(super) settings: Settings,
    pub(super) ctx: Arc<Context>,
    pub(super) health: Arc<Health>,
    /// Started before this instance was to act: check the cache before acting.
    warm: bool,
    pod_watch: AbortOnDropHandle<()>,
    _emptied: Emptied,
}

/// How long a warm standby that won gives its watch to show what a consistent list shows,
/// before it starts watching anew, as a cold one would: a healthy watch lags by milliseconds.
const CATCH_UP: Duration = Duration::from_secs(3);

/// Starts watching the operator's pods once the start-up grace has passed (why, below):
/// `warm` for a standby that watches before it leads.
pub fn watch(client: kube::Client, settings: Settings, exported: Exported, warm: bool) -> Watching {
    let Exported {
        metrics,
        pods,
        health,
    } = exported;
    let ctx = Arc::new(Context::new(
        client.clone(),
        pods,
        metrics,
        &settings.instance,
        settings.clock.clone(),
    ));
    ctx.pods.unready();
    // A predecessor killed mid-scale-up may still have creates in flight at the API server;
    // acting on a list made before they landed would create those pods again. So the first
    // pod list (a consistent read) is made once they had the grace to land: made at once,
    // it would count on the watch to show them in time, and a watch slow to connect does
    // not. A new leader gets the same separation from the lease's expiry.
    let pod_watch = spawn_pod_watch(&ctx, &health, &settings, STARTUP_GRACE);
    Watching {
        _emptied: Emptied(ctx.pods.clone()),
        pod_watch,
        client,
        settings,
        ctx,
        health,
        warm,
    }
}

/// The pod watch, from `after` on. Aborted when dropped (a leader stepping down): never left
/// behind.
fn spawn_pod_watch(
    ctx: &Arc<Context>,
    health: &Arc<Health>,
    settings: &Settings,
    after: Duration,
) -> AbortOnDropHandle<()> {
    let (ctx, health) = (ctx.clone(), health.clone());
    let scope = settings.scope.clone();
    let watch = async move {
        tokio::time::sleep(after).await;
        watch_pods(ctx, scope).await;
        health.set_dead();
    };
    AbortOnDropHandle::new(tokio::spawn(watch.in_current_span()))
}

impl Watching {
    /// Resolves once the pod cache can be acted on: its first full list applied and, for a
    /// warm standby, everything a consistent read made now shows. `false` if `shutdown` came
    /// first.
    pub(super) async fn synced(&mut self, shutdown: &CancellationToken) -> bool {
        let warm = self.warm;
        let synced = async {
            // Reconciling before the first full pod list would see no pods and create them all again.
            self.ctx.pods.wait_ready().await;
            if warm && !self.caught_up().await {
                info!(within = ?CATCH_UP, "the pod watch did not show what a list of the pods shows; watching anew");
                self.ctx.pods.unready();
                let settings = &self.settings;
                self.pod_watch = spawn_pod_watch(&self.ctx, &self.health, settings, Duration::ZERO);
                self.ctx.pods.wait_ready().await;
            }
        };
        tokio::select! {
            biased;
            _ = synced => {
                info!(pods = self.ctx.pods.len(), warm, "pod cache synced");
                true
            }
            _ = shutdown.cancelled() => false,
        }
    }

    /// Whether the watch shows, within [`CATCH_UP`], what a consistent list of the pods'
    /// metadata shows now.
    async fn caught_up(&self) -> bool {
        let mut lists = Vec::new();
        for api in self.settings.scope.apis::<Pod>(&self.client) {
            lists.push(owned_pods(&api).await);
        }
        // The cache's latest version is the latest any namespace's watch showed: with
        // several, one may lag another, so only the pods themselves tell it caught up.
        let version = match lists.as_slice() {
            [(_, version)] => version.clone(),
            _ => String::new(),
        };
        let uids: Vec<Uid> = lists.into_iter().flat_map(|(uids, _)| uids).collect();
        let caught_up = self.ctx.pods.caught_up(&version, &uids);
        tokio::time::timeout(CATCH_UP, caught_up).await.is_ok()
    }
}

/// The UIDs of the pods through `api` that name a controlling owner (the pods the cache
/// keeps), from one consistent list of their metadata, and the version it was made at.
/// Read a page at a time, keeping only the UIDs: at 100,000 pods one response
/// would be hundreds of megabytes, past the memory a replica is given. Tried until it answers:
/// a page that fails (its continue token expired, 410) starts the list again.
async fn owned_pods(api: &kube::Api<Pod>) -> (Vec<Uid>, String) {
    let mut retry = Duration::from_millis(100);
    loop {
        match owned_pods_once(api).await {
            Ok(listed) => return listed,
            Err(e) => {
                warn!(error = %e, ?retry, "could not list the pods to check the cache; retrying");
                tokio::time::sleep(retry).await;
                retry = (retry * 2).min(Duration::from_secs(5));
            }
        }
    }
}

async fn owned_pods_once(api: &kube::Api<Pod>) -> kube::Result<(Vec<Uid>, String)> {
    let params = ListParams::default().labels(&managed_pods());
    let mut uids = Vec::new();
    let version = client::list_metadata_paged(api, &params, |page| {
        let owned = page.iter().filter(|p| p.controller.is_some());
        uids.extend(owned.map(|p| Uid::from(p.uid.as_str())));
    });
    let version = version.await?;
    Ok((uids, version))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::fixtures::{Answer, Sent, scripted_context};
    use serde_json::{Value, json};

    fn pod(uid: &str, owned: bool) -> Value {
        let owner = json!([{"apiVersion": "app.example.com/v1beta1", "kind": "PodSet",
            "name": "web", "uid": "web-uid", "controller": true}]);
        let mut meta = json!({"name": format!("p-{uid}"), "namespace": "ns", "uid": uid});
        if owned {
            meta["ownerReferences"] = owner;
        }
        json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": meta})
    }

    fn page(items: Vec<Value>, next: &str) -> Answer {
        Answer::Reply(
            200,
            json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
                "metadata": {"resourceVersion": "7", "continue": next}, "items": items}),
        )
    }

    /// The check's list goes a page at a time, each named by the last one's continue token,
    /// and keeps the UIDs of owned pods; a page refused (its token expired) starts it again.
    #[tokio::test(start_paused = true)]
    async fn the_check_lists_the_pods_a_page_at_a_time() {
        let (ctx, log) = scripted_context(|sent: &Sent, before: &[Sent]| {
            match sent.path.contains("continue=t1") {
                false => page(vec![pod("a", true), pod("x", false)], "t1"),
                // The first second page meets an expired token.
                true if before.len() == 1 => Answer::status(410, "Expired"),
                true => page(vec![pod("b", true)], ""),
            }
        });
        let api = kube::Api::<Pod>::namespaced(ctx.client.clone(), "ns");
        let (uids, version) = owned_pods(&api).await;
        assert_eq!(uids, [Uid::from("a"), Uid::from("b")]);
        assert_eq!(version, "7");
        let paths: Vec<String> = log.lock().iter().map(|s| s.path.clone()).collect();
        assert_eq!(paths.len(), 4, "{paths:?}");
        assert!(
            paths
                .iter()
                .all(|p| p.contains(&format!("limit={}", client::PAGE)))
        );
        assert!(!paths[2].contains("continue"), "begun again: {paths:?}");
    }
}
