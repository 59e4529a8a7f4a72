//! Prometheus metrics: reconciles, errors and durations per controller, the operator's own
//! API requests, managed pods by state, leadership, and build info.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64};
use tokio::time::Instant;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::cache::PodCache;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub controller: &'static str,
    pub error: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub verb: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PodLabels {
    owner_kind: String,
    state: &'static str,
}

pub struct Metrics {
    pub reconciles: Family<ControllerLabels, Counter>,
    pub errors: Family<ErrorLabels, Counter>,
    pub duration: Family<ControllerLabels, Histogram>,
    /// Requests this process sent to the API server, by HTTP method.
    pub api_requests: Family<RequestLabels, Counter>,
    /// 1 while this instance leads (or runs without leader election).
    pub leader: Gauge<i64, AtomicI64>,
    /// Requests the API server turned away with 429, by HTTP method.
    pub api_throttled: Family<RequestLabels, Counter>,
    /// Seconds waited to send throttled requests again.
    pub api_throttled_wait: Counter<f64, AtomicU64>,
    /// Writes allowed in flight now (`client::limit`).
    pub write_window: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            reconciles: Family::default(),
            errors: Family::default(),
            duration: Family::new_with_constructor(|| {
                Histogram::new([
                    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                ])
            }),
            api_requests: Family::default(),
            leader: Gauge::default(),
            api_throttled: Family::default(),
            api_throttled_wait: Counter::default(),
            write_window: Gauge::default(),
        }
    }
}

impl Metrics {
    /// A registry (prefix `podset_operator_`) with every metric, and the pods of `cache`.
    pub fn registry(&self, cache: Arc<PodCache>) -> Registry {
        let mut registry = Registry::with_prefix("podset_operator");
        registry.register(
            "reconciliations",
            "Reconciles started",
            self.reconciles.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Reconciles that failed, by error",
            self.errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "How long reconciles took",
            self.duration.clone(),
        );
        registry.register(
            "api_requests",
            "Requests sent to the Kubernetes API, by HTTP method",
            self.api_requests.clone(),
        );
        registry.register(
            "api_throttled_requests",
            "Requests the Kubernetes API turned away with 429 Too Many Requests (API Priority and Fairness), by HTTP method",
            self.api_throttled.clone(),
        );
        registry.register(
            "api_throttled_wait_seconds",
            "Time throttled requests waited before being sent again (the server's Retry-After)",
            self.api_throttled_wait.clone(),
        );
        registry.register(
            "api_write_window",
            "Writes allowed in flight now: halved when the API server throttles one, grown back as writes are served",
            self.write_window.clone(),
        );
        registry.register(
            "leader",
            "1 while this instance is the leader",
            self.leader.clone(),
        );
        let build = Family::<BuildLabels, Gauge>::default();
        build
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        registry.register("build_info", "The operator's version", build);
        registry.register_collector(Box::new(ManagedPods {
            cache,
            leader: self.leader.clone(),
        }));
        registry
    }

    /// Counts a reconcile and times it until the returned guard drops.
    pub fn reconcile(&self, controller: &'static str) -> ReconcileTimer<'_> {
        self.reconciles
            .get_or_create(&ControllerLabels { controller })
            .inc();
        ReconcileTimer {
            metrics: self,
            controller,
            start: Instant::now(),
        }
    }

    pub fn error(&self, controller: &'static str, error: &'static str) {
        self.errors
            .get_or_create(&ErrorLabels { controller, error })
            .inc();
    }

    pub fn throttled(&self, verb: &str) {
        by_verb(&self.api_throttled, verb).inc();
    }

    pub fn throttled_wait(&self, waited: std::time::Duration) {
        self.api_throttled_wait.inc_by(waited.as_secs_f64());
    }

    pub fn api_request(&self, verb: &str) {
        by_verb(&self.api_requests, verb).inc();
    }
}

fn by_verb<'a>(
    family: &'a Family<RequestLabels, Counter>,
    verb: &str,
) -> impl std::ops::Deref<Target = Counter> + 'a {
    family.get_or_create(&RequestLabels {
        verb: verb.to_string(),
    })
}

pub struct ReconcileTimer<'a> {
    metrics: &'a Metrics,
    controller: &'static str,
    start: Instant,
}

impl Drop for ReconcileTimer<'_> {
    fn drop(&mut self) {
        self.metrics
            .duration
            .get_or_create(&ControllerLabels {
                controller: self.controller,
            })
            .observe(self.start.elapsed().as_secs_f64());
    }
}

/// `managed_pods{owner_kind, state}`, counted from the pod cache at scrape time by the
/// leader: a warm standby's cache holds the same pods, and it manages none of them.
#[derive(Debug)]
struct ManagedPods {
    cache: Arc<PodCache>,
    leader: Gauge<i64, AtomicI64>,
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
