//! The users of the cluster, drawn from the seed: they create, scale, edit the template of
//! and delete PodSets
//! (in the background, the foreground, or orphaning their pods), create, edit and delete Ats
//! due before, during and after the faults, hold either with another controller's finalizer,
//! delete, evict, annotate, disown or hand over pods under the operator, ungate an At's
//! pod, take the operator's label off its pods, forge a pod in
//! another namespace that names a PodSet as its controller, and delete the leader Lease or
//! write it as someone else's. What they do is carried out in [`perform`].

use std::sync::Arc;
use std::time::Duration;

use crate::model::resource::Kind;
use crate::model::store::finalizers::Propagation;
use crate::world::Sim;

pub const NAMESPACES: [&str; 2] = ["ns-a", "ns-b"];

#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    CreatePodSet {
        ns: &'static str,
        name: String,
        replicas: i64,
    },
    Scale {
        ns: &'static str,
        name: String,
        replicas: i64,
    },
    /// A person edits the PodSet's template: its pods run `sleep <sleep>` (pods made
    /// afterwards only, as with a ReplicaSet).
    EditTemplate {
        ns: &'static str,
        name: String,
        sleep: u32,
    },
    /// Deletes a PodSet, asking for `policy` (`kubectl delete --cascade=...`).
    DeletePodSet {
        ns: &'static str,
        name: String,
        policy: Propagation,
    },
    DeleteAt {
        ns: &'static str,
        at: String,
        policy: Propagation,
    },
    /// Another controller puts its finalizer on a PodSet or an At: deleted, it stays until
    /// [`Action::Unhold`].
    Hold {
        kind: Kind,
        ns: &'static str,
        name: String,
    },
    Unhold {
        kind: Kind,
        ns: &'static str,
        name: String,
    },
    /// A person writes a wrong status over the PodSet's (`kubectl patch --subresource
    /// status`): it names a pod that does not exist.
    WriteStatus {
        ns: &'static str,
        name: String,
    },
    /// Deletes one pod of the PodSet, the `pick`-th of them.
    DeletePod {
        ns: &'static str,
        podset: String,
        pick: usize,
    },
    /// An At due `due_in` seconds after the action (negative: in the past).
    CreateAt {
        ns: &'static str,
        name: String,
        due_in: i64,
        command: String,
    },
    /// An At written at v1beta1, as [`BetaAt`] draws it.
    CreateBetaAt {
        ns: &'static str,
        name: String,
        at: Box<BetaAt>,
    },
    /// A person edits an At's spec at v1alpha1 (the book's `kubectl edit`; an At that
    /// v1alpha1 cannot express carries the rest in its annotation): a new command, and a new
    /// schedule `due_in` seconds after the action (in UTC: its time zone goes) or the one it
    /// had. Before it started, the At runs the new spec; after, it ignores it.
    EditAt {
        ns: &'static str,
        at: String,
        due_in: Option<i64>,
        command: String,
    },
    DeleteAtPod {
        ns: &'static str,
        at: String,
    },
    /// Takes the operator's label off the At's pod: the operator's watch no longer sees it.
    UnlabelAtPod {
        ns: &'static str,
        at: String,
    },
    /// Takes the operator's label off one pod of the PodSet, the `pick`-th of them: the
    /// operator's watch no longer sees it, and it must be released, as a ReplicaSet's is.
    UnlabelPod {
        ns: &'static str,
        podset: String,
        pick: usize,
    },
    /// Someone else changes the controller of one pod of the PodSet, the `pick`-th: takes
    /// its ownerReferences off (`to` none: `kubectl patch`, an orphaning delete's garbage
    /// collector) or hands it to another PodSet of the namespace. The operator must neither
    /// count nor touch a pod it no longer controls, as a ReplicaSet's controller does not.
    Disown {
        ns: &'static str,
        podset: String,
        pick: usize,
        to: Option<String>,
    },
    /// A person sets `controller.kubernetes.io/pod-deletion-cost` on one pod of the PodSet:
    /// it ranks the pod for a scale-down, and is nothing for the operator to write.
    AnnotatePod {
        ns: &'static str,
        podset: String,
        pick: usize,
        cost: i64,
    },
    /// One pod of the PodSet is evicted (the eviction API, a node drain) or preempted (the
    /// scheduler): a `DisruptionTarget` condition, then a graceful delete.
    EvictPod {
        ns: &'static str,
        podset: String,
        pick: usize,
        preempted: bool,
    },
    /// Someone else removes the scheduling gate of an At's pod, perhaps before the At
    /// recorded it: the pod runs, and the command must still run only once, unless that
    /// pod is deleted before the At records it (then nothing says it ran: README, "At").
    UngateAtPod {
        ns: &'static str,
        at: String,
    },
    /// A pod in another namespace that names the PodSet as its controller.
    ForgePod {
        ns: &'static str,
        podset: String,
    },
    DeleteLease,
    /// Someone else takes the Lease (another deployment of the operator, a person with
    /// `kubectl`): it names [`INTRUDER`] with a lease of `seconds` (none: the one it had),
    /// renewed now, and is never renewed again.
    WriteLease {
        seconds: Option<i64>,
    },
}

