use super::*;

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
    memory.forget("ps");
    assert!(memory.is_empty());
    memory.succeeded("other");
    assert!(
        memory.is_empty(),
        "a success of an object with no record makes none"
    );
}
