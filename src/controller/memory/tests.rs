use super::expected_tests::{create, creates, touched};
use super::*;
use crate::api::PodSetStatus;
use crate::cache::Change;
use crate::expectations::{Answer, EXPECTATIONS_TTL, Write};
use crate::plan::podset::Readiness;

#[test]
fn a_deletion_is_remembered_until_the_watch_shows_it_or_an_hour_passed() {
    let memory = Memory::default();
    let t0 = Instant::now();
    memory.found_gone("a", t0);
    memory.found_gone("b", t0);
    assert!(memory.is_gone("a") && !memory.is_gone("c"));
    memory.forget("a");
    assert!(!memory.is_gone("a"));
    memory.found_gone("c", t0 + REMEMBERED);
    assert!(!memory.is_gone("b"), "kept past {REMEMBERED:?}");
    assert!(memory.is_gone("c"));
}

#[test]
fn a_round_for_the_same_generation_replaces_until_forgotten_or_an_hour_passed() {
    let memory = Memory::default();
    let t0 = Instant::now();
    assert!(!memory.replaces("a", 1), "a first round");
    memory.made_pods("a", 1, t0);
    assert!(memory.replaces("a", 1));
    assert!(!memory.replaces("a", 2), "a new spec");
    memory.made_pods("b", 1, t0);
    memory.forget("b");
    assert!(!memory.replaces("b", 1));
    memory.made_pods("c", 1, t0 + REMEMBERED);
    assert!(!memory.replaces("a", 1), "kept past {REMEMBERED:?}");
    assert!(memory.replaces("c", 1));
}

#[test]
fn backoff_is_jittered() {
    let memory = Memory::default();
    let delays: std::collections::HashSet<_> = (0..32)
        .map(|i| memory.retry_delay(&i.to_string()))
        .collect();
    assert!(delays.len() > 1, "failures retry in lockstep: {delays:?}");
}

#[test]
fn stale_failures_are_dropped_and_other_memories_kept() {
    let (memory, t0) = (Memory::default(), Instant::now());
    memory.retry_delay_at("gone", t0);
    memory.retry_delay_at("round", t0);
    memory.made_pods("round", 1, t0);
    memory.retry_delay_at("failing", t0 + Failures::MAX);
    memory.retry_delay_at("new", t0 + Failures::MAX * 2);
    let records = memory.records.lock();
    let mut uids: Vec<_> = records.keys().map(|u| u.to_string()).collect();
    uids.sort();
    assert_eq!(uids, ["failing", "new", "round"]);
    assert!(
        records[&Uid::from("round")].failures.is_none(),
        "its failures are stale"
    );
}

#[test]
fn backoff_doubles_to_a_cap_and_resets() {
    let memory = Memory::default();
    let delays: Vec<Duration> = (0..12).map(|_| memory.retry_delay("x")).collect();
    let within = |d: Duration, full: u64| {
        d >= Duration::from_secs(full) / 2 && d <= Duration::from_secs(full)
    };
    for (d, full) in delays.iter().zip([1, 2, 4, 8, 16]) {
        assert!(within(*d, full), "{d:?} for {full} s");
    }
    assert!(within(*delays.last().unwrap(), 300));
    assert!(within(memory.retry_delay("y"), 1), "per object");
    assert!(memory.is_failing("x"));
    memory.succeeded("x");
    assert!(!memory.is_failing("x"));
    assert!(within(memory.retry_delay("x"), 1));
}

/// One record an object, and one forget drops all of it.
#[test]
fn forget_drops_every_memory_of_an_object() {
    let (memory, t0) = (Memory::default(), Instant::now());
    let mut failed = crate::plan::fixtures::pod("ps-pod-1");
    failed.phase = Phase::Failed;
    memory.found_gone("ps", t0);
    memory.made_pods("ps", 1, t0);
    memory.retry_delay_at("ps", t0);
    assert_eq!(memory.saw_pods("ps", &[Arc::new(failed)], t0).new.len(), 1);
    assert!(memory.records.lock()[&Uid::from("ps")].streak.is_some());
    let create = Write::Create("ps-pod-2".into());
    memory.expect("ps", "ns", [&create], t0);
    memory.sending("ps", &PodSetStatus::default());
    memory.wrote_status("ps", "1", "2", PodSetStatus::default(), t0);
    memory.suspect(&Uid::from("ps"), "ps-pod-3", &Uid::from("p3"));
    memory.forget("ps");
    assert!(memory.is_empty());
    memory.succeeded("other");
    assert!(
        memory.is_empty(),
        "a success of an object with no record makes none"
    );
}

