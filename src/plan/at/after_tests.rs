//! The At's one decision and what follows each answer, as tables: the shell asks `decide`
//! once, then `after` for each request it carried out, until a status to record.

use super::pod_tests::{gated, gated_from};
use super::tests::{SCHEDULE, at_with, condition, pod, ts};
use super::*;
use crate::conditions;
use crate::pod::Phase;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

fn seen<'a>(at: &'a At, pod: Option<&'a CachedPod>) -> Seen<'a> {
    Seen {
        at,
        pod,
        gone: false,
        in_doubt: false,
        now: ts(SCHEDULE),
    }
}

/// RUNNING with its pod recorded.
fn running() -> At {
    at_with(Some(progress(&at_with(None), &gated(), ts(SCHEDULE))))
}

#[test]
fn decide_ends_for_an_at_found_gone_and_reads_first_when_in_doubt() {
    let (due, stale) = (at_with(None), gated_from(Some(0)));
    let rows: [(Seen, Step); 4] = [
        (
            Seen {
                gone: true,
                ..seen(&due, None)
            },
            Step::End,
        ),
        (seen(&due, None), Step::Create { read_first: false }),
        (
            Seen {
                in_doubt: true,
                ..seen(&due, None)
            },
            Step::Create { read_first: true },
        ),
        (
            Seen {
                in_doubt: true,
                ..seen(&due, Some(&stale))
            },
            Step::Discard(
                stale.uid.clone(),
                Box::new(Step::Create { read_first: true }),
            ),
        ),
    ];
    for (i, (seen, want)) in rows.iter().enumerate() {
        assert_eq!(decide(seen), *want, "row {i}");
    }
}

/// A RUNNING At whose pod the watch does not show looks again in a while: no event may come.
#[test]
fn a_running_record_without_a_watched_pod_looks_again() {
    let mut at = running();
    at.metadata.deletion_timestamp = Some(Time(ts(SCHEDULE)));
    let status = health::summarized(&at, at.status.clone().unwrap(), seen(&at, None).now);
    let poll = Step::Poll(status.clone());
    assert_eq!(decide(&seen(&at, None)), poll);
    assert_eq!(
        decide(&seen(&at, Some(&pod(Phase::Running)))),
        Step::Record(status.clone())
    );
    let release = Step::Release(status.clone());
    assert_eq!(
        after(&seen(&at, None), release.clone(), Answer::Released),
        poll
    );
    assert_eq!(
        after(&seen(&at, Some(&gated())), release, Answer::Released),
        Step::Record(status)
    );
}

#[test]
fn each_answer_leads_to_the_next_step() {
    let (due, at_running) = (at_with(None), running());
    let other = CachedPod {
        uid: "other-uid".into(),
        ..gated()
    };
    let recorded = progress(&due, &gated(), ts(SCHEDULE));
    let then = Step::Record(AtStatus::default());
    let create = Step::Create { read_first: false };
    let rows: Vec<(&At, Step, Answer, Step)> = vec![
        (&due, create.clone(), Answer::Gone, Step::End),
        (
            &due,
            Step::Release(recorded.clone()),
            Answer::Changed,
            Step::Again,
        ),
        (
            &due,
            Step::Discard(other.uid.clone(), Box::new(then.clone())),
            Answer::Discarded,
            then,
        ),
        // The pod made, or found by a create that met it: recorded, then released.
        (
            &due,
            create.clone(),
            Answer::Pod(Some(gated())),
            Step::Release(recorded.clone()),
        ),
        // One create a reconcile: a stale pod found is deleted, the create left to the next.
        (
            &due,
            create.clone(),
            Answer::Pod(Some(gated_from(Some(0)))),
            Step::Discard("pod-uid".into(), Box::new(Step::Again)),
        ),
        // Another gated pod than the one recorded is deleted, and the At ends.
        (
            &at_running,
            Step::Confirm,
            Answer::Pod(Some(other.clone())),
            Step::Discard(
                other.uid.clone(),
                Box::new(Step::Record(vanished(&at_running, ts(SCHEDULE)))),
            ),
        ),
        (
            &at_running,
            Step::Confirm,
            Answer::Pod(None),
            Step::Record(vanished(&at_running, ts(SCHEDULE))),
        ),
    ];
    for (i, (at, step, answer, want)) in rows.into_iter().enumerate() {
        let pod = gated();
        let seen = seen(at, Some(&pod));
        assert_eq!(
            after(&seen, step, answer),
            summarized(&seen, want),
            "row {i}"
        );
    }
}

/// A create refused, or a name taken, is reported, PENDING, and tried again.
#[test]
fn a_create_that_cannot_be_made_is_reported() {
    let due = at_with(None);
    let create = Step::Create { read_first: false };
    for (answer, reason, says) in [
        (
            Answer::Taken,
            REASON_POD_NAME_TAKEN,
            "pod example-at-pod exists and is not controlled by this At",
        ),
        (
            Answer::Refused("quota".into()),
            REASON_FAILED_CREATE,
            "quota",
        ),
    ] {
        let Step::Report(status) = after(&seen(&due, None), create.clone(), answer) else {
            panic!("{reason}: reported");
        };
        assert_eq!(status.phase, Some(AtPhase::Pending), "{reason}");
        assert_eq!(condition(&status, CONDITION_SCHEDULED), ("False", reason));
        let message = &conditions::find(&status.conditions, CONDITION_SCHEDULED)
            .unwrap()
            .message;
        assert!(message.starts_with(says), "{message}");
    }
}
