//! `podset-bench node`: what a real node costs and how fast it runs pods. Time from the
//! node's start to Ready (first and second start in this run), pod start latency (create to
//! Running, as watched, over busybox pods created at once), an At's lateness (schedule to its
//! pod created and Running), and the kubelet's and containerd's memory.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Result;
use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use podset_operator::api::{At, AtSpec};
use testenv::{Cluster, Options};

use crate::NS;
use crate::env::start_operator;
use crate::system::quantile;

pub async fn node(operator: PathBuf, pods: usize) -> Result<()> {
    let mut cluster = None;
    for start in ["first", "second"] {
        drop(cluster.take());
        let began = Instant::now();
        let c = Cluster::start(Options {
            audit: false,
            crds: Some(podset_operator::api::crds_yaml()),
            ..Options::default().with_real_nodes(1)
        })
        .await?;
        println!(
            "{start} start: control plane and 1 real node Ready in {:.1} s (the node: {:.1} s from its registry's start)",
            began.elapsed().as_secs_f64(),
            c.real_nodes_ready_in.unwrap_or_default().as_secs_f64()
        );
        cluster = Some(c);
    }
    let cluster = cluster.expect("started");
    cluster.create_namespace(NS).await?;
    let client = cluster.client().await?;
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let idle = cluster.real_nodes_rss_bytes();

    for (how, batch) in [("one at a time", 1), ("all at once", pods)] {
        let mut latencies = Vec::new();
        for round in 0..pods / batch {
            latencies.extend(pod_start_latencies(&api, &format!("{batch}-{round}"), batch).await?);
        }
        println!(
            "pod start on the real node ({pods} busybox pods, {how}; create to Running as watched): p50 {:.2} s, p95 {:.2} s, max {:.2} s",
            quantile(&latencies, 0.5),
            quantile(&latencies, 0.95),
            quantile(&latencies, 1.0),
        );
    }
    let busy = cluster.real_nodes_rss_bytes();

    let _op = start_operator(&cluster, &operator, "at").await?;
    let (created, running) = at_lateness(&client).await?;
    println!(
        "At lateness on the real node: pod created {created:.2} s, Running {running:.2} s after the schedule"
    );
    println!(
        "kubelet + containerd RSS: {:.0} MiB idle, {:.0} MiB with {pods} pods",
        idle as f64 / 1048576.0,
        busy as f64 / 1048576.0
    );
    Ok(())
}

/// Creates `n` sleeping busybox pods at once; seconds from each create to Running.
async fn pod_start_latencies(api: &Api<Pod>, prefix: &str, n: usize) -> Result<Vec<f64>> {
    let mut watch = watcher(api.clone(), watcher::Config::default())
        .applied_objects()
        .boxed();
    let mut created: HashMap<String, Instant> = HashMap::new();
    for i in 0..n {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("start-{prefix}-{i}")},
            "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}]}
        }))?;
        created.insert(format!("start-{prefix}-{i}"), Instant::now());
        api.create(&PostParams::default(), &pod).await?;
    }
    let mut running: HashMap<String, f64> = HashMap::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
    while running.len() < n {
        let Ok(Some(pod)) = tokio::time::timeout_at(deadline, watch.next()).await else {
            anyhow::bail!("only {} of {n} pods Running in 180 s", running.len());
        };
        let pod = pod?;
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if let (Some("Running"), Some(at)) = (phase, created.get(&pod.name_any())) {
            running
                .entry(pod.name_any())
                .or_insert(at.elapsed().as_secs_f64());
        }
    }
    Ok(running.into_values().collect())
}

/// An At due 5 s ahead: seconds from its schedule to its pod created, and to Running.
async fn at_lateness(client: &kube::Client) -> Result<(f64, f64)> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let mut watch = watcher(
        pods,
        watcher::Config::default().labels(podset_operator::api::MANAGED_BY_LABEL),
    )
    .applied_objects()
    .boxed();
    let due = Timestamp::from_second(Timestamp::now().as_second() + 5)?;
    let at = At::new(
        "late",
        AtSpec::shell(due.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(), "sleep 1"),
    );
    Api::<At>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &at)
        .await?;
    let due = SystemTime::from(due);
    let since_due = || {
        SystemTime::now()
            .duration_since(due)
            .map_or(f64::NAN, |d| d.as_secs_f64())
    };
    let mut created = None;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let Ok(Some(pod)) = tokio::time::timeout_at(deadline, watch.next()).await else {
            anyhow::bail!("the At's pod was not seen Running within 60 s");
        };
        let pod = pod?;
        let created = *created.get_or_insert_with(since_due);
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Running" | "Succeeded")) {
            return Ok((created, since_due()));
        }
    }
}
