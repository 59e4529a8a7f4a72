//! An owner's pods that vanished from the watch while active, in its record until its next
//! reconcile looks them up ([`crate::controller::strays`]).

use tokio::time::Instant;

use super::Memory;
use crate::cache::PodChange;
use crate::controller::strays::Vanished;
use crate::uid::Uid;

/// Vanished pods kept per owner until its reconcile: a standby, which never reconciles,
/// keeps no more than this many.
const KEPT: usize = 32;

impl Memory {
    /// The watch no longer shows `change`'s pod, which was active.
    pub fn vanished(&self, change: &PodChange) {
        self.suspect(&change.owner.uid, &change.pod_name, &change.pod_uid);
    }

    /// `name`, `uid`, a pod of `owner_uid`'s, may be out of the watch: its owner looks it up.
    pub fn suspect(&self, owner_uid: &Uid, name: &str, uid: &Uid) {
        self.with(owner_uid, Instant::now(), |r| {
            let strays = r.strays.get_or_insert_default();
            if strays.len() == KEPT {
                strays.remove(0);
            }
            strays.push(Vanished {
                name: name.to_string(),
                uid: uid.clone(),
            });
        });
    }

    /// The owner's vanished pods, to look up.
    pub(in crate::controller) fn take_strays(&self, owner_uid: &str) -> Vec<Vanished> {
        let taken = self.change(owner_uid, Instant::now(), |r| r.strays.take());
        taken.flatten().map(|s| *s).unwrap_or_default()
    }

    /// Keeps the owner's vanished pods that were not looked up.
    pub(in crate::controller) fn keep_strays(&self, owner_uid: &str, left: Vec<Vanished>) {
        if !left.is_empty() {
            self.with(owner_uid, Instant::now(), |r| {
                r.strays.get_or_insert_default().extend(left)
            });
        }
    }
}
