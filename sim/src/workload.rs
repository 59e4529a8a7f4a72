//! The users of the cluster, drawn from the seed: they create, scale and delete PodSets,
//! create Ats due before, during and after the faults, delete pods under the operator, take
//! a label off an At's pod, forge a pod in another namespace that names a PodSet as its
//! controller, and delete the leader Lease.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::model::objects;
use crate::model::resource::Kind;
use crate::model::store::finalizers::Propagation;
use crate::model::store::{Key, Preconditions, Store, seconds};
use crate::oracle::Actor;
use crate::replica::{LEASE_NAME, LEASE_NAMESPACE};
use crate::world::{Sim, World};

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
    /// A person edits an At's spec: a new schedule `due_in` seconds after the action, and a
    /// new command. Before it started, the At runs the new spec; after, it ignores it.
    EditAt {
        ns: &'static str,
        at: String,
        due_in: i64,
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
    let limit = span.as_secs() as i64;
    for i in 0..rng.usize(1..=3) {
        let (ns, name) = (ns(rng), format!("job-{i}"));
        let due_in = rng.i64(-60..limit / 2);
        let command = match rng.f64() {
            x if x < 0.2 => "echo no; exit 3",
            _ => "echo YAY",
        }
        .to_string();
        let when = at(rng, 0.0, 0.4);
        plan.push((
            when,
            Action::CreateAt {
                ns,
                name: name.clone(),
                due_in,
                command,
            },
        ));
        let after_due = when + Duration::from_secs(due_in.max(0) as u64);
        if rng.f64() < 0.15 {
            // Around the old due time, so that copies of either spec meet.
            let near = (after_due + Duration::from_millis(rng.u64(0..3000)))
                .saturating_sub(Duration::from_millis(1500));
            let edit = Action::EditAt {
                ns,
                at: name.clone(),
                due_in: rng.i64(-5..60),
                command: format!("echo EDITED-{i}"),
            };
            plan.push((near, edit));
        }
        if rng.f64() < 0.15 {
            let later = after_due + Duration::from_millis(rng.u64(0..4000));
            plan.push((
                later,
                Action::DeleteAtPod {
                    ns,
                    at: name.clone(),
                },
            ));
        }
        if rng.f64() < 0.1 {
            let later = after_due + Duration::from_millis(rng.u64(500..2500));
            let at = name.clone();
            plan.push((later, Action::UnlabelAtPod { ns, at }));
        }
        if rng.f64() < 0.1 {
            // Before it is due, or about when it runs.
            let when = when + Duration::from_millis(rng.u64(0..(due_in.max(1) as u64 + 4) * 1000));
            let (at, policy) = (name.clone(), policy(rng));
            plan.push((when, Action::DeleteAt { ns, at, policy }));
        }
        hold(rng, &mut plan, Kind::At, ns, &name, &at);
    }
    if rng.f64() < 0.15 {
        plan.push((at(rng, 0.2, 0.9), Action::DeleteLease));
    }
    if rng.f64() < 0.1 {
        let seconds = [None, Some(2), Some(60)][rng.usize(..3)];
        plan.push((at(rng, 0.2, 0.9), Action::WriteLease { seconds }));
    }
    plan.sort_by_key(|(t, _)| *t);
    plan
}

/// How a user asks for a delete: mostly the default.
fn policy(rng: &mut fastrand::Rng) -> Propagation {
    match rng.f64() {
        x if x < 0.5 => Propagation::Background,
        x if x < 0.8 => Propagation::Foreground,
        _ => Propagation::Orphan,
    }
}

