//! The fault suite of issue 6, on real control planes: the operator binary under its own
//! ServiceAccount is killed, loses its API server or etcd, has its watches expire, and gets
//! its specs edited under its feet (garbage input is `tests/bad_input/`). It must come back by
//! itself, converge, never run a PodSet over its spec, and never panic.
//!
//! No hollow nodes anywhere: Pending pods count as available, and the tests run faster.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use futures::future::try_join_all;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use podset_operator::api::{At, AtPhase, PodSet};
use serde_json::{Value, json};
use testenv::Cluster;
use testenv::MaxPods;
use testenv::harness::{
    PROMPTLY, TestNs, cluster_without_nodes, own_cluster, own_cluster_ns, podset, poll, poll_some,
    seeded_rng,
};

/// How long a large scale-up (or the recovery from a fault) may take on 2 shared cores.
const RECOVERY: Duration = Duration::from_secs(120);

/// How long the recovery from a control-plane restart may take: the backoff grown while it
/// was down can put a PodSet's next try as long again as the outage after it.
const RECOVERY_FROM_RESTART: Duration = Duration::from_secs(240);

async fn shared_ns(prefix: &str) -> Result<TestNs> {
    TestNs::new_in(cluster_without_nodes().await?, prefix).await
}

async fn create_podsets(ns: &TestNs, prefix: &str, n: usize, replicas: i32) -> Result<Vec<String>> {
    let api = ns.api::<PodSet>();
    let created = try_join_all((0..n).map(|i| {
        let api = api.clone();
        async move {
            api.create(
                &PostParams::default(),
                &podset(&format!("{prefix}-{i}"), replicas),
            )
            .await
        }
    }))
    .await?;
    Ok(created.iter().map(|ps| ps.uid().unwrap()).collect())
}

async fn pod_count(ns: &TestNs) -> Result<usize> {
    Ok(ns
        .api::<Pod>()
        .list(&ListParams::default())
        .await?
        .items
        .len())
}

/// Whether every PodSet of the namespace has exactly `spec.replicas` live pods of its own and a
/// status naming them for its current generation; if so, the number of live pods.
async fn all_settled(ns: &TestNs) -> Result<Option<usize>> {
    let podsets = ns.api::<PodSet>().list(&ListParams::default()).await?.items;
    let pods = ns.api::<Pod>().list(&ListParams::default()).await?.items;
    let mut live = testenv::live_pods_by_owner(&pods);
    let mut total = 0;
    for ps in &podsets {
        let names = live.remove(&ps.uid().unwrap()).unwrap_or_default();
        let status = ps.status.clone().unwrap_or_default();
        let want = ps.spec.replicas;
        let settled = names.len() == want as usize
            && status.pod_names == names
            && status.available_replicas == want
            && status.observed_generation == ps.metadata.generation;
        if !settled {
            return Ok(None);
        }
        total += names.len();
    }
    Ok(Some(total))
}

async fn wait_settled(ns: &TestNs, timeout: Duration) -> Result<usize> {
    poll_some(
        timeout,
        "every PodSet to have exactly its spec's pods, in its status for its generation",
        || all_settled(ns),
    )
    .await
}

/// Fails if any of `uids` was seen with more pods than `limit` allows it: `max` is the most
/// live at once ([`MaxPods::snapshot`]) or the most ever made ([`MaxPods::ever`]).
fn assert_never_over(max: &HashMap<String, usize>, uids: &[String], limit: impl Fn(&str) -> usize) {
    for uid in uids {
        let m = max.get(uid).copied().unwrap_or(0);
        assert!(
            m <= limit(uid),
            "PodSet {uid} had {m} pods, over its spec of {}",
            limit(uid)
        );
    }
}

async fn set_replicas(api: &Api<PodSet>, name: &str, replicas: i32) -> Result<PodSet> {
    Ok(api
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await?)
}

