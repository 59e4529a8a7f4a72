//! Network faults between the operator and the API server, injected by testenv's fault proxy
//! (issue 11): replies lost after their requests were forwarded, during a large scale-up; a
//! leader whose connection hangs. A PodSet must never exceed its spec, every one converges,
//! and a hung leader stops acting before a standby can take over.

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use futures::future::try_join_all;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{ListParams, PostParams};
use podset_operator::api::PodSet;
use testenv::MaxPods;
use testenv::connect_proxy::ConnectProxy;
use testenv::harness::{
    Operator, PROMPTLY, TestNs, cluster_without_nodes, leader_args, lease_holder, podset, poll,
    seeded_rng, wait_for_holder,
};
use testenv::proxy::{Fault, FaultProxy};

const PODSETS: usize = 200;
const REPLICAS: usize = 2;

/// Every PodSet has exactly its pods, named in its status.
async fn all_converged(ns: &TestNs) -> Result<bool> {
    let podsets = ns.api::<PodSet>().list(&ListParams::default()).await?.items;
    let pods = ns.api::<Pod>().list(&ListParams::default()).await?.items;
    let live = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none());
    Ok(live.count() == PODSETS * REPLICAS
        && podsets.len() == PODSETS
        && podsets.iter().all(|ps| {
            ps.status.as_ref().is_some_and(|s| {
                s.pod_names.len() == REPLICAS && s.available_replicas == REPLICAS as i32
            })
        }))
}

#[tokio::test]
async fn replies_lost_during_a_scale_up_never_take_a_podset_over_its_spec() -> Result<()> {
    let mut rng = seeded_rng("replies_lost_during_a_scale_up");
    let ns = TestNs::new_in(cluster_without_nodes().await?, "lost-replies").await?;
    let proxy = FaultProxy::start(ns.cluster.api_addr()).await?;
    let mut operator = ns
        .start_operator_through(&proxy, &["--controllers=podset"])
        .await?;
    let recorder = MaxPods::start(ns.api::<Pod>());
    let api = ns.api::<PodSet>();
    let start = Instant::now();
    let created = try_join_all((0..PODSETS).map(|i| {
        let api = api.clone();
        async move {
            let ps = podset(&format!("lr-{i:03}"), REPLICAS as i32);
            api.create(&PostParams::default(), &ps).await
        }
    }))
    .await?;
    let uids: Vec<String> = created.iter().filter_map(|ps| ps.uid()).collect();

    // The fault strikes at a random point of the scale-up, for a random while.
    let strike = rng.usize(PODSETS / 4..PODSETS);
    let outage = Duration::from_millis(rng.u64(500..3000));
    let pods = ns.api::<Pod>();
    poll(PROMPTLY, &format!("{strike} pods made"), || async {
        Ok(pods.list(&ListParams::default()).await?.items.len() >= strike)
    })
    .await?;
    proxy.set(Fault::ResetReplies);
    tokio::time::sleep(outage).await; // the fault's length, not a wait
    proxy.set(Fault::Pass);
    let healed = Instant::now();

    poll(Duration::from_secs(120), "every PodSet converged", || {
        all_converged(&ns)
    })
    .await?;
    eprintln!(
        "{PODSETS} PodSets of {REPLICAS}: replies lost for {outage:?} from pod {strike}; \
         converged {:?} after the network healed, {:?} after the start",
        healed.elapsed(),
        start.elapsed()
    );
    // Evidence that the fault hit requests in flight, not an idle connection.
    let failures = operator.log().matches("pods failed").count();
    eprintln!("{failures} rounds of creates or deletes failed under the fault");
    assert!(failures > 0, "no request was caught by the fault");
    let max = recorder.snapshot();
    for uid in &uids {
        let most = max.get(uid).copied().unwrap_or(0);
        assert!(most <= REPLICAS, "a PodSet had {most} pods at once");
    }
    operator.assert_healthy();
    Ok(())
}

