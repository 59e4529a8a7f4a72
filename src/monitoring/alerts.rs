//! The alert rules shipped for the operator (a PrometheusRule in the chart and in
//! `config/prometheus/`, and the plain rule file `promtool` tests): each with its threshold,
//! its `for` window and why, and the README section a runbook link points to.

use serde_json::{Value, json};

use super::JOB;

/// One alerting rule.
pub struct Alert {
    pub name: &'static str,
    pub expr: String,
    /// How long the condition must hold before it fires.
    pub for_: &'static str,
    pub severity: &'static str,
    pub summary: &'static str,
    pub description: &'static str,
}

/// Where the README explains each alert and what to do (its anchors are the alert names,
/// lower-cased); the chart's `metrics.prometheusRule.runbookBaseURL` puts a copy's in its place.
pub const RUNBOOKS: &str = "https://github.com/podset-operator/podset-operator/blob/main/README.md";

/// The alerts, in the order the README lists them.
pub fn alerts() -> Vec<Alert> {
    vec![
        Alert {
            name: "PodsetOperatorDown",
            // Every replica's target down or gone: nothing reconciles PodSets or Ats. One
            // replica down is not this (a standby takes over within a lease).
            expr: format!(r#"absent(up{{job="{JOB}"}} == 1)"#),
            for_: "2m",
            severity: "critical",
            summary: "No podset-operator replica is up",
            description: "Prometheus has scraped no podset-operator replica for 2 minutes: PodSets are not scaled and Ats do not start.",
        },
        Alert {
            name: "PodsetOperatorNoLeader",
            // Replicas up, none leading, for two lease durations (15 s each): an election
            // that cannot finish (the Lease unwritable, clocks apart).
            expr: format!(r#"sum(podset_operator_leader{{job="{JOB}"}}) < 1"#),
            for_: "30s",
            severity: "critical",
            summary: "podset-operator replicas are up but none leads",
            description: "No replica has held the leader Lease for two lease durations: nothing reconciles.",
        },
        Alert {
            name: "PodsetOperatorReconcileErrors",
            // More than 1 reconcile in 10 failing for 15 minutes: a retry storm or a
            // lasting outage, not a conflict or two.
            expr: format!(
                r#"sum by (controller) (rate(controller_runtime_reconcile_total{{job="{JOB}",result="error"}}[5m])) / sum by (controller) (rate(controller_runtime_reconcile_total{{job="{JOB}"}}[5m])) > 0.1"#
            ),
            for_: "15m",
            severity: "warning",
            summary: "Over 10% of {{ $labels.controller }} reconciles fail",
            description: "{{ $value | humanizePercentage }} of the {{ $labels.controller }} controller's reconciles failed over 5 minutes, for 15 minutes.",
        },
        Alert {
            name: "PodsetOperatorAtLate",
            // The At's promise is its time: at 500 due in one second p99 is under 3 s here,
            // so 10 s is trouble (throttling, a starved operator), not load.
            expr: format!(
                r#"histogram_quantile(0.99, sum by (le) (rate(podset_operator_at_lateness_seconds_bucket{{job="{JOB}"}}[10m]))) > 10"#
            ),
            for_: "10m",
            severity: "warning",
            summary: "At commands start over 10 s late",
            description: "The 99th percentile of At lateness (due time to pod created) is {{ $value | humanizeDuration }} over 10 minutes.",
        },
        Alert {
            name: "PodsetOperatorPodSetNotConverged",
            // The gauge counts PodSets unconverged for over 5 minutes; 10 more make 15.
            expr: format!(r#"max(podset_operator_podsets_unconverged{{job="{JOB}"}}) > 0"#),
            for_: "10m",
            severity: "warning",
            summary: "{{ $value }} PodSets have not reached their replicas for 15 minutes",
            description: "PodSets whose available replicas have differed from spec.replicas for over 15 minutes: see their Available and ReplicaFailure conditions (kubectl describe podset).",
        },
        Alert {
            name: "PodsetOperatorThrottled",
            // Sustained 429s: its priority level is too small for its load, and every other
            // tenant of that level is turned away too.
            expr: format!(
                r#"sum(rate(rest_client_requests_total{{job="{JOB}",code="429"}}[5m])) > 0.5"#
            ),
            for_: "15m",
            severity: "warning",
            summary: "The API server throttles podset-operator",
            description: "The API server answered {{ $value | humanize }} requests a second with 429 (API Priority and Fairness) for 15 minutes.",
        },
    ]
}

/// The rule groups, as a Prometheus rule file and a PrometheusRule's `spec` hold them.
pub fn groups() -> Value {
    let rules: Vec<Value> = alerts().iter().map(rule).collect();
    json!({ "groups": [{ "name": "podset-operator", "rules": rules }] })
}

fn rule(a: &Alert) -> Value {
    json!({
        "alert": a.name,
        "expr": a.expr,
        "for": a.for_,
        "labels": { "severity": a.severity },
        "annotations": {
            "summary": a.summary,
            "description": a.description,
            "runbook_url": format!("{RUNBOOKS}#{}", a.name.to_lowercase()),
        },
    })
}

/// The PrometheusRule of `config/prometheus/` (the Prometheus Operator's resource).
pub fn prometheus_rule() -> Value {
    json!({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "podset-operator",
            "namespace": "podset-operator-system",
            "labels": { "app.kubernetes.io/name": "podset-operator" },
        },
        "spec": groups(),
    })
}
