//! Expectations, as the ReplicaSet controller keeps them: before creating or deleting pods a
//! controller records what it expects its watch to show; it acts on an owner again only once
//! the watch has shown all of it. This is what keeps a lagging cache from causing a second
//! round of creates for pods already made.
//!
//! Creations are tracked by the name the operator gave the pod (its UID is unknown until the
//! API answers, and the watch may show the pod first); deletions by pod UID. Expectations
//! older than [`EXPECTATIONS_TTL`] count as met, so a lost observation delays an owner,
//! never stalls it.
//!
//! A create or delete whose reply was lost is *unsettled*: it may or may not have happened. It
//! stays expected and is sent again (creates name their pod, so a second send cannot make a
//! second pod) until the API server's answer says which; only then may the owner be acted
//! on again. Waiting out the TTL instead would stall every owner caught by an API server
//! restart for five minutes. A create whose pod the watch already showed is settled: it is
//! never sent again (its pod may have been deleted since, and replaced). While a create is
//! sent again, a pod of its name the watch shows may be the first send's, deleted since, or
//! this one's: only the answer, which names the pod, says which meets it. If that answer is
//! lost too, the name is looked up, not sent a third time: a send landed, and its pod may
//! have been deleted since, which frees the name for a pod the spec may no longer want.

use crate::plan::podset::Readiness;
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use crate::cache::{Change, PodChange};
use crate::uid::Uid;

mod unanswered;
pub use unanswered::Unanswered;

/// As the ReplicaSet controller's `ExpectationsTimeout`.
pub const EXPECTATIONS_TTL: Duration = Duration::from_secs(5 * 60);

#[derive(Debug)]
struct Pending {
    /// The owner's namespace: only its pods can meet its expectations (an ownerReference
    /// that crosses namespaces is invalid, and anyone may write one).
    namespace: Option<Arc<str>>,
    /// By the pod's name.
    creates: HashMap<String, Create>,
    deletes: HashSet<Uid>,
    /// Pod UIDs (and names) of deletes whose outcome is unknown; also in `deletes`.
    unsettled_deletes: HashMap<Uid, String>,
    /// Set once, when the record is made: neither more actions nor observations move it, so
    /// an owner whose watch events were lost waits at most one TTL.
    expires: Instant,
}

impl Pending {
    fn new(now: Instant) -> Self {
        Self {
            namespace: None,
            creates: HashMap::new(),
            deletes: HashSet::new(),
            unsettled_deletes: HashMap::new(),
            expires: now + EXPECTATIONS_TTL,
        }
    }

    fn met(&self) -> bool {
        self.creates.is_empty() && self.deletes.is_empty() && self.unsettled_deletes.is_empty()
    }

    fn expired(&self, now: Instant) -> bool {
        self.expires <= now
    }

    /// The pods its creates made that the watch never showed.
    fn unseen(&self) -> Vec<(String, Uid)> {
        let mut unseen: Vec<_> = (self.creates.iter())
            .filter_map(|(name, create)| match create {
                Create::Made(uid) => Some((name.clone(), uid.clone())),
                _ => None,
            })
            .collect();
        unseen.sort();
        unseen
    }

    fn record_create(&mut self, name: &str, answer: Answer) {
        let Some(create) = self.creates.get_mut(name) else {
            return;
        };
        match (answer, &*create) {
            (Answer::Made(uid), Create::Resending(seen)) if seen.contains(&uid) => {
                self.creates.remove(name);
            }
            // Sent once: any pod of its name the watch shows is this one.
            (Answer::Made(uid), _) => *create = Create::Made(uid),
            (Answer::Nothing, _) => {
                self.creates.remove(name);
            }
            (Answer::Unknown, _) => *create = Create::Unsettled(create.take_seen()),
            (Answer::Deleting, _) => debug_assert!(false, "a create answered as a delete"),
        }
    }

    fn record_delete(&mut self, pod: &Uid, name: &str, answer: Answer) {
        match answer {
            Answer::Deleting => {
                self.unsettled_deletes.remove(pod);
            }
            Answer::Nothing => {
                self.deletes.remove(pod);
                self.unsettled_deletes.remove(pod);
            }
            // Unless the watch showed it done meanwhile.
            Answer::Unknown if self.deletes.contains(pod) => {
                self.unsettled_deletes.insert(pod.clone(), name.to_string());
            }
            Answer::Unknown => {}
            Answer::Made(_) => debug_assert!(false, "a delete answered as a create"),
        }
    }
}

