//! The fault suite of issue 6, on real control planes: the operator binary under its own
//! ServiceAccount is killed, loses its API server or etcd, has its watches expire, gets its
//! specs edited under its feet, and is fed garbage. It must come back by itself, converge,
//! never run a PodSet over its spec, and never panic.
//!
//! No hollow nodes anywhere: Pending pods count as available, and the tests run faster.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use common::{
    PROMPTLY, TestNs, cluster_without_nodes, condition, own_cluster, own_cluster_ns, podset, poll,
    poll_some, seeded_rng,
};
use futures::future::{join_all, try_join_all};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use podset_operator::api::{At, AtPhase, PodSet};
use podset_operator::plan::at::{CONDITION_SCHEDULED, REASON_INVALID_SCHEDULE};
use podset_operator::plan::podset::CONDITION_REPLICA_FAILURE;
use serde_json::{Value, json};
use testenv::Cluster;
use testenv::MaxPods;

/// How long a large scale-up (or the recovery from a fault) may take on 2 shared cores.
const RECOVERY: Duration = Duration::from_secs(120);

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

/// Fails if any of `uids` was ever seen with more live pods than `limit` allows it.
fn assert_never_over(max: &HashMap<String, usize>, uids: &[String], limit: impl Fn(&str) -> usize) {
    for uid in uids {
        let m = max.get(uid).copied().unwrap_or(0);
        assert!(
            m <= limit(uid),
            "PodSet {uid} had {m} pods at once, over its spec of {}",
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

#[tokio::test]
async fn sigkill_mid_scale_up_then_restart_never_over_creates() -> Result<()> {
    let ns = shared_ns("kill").await?;
    let recorder = MaxPods::start(ns.api::<Pod>());
    let mut operator = ns.start_operator(&["--controllers=podset"]).await?;
    let start = Instant::now();
    let uids = create_podsets(&ns, "w2", 50, 5).await?;
    poll(PROMPTLY, "a fifth of the 250 pods to exist", || async {
        Ok(pod_count(&ns).await? >= 50)
    })
    .await?;
    operator.kill();
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
    assert_never_over(&recorder.snapshot(), &uids, |_| 5);
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
    poll(PROMPTLY, "the scale-up to be under way", || async {
        Ok(pod_count(&ns).await? >= 20)
    })
    .await?;
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
    let total = wait_settled(&ns, RECOVERY).await?;
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
    serde_json::from_value(json!({
        "apiVersion": "cnat.programming-kubernetes.info/v1alpha1", "kind": "At",
        "metadata": {"name": name},
        "spec": {"schedule": "2019-04-12T10:12:00Z", "command": "echo YAY"}
    }))
    .expect("a valid At")
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

// Bad input.

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    PodSet,
    At,
}

/// What must become of a malformed object.
#[derive(Debug)]
enum Expect {
    /// The API server refuses it with this code, its message naming this.
    Refused(u16, &'static str),
    /// Stored; the PodSet then has this many (Pending) pods and says so.
    Available(i32),
    /// Stored; the PodSet reports ReplicaFailure with this in the message, and a Warning.
    ReplicaFailure(&'static str),
    /// Stored; the At runs (RUNNING), its pod's command exactly the spec's.
    Running,
    /// Stored; the At waits for its schedule.
    Pending,
    /// Stored; the At's Scheduled condition is False with this reason, message naming the
    /// second string, and a Warning event says so.
    Blocked(&'static str, &'static str),
}

struct Case {
    what: &'static str,
    kind: Kind,
    name: String,
    /// The request body, sent as is.
    body: String,
    expect: Expect,
    /// JSON pointers that must be gone from the stored object (pruned unknown fields).
    pruned: &'static [&'static str],
    /// Whether a failure must also show as a Warning event.
    event: bool,
}

fn api_version(kind: Kind) -> &'static str {
    match kind {
        Kind::PodSet => "app.example.com/v1alpha1",
        Kind::At => "cnat.programming-kubernetes.info/v1alpha1",
    }
}

fn case(what: &'static str, kind: Kind, name: &str, obj: Value, expect: Expect) -> Case {
    let mut obj = obj;
    let defaults = json!({
        "apiVersion": api_version(kind),
        "kind": format!("{kind:?}"),
        "metadata": {"name": name},
    });
    for (k, v) in defaults.as_object().unwrap() {
        obj.as_object_mut()
            .unwrap()
            .entry(k.clone())
            .or_insert(v.clone());
    }
    Case {
        what,
        kind,
        name: name.to_string(),
        body: obj.to_string(),
        expect,
        pruned: &[],
        event: true,
    }
}

fn ps(what: &'static str, i: usize, spec: Value, expect: Expect) -> Case {
    case(
        what,
        Kind::PodSet,
        &format!("bad-ps-{i}"),
        json!({"spec": spec}),
        expect,
    )
}

fn at(what: &'static str, i: usize, spec: Value, expect: Expect) -> Case {
    case(
        what,
        Kind::At,
        &format!("bad-at-{i}"),
        json!({"spec": spec}),
        expect,
    )
}

fn when(schedule: &str) -> Value {
    json!({"schedule": schedule, "command": "echo hi"})
}

fn cases() -> Vec<Case> {
    use Expect::*;
    let long = |n: usize| "a".repeat(n);
    let mib = "x".repeat(1 << 20);
    let with_template = |template: Value| json!({"replicas": 1, "template": template});
    let mut cases = vec![
        ps(
            "replicas a string",
            1,
            json!({"replicas": "3"}),
            Refused(422, "spec.replicas"),
        ),
        ps(
            "replicas a float",
            2,
            json!({"replicas": 2.5}),
            Refused(422, "spec.replicas"),
        ),
        ps(
            "replicas negative",
            3,
            json!({"replicas": -1}),
            Refused(422, "greater than or equal to 1"),
        ),
        ps(
            "replicas zero",
            4,
            json!({"replicas": 0}),
            Refused(422, "greater than or equal to 1"),
        ),
        ps(
            "replicas 11",
            5,
            json!({"replicas": 11}),
            Refused(422, "less than or equal to 10"),
        ),
        ps(
            "replicas 2^31",
            6,
            json!({"replicas": 2147483648u64}),
            Refused(422, "spec.replicas"),
        ),
        ps(
            "replicas 1e20",
            7,
            json!({"replicas": 1e20}),
            Refused(422, "spec.replicas"),
        ),
        ps("replicas null", 8, json!({"replicas": null}), Available(1)),
        case(
            "no spec",
            Kind::PodSet,
            "bad-ps-9",
            json!({}),
            Refused(422, "spec"),
        ),
        ps("spec a string", 10, json!("three"), Refused(422, "spec")),
        ps("spec an array", 11, json!([3]), Refused(422, "spec")),
        Case {
            pruned: &["/spec/surprise"],
            ..ps(
                "unknown spec field",
                12,
                json!({"replicas": 2, "surprise": true}),
                Available(2),
            )
        },
        Case {
            pruned: &["/bogus"],
            ..case(
                "unknown top-level field",
                Kind::PodSet,
                "bad-ps-13",
                json!({"spec": {"replicas": 1}, "bogus": {"x": 1}}),
                Available(1),
            )
        },
        ps(
            "template a number",
            14,
            json!({"template": 5}),
            Refused(422, "spec.template"),
        ),
        ps(
            "template spec without containers",
            15,
            with_template(json!({"spec": {}})),
            Refused(422, "containers"),
        ),
        ps(
            "template with no container",
            16,
            with_template(json!({"spec": {"containers": []}})),
            ReplicaFailure("spec.containers: Required value"),
        ),
        ps(
            "container without image",
            17,
            with_template(json!({"spec": {"containers": [{"name": "c"}]}})),
            ReplicaFailure("image"),
        ),
        ps(
            "1 MiB template annotation",
            18,
            with_template(json!({"metadata": {"annotations": {"big": mib}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]}})),
            ReplicaFailure("Too long"),
        ),
        ps(
            "unicode template label value",
            19,
            with_template(json!({"metadata": {"labels": {"tier": "ünïcødé"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]}})),
            ReplicaFailure("metadata.labels"),
        ),
        ps(
            "unicode template annotation",
            20,
            with_template(
                json!({"metadata": {"annotations": {"note": "héllo ✓ 日本語 🚀"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]}}),
            ),
            Available(1),
        ),
        ps(
            "template restartPolicy Never",
            21,
            with_template(json!({"spec": {"restartPolicy": "Never",
                "containers": [{"name": "c", "image": "busybox"}]}})),
            Available(1),
        ),
        // A name is also the value of the pods' `app` label: the schema caps it at 63.
        case(
            "name of 253 chars",
            Kind::PodSet,
            &long(253),
            json!({"spec": {}}),
            Refused(422, "at most 63 chars"),
        ),
        case(
            "name of 64 chars",
            Kind::PodSet,
            &long(64),
            json!({"spec": {}}),
            Refused(422, "at most 63 chars"),
        ),
        case(
            "name of 254 chars",
            Kind::PodSet,
            &long(254),
            json!({"spec": {}}),
            Refused(422, "must be no more than 253 characters"),
        ),
        case(
            "dotted name of 63 chars",
            Kind::PodSet,
            &format!("a.{}", long(61)),
            json!({"spec": {}}),
            Available(1),
        ),
        case(
            "uppercase name",
            Kind::PodSet,
            "Bad-Name",
            json!({"spec": {}}),
            Refused(422, "RFC 1123"),
        ),
        case(
            "unicode name",
            Kind::PodSet,
            "pödset",
            json!({"spec": {}}),
            Refused(422, "RFC 1123"),
        ),
        case(
            "no name",
            Kind::PodSet,
            "",
            json!({"spec": {}}),
            Refused(422, "name or generateName is required"),
        ),
        case(
            "invalid label on the PodSet",
            Kind::PodSet,
            "bad-ps-28",
            json!({"metadata": {"name": "bad-ps-28", "labels": {"app": "ü ü"}}, "spec": {}}),
            Refused(422, "metadata.labels"),
        ),
        case(
            "status set at create",
            Kind::PodSet,
            "bad-ps-29",
            json!({"spec": {"replicas": 2},
                "status": {"availableReplicas": 10, "podNames": ["fake"]}}),
            Available(2),
        ),
        case(
            "wrong apiVersion",
            Kind::PodSet,
            "bad-ps-30",
            json!({"apiVersion": "app.example.com/v1", "spec": {}}),
            Refused(400, "does not match"),
        ),
        case(
            "wrong kind",
            Kind::PodSet,
            "bad-ps-31",
            json!({"kind": "ReplicaSet", "spec": {}}),
            Refused(422, "must be PodSet"),
        ),
        // The API server's message lists every field error: far longer than an event's note
        // may be (1024 characters).
        ps(
            "twenty invalid containers",
            32,
            with_template(json!({"spec": {"containers": (0..20)
                .map(|i| json!({"name": format!("Container-Number-{i}-Has-An-Invalid-Name"),
                    "image": "busybox"}))
                .collect::<Vec<_>>()}})),
            ReplicaFailure("Invalid value"),
        ),
        at(
            "impossible date",
            1,
            when("2019-02-30T10:00:00Z"),
            Blocked(REASON_INVALID_SCHEDULE, "2019-02-30T10:00:00Z"),
        ),
        at(
            "hour 25",
            2,
            when("2019-04-12T25:00:00Z"),
            Blocked(REASON_INVALID_SCHEDULE, "2019-04-12T25:00:00Z"),
        ),
        at(
            "February 29th, not a leap year",
            3,
            when("2019-02-29T10:00:00Z"),
            Blocked(REASON_INVALID_SCHEDULE, "2019-02-29T10:00:00Z"),
        ),
        at(
            "February 29th, leap year",
            4,
            when("2020-02-29T10:00:00Z"),
            Running,
        ),
        at(
            "a space for the T",
            5,
            when("2019-04-12 10:12:00Z"),
            Refused(422, "spec.schedule"),
        ),
        at(
            "a timezone offset",
            6,
            when("2019-04-12T10:12:00+02:00"),
            Refused(422, "spec.schedule"),
        ),
        at(
            "fractional seconds",
            7,
            when("2019-04-12T10:12:00.5Z"),
            Refused(422, "spec.schedule"),
        ),
        at(
            "a cron expression",
            8,
            when("*/5 * * * *"),
            Refused(422, "spec.schedule"),
        ),
        at(
            "leading space",
            9,
            when(" 2019-04-12T10:12:00Z"),
            Refused(422, "spec.schedule"),
        ),
        at(
            "empty schedule",
            10,
            when(""),
            Refused(422, "spec.schedule"),
        ),
        at(
            "schedule a number",
            11,
            json!({"schedule": 1555063920, "command": "echo"}),
            Refused(422, "spec.schedule"),
        ),
        at(
            "no schedule",
            12,
            json!({"command": "echo hi"}),
            Refused(422, "spec.schedule"),
        ),
        at(
            "no command",
            13,
            json!({"schedule": "2019-04-12T10:12:00Z"}),
            Refused(422, "spec.command"),
        ),
        at(
            "empty command",
            14,
            json!({"schedule": "2019-04-12T10:12:00Z", "command": ""}),
            Refused(422, "spec.command"),
        ),
        at(
            "command a list",
            15,
            json!({"schedule": "2019-04-12T10:12:00Z", "command": ["echo", "hi"]}),
            Refused(422, "spec.command"),
        ),
        at(
            "command a number",
            16,
            json!({"schedule": "2019-04-12T10:12:00Z", "command": 42}),
            Refused(422, "spec.command"),
        ),
        case(
            "spec null",
            Kind::At,
            "bad-at-17",
            json!({"spec": null}),
            Refused(422, "spec"),
        ),
        at(
            "1 MiB command",
            18,
            json!({"schedule": "2019-04-12T10:12:00Z",
            "command": format!("echo {}", "y".repeat(1 << 20))}),
            Running,
        ),
        at(
            "unicode command",
            19,
            json!({"schedule": "2019-04-12T10:12:00Z",
            "command": "echo 'héllo wörld ✓ 日本語 🚀' \u{202e}"}),
            Running,
        ),
        at(
            "shell metacharacters",
            20,
            json!({"schedule": "2019-04-12T10:12:00Z",
            "command": "echo \"$(id)\" `date`; exit 3 && rm -rf / ; #"}),
            Running,
        ),
        at("year 0000", 21, when("0000-01-01T00:00:00Z"), Running),
        at("year 9999", 22, when("9999-12-31T23:59:59Z"), Pending),
        Case {
            pruned: &["/spec/retries"],
            ..at(
                "unknown spec field",
                23,
                json!({"schedule": "2019-04-12T10:12:00Z", "command": "echo", "retries": 3}),
                Running,
            )
        },
        case(
            "status set at create",
            Kind::At,
            "bad-at-24",
            json!({"spec": when("2019-04-12T10:12:00Z"),
                "status": {"phase": "DONE", "succeeded": true}}),
            Running,
        ),
        case(
            "name of 253 chars",
            Kind::At,
            &long(253).replace('a', "b"),
            json!({"spec": when("2019-04-12T10:12:00Z")}),
            Refused(422, "at most 63 chars"),
        ),
        case(
            "name of 100 chars",
            Kind::At,
            &long(100).replace('a', "c"),
            json!({"spec": when("2019-04-12T10:12:00Z")}),
            Refused(422, "at most 63 chars"),
        ),
        case(
            "name of 254 chars",
            Kind::At,
            &long(254).replace('a', "b"),
            json!({"spec": when("2019-04-12T10:12:00Z")}),
            Refused(422, "must be no more than 253 characters"),
        ),
        case(
            "unicode name",
            Kind::At,
            "ät",
            json!({"spec": when("2019-04-12T10:12:00Z")}),
            Refused(422, "RFC 1123"),
        ),
    ];
    cases.push(Case {
        body: format!(
            r#"{{"apiVersion": "{}", "kind": "At", "metadata": {{"name": "bad-at-99"}}, "spec": {{"#,
            api_version(Kind::At)
        ),
        ..case("truncated JSON", Kind::At, "bad-at-99", json!({}), Refused(400, ""))
    });
    cases
}

/// POSTs the raw body; the error's code and message if the API server refuses it.
async fn submit(ns: &TestNs, c: &Case) -> Result<Option<(u16, String)>> {
    let plural = match c.kind {
        Kind::PodSet => "podsets",
        Kind::At => "ats",
    };
    let url = format!(
        "/apis/{}/namespaces/{}/{plural}",
        api_version(c.kind),
        ns.name
    );
    let req = http::Request::post(url)
        .header("content-type", "application/json")
        .body(c.body.clone().into_bytes())?;
    match ns.client.request_text(req).await {
        Ok(_) => Ok(None),
        Err(kube::Error::Api(s)) => Ok(Some((s.code, s.message))),
        Err(e) => Err(e.into()),
    }
}

/// Waits for what the operator should make of an accepted object; a description of it.
async fn handled(ns: &TestNs, c: &Case) -> Result<String> {
    let what = format!("{:?} {:.40}: {:?}", c.kind, c.name, c.expect);
    match c.kind {
        Kind::PodSet => {
            let api = ns.api::<PodSet>();
            poll_some(PROMPTLY, &what, || async {
                let ps = api.get(&c.name).await?;
                let status = ps.status.clone().unwrap_or_default();
                let seen = match &c.expect {
                    Expect::Available(n) => {
                        let pods = ns.pods_of(&ps.uid().unwrap()).await?;
                        let mut names: Vec<_> = pods.iter().map(|p| p.name_any()).collect();
                        names.sort();
                        (status.available_replicas == *n
                            && pods.len() == *n as usize
                            && status.pod_names == names
                            && status.observed_generation == ps.metadata.generation)
                            .then(|| format!("{n} pods available"))
                    }
                    Expect::ReplicaFailure(part) => condition(&ps, CONDITION_REPLICA_FAILURE)
                        .filter(|c| c.0 == "True" && c.2.contains(part))
                        .filter(|_| status.available_replicas == 0)
                        .map(|c| format!("ReplicaFailure {}: {}", c.1, c.2)),
                    other => bail!("no PodSet outcome {other:?}"),
                };
                let warned = match &c.expect {
                    Expect::ReplicaFailure(_) if c.event => {
                        warning(ns, &c.name, "FailedCreate").await?
                    }
                    _ => true,
                };
                match seen {
                    Some(seen) if !warned => {
                        bail!("no FailedCreate Warning event, though the status says {seen}")
                    }
                    seen => Ok(seen),
                }
            })
            .await
        }
        Kind::At => {
            let api = ns.api::<At>();
            poll_some(PROMPTLY, &what, || async {
                let at = api.get(&c.name).await?;
                let status = at.status.clone().unwrap_or_default();
                Ok(match &c.expect {
                    Expect::Running if status.phase == Some(AtPhase::Running) => {
                        let pod = ns.api::<Pod>().get(&format!("{}-pod", c.name)).await?;
                        let command = pod.spec.unwrap().containers[0].command.clone();
                        let want = vec!["sh".into(), "-c".into(), at.spec.command.clone()];
                        if command != Some(want) {
                            bail!("the pod's command is not the At's: {command:.200?}");
                        }
                        Some("RUNNING, the pod's command intact".to_string())
                    }
                    Expect::Pending => {
                        (status.phase == Some(AtPhase::Pending)).then(|| "PENDING".to_string())
                    }
                    Expect::Blocked(reason, part) => {
                        let scheduled = status
                            .conditions
                            .iter()
                            .find(|c| c.type_ == CONDITION_SCHEDULED)
                            .filter(|c| {
                                c.status == "False"
                                    && c.reason == *reason
                                    && c.message.contains(part)
                            });
                        let Some(cond) = scheduled else {
                            return Ok(None);
                        };
                        let seen = format!("Scheduled=False {}: {}", cond.reason, cond.message);
                        if c.event && !warning(ns, &c.name, reason).await? {
                            bail!("no {reason} Warning event, though the status says {seen}");
                        }
                        Some(seen)
                    }
                    _ => None,
                })
            })
            .await
        }
    }
}

/// Whether a Warning event with `reason` was published about the object `name`.
async fn warning(ns: &TestNs, name: &str, reason: &str) -> Result<bool> {
    let events = ns.api::<Event>().list(&ListParams::default()).await?;
    Ok(events.items.iter().any(|e| {
        e.type_.as_deref() == Some("Warning")
            && e.reason.as_deref() == Some(reason)
            && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
    }))
}

/// Checks that the stored object lacks the pruned fields.
async fn pruned(ns: &TestNs, c: &Case) -> Result<()> {
    if c.pruned.is_empty() {
        return Ok(());
    }
    let plural = match c.kind {
        Kind::PodSet => "podsets",
        Kind::At => "ats",
    };
    let url = format!(
        "/apis/{}/namespaces/{}/{plural}/{}",
        api_version(c.kind),
        ns.name,
        c.name
    );
    let stored: Value = ns
        .client
        .request(http::Request::get(url).body(Vec::new())?)
        .await?;
    for pointer in c.pruned {
        if stored.pointer(pointer).is_some() {
            bail!("{pointer} was stored, not pruned");
        }
    }
    Ok(())
}

fn short(s: &str, n: usize) -> String {
    let s = s.replace('\n', " ");
    if s.chars().count() <= n {
        s
    } else {
        format!("{}...", s.chars().take(n).collect::<String>())
    }
}

#[tokio::test]
async fn bad_input_is_refused_or_reported_and_never_crashes_the_operator() -> Result<()> {
    let ns = shared_ns("bad-input").await?;
    let mut operator = ns.start_operator(&[]).await?;
    let cases = cases();
    assert!(cases.len() >= 30);
    let mut outcomes: BTreeMap<usize, (bool, String)> = BTreeMap::new();
    let mut accepted = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        match (submit(&ns, c).await?, &c.expect) {
            (Some((code, message)), Expect::Refused(want, part)) => {
                let ok = code == *want && message.contains(part);
                outcomes.insert(i, (ok, format!("refused {code}: {message}")));
            }
            (Some((code, message)), _) => {
                outcomes.insert(i, (false, format!("refused {code}: {message}")));
            }
            (None, Expect::Refused(..)) => {
                outcomes.insert(i, (false, "accepted".into()));
            }
            (None, _) => accepted.push(i),
        }
    }
    let checks = accepted.iter().map(|&i| {
        let (ns, c) = (&ns, &cases[i]);
        async move {
            let outcome = async {
                pruned(ns, c).await?;
                handled(ns, c).await
            };
            (i, outcome.await)
        }
    });
    for (i, result) in join_all(checks).await {
        let seen = match result {
            Ok(s) => (true, format!("accepted; {s}")),
            Err(e) => (false, format!("accepted; {e:#}")),
        };
        outcomes.insert(i, seen);
    }

    println!("{:<34} {:<6} {:<4} outcome", "case", "kind", "ok");
    for (i, (ok, outcome)) in &outcomes {
        let c = &cases[*i];
        println!(
            "{:<34} {:<6} {:<4} {}",
            c.what,
            format!("{:?}", c.kind),
            if *ok { "yes" } else { "NO" },
            short(outcome, 150)
        );
    }
    operator.assert_healthy();
    let failed: Vec<_> = outcomes
        .iter()
        .filter(|(_, (ok, _))| !ok)
        .map(|(i, (_, outcome))| {
            format!(
                "{:?} {}: expected {:?}, got {}",
                cases[*i].kind,
                cases[*i].what,
                cases[*i].expect,
                short(outcome, 300)
            )
        })
        .collect();
    assert!(
        failed.is_empty(),
        "unexpected outcomes:\n{}",
        failed.join("\n")
    );
    Ok(())
}
