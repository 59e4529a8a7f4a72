//! Pods that vanished from the operator's watch while active: deleted at once, or edited out
//! of it (their `app.kubernetes.io/managed-by` label), seen go or found when a term begins
//! ([`sweep`]). Each is looked up by its owner's next reconcile and, if it left the watch
//! still naming its owner, released ([`plan::release`]).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use tracing::{info, warn};

use super::context::{Context, publish};
use super::pods::{self, Written};
use crate::client;
use crate::error::{Error, Result};
use crate::plan;
use crate::plan::release::Stray;
use crate::scope::Scope;
use crate::uid::Uid;

/// A pod that vanished: its name and UID.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Vanished {
    pub(super) name: String,
    pub(super) uid: Uid,
}

/// Finds the PodSets' pods that left the watch while no instance of this one watched (a
/// restart, a failover): one list, when a term begins, of the pods that still carry a
/// PodSet pod's `version` label but not the operator's (the ReplicaSet controller, which
/// watches every pod, sees them anyway). A pod whose `version` label was edited too is not
/// found. A failed list is tried again, as the caches' first lists are, until `shutdown`:
/// a controller started before it would count a stray as gone and replace it.
pub async fn sweep(
    client: &kube::Client,
    scope: &Scope,
    ctx: &Context,
    shutdown: &tokio_util::sync::CancellationToken,
) {
    let mut wait = Duration::from_millis(500);
    loop {
        match list_strays(client, scope, ctx).await {
            Ok(()) => return,
            Err(e) => {
                warn!(error = %e, ?wait, "could not look for pods that left the operator's watch; trying again")
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(crate::jitter::jittered(wait)) => {}
        }
        wait = (wait * 2).min(Duration::from_secs(30));
    }
}

async fn list_strays(client: &kube::Client, scope: &Scope, ctx: &Context) -> kube::Result<()> {
    for api in scope.apis::<Pod>(client) {
        list_strays_in(&api, ctx).await?;
    }
    Ok(())
}

async fn list_strays_in(api: &Api<Pod>, ctx: &Context) -> kube::Result<()> {
    let selector = format!(
        "version={},{}!={}",
        plan::podset::POD_VERSION,
        crate::api::MANAGED_BY_LABEL,
        crate::api::MANAGED_BY_VALUE
    );
    let params = ListParams::default().labels(&selector);
    let listed = client::list_metadata_paged(api, &params, |page| {
        for pod in &page {
            if let Some(owner) = &pod.controller
                && owner.kind == "PodSet"
                && !pod.deleting
            {
                let owner_uid = Uid::from(owner.uid.as_str());
                ctx.memory
                    .suspect(&owner_uid, &pod.name, &Uid::from(pod.uid.as_str()));
            }
        }
    });
    listed.await.map(drop)
}

/// `pod`, out of the watch, was handed to another PodSet since it vanished (its controller
/// reference changed): the suspicion goes on to that PodSet, whose reconcile it asks for, as
/// no watch event of the pod ever will (sim seeds 1031835, 1080717: counted by neither).
fn hand_on(pod: &Pod, vanished: &Vanished, owner_uid: &str, ctx: &Context) {
    let Some(now) = crate::pod::controller_of(&pod.metadata) else {
        return;
    };
    if now.kind != "PodSet" || now.uid == owner_uid || !plan::release::out_of_watch(pod) {
        return;
    }
    ctx.memory
        .suspect(&Uid::from(now.uid.as_str()), &vanished.name, &vanished.uid);
    let namespace = pod.namespace().unwrap_or_default();
    ctx.router.wake("PodSet", &namespace, &now.name);
}

/// Looks up the pods of `owner` that vanished from the watch, and releases each that left it
/// still naming `owner` as its controller. Those not looked up for a failure are kept for the
/// next reconcile, which the error brings.
pub async fn release<K: Resource<DynamicType = ()>>(owner: &K, ctx: &Context) -> Result<()> {
    let uid = owner.uid().unwrap_or_default();
    let mut vanished = ctx.memory.take_strays(&uid);
    if vanished.is_empty() {
        return Ok(());
    }
    let api = ctx.api::<Pod>(owner);
    while let Some(pod) = vanished.pop() {
        if let Err(e) = release_one(&api, &pod, owner, ctx).await {
            vanished.push(pod);
            ctx.memory.keep_strays(&uid, vanished);
            return Err(Error::PodApi(e));
        }
    }
    Ok(())
}

/// How often a pod that changed between its read and its release is read again before it
/// waits for the next reconcile.
const RELEASE_READS: usize = 3;

async fn release_one<K: Resource<DynamicType = ()>>(
    api: &Api<Pod>,
    vanished: &Vanished,
    owner: &K,
    ctx: &Context,
) -> kube::Result<()> {
    let owner_uid = owner.uid().unwrap_or_default();
    let name = &vanished.name;
    let mut reads = 0;
    let stray = loop {
        reads += 1;
        let Some(pod) = api.get_opt(name).await? else {
            return Ok(());
        };
        if pod.uid().is_none_or(|u| vanished.uid != *u.as_str()) {
            return Ok(());
        }
        let Some(stray) = plan::release::stray(&pod, &owner_uid) else {
            hand_on(&pod, vanished, &owner_uid, ctx);
            return Ok(());
        };
        let sent = match &stray {
            Stray::Release(patch) => pods::patch_tested(api, name, patch.clone()).await,
            Stray::Delete => pods::delete(api, name, &vanished.uid).await,
        };
        match sent {
            Written::Sent => break stray,
            Written::Gone => return Ok(()),
            // Changed since it was read: read again, for it may have been handed to another
            // PodSet, whose it now is to release (sim seed 3030877: dropped here, it ran on
            // under that PodSet, counted by neither).
            Written::Changed(_) if reads < RELEASE_READS => {}
            Written::Changed(e) | Written::Refused(e) | Written::Unknown(e) => return Err(e),
        }
    };
    let label = format!(
        "{}={}",
        crate::api::MANAGED_BY_LABEL,
        crate::api::MANAGED_BY_VALUE
    );
    let (type_, reason, action, note) = match stray {
        Stray::Release(_) => {
            info!(
                pod = name,
                "released a pod whose labels took it out of the operator's watch"
            );
            let note = format!(
                "released pod {name}: its label {label} was changed, so it is no longer \
                 counted; it runs on without an owner"
            );
            (EventType::Normal, "PodReleased", "Release", note)
        }
        Stray::Delete => {
            warn!(
                pod = name,
                "deleted a pod admission had hidden from the operator's watch"
            );
            let note = format!(
                "deleted pod {name}: admission stripped it of its label {label} as it was \
                 made, and it was left running; exclude pods labelled {label} from the \
                 mutating webhook or policy"
            );
            (EventType::Warning, "HiddenPodDeleted", "Delete", note)
        }
    };
    publish(owner, ctx, type_, reason, action, note).await;
    Ok(())
}
