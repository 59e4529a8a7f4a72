//! The PodSet plan's unit tests: decide, after, the plan, the finished excess and the slow-start batches, without I/O.

use super::*;
use crate::plan::fixtures::{arcs, at, names, pod};
use crate::pod::Phase;

#[test]
fn counts_only_active_pods() {
    let mut terminating = pod("t");
    terminating.terminating = true;
    let mut done = pod("d");
    done.phase = Phase::Succeeded;
    let mut failed = pod("f");
    failed.phase = Phase::Failed;
    let mut pending = pod("p");
    pending.phase = Phase::Pending;
    let pods = arcs(vec![pod("a"), pending, terminating, done, failed]);
    assert_eq!(plan(5, &pods), Plan::Create(3));
    assert_eq!(plan(2, &pods), Plan::Steady);
    match plan(1, &pods) {
        Plan::Delete(v) => assert_eq!(
            names(&v),
            ["p"],
            "the Pending pod goes before the Running one"
        ),
        other => panic!("expected a delete, got {other:?}"),
    }
    assert_eq!(plan(3, &[]), Plan::Create(3));
}

/// As upstream's `FilterActivePods`: a pod whose node stopped reporting still counts.

#[test]
fn pods_in_phase_unknown_count_as_active() {
    let mut unknown = pod("u");
    unknown.phase = Phase::Unknown;
    assert_eq!(plan(2, &arcs(vec![pod("a"), unknown])), Plan::Steady);
}

#[test]
fn slow_start_doubles_and_sums_to_total() {
    assert_eq!(slow_start_batches(0), Vec::<usize>::new());
    assert_eq!(slow_start_batches(1), [1]);
    assert_eq!(slow_start_batches(5), [1, 2, 2]);
    assert_eq!(slow_start_batches(10), [1, 2, 4, 3]);
    assert_eq!(slow_start_batches(1000).iter().sum::<usize>(), 1000);
}

#[test]
fn keeps_only_the_newest_finished_pods() {
    let mut pods = Vec::new();
    for (i, name) in ["f1", "f2", "f3", "f4", "f5"].iter().enumerate() {
        let mut p = pod(name);
        p.phase = if i % 2 == 0 {
            Phase::Failed
        } else {
            Phase::Succeeded
        };
        p.created = at(i as i64);
        pods.push(p);
    }
    pods.push(pod("running"));
    let excess = finished_excess(&arcs(pods));
    assert_eq!(names(&excess), ["f2", "f1"]);
}

fn seen<'a>(readiness: &'a Readiness, pods: &'a [Arc<CachedPod>]) -> Seen<'a> {
    Seen {
        replicas: 2,
        deleting: false,
        gone: false,
        in_doubt: false,
        readiness,
        pods,
        held: None,
    }
}

#[test]
fn one_step_per_podset() {
    let (ready, waiting) = (
        Readiness::Satisfied,
        Readiness::Waiting(Duration::from_secs(9)),
    );
    let old: Vec<_> = (0..4)
        .map(|i| {
            let mut p = pod(&format!("f{i}"));
            p.phase = Phase::Failed;
            p.created = at(i);
            p
        })
        .collect();
    let pods = arcs(old.into_iter().chain([pod("a")]).collect());
    let gone = Seen {
        gone: true,
        deleting: true,
        ..seen(&ready, &pods)
    };
    assert_eq!(decide(&gone), Step::AwaitChange);
    let deleting = Seen {
        deleting: true,
        ..seen(&waiting, &pods)
    };
    assert_eq!(decide(&deleting), Step::Report);
    assert_eq!(
        decide(&seen(&waiting, &pods)),
        Step::SendAgain { read_first: false }
    );
    let resend_in_doubt = Seen {
        in_doubt: true,
        ..seen(&waiting, &pods)
    };
    assert!(
        decide(&resend_in_doubt).reads_first(),
        "a resend may create"
    );
    let Step::Act {
        plan,
        read_first,
        trim,
    } = decide(&seen(&ready, &pods))
    else {
        panic!("not acted on");
    };
    assert_eq!((plan, read_first), (Plan::Create(1), false));
    assert_eq!(names(&trim), ["f0"], "the oldest finished pod beyond three");
    // Its pods failed lately: no create yet, the finished pods trimmed all the same.
    let left = Duration::from_secs(4);
    let held = Seen {
        held: Some(left),
        ..seen(&ready, &pods)
    };
    let Step::Hold { left: l, trim } = decide(&held) else {
        panic!("not held");
    };
    assert_eq!((l, names(&trim)), (left, vec!["f0"]));
    let held_but_whole = Seen {
        replicas: 1,
        ..held
    };
    assert!(
        matches!(
            decide(&held_but_whole),
            Step::Act {
                plan: Plan::Steady,
                ..
            }
        ),
        "a hold stops creates only"
    );
    let in_doubt = Seen {
        in_doubt: true,
        ..seen(&ready, &pods)
    };
    assert!(matches!(
        decide(&in_doubt),
        Step::Act {
            read_first: true,
            ..
        }
    ));
    let enough = Seen {
        in_doubt: true,
        replicas: 1,
        ..seen(&ready, &pods)
    };
    let Step::Act {
        plan, read_first, ..
    } = decide(&enough)
    else {
        panic!("not acted on");
    };
    assert_eq!(
        (plan, read_first),
        (Plan::Steady, false),
        "read only to create"
    );
}

#[test]
fn what_follows_a_step() {
    let failed = Outcome::Failed(Failure {
        reason: "FailedCreate",
        message: "quota".into(),
    });
    let (ready, waiting) = (
        Readiness::Satisfied,
        Readiness::Waiting(Duration::from_secs(9)),
    );
    let after_ = |outcome: &Outcome, before: &Readiness, now: &Readiness| {
        let After { write_status, next } = after(outcome, before, now);
        (write_status, next)
    };
    // A failure is reported at once and retried with backoff, whatever is pending.
    assert_eq!(after_(&failed, &ready, &waiting), (true, Next::Retry));
    // Own writes on their way: no status yet, look again when they are due.
    let wait = Next::In(Duration::from_secs(9));
    assert_eq!(after_(&Outcome::Succeeded, &ready, &waiting), (false, wait));
    // Settled now: write, and go on at once.
    let at_once = Next::In(Duration::ZERO);
    assert_eq!(
        after_(&Outcome::Succeeded, &waiting, &ready),
        (true, at_once)
    );
    // Nothing pending: write if changed, and resync.
    assert_eq!(
        after_(&Outcome::Succeeded, &ready, &ready),
        (true, Next::Resync)
    );
    assert_eq!(
        after_(&Outcome::NotActed, &waiting, &ready),
        (true, Next::Resync)
    );
    // Being deleted: written now, though creates are still on their way (seed 1175).
    assert_eq!(
        after_(&Outcome::Stopped, &waiting, &waiting),
        (true, Next::Resync)
    );
}
