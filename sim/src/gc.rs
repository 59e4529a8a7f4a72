//! The garbage collector, as kube-controller-manager's: a deleted owner's pods go after it
//! (background); an owner deleted in the foreground goes once its blocking pods have; one
//! deleted orphaning goes once its pods no longer name it; a pod whose controller does not
//! exist in its namespace is deleted.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::kubelet::current;
use crate::model::objects::{self, controller};
use crate::model::resource::Kind;
use crate::model::store::finalizers::{FOREGROUND, ORPHAN, finalizers};
use crate::model::store::{Change, Key, Preconditions, Store};
use crate::oracle::Actor;
use crate::world::{Sim, pick};

/// Something the garbage collector does in response to a write.
#[derive(Debug)]
pub enum Collection {
    /// Delete the pods of a deleted owner.
    Collect { namespace: String, owner: String },
    /// Delete a pod whose controller is missing, if it still is.
    Dangling(Key, String),
    /// Carry the propagation an owner being deleted waits for (its finalizer) a step on.
    Propagate(Key, String),
}

pub fn reactions(change: &Change) -> Vec<Collection> {
    let key = &change.key;
    match (key.kind, &change.old, &change.new) {
        (Kind::Pod, None, Some(new)) if controller(new).is_some() => {
            vec![Collection::Dangling(key.clone(), objects::uid(new).into())]
        }
        // A pod gone, or no longer naming an owner, may be what the owner's deletion waited for.
        (Kind::Pod, Some(old), _) => owners(old)
            .filter(|owner| {
                change
                    .new
                    .as_ref()
                    .is_none_or(|new| !owners(new).any(|o| o == *owner))
            })
            .map(|(kind, name, uid)| {
                let owner = Key {
                    kind,
                    namespace: key.namespace.clone(),
                    name: name.into(),
                };
                Collection::Propagate(owner, uid.into())
            })
            .collect(),
        (Kind::PodSet | Kind::At, Some(old), None) => vec![Collection::Collect {
            namespace: key.namespace.clone(),
            owner: objects::uid(old).to_string(),
        }],
        (Kind::PodSet | Kind::At, _, Some(new)) if propagating(new) => {
            vec![Collection::Propagate(key.clone(), objects::uid(new).into())]
        }
        _ => Vec::new(),
    }
}

pub async fn react(sim: Arc<Sim>, collection: Collection) {
    let ms = Duration::from_millis;
    match collection {
        Collection::Collect { namespace, owner } => {
            tokio::time::sleep(pick(&sim, ms(300), ms(2000))).await;
            collect(&sim, &namespace, |_, pod| owned_by(pod, &owner));
        }
        Collection::Dangling(key, uid) => {
            tokio::time::sleep(pick(&sim, ms(1000), ms(5000))).await;
            let namespace = key.namespace.clone();
            collect(&sim, &namespace, |store, pod| {
                objects::uid(pod) == uid && controller_missing(store, pod, &namespace)
            });
        }
        Collection::Propagate(key, uid) => {
            tokio::time::sleep(pick(&sim, ms(100), ms(1000))).await;
            propagate(&sim, &key, &uid);
        }
    }
}

/// Whether `owner` is being deleted and waits for the garbage collector.
fn propagating(owner: &Value) -> bool {
    objects::terminating(owner)
        && finalizers(owner)
            .iter()
            .any(|f| *f == FOREGROUND || *f == ORPHAN)
}

/// The owners (kind, name, UID) `pod` names that the simulation knows.
fn owners(pod: &Value) -> impl Iterator<Item = (Kind, &str, &str)> {
    let refs = pod["metadata"]["ownerReferences"].as_array();
    refs.into_iter().flatten().filter_map(|r| {
        let kind = match r["kind"].as_str()? {
            "PodSet" => Kind::PodSet,
            "At" => Kind::At,
            _ => return None,
        };
        Some((kind, r["name"].as_str()?, r["uid"].as_str()?))
    })
}

/// Orphans the pods of an owner deleted orphaning, then lets it go; deletes those of an owner
/// deleted in the foreground, and lets it go once none that blocks it is left.
fn propagate(sim: &Arc<Sim>, key: &Key, uid: &str) {
    let now = sim.now();
    sim.act(Actor::Gc, |w| {
        let Some(owner) = current(&w.store, key, uid).filter(propagating) else {
            return;
        };
        let store = &mut w.store;
        let pods: Vec<Value> = store
            .objects(Kind::Pod, Some(&key.namespace))
            .filter(|p| owned_by(p, uid))
            .map(|p| (**p).clone())
            .collect();
        let finalizers = finalizers(&owner);
        let done = if finalizers.contains(&ORPHAN) {
            for pod in &pods {
                let refs: Vec<&Value> = pod["metadata"]["ownerReferences"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|r| r["uid"] != uid)
                    .collect();
                let patch = json!({"metadata": {"ownerReferences": refs,
                    "resourceVersion": pod["metadata"]["resourceVersion"]}});
                let _ = store.merge_patch(&pod_key(key, pod), &patch, None);
            }
            ORPHAN
        } else {
            for pod in pods.iter().filter(|p| !objects::terminating(p)) {
                let pre = Preconditions {
                    uid: Some(objects::uid(pod).into()),
                    resource_version: None,
                };
                let _ = store.delete(&pod_key(key, pod), &pre, None, now);
            }
            let blocking = |p: &&Value| {
                p["metadata"]["ownerReferences"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|r| r["uid"] == uid && r["blockOwnerDeletion"] == true)
            };
            if pods.iter().any(|p| blocking(&p)) {
                return;
            }
            FOREGROUND
        };
        let left: Vec<&str> = finalizers.into_iter().filter(|f| *f != done).collect();
        let patch = json!({"metadata": {"finalizers": left,
            "resourceVersion": owner["metadata"]["resourceVersion"]}});
        let _ = store.merge_patch(key, &patch, None);
    });
}

fn pod_key(owner: &Key, pod: &Value) -> Key {
    Key {
        kind: Kind::Pod,
        namespace: owner.namespace.clone(),
        name: objects::name(pod).into(),
    }
}

fn owned_by(pod: &Value, owner: &str) -> bool {
    pod["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|refs| refs.iter().any(|r| r["uid"] == owner))
}

fn controller_missing(store: &Store, pod: &Value, namespace: &str) -> bool {
    let Some((kind, _, uid)) = controller(pod) else {
        return false;
    };
    let kind = match kind {
        "PodSet" => Kind::PodSet,
        "At" => Kind::At,
        _ => return false,
    };
    !store
        .objects(kind, Some(namespace))
        .any(|o| objects::uid(o) == uid)
}

/// The garbage collector deletes the pods of `namespace` that `select` picks.
fn collect(sim: &Arc<Sim>, namespace: &str, select: impl Fn(&Store, &Value) -> bool) {
    let now = sim.now();
    sim.act(Actor::Gc, |w| {
        let doomed: Vec<(Key, String)> = w
            .store
            .objects(Kind::Pod, Some(namespace))
            .filter(|p| select(&w.store, p))
            .map(|p| {
                let key = Key {
                    kind: Kind::Pod,
                    namespace: namespace.into(),
                    name: objects::name(p).into(),
                };
                (key, objects::uid(p).to_string())
            })
            .collect();
        for (key, uid) in doomed {
            let pre = Preconditions {
                uid: Some(uid),
                resource_version: None,
            };
            let _ = w.store.delete(&key, &pre, None, now);
        }
    });
}
