//! An operator restart while an At is RUNNING, and an At created while the operator is down.

use anyhow::Result;
use kube::ResourceExt;
use kube::api::PostParams;
use podset_operator::api::AtPhase;
use testenv::harness::{at, set_pod_phase};

use super::{only_pod, setup, status, wait_phase, wait_started};

fn sample() -> Result<podset_operator::api::at::v1alpha1::At> {
    Ok(serde_yaml::from_str(&std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/samples/cnat_v1alpha1_at.yaml"
    ))?)?)
}

#[tokio::test]
async fn operator_restart_while_running_keeps_one_pod() -> Result<()> {
    let (ns, mut operator, api) = setup("at-restart").await?;
    // The book's sample: `echo YAY`, scheduled in 2019, so it runs at once.
    ns.api().create(&PostParams::default(), &sample()?).await?;
    let running = wait_started(&ns, "example-at").await?;
    let pod = only_pod(&ns, &running).await?;
    assert_eq!(
        pod.spec.clone().unwrap().containers[0]
            .command
            .as_deref()
            .unwrap(),
        ["sh", "-c", "echo YAY"]
    );

    operator.kill();
    // Created (and due) while the operator is down: it runs as soon as the operator is back.
    api.create(
        &PostParams::default(),
        &at("while-down", "2019-04-12T10:12:00Z", "true"),
    )
    .await?;
    operator.restart()?;

    let later = wait_started(&ns, "while-down").await?;
    only_pod(&ns, &later).await?;
    let still = api.get("example-at").await?;
    assert_eq!(
        status(&still),
        status(&running),
        "the restarted operator rewrote a RUNNING status"
    );
    assert_eq!(only_pod(&ns, &still).await?.uid(), pod.uid());

    set_pod_phase(&ns, "example-at-pod", "Succeeded", Some(0)).await?;
    let done = wait_phase(&ns, "example-at", AtPhase::Done).await?;
    assert_eq!(status(&done).succeeded, Some(true));
    assert_eq!(only_pod(&ns, &done).await?.uid(), pod.uid());
    operator.assert_healthy();
    Ok(())
}
