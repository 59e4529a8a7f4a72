//! Each PodSet's pod failures in a row, kept between its reconciles: how long its creates
//! wait ([`plan::podset::replacing`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::plan::podset::Failure;
use crate::plan::podset::replacing::{Failed, Streak, delay};
use crate::pod::{CachedPod, Phase};
use crate::uid::Uid;

/// The reason PodSet reports, in its `ReplicaFailure` condition and events, while creates wait.
pub const REASON_POD_FAILED: &str = "PodFailed";

#[derive(Default, Debug)]
pub struct Replacements {
    streaks: Mutex<HashMap<Uid, Streak>>,
}

/// What a PodSet's pods failing comes to now.
pub struct Failing {
    /// Failures counted now, for the first time.
    pub new: Vec<Failed>,
    /// How long creates still wait, and why.
    pub held: Option<(Duration, Failure)>,
}

impl Replacements {
    /// Counts the failed pods of `pods`, PodSet `uid`'s. A PodSet none of whose pods ever
    /// failed keeps no record.
    pub fn saw(&self, uid: &str, pods: &[Arc<CachedPod>], now: Instant) -> Failing {
        let mut streaks = self.streaks.lock();
        let uid = Uid::from(uid);
        if !streaks.contains_key(&uid) && !pods.iter().any(|p| p.phase == Phase::Failed) {
            return Failing {
                new: Vec::new(),
                held: None,
            };
        }
        let streak = streaks.entry(uid).or_default();
        let new = streak.count(pods, now);
        let n = streak.failures();
        let held = streak.holds(now).map(|(left, last)| {
            let message = format!(
                "pod {} failed ({}); {n} failures in a row: pods are made again {}s after the last",
                last.pod,
                last.why,
                delay(n).as_secs()
            );
            let reason = REASON_POD_FAILED;
            (left, Failure { reason, message })
        });
        Failing { new, held }
    }

    pub fn forget(&self, uid: &str) {
        self.streaks.lock().remove(&Uid::from(uid));
    }
}
