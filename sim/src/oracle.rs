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
//!   `PodVanished` verdict. Its pod holds its template's scheduling gates, and the operator
//!   takes off only its own (`gates`); it is made and released only once its schedule, read
//!   in its time zone, is due (`schedule`); a verdict is given only to a run that ended by
//!   its active deadline, and `DeadlineExceeded` only past a deadline with its pod deleted
//!   (`deadline`); it is deleted only once DONE for its TTL (`ttl`); and every status the
//!   operator writes tells kstatus what it is, of the generation it wrote over (`kstatus`).
//! - **Events**: each of the operator's is true of its object when written (`notes`).
//! - **Leadership**: no operator write leaves a replica whose fence is closed, or while
//!   another live replica's fence is open (two leaders at once); and the writes of an older leadership term land after a
//!   newer term's only if the server held them longer than leader election separates two
//!   terms (a third of the lease, the time a holder stops acting before it could expire, plus
//!   a cold standby's start-up grace; a warm one acts as it wins): no client can recall a
//!   request the server sits on.
//!
//! Liveness, once the faults stop: [`Oracle::unconverged`] names what is not yet as it should
//! be (an At due and not DONE, one DONE whose TTL runs out and not deleted, ...); the run fails
//! if anything still is after the bound.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use jiff::Timestamp;
use serde_json::Value;
use tokio::time::Instant;

use podset_operator::fence::Fence;

use crate::model::objects;
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

/// One committed write, as each check reads it: the change, who made it, how long the server
/// held its request, and when it landed (simulated time, and the true time of day).
pub(super) struct Write<'a> {
    change: &'a Change,
    actor: Actor,
    held: Duration,
    now: Instant,
    wall: Timestamp,
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
    /// The replicas' clocks, the Ats' specs by generation, their commands' ends, the pods of
    /// the Ats deleted for their TTL.
    clocks: clocks::Clocks,
    specs: schedule::Specs,
    ends: deadline::Ends,
    expired: ttl::Expired,
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

    /// Checks one committed change, made by `actor` (in a request the server held for
    /// `held`), against the store as it is after it, at `times` (simulated, and the true
    /// wall clock's).
    pub fn observe(
        &mut self,
        change: &Change,
        actor: Actor,
        held: Duration,
        store: &Store,
        times: (Instant, Timestamp),
    ) {
        let (now, wall) = times;
        let w = Write {
            change,
            actor,
            held,
            now,
            wall,
        };
        self.checks += 1;
        match change.key.kind {
            Kind::PodSet => self.podset_changed(change, actor, now),
            Kind::Pod => {
                self.pod_done(change, actor, now);
                self.control_changed(&w, store);
                self.gates_kept(change, actor);
                self.runs_on_time(&w);
                self.command_timed(change);
                self.stopped_in_time(&w, store);
                self.pod_changed(&w, store)
            }
            Kind::At => {
                self.deletion_seen(change, now);
                self.spec_seen(change);
                if let Some(at) = &change.new {
                    self.object_says(at, now);
                }
                self.health_told(change, actor);
                self.deadline_kept(&w, store);
                self.ttl_kept(&w);
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
mod clocks;
mod deadline;
mod foreign;
mod gates;
mod kstatus;
mod leadership;
mod liveness;
mod notes;
mod podset;
pub mod schedule;
mod template;
mod ttl;
