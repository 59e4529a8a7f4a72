//! Leadership with client-go's guarantees, each against the operator binary under leader
//! election on a real control plane (issue 19, items 3 to 7; issue 20): a deleted Lease is
//! created again, another holder is never written over, a standby times the lease from its own
//! observation, renewals come at their pace, and a leader frozen past its lease sends no write
//! after it thaws; and (item 2) a flood of `/metrics` requests starves neither the Lease nor the
//! pods. `PODSET_OPERATOR_BIN` runs them against another build.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Result, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::ResourceExt;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use podset_operator::api::PodSet;
use testenv::harness::{
    LEASE, Operator, PROMPTLY, TestNs, converged, converged_within, leader_args, lease_holder,
    podset, poll, wait_for_holder,
};
use testenv::{MaxPods, audit};

/// A short lease, so that expiry and takeover happen within a test.
const LEASE_SECONDS: u64 = 6;
/// How long a PodSet waits to converge while the frozen-leader rounds (100 pods each) load
/// the hollow kubelets this binary's tests share.
const CONVERGE_UNDER_LOAD: Duration = Duration::from_secs(180);

async fn replicas(ns: &TestNs, n: usize) -> Result<Vec<Operator>> {
    ns.grant_leader_election().await?;
    let args = leader_args(ns, LEASE_SECONDS);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut started = Vec::new();
    for _ in 0..n {
        let op = ns.start_operator(&args).await?;
        if started.is_empty() {
            wait_for_holder(ns, &[&op]).await?;
        }
        started.push(op);
    }
    Ok(started)
}

/// The requests `op` sent from `since` on, as the audit log shows them.
fn sent_since(ns: &TestNs, op: &Operator, since: SystemTime) -> Result<Vec<audit::Record>> {
    let agent = podset_operator::client::user_agent(&op.instance);
    audit::requests_of_agent_since(ns.cluster.dir(), &agent, since)
}

fn is_write(r: &audit::Record) -> bool {
    !matches!(r.request.verb.as_str(), "get" | "list" | "watch")
}

fn lease_writes_landed(records: &[audit::Record]) -> u64 {
    records
        .iter()
        .filter(|r| r.request.resource == "leases" && is_write(r) && r.request.code < 300)
        .map(|r| r.count)
        .sum()
}

/// Item 3: `kubectl delete lease` under a leader and a standby. Someone must lead again, and a
/// PodSet created after converges.
#[tokio::test]
async fn a_deleted_lease_is_created_again_and_work_goes_on() -> Result<()> {
    let ns = TestNs::new("lease-deleted").await?;
    let ops = replicas(&ns, 2).await?;
    ns.api::<Lease>()
        .delete(LEASE, &DeleteParams::default())
        .await?;
    let deleted = Instant::now();
    ns.api::<PodSet>()
        .create(&PostParams::default(), &podset("after-delete", 2))
        .await?;
    let holder = wait_for_holder(&ns, &[&ops[0], &ops[1]]).await?;
    println!(
        "the Lease was held again by {holder} {:?} after its deletion",
        deleted.elapsed()
    );
    // Beside the frozen-leader rounds, a hollow kubelet may take more than a minute to report
    // a pod Running (a CI run saw it).
    converged_within(CONVERGE_UNDER_LOAD, &ns, "after-delete", 2).await?;
    for mut op in ops {
        op.assert_healthy();
    }
    Ok(())
}

