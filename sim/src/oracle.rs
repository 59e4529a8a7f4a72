//! The invariants, checked on every write the model commits, and the liveness predicate.
//!
//! Safety, at every step:
//! - **PodSet**: a create of the operator's lands only if the PodSet's active pods, with it,
//!   are at most the largest `spec.replicas` the PodSet had in the last [`STALE`]: the most a
//!   controller acting on a cache that lags by that much may create, as the ReplicaSet
//!   controller may. (Pods above the spec after a scale-down are not a fault until liveness.)
//!   Exempt, as the README says: a create the server held past the start-up grace (or a warm
//!   standby's shorter separation), from a predecessor whose successor had already counted the
//!   pods.
//!   Its status names only pods of its own: made in its namespace under its control.
//!   Once it is deleted, an incarnation makes at most its spec's pods for it (a cache that
//!   missed the deletion acts once; more is a loop); a create that reached the server before
//!   the deletion and was held there is not one of them.
//!   Its pods are made from its template as it is or was within [`STALE`].
//!   A pod it does not control (someone else's, disowned, handed to another PodSet, or
//!   released) is never changed or deleted by it, but by a write decided before it knew.
//! - **At**: its command starts at most once; a pod is released from its scheduling gate only
//!   once its At recorded its UID, and only to run the command the At had when it was
//!   recorded RUNNING (a pod made from a stale copy of an edited spec never runs); the
//!   operator never deletes the pod its At records; DONE is final; DONE records what happened: a success or a
//!   failure only from a run that ended so; `PodVanished` only for a recorded pod that is gone
//!   (a command that never ran is never given up on); and no run starts or ends after a
//!   `PodVanished` verdict.
//! - **Events**: each of the operator's is true of its object when written (`notes`).
//! - **Leadership**: no operator write leaves a replica whose fence is closed, or while
//!   another live replica's fence is open (two leaders at once); and the writes of an older leadership term land after a
//!   newer term's only if the server held them longer than leader election separates two
//!   terms (a third of the lease, the time a holder stops acting before it could expire, plus
//!   a cold standby's start-up grace; a warm one acts as it wins): no client can recall a
//!   request the server sits on.
//!
//! Liveness, once the faults stop: [`Oracle::unconverged`] names what is not yet as it should
//! be; the run fails if anything still is after the bound.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use podset_operator::fence::Fence;

use crate::model::objects::{self, controller};
use crate::model::resource::Kind;
use crate::model::store::{Change, Key, Store};
use at::AtRecord;

/// How stale a view of a PodSet the operator may act on: a watch stalled or dead until its
/// read timeout (75 s), and a reconcile under way meanwhile.
pub const STALE: Duration = Duration::from_secs(150);

/// The window in which a PodSet's pods made are counted for churn.
const CHURN_WINDOW: Duration = Duration::from_secs(60);

/// Who made a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Actor {
    Replica { id: usize, incarnation: u32 },
    User,
    Kubelet,
    Gc,
}

impl std::fmt::Display for Actor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Actor::Replica { id, incarnation } => write!(f, "r{id}#{incarnation}"),
            Actor::User => f.write_str("user"),
            Actor::Kubelet => f.write_str("kubelet"),
            Actor::Gc => f.write_str("gc"),
        }
    }
}

#[derive(Default)]
pub struct Oracle {
    violations: Vec<String>,
    /// Per PodSet UID: when its `spec.replicas` took each value.
    replicas: HashMap<String, Vec<(Instant, i64)>>,
    /// Per PodSet UID: the names of the pods ever made in its namespace under its control.
    podset_pods: HashMap<String, HashSet<String>>,
    /// Pods whose create the server held past the start-up grace: exempt, and not counted
    /// against the creates after them.
    excused: HashSet<Key>,
    ats: HashMap<String, AtRecord>,
    /// Per At UID and the reason of its end: how often that end was told in events.
    ends_told: HashMap<(String, String), i64>,
    /// Per identity: the leadership terms it began, and when (terms count every change of
    /// holder).
    terms: HashMap<String, Vec<(Instant, u64)>>,
    term: u64,
    holder: Option<String>,
    /// When the Lease came to name `holder`, and when it was last written, with the lease
    /// duration it gave.
    holder_since: Option<Instant>,
    held_until: Option<(Instant, Duration)>,
    /// The replicas' lease duration, if they elect a leader.
    pub lease: Option<Duration>,
    /// The newest term whose write landed.
    newest_written: u64,
    /// The identity each incarnation holds the Lease under.
    identities: HashMap<Actor, String>,
    /// The fence of each live incarnation.
    fences: HashMap<Actor, Fence>,
    /// How long after an old term's last write a new term may write (see the module docs).
    pub takeover_margin: Duration,
    /// How long the server must have held a predecessor's create for it to be excused from
    /// the PodSet bound: the start-up grace, or a warm standby's shorter separation.
    pub held_excused: Duration,
    /// Operator writes that landed (pods, PodSets, Ats), but for one that corrects another
    /// writer's (a deposed leader's late status write, put right at the next resync).
    pub own_writes: u64,
    /// Controller writes sent, whether or not they changed anything: a write that changes
    /// nothing commits nothing, yet an idle operator sends none.
    pub writes_sent: u64,
    /// Pods each incarnation made for a PodSet after it was deleted.
    made_after_delete: HashMap<(String, Actor), u64>,
    /// Per PodSet UID: when it was deleted.
    deleted: HashMap<String, Instant>,
    /// Who last wrote each PodSet and At.
    last_writer: HashMap<Key, Actor>,
    /// Per PodSet UID and incarnation: when it made the PodSet's pods in the last
    /// [`CHURN_WINDOW`], and whether it was found churning.
    made: HashMap<(String, Actor), (VecDeque<Instant>, bool)>,
    /// Per pod UID: since when no PodSet or At of its namespace controls it.
    foreign: HashMap<String, Instant>,
    /// Per pod UID: when someone else handed it to a PodSet.
    handed: HashMap<String, Instant>,
    /// What the operator's objects said and did, for its events (`notes`).
    said: notes::Said,
    /// Per PodSet UID: when its template took each command.
    templates: HashMap<String, Vec<(Instant, Value)>>,
    pub checks: u64,
}

