//! When an At runs: PENDING until its schedule, RUNNING within a second of it, then DONE;
//! alone or twenty due in the same second.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Result, bail};
use futures::TryStreamExt;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use podset_operator::api::at::SPEC_FROZEN_MESSAGE;
use podset_operator::api::{At, AtPhase};
use podset_operator::plan::at::{
    CONDITION_COMPLETED, CONDITION_SCHEDULED, REASON_SCHEDULED, REASON_STARTED, REASON_SUCCEEDED,
};
use testenv::harness::{PROMPTLY, at, poll, set_pod_phase};

use super::{
    condition, events_about, only_pod, setup, status, wait_event, wait_phase, wait_started,
};

/// How late RUNNING may be observed after the schedule (the issue: within a second).
const PUNCTUALITY: Duration = Duration::from_secs(1);

/// A schedule `secs` to `secs + 1` seconds ahead, on a whole second as the format demands.
fn schedule_in(secs: i64) -> (String, Timestamp) {
    let due = Timestamp::from_second(Timestamp::now().as_second() + secs + 1).unwrap();
    (due.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(), due)
}

/// Watches the namespace's Ats and returns, for each of `names`, when it was first seen
/// RUNNING (or DONE) and whether it was ever seen PENDING before.
async fn watch_starts(
    api: Api<At>,
    names: Vec<String>,
) -> Result<HashMap<String, (Timestamp, bool)>> {
    let mut pending_seen = HashMap::new();
    let mut started = HashMap::new();
    let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()).applied_objects());
    let watching = async {
        while let Some(at) = stream.try_next().await? {
            let name = at.name_any();
            match status(&at).phase {
                Some(AtPhase::Pending) => {
                    pending_seen.insert(name, true);
                }
                Some(AtPhase::Running | AtPhase::Done) if names.contains(&name) => {
                    let was_pending = pending_seen.get(&name).copied().unwrap_or(false);
                    started
                        .entry(name)
                        .or_insert((Timestamp::now(), was_pending));
                    if started.len() == names.len() {
                        return Ok(());
                    }
                }
                _ => {}
            }
        }
        bail!("the At watch ended")
    };
    match tokio::time::timeout(PROMPTLY, watching).await {
        Ok(result) => result?,
        Err(_) => bail!(
            "only {} of {} Ats started: {:?}",
            started.len(),
            names.len(),
            started.keys()
        ),
    }
    Ok(started)
}

