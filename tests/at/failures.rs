//! How an At ends when its command fails or its pod is deleted, and what it does when the
//! pod's name is taken by someone else's pod.

use anyhow::Result;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{DeleteParams, PostParams};
use podset_operator::api::AtPhase;
use podset_operator::plan::at::{
    CONDITION_COMPLETED, CONDITION_SCHEDULED, REASON_FAILED, REASON_POD_NAME_TAKEN,
    REASON_POD_VANISHED,
};
use testenv::harness::{at, set_pod_phase};

use super::{condition, only_pod, setup, status, wait_event, wait_for, wait_phase, wait_started};

#[tokio::test]
async fn failed_and_vanished_pods_end_done_with_failure() -> Result<()> {
    let (ns, mut operator, api) = setup("at-failure").await?;
    // Schedules in the past run at once.
    api.create(
        &PostParams::default(),
        &at("fails", "2019-04-12T10:12:00Z", "exit 3"),
    )
    .await?;
    api.create(
        &PostParams::default(),
        &at("vanishes", "2020-01-01T00:00:00Z", "sleep 3600"),
    )
    .await?;
    let fails = wait_started(&ns, "fails").await?;
    let vanishes = wait_started(&ns, "vanishes").await?;
    only_pod(&ns, &fails).await?;
    only_pod(&ns, &vanishes).await?;

    set_pod_phase(&ns, "fails-pod", "Failed", Some(3)).await?;
    let done = wait_phase(&ns, "fails", AtPhase::Done).await?;
    assert_eq!(status(&done).succeeded, Some(false));
    let completed = condition(&done, CONDITION_COMPLETED).unwrap();
    assert_eq!(
        (completed.0.as_str(), completed.1.as_str()),
        ("True", REASON_FAILED)
    );
    assert!(completed.2.contains("exit code 3"), "{}", completed.2);
    wait_event(&ns, "fails", "Warning", REASON_FAILED).await?;
    // restartPolicy Never: the failed pod stays as it is, for `kubectl logs`.
    assert_eq!(
        only_pod(&ns, &done)
            .await?
            .spec
            .unwrap()
            .restart_policy
            .as_deref(),
        Some("Never")
    );

    // A pod deleted while RUNNING is not recreated: the At ends DONE with a failure.
    ns.api::<Pod>()
        .delete("vanishes-pod", &DeleteParams::default())
        .await?;
    let gone = wait_phase(&ns, "vanishes", AtPhase::Done).await?;
    assert_eq!(status(&gone).succeeded, Some(false));
    assert_eq!(
        condition(&gone, CONDITION_COMPLETED).map(|c| c.1),
        Some(REASON_POD_VANISHED.into())
    );
    wait_event(&ns, "vanishes", "Warning", REASON_POD_VANISHED).await?;
    assert!(
        ns.pods_of(&gone.uid().unwrap()).await?.is_empty(),
        "the command was run again"
    );
    operator.assert_healthy();
    Ok(())
}

#[tokio::test]
async fn someone_elses_pod_with_the_name_is_left_alone() -> Result<()> {
    let (ns, mut operator, api) = setup("at-taken").await?;
    let pods = ns.api::<Pod>();
    let foreign: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "taken-pod", "labels": {"app.kubernetes.io/managed-by": "podset-operator"}},
        "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}]}
    }))?;
    let foreign = pods.create(&PostParams::default(), &foreign).await?;

    api.create(
        &PostParams::default(),
        &at("taken", "2019-04-12T10:12:00Z", "echo mine"),
    )
    .await?;
    let blocked = wait_for(&ns, "taken", "PodNameTaken", |at| {
        condition(at, CONDITION_SCHEDULED).is_some_and(|c| c.1 == REASON_POD_NAME_TAKEN)
    })
    .await?;
    assert_eq!(status(&blocked).phase, Some(AtPhase::Pending));
    wait_event(&ns, "taken", "Warning", REASON_POD_NAME_TAKEN).await?;
    let untouched = pods.get("taken-pod").await?;
    assert_eq!(untouched.uid(), foreign.uid());
    assert!(untouched.owner_references().is_empty());
    assert!(untouched.metadata.deletion_timestamp.is_none());

    // Once the name is free, the retry (with backoff) runs the command.
    pods.delete("taken-pod", &DeleteParams::default()).await?;
    let running = wait_started(&ns, "taken").await?;
    let mine = only_pod(&ns, &running).await?;
    assert_ne!(mine.uid(), foreign.uid());
    operator.assert_healthy();
    Ok(())
}