/// SIGKILL mid scale-up (50 PodSets x 5): the kill must land while pods are still missing,
/// and the restarted operator must make exactly the missing ones: 250 live pods, and no
/// PodSet ever had a sixth pod made, live or not (counted by the pod UIDs a watch saw).
#[tokio::test]
async fn sigkill_mid_scale_up_then_restart_never_over_creates() -> Result<()> {
    let ns = shared_ns("kill").await?;
    let recorder = MaxPods::start(ns.api::<Pod>());
    let mut operator = ns.start_operator(&["--controllers=podset"]).await?;
    let start = Instant::now();
    let uids = create_podsets(&ns, "w2", 50, 5).await?;
    // Slow-start batches of 1, 2, 2 per PodSet: at 10 pods most PodSets are between batches.
    // The watch event comes milliseconds after the create, not a poll's 100 ms.
    recorder.wait_seen(10, PROMPTLY).await?;
    operator.kill();
    // Counted once the operator is dead: creates it had in flight may still land, so this is
    // at least what existed at the kill, and fewer than 250 means the scale-up was under way.
    let at_kill = pod_count(&ns).await?;
    let killed = start.elapsed();
    assert!(
        at_kill < 250,
        "the scale-up had finished ({at_kill} pods) before the kill: nothing was interrupted"
    );
    operator.restart()?;
    let total = wait_settled(&ns, RECOVERY).await?;
    println!(
        "killed after {killed:?} with {at_kill}/250 pods; settled {:?} after the start",
        start.elapsed()
    );
    assert_eq!(total, 250, "50 x 5 live pods");
    assert_eq!(
        pod_count(&ns).await?,
        250,
        "no extra pod, terminating or not"
    );
    // The recorder's watch may trail the list above: let it see every PodSet's 5 first.
    poll(
        PROMPTLY,
        "the recorder to see 5 pods of every PodSet",
        || async {
            let ever = recorder.ever();
            Ok(uids
                .iter()
                .all(|uid| ever.get(uid).is_some_and(|n| *n >= 5)))
        },
    )
    .await?;
    assert_never_over(&recorder.ever(), &uids, |_| 5);
    operator.assert_healthy();
    Ok(())
}

/// PodSets (x 5 pods) a restart test creates: enough that the scale-up is still under way
/// when the component stops.
const RESTART_PODSETS: usize = 200;

/// Stops `component` of the test's own cluster while 200 PodSets x 5 are being created, keeps
/// it down for `outage`, starts it again, and checks that the same operator process carries
/// on: it converges, and a later spec change converges too (its watches came back). Returns
/// the operator's log (it lives in the cluster's directory, gone with the cluster).
async fn survives_component_restart(component: &str, outage: Duration) -> Result<String> {
    let mut ns = own_cluster_ns(&format!("{component}-restart"), &[]).await?;
    let mut operator = ns.start_operator(&["--controllers=podset"]).await?;
    let recorder = MaxPods::start(ns.api::<Pod>());
    let start = Instant::now();
    let uids = create_podsets(&ns, "r", RESTART_PODSETS, 5).await?;
    recorder.wait_seen(20, PROMPTLY).await?;
    let at_stop = pod_count(&ns).await?;
    assert!(
        at_stop < RESTART_PODSETS * 5,
        "the scale-up had finished ({at_stop} pods) before the {component} stopped"
    );
    let stopped = Instant::now();
    own_cluster(&mut ns)?.stop(component)?;
    // The outage itself: how long the component stays down.
    tokio::time::sleep_until((stopped + outage).into()).await;
    own_cluster(&mut ns)?.restart(component).await?;
    let back = stopped.elapsed();
    operator.assert_healthy();
    let total = wait_settled(&ns, RECOVERY_FROM_RESTART).await?;
    assert_eq!(total, RESTART_PODSETS * 5);
    let settled = start.elapsed();

    let api = ns.api::<PodSet>();
    try_join_all((0..RESTART_PODSETS).map(|i| {
        let api = api.clone();
        async move { set_replicas(&api, &format!("r-{i}"), 2 + (i % 2) as i32 * 5).await }
    }))
    .await?;
    let total = wait_settled(&ns, PROMPTLY).await?;
    let half = RESTART_PODSETS / 2;
    assert_eq!(total, half * 2 + half * 7, "every PodSet at its new spec");
    println!(
        "{component}: stopped with {at_stop}/{} pods, back after {back:?}; settled {settled:?} \
         after the start; the next spec change settled {:?} later",
        RESTART_PODSETS * 5,
        start.elapsed() - settled
    );
    let max = recorder.snapshot();
    // 5 until the change, then 2 (even) or 7 (odd).
    let most: HashMap<&str, usize> = uids
        .iter()
        .enumerate()
        .map(|(i, uid)| (uid.as_str(), 5 + (i % 2) * 2))
        .collect();
    assert_never_over(&max, &uids, |uid| most[uid]);
    operator.assert_healthy();
    Ok(operator.log())
}

