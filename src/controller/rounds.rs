//! The generation of the spec each PodSet last had pods made for, by this process. A second
//! round of creates for the same spec replaces pods that went away, and the garbage collector
//! removing the pods of a PodSet deleted behind a quiet watch looks just the same: the pods
//! made for it vanish, and their removal brings the next reconcile. Such a round is made only
//! once a read shows the PodSet still there. A first round, or a scale-up, needs no read.

use std::collections::HashMap;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::uid::Uid;

/// How long a round is remembered for a PodSet whose deletion the watch never showed (a
/// relist drops it without a delete event): past that, one round goes unread.
const REMEMBERED: Duration = Duration::from_secs(60 * 60);

#[derive(Default, Debug)]
pub struct CreateRounds {
    made: Mutex<HashMap<Uid, (i64, Instant)>>,
}

impl CreateRounds {
    /// Whether pods were made for PodSet `uid` at this generation already.
    pub fn replaces(&self, uid: &str, generation: i64) -> bool {
        self.made
            .lock()
            .get(&Uid::from(uid))
            .is_some_and(|(g, _)| *g == generation)
    }

    /// Pods are being made for PodSet `uid` at this generation.
    pub fn made(&self, uid: &str, generation: i64, now: Instant) {
        let (mut made, uid) = (self.made.lock(), Uid::from(uid));
        if !made.contains_key(&uid) {
            made.retain(|_, (_, at)| now.duration_since(*at) < REMEMBERED);
        }
        made.insert(uid, (generation, now));
    }

    /// The PodSet is gone, as the watch showed.
    pub fn forget(&self, uid: &str) {
        self.made.lock().remove(&Uid::from(uid));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_for_the_same_generation_replaces_until_forgotten_or_an_hour_passed() {
        let rounds = CreateRounds::default();
        let t0 = Instant::now();
        assert!(!rounds.replaces("a", 1), "a first round");
        rounds.made("a", 1, t0);
        assert!(rounds.replaces("a", 1));
        assert!(!rounds.replaces("a", 2), "a new spec");
        rounds.made("b", 1, t0);
        rounds.forget("b");
        assert!(!rounds.replaces("b", 1));
        rounds.made("c", 1, t0 + REMEMBERED);
        assert!(!rounds.replaces("a", 1), "kept past {REMEMBERED:?}");
        assert!(rounds.replaces("c", 1));
    }
}
