//! What the API server admits: the schema and CEL rules on a new At, and spec edits only
//! while PENDING, at the book's version (v1alpha1, through the conversion webhook) as the
//! seeds write it.

use anyhow::{Result, bail};
use kube::api::{Patch, PatchParams, PostParams};
use podset_operator::api::AtPhase;
use podset_operator::api::at::v1alpha1::At;
use podset_operator::api::at::{SCHEDULE_MESSAGE, SPEC_FROZEN_MESSAGE};
use podset_operator::plan::at::{CONDITION_SCHEDULED, REASON_SCHEDULED};
use testenv::harness::alpha_at as at;

use super::{condition, only_pod, setup, wait_phase, wait_started};

/// The API server itself refuses an At that can never run as written (its schema, and CEL
/// rules where the schema cannot say it) and a change to an At whose command has run or is
/// running; it admits everything else, a spec edit while PENDING included.
#[tokio::test]
async fn the_api_server_refuses_what_cannot_run_and_edits_after_pending() -> Result<()> {
    let (ns, mut operator, _) = setup("at-invalid").await?;
    let api = ns.api::<At>();
    let refused = |result: kube::Result<At>, part: &str| match result {
        Err(kube::Error::Api(s)) if s.code == 422 && s.message.contains(part) => Ok(s.message),
        other => bail!("expected 422 Invalid naming {part:?}, got {other:?}"),
    };

    refused(
        api.create(
            &PostParams::default(),
            &at("shape", "tomorrow at noon", "true"),
        )
        .await,
        "spec.schedule",
    )?;
    refused(
        api.create(
            &PostParams::default(),
            &at("empty", "2019-04-12T10:12:00Z", ""),
        )
        .await,
        "spec.command",
    )?;
    // The right shape, but no such day or hour: a CEL rule, the pattern cannot tell.
    for (name, day) in [
        ("feb30", "2019-02-30T10:00:00Z"),
        ("feb29", "2019-02-29T10:00:00Z"),
        ("hour25", "2019-04-12T25:00:00Z"),
    ] {
        let message = refused(
            api.create(&PostParams::default(), &at(name, day, "echo never"))
                .await,
            SCHEDULE_MESSAGE,
        )?;
        assert!(message.contains("spec.schedule"), "{message}");
    }
    api.create(
        &PostParams::default(),
        &at("leap", "2020-02-29T10:00:00Z", "echo leap"),
    )
    .await?;

    // PENDING: the spec may change, and the change is what runs.
    api.create(
        &PostParams::default(),
        &at("far", "3000-01-01T00:00:00Z", "echo later"),
    )
    .await?;
    let far = wait_phase(&ns, "far", AtPhase::Pending).await?;
    assert_eq!(
        condition(&far, CONDITION_SCHEDULED).map(|c| c.1),
        Some(REASON_SCHEDULED.into())
    );
    let edit = |schedule: &str, command: &str| {
        Patch::Merge(serde_json::json!({"spec": {"schedule": schedule, "command": command}}))
    };
    api.patch(
        "far",
        &PatchParams::default(),
        &edit("2019-04-12T10:12:00Z", "echo sooner"),
    )
    .await?;
    let running = wait_started(&ns, "far").await?;
    let pod = only_pod(&ns, &running).await?;
    assert_eq!(
        pod.spec.unwrap().containers[0].command.as_deref().unwrap(),
        ["sh", "-c", "echo sooner"]
    );

    // RUNNING: a spec edit (`kubectl edit` of the schedule) is refused with the reason, not
    // stored and silently ignored; other edits (a label) still pass.
    let message = refused(
        api.patch(
            "far",
            &PatchParams::default(),
            &edit("3000-01-01T00:00:00Z", "echo again"),
        )
        .await,
        SPEC_FROZEN_MESSAGE,
    )?;
    assert!(message.contains("Forbidden"), "{message}");
    let labelled = api
        .patch(
            "far",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {"team": "a"}}})),
        )
        .await?;
    assert_eq!(labelled.spec.command, "echo sooner");
    operator.assert_healthy();
    Ok(())
}
