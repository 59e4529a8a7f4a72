//! Issue 59's At at v1beta1 on a real node, its pods really run: a template's Secret, own
//! ServiceAccount and downward API reach the command; a schedule is read in its time zone; an
//! active deadline stops the command; a TTL deletes the DONE At with its pod; `containerName`
//! picks the verdict; another controller's gate is left to it; kubectl shows the Zone column.

use std::time::Duration;

use anyhow::{Result, anyhow, bail, ensure};
use futures::{StreamExt, TryStreamExt};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;
use kube::api::{Api, LogParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use podset_operator::api::at::time_zone;
use podset_operator::api::{At, AtPhase};
use podset_operator::plan::at::{
    CONDITION_COMPLETED, CONDITION_SCHEDULED, REASON_DEADLINE_EXCEEDED,
};
use podset_operator::plan::kstatus::{CONDITION_READY, CONDITION_STALLED};
use serde_json::{Value, json};
use testenv::harness::{self, Operator, PROMPTLY, TestNs, poll_some};

use super::{kubectl, namespace};

/// A namespace on the real node, the At controller watching it.
async fn watched(prefix: &str) -> Result<(TestNs, Operator)> {
    let ns = namespace(prefix).await?;
    let op = ns.start_operator(&["--controllers=at"]).await?;
    Ok((ns, op))
}

/// Creates At `name` at v1beta1 as a user writes it: the spec's `fields`, its template's pod
/// spec `pod`, due at once unless `fields` names a schedule. The API of Ats.
async fn create(ns: &TestNs, name: &str, fields: Value, pod: Value) -> Result<Api<At>> {
    let mut spec = json!({"schedule": "2019-04-12T10:12:00Z", "template": {"spec": pod}});
    if let (Some(spec), Value::Object(fields)) = (spec.as_object_mut(), fields) {
        spec.extend(fields);
    }
    let at: At = serde_json::from_value(json!({
        "apiVersion": "cnat.programming-kubernetes.info/v1beta1", "kind": "At",
        "metadata": {"name": name}, "spec": spec,
    }))?;
    let api = ns.api::<At>();
    api.create(&PostParams::default(), &at).await?;
    Ok(api)
}

/// A container `name` running `line` through `sh -c`.
fn shell(name: &str, line: &str) -> Value {
    json!({"name": name, "command": ["sh", "-c", line]})
}

/// A pod spec of one container, `busybox`, running `line`.
fn one(line: &str) -> Value {
    json!({"containers": [shell("busybox", line)]})
}

fn phase(at: &At) -> Option<AtPhase> {
    at.status.as_ref().and_then(|s| s.phase)
}

fn condition<'a>(at: &'a At, type_: &str) -> Option<&'a Condition> {
    let status = at.status.as_ref();
    status.and_then(|s| s.conditions.iter().find(|c| c.type_ == type_))
}

/// Whether condition `type_` is True with `reason`.
fn holds(at: &At, type_: &str, reason: &str) -> bool {
    condition(at, type_).is_some_and(|c| c.status == "True" && c.reason == reason)
}

/// Waits for At `name` to be DONE; the At then.
async fn done(api: &Api<At>, name: &str) -> Result<At> {
    poll_some(PROMPTLY, &format!("at {name} DONE"), || async {
        let a = api.get(name).await?;
        Ok((phase(&a) == Some(AtPhase::Done)).then_some(a))
    })
    .await
}

/// Waits for pod `name` to run its command.
async fn running(ns: &TestNs, name: &str) -> Result<()> {
    harness::poll(PROMPTLY, &format!("pod {name} running"), || async {
        let pod = ns.api::<Pod>().get_opt(name).await?;
        Ok(pod.is_some_and(|p| harness::phase(&p) == "Running"))
    })
    .await
}

/// Waits for pod `name` to end (Succeeded or Failed); the pod then.
async fn ended(ns: &TestNs, name: &str) -> Result<Pod> {
    poll_some(PROMPTLY, &format!("pod {name} ended"), || async {
        let pod = ns.api::<Pod>().get(name).await?;
        let over = matches!(harness::phase(&pod).as_str(), "Succeeded" | "Failed");
        Ok(over.then_some(pod))
    })
    .await
}

