//! Prometheus metrics. Where a metric means what one of controller-runtime's or client-go's
//! means, it has that name and those labels, so that dashboards made for operators built on
//! them work unchanged: `controller_runtime_reconcile_*`, `workqueue_*` and
//! `rest_client_requests_total`. The operator's own (`podset_operator_*`): reconcile errors by
//! kind, throttling, the write window, leadership, the fence, At lateness and outcomes,
//! PodSets not converged, managed pods by state, and build info. No label names an object.

mod pods;
mod process;
mod queue;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64};
use std::time::Duration;
use tokio::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::cache::PodCache;
pub use pods::Unconverged;
pub use queue::{WorkQueues, key_of, object_key};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: &'static str,
}

/// controller-runtime's `result`: `success`, `error`, `requeue_after` (a reconcile that asked
/// to be looked at again after a while), or `requeue`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub controller: &'static str,
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub controller: &'static str,
    pub error: &'static str,
}

/// client-go's `rest_client_requests_total` labels, less `host` (one API server) and with
/// the `resource` (`pods`, `podsets/status`, ...; `other` for a path of none).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub code: String,
    pub method: String,
    pub resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MethodLabels {
    pub method: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerdictLabels {
    pub verdict: &'static str,
}

pub struct Metrics {
    pub reconciles: Family<ResultLabels, Counter>,
    reconcile_errors: Family<ControllerLabels, Counter>,
    /// Failed reconciles by the error's kind (`error::Error::metric_label`).
    pub errors: Family<ErrorLabels, Counter>,
    pub duration: Family<ControllerLabels, Histogram>,
    active_workers: Family<ControllerLabels, Gauge>,
    max_concurrent: Family<ControllerLabels, Gauge>,
    /// What waits to be reconciled, per controller.
    pub queues: WorkQueues,
    /// Requests this process sent to the API server (refused at the fence: not sent).
    pub api_requests: Family<RequestLabels, Counter>,
    /// 1 while this instance leads (or runs without leader election).
    pub leader: Gauge<i64, AtomicI64>,
    leader_transitions: Counter,
    /// Writes the closed fence refused (this instance does not lead, or no longer).
    pub fence_refusals: Counter,
    /// Requests the API server turned away with 429, by HTTP method.
    pub api_throttled: Family<MethodLabels, Counter>,
    /// Seconds waited to send throttled requests again.
    pub api_throttled_wait: Counter<f64, AtomicU64>,
    /// Writes allowed in flight now (`client::limit`).
    pub write_window: Gauge,
    /// Seconds from an At's due time to its pod created.
    pub at_lateness: Histogram,
    pub at_outcomes: Family<VerdictLabels, Counter>,
    /// PodSets whose available replicas differ from their spec, and since when.
    pub unconverged: Arc<Unconverged>,
}

/// Reconcile times, controller-runtime's range with fewer buckets.
const RECONCILE_BUCKETS: [f64; 12] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 30.0,
];

impl Default for Metrics {
    fn default() -> Self {
        Self {
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            errors: Family::default(),
            duration: Family::new_with_constructor(|| Histogram::new(RECONCILE_BUCKETS)),
            active_workers: Family::default(),
            max_concurrent: Family::default(),
            queues: WorkQueues::default(),
            api_requests: Family::default(),
            leader: Gauge::default(),
            leader_transitions: Counter::default(),
            fence_refusals: Counter::default(),
            api_throttled: Family::default(),
            api_throttled_wait: Counter::default(),
            write_window: Gauge::default(),
            // 10 ms to 5 min: 10 ms x 2^n, 16 buckets (the last 327 s).
            at_lateness: Histogram::new(exponential_buckets(0.01, 2.0, 16)),
            at_outcomes: Family::default(),
            unconverged: Arc::default(),
        }
    }
}