impl Oracle {
    pub fn violations(&self) -> &[String] {
        &self.violations
    }

    pub fn violate(&mut self, what: String) {
        self.violations.push(what);
    }

    /// Incarnation `actor` writes the Lease as `identity`, and its controllers' writes
    /// through `fence`.
    pub fn identify(&mut self, actor: Actor, identity: &str, fence: Fence) {
        self.identities.insert(actor, identity.to_string());
        self.fences.insert(actor, fence);
    }

    /// Incarnation `actor` is gone: its fence no longer lets anything out.
    pub fn gone(&mut self, actor: Actor) {
        self.fences.remove(&actor);
    }

    /// A write of replica `actor` leaves it: it may land, or not. `fenced` is whether it went
    /// through the controllers' fence, and whether that was open.
    pub fn departs(&mut self, actor: Actor, fenced: Option<bool>, what: &str) {
        if !matches!(actor, Actor::Replica { .. }) {
            return;
        }
        if fenced == Some(false) {
            self.violate(format!(
                "{actor} sent {what} while its fence was closed: a write after its leadership lapsed"
            ));
        }
        if fenced != Some(true) {
            return;
        }
        self.writes_sent += 1;
        self.outlived_its_lease(actor, what);
        let other = self
            .fences
            .iter()
            .find(|(other, fence)| **other != actor && fence.is_open());
        if let Some((other, _)) = other {
            self.violate(format!(
                "{actor} sent {what} while the fence of {other} was open too: two leaders at once"
            ));
        }
    }

    /// Checks one committed change, made by `actor` (in a request the server held for
    /// `held`), against the store as it is after it.
    pub fn observe(
        &mut self,
        change: &Change,
        actor: Actor,
        held: Duration,
        store: &Store,
        now: Instant,
    ) {
        self.checks += 1;
        match change.key.kind {
            Kind::PodSet => self.podset_changed(change, actor, now),
            Kind::Pod => {
                self.pod_done(change, actor, now);
                self.control_changed(change, actor, held, store, now);
                self.pod_changed(change, actor, held, store, now)
            }
            Kind::At => {
                self.deletion_seen(change, now);
                if let Some(at) = &change.new {
                    self.object_says(at, now);
                }
                self.at_changed(change, actor, store)
            }
            Kind::Lease => self.lease_changed(change, now),
            Kind::Event => {
                self.note_written(change, actor, held, now);
                self.event_changed(change)
            }
        }
        if matches!(actor, Actor::Replica { .. })
            && matches!(change.key.kind, Kind::Pod | Kind::PodSet | Kind::At)
        {
            self.term_order(actor, change, held, now);
            let previous = match change.key.kind {
                Kind::Pod => None,
                _ => self.last_writer.insert(change.key.clone(), actor),
            };
            if previous.is_none_or(|p| p == actor) {
                self.own_writes += 1;
            }
        } else if matches!(change.key.kind, Kind::PodSet | Kind::At) {
            self.last_writer.insert(change.key.clone(), actor);
        }
    }

    /// Notes when a PodSet or At was deleted. Being deleted counts as deleted: no pod is to
    /// be made for it.
    fn deletion_seen(&mut self, change: &Change, now: Instant) {
        match &change.new {
            None => {
                if let Some(old) = &change.old {
                    self.deleted.insert(objects::uid(old).to_string(), now);
                }
            }
            Some(new) if objects::terminating(new) => {
                self.deleted
                    .entry(objects::uid(new).to_string())
                    .or_insert(now);
            }
            Some(_) => {}
        }
    }

    /// A create the server held from before its owner's deletion is not an act of a cache
    /// that missed it.
    fn sent_after_deletion(&self, owner: &str, held: Duration, now: Instant) -> bool {
        self.deleted.get(owner).is_none_or(|d| now - held >= *d)
    }

