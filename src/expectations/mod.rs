//! Expectations, as the ReplicaSet controller keeps them: before creating or deleting pods a
//! controller records what it expects its watch to show; it acts on an owner again only once
//! the watch has shown all of it. This is what keeps a lagging cache from causing a second
//! round of creates for pods already made.
//!
//! Creations are counted (a created pod's UID is unknown until the API answers, and the
//! watch may show the pod first); deletions are tracked by pod UID. Expectations older than
//! [`EXPECTATIONS_TTL`] count as met, so a lost observation delays an owner, never stalls it.
//!
//! A create or delete whose reply was lost is *unsettled*: it may or may not have happened. It
//! stays expected and is sent again (creates name their pod, so a second send cannot make a
//! second pod) until the API server's answer says which; only then may the owner be acted
//! on again. Waiting out the TTL instead would stall every owner caught by an API server
//! restart for five minutes.

use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use crate::cache::{Change, Touched};
use crate::uid::Uid;

/// As the ReplicaSet controller's `ExpectationsTimeout`.
pub const EXPECTATIONS_TTL: Duration = Duration::from_secs(5 * 60);

#[derive(Debug)]
struct Pending {
    /// The owner's namespace: only its pods can meet its expectations (an ownerReference
    /// that crosses namespaces is invalid, and anyone may write one).
    namespace: Option<Arc<str>>,
    creates: usize,
    deletes: HashSet<Uid>,
    /// Pod names of creates whose outcome is unknown; counted in `creates`.
    unsettled_creates: HashSet<String>,
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
            creates: 0,
            deletes: HashSet::new(),
            unsettled_creates: HashSet::new(),
            unsettled_deletes: HashMap::new(),
            expires: now + EXPECTATIONS_TTL,
        }
    }

    fn met(&self) -> bool {
        self.creates == 0
            && self.deletes.is_empty()
            && self.unsettled_creates.is_empty()
            && self.unsettled_deletes.is_empty()
    }

    fn expired(&self, now: Instant) -> bool {
        self.expires <= now
    }
}

/// Creates (pod names) and deletes (pod UID, name) to send again.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Unsettled {
    pub creates: Vec<String>,
    pub deletes: Vec<(Uid, String)>,
}

/// Whether an owner may be acted on.
#[derive(Debug, PartialEq, Eq)]
pub enum Readiness {
    Satisfied,
    /// Still waiting for the watch; give up waiting after this long.
    Waiting(Duration),
}