/// Item 4: someone else writes the Lease (holder `usurper`, an hour's lease). The leader stops
/// acting, never writes the Lease again, and never clears the usurper's claim.
#[tokio::test]
async fn another_holders_claim_is_never_written_over() -> Result<()> {
    let ns = TestNs::new("usurper").await?;
    let mut ops = replicas(&ns, 1).await?;
    let now = MicroTime(jiff::Timestamp::now());
    let usurp = serde_json::json!({"spec": {"holderIdentity": "usurper", "acquireTime": now,
        "renewTime": now, "leaseDurationSeconds": 3600}});
    let usurped = SystemTime::now();
    ns.api::<Lease>()
        .patch(LEASE, &PatchParams::default(), &Patch::Merge(usurp))
        .await?;
    let recorder = MaxPods::start(ns.api::<Pod>());
    let after = ns
        .api::<PodSet>()
        .create(&PostParams::default(), &podset("after-usurp", 2))
        .await?;
    poll(PROMPTLY, "the leader stepping down", || async {
        Ok(ops[0].log().contains("stepping down"))
    })
    .await?;
    // An observation window of two leases: a renewal would have come three times in it.
    let window = tokio::time::Instant::now();
    tokio::time::sleep_until(window + Duration::from_secs(2 * LEASE_SECONDS)).await;
    assert_eq!(lease_holder(&ns).await?, "usurper");
    let sent = sent_since(&ns, &ops[0], usurped)?;
    assert_eq!(lease_writes_landed(&sent), 0, "written over: {sent:#?}");
    let made = recorder.snapshot().get(&after.uid().unwrap()).copied();
    assert_eq!(
        made.unwrap_or(0),
        0,
        "the old leader acted after losing its lease"
    );
    ops[0].assert_healthy();
    Ok(())
}

/// Item 5: a Lease whose holder's renewTime says an hour ago, just written. A standby times it
/// from its own observation: it takes over no sooner than a whole lease after it first saw
/// the record, however old the holder's timestamps read.
#[tokio::test]
async fn a_standby_times_the_lease_from_its_own_observation() -> Result<()> {
    let ns = TestNs::new("observed").await?;
    ns.grant_leader_election().await?;
    let an_hour_ago = MicroTime(jiff::Timestamp::now() - jiff::SignedDuration::from_hours(1));
    let lease: Lease = serde_json::from_value(serde_json::json!({
        "metadata": {"name": LEASE},
        "spec": {"holderIdentity": "elsewhere", "acquireTime": an_hour_ago,
            "renewTime": an_hour_ago, "leaseDurationSeconds": LEASE_SECONDS}}))?;
    ns.api::<Lease>()
        .create(&PostParams::default(), &lease)
        .await?;
    let written = Instant::now();
    let args = leader_args(&ns, LEASE_SECONDS);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut standby = ns.start_operator(&args).await?;
    wait_for_holder(&ns, &[&standby]).await?;
    let took = written.elapsed();
    println!("taken {took:?} after the record was written (lease {LEASE_SECONDS} s)");
    ensure!(
        took >= Duration::from_secs(LEASE_SECONDS),
        "taken after {took:?}: timed from the holder's timestamps, not from observing them"
    );
    standby.assert_healthy();
    Ok(())
}

/// Item 7: the leader renews every third of the lease, not back to back: its Lease writes in a
/// minute, from the audit log.
#[tokio::test]
async fn renewals_come_every_third_of_the_lease() -> Result<()> {
    let ns = TestNs::new("renewals").await?;
    let mut ops = replicas(&ns, 2).await?;
    let from = SystemTime::now();
    // The observation window: a minute of renewals, counted afterwards.
    let window = tokio::time::Instant::now();
    tokio::time::sleep_until(window + Duration::from_secs(60)).await;
    let writes = lease_writes_landed(&sent_since(&ns, &ops[0], from)?);
    let expected = 60 / (LEASE_SECONDS / 3);
    println!(
        "the leader's Lease writes in 60 s: {writes} (one every {} s: {expected})",
        LEASE_SECONDS / 3
    );
    ensure!(
        writes >= expected / 2 && writes <= expected + 3,
        "{writes} Lease writes in a minute; expected about {expected}"
    );
    let standby_writes = lease_writes_landed(&sent_since(&ns, &ops[1], from)?);
    assert_eq!(standby_writes, 0, "the standby wrote the Lease");
    for op in &mut ops {
        op.assert_healthy();
    }
    Ok(())
}