/// What container `container` of pod `pod` printed, through the API server.
async fn log(ns: &TestNs, pod: &str, container: &str) -> Result<String> {
    let params = LogParams {
        container: Some(container.into()),
        ..Default::default()
    };
    Ok(ns.api::<Pod>().logs(pod, &params).await?)
}

fn stamp(at: Option<Time>) -> Result<Timestamp> {
    at.map(|t| t.0).ok_or_else(|| anyhow!("no time recorded"))
}

/// The template's Secret (`secretKeyRef`) and ServiceAccount (`serviceAccountName`, read back
/// through the downward API) reach the command, which prints both; `kubectl wait
/// --for=condition=Ready` returns once it succeeded, and the status describes the generation.
#[tokio::test]
async fn a_template_runs_with_its_secret_and_service_account_and_is_ready() -> Result<()> {
    let (ns, _op) = watched("beta-env").await?;
    let secret = "create secret generic greeting --from-literal=word=open-sesame-59";
    kubectl(&ns, &secret.split(' ').collect::<Vec<_>>()).await?;
    ns.create_service_account("runner").await?;
    let mut container = shell("busybox", "echo \"word=$WORD sa=$SA\"");
    container["env"] = json!([
        {"name": "WORD", "valueFrom": {"secretKeyRef": {"name": "greeting", "key": "word"}}},
        {"name": "SA", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}},
    ]);
    let pod = json!({"serviceAccountName": "runner", "containers": [container]});
    let made = Timestamp::now();
    let api = create(&ns, "greet", json!({}), pod).await?;
    // Started with the At just made: it returns only once Ready is True.
    let wait = "wait --for=condition=Ready at/greet --timeout=120s";
    kubectl(&ns, &wait.split(' ').collect::<Vec<_>>()).await?;
    let waited = Timestamp::now().duration_since(made);
    let at = api.get("greet").await?;
    let status = at.status.clone().unwrap_or_default();
    ensure!(phase(&at) == Some(AtPhase::Done), "{status:?}");
    assert_eq!(status.succeeded, Some(true));
    assert!(holds(&at, CONDITION_READY, "Succeeded"), "{status:?}");
    assert_eq!(status.observed_generation, at.metadata.generation);
    ended(&ns, "greet-pod").await?;
    let printed = log(&ns, "greet-pod", "busybox").await?;
    println!("kubectl wait: Ready {waited:?} after the create; the log: {printed:?}");
    assert_eq!(printed, "word=open-sesame-59 sa=runner\n");
    Ok(())
}

/// A schedule without `Z` is Berlin's local time under `timeZone: Europe/Berlin`: the At
/// says the UTC instant it names, leaves PENDING no earlier (its pod made at it or after, its
/// command run then), and promptly.
#[tokio::test]
async fn a_local_schedule_runs_at_its_time_zones_time() -> Result<()> {
    let (ns, _op) = watched("beta-zone").await?;
    let berlin = time_zone("Europe/Berlin").map_err(anyhow::Error::msg)?;
    // Whole seconds, the schedule's resolution; far enough ahead to be seen PENDING.
    let due = Timestamp::from_second(Timestamp::now().as_second() + 10)?;
    let local = format!("{}", due.to_zoned(berlin).strftime("%Y-%m-%dT%H:%M:%S"));
    let utc = due.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    ensure!(!utc.starts_with(&local), "Berlin's time is UTC's: {local}");
    let fields = json!({"schedule": local, "timeZone": "Europe/Berlin"});
    let api = create(&ns, "berlin", fields, one("date -u +%s")).await?;
    let (message, seen) = poll_some(PROMPTLY, "berlin scheduled", || async {
        let a = api.get("berlin").await?;
        let pending = phase(&a) == Some(AtPhase::Pending);
        let scheduled = condition(&a, CONDITION_SCHEDULED).filter(|_| pending);
        Ok(scheduled.map(|c| (c.message.clone(), Timestamp::now())))
    })
    .await?;
    ensure!(seen < due, "first seen PENDING after {utc}");
    ensure!(message.contains(&format!("{utc} ({local} Europe/Berlin)")));
    let (left, at) = poll_some(PROMPTLY, "berlin out of PENDING", || async {
        let a = api.get("berlin").await?;
        let out = matches!(phase(&a), Some(AtPhase::Running | AtPhase::Done));
        Ok(out.then(|| (Timestamp::now(), a)))
    })
    .await?;
    let status = at.status.clone().unwrap_or_default();
    let pod = ended(&ns, "berlin-pod").await?;
    let created = stamp(pod.metadata.creation_timestamp.clone())?;
    let ran: i64 = log(&ns, "berlin-pod", "busybox").await?.trim().parse()?;
    let late = left.duration_since(due);
    println!(
        "Europe/Berlin {local} = {utc}: left PENDING {late:?} after it, pod created {:?} after, command ran {} s after",
        created.duration_since(due),
        ran - due.as_second()
    );
    ensure!(left >= due && created >= due, "left PENDING before {utc}");
    ensure!(stamp(status.start_time.clone())? >= due && ran >= due.as_second());
    ensure!(late <= SignedDuration::from_secs(5), "{late:?} late");
    Ok(())
}