#[derive(Default, Debug)]
pub struct Expectations {
    owners: Mutex<HashMap<Uid, Pending>>,
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
            owners.retain(|_, p| !p.expired(now));
        }
        let pending = owners
            .entry(owner_uid.clone())
            .or_insert_with(|| Pending::new(now));
        if pending.expired(now) {
            *pending = Pending::new(now);
        }
        let r = f(pending);
        if pending.met() {
            owners.remove(&owner_uid);
        }
        r
    }

    /// Records `n` creates about to be sent for the owner in `namespace`.
    pub fn expect_creates(&self, owner_uid: &str, namespace: &str, n: usize, now: Instant) {
        self.with(owner_uid, now, |p| {
            p.namespace = Some(namespace.into());
            p.creates += n;
        });
    }

    /// Lowers the creates expected, for creates that failed (the watch will never show them).
    pub fn creates_failed(&self, owner_uid: &str, n: usize, now: Instant) {
        self.with(owner_uid, now, |p| p.creates = p.creates.saturating_sub(n));
    }

    /// Records deletes about to be sent for the owner in `namespace`.
    pub fn expect_deletes<'a>(
        &self,
        owner_uid: &str,
        namespace: &str,
        pod_uids: impl IntoIterator<Item = &'a Uid>,
        now: Instant,
    ) {
        self.with(owner_uid, now, |p| {
            p.namespace = Some(namespace.into());
            p.deletes.extend(pod_uids.into_iter().cloned())
        });
    }

    /// A delete that failed, or found the pod already gone: nothing left to expect or to
    /// send again.
    pub fn delete_done(&self, owner_uid: &str, pod_uid: &Uid, now: Instant) {
        self.with(owner_uid, now, |p| {
            p.deletes.remove(pod_uid);
            p.unsettled_deletes.remove(pod_uid);
        });
    }

    /// A create of pod `name` whose reply was lost: still expected, and to be sent again.
    pub fn create_unsettled(&self, owner_uid: &str, name: &str, now: Instant) {
        self.with(owner_uid, now, |p| {
            p.unsettled_creates.insert(name.to_string())
        });
    }

    /// A create sent again was answered: the pod exists (`landed`: the watch will show it), or
    /// it never will.
    pub fn create_settled(&self, owner_uid: &str, name: &str, landed: bool, now: Instant) {
        self.with(owner_uid, now, |p| {
            if p.unsettled_creates.remove(name) && !landed {
                p.creates = p.creates.saturating_sub(1);
            }
        });
    }

    /// A delete whose reply was lost: still expected, and to be sent again.
    pub fn delete_unsettled(&self, owner_uid: &str, pod_uid: &Uid, name: &str, now: Instant) {
        self.with(owner_uid, now, |p| {
            p.unsettled_deletes
                .insert(pod_uid.clone(), name.to_string())
        });
    }

    /// A delete sent again was answered and is under way: the watch says when it is done.
    pub fn delete_settled(&self, owner_uid: &str, pod_uid: &Uid, now: Instant) {
        self.with(owner_uid, now, |p| p.unsettled_deletes.remove(pod_uid));
    }

    /// The owner's creates and deletes to send again (none once its record expired).
    pub fn unsettled(&self, owner_uid: &str, now: Instant) -> Unsettled {
        let owners = self.owners.lock();
        let Some(p) = owners
            .get(&Uid::from(owner_uid))
            .filter(|p| !p.expired(now))
        else {
            return Unsettled::default();
        };
        let mut unsettled = Unsettled {
            creates: p.unsettled_creates.iter().cloned().collect(),
            deletes: p.unsettled_deletes.clone().into_iter().collect(),
        };
        unsettled.creates.sort();
        unsettled.deletes.sort();
        unsettled
    }

    /// Lowers expectations by what a pod watch event shows. Only an existing record is
    /// lowered: an owner's pods changing expects nothing of it.
    pub fn observe(&self, touched: &Touched, now: Instant) {
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
            Change::Added => p.creates = p.creates.saturating_sub(1),
            Change::Removed => {
                p.deletes.remove(&touched.pod_uid);
                p.unsettled_deletes.remove(&touched.pod_uid);
            }
            Change::Updated => {}
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
                owners.remove(&owner_uid);
                Readiness::Satisfied
            }
            Some(p) => Readiness::Waiting(p.expires - now),
        }
    }

    /// Drops an owner's expectations (the owner is gone).
    pub fn forget(&self, owner_uid: &str) {
        self.owners.lock().remove(&Uid::from(owner_uid));
    }
}

/// A create or delete sent under an expectation whose answer has not been recorded yet. If
/// it is dropped unanswered (its reconcile cut off at its deadline, or stopped), it may have
/// been carried out or not: it is recorded as unsettled, to be sent again, rather than left
/// expected until the TTL.
pub struct Unanswered<'a> {
    expectations: &'a Expectations,
    owner_uid: &'a str,
    pending: Option<Write>,
}

enum Write {
    Create(String),
    Delete(Uid, String),
}

impl<'a> Unanswered<'a> {
    pub fn create(expectations: &'a Expectations, owner_uid: &'a str, name: &str) -> Self {
        let pending = Some(Write::Create(name.to_string()));
        Self {
            expectations,
            owner_uid,
            pending,
        }
    }

    pub fn delete(
        expectations: &'a Expectations,
        owner_uid: &'a str,
        pod: &Uid,
        name: &str,
    ) -> Self {
        let pending = Some(Write::Delete(pod.clone(), name.to_string()));
        Self {
            expectations,
            owner_uid,
            pending,
        }
    }

