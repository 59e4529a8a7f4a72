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
//!
//! This module is one owner's record ([`Expected`]) and what its expired record leaves
//! ([`Lapsed`]); the owner's record in `controller::memory` keeps both, beside everything
//! else remembered of it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use crate::cache::{Change, PodChange};
use crate::uid::Uid;

/// As the ReplicaSet controller's `ExpectationsTimeout`.
pub const EXPECTATIONS_TTL: Duration = Duration::from_secs(5 * 60);

/// What an owner expects its watch to show, from the creates and deletes it sent.
#[derive(Debug)]
pub struct Expected {
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

impl Expected {
    pub fn new(now: Instant) -> Self {
        Self {
            namespace: None,
            creates: HashMap::new(),
            deletes: HashSet::new(),
            unsettled_deletes: HashMap::new(),
            expires: now + EXPECTATIONS_TTL,
        }
    }

    /// The watch showed all of it.
    pub fn met(&self) -> bool {
        self.creates.is_empty() && self.deletes.is_empty() && self.unsettled_deletes.is_empty()
    }

    pub fn expired(&self, now: Instant) -> bool {
        self.expires <= now
    }

    /// The time left before it expires.
    pub fn left(&self, now: Instant) -> Duration {
        self.expires - now
    }

    /// Creates and deletes about to be sent for the owner in `namespace`.
    pub fn expect<'a>(&mut self, namespace: &str, writes: impl IntoIterator<Item = &'a Write>) {
        self.namespace = Some(namespace.into());
        for write in writes {
            match write {
                Write::Create(name) => {
                    self.creates.insert(name.clone(), Create::Sent);
                }
                Write::Delete(pod, _) => {
                    self.deletes.insert(pod.clone());
                }
            }
        }
    }

    /// What the answer to `write` says, sent the first time or again.
    pub fn record(&mut self, write: &Write, answer: Answer) {
        match write {
            Write::Create(name) => self.record_create(name, answer),
            Write::Delete(pod, name) => self.record_delete(pod, name, answer),
        }
    }

    /// The creates and deletes to send again, and creates to look up, marked as being sent
    /// again.
    pub fn to_send_again(&mut self) -> Unsettled {
        let mut unsettled = Unsettled {
            deletes: self.unsettled_deletes.clone().into_iter().collect(),
            ..Unsettled::default()
        };
        for (name, create) in &mut self.creates {
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

    /// Lowered by what a pod watch event of the owner's shows.
    pub fn observe(&mut self, touched: &PodChange) {
        if self
            .namespace
            .as_ref()
            .is_some_and(|ns| *ns != touched.namespace)
        {
            return;
        }
        match touched.change {
            Change::Added => observe_create(&mut self.creates, touched),
            Change::Removed | Change::Vanished => {
                self.deletes.remove(&touched.pod_uid);
                self.unsettled_deletes.remove(&touched.pod_uid);
            }
            Change::Updated => {}
        }
    }

    /// The pods its creates made that the watch never showed.
    pub fn unseen(&self) -> Vec<(String, Uid)> {
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

/// The pods an owner's expired record said were made, which the watch never showed: one may
/// have left it before it was seen (its label edited while the watch was down; the relist
/// selects on the label), still naming the owner. Its owner looks each up before it makes a
/// replacement (issue 45, seed 7316507).
#[derive(Debug)]
pub struct Lapsed {
    pods: Vec<(String, Uid)>,
    /// Dropped unread after this: an owner deleted while the watch was away never reads it.
    until: Instant,
}

impl Lapsed {
    /// Keeps what `expected`, expired at `now`, made that the watch never showed.
    pub fn keep(lapsed: &mut Option<Box<Lapsed>>, expected: &Expected, now: Instant) {
        let unseen = expected.unseen();
        if unseen.is_empty() {
            return;
        }
        let kept = lapsed
            .take()
            .filter(|l| l.until > now)
            .map(|l| l.pods)
            .unwrap_or_default();
        *lapsed = Some(Box::new(Lapsed {
            pods: kept.into_iter().chain(unseen).collect(),
            until: now + EXPECTATIONS_TTL,
        }));
    }

    /// Whether it is still kept at `now`.
    pub fn kept(&self, now: Instant) -> bool {
        self.until > now
    }

    /// The pods (name, UID).
    pub fn pods(self) -> Vec<(String, Uid)> {
        self.pods
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
