//! The PodSet as the API server has it now, read before a decision the cache cannot be
//! trusted with.

use kube::api::ListParams;
use kube::{Api, ResourceExt};
use tokio::time::Instant;

use crate::api::PodSet;
use crate::controller::context::Context;
use crate::error::{Error, Result};

/// Whether the PodSet is still there, read from the API server. If not, it is remembered
/// gone.
pub(super) async fn exists(ps: &PodSet, ctx: &Context) -> Result<bool> {
    Ok(read(ps, ctx).await?.is_some())
}

/// The PodSet as the API server has it now (a list of its one name, a consistent read the
/// operator's `list` permission covers), or `None`, remembered gone, if it is not there.
pub(super) async fn read(ps: &PodSet, ctx: &Context) -> Result<Option<PodSet>> {
    let one = ListParams::default().fields(&format!("metadata.name={}", ps.name_any()));
    let found = podsets_api(ps, ctx)
        .list(&one)
        .await
        .map_err(Error::ApiRead)?;
    // Another PodSet of the same name is a new object: the cache's is gone all the same.
    let now = found.items.into_iter().find(|p| p.uid() == ps.uid());
    if now.is_none() {
        ctx.gone
            .found(&ps.uid().unwrap_or_default(), Instant::now());
    }
    Ok(now)
}

pub(super) fn podsets_api(ps: &PodSet, ctx: &Context) -> Api<PodSet> {
    Api::namespaced(ctx.client.clone(), &ps.namespace().unwrap_or_default())
}