#[tokio::test]
async fn runs_once_at_its_schedule_then_done_with_success() -> Result<()> {
    let (ns, mut operator, api) = setup("at-success").await?;
    let (schedule, due) = schedule_in(4);
    let starts = tokio::spawn(watch_starts(api.clone(), vec!["hello".into()]));
    let created = api
        .create(
            &PostParams::default(),
            &at("hello", &schedule, "echo YAY; echo done"),
        )
        .await?;

    // PENDING, with no pod, until the schedule.
    let pending = wait_phase(&ns, "hello", AtPhase::Pending).await?;
    assert_eq!(
        condition(&pending, CONDITION_SCHEDULED).map(|c| (c.0, c.1)),
        Some(("True".into(), REASON_SCHEDULED.into()))
    );
    assert!(
        ns.pods_of(&created.uid().unwrap()).await?.is_empty(),
        "a pod before the schedule"
    );

    // RUNNING within a second of the schedule, never before it.
    let (seen, was_pending) = starts.await??["hello"];
    let lateness = seen.duration_since(due);
    eprintln!("hello: RUNNING observed {lateness:#} after its schedule {schedule}");
    assert!(was_pending, "the At was never seen PENDING");
    assert!(
        lateness >= SignedDuration::ZERO,
        "started {lateness:#} early"
    );
    assert!(
        lateness < SignedDuration::try_from(PUNCTUALITY)?,
        "started {lateness:#} late"
    );

    let running = wait_started(&ns, "hello").await?;
    let pod = only_pod(&ns, &running).await?;
    let st = status(&running);
    assert_eq!(st.pod_name.as_deref(), Some("hello-pod"));
    let start = st.start_time.expect("startTime").0;
    assert!(
        start >= due && start.duration_since(due) <= SignedDuration::from_secs(1),
        "startTime {start} vs {due}"
    );
    assert_eq!(
        condition(&running, CONDITION_COMPLETED).map(|c| c.1),
        Some(REASON_STARTED.into())
    );

    // The pod: one shell command, run once, restricted, controlled by the At.
    let spec = pod.spec.clone().unwrap();
    assert_eq!(
        spec.containers[0].command.as_deref().unwrap(),
        ["sh", "-c", "echo YAY; echo done"]
    );
    assert_eq!(
        spec.containers[0].image.as_deref(),
        Some(podset_operator::api::BUSYBOX_IMAGE)
    );
    assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
    assert_eq!(spec.automount_service_account_token, Some(false));
    assert_eq!(pod.labels().get("app").map(String::as_str), Some("hello"));
    let owner = &pod.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("At", created.uid().unwrap().as_str())
    );
    assert_eq!(
        (owner.controller, owner.block_owner_deletion),
        (Some(true), Some(true))
    );

    set_pod_phase(&ns, "hello-pod", "Running", None).await?;
    set_pod_phase(&ns, "hello-pod", "Succeeded", Some(0)).await?;
    let done = wait_phase(&ns, "hello", AtPhase::Done).await?;
    let st = status(&done);
    assert_eq!(st.succeeded, Some(true));
    assert!(st.completion_time.is_some_and(|t| t.0 >= start));
    let completed = condition(&done, CONDITION_COMPLETED).unwrap();
    assert_eq!(
        (completed.0.as_str(), completed.1.as_str()),
        ("True", REASON_SUCCEEDED)
    );
    assert!(completed.2.contains("exit code 0"), "{}", completed.2);
    for reason in [REASON_SCHEDULED, REASON_STARTED, REASON_SUCCEEDED] {
        wait_event(&ns, "hello", "Normal", reason).await?;
    }
    assert!(
        events_about(&ns, "hello")
            .await?
            .iter()
            .all(|(t, _)| t == "Normal")
    );

    // DONE is final: the API server refuses a new schedule and command (the CRD's rule), and
    // the command does not run again.
    let again = api
        .patch(
            "hello",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"schedule": "2019-04-12T10:12:00Z", "command": "echo AGAIN"}})),
        )
        .await;
    assert!(
        matches!(&again, Err(kube::Error::Api(s)) if s.code == 422 && s.message.contains(SPEC_FROZEN_MESSAGE)),
        "{again:?}"
    );
    let done = api.get("hello").await?;
    assert_eq!(done.spec.shell_line(), Some("echo YAY; echo done"));
    assert_eq!(
        only_pod(&ns, &done).await?.uid(),
        pod.uid(),
        "the command ran again"
    );

    // Deleting the At garbage-collects its pod.
    api.delete("hello", &DeleteParams::default()).await?;
    let pods = ns.api::<Pod>();
    poll(
        Duration::from_secs(90),
        "hello-pod to be garbage-collected",
        || async { Ok(pods.get_opt("hello-pod").await?.is_none()) },
    )
    .await?;
    operator.assert_healthy();
    Ok(())
}

#[tokio::test]
async fn many_ats_due_in_the_same_second_each_get_one_pod() -> Result<()> {
    const N: usize = 20;
    let (ns, mut operator, api) = setup("at-many").await?;
    let (schedule, due) = schedule_in(5);
    let names: Vec<String> = (0..N).map(|i| format!("at-{i:02}")).collect();
    let starts = tokio::spawn(watch_starts(api.clone(), names.clone()));
    for name in &names {
        api.create(
            &PostParams::default(),
            &at(name, &schedule, &format!("echo {name}")),
        )
        .await?;
    }
    let starts = starts.await??;
    let latest = starts
        .values()
        .map(|(t, _)| t.duration_since(due))
        .max()
        .unwrap();
    let earliest = starts
        .values()
        .map(|(t, _)| t.duration_since(due))
        .min()
        .unwrap();
    eprintln!(
        "{N} Ats due at {schedule}: RUNNING observed between {earliest:#} and {latest:#} after it"
    );
    assert!(
        earliest >= SignedDuration::ZERO,
        "an At started {earliest:#} early"
    );
    assert!(
        latest < SignedDuration::try_from(PUNCTUALITY)?,
        "an At started {latest:#} late"
    );
    for name in &names {
        let at = wait_started(&ns, name).await?;
        let pod = only_pod(&ns, &at).await?;
        assert_eq!(
            pod.spec.unwrap().containers[0].command.as_deref().unwrap(),
            ["sh", "-c", &format!("echo {name}")]
        );
    }
    let all = ns.api::<Pod>().list(&ListParams::default()).await?;
    assert_eq!(
        all.items.len(),
        N,
        "pods: {:?}",
        all.items.iter().map(|p| p.name_any()).collect::<Vec<_>>()
    );
    operator.assert_healthy();
    Ok(())
}
