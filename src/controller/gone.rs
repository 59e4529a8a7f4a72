//! Objects a write found deleted while the watch still shows them. A stale cache must not
//! keep acting on such an object: each pod made for a deleted PodSet is removed by the
//! garbage collector, and that removal brings the next reconcile, a loop until the watch
//! catches up (a quiet watch is given up only after its read timeout, 75 s).

use std::collections::HashMap;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::uid::Uid;

/// How long a deletion is remembered when the watch never says so (a relist drops the
/// object without a delete event): far past any read timeout.
const REMEMBERED: Duration = Duration::from_secs(60 * 60);

#[derive(Default, Debug)]
pub struct Gone {
    found: Mutex<HashMap<Uid, Instant>>,
}

impl Gone {
    /// A write answered that the object `uid` is gone.
    pub fn found(&self, uid: &str, now: Instant) {
        let mut found = self.found.lock();
        found.retain(|_, at| now.duration_since(*at) < REMEMBERED);
        found.insert(Uid::from(uid), now);
    }

    pub fn is_gone(&self, uid: &str) -> bool {
        self.found.lock().contains_key(&Uid::from(uid))
    }

    /// The watch showed the deletion: nothing left to remember.
    pub fn forget(&self, uid: &str) {
        self.found.lock().remove(&Uid::from(uid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deletion_is_remembered_until_the_watch_shows_it_or_an_hour_passed() {
        let gone = Gone::default();
        let t0 = Instant::now();
        gone.found("a", t0);
        gone.found("b", t0);
        assert!(gone.is_gone("a") && !gone.is_gone("c"));
        gone.forget("a");
        assert!(!gone.is_gone("a"));
        gone.found("c", t0 + REMEMBERED);
        assert!(!gone.is_gone("b"), "kept past {REMEMBERED:?}");
        assert!(gone.is_gone("c"));
    }
}