/// Issue 20: the leader is frozen (SIGSTOP) until the standby has taken its lease, work is
/// created meanwhile, and the old leader is thawed while the new one is creating. Whichever of
/// its tasks runs first, no write of the old leader reaches the API server after the thaw
/// (its Lease release aside: that is over the version it read, and refused). Four rounds:
/// the race the fence closes was lost about one time in two without it.
#[tokio::test]
async fn a_leader_frozen_past_its_lease_sends_no_write_after_it_thaws() -> Result<()> {
    for round in 0..4 {
        let ns = TestNs::new(&format!("frozen-{round}")).await?;
        let ops = replicas(&ns, 2).await?;
        let (old, new) = (&ops[0], &ops[1]);
        let pid = old.process.pid().expect("running") as i32;
        // SAFETY: plain syscalls on our own child process.
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        let frozen = Instant::now();
        poll(PROMPTLY, "the standby taking the lease", || async {
            Ok(lease_holder(&ns).await? == new.instance)
        })
        .await?;
        let api = ns.api::<PodSet>();
        for i in 0..20 {
            api.create(&PostParams::default(), &podset(&format!("made-{i}"), 5))
                .await?;
        }
        let thawed = SystemTime::now();
        unsafe { libc::kill(pid, libc::SIGCONT) };
        println!(
            "round {round}: thawed {:?} after the freeze",
            frozen.elapsed()
        );
        // 100 pods a round, on hollow kubelets that report Running at their own pace while the
        // flood test beside this one loads the machine: the first PodSet may wait for most of
        // them (a CI run saw more than 60 s).
        for i in 0..20 {
            converged_within(CONVERGE_UNDER_LOAD, &ns, &format!("made-{i}"), 5).await?;
        }
        poll(PROMPTLY, "the old leader stepping down", || async {
            Ok(old.log().contains("stepping down") || old.log().contains("stepped down"))
        })
        .await?;
        let writes: Vec<_> = sent_since(&ns, old, thawed)?
            .into_iter()
            .filter(|r| is_write(r) && r.request.resource != "leases")
            .collect();
        assert!(
            writes.is_empty(),
            "round {round}: the old leader wrote after its thaw: {writes:#?}"
        );
        remove_pods(&ns).await?;
    }
    Ok(())
}

/// Deletes the namespace's PodSets and pods at once, so that the hollow nodes (110 pods each)
/// have room for the next round.
async fn remove_pods(ns: &TestNs) -> Result<()> {
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    ns.api::<PodSet>()
        .delete_collection(&now, &ListParams::default())
        .await?;
    ns.api::<Pod>()
        .delete_collection(&now, &ListParams::default())
        .await?;
    poll(PROMPTLY, "the round's pods gone", || async {
        Ok(ns
            .api::<Pod>()
            .list(&ListParams::default())
            .await?
            .items
            .is_empty())
    })
    .await
}