/// Issue 46: a cluster reached only through the kubeconfig's `proxy-url` was not reached at
/// all (the operator's own HTTP stack ignored it). The walkthrough's PodSet converges with
/// every connection tunnelled to the API server.
#[tokio::test]
async fn the_api_server_is_reached_through_the_kubeconfigs_proxy() -> Result<()> {
    let ns = TestNs::new_in(cluster_without_nodes().await?, "proxy-url").await?;
    let proxy = ConnectProxy::start().await?;
    let mut operator = ns
        .start_operator_via(&proxy, &["--controllers=podset"])
        .await?;
    ns.api::<PodSet>()
        .create(&PostParams::default(), &podset("via-proxy", 3))
        .await?;
    poll(
        PROMPTLY,
        "the PodSet converged through the proxy",
        || async {
            let ps = ns.api::<PodSet>().get("via-proxy").await?;
            Ok(ps.status.is_some_and(|s| s.pod_names.len() == 3))
        },
    )
    .await?;
    let asked = proxy.asked();
    let api = ns.cluster.api_addr();
    ensure!(!asked.is_empty(), "nothing went through the proxy");
    for head in &asked {
        ensure!(head.starts_with("CONNECT "), "{head}");
        ensure!(head.contains(&format!(":{} ", api.port())), "{head}");
    }
    operator.assert_healthy();
    Ok(())
}

/// When the operator first logged a line whose message contains `what`.
fn logged_at(operator: &Operator, what: &str) -> Option<Timestamp> {
    operator.log_lines().iter().find_map(|line| {
        line["message"].as_str()?.contains(what).then_some(())?;
        line["timestamp"].as_str()?.parse().ok()
    })
}

/// Two operators electing a leader on an 8 s lease: the leader through a fault proxy, the
/// standby direct.
struct Leaders {
    ns: TestNs,
    proxy: FaultProxy,
    proxied: Operator,
    standby: Operator,
}

const LEASE_SECONDS: u64 = 8;

impl Leaders {
    async fn start(label: &str) -> Result<Self> {
        let ns = TestNs::new_in(cluster_without_nodes().await?, label).await?;
        ns.grant_leader_election().await?;
        let args = leader_args(&ns, LEASE_SECONDS);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let proxy = FaultProxy::start(ns.cluster.api_addr()).await?;
        let proxied = ns.start_operator_through(&proxy, &args).await?;
        wait_for_holder(&ns, &[&proxied]).await?;
        let standby = ns.start_operator(&args).await?;
        Ok(Self {
            ns,
            proxy,
            proxied,
            standby,
        })
    }
}

/// The leader's connection hangs (its renewals, its writes, its watches) mid scale-up. It
/// must step down before its lease can expire, the standby takes over and finishes, no
/// PodSet exceeds its spec, and the old leader goes back to waiting as a standby, even while
/// its connection still hangs.
#[tokio::test]
async fn a_hung_leader_steps_down_before_the_standby_takes_over() -> Result<()> {
    let Leaders {
        ns,
        proxy,
        proxied: mut hung,
        mut standby,
    } = Leaders::start("hung-leader").await?;

    let recorder = MaxPods::start(ns.api::<Pod>());
    let api = ns.api::<PodSet>();
    let created = try_join_all((0..20).map(|i| {
        let api = api.clone();
        async move {
            api.create(&PostParams::default(), &podset(&format!("hl-{i:02}"), 5))
                .await
        }
    }))
    .await?;
    let pods = ns.api::<Pod>();
    poll(PROMPTLY, "the scale-up under way", || async {
        Ok(pods.list(&ListParams::default()).await?.items.len() >= 10)
    })
    .await?;
    proxy.set(Fault::Hang);
    poll(Duration::from_secs(60), "the standby leading", || async {
        Ok(lease_holder(&ns).await? == standby.instance)
    })
    .await?;
    poll(Duration::from_secs(60), "all 20 PodSets at 5", || async {
        let list = api.list(&ListParams::default()).await?.items;
        Ok(list.iter().all(|ps| {
            ps.status
                .as_ref()
                .is_some_and(|s| s.available_replicas == 5)
        }))
    })
    .await?;
    // Still hung: stepping down must not wait on the hung connection (its Lease release).
    poll(PROMPTLY, "the hung leader back to waiting", || async {
        Ok(logged_at(&hung, "back to waiting for the lease").is_some())
    })
    .await?;
    proxy.set(Fault::Pass);

    let stepped_down = logged_at(&hung, "; stepping down");
    let took_over = logged_at(&standby, "became the leader");
    eprintln!("hung leader stepped down at {stepped_down:?}; the standby led from {took_over:?}");
    let (Some(stepped_down), Some(took_over)) = (stepped_down, took_over) else {
        anyhow::bail!("no step-down ({stepped_down:?}) or no takeover ({took_over:?}) logged");
    };
    assert!(
        stepped_down < took_over,
        "the hung leader stepped down at {stepped_down}, after the standby took over at {took_over}"
    );
    let max = recorder.snapshot();
    for uid in created.iter().filter_map(|ps| ps.uid()) {
        let most = max.get(&uid).copied().unwrap_or(0);
        assert!(most <= 5, "a PodSet had {most} pods at once");
    }
    assert_eq!(pods.list(&ListParams::default()).await?.items.len(), 100);
    hung.assert_healthy();
    standby.assert_healthy();
    Ok(())
}

