//! The PodSet invariants (see the module docs of `oracle`): creates within the largest
//! `spec.replicas` of the last [`STALE`], a status naming its own pods, at most its spec's pods
//! after its deletion, and pods made at a bounded pace.

use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use super::{Actor, CHURN_WINDOW, Oracle, STALE, Write, in_force_since};
use crate::model::objects::{self, controller};
use crate::model::resource::Kind;
use crate::model::store::{Change, Key, Store};

impl Oracle {
    /// A create the server held from before its owner's deletion is not an act of a cache
    /// that missed it.
    pub(super) fn sent_after_deletion(&self, owner: &str, held: Duration, now: Instant) -> bool {
        self.deleted.get(owner).is_none_or(|d| now - held >= *d)
    }

    pub(super) fn podset_changed(&mut self, change: &Change, actor: Actor, now: Instant) {
        self.deletion_seen(change, now);
        let Some(new) = &change.new else {
            return;
        };
        let uid = objects::uid(new).to_string();
        self.template_seen(&uid, new, now);
        self.object_says(new, now);
        let replicas = new["spec"]["replicas"].as_i64().unwrap_or(1);
        let history = self.replicas.entry(uid.clone()).or_default();
        if history.last().is_none_or(|(_, r)| *r != replicas) {
            history.push((now, replicas));
        }
        if !matches!(actor, Actor::Replica { .. }) {
            return;
        }
        let known = self.podset_pods.get(&uid);
        let strangers: Vec<&str> = new["status"]["podNames"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .filter(|n| known.is_none_or(|k| !k.contains(*n)))
            .collect();
        if !strangers.is_empty() {
            self.violate(format!(
                "PodSet {}/{} names pods that are not its own in its status: {strangers:?}",
                change.key.namespace, change.key.name
            ));
        }
    }

    /// The most pods a PodSet may have had an operator create at `now`.
    pub(super) fn allowance(&self, uid: &str, now: Instant) -> i64 {
        let Some(history) = self.replicas.get(uid) else {
            return 0;
        };
        in_force_since(history, now.checked_sub(STALE))
            .copied()
            .max()
            .unwrap_or(0)
    }

    pub(super) fn pod_changed(&mut self, w: &Write, store: &Store) {
        let (change, actor, held, now) = (w.change, w.actor, w.held, w.now);
        let Some(pod) = change.new.as_ref().or(change.old.as_ref()) else {
            return;
        };
        let Some((kind, _, owner)) = controller(pod) else {
            return;
        };
        let (kind, owner) = (kind.to_string(), owner.to_string());
        let created = change.old.is_none() && change.new.is_some();
        let ns = &change.key.namespace;
        // Its own: made under its control, or handed to it afterwards (`Disown`).
        let handed = match (&change.old, &change.new) {
            (Some(old), Some(new)) => controller(old) != controller(new),
            _ => false,
        };
        if (created || handed)
            && kind == "PodSet"
            && store
                .objects(Kind::PodSet, Some(ns))
                .any(|p| objects::uid(p) == owner)
        {
            let names = self.podset_pods.entry(owner.clone()).or_default();
            names.insert(change.key.name.clone());
        }
        match kind.as_str() {
            "PodSet" if created && matches!(actor, Actor::Replica { .. }) => {
                self.churn(&owner, actor, change, now);
                if let Some(pod) = &change.new {
                    self.made_from_template(pod, &owner, held, now);
                }
                let exists = store
                    .objects(Kind::PodSet, Some(ns))
                    .any(|p| objects::uid(p) == owner && !objects::terminating(p));
                if !exists {
                    if self.sent_after_deletion(&owner, held, now) {
                        let most = self.replicas.get(&owner).into_iter().flatten();
                        let most = most.map(|(_, r)| *r).max().unwrap_or(1);
                        self.made_for_a_deleted(&owner, "PodSet", most, actor);
                    }
                } else if held < self.held_excused {
                    self.podset_create_landed(change, &owner, store, now)
                } else {
                    self.excused.insert(change.key.clone());
                }
            }
            "At" => {
                let gone = !store
                    .objects(Kind::At, Some(ns))
                    .any(|a| objects::uid(a) == owner && !objects::terminating(a));
                if created
                    && gone
                    && matches!(actor, Actor::Replica { .. })
                    && self.sent_after_deletion(&owner, held, now)
                {
                    self.made_for_a_deleted(&owner, "At", 1, actor);
                }
                self.at_pod_changed(change, &owner, actor, store)
            }
            _ => {}
        }
    }

    /// Each incarnation makes a PodSet's pods at a bounded pace: all its replicas, and again
    /// after each scale-up or pod lost, at most three times the largest `spec.replicas` it
    /// had, and ten more, a minute. Pods that fail as they start (a template no kubelet
    /// admits) are replaced with a backoff, not churned. The backoff lives in the leader's
    /// memory, as the DaemonSet controller's does: a new leader starts it again from the
    /// failed pods it finds.
    pub(super) fn churn(&mut self, owner: &str, actor: Actor, change: &Change, now: Instant) {
        let most = 3 * self.allowance(owner, now).max(1) as usize + 10;
        let (times, reported) = self.made.entry((owner.to_string(), actor)).or_default();
        times.push_back(now);
        while times.front().is_some_and(|t| now - *t > CHURN_WINDOW) {
            times.pop_front();
        }
        if times.len() > most && !*reported {
            *reported = true;
            let n = times.len();
            self.violate(format!(
                "PodSet {}/{} churns: {n} of its pods made in {CHURN_WINDOW:?}, over {most}",
                change.key.namespace,
                change.key.name.split("-pod").next().unwrap_or_default()
            ));
        }
    }

    /// A cache that has not shown an owner's deletion yet may act on it once, as a
    /// ReplicaSet controller's informer may: at most `most` pods (a PodSet's spec, an At's
    /// one). More is a loop: each pod the garbage collector removes brings the next reconcile.
    pub(super) fn made_for_a_deleted(&mut self, owner: &str, kind: &str, most: i64, actor: Actor) {
        let made = self
            .made_after_delete
            .entry((owner.to_string(), actor))
            .or_default();
        *made += 1;
        let made = *made;
        if made == most as u64 + 1 {
            self.violate(format!(
                "{actor} made {made} pods for {kind} {owner} after it was deleted, over its {most}: a loop on a stale cache"
            ));
        }
    }

    pub(super) fn podset_create_landed(
        &mut self,
        change: &Change,
        owner: &str,
        store: &Store,
        now: Instant,
    ) {
        let ns = &change.key.namespace;
        let Some(ps) = store.by_uid(Kind::PodSet, ns, owner) else {
            return;
        };
        let active = store
            .objects(Kind::Pod, Some(ns))
            .filter(|p| {
                // Labelled or not: a pod admission took the operator's label from is still
                // the PodSet's pod (AdmissionStrips), hidden from the operator or not.
                controller(p).is_some_and(|(_, _, uid)| uid == owner)
                    && objects::active(p)
                    && !self.excused.contains(&Key {
                        kind: Kind::Pod,
                        namespace: ns.clone(),
                        name: objects::name(p).into(),
                    })
                    && self
                        .handed
                        .get(objects::uid(p))
                        .is_none_or(|at| now - *at >= STALE)
            })
            .count() as i64;
        let allowed = self.allowance(owner, now);
        if active > allowed {
            self.violate(format!(
                "PodSet {ns}/{} has {active} active pods after the create of {}, over the {allowed} its spec allowed in the last {STALE:?}",
                objects::name(ps),
                change.key.name
            ));
        }
    }
}
