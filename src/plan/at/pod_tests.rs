//! The At plan's unit tests of its pod, without I/O: its creation (gated, recorded,
//! released), its trouble, its outcome and its vanishing. The pod itself: `pod.rs`.

use super::tests::{SCHEDULE, at_with, condition, exited, pod, record, ts};
use super::*;
use crate::conditions;
use crate::pod::{Ended, Notes, Phase, Trouble};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::events::EventType;

#[test]
fn created_pod_means_running_then_done_with_the_outcome() {
    let at = at_with(Some(record(step_for(
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
        step_for(&at, Some(&pod(Phase::Running)), now),
        Step::Record(running.clone()),
        "running: nothing new"
    );

    let ok = exited(Phase::Succeeded, 0);
    let done = record(step_for(&at, Some(&ok), ts("2019-04-12T10:12:09Z")));
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
        command: Some(crate::pod::Exited {
            code: 3,
            reason: Some("Error".into()),
            finished: None,
        }),
        ..Notes::default()
    }));
    let failed = record(step_for(&at, Some(&bad), ts("2019-04-12T10:12:09Z")));
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
    let pending = step_for(&at_with(None), None, ts("2019-04-12T10:11:00Z"));
    let at = at_with(Some(record(pending)));
    let mut stuck = pod(Phase::Pending);
    stuck.notes = Some(Box::new(Notes {
        ended: None,
        trouble: Some(Trouble {
            reason: "Unschedulable".into(),
            message: "0/1 nodes are available".into(),
        }),
        ..Notes::default()
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
    let status = record(step_for(
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
    assert_eq!(step_for(&at, None, ts(SCHEDULE)), Step::Confirm);
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
        step_for(
            &at_with(Some(gone.clone())),
            None,
            ts("2019-04-12T11:00:00Z")
        ),
        Step::Record(gone)
    );
}

/// What an operator from before the create came first recorded ahead of it: RUNNING,
/// Starting, no pod.
fn starting_before_the_create(at: &At) -> AtStatus {
    let mut status = progress(at, &pod(Phase::Pending), ts(SCHEDULE));
    status.pod_uid = None;
    status.conditions[1].reason = REASON_STARTING.into();
    status
}

/// A gated pod made from generation `made_from` of the At.
pub(super) fn gated_from(made_from: Option<i64>) -> CachedPod {
    CachedPod {
        gate: Some(0),
        notes: Some(Box::new(Notes {
            made_from,
            ..Notes::default()
        })),
        ..pod(Phase::Pending)
    }
}

/// A gated pod made from the At's current generation (1).
pub(super) fn gated() -> CachedPod {
    gated_from(Some(1))
}

/// Issue 26, faults 3 and 4, as an operator from before the create came first left them:
/// RUNNING recorded, no pod recorded. No pod of this At ever ran (each is created gated), so
/// whatever became of earlier creates (a lost reply, a crash, a create the server refused)
/// the pod is created, at once, on any host's clock, and a gated one found is released.
#[test]
fn running_without_a_recorded_pod_creates_it() {
    let at = at_with(Some(starting_before_the_create(&at_with(None))));
    assert_eq!(step_for(&at, None, ts(SCHEDULE)), CREATE);
    assert_eq!(
        step_for(&at, None, ts("2030-01-01T00:00:00Z")),
        CREATE,
        "no window to wait out"
    );
    assert!(matches!(
        step_for(&at, Some(&gated()), ts(SCHEDULE)),
        Step::Release(s) if s.pod_uid.as_deref() == Some("pod-uid")
    ));
}

/// A gated pod made from the At's current generation is recorded RUNNING, then released,
/// whoever made it (this reconcile, or one whose create reply was lost); once recorded it is
/// released again if a release was lost, and never another pod.
#[test]
fn a_pod_of_the_current_spec_is_recorded_then_released() {
    let at = at_with(None);
    let Step::Release(recorded) = step_for(&at, Some(&gated()), ts(SCHEDULE)) else {
        panic!("a gated pod of the current spec is recorded and released");
    };
    assert_eq!(recorded.phase, Some(AtPhase::Running));
    assert_eq!(recorded.pod_uid.as_deref(), Some("pod-uid"));
    assert_eq!(
        condition(&recorded, CONDITION_COMPLETED),
        ("False", REASON_STARTED)
    );
    let notes = status_events(at.status.as_ref(), &recorded);
    assert!(
        notes.iter().any(|n| n.reason == REASON_STARTED),
        "{notes:?}"
    );
    let at = at_with(Some(recorded.clone()));
    assert_eq!(
        step_for(&at, Some(&gated()), ts(SCHEDULE)),
        Step::Release(recorded.clone()),
        "the release did not land: again"
    );
    let mut another = gated();
    another.uid = "another-uid".into();
    assert_eq!(
        step_for(&at, Some(&another), ts(SCHEDULE)),
        Step::Confirm,
        "the cache may lag: another pod there is read live"
    );
    let Step::Discard(uid, then) = confirmed(&at, Some(&another), ts(SCHEDULE)) else {
        panic!("another gated pod is deleted, never released");
    };
    assert_eq!(uid, another.uid);
    assert!(
        matches!(*then, Step::Record(s) if s.phase == Some(AtPhase::Done)),
        "the recorded pod is gone"
    );
    another.gate = None;
    assert!(
        matches!(confirmed(&at, Some(&another), ts(SCHEDULE)), Step::Record(s) if s.phase == Some(AtPhase::Done)),
        "one released by someone else is left alone"
    );
}

/// A gated pod that cannot hold what the At is to run (made from an older generation, or
/// saying nothing; of a DONE At) never ran and is never released: it is deleted, and made
/// again only if the At is due by its spec. One of the current spec waits until it is due.
/// One made from a newer generation than the copy read means the copy is stale: nothing is
/// done (the newer copy is on its way).
#[test]
fn a_gated_pod_not_of_the_at_as_read_is_deleted_unreleased() {
    let uid: crate::uid::Uid = "pod-uid".into();
    let mut edited = at_with(None);
    edited.metadata.generation = Some(2);
    for stale in [gated_from(Some(1)), gated_from(None)] {
        assert_eq!(
            step_for(&edited, Some(&stale), ts(SCHEDULE)),
            Step::Discard(uid.clone(), Box::new(CREATE)),
            "{stale:?}"
        );
    }
    let early = ts("2019-04-12T10:11:00Z");
    let wait = step_for(&edited, None, early);
    assert!(matches!(wait, Step::Wait(..)));
    assert_eq!(
        step_for(&edited, Some(&gated_from(Some(2))), early),
        wait,
        "of the current spec, not due by this clock: it waits, gated (the copy may be stale)"
    );
    assert_eq!(
        step_for(&at_with(None), Some(&gated_from(Some(2))), ts(SCHEDULE)),
        Step::Record(AtStatus::default()),
        "made from a newer spec than the copy read"
    );
    let mut ran = pod(Phase::Succeeded);
    ran.uid = "ran-uid".into();
    let done = at_with(Some(progress(&at_with(None), &ran, ts(SCHEDULE))));
    let Step::Discard(discarded, then) = step_for(&done, Some(&gated()), ts(SCHEDULE)) else {
        panic!("a gated pod of a DONE At is deleted");
    };
    assert_eq!(discarded, uid);
    assert!(matches!(*then, Step::Record(s) if s.phase == Some(AtPhase::Done)));
    let mut ran_gated = gated();
    ran_gated.uid = "ran-uid".into();
    assert!(
        matches!(
            step_for(&done, Some(&ran_gated), ts(SCHEDULE)),
            Step::Record(_)
        ),
        "the recorded pod, shown gated by a lagging cache, ran: it is kept"
    );
}

/// An operator from before the gate recorded Started with no UID: its pod was created
/// ungated and may have run. Found, it is recorded as it is; gone, it is not run again.
#[test]
fn a_pod_from_before_the_gate_is_taken_as_it_is() {
    let mut legacy = progress(&at_with(None), &pod(Phase::Running), ts(SCHEDULE));
    legacy.pod_uid = None;
    let at = at_with(Some(legacy));
    assert_eq!(step_for(&at, None, ts(SCHEDULE)), Step::Confirm);
    assert!(
        matches!(step_for(&at, Some(&pod(Phase::Running)), ts(SCHEDULE)), Step::Record(s) if s.pod_uid.is_some())
    );
}