/// The leader is cut off (every connection refused) until it steps down, so its Lease release
/// fails too; then the network heals before the Lease expires. The old leader no longer acts
/// and must not keep the Lease alive either (its lease manager still believes it leads): one
/// instance must lead and act again.
#[tokio::test]
async fn a_leader_that_could_not_release_its_lease_does_not_keep_it() -> Result<()> {
    let Leaders {
        ns,
        proxy,
        proxied: mut cut,
        mut standby,
    } = Leaders::start("unreleased").await?;

    proxy.set(Fault::Refuse);
    poll(
        PROMPTLY,
        "the cut-off leader failing to release",
        || async { Ok(logged_at(&cut, "could not release the leader lease").is_some()) },
    )
    .await?;
    // Healed with the Lease still unexpired: its holder is still the old leader.
    proxy.set(Fault::Pass);
    let healed = Instant::now();

    let api = ns.api::<PodSet>();
    api.create(&PostParams::default(), &podset("after-heal", 3))
        .await?;
    let lease = Duration::from_secs(LEASE_SECONDS);
    poll(
        3 * lease,
        "a PodSet created after the heal at 3",
        || async {
            let ps = api.get("after-heal").await?;
            Ok(ps.status.is_some_and(|s| s.available_replicas == 3))
        },
    )
    .await?;
    let holder = lease_holder(&ns).await?;
    let leading = [&cut, &standby]
        .into_iter()
        .find(|op| op.instance == holder)
        .ok_or_else(|| anyhow::anyhow!("the Lease is held by {holder:?}, neither instance"))?;
    let terms = leading.log().matches("became the leader").count();
    eprintln!(
        "{holder} leads (term {terms} of its own) {:?} after the heal",
        healed.elapsed()
    );
    // The old leader's first term ended at the step-down: leading again is a second one.
    assert!(
        holder != cut.instance || terms == 2,
        "{holder} holds the Lease without leading"
    );
    cut.assert_healthy();
    standby.assert_healthy();
    Ok(())
}

/// Issue 19, item 1: every connection the operator has open goes silent for good (a path
/// that died without a reset: no byte, no error), while new connections work. Its watches and
/// any request on those connections must be found dead and the work moved to new connections:
/// 20 new PodSets of 3 converge. (The ReplicaSet controller, under the same fault, converged
/// its ReplicaSets in 49 s; client-go's HTTP/2 health check found the dead path.)
#[tokio::test]
async fn connections_that_go_silent_are_dropped_and_the_work_goes_on() -> Result<()> {
    let ns = TestNs::new_in(cluster_without_nodes().await?, "blackhole").await?;
    let proxy = FaultProxy::start(ns.cluster.api_addr()).await?;
    let mut operator = ns
        .start_operator_through(&proxy, &["--controllers=podset"])
        .await?;
    let api = ns.api::<PodSet>();
    api.create(&PostParams::default(), &podset("before", 2))
        .await?;
    poll(PROMPTLY, "the first PodSet at 2", || async {
        let ps = api.get("before").await?;
        Ok(ps.status.is_some_and(|s| s.available_replicas == 2))
    })
    .await?;

    proxy.set(Fault::Blackhole);
    let silenced = Instant::now();
    for i in 0..20 {
        api.create(&PostParams::default(), &podset(&format!("after-{i}"), 3))
            .await?;
    }
    // The reads' health check finds the dead path (a PING after 15 s silent, unanswered in
    // 10 s); writes after it go on new connections. A write already on a dead connection
    // waits out its deadline. (Before HTTP/2 the read timeout alone found it: 61 s.)
    use podset_operator::client::{PING_AFTER_IDLE, PING_TIMEOUT, REQUEST_TIMEOUT};
    let within = PING_AFTER_IDLE + PING_TIMEOUT + REQUEST_TIMEOUT;
    poll(
        within,
        "20 PodSets created after the fault, converged",
        || async {
            let mut done = 0;
            for ps in api.list(&ListParams::default()).await?.items {
                let ready = ps
                    .status
                    .as_ref()
                    .is_some_and(|s| s.available_replicas == 3);
                done += usize::from(ps.name_any().starts_with("after-") && ready);
            }
            Ok(done == 20)
        },
    )
    .await?;
    println!(
        "20 PodSets of 3 converged {:?} after every open connection went silent",
        silenced.elapsed()
    );
    operator.assert_healthy();
    Ok(())
}
