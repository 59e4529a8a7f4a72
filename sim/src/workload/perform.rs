//! The users' actions carried out on the store, as `kubectl` would send them.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{Action, INTRUDER, NAMESPACES};
use crate::model::objects;
use crate::model::resource::Kind;
use crate::model::store::finalizers::Propagation;
use crate::model::store::{Key, Preconditions, Store, seconds};
use crate::model::versions::{self, AT_ALPHA};
use crate::oracle::Actor;
use crate::replica::{LEASE_NAME, LEASE_NAMESPACE};
use crate::world::{Sim, World};

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
        Action::EditTemplate { ns, name, sleep } => {
            let container = json!({"name": "busybox", "image": "busybox:1.37.0",
                "command": ["sleep", sleep.to_string()]});
            let patch = json!({"spec": {"template": {"spec": {"containers": [container]}}}});
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
        Action::DeletePod { ns, podset, pick } => match picked(store, ns, podset, *pick) {
            Some(pod) => store
                .delete(&pod, &Preconditions::default(), None, now)
                .map(drop),
            None => Ok(()),
        },
        Action::UnlabelPod { ns, podset, pick } => match picked(store, ns, podset, *pick) {
            Some(pod) => store.merge_patch(&pod, &unlabel(), None).map(drop),
            None => Ok(()),
        },
        Action::Disown {
            ns,
            podset,
            pick,
            to,
        } => disown(store, ns, podset, *pick, to.as_deref()),
        Action::AnnotatePod {
            ns,
            podset,
            pick,
            cost,
        } => match picked(store, ns, podset, *pick) {
            Some(pod) => {
                let cost = cost.to_string();
                let patch = json!({"metadata": {"annotations":
                    {"controller.kubernetes.io/pod-deletion-cost": cost}}});
                store.merge_patch(&pod, &patch, None).map(drop)
            }
            None => Ok(()),
        },
        Action::EvictPod {
            ns,
            podset,
            pick,
            preempted,
        } => match picked(store, ns, podset, *pick) {
            Some(pod) => evict(store, &pod, *preempted, now),
            None => Ok(()),
        },
        Action::UngateAtPod { ns, at } => {
            let patch = json!({"spec": {"schedulingGates": null}});
            let pod = key(Kind::Pod, ns, &format!("{at}-pod"));
            match store.get(&pod).is_some_and(|p| objects::gated(p)) {
                true => store.merge_patch(&pod, &patch, None).map(drop),
                false => Ok(()),
            }
        }
        Action::CreateAt {
            ns,
            name,
            due_in,
            command,
        } => {
            let due = now + jiff::SignedDuration::from_secs(*due_in);
            let at = json!({"apiVersion": AT_ALPHA, "kind": "At", "metadata": {"name": name},
                "spec": {"schedule": seconds(due), "command": command}});
            let at = versions::stored(at);
            store.create(Kind::At, ns, at, none, now).map(drop)
        }
        Action::CreateBetaAt { ns, name, at } => {
            let at = json!({"apiVersion": Kind::At.api_version(), "kind": "At",
                "metadata": {"name": name}, "spec": at.spec(now)});
            store.create(Kind::At, ns, at, none, now).map(drop)
        }
        Action::EditAt {
            ns,
            at,
            due_in,
            command,
        } => {
            let mut patch = json!({"spec": {"command": command}});
            if let Some(due_in) = due_in {
                let due = now + jiff::SignedDuration::from_secs(*due_in);
                patch["spec"]["schedule"] = seconds(due).into();
            }
            let at = key(Kind::At, ns, at);
            match store.get(&at) {
                Some(_) => versions::patch_as(store, &at, &patch, None, AT_ALPHA).map(drop),
                None => Ok(()),
            }
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
        if objects::terminating(object) {
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

/// The `pick`-th pod of the PodSet, counting round.
fn picked(store: &Store, ns: &str, podset: &str, pick: usize) -> Option<Key> {
    let pods = pods_of(store, Kind::PodSet, ns, podset);
    let name = pods.get(pick % pods.len().max(1))?;
    Some(Key {
        kind: Kind::Pod,
        namespace: ns.into(),
        name: name.clone(),
    })
}

/// Takes the controller of the PodSet's `pick`-th pod off, or makes PodSet `to` its
/// controller (if it exists).
fn disown(
    store: &mut Store,
    ns: &str,
    podset: &str,
    pick: usize,
    to: Option<&str>,
) -> Result<(), crate::model::error::ApiError> {
    let Some(pod) = picked(store, ns, podset, pick) else {
        return Ok(());
    };
    let owner = to.and_then(|name| {
        store.get(&Key {
            kind: Kind::PodSet,
            namespace: ns.into(),
            name: name.into(),
        })
    });
    let owners = match owner {
        Some(o) => json!([{"apiVersion": "app.example.com/v1alpha1", "kind": "PodSet",
            "name": objects::name(o), "uid": objects::uid(o), "controller": true,
            "blockOwnerDeletion": true}]),
        None => Value::Null,
    };
    let patch = json!({"metadata": {"ownerReferences": owners}});
    store.merge_patch(&pod, &patch, None).map(drop)
}

/// As the eviction API (or the scheduler, preempting) does: the `DisruptionTarget` condition
/// beside the pod's others, then a graceful delete.
fn evict(
    store: &mut Store,
    pod: &Key,
    preempted: bool,
    now: jiff::Timestamp,
) -> Result<(), crate::model::error::ApiError> {
    let Some(old) = store.get(pod) else {
        return Ok(());
    };
    let (reason, message) = match preempted {
        true => (
            "PreemptionByScheduler",
            "node-1: Preempted by a pod of higher priority",
        ),
        false => ("EvictionByEvictionAPI", "Eviction API: evicting"),
    };
    let mut conditions: Vec<Value> = old["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    conditions.push(
        json!({"type": "DisruptionTarget", "status": "True", "reason": reason,
        "message": message, "lastTransitionTime": seconds(now)}),
    );
    let patch = json!({"status": {"conditions": conditions}});
    store.merge_patch(pod, &patch, Some("status"))?;
    store
        .delete(pod, &Preconditions::default(), None, now)
        .map(drop)
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