/// The holder `WriteLease` names: no replica's identity.
pub const INTRUDER: &str = "someone-else";

/// What the users do, and when, over a fault phase of `span`.
pub fn plan(rng: &mut fastrand::Rng, span: Duration) -> Vec<(Duration, Action)> {
    let mut plan = Vec::new();
    let at =
        |rng: &mut fastrand::Rng, low: f64, high: f64| span.mul_f64(low + (high - low) * rng.f64());
    let ns = |rng: &mut fastrand::Rng| NAMESPACES[rng.usize(..NAMESPACES.len())];
    let podsets: Vec<(&'static str, String)> = (0..rng.usize(1..=3))
        .map(|i| (ns(rng), format!("web-{i}")))
        .collect();
    for (ns, name) in &podsets {
        let (ns, name) = (*ns, name.clone());
        let replicas = rng.i64(1..=5);
        plan.push((
            at(rng, 0.0, 0.2),
            Action::CreatePodSet { ns, name, replicas },
        ));
    }
    for (ns, name) in &podsets {
        for _ in 0..rng.usize(0..=3) {
            let (ns, name, replicas) = (*ns, name.clone(), rng.i64(1..=6));
            plan.push((at(rng, 0.2, 0.9), Action::Scale { ns, name, replicas }));
        }
        for _ in 0..rng.usize(0..=1) {
            let (ns, name, sleep) = (*ns, name.clone(), rng.u32(1000..1010));
            plan.push((at(rng, 0.1, 0.9), Action::EditTemplate { ns, name, sleep }));
        }
        for _ in 0..rng.usize(0..=2) {
            let (ns, podset, pick) = (*ns, name.clone(), rng.usize(..8));
            plan.push((at(rng, 0.2, 0.9), Action::DeletePod { ns, podset, pick }));
        }
        if rng.f64() < 0.1 {
            let (ns, name) = (*ns, name.clone());
            plan.push((at(rng, 0.2, 0.9), Action::WriteStatus { ns, name }));
        }
        if rng.f64() < 0.1 {
            let (ns, podset, pick) = (*ns, name.clone(), rng.usize(..8));
            plan.push((at(rng, 0.2, 0.9), Action::UnlabelPod { ns, podset, pick }));
        }
        pod_edits(rng, &mut plan, ns, name, &podsets, &at);
        if rng.f64() < 0.1 {
            plan.push((
                at(rng, 0.3, 0.9),
                Action::ForgePod {
                    ns,
                    podset: name.clone(),
                },
            ));
        }
    }
    if rng.f64() < 0.2 {
        let (ns, name) = podsets[rng.usize(..podsets.len())].clone();
        let policy = policy(rng);
        let delete = Action::DeletePodSet { ns, name, policy };
        plan.push((at(rng, 0.5, 0.95), delete));
    }
    for (ns, name) in &podsets {
        hold(rng, &mut plan, Kind::PodSet, ns, name, &at);
    }
    ats::draw(rng, &mut plan, (span, ats::Version::Book), &at, &ns);
    if rng.f64() < 0.15 {
        plan.push((at(rng, 0.2, 0.9), Action::DeleteLease));
    }
    if rng.f64() < 0.1 {
        let seconds = [None, Some(2), Some(60)][rng.usize(..3)];
        plan.push((at(rng, 0.2, 0.9), Action::WriteLease { seconds }));
    }
    ats::draw(rng, &mut plan, (span, ats::Version::Beta), &at, &ns);
    plan.sort_by_key(|(t, _)| *t);
    plan
}

/// What others do to a PodSet's pods now and then: take or hand over their control, rank
/// them for a scale-down, evict or preempt them.
fn pod_edits(
    rng: &mut fastrand::Rng,
    plan: &mut Vec<(Duration, Action)>,
    ns: &'static str,
    podset: &str,
    podsets: &[(&'static str, String)],
    at: &impl Fn(&mut fastrand::Rng, f64, f64) -> Duration,
) {
    let mut now_and_then =
        |rng: &mut fastrand::Rng, chance, action: &dyn Fn(&mut fastrand::Rng) -> Action| {
            if rng.f64() < chance {
                let action = action(rng);
                plan.push((at(rng, 0.2, 0.9), action));
            }
        };
    let podset = podset.to_string();
    now_and_then(rng, 0.08, &|rng: &mut fastrand::Rng| {
        let mut others = podsets.iter().filter(|(n, p)| *n == ns && *p != podset);
        let to = others.next().map(|(_, p)| p.clone()).filter(|_| rng.bool());
        let (pick, podset) = (rng.usize(..8), podset.clone());
        Action::Disown {
            ns,
            podset,
            pick,
            to,
        }
    });
    now_and_then(rng, 0.08, &|rng: &mut fastrand::Rng| Action::AnnotatePod {
        ns,
        podset: podset.clone(),
        pick: rng.usize(..8),
        cost: rng.i64(-10..=10),
    });
    now_and_then(rng, 0.1, &|rng: &mut fastrand::Rng| Action::EvictPod {
        ns,
        podset: podset.clone(),
        pick: rng.usize(..8),
        preempted: rng.bool(),
    });
}

/// How a user asks for a delete: mostly the default.
pub(super) fn policy(rng: &mut fastrand::Rng) -> Propagation {
    match rng.f64() {
        x if x < 0.5 => Propagation::Background,
        x if x < 0.8 => Propagation::Foreground,
        _ => Propagation::Orphan,
    }
}

/// Now and then another controller holds the object with its finalizer for a while (or for
/// good).
pub(super) fn hold(
    rng: &mut fastrand::Rng,
    plan: &mut Vec<(Duration, Action)>,
    kind: Kind,
    ns: &'static str,
    name: &str,
    at: &impl Fn(&mut fastrand::Rng, f64, f64) -> Duration,
) {
    if rng.f64() >= 0.1 {
        return;
    }
    let name = name.to_string();
    plan.push((
        at(rng, 0.0, 0.5),
        Action::Hold {
            kind,
            ns,
            name: name.clone(),
        },
    ));
    if rng.f64() < 0.7 {
        plan.push((at(rng, 0.6, 1.0), Action::Unhold { kind, ns, name }));
    }
}

/// The longest an At of `plan` lasts by its own spec once it started (see
/// [`BetaAt::lasts`]).
pub fn lasts(plan: &[(Duration, Action)]) -> Duration {
    let lasts = plan.iter().filter_map(|(_, action)| match action {
        Action::CreateBetaAt { at, .. } => Some(at.lasts()),
        _ => None,
    });
    lasts.max().unwrap_or_default()
}

/// Carries out `plan` on its schedule.
pub async fn run(sim: Arc<Sim>, plan: Vec<(Duration, Action)>) {
    let start = tokio::time::Instant::now();
    for (when, action) in plan {
        tokio::time::sleep_until(start + when).await;
        sim.trace(|| format!("user: {action:?}"));
        perform(&sim, &action);
    }
}

mod ats;
mod beta;
mod perform;
pub use beta::BetaAt;
pub use perform::{HOLD, perform, pods_of};
