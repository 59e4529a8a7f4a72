//! client-go's work-queue metrics for kube-runtime's controllers, whose queue is their own:
//! an object is queued when something triggers it (its watch event, a pod of its, the
//! resync) and leaves the queue when its reconcile starts. A trigger while it is queued
//! changes nothing (its wait counts from the first), as in a work queue. A reconcile that
//! starts with nothing queued (a requeue come due, which kube-runtime's scheduler keeps) counts
//! as added and taken at once.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use parking_lot::Mutex;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tokio::time::Instant;

/// controller-runtime labels its queues with both.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    controller: &'static str,
    name: &'static str,
}

impl QueueLabels {
    fn of(controller: &'static str) -> Self {
        Self {
            controller,
            name: controller,
        }
    }
}

/// An object's place in a queue: a hash of its namespace and name (8 bytes an object queued,
/// not its name).
pub fn object_key(namespace: Option<&str>, name: &str) -> u64 {
    let mut h = DefaultHasher::new();
    (namespace, name).hash(&mut h);
    h.finish()
}

/// [`object_key`] of an object, from its metadata (no copy of its name).
pub fn key_of(meta: &ObjectMeta) -> u64 {
    object_key(
        meta.namespace.as_deref(),
        meta.name.as_deref().unwrap_or_default(),
    )
}

pub struct WorkQueues {
    queued: Mutex<HashMap<&'static str, HashMap<u64, Instant>>>,
    depth: Family<QueueLabels, Gauge>,
    adds: Family<QueueLabels, Counter>,
    waited: Family<QueueLabels, Histogram>,
}

impl Default for WorkQueues {
    fn default() -> Self {
        Self {
            queued: Mutex::default(),
            depth: Family::default(),
            adds: Family::default(),
            // 1 ms to 65 s, 1 ms x 4^n: client-go's start at 10 ns, far below what a
            // controller's wait ever is.
            waited: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 4.0, 9))
            }),
        }
    }
}

impl WorkQueues {
    pub(super) fn register(&self, registry: &mut Registry) {
        let wq = registry.sub_registry_with_prefix("workqueue");
        wq.register(
            "depth",
            "Objects waiting for a reconcile, by controller",
            self.depth.clone(),
        );
        wq.register(
            "adds",
            "Objects queued for a reconcile, by controller",
            self.adds.clone(),
        );
        wq.register(
            "queue_duration_seconds",
            "How long objects waited from queued to their reconcile started, by controller",
            self.waited.clone(),
        );
    }

    /// Object `key` of `controller` is triggered at `now`.
    pub fn add(&self, controller: &'static str, key: u64, now: Instant) {
        let mut queued = self.queued.lock();
        let queue = queued.entry(controller).or_default();
        if queue.contains_key(&key) {
            return;
        }
        queue.insert(key, now);
        self.adds.get_or_create(&QueueLabels::of(controller)).inc();
        self.depth_is(controller, queue.len());
    }

    /// Object `key`'s reconcile starts at `now`.
    pub fn take(&self, controller: &'static str, key: u64, now: Instant) {
        let mut queued = self.queued.lock();
        let queue = queued.entry(controller).or_default();
        let labels = QueueLabels::of(controller);
        let since = match queue.remove(&key) {
            Some(since) => since,
            None => {
                self.adds.get_or_create(&labels).inc();
                now
            }
        };
        self.waited
            .get_or_create(&labels)
            .observe((now - since).as_secs_f64());
        self.depth_is(controller, queue.len());
    }

    /// Object `key` is gone: it will not be reconciled.
    pub fn drop_object(&self, controller: &'static str, key: u64) {
        let mut queued = self.queued.lock();
        let queue = queued.entry(controller).or_default();
        if queue.remove(&key).is_some() {
            self.depth_is(controller, queue.len());
        }
    }

    /// Empties the queues (a term ends: its controllers are gone).
    pub fn clear(&self) {
        let mut queued = self.queued.lock();
        for (controller, queue) in queued.iter_mut() {
            queue.clear();
            self.depth_is(controller, 0);
        }
    }

    fn depth_is(&self, controller: &'static str, depth: usize) {
        self.depth
            .get_or_create(&QueueLabels::of(controller))
            .set(i64::try_from(depth).unwrap_or(i64::MAX));
    }

    #[cfg(test)]
    pub(crate) fn depth(&self, controller: &'static str) -> i64 {
        self.depth.get_or_create(&QueueLabels::of(controller)).get()
    }

    #[cfg(test)]
    fn adds(&self, controller: &'static str) -> u64 {
        self.adds.get_or_create(&QueueLabels::of(controller)).get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn an_object_waits_from_its_first_trigger_to_its_reconcile() {
        let q = WorkQueues::default();
        let t0 = Instant::now();
        let (a, b) = (object_key(Some("ns"), "a"), object_key(Some("ns"), "b"));
        q.add("podset", a, t0);
        q.add("podset", a, t0 + Duration::from_secs(1)); // already queued
        q.add("podset", b, t0);
        assert_eq!((q.depth("podset"), q.adds("podset")), (2, 2));
        q.take("podset", a, t0 + Duration::from_secs(2));
        let waited = q.waited.get_or_create(&QueueLabels::of("podset"));
        assert_eq!(waited.sum(), 2.0, "from the first trigger");
        q.drop_object("podset", b);
        assert_eq!(q.depth("podset"), 0);
        // A requeue come due: added and taken at once.
        q.take("podset", b, t0 + Duration::from_secs(3));
        assert_eq!((q.depth("podset"), q.adds("podset")), (0, 3));
        assert_eq!(q.depth("at"), 0, "queues are per controller");
    }
}
