//! W1, W2, W4: objects created at once, timed until every status shows them.

use std::time::{Duration, Instant};

use anyhow::Result;

use crate::NS;
use crate::cli::{BenchArgs, Sizes};
use crate::env::{Env, Target, operator_writes, save_apiserver_profile};
use crate::report::Sample;
use crate::system::{apiserver_mutations, mib, proc_stats};
use crate::workload::{self, Convergence, Kind, names};

/// Creates `objects` x `replicas` and times it until every status shows them (W1, W2, W4).
pub async fn converge_run(
    target: Target,
    args: &BenchArgs,
    s: &Sizes,
    objects: usize,
    replicas: i32,
    measure_idle: bool,
) -> Result<Sample> {
    let env = Env::start(target, &args.operator, "podset").await?;
    let pods = objects * replicas as usize;
    let before = apiserver_mutations(&env.client).await?;
    let start_cpu = env
        .worker_pid()
        .map(proc_stats)
        .transpose()?
        .unwrap_or_default();
    let control_plane_before = env.control_plane_cpu()?;
    let profile = args.profile_seconds.map(|secs| {
        let name = format!("{}-{pods}pods", target.label().replace([' ', '(', ')'], ""));
        tokio::spawn(save_apiserver_profile(env.client.clone(), secs, name))
    });
    let t0 = Instant::now();
    let seconds = match target {
        Target::Floor => {
            workload::create_pods(&env.client, NS, pods, 64).await?;
            t0.elapsed().as_secs_f64()
        }
        Target::Operator | Target::ReplicaSet(_) => {
            let kind = if target == Target::Operator {
                Kind::PodSet
            } else {
                Kind::ReplicaSet
            };
            let mut conv = Convergence::start(&env.client, NS, kind);
            workload::create_all(&env.client, NS, kind, &names("w", objects), replicas).await?;
            conv.wait(objects, replicas, Duration::from_secs(600))
                .await?;
            t0.elapsed().as_secs_f64()
        }
    };
    let control_plane_cpu = env.control_plane_cpu()? - control_plane_before;
    if let Some(profile) = profile {
        profile.await??;
    }
    let after = apiserver_mutations(&env.client).await?;
    // The bench's own creates are not the controller's work.
    let own = match target {
        Target::Floor => pods,
        _ => objects,
    };
    let mut sample = Sample {
        seconds,
        pods,
        mutations: (after - before - own as f64) / pods as f64,
        control_plane_cpu,
        ..Sample::default()
    };
    if let Some(pid) = env.worker_pid() {
        tokio::time::sleep(s.steady_wait).await; // let it settle before the steady reading
        let stats = proc_stats(pid)?;
        sample.steady_rss_mib = mib(stats.rss_kib);
        sample.peak_rss_mib = mib(stats.peak_rss_kib);
        sample.cpu_seconds = stats.cpu_seconds - start_cpu.cpu_seconds;
    }
    if measure_idle {
        let per_minute = 60.0 / s.idle_window.as_secs_f64();
        let own_port = env.operator.as_ref().map(|(_, port)| *port);
        let own_before = match own_port {
            Some(port) => Some(operator_writes(port).await?),
            None => None,
        };
        let idle_before = apiserver_mutations(&env.client).await?;
        tokio::time::sleep(s.idle_window).await; // the observation window itself
        let idle_after = apiserver_mutations(&env.client).await?;
        sample.idle_writes_per_min = Some((idle_after - idle_before) * per_minute);
        if let (Some(port), Some(before)) = (own_port, own_before) {
            let own = (operator_writes(port).await? - before) * per_minute;
            sample.note = format!("the operator's own writes while idle: {own:.1}/min");
        }
    }
    Ok(sample)
}