/// Where a create expected to show in the watch stands.
#[derive(Debug, Clone, PartialEq)]
enum Create {
    /// Sent: any pod of its name that the watch shows meets it.
    Sent,
    /// Its answer was lost: to be sent again, with the pods of its name the watch showed
    /// while it was sent again before (the next answer may name one of them; with some, it is
    /// looked up instead). With none, any pod of its name the watch shows meets it (a send
    /// landed).
    Unsettled(Vec<Uid>),
    /// Sent again (or looked up), unanswered yet: the pods of its name the watch showed
    /// meanwhile.
    Resending(Vec<Uid>),
    /// Its pod is this one: only it meets it.
    Made(Uid),
}

impl Create {
    /// The pods of its name shown while it was being sent again.
    fn take_seen(&mut self) -> Vec<Uid> {
        match self {
            Create::Unsettled(seen) | Create::Resending(seen) => std::mem::take(seen),
            Create::Sent | Create::Made(_) => Vec::new(),
        }
    }
}

/// A create or delete sent under an expectation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// The create of the pod of this name.
    Create(String),
    /// The delete of this pod (UID, name).
    Delete(Uid, String),
}

/// What the API server's answer to a [`Write`] says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The pod of the create's name is this one (made now, or found there by a create sent
    /// again).
    Made(Uid),
    /// The delete is under way: the watch shows when it is done.
    Deleting,
    /// Nothing will come of it: refused, or there is nothing to do (no pod of ours has the
    /// name; the pod to delete is gone).
    Nothing,
    /// No answer: it may have happened or not. It stays expected, and is sent again until an
    /// answer says which.
    Unknown,
}

/// Creates (pod names) and deletes (pod UID, name) to send again, and creates to settle by
/// reading which pod has their name.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Unsettled {
    pub creates: Vec<String>,
    /// Creates a pod of whose name the watch showed while they were sent again.
    pub look_ups: Vec<String>,
    pub deletes: Vec<(Uid, String)>,
}

#[derive(Default, Debug)]
pub struct Expectations {
    owners: Mutex<HashMap<Uid, Pending>>,
    /// Locked after `owners`, never before.
    lapsed: Mutex<HashMap<Uid, Lapsed>>,
}

/// The pods an owner's expired record says were made, which the watch never showed: one may
/// have left it before it was seen (its label edited while the watch was down; the relist
/// selects on the label), still naming the owner. Its owner looks each up before it makes a
/// replacement (issue 45, seed 7316507).
#[derive(Debug)]
struct Lapsed {
    pods: Vec<(String, Uid)>,
    /// Dropped unread after this: an owner deleted while the watch was away never reads it.
    until: Instant,
}

impl Expectations {
    /// Applies `f` to the owner's live record. An expired record counts as nothing, as the
    /// ReplicaSet controller's `SetExpectations` starts afresh: what it still expected will
    /// never be seen, and adding to it would make every later round wait the full TTL.
    fn with<R>(&self, owner_uid: &str, now: Instant, f: impl FnOnce(&mut Pending) -> R) -> R {
        let owner_uid = Uid::from(owner_uid);
        let mut owners = self.owners.lock();
        if !owners.contains_key(&owner_uid) {
            // An owner deleted while the watch was away leaves a record nothing reads again.
            owners.retain(|uid, p| {
                let expired = p.expired(now);
                if expired {
                    self.lapse(uid, p, now);
                }
                !expired
            });
        }
        let pending = owners
            .entry(owner_uid.clone())
            .or_insert_with(|| Pending::new(now));
        if pending.expired(now) {
            self.lapse(&owner_uid, pending, now);
            *pending = Pending::new(now);
        }
        let r = f(pending);
        if pending.met() {
            owners.remove(&owner_uid);
        }
        r
    }

