//! Issue 31, item 5: pods that are never scheduled or never start, OOMKilled or evicted. A Pending pod counts as
//! available, so without more a PodSet whose pods can never run shows "2 of 2 available" and
//! an At stays RUNNING with nothing said. The operator tells what the scheduler or kubelet
//! said: the PodSet's `PodsHealthy` and the At's `Completed` conditions, and Warning events,
//! what `kubectl describe` shows. On the node-less cluster; the test plays the scheduler and
//! the kubelet by writing pod status (tests/real_node.rs has the real ones).

use anyhow::Result;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams, PostParams};
use podset_operator::api::{At, AtPhase, PodSet};
use podset_operator::plan::at::{CONDITION_COMPLETED, REASON_FAILED, REASON_STARTED};
use podset_operator::plan::health::{CONDITION_PODS_HEALTHY, REASON_HEALTHY};
use serde_json::json;
use testenv::harness::{
    PROMPTLY, TestNs, at, at_pod_released, cluster_without_nodes, podset, poll_some, set_pod_phase,
};

const NO_NODE: &str =
    "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.";

/// Writes what the scheduler says of a pod no node fits.
async fn unschedulable(ns: &TestNs, pod: &str) -> Result<()> {
    let status = json!({"status": {"phase": "Pending", "conditions": [{"type": "PodScheduled",
        "status": "False", "reason": "Unschedulable", "message": NO_NODE}]}});
    patch_status(ns, pod, status).await
}

/// Writes what the kubelet says of a container whose image it cannot pull.
async fn image_pull_back_off(ns: &TestNs, pod: &str) -> Result<()> {
    let status = json!({"status": {"phase": "Pending", "containerStatuses": [{
        "name": "busybox", "image": "busybox", "imageID": "", "restartCount": 0,
        "ready": false, "state": {"waiting": {"reason": "ImagePullBackOff",
            "message": "Back-off pulling image \"busybox\""}}}]}});
    patch_status(ns, pod, status).await
}

