//! The expectations in an owner's record, as the ReplicaSet controller's tests drive them.

use super::*;
use crate::cache::{Change, PodChange};
use crate::expectations::{Answer, EXPECTATIONS_TTL, Unsettled, Write};
use crate::plan::podset::Readiness;
use crate::pod::Owner;

pub(super) fn create(name: &str) -> Write {
    Write::Create(name.into())
}

pub(super) fn creates<const N: usize>(names: [&str; N]) -> Vec<Write> {
    names.map(create).into()
}

/// The delete of pod `uid`, named `web-pod<uid>`.
fn delete(pod: &str) -> Write {
    Write::Delete(Uid::from(pod), format!("web-pod{pod}"))
}

fn deletes<const N: usize>(pods: [&str; N]) -> Vec<Write> {
    pods.map(delete).into()
}

pub(super) fn touched(owner: &str, pod: &str, change: Change) -> PodChange {
    PodChange {
        owner: Owner {
            kind: "PodSet".into(),
            name: "x".into(),
            uid: owner.into(),
        },
        namespace: "ns".into(),
        pod_uid: pod.into(),
        pod_name: pod.into(),
        change,
    }
}

#[test]
fn creates_are_met_when_the_watch_shows_them() {
    let e = Memory::default();
    let t0 = Instant::now();
    assert_eq!(e.readiness("o", t0), Readiness::Satisfied);
    e.expect("o", "ns", &creates(["p1", "p2"]), t0);
    assert!(matches!(e.readiness("o", t0), Readiness::Waiting(_)));
    e.observe(&touched("o", "p1", Change::Added), t0);
    e.observe(&touched("o", "p1", Change::Updated), t0);
    assert!(
        matches!(e.readiness("o", t0), Readiness::Waiting(_)),
        "one of two seen"
    );
    e.observe(&touched("other", "p2", Change::Added), t0);
    assert!(
        matches!(e.readiness("o", t0), Readiness::Waiting(_)),
        "another owner's pod"
    );
    e.observe(&touched("o", "q", Change::Added), t0);
    assert!(
        matches!(e.readiness("o", t0), Readiness::Waiting(_)),
        "a pod of the owner's this instance did not create"
    );
    e.observe(&touched("o", "p2", Change::Added), t0);
    assert_eq!(e.readiness("o", t0), Readiness::Satisfied);
}

#[test]
fn failed_creates_are_not_expected() {
    let e = Memory::default();
    let t0 = Instant::now();
    e.expect("o", "ns", &creates(["p1", "p2", "p3", "p4"]), t0);
    for name in ["p2", "p3", "p4"] {
        e.answered("o", &create(name), Answer::Nothing, t0);
    }
    e.observe(&touched("o", "p1", Change::Added), t0);
    assert_eq!(e.readiness("o", t0), Readiness::Satisfied);
}

#[test]
fn an_unsettled_create_is_expected_until_an_answer_says_whether_it_landed() {
    let e = Memory::default();
    let t0 = Instant::now();
    e.expect("o", "ns", &creates(["web-poda", "web-podb"]), t0);
    e.answered("o", &create("web-podb"), Answer::Unknown, t0);
    e.observe(&touched("o", "web-poda", Change::Added), t0);
    assert!(
        matches!(e.readiness("o", t0), Readiness::Waiting(_)),
        "web-podb may still land"
    );
    assert_eq!(e.to_send_again("o", t0).creates, ["web-podb"]);
    e.to_send_again("o", t0);
    e.answered("o", &create("web-podb"), Answer::Made(Uid::from("b")), t0);
    assert!(
        matches!(e.readiness("o", t0), Readiness::Waiting(_)),
        "made, but the watch has not shown it"
    );
    assert_eq!(e.to_send_again("o", t0), Unsettled::default());
    e.observe(&touched("o", "b", Change::Added), t0);
    let mut made = touched("o", "b", Change::Added);
    made.pod_name = "web-podb".into();
    e.observe(&made, t0);
    assert_eq!(e.readiness("o", t0), Readiness::Satisfied);

    // Settled as never made: no pod to wait for.
    e.expect("o", "ns", &creates(["web-podc"]), t0);
    e.answered("o", &create("web-podc"), Answer::Unknown, t0);
    e.to_send_again("o", t0);
    e.answered("o", &create("web-podc"), Answer::Nothing, t0);
    assert_eq!(e.readiness("o", t0), Readiness::Satisfied);
    assert_eq!(e.to_send_again("o", t0), Unsettled::default());
}

/// Found by the simulation (seed 306401): the watch showed the pod of a create whose answer
/// never came, a person deleted it and it was replaced; the create, taken as unsettled when
/// it timed out and sent again, made the deleted pod anew: one over the spec.
#[test]
fn a_create_whose_pod_the_watch_showed_is_never_sent_again() {
    let e = Memory::default();
    let t0 = Instant::now();
    e.expect("o", "ns", &creates(["web-poda"]), t0);
    e.observe(&touched("o", "web-poda", Change::Added), t0);
    e.answered("o", &create("web-poda"), Answer::Unknown, t0);
    assert_eq!(e.to_send_again("o", t0), Unsettled::default());
    assert_eq!(e.readiness("o", t0), Readiness::Satisfied);
}

