//! Replacing pods that failed, with a backoff. A PodSet's pods run for good (the template's
//! `restartPolicy` is `Always`, and no deadline is admitted), so one that fails was evicted,
//! lost its node, or was rejected by a kubelet before it started (`OutOfpods`,
//! `NodeAffinity`, ...): a template every kubelet rejects would be churned without end, as
//! the ReplicaSet controller churns it. The DaemonSet controller backs off instead
//! (`failedPodsBackoff`): each failure doubles the wait before the next create, from 1 s,
//! and the count starts again once failures stop for twice the longest wait. Here the
//! longest wait is 5 minutes, as for a PodSet whose writes fail.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::pod::{CachedPod, Phase};
use crate::uid::Uid;

pub const FIRST: Duration = Duration::from_secs(1);
pub const LONGEST: Duration = Duration::from_secs(5 * 60);

/// Failed pods remembered as counted: more than a PodSet keeps (`MAX_FINISHED_PODS`) and
/// one round of replacements.
const COUNTED: usize = 32;

/// The wait after `failures` in a row.
pub fn delay(failures: u32) -> Duration {
    match failures {
        0 => Duration::ZERO,
        n => FIRST.saturating_mul(1 << (n - 1).min(20)).min(LONGEST),
    }
}

/// A failure counted: the pod's name and what its status says.
#[derive(Clone, Debug, PartialEq)]
pub struct Failed {
    pub pod: String,
    pub why: String,
}

/// A PodSet's pod failures in a row.
#[derive(Clone, Debug, Default)]
pub struct Streak {
    failures: u32,
    last: Option<(Instant, Failed)>,
    counted: Vec<Uid>,
}

impl Streak {
    /// Counts the pods of `pods` that failed and were not counted yet, and returns them.
    pub fn count(&mut self, pods: &[Arc<CachedPod>], now: Instant) -> Vec<Failed> {
        let mut new: Vec<&CachedPod> = pods
            .iter()
            .filter(|p| p.phase == Phase::Failed && !self.counted.contains(&p.uid))
            .map(|p| &**p)
            .collect();
        new.sort_by(|a, b| (a.created, &a.name).cmp(&(b.created, &b.name)));
        new.into_iter().map(|pod| self.failed(pod, now)).collect()
    }

    fn failed(&mut self, pod: &CachedPod, now: Instant) -> Failed {
        if self
            .last
            .as_ref()
            .is_some_and(|(at, _)| now.duration_since(*at) > 2 * LONGEST)
        {
            self.failures = 0;
        }
        self.failures += 1;
        if self.counted.len() == COUNTED {
            self.counted.remove(0);
        }
        self.counted.push(pod.uid.clone());
        let why = pod
            .ended()
            .map(|e| match (e.reason.as_deref(), e.message.as_deref()) {
                (Some(r), Some(m)) => format!("{r}: {m}"),
                (Some(s), None) | (None, Some(s)) => s.to_string(),
                (None, None) => "no reason given".into(),
            })
            .unwrap_or_else(|| "no reason given".into());
        let failed = Failed {
            pod: pod.name.to_string(),
            why,
        };
        self.last = Some((now, failed.clone()));
        failed
    }

    /// How long creates still wait at `now`, and the failure that makes them, if they do.
    pub fn holds(&self, now: Instant) -> Option<(Duration, &Failed)> {
        let (at, failed) = self.last.as_ref()?;
        let until = *at + delay(self.failures);
        (until > now).then(|| (until - now, failed))
    }

    pub fn failures(&self) -> u32 {
        self.failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::fixtures::pod;

    #[test]
    fn each_failure_doubles_the_wait_up_to_five_minutes() {
        let waits: Vec<u64> = (0..12).map(|n| delay(n).as_secs()).collect();
        assert_eq!(waits, [0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(delay(u32::MAX), LONGEST);
    }

    #[test]
    fn failed_pods_are_counted_once_and_the_count_starts_again_after_a_quiet_spell() {
        let t0 = Instant::now();
        let mut streak = Streak::default();
        let (a, b) = (failed("a"), failed("b"));
        let running = Arc::new(pod("c"));
        let counted = streak.count(&[a.clone(), running.clone(), b.clone()], t0);
        assert_eq!(counted.len(), 2);
        assert_eq!(streak.failures(), 2);
        assert!(streak.count(&[a, b], t0).is_empty(), "counted twice");
        let (left, last) = streak.holds(t0).expect("held");
        assert_eq!(left, Duration::from_secs(2));
        assert!(last.why.contains("OutOfpods"), "{last:?}");
        assert!(streak.holds(t0 + Duration::from_secs(2)).is_none());
        let later = t0 + 2 * LONGEST + Duration::from_secs(1);
        streak.count(&[failed("d")], later);
        assert_eq!(streak.failures(), 1, "not started again");
    }

    fn failed(name: &str) -> Arc<CachedPod> {
        let mut p = pod(name);
        p.phase = Phase::Failed;
        p.notes = Some(Box::new(crate::pod::Notes {
            ended: Some(crate::pod::Ended {
                reason: Some("OutOfpods".into()),
                message: Some("Pod was rejected: Node didn't have enough resource: pods".into()),
            }),
            ..Default::default()
        }));
        Arc::new(p)
    }
}
