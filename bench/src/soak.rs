//! The soak test.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use podset_operator::api::PodSet;

use crate::NS;
use crate::env::{Env, Target};
use crate::system::{ProcStats, mib, proc_stats, slope_kib_per_minute};
use crate::workload::{self, Kind, names};

/// Random scaling of 50 PodSets and random pod deletions for `minutes`, RSS sampled.
pub async fn soak(minutes: u64, operator: PathBuf) -> Result<()> {
    let env = Env::start(Target::Operator, &operator, "podset").await?;
    let pid = env.worker_pid().context("operator pid")?;
    let names = names("soak", 50);
    workload::create_all(&env.client, NS, Kind::PodSet, &names, 3).await?;
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), NS);
    let api: Api<PodSet> = Api::namespaced(env.client.clone(), NS);
    let mut rng = Rng(SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)?
        .as_nanos() as u64
        | 1);
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs(minutes * 60);
    let mut samples = Vec::new();
    let mut next_sample = t0;
    let (mut scalings, mut deletions) = (0u64, 0u64);
    while Instant::now() < end {
        let name = &names[rng.below(names.len())];
        let replicas = 1 + rng.below(10) as i32;
        workload::scale_all(
            &env.client,
            NS,
            Kind::PodSet,
            std::slice::from_ref(name),
            replicas,
        )
        .await?;
        scalings += 1;
        let list = pods.list(&ListParams::default()).await?;
        if !list.items.is_empty() {
            let victim = &list.items[rng.below(list.items.len())];
            let _ = pods
                .delete(&victim.name_any(), &DeleteParams::default())
                .await;
            deletions += 1;
        }
        if Instant::now() >= next_sample {
            let ProcStats { rss_kib, .. } = proc_stats(pid)?;
            samples.push((t0.elapsed(), rss_kib));
            eprintln!(
                "[soak] {:>5.1} min  RSS {:.1} MiB  scalings {scalings}  pod deletions {deletions}",
                t0.elapsed().as_secs_f64() / 60.0,
                mib(rss_kib)
            );
            next_sample += Duration::from_secs(10);
        }
        tokio::time::sleep(Duration::from_millis(500)).await; // the soak's pace, not a wait
    }
    // Memory growth after warm-up: the first fifth is the caches filling.
    let warm: Vec<_> = samples.iter().copied().skip(samples.len() / 5).collect();
    let slope = slope_kib_per_minute(&warm);
    let quiet = Instant::now();
    testenv::poll(
        Duration::from_secs(120),
        "every PodSet at its last spec, in pods and in status",
        || all_at_spec(&api, &pods),
    )
    .await?;
    println!(
        "soak: {minutes} min, {scalings} scalings, {deletions} pod deletions; all {} PodSets at \
         their last spec {:.1} s after the last change",
        names.len(),
        quiet.elapsed().as_secs_f64()
    );
    println!(
        "soak: RSS first {:.1} MiB, last {:.1} MiB, max {:.1} MiB; slope after warm-up {slope:.1} KiB/min",
        mib(samples.first().map_or(0, |s| s.1)),
        mib(samples.last().map_or(0, |s| s.1)),
        mib(samples.iter().map(|s| s.1).max().unwrap_or(0))
    );
    Ok(())
}

/// Whether every PodSet has exactly its spec's live pods, and says so in a status written for
/// its current generation.
async fn all_at_spec(api: &Api<PodSet>, pods: &Api<Pod>) -> Result<bool> {
    let live = testenv::live_pods_by_owner(&pods.list(&ListParams::default()).await?.items);
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .all(|ps| {
            let want = ps.spec.replicas;
            let has = live.get(&ps.uid().unwrap_or_default()).map_or(0, Vec::len);
            ps.status.as_ref().is_some_and(|s| {
                s.available_replicas == want && s.observed_generation == ps.metadata.generation
            }) && has == want as usize
        }))
}

/// xorshift64: enough randomness for choosing what to scale, with no dependency.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}