    /// The answer came: the caller records it.
    pub fn answered(mut self) {
        self.pending = None;
    }
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        let now = Instant::now();
        match self.pending.take() {
            Some(Write::Create(name)) => {
                self.expectations
                    .create_unsettled(self.owner_uid, &name, now)
            }
            Some(Write::Delete(pod, name)) => {
                self.expectations
                    .delete_unsettled(self.owner_uid, &pod, &name, now)
            }
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Owner;

    fn uid(s: &str) -> Uid {
        Uid::from(s)
    }

    fn touched(owner: &str, pod: &str, change: Change) -> Touched {
        Touched {
            owner: Owner {
                kind: "PodSet".into(),
                name: "x".into(),
                uid: owner.into(),
            },
            namespace: "ns".into(),
            pod_uid: pod.into(),
            change,
        }
    }

    #[test]
    fn creates_are_met_when_the_watch_shows_them() {
        let e = Expectations::default();
        let t0 = Instant::now();
        assert_eq!(e.readiness("o", t0), Readiness::Satisfied);
        e.expect_creates("o", "ns", 2, t0);
        assert!(matches!(e.readiness("o", t0), Readiness::Waiting(_)));
        e.observe(&touched("o", "p1", Change::Added), t0);
        e.observe(&touched("o", "p1", Change::Updated), t0);
        assert!(
            matches!(e.readiness("o", t0), Readiness::Waiting(_)),
            "one of two seen"
        );
        e.observe(&touched("other", "q", Change::Added), t0);
        assert!(
            matches!(e.readiness("o", t0), Readiness::Waiting(_)),
            "another owner's pod"
        );
        e.observe(&touched("o", "p2", Change::Added), t0);
        assert_eq!(e.readiness("o", t0), Readiness::Satisfied);
    }

    #[test]
    fn failed_creates_lower_the_count() {
        let e = Expectations::default();
        let t0 = Instant::now();
        e.expect_creates("o", "ns", 4, t0);
        e.creates_failed("o", 3, t0);
        e.observe(&touched("o", "p1", Change::Added), t0);
        assert_eq!(e.readiness("o", t0), Readiness::Satisfied);
    }

    #[test]
    fn an_unsettled_create_is_expected_until_an_answer_says_whether_it_landed() {
        let e = Expectations::default();
        let t0 = Instant::now();
        e.expect_creates("o", "ns", 2, t0);
        e.create_unsettled("o", "web-podb", t0);
        e.observe(&touched("o", "p1", Change::Added), t0);
        e.observe(&touched("o", "p2", Change::Added), t0);
        assert!(
            matches!(e.readiness("o", t0), Readiness::Waiting(_)),
            "two pods seen, yet one of them need not be web-podb: it may still land"
        );
        assert_eq!(e.unsettled("o", t0).creates, ["web-podb"]);
        e.create_settled("o", "web-podb", true, t0);
        assert_eq!(e.readiness("o", t0), Readiness::Satisfied);

        // Settled as never made: no pod to wait for.
        e.expect_creates("o", "ns", 1, t0);
        e.create_unsettled("o", "web-podc", t0);
        e.create_settled("o", "web-podc", false, t0);
        assert_eq!(e.readiness("o", t0), Readiness::Satisfied);
        assert_eq!(e.unsettled("o", t0), Unsettled::default());
    }

    #[test]
    fn an_unsettled_delete_is_settled_by_an_answer_or_the_watch() {
        let e = Expectations::default();
        let t0 = Instant::now();
        e.expect_deletes("o", "ns", &[uid("a"), uid("b")], t0);
        e.delete_unsettled("o", &uid("a"), "web-poda", t0);
        e.delete_unsettled("o", &uid("b"), "web-podb", t0);
        assert_eq!(
            e.unsettled("o", t0).deletes,
            [
                ("a".into(), "web-poda".into()),
                ("b".into(), "web-podb".into())
            ]
        );
        e.observe(&touched("o", "a", Change::Removed), t0);
        e.delete_settled("o", &uid("b"), t0);
        assert!(
            matches!(e.readiness("o", t0), Readiness::Waiting(_)),
            "b's delete answered, but the watch has not shown it"
        );
        assert_eq!(e.unsettled("o", t0), Unsettled::default());
        e.delete_done("o", &uid("b"), t0);
        assert_eq!(e.readiness("o", t0), Readiness::Satisfied);
        assert_eq!(
            e.unsettled("o", t0 + EXPECTATIONS_TTL),
            Unsettled::default()
        );
    }

    /// A panic in one reconcile while it holds the lock must not fail every later one.
    #[test]
    fn a_panic_under_the_lock_does_not_poison_the_records() {
        let e = Expectations::default();
        let t0 = Instant::now();
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            e.with("o", t0, |_| panic!("a bug in one reconcile"))
        }));
        assert!(panicked.is_err());
        e.expect_creates("o", "ns", 1, t0);
        assert!(matches!(e.readiness("o", t0), Readiness::Waiting(_)));
    }

    /// Issue 26, fault 5: a reconcile cut off at its deadline drops its creates and deletes
    /// unanswered; each is left to be sent again, not expected until the TTL.
    #[test]
    fn a_write_dropped_unanswered_is_unsettled() {
        let e = Expectations::default();
        let t0 = Instant::now();
        e.expect_creates("o", "ns", 2, t0);
        e.expect_deletes("o", "ns", &[uid("a")], t0);
        Unanswered::create(&e, "o", "web-podb").answered();
        drop(Unanswered::create(&e, "o", "web-podc"));
        drop(Unanswered::delete(&e, "o", &uid("a"), "web-poda"));
        let unsettled = e.unsettled("o", t0);
        assert_eq!(unsettled.creates, ["web-podc"]);
        assert_eq!(unsettled.deletes, [("a".into(), "web-poda".into())]);
    }

    /// Issue 26: a pod in another namespace that names the owner as its controller (anyone
    /// may write one) meets none of the owner's expectations.
    #[test]
    fn only_pods_in_the_owners_namespace_meet_its_expectations() {
        let e = Expectations::default();
        let t0 = Instant::now();
        e.expect_creates("o", "ns", 1, t0);
        let mut forged = touched("o", "f", Change::Added);
        forged.namespace = "elsewhere".into();
        e.observe(&forged, t0);
        assert!(matches!(e.readiness("o", t0), Readiness::Waiting(_)));
        e.observe(&touched("o", "p", Change::Added), t0);
        assert_eq!(e.readiness("o", t0), Readiness::Satisfied);
    }

    #[test]
    fn deletes_are_tracked_by_uid() {
        let e = Expectations::default();
        let t0 = Instant::now();
        e.expect_deletes("o", "ns", &[uid("a"), uid("b")], t0);
        e.observe(&touched("o", "c", Change::Removed), t0);
        assert!(
            matches!(e.readiness("o", t0), Readiness::Waiting(_)),
            "not a pod we deleted"
        );
        e.observe(&touched("o", "a", Change::Removed), t0);
        e.delete_done("o", &uid("b"), t0);
        assert_eq!(e.readiness("o", t0), Readiness::Satisfied);
    }

    #[test]
    fn an_expired_record_counts_as_nothing_and_lowering_keeps_its_expiry() {
        let e = Expectations::default();
        let t0 = Instant::now();
        // Two creates whose pods the watch never showed: the record expires.
        e.expect_creates("o", "ns", 2, t0);
        let later = t0 + EXPECTATIONS_TTL + Duration::from_secs(1);
        assert_eq!(e.readiness("o", later), Readiness::Satisfied);
        // A fresh round of one create is met by one pod, not by three.
        e.expect_creates("o", "ns", 1, later);
        e.observe(&touched("o", "p1", Change::Added), later);
        assert_eq!(
            e.readiness("o", later),
            Readiness::Satisfied,
            "the expired creates were added to the new ones"
        );
        // Lowering a record does not push its expiry out.
        e.expect_creates("q", "ns", 2, t0);
        e.creates_failed("q", 1, t0 + Duration::from_secs(240));
        assert_eq!(
            e.readiness("q", t0 + EXPECTATIONS_TTL),
            Readiness::Satisfied,
            "a lowering restarted the five minutes"
        );
    }

    #[test]
    fn records_of_owners_never_seen_again_are_dropped() {
        let e = Expectations::default();
        let t0 = Instant::now();
        // An owner deleted while the watch was away: nothing reads or lowers its record again.
        e.expect_creates("gone", "ns", 1, t0);
        e.expect_creates("o", "ns", 1, t0 + EXPECTATIONS_TTL);
        assert_eq!(e.owners.lock().len(), 1, "an expired record kept");
    }

    #[test]
    fn expectations_expire() {
        let e = Expectations::default();
        let t0 = Instant::now();
        e.expect_creates("o", "ns", 1, t0);
        match e.readiness("o", t0 + Duration::from_secs(60)) {
            Readiness::Waiting(left) => {
                assert_eq!(left, EXPECTATIONS_TTL - Duration::from_secs(60))
            }
            r => panic!("expected to wait, got {r:?}"),
        }
        assert_eq!(
            e.readiness("o", t0 + EXPECTATIONS_TTL),
            Readiness::Satisfied
        );
        e.forget("o");
        assert_eq!(e.readiness("o", t0), Readiness::Satisfied);
    }
}
