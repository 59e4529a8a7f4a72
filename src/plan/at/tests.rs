//! The At plan's unit tests: every step and status, without I/O.

use super::*;
use crate::api::AtSpec;
use crate::cache::{Ended, Notes, Trouble};

const SCHEDULE: &str = "2019-04-12T10:12:00Z";

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn at_with(status: Option<AtStatus>) -> At {
    let mut at = At::new(
        "example-at",
        AtSpec {
            schedule: SCHEDULE.into(),
            command: "echo YAY".into(),
        },
    );
    at.metadata.namespace = Some("ns".into());
    at.metadata.uid = Some("at-uid".into());
    at.metadata.generation = Some(1);
    at.status = status;
    at
}

fn pod(phase: Phase) -> CachedPod {
    CachedPod {
        name: "example-at-pod".into(),
        namespace: "ns".into(),
        uid: "pod-uid".into(),
        owner: None,
        phase,
        ready: false,
        ready_since: None,
        node_name: None,
        terminating: false,
        gated: false,
        created: Some(ts("2019-04-12T10:12:01Z").into()),
        deletion_cost: 0,
        restarts: 0,
        notes: None,
        exit_code: None,
    }
}

fn condition<'a>(s: &'a AtStatus, type_: &str) -> (&'a str, &'a str) {
    let c = conditions::find(&s.conditions, type_).unwrap_or_else(|| panic!("no {type_} in {s:?}"));
    (c.status.as_str(), c.reason.as_str())
}

/// The status a step records; any other step fails the test.
fn record(step: Step) -> AtStatus {
    match step {
        Step::Record(s) | Step::Wait(s, _) => s,
        other => panic!("expected a status to record, got {other:?}"),
    }
}

#[test]
fn parses_utc_schedules_and_refuses_impossible_dates() {
    assert_eq!(parse_schedule(SCHEDULE).unwrap(), ts(SCHEDULE));
    assert_eq!(
        parse_schedule("2024-02-29T23:59:59Z").unwrap(),
        ts("2024-02-29T23:59:59Z")
    );
    for bad in [
        "2019-02-30T10:00:00Z",
        "2019-13-01T10:00:00Z",
        "2019-04-12T25:00:00Z",
        "2023-02-29T00:00:00Z",
    ] {
        let e = parse_schedule(bad).unwrap_err();
        assert!(e.contains(bad), "{e}");
    }
    for unparsable in [
        "",
        "tomorrow",
        "2019-04-12 10:12:00",
        "2019-04-12T10:12:00+02:00",
        "2019-04-12T10:12:00.5Z",
    ] {
        assert!(parse_schedule(unparsable).is_err(), "{unparsable:?} parsed");
    }
}

/// The CRD refuses schedules past `LATEST_SCHEDULE` (issue 31's input search found
/// 9999-12-31T23:59:59Z admitted, then reported InvalidSchedule): that must be exactly where
/// the operator's reading ends.
#[test]
fn the_latest_schedule_the_crd_admits_is_the_latest_the_operator_reads() {
    use crate::api::at::LATEST_SCHEDULE;
    assert!(parse_schedule(LATEST_SCHEDULE).is_ok());
    assert!(parse_schedule("9999-12-30T22:00:01Z").is_err());
    assert!(crate::api::at::SCHEDULE_RULE.contains(&format!("self <= '{LATEST_SCHEDULE}'")));
}

#[test]
fn time_until_due() {
    let due = ts(SCHEDULE);
    assert_eq!(
        until_due(due, ts("2019-04-12T10:11:56Z")),
        Some(Duration::from_secs(4))
    );
    let almost = due
        .checked_sub(jiff::SignedDuration::from_millis(250))
        .unwrap();
    assert_eq!(until_due(due, almost), Some(Duration::from_millis(250)));
    assert_eq!(until_due(due, due), None, "due exactly now");
    assert_eq!(until_due(due, ts("2019-04-12T10:12:07Z")), None, "overdue");
    assert_eq!(
        until_due(due, ts("2030-01-01T00:00:00Z")),
        None,
        "long overdue"
    );
}