/// The hot paths (a pod event meeting an expectation, a status write's watch event) leave no
/// record behind once nothing is left in it, and one object's writes are not another's.
#[test]
fn a_record_goes_as_soon_as_nothing_is_left_in_it() {
    let (memory, t0) = (Memory::default(), Instant::now());
    let create = Write::Create("p1".into());
    memory.expect("ps", "ns", [&create], t0);
    let change = crate::cache::PodChange {
        owner: crate::pod::Owner {
            kind: "PodSet".into(),
            name: "ps".into(),
            uid: "ps".into(),
        },
        namespace: "ns".into(),
        pod_uid: "u1".into(),
        pod_name: "p1".into(),
        change: crate::cache::Change::Added,
    };
    memory.observe(&change, t0);
    assert!(memory.is_empty(), "met expectations kept");
    let status = PodSetStatus::default();
    memory.wrote_status("ps", "1", "2", status.clone(), t0);
    let hash = crate::status_writes::status_hash(Some(&status));
    assert!(memory.wrote("ps", "2", hash) && !memory.wrote("other", "2", hash));
    let written = memory.written_over::<PodSetStatus>("ps", "1", t0);
    assert_eq!(written.map(|w| w.version), Some("2".to_string()));
    assert_eq!(memory.written_over::<PodSetStatus>("other", "1", t0), None);
    memory.observed("ps", "3");
    assert!(memory.is_empty(), "a write the store moved past kept");
}

#[test]
fn records_of_owners_never_seen_again_are_dropped() {
    let e = Memory::default();
    let t0 = Instant::now();
    // An owner deleted while the watch was away: nothing reads or lowers its record again.
    e.expect("gone", "ns", &creates(["p1"]), t0);
    e.expect("o", "ns", &creates(["p2"]), t0 + EXPECTATIONS_TTL);
    assert_eq!(e.records.lock().len(), 1, "an expired record kept");
}

#[test]
fn a_create_answered_after_its_record_expired_is_still_kept_to_look_up() {
    let e = Memory::default();
    let t0 = Instant::now();
    e.expect("o", "ns", &creates(["p1"]), t0);
    // The answer comes after the TTL (a slow API server): the pod exists, the watch has not
    // shown it, and it may leave the watch before it does.
    let late = t0 + EXPECTATIONS_TTL;
    e.answered("o", &create("p1"), Answer::Made(Uid::from("u1")), late);
    assert_eq!(
        e.take_lapsed("o", late),
        vec![("p1".to_string(), Uid::from("u1"))]
    );
    assert_eq!(e.readiness("o", late), Readiness::Satisfied);
}

#[test]
fn pods_made_that_the_watch_never_showed_are_handed_out_once_their_record_expires() {
    let e = Memory::default();
    let t0 = Instant::now();
    e.expect("o", "ns", &creates(["p1", "p2", "p3"]), t0);
    e.answered("o", &create("p1"), Answer::Made(Uid::from("u1")), t0);
    e.answered("o", &create("p2"), Answer::Made(Uid::from("p2")), t0);
    e.observe(&touched("o", "p2", Change::Added), t0);
    assert_eq!(
        e.take_lapsed("o", t0),
        vec![],
        "handed out before the record expired"
    );
    let later = t0 + EXPECTATIONS_TTL;
    assert_eq!(e.readiness("o", later), Readiness::Satisfied);
    // p2 was seen; p3 was never answered, so no pod is known to be its.
    assert_eq!(
        e.take_lapsed("o", later),
        vec![("p1".to_string(), Uid::from("u1"))]
    );
    assert_eq!(e.take_lapsed("o", later), vec![], "handed out twice");
    // A lapsed pod nobody takes is dropped a TTL on, and with its owner.
    e.expect("gone", "ns", &creates(["q"]), t0);
    e.answered("gone", &create("q"), Answer::Made(Uid::from("uq")), t0);
    e.expect("o", "ns", &creates(["p4"]), later);
    let lapsed = |e: &Memory| {
        let records = e.records.lock();
        records.values().filter(|r| r.lapsed.is_some()).count()
    };
    assert_eq!(lapsed(&e), 1);
    e.expect("x", "ns", &creates(["p5"]), later);
    e.answered("x", &create("p5"), Answer::Made(Uid::from("u5")), later);
    e.readiness("x", later + EXPECTATIONS_TTL);
    let past = later + EXPECTATIONS_TTL;
    assert!(e.take_lapsed("gone", past).is_empty(), "kept past its TTL");
    e.forget("x");
    e.expect("y", "ns", &creates(["p6"]), past);
    assert_eq!(lapsed(&e), 0, "kept past its owner");
}

/// Every PodSet keeps a record for an hour after its pods are made, so at W5's 10,000 the
/// map holds 16,384 of them inline: each byte here is 16 KiB there. What only some objects
/// use, for seconds or while failing, is boxed.
#[test]
fn a_record_holds_inline_only_what_every_podset_keeps() {
    assert!(
        std::mem::size_of::<Record>() <= 88,
        "{} bytes",
        std::mem::size_of::<Record>()
    );
}
