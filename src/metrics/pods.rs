//! What the leader manages, counted at scrape time: pods by owner kind and state, and the
//! PodSets that have not converged for long.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicI64;
use std::time::Duration;

use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use tokio::time::Instant;

use super::queue::object_key;
use crate::cache::PodCache;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PodLabels {
    owner_kind: String,
    state: &'static str,
}

/// `managed_pods{owner_kind, state}`, counted from the pod cache at scrape time by the
/// leader: a warm standby's cache holds the same pods, and it manages none of them.
#[derive(Debug)]
pub(super) struct ManagedPods {
    pub(super) cache: Arc<PodCache>,
    pub(super) leader: Gauge<i64, AtomicI64>,
}

impl Collector for ManagedPods {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let family = Family::<PodLabels, Gauge>::default();
        let managed = match self.leader.get() {
            1 => self.cache.counts(),
            _ => Default::default(),
        };
        for ((owner_kind, state), n) in managed {
            family
                .get_or_create(&PodLabels { owner_kind, state })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        let metric = encoder.encode_descriptor(
            "managed_pods",
            "Pods the operator manages, by owner kind and state",
            None,
            family.metric_type(),
        )?;
        family.encode(metric)
    }
}

/// How long a PodSet may differ from its spec before it counts as stuck: longer than any
/// healthy scale-up or rollout of its pods takes.
pub const STUCK_AFTER: Duration = Duration::from_secs(5 * 60);

/// Since when each PodSet has had available replicas other than its spec says, as the
/// leader's reconciles saw it; emptied when a term starts. Keyed by a hash of the UID: 24
/// bytes a PodSet while 10,000 converge at once, not its UID's 60.
#[derive(Debug, Default)]
pub struct Unconverged {
    since: Mutex<HashMap<u64, Seen>>,
}

#[derive(Debug, Clone, Copy)]
enum Seen {
    Unconverged(Instant),
    /// The PodSet is gone, since then (a tombstone, kept for [`TOMBSTONE`]): a reconcile still
    /// under way when the watch showed its deletion must not bring it back, where it would
    /// count as stuck for good (a false `PodSetStuck` alert; found by seed 100062).
    Gone(Instant),
}

/// How long a deleted PodSet's tombstone is kept: longer than any reconcile runs.
const TOMBSTONE: Duration = Duration::from_secs(10 * 60);

fn key(uid: &str) -> u64 {
    object_key(None, uid)
}

impl Unconverged {
    /// What a reconcile saw of PodSet `uid`.
    pub fn saw(&self, uid: &str, converged: bool, now: Instant) {
        let mut since = self.since.lock();
        match (since.get(&key(uid)), converged) {
            (Some(Seen::Gone(_)), _) => {}
            (_, true) => drop(since.remove(&key(uid))),
            (_, false) => drop(since.entry(key(uid)).or_insert(Seen::Unconverged(now))),
        }
    }

    /// PodSet `uid` is gone: it is not counted, now or by a reconcile still under way.
    pub fn forget(&self, uid: &str, now: Instant) {
        let mut since = self.since.lock();
        since.retain(|_, seen| !matches!(seen, Seen::Gone(t) if now - *t >= TOMBSTONE));
        since.insert(key(uid), Seen::Gone(now));
    }

    pub fn clear(&self) {
        self.since.lock().clear();
    }

    /// PodSets not converged for over `STUCK_AFTER` at `now`.
    pub fn stuck(&self, now: Instant) -> usize {
        let since = self.since.lock();
        let stuck = |seen: &&Seen| matches!(seen, Seen::Unconverged(t) if now - *t > STUCK_AFTER);
        since.values().filter(stuck).count()
    }
}

/// `podsets_unconverged`, from the leader's view (a standby's is empty).
#[derive(Debug)]
pub(super) struct Stuck {
    pub(super) unconverged: Arc<Unconverged>,
    pub(super) leader: Gauge<i64, AtomicI64>,
}

impl Collector for Stuck {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let stuck = match self.leader.get() {
            1 => self.unconverged.stuck(Instant::now()),
            _ => 0,
        };
        let gauge = ConstGauge::new(i64::try_from(stuck).unwrap_or(i64::MAX));
        let metric = encoder.encode_descriptor(
            "podsets_unconverged",
            "PodSets whose available replicas have differed from their spec for over 5 minutes",
            None,
            gauge.metric_type(),
        )?;
        gauge.encode(metric)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_podset_counts_as_stuck_only_after_five_minutes_unconverged() {
        let u = Unconverged::default();
        let t0 = Instant::now();
        u.saw("a", false, t0);
        u.saw("b", false, t0 + Duration::from_secs(60));
        u.saw("a", false, t0 + Duration::from_secs(200)); // still since t0
        assert_eq!(u.stuck(t0 + STUCK_AFTER), 0, "not over 5 minutes yet");
        assert_eq!(u.stuck(t0 + STUCK_AFTER + Duration::from_secs(1)), 1);
        u.saw("a", true, t0 + STUCK_AFTER);
        assert_eq!(u.stuck(t0 + STUCK_AFTER * 2), 1, "b only");
        u.forget("b", t0 + STUCK_AFTER * 2);
        assert_eq!(u.stuck(t0 + STUCK_AFTER * 2), 0);
    }

    #[test]
    fn a_reconcile_under_way_when_its_podset_went_does_not_bring_it_back() {
        let u = Unconverged::default();
        let t0 = Instant::now();
        u.saw("a", false, t0);
        u.forget("a", t0);
        u.saw("a", false, t0 + Duration::from_secs(1));
        assert_eq!(u.stuck(t0 + STUCK_AFTER * 2), 0, "counted after it went");
        // Tombstones are dropped once no reconcile can still be under way.
        u.forget("b", t0 + TOMBSTONE);
        assert_eq!(u.since.lock().len(), 1, "a's tombstone kept");
    }
}