#[test]
fn new_at_waits_exactly_until_due_then_starts() {
    let mut far = at_with(None);
    far.spec.schedule = "3000-01-01T00:00:00Z".into();
    match decide(&far, None, ts(SCHEDULE)) {
        Step::Wait(status, left) => {
            assert_eq!((status.phase, left), (Some(AtPhase::Pending), MAX_WAIT))
        }
        other => panic!("expected Wait, got {other:?}"),
    }
    let at = at_with(None);
    match decide(&at, None, ts("2019-04-12T10:11:50Z")) {
        Step::Wait(status, left) => {
            assert_eq!(left, Duration::from_secs(10));
            assert_eq!(status.phase, Some(AtPhase::Pending));
            assert_eq!(
                condition(&status, CONDITION_SCHEDULED),
                ("True", REASON_SCHEDULED)
            );
            assert!(status.pod_name.is_none());
        }
        other => panic!("expected Wait, got {other:?}"),
    }
    assert_eq!(decide(&at, None, ts(SCHEDULE)), Step::Start);
    assert_eq!(
        decide(&at, None, ts("2025-01-01T00:00:00Z")),
        Step::Start,
        "a past schedule runs at once"
    );
}

#[test]
fn pending_status_is_stable_while_waiting() {
    let first = record(decide(&at_with(None), None, ts("2019-04-12T10:11:00Z")));
    let at = at_with(Some(first.clone()));
    assert_eq!(record(decide(&at, None, ts("2019-04-12T10:11:30Z"))), first);
}

#[test]
fn invalid_date_is_reported_not_retried() {
    let mut at = at_with(None);
    at.spec.schedule = "2019-02-30T10:00:00Z".into();
    let status = record(decide(&at, None, ts(SCHEDULE)));
    assert_eq!(status.phase, Some(AtPhase::Pending));
    assert_eq!(
        condition(&status, CONDITION_SCHEDULED),
        ("False", REASON_INVALID_SCHEDULE)
    );
    let notes = status_events(at.status.as_ref(), &status);
    assert_eq!(notes.len(), 1);
    assert_eq!(
        (notes[0].type_, notes[0].reason.as_str()),
        (EventType::Warning, REASON_INVALID_SCHEDULE)
    );
    assert!(
        notes[0].note.contains("2019-02-30T10:00:00Z"),
        "{}",
        notes[0].note
    );
    // Unchanged, it is recorded again identically: no new write, no new event.
    let mut again = at_with(Some(status.clone()));
    again.spec.schedule = "2019-02-30T10:00:00Z".into();
    let same = record(decide(&again, None, ts("2019-04-12T11:00:00Z")));
    assert_eq!(same, status);
    assert!(super::status_events(Some(&status), &same).is_empty());
}

#[test]
fn created_pod_means_running_then_done_with_the_outcome() {
    let at = at_with(Some(record(decide(
        &at_with(None),
        None,
        ts("2019-04-12T10:11:00Z"),
    ))));
    let now = ts("2019-04-12T10:12:01Z");
    let running = progress(&at, &pod(Phase::Pending), now);
    assert_eq!(running.phase, Some(AtPhase::Running));
    assert_eq!(running.pod_name.as_deref(), Some("example-at-pod"));
    assert_eq!(running.start_time, Some(Time(ts("2019-04-12T10:12:01Z"))));
    assert_eq!(
        (running.succeeded, running.completion_time.as_ref()),
        (None, None)
    );
    assert_eq!(
        condition(&running, CONDITION_COMPLETED),
        ("False", REASON_STARTED)
    );
    let notes_running = status_events(at.status.as_ref(), &running);
    assert_eq!(
        notes_running
            .iter()
            .map(|n| n.reason.as_str())
            .collect::<Vec<_>>(),
        [REASON_STARTED]
    );

    let at = at_with(Some(running.clone()));
    assert_eq!(
        decide(&at, Some(&pod(Phase::Running)), now),
        Step::Record(running.clone()),
        "running: nothing new"
    );

    let mut ok = pod(Phase::Succeeded);
    ok.exit_code = Some(0);
    let done = record(decide(&at, Some(&ok), ts("2019-04-12T10:12:09Z")));
    assert_eq!(done.phase, Some(AtPhase::Done));
    assert_eq!(done.succeeded, Some(true));
    assert_eq!(done.completion_time, Some(Time(ts("2019-04-12T10:12:09Z"))));
    assert_eq!(done.start_time, running.start_time);
    assert_eq!(
        condition(&done, CONDITION_COMPLETED),
        ("True", REASON_SUCCEEDED)
    );
    let n = status_events(Some(&running), &done);
    assert_eq!((n.len(), n[0].type_), (1, EventType::Normal));

    let mut bad = pod(Phase::Failed);
    bad.notes = Some(Box::new(Notes {
        ended: Some(Ended {
            reason: Some("Error".into()),
            message: Some("boom".into()),
        }),
        trouble: None,
    }));
    bad.exit_code = Some(3);
    let failed = record(decide(&at, Some(&bad), ts("2019-04-12T10:12:09Z")));
    assert_eq!(
        (failed.phase, failed.succeeded),
        (Some(AtPhase::Done), Some(false))
    );
    let c = conditions::find(&failed.conditions, CONDITION_COMPLETED).unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", REASON_FAILED)
    );
    assert_eq!(
        c.message,
        "pod example-at-pod failed: Error: boom (exit code 3)"
    );
    let n = status_events(Some(&running), &failed);
    assert_eq!(
        (n.len(), n[0].type_, n[0].reason.as_str()),
        (1, EventType::Warning, REASON_FAILED)
    );
}

