//! The At plan's unit tests: the schedule, waiting for it, and the phases and statuses
//! around the pod (done, blocked, deleted), without I/O. The pod's own life is `pod_tests`.

use super::*;
use crate::conditions;
use crate::pod::Phase;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::events::EventType;

pub(super) const SCHEDULE: &str = "2019-04-12T10:12:00Z";

pub(super) fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

pub(super) fn at_with(status: Option<AtStatus>) -> At {
    let mut at = crate::plan::fixtures::an_at("example-at", SCHEDULE);
    at.status = status;
    at
}

pub(super) fn pod(phase: Phase) -> CachedPod {
    CachedPod {
        name: "example-at-pod".into(),
        uid: "pod-uid".into(),
        home: crate::pod::Home::shared("ns", None),
        phase,
        ready: false,
        ready_since: None,
        node_name: None,
        terminating: false,
        gate: None,
        created: Some(ts("2019-04-12T10:12:01Z").into()),
        deletion_cost: 0,
        restarts: 0,
        notes: None,
    }
}

/// A RUNNING At, started at 10:12:00, whose recorded pod is `pod-uid`.
pub(super) fn running() -> At {
    at_with(Some(AtStatus {
        phase: Some(AtPhase::Running),
        pod_name: Some("example-at-pod".into()),
        pod_uid: Some("pod-uid".into()),
        start_time: Some(Time(ts("2019-04-12T10:12:00Z"))),
        ..Default::default()
    }))
}

/// A pod that ended in `phase`, its container with `code`.
pub(super) fn exited(phase: Phase, code: i32) -> CachedPod {
    CachedPod {
        notes: Some(Box::new(crate::pod::Notes {
            command: Some(crate::pod::Exited {
                code,
                ..Default::default()
            }),
            ..Default::default()
        })),
        ..pod(phase)
    }
}

pub(super) fn condition<'a>(s: &'a AtStatus, type_: &str) -> (&'a str, &'a str) {
    let c = conditions::find(&s.conditions, type_).unwrap_or_else(|| panic!("no {type_} in {s:?}"));
    (c.status.as_str(), c.reason.as_str())
}

/// The status a step records; any other step fails the test.
pub(super) fn record(step: Step) -> AtStatus {
    match step {
        Step::Record(s) | Step::Wait(s, _) => s,
        other => panic!("expected a status to record, got {other:?}"),
    }
}

#[test]
fn parses_utc_schedules_and_refuses_impossible_dates() {
    assert_eq!(
        parse_schedule(SCHEDULE, jiff::tz::TimeZone::UTC).unwrap(),
        ts(SCHEDULE)
    );
    assert_eq!(
        parse_schedule("2024-02-29T23:59:59Z", jiff::tz::TimeZone::UTC).unwrap(),
        ts("2024-02-29T23:59:59Z")
    );
    for bad in [
        "2019-02-30T10:00:00Z",
        "2019-13-01T10:00:00Z",
        "2019-04-12T25:00:00Z",
        "2023-02-29T00:00:00Z",
    ] {
        let e = parse_schedule(bad, jiff::tz::TimeZone::UTC).unwrap_err();
        assert!(e.contains(bad), "{e}");
    }
    for unparsable in [
        "",
        "tomorrow",
        "2019-04-12 10:12:00",
        "2019-04-12T10:12:00+02:00",
        "2019-04-12T10:12:00.5Z",
    ] {
        assert!(
            parse_schedule(unparsable, jiff::tz::TimeZone::UTC).is_err(),
            "{unparsable:?} parsed"
        );
    }
}

