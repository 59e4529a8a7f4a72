//! The PodSet as the API server has it now, read before a decision the cache cannot be
//! trusted with.

use kube::{Api, ResourceExt};
use tokio::time::Instant;

use crate::api::PodSet;
use crate::controller::context::{Context, read_by_name};
use crate::error::Result;

/// Whether the PodSet is still there and not being deleted, read from the API server. If it
/// is not there, it is remembered gone. One being deleted may stay for a while (a foreground
/// deletion waits for the garbage collector to remove its pods; another controller's
/// finalizer holds it): pods made for it would only be removed again, each removal bringing
/// the next round while the cache has not shown the deletion.
pub(super) async fn exists(ps: &PodSet, ctx: &Context) -> Result<bool> {
    let now = read(ps, ctx).await?;
    Ok(now.is_some_and(|ps| ps.metadata.deletion_timestamp.is_none()))
}

/// The PodSet as the API server has it now (a list of its one name, a consistent read the
/// operator's `list` permission covers), or `None`, remembered gone, if it is not there.
pub(super) async fn read(ps: &PodSet, ctx: &Context) -> Result<Option<PodSet>> {
    let now = read_by_name(&podsets_api(ps, ctx), ps).await?;
    if now.is_none() {
        ctx.gone
            .found(&ps.uid().unwrap_or_default(), Instant::now());
    }
    Ok(now)
}

pub(super) fn podsets_api(ps: &PodSet, ctx: &Context) -> Api<PodSet> {
    Api::namespaced(ctx.client.clone(), &ps.namespace().unwrap_or_default())
}
