//! The API floor of a convergence: the writes that converging the PodSets requires, and
//! nothing else, sent by the harness with no waits over the operator's own client and HTTP
//! stack (`podset_operator::client`). For each PodSet, its pods as the operator makes them
//! (`plan::podset::pod_for`), then the one status write the operator would send for them
//! (`plan::podset::status`, over the pods the creates returned). No watch, no cache, no
//! expectations, no event: what any PodSet controller has to pay the control plane, the
//! baseline for a controller's control-plane CPU per converged pod.

use std::sync::Arc;

use anyhow::Result;
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use podset_operator::api::{PodSet, PodSetSpec};
use podset_operator::plan::podset::{Outcome, pod_for, status};
use podset_operator::pod::CachedPod;

/// Pod creates in flight, as the operator's window starts.
const IN_FLIGHT: usize = 64;

/// Creates one PodSet as a dry run (stored nowhere) before the measure. In a fresh control
/// plane the first PodSet create takes a fixed 2 s or so, one PodSet or a thousand (smoke
/// W1: 2.09 s for one PodSet of 3 pods; 0.06 s after this): every other target's first
/// create comes after its worker started and got ready, and never showed it. Without this the
/// floor's wall time was 3.4 s in W2, slower than the operator.
pub async fn warm(client: &Client, ns: &str) -> Result<()> {
    let api: Api<PodSet> = Api::namespaced(client.clone(), ns);
    let spec = PodSetSpec {
        replicas: 1,
        template: None,
    };
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    api.create(&params, &PodSet::new("warm", spec)).await?;
    Ok(())
}

/// Creates PodSet `names`, each of `replicas`, as the harness does for every target, and
/// returns them.
pub async fn submit(
    client: &Client,
    ns: &str,
    names: &[String],
    replicas: i32,
) -> Result<Vec<PodSet>> {
    let api: Api<PodSet> = Api::namespaced(client.clone(), ns);
    let spec = PodSetSpec {
        replicas,
        template: None,
    };
    let created = stream::iter(names)
        .map(|name| {
            let (api, object) = (&api, PodSet::new(name, spec.clone()));
            async move { api.create(&PostParams::default(), &object).await }
        })
        .buffer_unordered(crate::workload::SUBMIT_CONCURRENCY);
    Ok(created.try_collect().await?)
}

/// Sends what converging `podsets` takes: their pods, then one status write each.
pub async fn converge(client: &Client, ns: &str, podsets: &[PodSet]) -> Result<()> {
    let replicas = podsets
        .first()
        .map_or(1, |ps| ps.spec.replicas.max(1) as usize);
    stream::iter(podsets)
        .map(|ps| converge_one(client, ns, ps))
        .buffer_unordered((IN_FLIGHT / replicas).max(1))
        .try_for_each(|()| async { Ok(()) })
        .await
}

async fn converge_one(client: &Client, ns: &str, ps: &PodSet) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let template = pod_for(ps);
    let made: Vec<Pod> = stream::iter(0..ps.spec.replicas)
        .map(|_| podset_operator::client::create(&pods, &template))
        .buffer_unordered(ps.spec.replicas.max(1) as usize)
        .try_collect()
        .await?;
    let cached: Vec<_> = made
        .iter()
        .map(|p| Arc::new(CachedPod::from_pod(p)))
        .collect();
    let status = status(
        ps,
        None,
        &cached,
        &Outcome::Succeeded,
        jiff::Timestamp::now(),
    );
    let body = serde_json::json!({ "status": status });
    let api: Api<PodSet> = Api::namespaced(client.clone(), ns);
    let params = PatchParams {
        field_manager: Some("podset-operator".into()),
        ..PatchParams::default()
    };
    api.patch_status(&ps.name_any(), &params, &Patch::Merge(&body))
        .await?;
    Ok(())
}
