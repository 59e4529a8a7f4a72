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
/// answer (`controller::memory::Memory::readiness`): whether it may be acted on.
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
mod tests;