/// Issue 31: a pod that cannot start (no node fits, an image that cannot be pulled) shows in
/// `Completed`, in the scheduler's words, with a Warning; once it runs, Started again.
#[test]
fn a_pod_in_trouble_is_told_with_a_warning_and_cleared_once_it_runs() {
    let now = ts("2019-04-12T10:12:01Z");
    let pending = decide(&at_with(None), None, ts("2019-04-12T10:11:00Z"));
    let at = at_with(Some(record(pending)));
    let mut stuck = pod(Phase::Pending);
    stuck.notes = Some(Box::new(Notes {
        ended: None,
        trouble: Some(Trouble {
            reason: "Unschedulable".into(),
            message: "0/1 nodes are available".into(),
        }),
    }));
    let waiting = progress(&at, &stuck, now);
    assert_eq!(waiting.phase, Some(AtPhase::Running));
    assert_eq!(
        condition(&waiting, CONDITION_COMPLETED),
        ("False", "Unschedulable")
    );
    let told = status_events(at.status.as_ref(), &waiting);
    assert_eq!(
        (told[0].type_, told[0].note.as_str()),
        (
            EventType::Warning,
            "pod example-at-pod: 0/1 nodes are available"
        )
    );
    let at = at_with(Some(waiting.clone()));
    let running = progress(&at, &pod(Phase::Running), now);
    assert_eq!(
        condition(&running, CONDITION_COMPLETED),
        ("False", REASON_STARTED)
    );
    assert_eq!(
        status_events(Some(&waiting), &running)[0].type_,
        EventType::Normal
    );
}

#[test]
fn a_pod_of_ours_counts_as_started_even_if_the_phase_lags() {
    // The pod was created but writing RUNNING failed (or the At read is stale).
    let status = record(decide(
        &at_with(None),
        Some(&pod(Phase::Succeeded)),
        ts("2019-04-12T10:13:00Z"),
    ));
    assert_eq!(
        (status.phase, status.succeeded),
        (Some(AtPhase::Done), Some(true))
    );
    assert_eq!(
        condition(&status, CONDITION_SCHEDULED),
        ("True", REASON_SCHEDULED)
    );
}

