//! The At's status write: only when it changed, over the version read (a read that lagged
//! behind an earlier write must not overwrite it), telling its own landed write from
//! another's after a conflict; then an event per condition that changed.

use kube::api::Patch;
use kube::{Api, ResourceExt};
use tokio::time::Instant;
use tracing::{debug, info};

use super::plan;
use crate::api::{At, AtPhase, AtStatus};
use crate::controller::context::{
    Context, publish, read_by_name, status_patch, status_patch_params,
};
use crate::error::{Error, Result};
use crate::status_writes::alike;

/// Writes `status` if it differs from what `at` shows, then publishes the events of the
/// change (see [`write_quietly`]).
pub(super) async fn write_status(at: &At, status: &AtStatus, ctx: &Context) -> Result<Option<At>> {
    let written = write_quietly(at, status, ctx).await?;
    if written.is_some() {
        if let Some(verdict) = plan::outcome::verdict(at.status.as_ref(), status) {
            ctx.metrics.at_ended(verdict);
        }
        announce(at, status, ctx).await;
    }
    Ok(written)
}

/// Publishes an event per condition that changed from `at` to `status`, a status written.
pub(super) async fn announce(at: &At, status: &AtStatus, ctx: &Context) {
    let phase = phase_name(status.phase);
    for note in plan::status_events(at.status.as_ref(), status) {
        info!(phase, reason = %note.reason, note = %note.note, "status changed");
        publish(at, ctx, note.type_, &note.reason, note.action, note.note).await;
    }
}

/// Writes `status` if it differs from what `at` shows. The patch carries the At's
/// resourceVersion: a read that lagged behind an earlier write (a DONE, say) must not
/// overwrite it. Returns the At as written, or `None` on such a conflict.
pub(super) async fn write_quietly(at: &At, status: &AtStatus, ctx: &Context) -> Result<Option<At>> {
    // Compared as sent: the API server keeps times to the second, so a status just written
    // reads back unequal to the one computed, and alike.
    if alike(at.status.as_ref(), Some(status)) {
        return Ok(Some(at.clone()));
    }
    let api: Api<At> = ctx.api(at);
    let patch = status_patch(&at.resource_version().unwrap_or_default(), status);
    let written = match api
        .patch_status(
            &at.name_any(),
            &status_patch_params(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(written) => written,
        // Our own write may be what changed it: the client re-sends a patch whose answer was
        // a 503 or 504, and one that had landed then meets a conflict with itself.
        Err(kube::Error::Api(s)) if s.code == 409 => match ours_landed(&api, at, status).await? {
            Some(written) => written,
            None => {
                debug!("the At changed since it was read; retrying");
                return Ok(None);
            }
        },
        // Over our version, so this At is gone, not one made since under its name (a 409).
        Err(kube::Error::Api(s))
            if s.code == 404 && s.details.as_ref().is_some_and(|d| d.name == at.name_any()) =>
        {
            debug!("the At is gone");
            ctx.memory
                .found_gone(&at.uid().unwrap_or_default(), Instant::now());
            return Ok(None);
        }
        Err(e) => return Err(Error::StatusWrite(e)),
    };
    if let (Some(uid), Some(over), Some(version)) =
        (at.uid(), at.resource_version(), written.resource_version())
    {
        let kept = written.status.clone().unwrap_or_default();
        ctx.memory
            .wrote_status(&uid, &over, &version, kept, Instant::now());
    }
    Ok(Some(written))
}

/// The At as it is now if it shows exactly `status` over the spec `at` holds: a write of
/// ours that landed (its timestamps make it ours alone), not someone else's. A spec edited
/// since (a new generation) makes it another version than our write's: taken for ours, its
/// version would be put on `at`'s older spec, and a pod made from that spec recorded under
/// the new one (sim seed 19317134).
async fn ours_landed(api: &Api<At>, at: &At, status: &AtStatus) -> Result<Option<At>> {
    let now = read_by_name(api, at).await?;
    Ok(now.filter(|now| {
        now.metadata.generation == at.metadata.generation
            && alike(now.status.as_ref(), Some(status))
    }))
}

fn phase_name(phase: Option<AtPhase>) -> &'static str {
    match phase {
        None => "",
        Some(AtPhase::Pending) => "PENDING",
        Some(AtPhase::Running) => "RUNNING",
        Some(AtPhase::Done) => "DONE",
    }
}
