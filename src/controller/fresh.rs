//! A PodSet or an At as the API server has it now, read before a decision the cache cannot
//! be trusted with: pods made for one deleted behind a quiet watch are removed by the
//! garbage collector, and each removal brings the next round.

use kube::{Resource, ResourceExt};
use tokio::time::Instant;

use crate::controller::context::{Context, read_by_name};
use crate::error::Result;

/// Whether `obj` is still there and not being deleted, read from the API server. If it is
/// not there, it is remembered gone. One being deleted may stay for a while (a foreground
/// deletion waits for the garbage collector to remove its pods; another controller's
/// finalizer holds it): pods made for it would only be removed again.
pub async fn exists<K>(obj: &K, ctx: &Context) -> Result<bool>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let now = read(obj, ctx).await?;
    Ok(now.is_some_and(|o| o.meta().deletion_timestamp.is_none()))
}

/// `obj` as the API server has it now (a list of its one name, a consistent read the
/// operator's `list` permission covers), or `None`, remembered gone, if it is not there.
pub async fn read<K>(obj: &K, ctx: &Context) -> Result<Option<K>>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let now = read_by_name(&ctx.api(obj), obj).await?;
    if now.is_none() {
        ctx.memory
            .found_gone(&obj.uid().unwrap_or_default(), Instant::now());
    }
    Ok(now)
}
