//! The operator as a production process: probes, Prometheus metrics, graceful shutdown and
//! leader election, each run as the operator binary under its own ServiceAccount.

use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use podset_operator::api::PodSet;
use podset_operator::rbac;
use testenv::harness::{
    LEASE, Operator, PROMPTLY, TestNs, converged, leader_args, lease_holder, own_cluster,
    own_cluster_ns, podset, poll, poll_some, wait_for_holder,
};
use testenv::{MaxPods, audit};

async fn get(port: u16, path: &str) -> Result<(u16, String)> {
    let resp = reqwest::get(format!("http://127.0.0.1:{port}{path}")).await?;
    Ok((resp.status().as_u16(), resp.text().await?))
}

async fn start(ns: &TestNs, args: &[String]) -> Result<Operator> {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ns.start_operator(&args).await
}

#[tokio::test]
async fn probes_and_metrics_report_the_truth() -> Result<()> {
    let ns = TestNs::new("observe").await?;
    let token = ns.scraper().await?;
    let mut op = ns.start_operator(&["--controllers=podset"]).await?;
    poll(PROMPTLY, "/readyz 200 once the caches synced", || async {
        Ok(get(op.health_port, "/readyz")
            .await
            .is_ok_and(|(code, _)| code == 200))
    })
    .await?;
    assert_eq!(get(op.health_port, "/livez").await?.0, 200);

    ns.api::<PodSet>()
        .create(&PostParams::default(), &podset("metered", 2))
        .await?;
    converged(&ns, "metered", 2).await?;
    let metrics = poll_some(
        PROMPTLY,
        "managed_pods to show 2 running PodSet pods",
        || async {
            let m = op.scrape(&token).await?;
            let running =
                m.get(r#"podset_operator_managed_pods{owner_kind="PodSet",state="running"}"#);
            Ok((running == Some(&2.0)).then_some(m))
        },
    )
    .await?;
    let value = |series: &str| {
        metrics
            .get(series)
            .copied()
            .ok_or_else(|| anyhow!("no {series} in {metrics:#?}"))
    };
    assert_eq!(
        value(&format!(
            r#"podset_operator_build_info{{version="{}"}}"#,
            env!("CARGO_PKG_VERSION")
        ))?,
        1.0
    );
    assert_eq!(value("podset_operator_leader")?, 1.0);
    assert_eq!(value("podset_operator_leader_transitions_total")?, 1.0);
    assert_eq!(value("podset_operator_fence_refusals_total")?, 0.0);
    assert_eq!(value("podset_operator_podsets_unconverged")?, 0.0);
    // controller-runtime's names and labels.
    let reconciled = |result| {
        value(&format!(
            r#"controller_runtime_reconcile_total{{controller="podset",result="{result}"}}"#
        ))
    };
    assert!(reconciled("success").or(reconciled("requeue_after"))? >= 1.0);
    assert!(
        value(r#"controller_runtime_reconcile_time_seconds_count{controller="podset"}"#)? >= 1.0
    );
    assert_eq!(
        value(r#"controller_runtime_active_workers{controller="podset"}"#)?,
        0.0
    );
    assert!(value(r#"workqueue_adds_total{controller="podset",name="podset"}"#)? >= 1.0);
    assert!(
        value(r#"workqueue_queue_duration_seconds_count{controller="podset",name="podset"}"#)?
            >= 1.0
    );
    assert_eq!(
        value(r#"workqueue_depth{controller="podset",name="podset"}"#)?,
        0.0
    );
    // client-go's: two pod creates, a status write and an event at least; list/watch GETs.
    let requests = |labels| value(&format!("rest_client_requests_total{{{labels}}}"));
    assert!(requests(r#"code="201",method="POST",resource="pods""#)? >= 2.0);
    assert!(requests(r#"code="200",method="PATCH",resource="podsets/status""#)? >= 1.0);
    assert!(requests(r#"code="200",method="GET",resource="pods""#)? >= 1.0);
    op.assert_healthy();
    Ok(())
}

#[tokio::test]
async fn metrics_answer_only_callers_allowed_to_get_them() -> Result<()> {
    let ns = TestNs::new("guarded").await?;
    let token = ns.scraper().await?;
    ns.create_service_account("nosy").await?;
    let nosy = ns.cluster.service_account_token(&ns.name, "nosy").await?;
    let op = ns.start_operator(&["--controllers=podset"]).await?;
    let (code, _) = poll_some(PROMPTLY, "/metrics to listen", || async {
        Ok(op.get_metrics(None).await.ok())
    })
    .await?;
    assert_eq!(code, 401, "no token");
    assert_eq!(op.get_metrics(Some("not-a-token")).await?.0, 401);
    let (code, body) = op.get_metrics(Some(&nosy)).await?;
    assert_eq!(code, 403, "{body}");
    assert!(
        body.contains(&format!("system:serviceaccount:{}:nosy", ns.name)),
        "{body}"
    );
    let (code, body) = op.get_metrics(Some(&token)).await?;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("podset_operator_build_info"), "{body}");
    let plain = reqwest::get(format!("http://127.0.0.1:{}/metrics", op.metrics_port)).await;
    assert!(plain.is_err(), "plain HTTP on the HTTPS port: {plain:?}");

    // Only where the operator is told to, for local development.
    let dev = ns
        .start_operator(&["--controllers=podset", "--metrics-secure=false"])
        .await?;
    let (code, body) = poll_some(PROMPTLY, "plain /metrics", || async {
        Ok(get(dev.metrics_port, "/metrics").await.ok())
    })
    .await?;
    assert_eq!(code, 200, "{body}");
    Ok(())
}

#[tokio::test]
async fn sigterm_releases_the_lease_and_the_standby_takes_over_at_once() -> Result<()> {
    let ns = TestNs::new("handover").await?;
    ns.grant_leader_election().await?;
    let token = ns.scraper().await?;
    let args = leader_args(&ns, 15);
    let mut first = start(&ns, &args).await?;
    assert_eq!(wait_for_holder(&ns, &[&first]).await?, first.instance);
    let mut second = start(&ns, &args).await?;

    // The standby is ready (healthy, only waiting) but not leading.
    poll(PROMPTLY, "the standby's /readyz", || async {
        Ok(get(second.health_port, "/readyz")
            .await
            .is_ok_and(|(code, _)| code == 200))
    })
    .await?;
    assert_eq!(
        second.scrape(&token).await?.get("podset_operator_leader"),
        Some(&0.0)
    );

    ns.api::<PodSet>()
        .create(&PostParams::default(), &podset("handed-over", 2))
        .await?;
    converged(&ns, "handed-over", 2).await?;
    assert_standby_wrote_only_its_lease(&ns, &second).await?;

    let sigterm = Instant::now();
    let status = first
        .terminate()
        .ok_or_else(|| anyhow!("the leader did not exit within 15 s of SIGTERM"))?;
    assert!(status.success(), "exit status after SIGTERM: {status}");
    let log = first.log();
    assert!(log.contains("released the leader lease"), "{log}");
    poll(PROMPTLY, "the standby to hold the lease", || async {
        Ok(lease_holder(&ns).await? == second.instance)
    })
    .await?;
    let takeover = sigterm.elapsed();
    println!("takeover after the leader's SIGTERM: {takeover:?} (lease duration 15 s)");
    // Waiting for the lease to expire would take well over 10 s.
    assert!(
        takeover < Duration::from_secs(5),
        "takeover took {takeover:?}: the lease was not released"
    );

    // The new leader works.
    ns.api::<PodSet>()
        .patch(
            "handed-over",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": 4}})),
        )
        .await?;
    converged(&ns, "handed-over", 4).await?;
    second.assert_healthy();
    Ok(())
}

/// Someone else writes the Lease while the leader holds it (a standby that judged it expired,
/// an administrator): the leader must stop acting at once, not at its next renewal, a third of
/// the lease later, while the new holder acts too.
#[tokio::test]
async fn a_leader_whose_lease_is_taken_stops_acting_at_once() -> Result<()> {
    let ns = TestNs::new("usurped").await?;
    ns.grant_leader_election().await?;
    let mut leader = start(&ns, &leader_args(&ns, 30)).await?;
    wait_for_holder(&ns, &[&leader]).await?;
    let api = ns.api::<PodSet>();
    api.create(&PostParams::default(), &podset("before", 1))
        .await?;
    converged(&ns, "before", 1).await?;

    // Taken within the first renew interval (the start-up grace and a scale-up into it): the
    // leader's first renewal is 10 s after it took the lease.
    let leases = ns.api::<Lease>();
    let now = MicroTime(jiff::Timestamp::now());
    let usurp = serde_json::json!({"spec": {"holderIdentity": "usurper", "acquireTime": now,
        "renewTime": now, "leaseDurationSeconds": 3600}});
    leases
        .patch(LEASE, &PatchParams::default(), &Patch::Merge(usurp))
        .await?;
    let usurped = std::time::Instant::now();
    // Seen through its Lease watch: until then the leader cannot know, and may act.
    poll(PROMPTLY, "the leader seeing the usurper", || async {
        Ok(leader
            .log()
            .contains("names another holder or was deleted; stepping down"))
    })
    .await?;
    println!("the leader saw the usurper within {:?}", usurped.elapsed());
    let recorder = MaxPods::start(ns.api::<Pod>());
    let after = api
        .create(&PostParams::default(), &podset("after", 2))
        .await?;
    poll(PROMPTLY, "the old leader stepping down", || async {
        Ok(leader.log().contains("stepped down"))
    })
    .await?;
    let made = recorder.snapshot().get(&after.uid().unwrap()).copied();
    assert_eq!(
        made.unwrap_or(0),
        0,
        "the old leader acted after losing its lease"
    );
    leader.assert_healthy();
    Ok(())
}

/// What a standby sent, as the API server's audit log shows it (by its User-Agent): reads and
/// writes of its Lease, the reviews that authorize a metrics scrape, and, warm (the default),
/// the list and watch of the operator's pods. Never a write of a pod, a status or an event:
/// the leader acts alone.
async fn assert_standby_wrote_only_its_lease(ns: &TestNs, standby: &Operator) -> Result<()> {
    let agent = podset_operator::client::user_agent(&standby.instance);
    let sent_of = |sent: &[audit::Record], resource: &str, verb: &str| {
        sent.iter()
            .any(|r| r.request.resource == resource && r.request.verb == verb)
    };
    // A standby starts watching the pods after the start-up grace, which a quick scale-up
    // can beat: wait for its watch, then look at everything it sent.
    let sent = poll_some(
        PROMPTLY,
        "the standby's pod watch in the audit log",
        || async {
            let sent = audit::requests_of_agent(ns.cluster.dir(), &agent)?;
            Ok(sent_of(&sent, "pods", "watch").then_some(sent))
        },
    )
    .await?;
    let kinds: Vec<String> = sent
        .iter()
        .map(|r| {
            format!(
                "{} {} x{}",
                r.request.verb,
                r.request.rbac_resource(),
                r.count
            )
        })
        .collect();
    println!("the standby sent: {}", kinds.join(", "));
    assert!(
        sent_of(&sent, "leases", "get"),
        "no read of the Lease by the standby in the audit log: {sent:#?}"
    );
    let allowed = ["leases", "tokenreviews", "subjectaccessreviews"];
    let reads = ["list", "watch"];
    let other: Vec<_> = sent
        .iter()
        .filter(|r| !allowed.contains(&r.request.resource.as_str()))
        .filter(|r| !(r.request.resource == "pods" && reads.contains(&r.request.verb.as_str())))
        .collect();
    assert!(other.is_empty(), "the standby sent {other:#?}");
    Ok(())
}

#[tokio::test]
async fn standby_finishes_the_scale_up_when_the_leader_is_killed() -> Result<()> {
    let ns = TestNs::new("failover").await?;
    ns.grant_leader_election().await?;
    let lease_seconds = 8;
    let args = leader_args(&ns, lease_seconds);
    let mut a = start(&ns, &args).await?;
    let mut b = start(&ns, &args).await?;
    let holder = wait_for_holder(&ns, &[&a, &b]).await?;
    let (leader, standby) = if holder == a.instance {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };

    let recorder = MaxPods::start(ns.api::<Pod>());
    let api = ns.api::<PodSet>();
    let mut uids = Vec::new();
    for i in 0..10 {
        uids.push(
            api.create(&PostParams::default(), &podset(&format!("fo-{i}"), 10))
                .await?
                .uid()
                .unwrap(),
        );
    }
    let pods: Api<Pod> = ns.api();
    poll(PROMPTLY, "the scale-up to be under way", || async {
        Ok(pods.list(&ListParams::default()).await?.items.len() >= 20)
    })
    .await?;
    leader.kill();
    let killed = Instant::now();
    poll(
        Duration::from_secs(90),
        "all 10 PodSets at 10 available",
        || async {
            let list = api.list(&ListParams::default()).await?;
            Ok(list.items.len() == 10
                && list.items.iter().all(|ps| {
                    ps.status
                        .as_ref()
                        .is_some_and(|s| s.available_replicas == 10)
                }))
        },
    )
    .await?;
    println!(
        "converged {:?} after SIGKILL of the leader (lease duration {lease_seconds} s)",
        killed.elapsed()
    );
    assert_eq!(lease_holder(&ns).await?, standby.instance);
    assert_eq!(pods.list(&ListParams::default()).await?.items.len(), 100);
    let max = recorder.snapshot();
    for uid in &uids {
        let m = max.get(uid).copied().unwrap_or(0);
        assert!(m <= 10, "a PodSet had {m} pods at once across the failover");
    }
    standby.assert_healthy();
    Ok(())
}

/// A controller whose watch fails (here a 403 on Ats: its account lacks the rules) says so
/// at warn level, naming the controller, instead of at debug (kube's watcher warns too, but
/// names neither the controller nor what stops working).
#[tokio::test]
async fn a_failing_watch_is_logged_as_a_warning() -> Result<()> {
    let ns = TestNs::new("watch-403").await?;
    let account = "no-ats";
    ns.create_service_account(account).await?;
    let rules = rbac::rules()
        .into_iter()
        .filter(|r| {
            !r.resources
                .iter()
                .flatten()
                .any(|res| res.starts_with("ats"))
        })
        .collect();
    let role = k8s_openapi::api::rbac::v1::Role {
        metadata: kube::api::ObjectMeta {
            name: Some(account.into()),
            ..Default::default()
        },
        rules: Some(rules),
    };
    ns.grant_role(account, role).await?;
    let mut operator = ns.start_operator_as(account, &[]).await?;
    poll(PROMPTLY, "a WARN line about the At watch", || async {
        Ok(operator.log_lines().iter().any(|line| {
            line["level"] == "WARN"
                && line["controller"] == "at"
                && line["error"]
                    .as_str()
                    .is_some_and(|e| e.contains("forbidden"))
        }))
    })
    .await?;
    operator.assert_healthy();
    Ok(())
}

/// An API server restart is a fault both replicas ride out: neither exits (each retries
/// within its deadlines; a leader that steps down waits for the lease again), one leads
/// afterwards, and it acts.
#[tokio::test]
async fn an_apiserver_restart_leaves_both_replicas_running_and_one_leading() -> Result<()> {
    const OUTAGE: Duration = Duration::from_secs(3);
    let mut ns = own_cluster_ns("elect-restart", &[]).await?;
    ns.grant_leader_election().await?;
    let args = leader_args(&ns, 8);
    let mut a = start(&ns, &args).await?;
    let mut b = start(&ns, &args).await?;
    wait_for_holder(&ns, &[&a, &b]).await?;
    let cluster = own_cluster(&mut ns)?;
    cluster.stop("kube-apiserver")?;
    tokio::time::sleep(OUTAGE).await; // the fault's length, not a wait
    cluster.restart("kube-apiserver").await?;
    wait_for_holder(&ns, &[&a, &b]).await?;
    let api = ns.api::<PodSet>();
    api.create(&PostParams::default(), &podset("after", 3))
        .await?;
    poll(PROMPTLY, "the leader to scale a new PodSet", || async {
        let ps = api.get("after").await?;
        Ok(ps.status.is_some_and(|s| s.available_replicas == 3))
    })
    .await?;
    a.assert_healthy();
    b.assert_healthy();
    Ok(())
}
