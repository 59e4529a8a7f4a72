//! W3: scaling storms.

use std::time::{Duration, Instant};

use anyhow::Result;
use kube::api::Api;
use testenv::MaxPods;

use crate::NS;
use crate::cli::{BenchArgs, Sizes};
use crate::env::{Env, Target};
use crate::report::Sample;
use crate::workload::{self, Convergence, Kind, names};

/// W3: every object toggled between 1 and `high` several times; total time, and the most pods
/// any object ever had.
pub async fn storm_run(target: Target, args: &BenchArgs, s: &Sizes) -> Result<Sample> {
    let env = Env::start(target, &args.operator, "podset").await?;
    let kind = if target == Target::Operator {
        Kind::PodSet
    } else {
        Kind::ReplicaSet
    };
    let names = names("storm", s.w3_objects);
    let mut conv = Convergence::start(&env.client, NS, kind);
    let max = MaxPods::start(Api::namespaced(env.client.clone(), NS));
    workload::create_all(&env.client, NS, kind, &names, 1).await?;
    conv.wait(names.len(), 1, Duration::from_secs(300)).await?;
    let t0 = Instant::now();
    for i in 0..s.w3_toggles {
        let replicas = if i % 2 == 0 { s.w3_high } else { 1 };
        workload::scale_all(&env.client, NS, kind, &names, replicas).await?;
        conv.wait(names.len(), replicas, Duration::from_secs(300))
            .await?;
    }
    Ok(Sample {
        seconds: t0.elapsed().as_secs_f64(),
        pods: names.len() * s.w3_high as usize,
        max_pods: max.overall(),
        ..Sample::default()
    })
}