/// The CRD refuses schedules past `LATEST_SCHEDULE` (issue 31's input search found
/// 9999-12-31T23:59:59Z admitted, then reported InvalidSchedule): that must be exactly where
/// the operator's reading ends.
#[test]
fn the_latest_schedule_the_crd_admits_is_the_latest_the_operator_reads() {
    use crate::api::at::LATEST_SCHEDULE;
    assert!(parse_schedule(LATEST_SCHEDULE, jiff::tz::TimeZone::UTC).is_ok());
    assert!(parse_schedule("9999-12-30T22:00:01Z", jiff::tz::TimeZone::UTC).is_err());
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
fn a_wait_is_armed_for_at_most_a_minute() {
    let wake = ts("2019-04-12T10:12:00Z");
    let cases = [
        ("2019-04-12T10:11:50Z", Duration::from_secs(10)),
        ("2019-04-12T10:12:30Z", Duration::ZERO),
        ("2019-04-12T08:42:00Z", MAX_WAIT),
    ];
    for (now, want) in cases {
        assert_eq!(wait_for(wake, ts(now)), want, "at {now}");
    }
}

#[test]
fn new_at_waits_exactly_until_due_then_starts() {
    let mut far = at_with(None);
    far.spec.schedule = "3000-01-01T00:00:00Z".into();
    match step_for(&far, None, ts(SCHEDULE)) {
        Step::Wait(status, wake) => assert_eq!(
            (status.phase, wake),
            (Some(AtPhase::Pending), ts(SCHEDULE) + MAX_WAIT)
        ),
        other => panic!("expected Wait, got {other:?}"),
    }
    let at = at_with(None);
    match step_for(&at, None, ts("2019-04-12T10:11:50Z")) {
        Step::Wait(status, wake) => {
            assert_eq!(wake, ts(SCHEDULE), "woken when due");
            assert_eq!(status.phase, Some(AtPhase::Pending));
            assert_eq!(
                condition(&status, CONDITION_SCHEDULED),
                ("True", REASON_SCHEDULED)
            );
            assert!(status.pod_name.is_none());
        }
        other => panic!("expected Wait, got {other:?}"),
    }
    assert_eq!(step_for(&at, None, ts(SCHEDULE)), CREATE);
    assert_eq!(
        step_for(&at, None, ts("2025-01-01T00:00:00Z")),
        CREATE,
        "a past schedule runs at once"
    );
}

#[test]
fn pending_status_is_stable_while_waiting() {
    let first = record(step_for(&at_with(None), None, ts("2019-04-12T10:11:00Z")));
    let at = at_with(Some(first.clone()));
    assert_eq!(
        record(step_for(&at, None, ts("2019-04-12T10:11:30Z"))),
        first
    );
}

#[test]
fn invalid_date_is_reported_not_retried() {
    let mut at = at_with(None);
    at.spec.schedule = "2019-02-30T10:00:00Z".into();
    let status = record(step_for(&at, None, ts(SCHEDULE)));
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
    let same = record(step_for(&again, None, ts("2019-04-12T11:00:00Z")));
    assert_eq!(same, status);
    assert!(super::status_events(Some(&status), &same).is_empty());
}

/// A zone no database holds stands in the way as a date that does not exist does, and says so
/// with a Warning: input search seed 148 (an At whose `timeZone` is `Etc/GMT+13`, which the
/// zone pattern admits) waited, told only by a Normal event.
#[test]
fn an_unknown_time_zone_is_reported_with_a_warning() {
    let mut at = at_with(None);
    at.spec.schedule = "2019-04-12T10:12:00".into();
    at.spec.time_zone = Some("Etc/GMT+13".into());
    let status = record(step_for(&at, None, ts(SCHEDULE)));
    assert_eq!(
        condition(&status, CONDITION_SCHEDULED),
        ("False", REASON_UNKNOWN_TIME_ZONE)
    );
    let notes = status_events(None, &status);
    let notes: Vec<_> = notes.iter().map(|n| (n.type_, n.reason.as_str())).collect();
    assert_eq!(notes, [(EventType::Warning, REASON_UNKNOWN_TIME_ZONE)]);
}

#[test]
fn done_is_final_and_says_spec_changes_are_ignored() {
    let ok = exited(Phase::Succeeded, 0);
    let done = progress(&at_with(None), &ok, ts(SCHEDULE));
    let mut at = at_with(Some(done.clone()));
    assert_eq!(
        step_for(&at, None, ts("2030-01-01T00:00:00Z")),
        Step::Record(done.clone())
    );
    // Someone edits the spec: a new schedule in the future and a new command.
    at.metadata.generation = Some(2);
    at.spec.schedule = "2031-01-01T00:00:00Z".into();
    let edited = record(step_for(&at, None, ts("2030-01-01T00:00:00Z")));
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
        step_for(&at, None, ts("2030-01-02T00:00:00Z")),
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
    assert_eq!(step_for(&at, None, ts(SCHEDULE)), CREATE, "retried");
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
        step_for(&at, None, ts("2030-01-01T00:00:00Z")),
        Step::Record(AtStatus::default())
    );
}