    /// Records creates and deletes about to be sent for the owner in `namespace`.
    pub fn expect<'a>(
        &self,
        owner_uid: &str,
        namespace: &str,
        writes: impl IntoIterator<Item = &'a Write>,
        now: Instant,
    ) {
        self.with(owner_uid, now, |p| {
            p.namespace = Some(namespace.into());
            for write in writes {
                match write {
                    Write::Create(name) => {
                        p.creates.insert(name.clone(), Create::Sent);
                    }
                    Write::Delete(pod, _) => {
                        p.deletes.insert(pod.clone());
                    }
                }
            }
        });
    }

    /// What the answer to `write` says, sent the first time or again.
    pub fn record(&self, owner_uid: &str, write: &Write, answer: Answer, now: Instant) {
        self.with(owner_uid, now, |p| match write {
            Write::Create(name) => p.record_create(name, answer),
            Write::Delete(pod, name) => p.record_delete(pod, name, answer),
        });
    }

    /// The owner's creates and deletes to send again, and creates to look up (none once its
    /// record expired), marked as being sent again.
    pub fn to_send_again(&self, owner_uid: &str, now: Instant) -> Unsettled {
        let mut owners = self.owners.lock();
        let Some(p) = owners
            .get_mut(&Uid::from(owner_uid))
            .filter(|p| !p.expired(now))
        else {
            return Unsettled::default();
        };
        let mut unsettled = Unsettled {
            deletes: p.unsettled_deletes.clone().into_iter().collect(),
            ..Unsettled::default()
        };
        for (name, create) in &mut p.creates {
            if let Create::Unsettled(seen) = create {
                let to = if seen.is_empty() {
                    &mut unsettled.creates
                } else {
                    &mut unsettled.look_ups
                };
                to.push(name.clone());
                *create = Create::Resending(std::mem::take(seen));
            }
        }
        unsettled.creates.sort();
        unsettled.look_ups.sort();
        unsettled.deletes.sort();
        unsettled
    }

    /// Lowers expectations by what a pod watch event shows. Only an existing record is
    /// lowered: an owner's pods changing expects nothing of it.
    pub fn observe(&self, touched: &PodChange, now: Instant) {
        let mut owners = self.owners.lock();
        let uid = &touched.owner.uid;
        let Some(p) = owners.get_mut(uid) else {
            return;
        };
        if p.namespace
            .as_ref()
            .is_some_and(|ns| *ns != touched.namespace)
        {
            return;
        }
        match touched.change {
            Change::Added => observe_create(&mut p.creates, touched),
            Change::Removed | Change::Vanished => {
                p.deletes.remove(&touched.pod_uid);
                p.unsettled_deletes.remove(&touched.pod_uid);
            }
            Change::Updated => {}
        }
        if p.expired(now) {
            self.lapse(uid, p, now);
        }
        if p.met() || p.expired(now) {
            owners.remove(uid);
        }
    }

    /// Satisfied once the watch showed everything expected, or the record expired (it is then
    /// dropped).
    pub fn readiness(&self, owner_uid: &str, now: Instant) -> Readiness {
        let owner_uid = Uid::from(owner_uid);
        let mut owners = self.owners.lock();
        match owners.get(&owner_uid) {
            None => Readiness::Satisfied,
            Some(p) if p.expired(now) => {
                self.lapse(&owner_uid, p, now);
                owners.remove(&owner_uid);
                Readiness::Satisfied
            }
            Some(p) => Readiness::Waiting(p.expires - now),
        }
    }

    /// Drops an owner's expectations (the owner is gone).
    pub fn forget(&self, owner_uid: &str) {
        self.owners.lock().remove(&Uid::from(owner_uid));
        self.lapsed.lock().remove(&Uid::from(owner_uid));
    }

    /// The pods (name, UID) that the owner's expired records said were made and the watch
    /// never showed, each handed out once.
    pub fn take_lapsed(&self, owner_uid: &str) -> Vec<(String, Uid)> {
        let mut lapsed = self.lapsed.lock();
        lapsed
            .remove(&Uid::from(owner_uid))
            .map(|l| l.pods)
            .unwrap_or_default()
    }

    /// Keeps what `pending`, expired, made that the watch never showed.
    fn lapse(&self, owner_uid: &Uid, pending: &Pending, now: Instant) {
        let unseen = pending.unseen();
        if unseen.is_empty() {
            return;
        }
        let mut lapsed = self.lapsed.lock();
        lapsed.retain(|_, l| l.until > now);
        let entry = lapsed.entry(owner_uid.clone()).or_insert(Lapsed {
            pods: Vec::new(),
            until: now,
        });
        entry.pods.extend(unseen);
        entry.until = now + EXPECTATIONS_TTL;
    }
}

/// The watch shows a pod of the owner's: it meets the create of its name, if that expects
/// any pod of the name or this one.
fn observe_create(creates: &mut HashMap<String, Create>, touched: &PodChange) {
    let Some(create) = creates.get_mut(touched.pod_name.as_str()) else {
        return;
    };
    match create {
        Create::Sent => {}
        Create::Unsettled(seen) if seen.is_empty() => {}
        Create::Unsettled(seen) | Create::Resending(seen) => {
            return seen.push(touched.pod_uid.clone());
        }
        Create::Made(uid) if *uid == touched.pod_uid => {}
        Create::Made(_) => return,
    }
    creates.remove(touched.pod_name.as_str());
}

#[cfg(test)]
mod tests;