/// Now and then another controller holds the object with its finalizer for a while (or for
/// good).
fn hold(
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

/// Carries out `plan` on its schedule.
pub async fn run(sim: Arc<Sim>, plan: Vec<(Duration, Action)>) {
    let start = tokio::time::Instant::now();
    for (when, action) in plan {
        tokio::time::sleep_until(start + when).await;
        sim.trace(|| format!("user: {action:?}"));
        perform(&sim, &action);
    }
}

/// A user carries out `action` now.
pub fn perform(sim: &Arc<Sim>, action: &Action) {
    let now = sim.now();
    sim.act(Actor::User, |w| perform_on(w, action, now));
}

fn perform_on(w: &mut World, action: &Action, now: jiff::Timestamp) {
    let store = &mut w.store;
    let key = |kind, ns: &str, name: &str| Key {
        kind,
        namespace: ns.into(),
        name: name.into(),
    };
    let none = || String::new();
    let _ = match action {
        Action::CreatePodSet { ns, name, replicas } => store
            .create(
                Kind::PodSet,
                ns,
                json!({"metadata": {"name": name}, "spec": {"replicas": replicas}}),
                none,
                now,
            )
            .map(drop),
        Action::Scale { ns, name, replicas } => {
            let patch = json!({"spec": {"replicas": replicas}});
            store
                .merge_patch(&key(Kind::PodSet, ns, name), &patch, None)
                .map(drop)
        }
        Action::WriteStatus { ns, name } => {
            let patch = json!({"status": {"podNames": ["not-a-pod"], "availableReplicas": 1}});
            store
                .merge_patch(&key(Kind::PodSet, ns, name), &patch, Some("status"))
                .map(drop)
        }
        Action::DeletePodSet { ns, name, policy } => {
            delete(store, &key(Kind::PodSet, ns, name), *policy, now)
        }
        Action::DeleteAt { ns, at, policy } => delete(store, &key(Kind::At, ns, at), *policy, now),
        Action::Hold { kind, ns, name } => hold_with(store, &key(*kind, ns, name), true),
        Action::Unhold { kind, ns, name } => hold_with(store, &key(*kind, ns, name), false),
        Action::DeletePod { ns, podset, pick } => {
            let pods = pods_of(store, Kind::PodSet, ns, podset);
            match pods.get(pick % pods.len().max(1)) {
                Some(pod) => store
                    .delete(
                        &key(Kind::Pod, ns, pod),
                        &Preconditions::default(),
                        None,
                        now,
                    )
                    .map(drop),
                None => Ok(()),
            }
        }
        Action::UnlabelPod { ns, podset, pick } => {
            let pods = pods_of(store, Kind::PodSet, ns, podset);
            match pods.get(pick % pods.len().max(1)) {
                Some(pod) => store
                    .merge_patch(&key(Kind::Pod, ns, pod), &unlabel(), None)
                    .map(drop),
                None => Ok(()),
            }
        }
        Action::CreateAt {
            ns,
            name,
            due_in,
            command,
        } => {
            let due = now + jiff::SignedDuration::from_secs(*due_in);
            let at = json!({"metadata": {"name": name},
                "spec": {"schedule": seconds(due), "command": command}});
            store.create(Kind::At, ns, at, none, now).map(drop)
        }
        Action::EditAt {
            ns,
            at,
            due_in,
            command,
        } => {
            let due = now + jiff::SignedDuration::from_secs(*due_in);
            let patch = json!({"spec": {"schedule": seconds(due), "command": command}});
            store
                .merge_patch(&key(Kind::At, ns, at), &patch, None)
                .map(drop)
        }
        Action::DeleteAtPod { ns, at } => store
            .delete(
                &key(Kind::Pod, ns, &format!("{at}-pod")),
                &Preconditions::default(),
                None,
                now,
            )
            .map(drop),
        Action::UnlabelAtPod { ns, at } => store
            .merge_patch(&key(Kind::Pod, ns, &format!("{at}-pod")), &unlabel(), None)
            .map(drop),
        Action::ForgePod { ns, podset } => forge(store, ns, podset, now),
        Action::WriteLease { seconds } => take_lease(store, *seconds, now),
        Action::DeleteLease => store
            .delete(
                &key(Kind::Lease, LEASE_NAMESPACE, LEASE_NAME),
                &Preconditions::default(),
                None,
                now,
            )
            .map(drop),
    };
}

/// Writes the Lease as [`INTRUDER`]'s, for `seconds` or the lease duration it had (15 s if it
/// had none).
fn take_lease(
    store: &mut Store,
    seconds: Option<i64>,
    now: jiff::Timestamp,
) -> Result<(), crate::model::error::ApiError> {
    let key = Key {
        kind: Kind::Lease,
        namespace: LEASE_NAMESPACE.into(),
        name: LEASE_NAME.into(),
    };
    let spec = |old: Option<&Value>| {
        let spec = old.map(|l| &l["spec"]);
        let had = spec.and_then(|s| s["leaseDurationSeconds"].as_i64());
        let duration = seconds.or(had).unwrap_or(15);
        let transitions = spec
            .and_then(|s| s["leaseTransitions"].as_i64())
            .unwrap_or(0);
        json!({"holderIdentity": INTRUDER, "leaseDurationSeconds": duration,
            "acquireTime": now.to_string(), "renewTime": now.to_string(),
            "leaseTransitions": transitions + 1})
    };
    match store.get(&key) {
        Some(old) => {
            let patch = json!({"spec": spec(Some(old))});
            store.merge_patch(&key, &patch, None).map(drop)
        }
        None => {
            let lease = json!({"metadata": {"name": LEASE_NAME}, "spec": spec(None)});
            store
                .create(Kind::Lease, LEASE_NAMESPACE, lease, String::new, now)
                .map(drop)
        }
    }
}

/// The finalizer of another controller's that [`Action::Hold`] puts on an object.
pub const HOLD: &str = "example.com/hold";

fn delete(
    store: &mut Store,
    key: &Key,
    policy: Propagation,
    now: jiff::Timestamp,
) -> Result<(), crate::model::error::ApiError> {
    let pre = Preconditions::default();
    store
        .delete_propagating(key, &pre, None, policy, now)
        .map(drop)
}

/// Puts [`HOLD`] on the object (or takes it off), over the version read: the garbage
/// collector writes the finalizers too.
fn hold_with(
    store: &mut Store,
    key: &Key,
    held: bool,
) -> Result<(), crate::model::error::ApiError> {
    let Some(object) = store.get(key) else {
        return Ok(());
    };
    let mut names: Vec<&str> = crate::model::store::finalizers::finalizers(object)
        .into_iter()
        .filter(|f| *f != HOLD)
        .collect();
    if held {
        if !object["metadata"]["deletionTimestamp"].is_null() {
            return Ok(()); // no finalizer may be added to an object being deleted
        }
        names.push(HOLD);
    }
    let patch = json!({"metadata": {"finalizers": names,
        "resourceVersion": object["metadata"]["resourceVersion"]}});
    store.merge_patch(key, &patch, None).map(drop)
}

/// The merge patch that takes the operator's label off a pod.
fn unlabel() -> Value {
    json!({"metadata": {"labels": {podset_operator::api::MANAGED_BY_LABEL: null}}})
}

/// The names of the pods whose controller is the `kind` object `name`, in the order
/// `DeletePod` picks from.
pub fn pods_of(store: &Store, kind: Kind, ns: &str, name: &str) -> Vec<String> {
    let Some(owner) = store.get(&Key {
        kind,
        namespace: ns.into(),
        name: name.into(),
    }) else {
        return Vec::new();
    };
    let uid = objects::uid(owner).to_string();
    store
        .objects(Kind::Pod, Some(ns))
        .filter(|p| objects::controller(p).is_some_and(|(_, _, u)| u == uid))
        .map(|p| objects::name(p).to_string())
        .collect()
}

/// A pod in the other namespace, with the operator's label and the PodSet as its controller.
fn forge(
    store: &mut Store,
    ns: &str,
    podset: &str,
    now: jiff::Timestamp,
) -> Result<(), crate::model::error::ApiError> {
    let Some(ps) = store.get(&Key {
        kind: Kind::PodSet,
        namespace: ns.into(),
        name: podset.into(),
    }) else {
        return Ok(());
    };
    let other = NAMESPACES
        .iter()
        .find(|n| **n != ns)
        .expect("two namespaces");
    let owner: Value = json!([{"apiVersion": "app.example.com/v1alpha1", "kind": "PodSet",
        "name": podset, "uid": objects::uid(ps), "controller": true}]);
    let pod = json!({"metadata": {"name": format!("{podset}-forged"),
            "labels": {podset_operator::api::MANAGED_BY_LABEL: podset_operator::api::MANAGED_BY_VALUE},
            "ownerReferences": owner},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
    store
        .create(Kind::Pod, other, pod, String::new, now)
        .map(drop)
}
