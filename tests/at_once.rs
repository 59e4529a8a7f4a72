//! An At runs its command at most once, whatever happens between its pod's create and the
//! status that records it (issue 11, scenario 4; issue 26): here its pod is deleted the moment
//! it may run (released from its scheduling gate) and the operator is killed mid-run, which
//! used to leave PENDING Ats without a pod that the restarted operator started again. A pod
//! still gated never ran; no At may have two pods released.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use anyhow::Result;
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams, Preconditions};
use kube::runtime::{WatchStreamExt, watcher};
use podset_operator::api::{At, AtPhase};
use testenv::harness::{PROMPTLY, TestNs, at, cluster_without_nodes, poll};

/// Pod UIDs seen released per At (the pods' `app` label), each deleted on sight.
type Seen = Arc<Mutex<HashMap<String, HashSet<String>>>>;

fn released(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .is_some_and(|s| s.scheduling_gates.as_ref().is_none_or(Vec::is_empty))
}

async fn delete_on_sight(pods: Api<Pod>, seen: Seen) -> Result<()> {
    let stream = watcher(pods.clone(), watcher::Config::default()).applied_objects();
    futures::pin_mut!(stream);
    while let Some(pod) = stream.try_next().await? {
        if !released(&pod) {
            continue;
        }
        let (at, uid) = (pod.labels().get("app").cloned(), pod.uid());
        let (Some(at), Some(uid)) = (at, uid) else {
            continue;
        };
        if !seen
            .lock()
            .unwrap()
            .entry(at)
            .or_default()
            .insert(uid.clone())
        {
            continue;
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        };
        let (pods, name) = (pods.clone(), pod.name_any());
        tokio::spawn(async move { pods.delete(&name, &params).await });
    }
    Ok(())
}

#[tokio::test]
async fn pods_deleted_on_sight_across_an_operator_kill_run_each_command_once() -> Result<()> {
    const N: usize = 100;
    let ns = TestNs::new_in(cluster_without_nodes().await?, "at-once").await?;
    let mut operator = ns.start_operator(&["--controllers=at"]).await?;
    let (ats, seen) = (ns.api::<At>(), Seen::default());
    let deleter = tokio::spawn(delete_on_sight(ns.api::<Pod>(), seen.clone()));
    let names: Vec<String> = (0..N).map(|i| format!("once-{i:03}")).collect();
    futures::future::try_join_all(names.iter().map(|name| {
        let at = at(name, "2019-04-12T10:12:00Z", "true");
        let ats = ats.clone();
        async move { ats.create(&PostParams::default(), &at).await }
    }))
    .await?;

    // Killed while the Ats are being started, then back.
    let started = || seen.lock().unwrap().len();
    poll(PROMPTLY, "a quarter of the pods released", || async {
        Ok(started() >= N / 4)
    })
    .await?;
    operator.kill();
    let at_kill = started();
    operator.restart()?;

    // An At the kill caught between recording RUNNING and releasing its pod creates it (again)
    // or takes the one there: none of those ran.
    poll(PROMPTLY * 2, &format!("all {N} Ats DONE"), || async {
        let list = ats.list(&ListParams::default()).await?;
        let done = list
            .items
            .iter()
            .filter(|a| a.status.as_ref().and_then(|s| s.phase) == Some(AtPhase::Done));
        Ok(done.count() == N)
    })
    .await?;
    deleter.abort();
    let seen = seen.lock().unwrap().clone();
    let twice: Vec<_> = seen.iter().filter(|(_, uids)| uids.len() > 1).collect();
    eprintln!(
        "{N} Ats, {at_kill} started at the kill; released pods: {} Ats ran, {} of them more than once",
        seen.len(),
        twice.len()
    );
    assert!(twice.is_empty(), "commands run more than once: {twice:?}");
    operator.assert_healthy();
    Ok(())
}