/// An active deadline stops a command that runs past it: its pod deleted (its command told
/// to stop), the At DONE, failed, DeadlineExceeded, Stalled, within 3 s of the deadline; and
/// the pod's end afterwards does not change that status.
#[tokio::test]
async fn an_active_deadline_stops_a_long_command() -> Result<()> {
    let (ns, _op) = watched("beta-active").await?;
    let line = "trap 'exit 143' TERM; sleep 3600 & wait";
    let fields = json!({"activeDeadlineSeconds": 6});
    let api = create(&ns, "long", fields, one(line)).await?;
    let pods = ns.api::<Pod>();
    running(&ns, "long-pod").await?;
    let stopped = done(&api, "long").await?;
    let seen_done = Timestamp::now();
    let status = stopped.status.clone().unwrap_or_default();
    let started = stamp(status.start_time.clone())?;
    let ran = stamp(status.completion_time.clone())?.duration_since(started);
    let gone = poll_some(PROMPTLY, "the long pod gone", || async {
        Ok(pods
            .get_opt("long-pod")
            .await?
            .is_none()
            .then(Timestamp::now))
    })
    .await?;
    let pod_gone = gone.duration_since(seen_done);
    println!(
        "activeDeadlineSeconds 6: DONE {ran:?} after the start, its pod gone {pod_gone:?} after DONE"
    );
    assert_eq!(status.succeeded, Some(false));
    for type_ in [CONDITION_COMPLETED, CONDITION_STALLED] {
        let exceeded = holds(&stopped, type_, REASON_DEADLINE_EXCEEDED);
        ensure!(exceeded, "{type_} is not DeadlineExceeded: {status:?}");
    }
    let bound = SignedDuration::from_secs(6)..=SignedDuration::from_secs(9);
    ensure!(bound.contains(&ran), "stopped {ran:?} after its start");
    let after = api.get("long").await?.status;
    assert_eq!(after, Some(status), "the status moved once the pod ended");
    Ok(())
}

/// `ttlSecondsAfterFinished` deletes the DONE At that long after its completion, its pod
/// with it.
#[tokio::test]
async fn a_ttl_deletes_the_done_at_with_its_pod_after_it() -> Result<()> {
    let (ns, _op) = watched("beta-ttl").await?;
    let fields = json!({"ttlSecondsAfterFinished": 5});
    let api = create(&ns, "brief", fields, one("echo done")).await?;
    let finished = done(&api, "brief").await?;
    let pod = ns.api::<Pod>().get_opt("brief-pod").await?;
    ensure!(pod.is_some(), "DONE without its pod");
    expires(&ns, &finished, 5).await
}

/// The TTL holds for an At an operator finds ended as it starts (its pod ended while none
/// ran): the At recorded DONE then is deleted as long after, no event of its pod to wake it.
#[tokio::test]
async fn a_ttl_holds_for_an_at_that_ended_while_no_operator_ran() -> Result<()> {
    let (ns, mut op) = watched("beta-ttl-found").await?;
    let fields = json!({"ttlSecondsAfterFinished": 5});
    let api = create(&ns, "found", fields, one("sleep 3")).await?;
    running(&ns, "found-pod").await?;
    op.terminate();
    ended(&ns, "found-pod").await?;
    ensure!(phase(&api.get("found").await?) == Some(AtPhase::Running));
    op.restart()?;
    let finished = done(&api, "found").await?;
    expires(&ns, &finished, 5).await
}