impl Metrics {
    /// A registry with every metric, and the pods of `cache`.
    pub fn registry(&self, cache: Arc<PodCache>) -> Registry {
        let mut registry = Registry::default();
        self.register_controller_runtime(&mut registry);
        self.queues.register(&mut registry);
        registry.register_collector(Box::new(process::Process));
        registry.register(
            "rest_client_requests",
            "Requests sent to the Kubernetes API, by response code (<error> for none), HTTP method and resource",
            self.api_requests.clone(),
        );
        let own = registry.sub_registry_with_prefix("podset_operator");
        self.register_own(own);
        own.register_collector(Box::new(pods::ManagedPods {
            cache,
            leader: self.leader.clone(),
        }));
        own.register_collector(Box::new(pods::Stuck {
            unconverged: self.unconverged.clone(),
            leader: self.leader.clone(),
        }));
        registry
    }

    fn register_controller_runtime(&self, registry: &mut Registry) {
        let cr = registry.sub_registry_with_prefix("controller_runtime");
        cr.register(
            "reconcile",
            "Reconciles, by controller and result (success, error, requeue_after)",
            self.reconciles.clone(),
        );
        cr.register(
            "reconcile_errors",
            "Reconciles that failed, by controller",
            self.reconcile_errors.clone(),
        );
        cr.register(
            "reconcile_time_seconds",
            "How long reconciles took, by controller",
            self.duration.clone(),
        );
        cr.register(
            "active_workers",
            "Reconciles in flight now, by controller",
            self.active_workers.clone(),
        );
        cr.register(
            "max_concurrent_reconciles",
            "Reconciles allowed in flight at once, by controller (0: unbounded)",
            self.max_concurrent.clone(),
        );
    }

    fn register_own(&self, own: &mut Registry) {
        own.register(
            "reconcile_errors",
            "Reconciles that failed, by controller and kind of error",
            self.errors.clone(),
        );
        own.register(
            "api_throttled_requests",
            "Requests the Kubernetes API turned away with 429 Too Many Requests (API Priority and Fairness), by HTTP method",
            self.api_throttled.clone(),
        );
        own.register(
            "api_throttled_wait_seconds",
            "Time throttled requests waited before being sent again (the server's Retry-After)",
            self.api_throttled_wait.clone(),
        );
        own.register(
            "api_write_window",
            "Writes allowed in flight now: halved when the API server throttles one, grown back as writes are served",
            self.write_window.clone(),
        );
        own.register(
            "leader",
            "1 while this instance is the leader",
            self.leader.clone(),
        );
        own.register(
            "leader_transitions",
            "Times this instance became the leader or stopped being it",
            self.leader_transitions.clone(),
        );
        own.register(
            "fence_refusals",
            "Writes refused unsent because this instance did not lead (its fence was closed)",
            self.fence_refusals.clone(),
        );
        own.register(
            "at_lateness_seconds",
            "Time from an At's scheduled time to its pod created",
            self.at_lateness.clone(),
        );
        own.register(
            "at_outcomes",
            "Ats that ended (DONE), by verdict: succeeded, failed, vanished (the pod gone before its end was seen; not run again)",
            self.at_outcomes.clone(),
        );
        let build = Family::<BuildLabels, Gauge>::default();
        build
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        own.register("build_info", "The operator's version", build);
    }