/// Found by the simulation (seed 5070): the watch showed the pod of a create sent again
/// whose answer never came; sent a third time (now looked up), the answer named that pod,
/// which the watch would never show again: the PodSet waited out the TTL, then wrote its
/// status while idle.
#[test]
fn a_pod_shown_while_a_create_was_sent_again_still_meets_it_after_another_send() {
    let e = Memory::default();
    let t0 = Instant::now();
    let shown = touched("o", "web-poda", Change::Added);
    e.expect("o", "ns", &creates(["web-poda"]), t0);
    e.answered("o", &create("web-poda"), Answer::Unknown, t0);
    e.to_send_again("o", t0);
    e.observe(&shown, t0);
    e.answered("o", &create("web-poda"), Answer::Unknown, t0);
    assert_eq!(e.to_send_again("o", t0).look_ups, ["web-poda"]);
    e.answered(
        "o",
        &create("web-poda"),
        Answer::Made(shown.pod_uid.clone()),
        t0,
    );
    assert_eq!(e.readiness("o", t0), Readiness::Satisfied);
}

/// Found by the simulation (seed 7947553689885508401): the watch showed the pod of a create
/// sent again whose answer was lost; a person deleted the pod, and a third send under its name
/// made it anew, over a spec scaled down meanwhile. Such a create is looked up instead.
#[test]
fn a_create_whose_pod_was_shown_while_it_was_sent_again_is_looked_up_not_sent() {
    let e = Memory::default();
    let t0 = Instant::now();
    let shown = touched("o", "web-poda", Change::Added);
    e.expect("o", "ns", &creates(["web-poda", "web-podb"]), t0);
    e.answered("o", &create("web-poda"), Answer::Unknown, t0);
    e.answered("o", &create("web-podb"), Answer::Unknown, t0);
    e.to_send_again("o", t0);
    e.observe(&shown, t0);
    e.answered("o", &create("web-poda"), Answer::Unknown, t0);
    e.answered("o", &create("web-podb"), Answer::Unknown, t0);
    let unsettled = e.to_send_again("o", t0);
    assert_eq!(
        unsettled.creates,
        ["web-podb"],
        "no pod of its name was shown"
    );
    assert_eq!(unsettled.look_ups, ["web-poda"]);
    // Deleted since: nothing has its name, nothing is to come of it.
    e.answered("o", &create("web-poda"), Answer::Nothing, t0);
    e.answered("o", &create("web-podb"), Answer::Nothing, t0);
    assert_eq!(e.readiness("o", t0), Readiness::Satisfied);
}

/// While a create is sent again, a pod of its name may be the first send's (deleted since)
/// or this one's: only the one the answer names meets it, whenever the watch shows it.
#[test]
fn a_create_sent_again_is_met_only_by_the_pod_its_answer_names() {
    let e = Memory::default();
    let t0 = Instant::now();
    let pod = |uid: &str| {
        let mut t = touched("o", uid, Change::Added);
        t.pod_name = "web-poda".into();
        t
    };
    e.expect("o", "ns", &creates(["web-poda"]), t0);
    e.answered("o", &create("web-poda"), Answer::Unknown, t0);
    e.to_send_again("o", t0);
    e.observe(&pod("first"), t0);
    e.answered(
        "o",
        &create("web-poda"),
        Answer::Made(Uid::from("second")),
        t0,
    );
    assert!(
        matches!(e.readiness("o", t0), Readiness::Waiting(_)),
        "the first send's pod met the second's create"
    );
    e.observe(&pod("second"), t0);
    assert_eq!(e.readiness("o", t0), Readiness::Satisfied);

    // Shown before the answer came.
    e.expect("o", "ns", &creates(["web-poda"]), t0);
    e.answered("o", &create("web-poda"), Answer::Unknown, t0);
    e.to_send_again("o", t0);
    e.observe(&pod("third"), t0);
    e.answered(
        "o",
        &create("web-poda"),
        Answer::Made(Uid::from("third")),
        t0,
    );
    assert_eq!(e.readiness("o", t0), Readiness::Satisfied);
}

#[test]
fn an_unsettled_delete_is_settled_by_an_answer_or_the_watch() {
    let e = Memory::default();
    let t0 = Instant::now();
    e.expect("o", "ns", &deletes(["a", "b"]), t0);
    e.answered("o", &delete("a"), Answer::Unknown, t0);
    e.answered("o", &delete("b"), Answer::Unknown, t0);
    assert_eq!(
        e.to_send_again("o", t0).deletes,
        [
            ("a".into(), "web-poda".into()),
            ("b".into(), "web-podb".into())
        ]
    );
    e.observe(&touched("o", "a", Change::Removed), t0);
    e.answered("o", &delete("b"), Answer::Deleting, t0);
    assert!(
        matches!(e.readiness("o", t0), Readiness::Waiting(_)),
        "b's delete answered, but the watch has not shown it"
    );
    assert_eq!(e.to_send_again("o", t0), Unsettled::default());
    e.answered("o", &delete("b"), Answer::Nothing, t0);
    assert_eq!(e.readiness("o", t0), Readiness::Satisfied);
    assert_eq!(
        e.to_send_again("o", t0 + EXPECTATIONS_TTL),
        Unsettled::default()
    );
}

