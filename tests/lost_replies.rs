//! Network faults between the operator and the API server, injected by testenv's fault proxy
//! (issue 11): replies lost after their requests were forwarded, during a large scale-up.
//! A PodSet must never exceed its spec, and every one must converge once the network heals.

mod common;

use std::time::{Duration, Instant};

use anyhow::Result;
use common::{PROMPTLY, TestNs, cluster_without_nodes, podset, poll, seeded_rng};
use futures::future::try_join_all;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{ListParams, PostParams};
use podset_operator::api::PodSet;
use testenv::MaxPods;
use testenv::proxy::{Fault, FaultProxy};

const PODSETS: usize = 200;
const REPLICAS: usize = 2;

/// Every PodSet has exactly its pods, named in its status.
async fn all_converged(ns: &TestNs) -> Result<bool> {
    let podsets = ns.api::<PodSet>().list(&ListParams::default()).await?.items;
    let pods = ns.api::<Pod>().list(&ListParams::default()).await?.items;
    let live = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none());
    Ok(live.count() == PODSETS * REPLICAS
        && podsets.len() == PODSETS
        && podsets.iter().all(|ps| {
            ps.status.as_ref().is_some_and(|s| {
                s.pod_names.len() == REPLICAS && s.available_replicas == REPLICAS as i32
            })
        }))
}

#[tokio::test]
async fn replies_lost_during_a_scale_up_never_take_a_podset_over_its_spec() -> Result<()> {
    let mut rng = seeded_rng("replies_lost_during_a_scale_up");
    let ns = TestNs::new_in(cluster_without_nodes().await?, "lost-replies").await?;
    let proxy = FaultProxy::start(ns.cluster.api_addr()).await?;
    let mut operator = ns
        .start_operator_through(&proxy, &["--controllers=podset"])
        .await?;
    let recorder = MaxPods::start(ns.api::<Pod>());
    let api = ns.api::<PodSet>();
    let start = Instant::now();
    let created = try_join_all((0..PODSETS).map(|i| {
        let api = api.clone();
        async move {
            let ps = podset(&format!("lr-{i:03}"), REPLICAS as i32);
            api.create(&PostParams::default(), &ps).await
        }
    }))
    .await?;
    let uids: Vec<String> = created.iter().filter_map(|ps| ps.uid()).collect();

    // The fault strikes at a random point of the scale-up, for a random while.
    let strike = rng.usize(PODSETS / 4..PODSETS);
    let outage = Duration::from_millis(rng.u64(500..3000));
    let pods = ns.api::<Pod>();
    poll(PROMPTLY, &format!("{strike} pods made"), || async {
        Ok(pods.list(&ListParams::default()).await?.items.len() >= strike)
    })
    .await?;
    proxy.set(Fault::ResetReplies);
    tokio::time::sleep(outage).await; // the fault's length, not a wait
    proxy.set(Fault::Pass);
    let healed = Instant::now();

    poll(Duration::from_secs(120), "every PodSet converged", || {
        all_converged(&ns)
    })
    .await?;
    eprintln!(
        "{PODSETS} PodSets of {REPLICAS}: replies lost for {outage:?} from pod {strike}; \
         converged {:?} after the network healed, {:?} after the start",
        healed.elapsed(),
        start.elapsed()
    );
    // Evidence that the fault hit requests in flight, not an idle connection.
    let failures = operator.log().matches("pods failed").count();
    eprintln!("{failures} rounds of creates or deletes failed under the fault");
    assert!(failures > 0, "no request was caught by the fault");
    let max = recorder.snapshot();
    for uid in &uids {
        let most = max.get(uid).copied().unwrap_or(0);
        assert!(most <= REPLICAS, "a PodSet had {most} pods at once");
    }
    operator.assert_healthy();
    Ok(())
}