/// Writes what the scheduler and then the kubelet say of a pod that found a node and runs.
async fn runs(ns: &TestNs, pod: &str) -> Result<()> {
    let scheduled = json!({"status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}});
    patch_status(ns, pod, scheduled).await?;
    set_pod_phase(ns, pod, "Running", None).await
}

/// Writes what the kubelet says of a container killed for its memory and now backing off.
async fn oom_killed(ns: &TestNs, pod: &str) -> Result<()> {
    let status = json!({"status": {"phase": "Running", "containerStatuses": [{
        "name": "busybox", "image": "busybox", "imageID": "", "restartCount": 3,
        "ready": false, "state": {"waiting": {"reason": "CrashLoopBackOff",
            "message": "back-off 40s restarting failed container"}},
        "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}]}});
    patch_status(ns, pod, status).await
}

async fn patch_status(ns: &TestNs, pod: &str, status: serde_json::Value) -> Result<()> {
    ns.api::<Pod>()
        .patch_status(pod, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    Ok(())
}

/// Waits for condition `type_` of the object at `get` to show `status` and `reason`, its
/// message containing `part`, and for an event (a Warning if `warning`) with that reason
/// about `name`; the condition's message.
async fn told<F, Fut>(
    ns: &TestNs,
    name: &str,
    get: F,
    (type_, status, reason, part): (&str, &str, &str, &str),
    warning: bool,
) -> Result<String>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<
            Output = Result<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>>,
        >,
{
    let what = format!("{name}: {type_}={status} {reason}, and its event");
    poll_some(PROMPTLY, &what, || async {
        let conditions = get().await?;
        let Some(c) = conditions
            .iter()
            .find(|c| c.type_ == type_ && c.status == status && c.reason == reason)
            .filter(|c| c.message.contains(part))
        else {
            return Ok(None);
        };
        let evented = if warning {
            ns.warned(name, reason, "").await?
        } else {
            ns.told(name, reason).await?
        };
        Ok(evented.then(|| c.message.clone()))
    })
    .await
}

#[tokio::test]
async fn pods_that_cannot_start_are_told_on_the_podset_until_they_run() -> Result<()> {
    let ns = TestNs::new_in(cluster_without_nodes().await?, "trouble-ps").await?;
    let mut operator = ns.start_operator(&["--controllers=podset"]).await?;
    let api = ns.api::<PodSet>();
    api.create(&PostParams::default(), &podset("web", 2))
        .await?;
    let uid = api.get("web").await?.uid().unwrap();
    let pods = poll_some(PROMPTLY, "web's 2 pods", || async {
        let mut names: Vec<String> = ns
            .pods_of(&uid)
            .await?
            .iter()
            .map(|p| p.name_any())
            .collect();
        names.sort();
        Ok((names.len() == 2).then_some(names))
    })
    .await?;
    let conditions = || async {
        let ps = api.get("web").await?;
        Ok(ps.status.unwrap_or_default().conditions)
    };

    unschedulable(&ns, &pods[0]).await?;
    image_pull_back_off(&ns, &pods[1]).await?;
    let message = told(
        &ns,
        "web",
        conditions,
        (
            CONDITION_PODS_HEALTHY,
            "False",
            "Unschedulable",
            "(2 pods in trouble)",
        ),
        true,
    )
    .await?;
    assert_eq!(
        message,
        format!("pod {}: {NO_NODE} (2 pods in trouble)", pods[0])
    );
    let ps = api.get("web").await?;
    assert_eq!(
        ps.status.unwrap().available_replicas,
        2,
        "Pending still counts"
    );

    runs(&ns, &pods[0]).await?;
    told(
        &ns,
        "web",
        conditions,
        (CONDITION_PODS_HEALTHY, "False", "ImagePullBackOff", ""),
        true,
    )
    .await?;
    runs(&ns, &pods[1]).await?;
    told(
        &ns,
        "web",
        conditions,
        (CONDITION_PODS_HEALTHY, "True", REASON_HEALTHY, ""),
        false,
    )
    .await?;
    oom_killed(&ns, &pods[1]).await?;
    let message = told(
        &ns,
        "web",
        conditions,
        (CONDITION_PODS_HEALTHY, "False", "OOMKilled", ""),
        true,
    )
    .await?;
    assert!(message.contains("restarted 3 times"), "{message}");
    operator.assert_healthy();
    Ok(())
}

#[tokio::test]
async fn an_at_whose_pod_cannot_start_says_why_while_running() -> Result<()> {
    let ns = TestNs::new_in(cluster_without_nodes().await?, "trouble-at").await?;
    let mut operator = ns.start_operator(&["--controllers=at"]).await?;
    let api = ns.api::<At>();
    api.create(
        &PostParams::default(),
        &at("yay", "2019-04-12T10:12:00Z", "echo YAY"),
    )
    .await?;
    at_pod_released(&ns, "yay").await?;
    let conditions = || async {
        let at = api.get("yay").await?;
        Ok(at.status.unwrap_or_default().conditions)
    };
    unschedulable(&ns, "yay-pod").await?;
    let message = told(
        &ns,
        "yay",
        conditions,
        (CONDITION_COMPLETED, "False", "Unschedulable", ""),
        true,
    )
    .await?;
    assert_eq!(message, format!("pod yay-pod: {NO_NODE}"));
    runs(&ns, "yay-pod").await?;
    told(
        &ns,
        "yay",
        conditions,
        (CONDITION_COMPLETED, "False", REASON_STARTED, ""),
        false,
    )
    .await?;
    // Evicted while it ran: DONE, not succeeded, the kubelet's words in the message.
    let evicted = json!({"status": {"phase": "Failed", "reason": "Evicted",
        "message": "The node was low on resource: memory."}});
    patch_status(&ns, "yay-pod", evicted).await?;
    let message = told(
        &ns,
        "yay",
        conditions,
        (CONDITION_COMPLETED, "True", REASON_FAILED, ""),
        true,
    )
    .await?;
    assert!(
        message.contains("Evicted: The node was low on resource: memory."),
        "{message}"
    );
    let status = api.get("yay").await?.status.unwrap_or_default();
    assert_eq!(
        (status.phase, status.succeeded),
        (Some(AtPhase::Done), Some(false))
    );
    operator.assert_healthy();
    Ok(())
}
