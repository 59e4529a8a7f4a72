//! The resync: each object looked at again once a period though nothing changed, in case an
//! event was missed or someone else wrote its status. One sweeper does it for all objects,
//! instead of a requeue timer held by each: a timer holds two copies of its object's reference
//! (name, namespace, resourceVersion, UID) for the whole period, 760 bytes a converged PodSet,
//! 7 MiB at 10,000 (BENCHMARKS.md). The sweep holds nothing between its ticks.
//!
//! Each object has a slot, one of the period's seconds, from a hash of its UID: from the
//! second period on (the controller looked at every object as it started), the sweep sends
//! the objects of one slot a second, so objects made together are spread over the period, as
//! jittered timers spread them.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;

use futures::{Stream, StreamExt, stream};
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::time::{Instant, MissedTickBehavior, interval_at};

/// The references of every object in `store`, each once per `period`, a slot a second.
pub fn sweep<K>(store: Store<K>, period: Duration) -> impl Stream<Item = ObjectRef<K>> + Send
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    let slots = period.as_secs().max(1);
    let tick = period / u32::try_from(slots).unwrap_or(u32::MAX);
    // Not in the first period: the controller looked at every object as it started.
    let mut ticks = interval_at(Instant::now() + period, tick);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    stream::unfold((ticks, 0), move |(mut ticks, slot)| {
        let store = store.clone();
        async move {
            ticks.tick().await;
            let due = in_slot(&store, slot, slots);
            Some((stream::iter(due), (ticks, (slot + 1) % slots)))
        }
    })
    .flatten()
}

/// The objects of `slot`, in the order of their references (the store's is a hash map's).
fn in_slot<K>(store: &Store<K>, slot: u64, slots: u64) -> Vec<ObjectRef<K>>
where
    K: Resource<DynamicType = ()> + Clone,
{
    let mut due: Vec<ObjectRef<K>> = store
        .state()
        .iter()
        .filter(|o| slot_of(o.meta().uid.as_deref().unwrap_or_default(), slots) == slot)
        .map(|o| ObjectRef::from_obj(o.as_ref()))
        .collect();
    due.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    due
}

/// The same slot for the same UID in every process (`DefaultHasher::new` has fixed keys).
fn slot_of(uid: &str, slots: u64) -> u64 {
    let mut hasher = DefaultHasher::new();
    uid.hash(&mut hasher);
    hasher.finish() % slots
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use kube::runtime::reflector::store;
    use kube::runtime::watcher::Event;

    use super::*;
    use crate::api::PodSet;
    use crate::plan::fixtures::podset;

    fn stored(count: usize) -> Store<PodSet> {
        let (reader, mut writer) = store();
        for i in 0..count {
            let mut ps = podset(1);
            ps.metadata.name = Some(format!("ps-{i}"));
            ps.metadata.uid = Some(format!("uid-{i}"));
            writer.apply_watcher_event(&Event::Apply(ps));
        }
        reader
    }

    /// Every object comes once a period, none in the first (the start looked at each), and
    /// they come spread out.
    #[tokio::test(start_paused = true)]
    async fn every_object_comes_once_a_period_spread_over_it() {
        let period = Duration::from_secs(60);
        let objects = 600;
        let swept = sweep(stored(objects), period);
        let began = Instant::now();
        let mut swept = std::pin::pin!(swept);
        let mut seen: BTreeMap<String, Vec<Duration>> = BTreeMap::new();
        let mut per_second: BTreeMap<u64, usize> = BTreeMap::new();
        while let Some(o) = swept.next().await {
            let at = began.elapsed();
            if at >= period * 3 {
                break;
            }
            seen.entry(o.name).or_default().push(at);
            *per_second.entry(at.as_secs()).or_default() += 1;
        }
        assert_eq!(seen.len(), objects, "some objects never came");
        for (name, times) in &seen {
            assert_eq!(times.len(), 2, "{name} came at {times:?}");
            assert!(times[0] >= period, "{name} in the first period: {times:?}");
            assert_eq!(times[1] - times[0], period, "{name} came at {times:?}");
        }
        let busiest = per_second.values().max().copied().unwrap_or_default();
        assert!(
            busiest <= 30,
            "{busiest} objects in one second (10 on average)"
        );
    }
}