    /// Counts a reconcile, in flight until the returned guard drops.
    pub fn reconcile(&self, controller: &'static str) -> ReconcileTimer<'_> {
        self.active_workers
            .get_or_create(&ControllerLabels { controller })
            .inc();
        ReconcileTimer {
            metrics: self,
            controller,
            start: Instant::now(),
        }
    }

    /// Records how a reconcile ended: `requeue_after` if it asked to be looked at again.
    pub fn reconciled(&self, controller: &'static str, outcome: Result<bool, &'static str>) {
        let result = match outcome {
            Ok(false) => "success",
            Ok(true) => "requeue_after",
            Err(error) => {
                self.reconcile_errors
                    .get_or_create(&ControllerLabels { controller })
                    .inc();
                self.errors
                    .get_or_create(&ErrorLabels { controller, error })
                    .inc();
                "error"
            }
        };
        self.reconciles
            .get_or_create(&ResultLabels { controller, result })
            .inc();
    }

    /// The controller's concurrency (0: unbounded).
    pub fn concurrency(&self, controller: &'static str, concurrency: u16) {
        self.max_concurrent
            .get_or_create(&ControllerLabels { controller })
            .set(i64::from(concurrency));
    }

    /// This instance now leads, or not.
    pub fn leading(&self, leads: bool) {
        let now = i64::from(leads);
        if self.leader.set(now) != now {
            self.leader_transitions.inc();
        }
    }

    pub fn throttled(&self, method: &str) {
        self.api_throttled
            .get_or_create(&MethodLabels {
                method: method.into(),
            })
            .inc();
    }

    pub fn throttled_wait(&self, waited: Duration) {
        self.api_throttled_wait.inc_by(waited.as_secs_f64());
    }

    /// A request answered with `code` (`None`: no answer).
    pub fn api_request(&self, method: &str, resource: &str, code: Option<u16>) {
        let code = code.map_or_else(|| "<error>".to_string(), |c| c.to_string());
        self.api_requests
            .get_or_create(&RequestLabels {
                code,
                method: method.into(),
                resource: resource.into(),
            })
            .inc();
    }

    /// An At's pod made `late` after its scheduled time.
    pub fn at_started(&self, late: Duration) {
        self.at_lateness.observe(late.as_secs_f64());
    }

    pub fn at_ended(&self, verdict: &'static str) {
        self.at_outcomes
            .get_or_create(&VerdictLabels { verdict })
            .inc();
    }
}

pub struct ReconcileTimer<'a> {
    metrics: &'a Metrics,
    controller: &'static str,
    start: Instant,
}

impl Drop for ReconcileTimer<'_> {
    fn drop(&mut self) {
        let controller = ControllerLabels {
            controller: self.controller,
        };
        self.metrics.active_workers.get_or_create(&controller).dec();
        self.metrics
            .duration
            .get_or_create(&controller)
            .observe(self.start.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names and labels dashboards made for controller-runtime and client-go read.
    #[test]
    fn metrics_are_named_and_labelled_as_controller_runtime_and_client_go_name_them() {
        let m = Metrics::default();
        m.leading(true);
        m.concurrency("podset", 0);
        drop(m.reconcile("podset"));
        m.reconciled("podset", Ok(false));
        m.reconciled("podset", Err("pod_api"));
        m.queues
            .add("podset", object_key(Some("ns"), "a"), Instant::now());
        m.api_request("POST", "pods", Some(201));
        m.api_request("GET", "pods", None);
        m.at_started(Duration::from_millis(40));
        m.at_ended("succeeded");
        let mut text = String::new();
        let registry = m.registry(Arc::default());
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            r#"controller_runtime_reconcile_total{controller="podset",result="success"} 1"#,
            r#"controller_runtime_reconcile_total{controller="podset",result="error"} 1"#,
            r#"controller_runtime_reconcile_errors_total{controller="podset"} 1"#,
            r#"controller_runtime_reconcile_time_seconds_count{controller="podset"} 1"#,
            r#"controller_runtime_active_workers{controller="podset"} 0"#,
            r#"controller_runtime_max_concurrent_reconciles{controller="podset"} 0"#,
            r#"workqueue_depth{controller="podset",name="podset"} 1"#,
            r#"workqueue_adds_total{controller="podset",name="podset"} 1"#,
            r#"rest_client_requests_total{code="201",method="POST",resource="pods"} 1"#,
            r#"rest_client_requests_total{code="<error>",method="GET",resource="pods"} 1"#,
            r#"podset_operator_reconcile_errors_total{controller="podset",error="pod_api"} 1"#,
            r#"podset_operator_leader 1"#,
            r#"podset_operator_leader_transitions_total 1"#,
            r#"podset_operator_at_lateness_seconds_bucket{le="0.04"} 1"#,
            r#"podset_operator_at_outcomes_total{verdict="succeeded"} 1"#,
            r#"podset_operator_podsets_unconverged 0"#,
        ] {
            assert!(text.lines().any(|l| l == line), "no {line} in\n{text}");
        }
        // client_golang's names, which kubebuilder's runtime dashboard queries (issue 46).
        for name in [
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_open_fds ",
            "process_max_fds ",
            "process_start_time_seconds ",
        ] {
            assert!(
                text.lines().any(|l| l.starts_with(name)),
                "no {name} in\n{text}"
            );
        }
    }
}