    fn podset_changed(&mut self, change: &Change, actor: Actor, now: Instant) {
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
    fn allowance(&self, uid: &str, now: Instant) -> i64 {
        let Some(history) = self.replicas.get(uid) else {
            return 0;
        };
        in_force_since(history, now.checked_sub(STALE))
            .copied()
            .max()
            .unwrap_or(0)
    }

    fn pod_changed(
        &mut self,
        change: &Change,
        actor: Actor,
        held: Duration,
        store: &Store,
        now: Instant,
    ) {
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
    fn churn(&mut self, owner: &str, actor: Actor, change: &Change, now: Instant) {
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
    fn made_for_a_deleted(&mut self, owner: &str, kind: &str, most: i64, actor: Actor) {
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

    fn podset_create_landed(&mut self, change: &Change, owner: &str, store: &Store, now: Instant) {
        let ns = &change.key.namespace;
        let Some(ps) = store
            .objects(Kind::PodSet, Some(ns))
            .find(|p| objects::uid(p) == owner)
        else {
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

    fn lease_changed(&mut self, change: &Change, now: Instant) {
        let holder = change
            .new
            .as_ref()
            .and_then(|l| l["spec"]["holderIdentity"].as_str())
            .filter(|h| !h.is_empty())
            .map(String::from);
        if holder.is_some() && holder != self.holder {
            self.term += 1;
            let h = holder.clone().unwrap_or_default();
            self.terms.entry(h).or_default().push((now, self.term));
            self.taken_over(holder.as_deref().unwrap_or_default(), now);
        }
        if holder != self.holder {
            self.holder_since = Some(now);
        }
        let duration = change
            .new
            .as_ref()
            .and_then(|l| l["spec"]["leaseDurationSeconds"].as_u64());
        self.held_until = holder
            .as_ref()
            .zip(duration)
            .map(|(_, d)| (now, Duration::from_secs(d)));
        self.holder = holder;
    }

    /// `holder`, a replica, took the Lease from the holder before it: only once that one's last write had
    /// gone unrenewed for the lease duration it gave (client-go's promise: another holder is
    /// never written over while its lease runs).
    fn taken_over(&mut self, holder: &str, now: Instant) {
        let (Some(old), Some((written, duration))) = (&self.holder, self.held_until) else {
            return;
        };
        // A person (or another deployment) may take it whenever they like.
        let replica = self.identities.values().any(|i| i == holder);
        if replica && now - written < duration {
            self.violate(format!(
                "{holder} took the Lease from {old} {:?} after its last write, within the {duration:?} it gave",
                now - written
            ));
        }
    }

    /// A replica's controller write leaves while the Lease has named someone no replica is
    /// for longer than the renew deadline: the fence stays open until the renew deadline
    /// after the last renewal that landed, and none lands once another holder wrote the
    /// Lease.
    fn outlived_its_lease(&mut self, actor: Actor, what: &str) {
        let (Some(holder), Some(since), Some(lease)) =
            (&self.holder, self.holder_since, self.lease)
        else {
            return;
        };
        let renew_deadline = lease * 2 / 3;
        let lasted = Instant::now() - since;
        if !self.identities.values().any(|i| i == holder) && lasted > renew_deadline {
            self.violate(format!(
                "{actor} sent {what} {lasted:?} after the Lease came to name {holder}, past its renew deadline ({renew_deadline:?}): two leaders at once"
            ));
        }
    }

    /// Writes of an older leadership term do not land after a newer term's, unless the server
    /// held them past the takeover margin. A write belongs to the term its writer's identity
    /// held when it reached the server.
    fn term_order(&mut self, actor: Actor, change: &Change, held: Duration, now: Instant) {
        let identity = self.identities.get(&actor).cloned().unwrap_or_default();
        let arrived = now - held;
        let terms = self
            .terms
            .get(&identity)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let term = terms
            .iter()
            .rev()
            .find(|(began, _)| *began <= arrived)
            .map_or(0, |(_, term)| *term);
        if term < self.newest_written && held < self.takeover_margin {
            self.violate(format!(
                "{actor} wrote {:?} {}/{} in leadership term {term} (held {held:?} at the server), after a write of term {}: two leaders' writes interleaved",
                change.key.kind, change.key.namespace, change.key.name, self.newest_written
            ));
        }
        self.newest_written = self.newest_written.max(term);
    }
}

/// The values of `history` in force at some moment since `since` (all, with no start): the
/// last, and each whose successor came after it.
fn in_force_since<T>(history: &[(Instant, T)], since: Option<Instant>) -> impl Iterator<Item = &T> {
    history
        .iter()
        .enumerate()
        .filter_map(move |(i, (_, value))| {
            let next = history.get(i + 1).map(|(next, _)| *next);
            (next.is_none_or(|next| since.is_none_or(|since| next > since))).then_some(value)
        })
}

mod at;
mod foreign;
mod liveness;
mod notes;
mod template;
