//! Pod Security Admission, as current clusters enforce it: in a namespace labelled
//! `pod-security.kubernetes.io/enforce: restricted`, the pods the operator makes (a PodSet's
//! default pods, an At's pod) are admitted; a PodSet whose own template breaks the profile is
//! refused by the API server, and the operator reports that refusal (a ReplicaFailure
//! condition and a Warning event) and retries with a backoff, never in a loop. (The operator's
//! own pods, in a restricted namespace too, are in tests/in_cluster/.)

use anyhow::Result;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use kube::ResourceExt;
use kube::api::PostParams;
use podset_operator::api::{At, AtPhase, PodSet};
use podset_operator::plan::podset::CONDITION_REPLICA_FAILURE;
use testenv::harness::{self, PROMPTLY, TestNs, at, condition, converged, podset, poll_some};

#[tokio::test]
async fn a_restricted_namespace_admits_our_pods_and_reports_a_template_it_refuses() -> Result<()> {
    let ns = TestNs::new("restricted").await?;
    harness::enforce_restricted(&ns.client, &ns.name).await?;
    let mut operator = ns.start_operator(&[]).await?;

    ns.api::<PodSet>()
        .create(&PostParams::default(), &podset("fine", 2))
        .await?;
    converged(&ns, "fine", 2).await?;

    let ats = ns.api::<At>();
    ats.create(
        &PostParams::default(),
        &at("now", "2019-04-12T10:12:00Z", "echo restricted"),
    )
    .await?;
    let started = poll_some(PROMPTLY, "the At RUNNING with its pod", || async {
        let at = ats.get("now").await?;
        let running = at.status.as_ref().and_then(|s| s.phase) == Some(AtPhase::Running);
        Ok(running.then_some(at))
    })
    .await?;
    let pod = started.status.and_then(|s| s.pod_name).unwrap_or_default();
    poll_some(PROMPTLY, "the At's pod admitted", || async {
        Ok(ns.api::<Pod>().get_opt(&pod).await?)
    })
    .await?;

    let mut privileged = podset("privileged", 1);
    privileged.spec.template = Some(serde_json::from_value::<Box<PodTemplateSpec>>(
        serde_json::json!({"spec": {"containers": [{
            "name": "c", "image": "busybox", "command": ["sleep", "3600"],
            "securityContext": {"privileged": true}}]}}),
    )?);
    let ps = ns
        .api::<PodSet>()
        .create(&PostParams::default(), &privileged)
        .await?;
    let refusal = poll_some(
        PROMPTLY,
        "ReplicaFailure with the API server's PodSecurity refusal",
        || async {
            let ps = ns.api::<PodSet>().get("privileged").await?;
            Ok(condition(&ps, CONDITION_REPLICA_FAILURE)
                .filter(|(status, reason, msg)| {
                    status == "True"
                        && reason == "FailedCreate"
                        && msg.contains("violates PodSecurity \"restricted:latest\"")
                })
                .map(|c| c.2))
        },
    )
    .await?;
    assert!(refusal.contains("privileged"), "{refusal}");
    harness::failed_creates_back_off(&ns).await?;
    assert!(ns.pods_of(&ps.uid().unwrap()).await?.is_empty());
    operator.assert_healthy();
    Ok(())
}