#[test]
fn a_recorded_pod_missing_is_confirmed_then_done_as_vanished() {
    let running = progress(&at_with(None), &pod(Phase::Running), ts(SCHEDULE));
    assert_eq!(running.pod_uid.as_deref(), Some("pod-uid"), "recorded");
    let at = at_with(Some(running.clone()));
    assert_eq!(decide(&at, None, ts(SCHEDULE)), Step::Confirm);
    assert_eq!(
        confirmed(&at, Some(&pod(Phase::Running)), ts(SCHEDULE)),
        Step::Record(running.clone()),
        "only the cache lagged"
    );
    let gone = record(confirmed(&at, None, ts("2019-04-12T10:20:00Z")));
    assert_eq!(
        (gone.phase, gone.succeeded),
        (Some(AtPhase::Done), Some(false))
    );
    assert_eq!(gone.start_time, running.start_time);
    assert_eq!(gone.completion_time, Some(Time(ts("2019-04-12T10:20:00Z"))));
    assert_eq!(
        condition(&gone, CONDITION_COMPLETED),
        ("True", REASON_POD_VANISHED)
    );
    assert_eq!(
        status_events(Some(&running), &gone)[0].type_,
        EventType::Warning
    );
    // Another pod with the name is not the recorded one: gone all the same.
    let mut other = pod(Phase::Running);
    other.uid = "other-uid".into();
    assert_eq!(
        record(confirmed(&at, Some(&other), ts("2019-04-12T10:20:00Z"))),
        gone
    );
    // DONE is final: no pod, no rerun.
    assert_eq!(
        decide(
            &at_with(Some(gone.clone())),
            None,
            ts("2019-04-12T11:00:00Z")
        ),
        Step::Record(gone)
    );
}

/// Issue 26, faults 3 and 4: RUNNING recorded, no pod recorded: no pod of this At ever ran
/// (each is created gated), so whatever became of earlier creates (a lost reply, a crash, a
/// create the server refused) the pod is created, at once, on any host's clock.
#[test]
fn running_without_a_recorded_pod_creates_it() {
    let at = at_with(Some(starting(&at_with(None), ts(SCHEDULE))));
    assert_eq!(at.status.as_ref().unwrap().pod_uid, None);
    assert_eq!(decide(&at, None, ts(SCHEDULE)), Step::Create);
    assert_eq!(
        decide(&at, None, ts("2030-01-01T00:00:00Z")),
        Step::Create,
        "no window to wait out"
    );
}

/// A pod created gated is recorded, then released; once recorded it is released again if a
/// release was lost, and never another pod.
#[test]
fn a_gated_pod_is_recorded_then_released() {
    let at = at_with(Some(starting(&at_with(None), ts(SCHEDULE))));
    let mut gated = pod(Phase::Pending);
    gated.gated = true;
    let Step::Release(recorded) = decide(&at, Some(&gated), ts(SCHEDULE)) else {
        panic!("a gated pod is released once recorded");
    };
    assert_eq!(recorded.pod_uid.as_deref(), Some("pod-uid"));
    assert_eq!(
        condition(&recorded, CONDITION_COMPLETED),
        ("False", REASON_STARTED)
    );
    let at = at_with(Some(recorded.clone()));
    assert_eq!(
        decide(&at, Some(&gated), ts(SCHEDULE)),
        Step::Release(recorded.clone()),
        "the release did not land: again"
    );
    let mut another = gated.clone();
    another.uid = "another-uid".into();
    assert!(
        matches!(decide(&at, Some(&another), ts(SCHEDULE)), Step::Record(s) if s.phase == Some(AtPhase::Done)),
        "only the recorded pod is ever released"
    );
}

/// An operator from before the gate recorded Started with no UID: its pod was created
/// ungated and may have run. Found, it is recorded as it is; gone, it is not run again.
#[test]
fn a_pod_from_before_the_gate_is_taken_as_it_is() {
    let mut legacy = progress(&at_with(None), &pod(Phase::Running), ts(SCHEDULE));
    legacy.pod_uid = None;
    let at = at_with(Some(legacy));
    assert_eq!(decide(&at, None, ts(SCHEDULE)), Step::Confirm);
    assert!(
        matches!(decide(&at, Some(&pod(Phase::Running)), ts(SCHEDULE)), Step::Record(s) if s.pod_uid.is_some())
    );
}

