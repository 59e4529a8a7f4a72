//! Ats all due in the same second.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use anyhow::{Result, bail};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use podset_operator::api::{At, AtSpec};

use crate::NS;
use crate::cli::{BenchArgs, Sizes};
use crate::env::{Env, Target};
use crate::report::Sample;
use crate::system::quantile;
use crate::workload::names;

/// Ats all due in the same second: lateness of their pods, and duplicates.
pub async fn at_run(args: &BenchArgs, s: &Sizes) -> Result<Sample> {
    let env = Env::start(Target::Operator, &args.operator, "at").await?;
    let lead = Duration::from_secs(if s.ats > 100 { 15 } else { 5 });
    let due = jiff::Timestamp::now()
        .checked_add(lead)?
        .round(jiff::Unit::Second)?;
    let due_at = SystemTime::UNIX_EPOCH + Duration::from_secs(due.as_second() as u64);
    let schedule = due.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    // Record when each pod is first seen, by a watch started before the Ats exist.
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), NS);
    let seen = std::sync::Arc::new(std::sync::Mutex::new(HashMap::<String, SystemTime>::new()));
    let recorder = {
        let seen = seen.clone();
        tokio::spawn(async move {
            let mut events = std::pin::pin!(
                watcher(pods, watcher::Config::default())
                    .default_backoff()
                    .applied_objects()
            );
            while let Some(Ok(p)) = events.next().await {
                seen.lock()
                    .unwrap()
                    .entry(p.name_any())
                    .or_insert_with(SystemTime::now);
            }
        })
    };
    let ats: Api<At> = Api::namespaced(env.client.clone(), NS);
    let pp = PostParams::default();
    futures::stream::iter(names("at", s.ats))
        .map(|name| {
            let at = At::new(
                &name,
                AtSpec {
                    schedule: schedule.clone(),
                    command: "echo YAY".into(),
                },
            );
            let (ats, pp) = (ats.clone(), pp.clone());
            async move { ats.create(&pp, &at).await }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
    if SystemTime::now() > due_at {
        bail!(
            "creating {} Ats took past their schedule; raise the lead time",
            s.ats
        );
    }
    testenv::poll(
        lead + Duration::from_secs(120),
        "a pod for every At",
        || async { Ok(seen.lock().unwrap().len() >= s.ats) },
    )
    .await?;
    recorder.abort();
    let lateness: Vec<f64> = seen
        .lock()
        .unwrap()
        .values()
        .map(|t| {
            t.duration_since(due_at)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0)
        })
        .collect();
    let list = Api::<Pod>::namespaced(env.client.clone(), NS)
        .list(&ListParams::default())
        .await?;
    let mut per_owner: HashMap<String, usize> = HashMap::new();
    for p in &list.items {
        for r in p.owner_references() {
            *per_owner.entry(r.uid.clone()).or_default() += 1;
        }
    }
    let duplicates = per_owner
        .values()
        .map(|n| n.saturating_sub(1))
        .sum::<usize>();
    Ok(Sample {
        seconds: quantile(&lateness, 0.5),
        pods: list.items.len(),
        max_pods: duplicates,
        note: format!(
            "lateness p50 {:.3}s p99 {:.3}s max {:.3}s; duplicate pods {duplicates}",
            quantile(&lateness, 0.5),
            quantile(&lateness, 0.99),
            quantile(&lateness, 1.0)
        ),
        ..Sample::default()
    })
}