/// Follows `finished`, an At seen DONE under a TTL of `ttl` s, until it is deleted: begun no
/// earlier than its completion plus `ttl`, within 5 s of it, and in the foreground (held by
/// `foregroundDeletion` until its pod is gone). Every change since it was seen DONE is
/// watched: each step of its deletion, however quick.
async fn expires(ns: &TestNs, finished: &At, ttl: i64) -> Result<()> {
    let (api, name) = (ns.api::<At>(), finished.name_any());
    let completed = stamp(finished.status.clone().and_then(|s| s.completion_time))?;
    let expiry = completed + SignedDuration::from_secs(ttl);
    let params = WatchParams::default().timeout(60);
    let params = params.fields(&format!("metadata.name={name}"));
    let version = finished.resource_version().unwrap_or_default();
    let mut changes = api.watch(&params, &version).await?.boxed();
    let mut held = None;
    let gone = loop {
        match changes.try_next().await? {
            Some(WatchEvent::Modified(at)) if at.metadata.deletion_timestamp.is_some() => {
                held.get_or_insert(at);
            }
            Some(WatchEvent::Deleted(_)) => break Timestamp::now(),
            Some(WatchEvent::Error(e)) => bail!("watching the At: {e:?}"),
            Some(_) => {}
            None => bail!("{name} was not deleted within 60 s of being seen DONE"),
        }
    };
    let held = held.ok_or_else(|| anyhow!("{name} went at once, not held for its pod"))?;
    let began = stamp(held.metadata.deletion_timestamp.clone())?;
    let pod_left = ns.api::<Pod>().get_opt(&format!("{name}-pod")).await?;
    println!(
        "ttlSecondsAfterFinished {ttl}: {name}'s deletion began {:?} after its completion, it was gone {:?} after",
        began.duration_since(completed),
        gone.duration_since(completed)
    );
    ensure!(began >= expiry, "deleted before its TTL ran out");
    let foreground = held.finalizers().iter().any(|f| f == "foregroundDeletion");
    ensure!(foreground, "not in the foreground: {:?}", held.metadata);
    ensure!(pod_left.is_none(), "the At went before its pod");
    let late = gone.duration_since(expiry);
    ensure!(late <= SignedDuration::from_secs(5), "{late:?} late");
    Ok(())
}

/// With two containers, `containerName`'s exit is the verdict: the other fails first (the pod
/// ends Failed), the named one succeeds afterwards, and so does the At.
#[tokio::test]
async fn the_named_container_decides_the_verdict() -> Result<()> {
    let (ns, _op) = watched("beta-named").await?;
    let pod = json!({"containers": [
        shell("helper", "exit 7"), shell("verdict", "sleep 2; echo ok")]});
    let api = create(&ns, "two", json!({"containerName": "verdict"}), pod).await?;
    let at = done(&api, "two").await?;
    let pod = ended(&ns, "two-pod").await?;
    let message = condition(&at, CONDITION_COMPLETED).map(|c| c.message.clone());
    println!("two containers, pod {}: {message:?}", harness::phase(&pod));
    assert_eq!(harness::phase(&pod), "Failed", "by the helper's exit 7");
    assert_eq!(at.status.and_then(|s| s.succeeded), Some(true));
    ensure!(message.is_some_and(|m| m.contains("exit code 0")));
    assert_eq!(log(&ns, "two-pod", "verdict").await?, "ok\n");
    Ok(())
}

