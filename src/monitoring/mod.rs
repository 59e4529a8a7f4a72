//! What is shipped to watch the operator with: alert rules and a Grafana dashboard, over its
//! metrics (`crate::metrics`), generated into the chart and `config/` (`crate::manifests`).

pub mod alerts;
pub mod dashboard;

/// The `job` Prometheus gives the operator's targets: the metrics Service's name, as a
/// ServiceMonitor names it. The chart puts its own Service's name in its place.
pub const JOB: &str = "podset-operator-metrics";
