//! Which watch events of a controller's own objects wake its reconcile: a new generation (the
//! spec changed), or a status this instance did not write (a person's `kubectl patch
//! --subresource status`, or a write of a deposed term that the server held and carried out
//! late). The ReplicaSet controller reconciles on every update; ours skip only their own
//! status writes, which would wake a reconcile that finds nothing to do.

use std::collections::{HashMap, HashSet};

use crate::uid::Uid;

/// What was last seen of each object: its generation and a hash of its status. By [`Uid`]:
/// 16 bytes a key, not a 36-character string (0.5 MiB at 10,000 PodSets).
#[derive(Default)]
pub struct Wakes {
    seen: HashMap<Uid, (Option<i64>, u64)>,
    /// The objects a relist under way has shown; the others are gone once it ends.
    relisted: Option<HashSet<Uid>>,
}

impl Wakes {
    /// Whether this version of the object wakes its reconcile: `status` is the hash of its
    /// status ([`crate::status_writes::status_hash`]); `ours`: this instance wrote this
    /// version's status.
    pub fn wakes(&mut self, uid: &str, generation: Option<i64>, status: u64, ours: bool) -> bool {
        let (uid, now) = (Uid::from(uid), (generation, status));
        if let Some(relisted) = self.relisted.as_mut() {
            relisted.insert(uid.clone());
        }
        match self.seen.insert(uid, now) {
            None => true,
            Some((before, _)) if before != now.0 => true,
            Some((_, status)) => status != now.1 && !ours,
        }
    }

    /// A relist begins: objects it does not show were deleted meanwhile, unseen.
    pub fn relist_begins(&mut self) {
        self.relisted = Some(HashSet::new());
    }

    /// A relist ended: the objects it did not show, deleted unseen, are forgotten and
    /// returned.
    pub fn relist_done(&mut self) -> Vec<Uid> {
        let Some(relisted) = self.relisted.take() else {
            return Vec::new();
        };
        let gone = self.seen.extract_if(|uid, _| !relisted.contains(uid));
        gone.map(|(uid, _)| uid).collect()
    }

    pub fn forget(&mut self, uid: &str) {
        self.seen.remove(&Uid::from(uid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{PodSet, PodSetSpec, PodSetStatus};
    use crate::status_writes::status_hash;
    use kube::core::object::HasStatus;

    /// The status hash of a PodSet with this many available pods.
    fn podset(available: i32) -> u64 {
        let spec = PodSetSpec {
            replicas: 2,
            template: None,
        };
        let mut p = PodSet::new("web", spec);
        p.status = Some(PodSetStatus {
            available_replicas: available,
            ..Default::default()
        });
        status_hash(p.status())
    }

    #[test]
    fn a_new_generation_or_anothers_status_wakes_our_own_status_does_not() {
        let mut w = Wakes::default();
        assert!(w.wakes("u", Some(1), podset(0), false), "first sight");
        assert!(!w.wakes("u", Some(1), podset(0), false), "nothing changed");
        assert!(!w.wakes("u", Some(1), podset(2), true), "our own status");
        assert!(
            w.wakes("u", Some(1), podset(1), false),
            "someone else's status"
        );
        assert!(w.wakes("u", Some(2), podset(1), true), "a new generation");
    }

    #[test]
    fn a_relist_forgets_objects_deleted_unseen() {
        let mut w = Wakes::default();
        w.wakes("gone", Some(1), podset(0), false);
        w.wakes("kept", Some(1), podset(0), false);
        w.relist_begins();
        assert!(!w.wakes("kept", Some(1), podset(0), false));
        assert_eq!(
            w.relist_done(),
            [Uid::from("gone")],
            "to be forgotten everywhere"
        );
        assert_eq!(w.seen.len(), 1);
        assert!(w.wakes("gone", Some(1), podset(0), false), "seen anew");
    }
}