/// A panic in one reconcile while it holds the lock must not fail every later one.
#[test]
fn a_panic_under_the_lock_does_not_poison_the_records() {
    let e = Memory::default();
    let t0 = Instant::now();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        e.with("o", t0, |_| panic!("a bug in one reconcile"))
    }));
    assert!(panicked.is_err());
    e.expect("o", "ns", &creates(["p"]), t0);
    assert!(matches!(e.readiness("o", t0), Readiness::Waiting(_)));
}

/// Issue 26, fault 5: a reconcile cut off at its deadline drops its creates and deletes
/// unanswered; each is left to be sent again, not expected until the TTL.
#[test]
fn a_write_dropped_unanswered_is_unsettled() {
    let e = Memory::default();
    let t0 = Instant::now();
    e.expect("o", "ns", &creates(["web-podb", "web-podc"]), t0);
    e.expect("o", "ns", &deletes(["a"]), t0);
    Unanswered::new(&e, "o", create("web-podb")).answered(Answer::Made(Uid::from("b")));
    drop(Unanswered::new(&e, "o", create("web-podc")));
    drop(Unanswered::new(&e, "o", delete("a")));
    let unsettled = e.to_send_again("o", t0);
    assert_eq!(unsettled.creates, ["web-podc"]);
    assert_eq!(unsettled.deletes, [("a".into(), "web-poda".into())]);
}

/// Issue 26: a pod in another namespace that names the owner as its controller (anyone
/// may write one) meets none of the owner's expectations.
#[test]
fn only_pods_in_the_owners_namespace_meet_its_expectations() {
    let e = Memory::default();
    let t0 = Instant::now();
    e.expect("o", "ns", &creates(["p"]), t0);
    let mut forged = touched("o", "p", Change::Added);
    forged.namespace = "elsewhere".into();
    e.observe(&forged, t0);
    assert!(matches!(e.readiness("o", t0), Readiness::Waiting(_)));
    e.observe(&touched("o", "p", Change::Added), t0);
    assert_eq!(e.readiness("o", t0), Readiness::Satisfied);
}

#[test]
fn deletes_are_tracked_by_uid() {
    let e = Memory::default();
    let t0 = Instant::now();
    e.expect("o", "ns", &deletes(["a", "b"]), t0);
    e.observe(&touched("o", "c", Change::Removed), t0);
    assert!(
        matches!(e.readiness("o", t0), Readiness::Waiting(_)),
        "not a pod we deleted"
    );
    e.observe(&touched("o", "a", Change::Removed), t0);
    e.answered("o", &delete("b"), Answer::Nothing, t0);
    assert_eq!(e.readiness("o", t0), Readiness::Satisfied);
}

#[test]
fn an_expired_record_counts_as_nothing_and_lowering_keeps_its_expiry() {
    let e = Memory::default();
    let t0 = Instant::now();
    // Two creates whose pods the watch never showed: the record expires.
    e.expect("o", "ns", &creates(["p1", "p2"]), t0);
    let later = t0 + EXPECTATIONS_TTL + Duration::from_secs(1);
    assert_eq!(e.readiness("o", later), Readiness::Satisfied);
    // A fresh round of one create is met by its pod alone.
    e.expect("o", "ns", &creates(["p3"]), later);
    e.observe(&touched("o", "p3", Change::Added), later);
    assert_eq!(
        e.readiness("o", later),
        Readiness::Satisfied,
        "the expired creates were added to the new ones"
    );
    // Lowering a record does not push its expiry out.
    e.expect("q", "ns", &creates(["p4", "p5"]), t0);
    e.answered(
        "q",
        &create("p4"),
        Answer::Nothing,
        t0 + Duration::from_secs(240),
    );
    assert_eq!(
        e.readiness("q", t0 + EXPECTATIONS_TTL),
        Readiness::Satisfied,
        "a lowering restarted the five minutes"
    );
}

#[test]
fn expectations_expire() {
    let e = Memory::default();
    let t0 = Instant::now();
    e.expect("o", "ns", &creates(["p"]), t0);
    match e.readiness("o", t0 + Duration::from_secs(60)) {
        Readiness::Waiting(left) => {
            assert_eq!(left, EXPECTATIONS_TTL - Duration::from_secs(60))
        }
        r => panic!("expected to wait, got {r:?}"),
    }
    assert_eq!(
        e.readiness("o", t0 + EXPECTATIONS_TTL),
        Readiness::Satisfied
    );
    e.forget("o");
    assert_eq!(e.readiness("o", t0), Readiness::Satisfied);
}
