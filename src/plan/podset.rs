//! What a PodSet needs, decided without I/O: one [`Step`] per reconcile (how many pods to
//! create, which to delete and in what order, which finished pods to trim), and what follows
//! it ([`after`]: whether to write the status, when to look again). The status it reports
//! and the pod it creates are decided in [`status`] and [`pod`].

mod pod;
pub mod replacing;
mod status;
pub use pod::{POD_VERSION, pod_for, selector};
pub use status::{CONDITION_AVAILABLE, CONDITION_REPLICA_FAILURE, Failure, Outcome, status};

use std::cmp::Reverse;
use std::sync::Arc;
use std::time::Duration;

use crate::pod::CachedPod;

/// Finished (Succeeded/Failed) pods kept per PodSet for `kubectl logs`; older ones are deleted
/// so that replaced pods do not pile up.
pub const MAX_FINISHED_PODS: usize = 3;

/// Whether the watch has shown all of an owner's own creates and deletes, as its expectations
/// answer (`expectations::Expectations::readiness`): whether it may be acted on.
#[derive(Debug, PartialEq, Eq)]
pub enum Readiness {
    Satisfied,
    /// Still waiting for the watch; give up waiting after this long.
    Waiting(Duration),
}

/// What the shell knows of a PodSet when it decides.
pub struct Seen<'a> {
    pub replicas: i32,
    /// Its deletion has begun: the garbage collector removes its pods.
    pub deleting: bool,
    /// A write found it deleted, though its watch has not said so yet.
    pub gone: bool,
    /// The cache's word that it exists is in doubt: it is read from the API server before
    /// pods are made, or sent again, for it.
    pub in_doubt: bool,
    /// Whether the watch has shown all of this instance's own creates and deletes.
    pub readiness: &'a Readiness,
    /// Its pods, read after `readiness`.
    pub pods: &'a [Arc<CachedPod>],
    /// How long creates still wait after its pods failed ([`replacing`]).
    pub held: Option<Duration>,
}

/// What one reconcile of a PodSet does.
#[derive(Debug, PartialEq)]
pub enum Step {
    /// Nothing, until its watch says more.
    AwaitChange,
    /// Only report the status (it is being deleted: creating pods would race the garbage
    /// collector).
    Report,
    /// Some creates or deletes of its own are not in the watch yet: send again those whose
    /// answers were lost (after reading the PodSet, if `read_first`), and act on it once the
    /// watch has shown them all.
    SendAgain { read_first: bool },
    /// Carry out `plan` (after reading the PodSet, if `read_first`), then, if that went
    /// well, delete the finished pods in `trim`.
    Act {
        plan: Plan,
        read_first: bool,
        trim: Vec<Arc<CachedPod>>,
    },
    /// Pods are missing, but its pods failed lately: make none for `left` more, and report
    /// why; delete the finished pods in `trim`.
    Hold {
        left: Duration,
        trim: Vec<Arc<CachedPod>>,
    },
}

/// The one step for the PodSet seen.
pub fn decide(seen: &Seen) -> Step {
    if seen.gone {
        return Step::AwaitChange;
    }
    if seen.deleting {
        return Step::Report;
    }
    if let Readiness::Waiting(_) = seen.readiness {
        // A create sent again makes the pod anew if the first send did not, so it is in doubt
        // as a first create is; a PodSet found gone needs none of its writes sent again.
        return Step::SendAgain {
            read_first: seen.in_doubt,
        };
    }
    let plan = plan(seen.replicas, seen.pods);
    if let (Plan::Create(_), Some(left)) = (&plan, seen.held) {
        return Step::Hold {
            left,
            trim: finished_excess(seen.pods),
        };
    }
    Step::Act {
        read_first: seen.in_doubt && matches!(plan, Plan::Create(_)),
        plan,
        trim: finished_excess(seen.pods),
    }
}

