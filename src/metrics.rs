//! Prometheus metrics: reconciles, errors and durations per controller.

use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub controller: &'static str,
    pub error: &'static str,
}

pub struct Metrics {
    pub reconciles: Family<ControllerLabels, Counter>,
    pub errors: Family<ErrorLabels, Counter>,
    pub duration: Family<ControllerLabels, Histogram>,
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
        }
    }
}

impl Metrics {
    pub fn register(&self, registry: &mut Registry) {
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