#[tokio::test]
async fn apiserver_restart_mid_run_the_operator_reconnects_by_itself() -> Result<()> {
    let log = survives_component_restart("kube-apiserver", Duration::from_secs(2)).await?;
    // Evidence that the watch really broke and was re-established by the operator itself.
    assert!(
        log.contains("pod watch failed"),
        "the operator never noticed the API server going away"
    );
    Ok(())
}

#[tokio::test]
async fn etcd_restart_mid_run_the_operator_carries_on() -> Result<()> {
    survives_component_restart("etcd", Duration::from_secs(5)).await?;
    Ok(())
}

/// POSTs to etcd's JSON gateway (etcd 3.4: no etcdctl needed).
async fn etcd(cluster: &Cluster, path: &str, body: Value) -> Result<Value> {
    let url = format!("http://127.0.0.1:{}/v3/{path}", cluster.etcd_port);
    let resp = reqwest::Client::new()
        .post(&url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await?;
    Ok(serde_json::from_str(&resp.text().await?)?)
}

async fn etcd_revision(cluster: &Cluster) -> Result<i64> {
    let range = etcd(cluster, "kv/range", json!({"key": "AA=="})).await?;
    range["header"]["revision"]
        .as_str()
        .context("no header.revision in etcd's answer")?
        .parse()
        .context("etcd revision")
}

#[tokio::test]
async fn watch_expiry_after_compaction_relists_and_carries_on() -> Result<()> {
    // Without the watch cache, a resumed watch goes to etcd, which refuses a compacted revision.
    let mut ns = own_cluster_ns("expiry", &["--watch-cache=false"]).await?;
    let mut operator = ns.start_operator(&[]).await?;
    create_podsets(&ns, "exp", 3, 2).await?;
    wait_settled(&ns, PROMPTLY).await?;

    // Move etcd well past every resourceVersion the operator has seen, then compact it all.
    let cms = ns.api::<ConfigMap>();
    for i in 0..100 {
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(format!("churn-{i}")),
                ..Default::default()
            },
            ..Default::default()
        };
        cms.create(&PostParams::default(), &cm).await?;
    }
    let revision = etcd_revision(&ns.cluster).await?;
    let compacted = etcd(
        &ns.cluster,
        "kv/compaction",
        json!({"revision": revision.to_string(), "physical": true}),
    )
    .await?;
    assert!(compacted.get("error").is_none(), "compaction: {compacted}");
    let old = etcd(
        &ns.cluster,
        "kv/range",
        json!({"key": "AA==", "revision": (revision - 1).to_string()}),
    )
    .await?;
    assert!(
        old.to_string().contains("compacted"),
        "revision {} still readable after compaction: {old}",
        revision - 1
    );

    // Dropping the connections makes every watch resume from its old resourceVersion.
    own_cluster(&mut ns)?.restart("kube-apiserver").await?;
    poll(PROMPTLY, "the operator's watch to get 410 Gone", || async {
        Ok(operator.log().contains("watch is too old"))
    })
    .await
    .with_context(|| ns.cluster.logs(20))?;
    let gone = operator
        .log()
        .lines()
        .find(|l| l.contains("watch is too old"))
        .unwrap_or_default()
        .to_string();
    println!("410 seen by the operator: {gone}");

    // Both controllers work on after the relist.
    let api = ns.api::<PodSet>();
    set_replicas(&api, "exp-0", 4).await?;
    set_replicas(&api, "exp-1", 1).await?;
    assert_eq!(wait_settled(&ns, PROMPTLY).await?, 4 + 1 + 2);
    ns.api::<At>()
        .create(&PostParams::default(), &at_now("after-expiry"))
        .await?;
    poll(
        PROMPTLY,
        "the At created after the relist to run",
        || async {
            let at = ns.api::<At>().get("after-expiry").await?;
            Ok(at.status.and_then(|s| s.phase) == Some(AtPhase::Running))
        },
    )
    .await?;
    operator.assert_healthy();
    Ok(())
}