impl Step {
    /// Whether the PodSet is read from the API server before the step is carried out.
    pub fn reads_first(&self) -> bool {
        match self {
            Step::SendAgain { read_first } | Step::Act { read_first, .. } => *read_first,
            Step::AwaitChange | Step::Report | Step::Hold { .. } => false,
        }
    }
}

/// What follows a step.
#[derive(Debug, PartialEq, Eq)]
pub struct After {
    /// Write the status now. While the step's own creates or deletes are still on their way
    /// to the watch, a status would describe a moment already over: it is written once the
    /// watch has shown them all (one write per scale-up instead of one per pod). A failure
    /// is reported at once.
    pub write_status: bool,
    pub next: Next,
}

/// When to reconcile the PodSet again.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// After a delay that grows with each failure in a row.
    Retry,
    /// After this long.
    In(Duration),
    /// After the resync period (jittered), the failures in a row forgotten.
    Resync,
}

/// What follows a step that came to `outcome`, taken when the watch showed `before` of this
/// instance's own writes, and now `now`.
pub fn after(outcome: &Outcome, before: &Readiness, now: &Readiness) -> After {
    let failed = matches!(outcome, Outcome::Failed(_));
    let pending = match now {
        Readiness::Satisfied => None,
        Readiness::Waiting(left) => Some(*left),
    };
    let next = match (outcome, pending) {
        (Outcome::Failed(_), _) => Next::Retry,
        // Its status says what it has now: creates still on their way are not sent again, and
        // the watch events of any that landed bring the next report.
        (Outcome::Stopped, _) => Next::Resync,
        (Outcome::Held(_, left), _) => Next::In(*left),
        (_, Some(left)) => Next::In(left),
        // Settled, and nothing left to wait for: the scale-up goes on at once. The pods that
        // settled it may all have been seen already, so no watch event would bring it back.
        (Outcome::Succeeded, None) if matches!(before, Readiness::Waiting(_)) => {
            Next::In(Duration::ZERO)
        }
        _ => Next::Resync,
    };
    let stopped = matches!(outcome, Outcome::Stopped | Outcome::Held(..));
    After {
        write_status: pending.is_none() || failed || stopped,
        next,
    }
}

/// The change a PodSet needs.
#[derive(Debug, PartialEq)]
pub enum Plan {
    Create(usize),
    Delete(Vec<Arc<CachedPod>>),
    Steady,
}

/// Compares the available pods with `replicas`.
pub fn plan(replicas: i32, pods: &[Arc<CachedPod>]) -> Plan {
    let active: Vec<_> = pods.iter().filter(|p| p.is_active()).cloned().collect();
    let want = usize::try_from(replicas.max(0)).unwrap_or(0);
    match want.cmp(&active.len()) {
        std::cmp::Ordering::Greater => Plan::Create(want - active.len()),
        std::cmp::Ordering::Less => {
            let excess = active.len() - want;
            Plan::Delete(super::rank::victims(active, excess))
        }
        std::cmp::Ordering::Equal => Plan::Steady,
    }
}

/// Finished pods beyond [`MAX_FINISHED_PODS`], oldest first.
pub fn finished_excess(pods: &[Arc<CachedPod>]) -> Vec<Arc<CachedPod>> {
    let mut finished: Vec<_> = pods
        .iter()
        .filter(|p| p.phase.finished() && !p.terminating)
        .cloned()
        .collect();
    finished.sort_by_key(|p| (Reverse(p.created), p.name.clone()));
    finished.split_off(finished.len().min(MAX_FINISHED_PODS))
}

/// Create batch sizes: 1, 2, 4, ... summing to `total`. Stopping at the first batch with a
/// failure makes a systematic error (a quota, say) cost one request instead of `total`.
pub fn slow_start_batches(total: usize) -> Vec<usize> {
    let mut batches = Vec::new();
    let (mut left, mut size) = (total, 1);
    while left > 0 {
        let batch = size.min(left);
        batches.push(batch);
        left -= batch;
        size *= 2;
    }
    batches
}

#[cfg(test)]
mod tests {
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
}