#[test]
fn done_is_final_and_says_spec_changes_are_ignored() {
    let mut ok = pod(Phase::Succeeded);
    ok.exit_code = Some(0);
    let done = progress(&at_with(None), &ok, ts(SCHEDULE));
    let mut at = at_with(Some(done.clone()));
    assert_eq!(
        decide(&at, None, ts("2030-01-01T00:00:00Z")),
        Step::Record(done.clone())
    );
    // Someone edits the spec: a new schedule in the future and a new command.
    at.metadata.generation = Some(2);
    at.spec.schedule = "2031-01-01T00:00:00Z".into();
    let edited = record(decide(&at, None, ts("2030-01-01T00:00:00Z")));
    assert_eq!(
        (edited.phase, edited.succeeded),
        (Some(AtPhase::Done), Some(true))
    );
    assert_eq!(
        condition(&edited, CONDITION_SCHEDULED),
        ("False", REASON_SPEC_CHANGE_IGNORED)
    );
    assert_eq!(
        condition(&edited, CONDITION_COMPLETED),
        ("True", REASON_SUCCEEDED)
    );
    let n = status_events(Some(&done), &edited);
    assert_eq!(
        (n.len(), n[0].type_, n[0].reason.as_str()),
        (1, EventType::Warning, REASON_SPEC_CHANGE_IGNORED)
    );
    let mut at = at_with(Some(edited.clone()));
    at.metadata.generation = Some(2);
    assert_eq!(
        decide(&at, None, ts("2030-01-02T00:00:00Z")),
        Step::Record(edited),
        "stable once said"
    );
}

#[test]
fn blocked_create_stays_pending_and_recovers() {
    let at = at_with(None);
    let taken = blocked(
        &at,
        REASON_POD_NAME_TAKEN,
        "pod example-at-pod belongs to someone else".into(),
        ts(SCHEDULE),
    );
    assert_eq!(taken.phase, Some(AtPhase::Pending));
    assert_eq!(
        condition(&taken, CONDITION_SCHEDULED),
        ("False", REASON_POD_NAME_TAKEN)
    );
    assert_eq!(status_events(None, &taken)[0].type_, EventType::Warning);
    let at = at_with(Some(taken));
    assert_eq!(decide(&at, None, ts(SCHEDULE)), Step::Start, "retried");
    let running = progress(&at, &pod(Phase::Pending), ts(SCHEDULE));
    assert_eq!(
        condition(&running, CONDITION_SCHEDULED),
        ("True", REASON_SCHEDULED)
    );
}

#[test]
fn deleting_at_does_nothing() {
    let mut at = at_with(None);
    at.metadata.deletion_timestamp = Some(Time(ts(SCHEDULE)));
    assert_eq!(
        decide(&at, None, ts("2030-01-01T00:00:00Z")),
        Step::Record(AtStatus::default())
    );
}

#[test]
fn pod_runs_the_command_once_through_a_shell_restricted() {
    let mut at = at_with(None);
    at.spec.command = "echo YAY && exit 3".into();
    let pod = pod_for(&at);
    assert_eq!(pod.metadata.name.as_deref(), Some("example-at-pod"));
    assert_eq!(pod.metadata.namespace.as_deref(), Some("ns"));
    let labels = pod.metadata.labels.unwrap();
    assert_eq!(labels.get("app").map(String::as_str), Some("example-at"));
    assert_eq!(
        labels.get(MANAGED_BY_LABEL).map(String::as_str),
        Some(MANAGED_BY_VALUE)
    );
    let owner = &pod.metadata.owner_references.unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("At", "at-uid"));
    assert_eq!(
        (owner.controller, owner.block_owner_deletion),
        (Some(true), Some(true))
    );
    let spec = pod.spec.unwrap();
    assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
    assert_eq!(spec.automount_service_account_token, Some(false));
    let psc = spec.security_context.unwrap();
    assert_eq!(psc.run_as_non_root, Some(true));
    assert!(psc.run_as_user.is_some_and(|u| u != 0));
    let c = &spec.containers[0];
    assert_eq!(c.image.as_deref(), Some("busybox"));
    assert_eq!(
        c.command.as_deref().unwrap(),
        ["sh", "-c", "echo YAY && exit 3"]
    );
    let sc = c.security_context.as_ref().unwrap();
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(
        sc.capabilities.as_ref().unwrap().drop.as_deref().unwrap(),
        ["ALL"]
    );
    assert_eq!(sc.seccomp_profile.as_ref().unwrap().type_, "RuntimeDefault");
}