/// The operator takes only its own scheduling gate off: a template's `example.com/hold`
/// keeps the pod unscheduled and not running, the At RUNNING, until its owner (the test)
/// takes it off; then the command runs, once.
#[tokio::test]
async fn another_controllers_gate_holds_the_pod_until_it_is_removed() -> Result<()> {
    let (ns, _op) = watched("beta-hold").await?;
    let mut pod = one("echo ran");
    pod["schedulingGates"] = json!([{"name": "example.com/hold"}]);
    let api = create(&ns, "held", json!({}), pod).await?;
    let pods = ns.api::<Pod>();
    let gates = |p: &Pod| -> Vec<String> {
        let gates = p.spec.as_ref().and_then(|s| s.scheduling_gates.clone());
        gates.into_iter().flatten().map(|g| g.name).collect()
    };
    let released = poll_some(PROMPTLY, "the At's gate taken off", || async {
        let recorded = api.get("held").await?.status.and_then(|s| s.pod_uid);
        let pod = pods.get_opt("held-pod").await?;
        Ok(pod.filter(|p| recorded.is_some() && gates(p).len() == 1))
    })
    .await?;
    // Observed for 5 s: only the test's gate is left, and it holds the pod back.
    let window = tokio::time::Instant::now() + Duration::from_secs(5);
    while tokio::time::Instant::now() < window {
        let (pod, at) = (pods.get("held-pod").await?, api.get("held").await?);
        assert_eq!(gates(&pod), ["example.com/hold"]);
        assert_eq!(pod.metadata.uid, released.metadata.uid);
        let unscheduled = pod.spec.as_ref().is_some_and(|s| s.node_name.is_none());
        ensure!(unscheduled && harness::phase(&pod) == "Pending", "{pod:?}");
        assert_eq!(phase(&at), Some(AtPhase::Running));
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let patch = json!([
        {"op": "test", "path": "/spec/schedulingGates/0/name", "value": "example.com/hold"},
        {"op": "remove", "path": "/spec/schedulingGates/0"},
    ]);
    let patch = Patch::Json::<()>(serde_json::from_value(patch)?);
    pods.patch("held-pod", &PatchParams::default(), &patch)
        .await?;
    let freed = Timestamp::now();
    let at = done(&api, "held").await?;
    let took = Timestamp::now().duration_since(freed);
    println!("held 5 s by its own gate; DONE {took:?} after it was removed");
    assert_eq!(at.status.and_then(|s| s.succeeded), Some(true));
    ended(&ns, "held-pod").await?;
    assert_eq!(log(&ns, "held-pod", "busybox").await?, "ran\n");
    let all = pods.list(&Default::default()).await?.items;
    assert_eq!(all.len(), 1, "more than one pod ran the command");
    Ok(())
}

/// `kubectl get ats -o wide` adds the Zone column (priority 1) with the At's zone, and
/// `kubectl explain` prints `timeZone`'s doc from the v1beta1 schema.
#[tokio::test]
async fn kubectl_shows_the_zone_column_and_explains_time_zone() -> Result<()> {
    let ns = namespace("beta-kubectl").await?;
    let fields = json!({"schedule": "2099-01-01T09:00:00", "timeZone": "Europe/Berlin"});
    create(&ns, "zoned", fields, one("true")).await?;
    let wide = kubectl(&ns, &["get", "ats", "-o", "wide"]).await?;
    let narrow = kubectl(&ns, &["get", "ats"]).await?;
    println!("{wide}{narrow}");
    let (header, row) = wide.split_once('\n').unwrap_or_default();
    let columns = header.split_whitespace().collect::<Vec<_>>().join(" ");
    assert_eq!(columns, "NAME SCHEDULE ZONE PHASE STATUS AGE");
    let zone = header.find("ZONE").unwrap_or_default();
    let zoned = row
        .get(zone..)
        .is_some_and(|z| z.starts_with("Europe/Berlin "));
    ensure!(zoned, "no Europe/Berlin under ZONE");
    ensure!(!narrow.contains("ZONE") && !narrow.contains("Europe/Berlin"));
    let version = "--api-version=cnat.programming-kubernetes.info/v1beta1";
    let explained = kubectl(&ns, &["explain", "at.spec.timeZone", version]).await?;
    println!("{explained}");
    let explained = explained.split_whitespace().collect::<Vec<_>>().join(" ");
    for said in ["FIELD: timeZone <string>", "The IANA time zone"] {
        ensure!(explained.contains(said), "no {said:?} in:\n{explained}");
    }
    Ok(())
}
