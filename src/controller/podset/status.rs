//! The PodSet's status write: only when it changed, over the freshest version known, and,
//! as the ReplicaSet controller's `updateReplicaSetStatus` does, once more over a fresh read
//! when it meets a conflict.

use std::sync::Arc;
use tokio::time::Instant;

use kube::ResourceExt;
use kube::api::Patch;

use crate::api::{PodSet, PodSetStatus};
use crate::controller::context::{Context, publish, status_patch, status_patch_params};
use crate::controller::fresh::read;
use crate::controller::kept::kept;
use crate::error::{Error, Result};
use crate::plan::health;
use crate::plan::podset::{self as plan, Outcome};
use crate::pod::CachedPod;
use crate::status_writes::alike;

/// How a status patch ended.
enum Patched {
    /// It landed, or the PodSet shows it already: at this resourceVersion.
    Landed(String),
    /// The version it went over was not the PodSet's any more (409).
    Conflict,
    /// The PodSet is gone.
    Gone,
}

/// Writes the status only when it differs from what the PodSet shows, over the freshest
/// version known (the store's copy, or the one this instance's last write made): a write held
/// up on its way, or another writer's (a deposed leader's), meets a conflict instead of
/// overwriting a newer status.
pub(super) async fn write(
    ps: &PodSet,
    pods: &[Arc<CachedPod>],
    outcome: &Outcome,
    ctx: &Context,
) -> Result<()> {
    let (uid, seen) = (
        ps.uid().unwrap_or_default(),
        ps.resource_version().unwrap_or_default(),
    );
    // Compare with the freshest status known: ours, if the store has not shown it yet.
    let written = ctx
        .memory
        .written_over::<PodSetStatus>(&uid, &seen, Instant::now());
    let (current, over) = match &written {
        Some(w) => (Some(&w.status), w.version.as_str()),
        None => (ps.status.as_ref(), seen.as_str()),
    };
    let status = plan::status(ps, current, pods, outcome, ctx.clock.now());
    // One being deleted has no spec left to meet (its deletion may wait for good on a pod
    // stuck Terminating): it never counts as stuck (found by seed 200009).
    let converged =
        ps.metadata.deletion_timestamp.is_some() || status.available_replicas == ps.spec.replicas;
    ctx.metrics.unconverged.saw(&uid, converged, Instant::now());
    // Compared, and remembered for its watch event, as the store keeps it.
    let stored = kept(&status);
    if current.is_some_and(|c| kept(c) == stored) {
        return Ok(());
    }
    ctx.memory.sending(&uid, &stored);
    let mut patched = patch(ps, over, &status, ctx).await;
    // The newer version may be this very status: sent again by the client after a 504 whose
    // first send had landed, or by an earlier reconcile whose answer was lost. Its watch
    // event would wake nothing (it is this instance's own), and a reconcile holding the stale
    // copy would find nothing to write: the PodSet would show it until its next resync.
    if let Ok(Patched::Conflict) = patched {
        patched = again(ps, &status, ctx).await;
    }
    match patched {
        Ok(Patched::Landed(version)) => {
            let before = current.map(|s| s.conditions.as_slice()).unwrap_or_default();
            if let Some((type_, c)) = health::note(before, &status.conditions) {
                let note = c.message.clone();
                publish(ps, ctx, type_, &c.reason, "Run", note).await;
            }
            ctx.memory
                .wrote_status(&uid, over, &version, status, Instant::now());
            Ok(())
        }
        // Not known to have landed: a watch event that shows it must wake a reconcile.
        Ok(Patched::Conflict | Patched::Gone) => {
            ctx.memory.unsent(&uid);
            Ok(())
        }
        Err(e) => {
            ctx.memory.unsent(&uid);
            Err(e)
        }
    }
}

/// After a conflict: `status` sent once more over the PodSet read again, unless it shows it
/// already. Another conflict is another writer's, whose watch event wakes the next reconcile.
async fn again(ps: &PodSet, status: &PodSetStatus, ctx: &Context) -> Result<Patched> {
    let Some(now) = read(ps, ctx).await? else {
        return Ok(Patched::Gone);
    };
    let version = now.resource_version().unwrap_or_default();
    if alike(now.status.as_ref(), Some(status)) {
        return Ok(Patched::Landed(version));
    }
    patch(&now, &version, status, ctx).await
}

async fn patch(ps: &PodSet, over: &str, status: &PodSetStatus, ctx: &Context) -> Result<Patched> {
    let body = status_patch(over, status);
    let name = ps.name_any();
    let params = status_patch_params();
    match ctx
        .api::<PodSet>(ps)
        .patch_status(&name, &params, &Patch::Merge(&body))
        .await
    {
        Ok(patched) => Ok(Patched::Landed(
            patched.resource_version().unwrap_or_default(),
        )),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(Patched::Conflict),
        // Over our version, so the PodSet of this name is gone, not one made since (that
        // would be a 409). A 404 that names no object is the resource's: a restarted API
        // server that has not registered our CRD again yet.
        Err(kube::Error::Api(s))
            if s.code == 404 && s.details.as_ref().is_some_and(|d| d.name == name) =>
        {
            ctx.memory
                .found_gone(&ps.uid().unwrap_or_default(), Instant::now());
            Ok(Patched::Gone)
        }
        Err(e) => Err(Error::StatusWrite(e)),
    }
}