/// Item 2: `/metrics` flooded with random bearer tokens (anyone who reaches the port can send
/// one) while the leader holds its Lease and scales PodSets. The same work is timed before the
/// flood; under it, the leader keeps its Lease, the PodSets converge, and their pods are made
/// within a generous bound of the time before.
#[tokio::test]
async fn a_metrics_flood_starves_neither_the_lease_nor_the_pods() -> Result<()> {
    // As many as the metrics server takes connections: each keeps one open.
    const FLOODERS: usize = 64;
    let ns = TestNs::new("flood").await?;
    ns.grant_metrics_auth().await?;
    let mut ops = replicas(&ns, 2).await?;
    let leader = lease_holder(&ns).await?;
    let transitions = lease_transitions(&ns).await?;
    // The leader's first term starts after a grace: measured once it is at work.
    scale_up(&ns, "warm").await?;
    let quiet = scale_up(&ns, "quiet").await?;

    let stop = Arc::new(AtomicBool::new(false));
    let port = ops
        .iter()
        .find(|o| o.instance == leader)
        .expect("a leader")
        .metrics_port;
    let from = SystemTime::now();
    let flood: Vec<_> = (0..FLOODERS)
        .map(|i| tokio::spawn(flood_metrics(port, i, stop.clone())))
        .collect();
    let flooded = scale_up(&ns, "flooded").await?;
    let lasted = from.elapsed()?;
    stop.store(true, Ordering::Relaxed);
    let mut answers = BTreeMap::<String, u64>::new();
    for f in flood {
        for (code, n) in f.await? {
            *answers.entry(code).or_default() += n;
        }
    }
    let renewals = lease_writes_landed(&sent_since(&ns, &ops[0], from)?)
        + lease_writes_landed(&sent_since(&ns, &ops[1], from)?);
    println!(
        "{FLOODERS} flooders for {lasted:?}: answers {answers:?}; 4 PodSets of 5 made and named in \
         {flooded:?} under the flood, {quiet:?} before it; {renewals} Lease renewals landed"
    );
    assert_eq!(
        lease_holder(&ns).await?,
        leader,
        "the leader lost its Lease"
    );
    assert_eq!(
        lease_transitions(&ns).await?,
        transitions,
        "leadership changed hands"
    );
    ensure!(
        answers.get("503").is_some_and(|n| *n > 0) && answers.get("401").is_some_and(|n| *n > 0),
        "the flood was neither reviewed nor turned away: {answers:?}"
    );
    // The pods are made under the flood within a generous bound of the time before it, which
    // fails if the flood starves the controller. The 64 flooders take CPU from the operator on
    // 2 shared cores: measured, 4 x 5 pods in 0.16 s before the flood and 0.67 s under it, so
    // the bound's 10 s floor, not its 3x, is the one that holds for runs this short.
    let bound = (quiet * 3).max(quiet + Duration::from_secs(10));
    ensure!(
        flooded <= bound,
        "the pods took {flooded:?} under the flood, {quiet:?} before it: over {bound:?}"
    );
    for op in &mut ops {
        op.assert_healthy();
    }
    Ok(())
}

async fn lease_transitions(ns: &TestNs) -> Result<i32> {
    let lease = ns.api::<Lease>().get(LEASE).await?;
    Ok(lease.spec.and_then(|s| s.lease_transitions).unwrap_or(0))
}

/// Creates 4 PodSets of 5 named after `prefix`: how long until the operator had made their
/// pods and named them in their statuses (the operator's part: the hollow kubelets' reports
/// of Running come at their own pace), then waits for them to converge.
async fn scale_up(ns: &TestNs, prefix: &str) -> Result<Duration> {
    let started = Instant::now();
    let api = ns.api::<PodSet>();
    for i in 0..4 {
        api.create(&PostParams::default(), &podset(&format!("{prefix}-{i}"), 5))
            .await?;
    }
    poll(PROMPTLY, "the pods made and named", || async {
        let list = api.list(&ListParams::default()).await?.items;
        let named = |ps: &&PodSet| ps.status.as_ref().is_some_and(|s| s.pod_names.len() == 5);
        let ours = list.iter().filter(|ps| ps.name_any().starts_with(prefix));
        Ok(ours.filter(named).count() == 4)
    })
    .await?;
    let made = started.elapsed();
    for i in 0..4 {
        converged(ns, &format!("{prefix}-{i}"), 5).await?;
    }
    Ok(made)
}

/// Sends `/metrics` requests, each with a new token, over one kept-alive connection (a new one
/// when the server closes it) until `stop`: the answers by status code, `refused` for a
/// connection the server would not take.
async fn flood_metrics(port: u16, flooder: usize, stop: Arc<AtomicBool>) -> BTreeMap<String, u64> {
    let client = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .build()
        .expect("a client");
    let mut answers = BTreeMap::new();
    for i in 0.. {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let sent = client
            .get(format!("https://127.0.0.1:{port}/metrics"))
            .bearer_auth(format!("flood-{flooder}-{i}"))
            .send()
            .await;
        let code = match sent {
            Ok(r) => r.status().as_u16().to_string(),
            Err(_) => "refused".to_string(),
        };
        *answers.entry(code).or_default() += 1;
    }
    answers
}