fn at_now(name: &str) -> At {
    testenv::harness::at(name, "2019-04-12T10:12:00Z", "echo YAY")
}

#[tokio::test]
async fn concurrent_spec_edits_end_at_the_last_spec_written() -> Result<()> {
    let ns = shared_ns("edits").await?;
    let mut operator = ns.start_operator(&["--controllers=podset"]).await?;
    let recorder = MaxPods::start(ns.api::<Pod>());
    let names: Vec<String> = (0..3).map(|i| format!("edit-{i}")).collect();
    let uids = create_podsets(&ns, "edit", 3, 5).await?;
    wait_settled(&ns, PROMPTLY).await?;

    let api = ns.api::<PodSet>();
    // Each writer: 30 patches back to back, a random PodSet and value each.
    let mut rng = seeded_rng("concurrent_spec_edits");
    let writers = (0..3).map(|_| {
        let (api, names, mut rng) = (api.clone(), names.clone(), rng.fork());
        async move {
            let mut written = Vec::new();
            for _ in 0..30 {
                let name = &names[rng.usize(..3)];
                let replicas = rng.i32(1..=10);
                let ps = set_replicas(&api, name, replicas).await?;
                written.push((name.clone(), ps.metadata.generation.unwrap(), replicas));
            }
            anyhow::Ok(written)
        }
    });
    let written: Vec<_> = try_join_all(writers).await?.into_iter().flatten().collect();
    wait_settled(&ns, PROMPTLY).await?;
    let max = recorder.snapshot();

    let mut most: HashMap<String, usize> = HashMap::new();
    for (name, uid) in names.iter().zip(&uids) {
        let ps = api.get(name).await?;
        let mine: Vec<_> = written.iter().filter(|w| &w.0 == name).collect();
        // The highest generation answered is the last spec change that landed.
        let last = mine.iter().max_by_key(|w| w.1).context("no patch")?;
        assert_eq!(
            ps.spec.replicas, last.2,
            "{name}: not the last spec written"
        );
        assert_eq!(
            ps.metadata.generation,
            Some(last.1),
            "{name}: a later write"
        );
        let status = ps.status.clone().unwrap_or_default();
        assert_eq!(status.observed_generation, ps.metadata.generation, "{name}");
        assert_eq!(status.available_replicas, last.2, "{name}");
        let highest = mine.iter().map(|w| w.2).max().unwrap_or(0).max(5);
        most.insert(uid.clone(), highest as usize);
        println!(
            "{name}: {} patches, final generation {}, replicas {}",
            mine.len(),
            last.1,
            last.2
        );
    }
    assert_never_over(&max, &uids, |uid| most[uid]);
    operator.assert_healthy();
    Ok(())
}
