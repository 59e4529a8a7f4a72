//! W1, W2, W4, W5, apf: objects created at once, timed until every status shows them.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::NS;
use crate::cli::{BenchArgs, Sizes};
use crate::env::{Env, Target, operator_metrics, operator_writes, save_apiserver_profile};
use crate::floor;
use crate::heap;
use crate::report::Sample;
use crate::scenario::apf;
use crate::system::{ProcStats, apiserver_mutations, mib, proc_stats};
use crate::workload::{self, Convergence, names};

/// What one convergence run creates, and what it measures besides the time.
#[derive(Clone, Copy)]
pub struct Work {
    pub name: &'static str,
    pub objects: usize,
    pub replicas: i32,
    /// Writes while idle after converging (a long window).
    pub idle: bool,
    /// The operator's time from a restart to ready once everything converged, and its memory
    /// after that restart's initial list.
    pub restart: bool,
    /// The controller as its own user, alone in a tight API Priority and Fairness level (see
    /// [`apf::confine`]): its time, and the requests the level rejected and served.
    pub tight: bool,
}

impl Work {
    /// Only the time, the requests and the memory.
    pub fn of(name: &'static str, objects: usize, replicas: i32) -> Self {
        Self {
            name,
            objects,
            replicas,
            idle: false,
            restart: false,
            tight: false,
        }
    }
}

/// Creates `work.objects` x `work.replicas` and times it until every status shows them.
pub async fn converge_run(
    target: Target,
    args: &BenchArgs,
    s: &Sizes,
    work: Work,
) -> Result<Sample> {
    let mut env = Env::start_as(target, &args.operator, "podset", work.tight).await?;
    let pods = work.objects * work.replicas as usize;
    let heap_raw = match (args.heap_profile, target) {
        (true, Target::Operator) => {
            let raw = heap::raw_path(&format!("{}-{pods}pods", work.name))?;
            env.restart_operator(&heap::recording(&raw)).await?;
            Some(raw)
        }
        _ => None,
    };
    let confined = if work.tight {
        Some(apf::confine(&env.client, target).await?)
    } else {
        None
    };
    if target == Target::Floor {
        floor::warm(&env.client, NS).await?;
    }
    let before = apiserver_mutations(&env.client).await?;
    let start_cpu = worker_stats(&env)?.unwrap_or_default();
    let control_plane_before = env.control_plane_cpu()?;
    let profile = args.profile_seconds.map(|secs| {
        let name = format!("{}-{pods}pods", target.label().replace([' ', '(', ')'], ""));
        tokio::spawn(save_apiserver_profile(env.client.clone(), secs, name))
    });
    let (seconds, submitted) = submit_and_wait(&env, target, work).await?;
    let control_plane_cpu = env.control_plane_cpu()? - control_plane_before;
    if let Some(profile) = profile {
        profile.await??;
    }
    let after = apiserver_mutations(&env.client).await?;
    // The bench's own creates are not the controller's work.
    let own = work.objects as f64;
    let mut sample = Sample {
        seconds,
        pods,
        mutations: (after - before - own) / pods as f64,
        control_plane_cpu,
        figures: vec![("harness creates s", submitted)],
        ..Sample::default()
    };
    if let Some(user) = confined {
        apf::count(&env.client, &user, &mut sample).await?;
        if let Some(op) = &env.operator {
            sample.note += &apf::operator_throttled(op.metrics_port).await?;
        }
    }
    if let Some(op) = &env.operator {
        sample.note += &scrape_size(op.metrics_port).await?;
    }
    if let Some(stats) = steady_stats(&env, s).await? {
        sample.steady_rss_mib = mib(stats.rss_kib);
        sample.peak_rss_mib = mib(stats.peak_rss_kib);
        sample.cpu_seconds = stats.cpu_seconds - start_cpu.cpu_seconds;
    }
    if work.idle {
        measure_idle(&env, s, &mut sample).await?;
    }
    if let Some(raw) = heap_raw {
        kill_for_profile(&mut env, &raw)?;
    }
    if work.restart && target == Target::Operator {
        sample.restart_seconds = env.restart_operator(&[]).await?.as_secs_f64();
        if let Some(stats) = steady_stats(&env, s).await? {
            sample.restart_rss_mib = (mib(stats.peak_rss_kib), mib(stats.rss_kib));
        }
    }
    Ok(sample)
}

/// Submits the work and returns the seconds until it converged, and the seconds of it the
/// harness spent creating the objects (its own writes, not the controller's work).
async fn submit_and_wait(env: &Env, target: Target, work: Work) -> Result<(f64, f64)> {
    let t0 = Instant::now();
    let names = names("w", work.objects);
    let kind = match target {
        Target::Floor => {
            let podsets = floor::submit(&env.client, NS, &names, work.replicas).await?;
            let submitted = t0.elapsed().as_secs_f64();
            floor::converge(&env.client, NS, &podsets).await?;
            return Ok((t0.elapsed().as_secs_f64(), submitted));
        }
        _ => target
            .kind()
            .context("the CronJob controller converges no PodSets or ReplicaSets")?,
    };
    let mut conv = Convergence::start(&env.client, NS, kind);
    workload::create_all(&env.client, NS, kind, &names, work.replicas).await?;
    let submitted = t0.elapsed().as_secs_f64();
    // W5's 100,000 pods take minutes on 2 cores.
    conv.wait(work.objects, work.replicas, Duration::from_secs(1800))
        .await?;
    Ok((t0.elapsed().as_secs_f64(), submitted))
}

fn worker_stats(env: &Env) -> Result<Option<ProcStats>> {
    env.worker_pid().map(proc_stats).transpose()
}

/// The worker's memory and CPU once it had `steady_wait` to settle.
async fn steady_stats(env: &Env, s: &Sizes) -> Result<Option<ProcStats>> {
    if env.worker_pid().is_none() {
        return Ok(None);
    }
    tokio::time::sleep(s.steady_wait).await; // let it settle before the steady reading
    worker_stats(env)
}

/// What one scrape of the operator's `/metrics` costs Prometheus, once converged.
async fn scrape_size(metrics_port: u16) -> Result<String> {
    let text = operator_metrics(metrics_port).await?;
    let series = text.lines().filter(|l| !l.starts_with('#')).count();
    Ok(format!("; /metrics {} bytes, {series} series", text.len()))
}

/// The API server's and the operator's own writes while nothing changes.
async fn measure_idle(env: &Env, s: &Sizes, sample: &mut Sample) -> Result<()> {
    let per_minute = 60.0 / s.idle_window.as_secs_f64();
    let own_port = env.operator.as_ref().map(|op| op.metrics_port);
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
        sample.note += &format!("; the operator's own writes while idle: {own:.1}/min");
    }
    Ok(())
}

/// Kills the profiled operator where it stands (what was live is then reported as leaked)
/// and turns its recording into a profile.
fn kill_for_profile(env: &mut Env, raw: &Path) -> Result<()> {
    if let Some(mut op) = env.operator.take() {
        op.kill();
    }
    heap::finish(raw)?;
    Ok(())
}
