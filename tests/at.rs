//! The At (cnat) operator end to end, on a real control plane without scheduler or nodes:
//! pods stay unscheduled and the test plays the kubelet, moving them through Running to
//! Succeeded or Failed by writing `pods/status`.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Result, bail};
use futures::TryStreamExt;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use podset_operator::api::at::{SCHEDULE_MESSAGE, SPEC_FROZEN_MESSAGE};
use podset_operator::api::{At, AtPhase, AtStatus};
use podset_operator::plan::at::{
    CONDITION_COMPLETED, CONDITION_SCHEDULED, REASON_FAILED, REASON_POD_NAME_TAKEN,
    REASON_POD_VANISHED, REASON_SCHEDULED, REASON_STARTED, REASON_STARTING, REASON_SUCCEEDED,
};
use testenv::harness::{
    Operator, PROMPTLY, TestNs, at, cluster_without_nodes, poll, poll_some, set_pod_phase,
};

/// How late RUNNING may be observed after the schedule (the issue: within a second).
const PUNCTUALITY: Duration = Duration::from_secs(1);

/// A namespace on the node-less cluster, with the At controller running in it.
async fn setup(prefix: &str) -> Result<(TestNs, Operator, Api<At>)> {
    let ns = TestNs::new_in(cluster_without_nodes().await?, prefix).await?;
    let operator = ns.start_operator(&["--controllers=at"]).await?;
    let api = ns.api::<At>();
    Ok((ns, operator, api))
}

fn sample() -> Result<At> {
    Ok(serde_yaml::from_str(&std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/samples/cnat_v1alpha1_at.yaml"
    ))?)?)
}

/// A schedule `secs` to `secs + 1` seconds ahead, on a whole second as the format demands.
fn schedule_in(secs: i64) -> (String, Timestamp) {
    let due = Timestamp::from_second(Timestamp::now().as_second() + secs + 1).unwrap();
    (due.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(), due)
}

fn status(at: &At) -> AtStatus {
    at.status.clone().unwrap_or_default()
}

/// (status, reason, message) of a condition.
fn condition(at: &At, type_: &str) -> Option<(String, String, String)> {
    status(at)
        .conditions
        .into_iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status, c.reason, c.message))
}

async fn wait_for(ns: &TestNs, name: &str, what: &str, check: impl Fn(&At) -> bool) -> Result<At> {
    let api = ns.api::<At>();
    poll_some(PROMPTLY, &format!("at {name}: {what}"), || async {
        let at = api.get(name).await?;
        Ok(check(&at).then_some(at))
    })
    .await
}

/// RUNNING with its pod made: RUNNING alone is written before the pod is created.
async fn wait_started(ns: &TestNs, name: &str) -> Result<At> {
    wait_for(ns, name, "RUNNING with its pod created", |at| {
        status(at).phase == Some(AtPhase::Running)
            && condition(at, CONDITION_COMPLETED).is_some_and(|(_, r, _)| r == REASON_STARTED)
    })
    .await
}

async fn wait_phase(ns: &TestNs, name: &str, phase: AtPhase) -> Result<At> {
    wait_for(ns, name, &format!("phase {phase:?}"), |at| {
        status(at).phase == Some(phase)
    })
    .await
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

/// The At's pods, which must be exactly one, named `<at>-pod`.
async fn only_pod(ns: &TestNs, at: &At) -> Result<Pod> {
    let mut pods = ns.pods_of(&at.uid().unwrap()).await?;
    if pods.len() != 1 {
        bail!(
            "at {} has {} pods: {:?}",
            at.name_any(),
            pods.len(),
            pods.iter().map(|p| p.name_any()).collect::<Vec<_>>()
        );
    }
    let pod = pods.remove(0);
    assert_eq!(pod.name_any(), format!("{}-pod", at.name_any()));
    Ok(pod)
}

/// (type, reason) of the events about `name`.
async fn events_about(ns: &TestNs, name: &str) -> Result<Vec<(String, String)>> {
    let events = ns.api::<Event>().list(&ListParams::default()).await?;
    Ok(events
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| (e.type_.unwrap_or_default(), e.reason.unwrap_or_default()))
        .collect())
}

async fn wait_event(ns: &TestNs, name: &str, type_: &str, reason: &str) -> Result<()> {
    poll(
        PROMPTLY,
        &format!("{type_} event {reason} about {name}"),
        || async {
            Ok(events_about(ns, name)
                .await?
                .iter()
                .any(|(t, r)| t == type_ && r == reason))
        },
    )
    .await
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
    assert_eq!(spec.containers[0].image.as_deref(), Some("busybox"));
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
    for reason in [
        REASON_SCHEDULED,
        REASON_STARTING,
        REASON_STARTED,
        REASON_SUCCEEDED,
    ] {
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
    assert_eq!(done.spec.command, "echo YAY; echo done");
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
async fn operator_restart_while_running_keeps_one_pod() -> Result<()> {
    let (ns, mut operator, api) = setup("at-restart").await?;
    // The book's sample: `echo YAY`, scheduled in 2019, so it runs at once.
    api.create(&PostParams::default(), &sample()?).await?;
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

/// The API server itself refuses an At that can never run as written (its schema, and CEL
/// rules where the schema cannot say it) and a change to an At whose command has run or is
/// running; it admits everything else, a spec edit while PENDING included.
#[tokio::test]
async fn the_api_server_refuses_what_cannot_run_and_edits_after_pending() -> Result<()> {
    let (ns, mut operator, api) = setup("at-invalid").await?;
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
