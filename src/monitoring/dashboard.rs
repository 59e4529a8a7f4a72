//! The Grafana dashboard shipped for the operator (a ConfigMap the kube-prometheus-stack
//! sidecar loads, in the chart and in `config/grafana/`): what answers "is it keeping up, is
//! it late, is the API server pushing back, is anything stuck".

use serde_json::{Value, json};

use super::JOB;

/// One time-series panel: its queries, each with its legend.
struct Panel {
    title: &'static str,
    unit: &'static str,
    queries: Vec<(String, &'static str)>,
}

fn panels() -> Vec<Panel> {
    let sel = format!(r#"job="{JOB}""#);
    let p99 = |metric: &str, by: &str| {
        format!("histogram_quantile(0.99, sum by ({by}le) (rate({metric}_bucket{{{sel}}}[5m])))")
    };
    vec![
        Panel {
            title: "Reconciles by result",
            unit: "ops",
            queries: vec![(
                format!(
                    "sum by (controller, result) (rate(controller_runtime_reconcile_total{{{sel}}}[5m]))"
                ),
                "{{controller}} {{result}}",
            )],
        },
        Panel {
            title: "Reconcile time p99",
            unit: "s",
            queries: vec![(
                p99("controller_runtime_reconcile_time_seconds", "controller, "),
                "{{controller}}",
            )],
        },
        Panel {
            title: "Work queue depth",
            unit: "short",
            queries: vec![(
                format!("sum by (controller) (workqueue_depth{{{sel}}})"),
                "{{controller}}",
            )],
        },
        Panel {
            title: "Time queued p99",
            unit: "s",
            queries: vec![(
                p99("workqueue_queue_duration_seconds", "controller, "),
                "{{controller}}",
            )],
        },
        Panel {
            title: "API requests by code",
            unit: "reqps",
            queries: vec![(
                format!("sum by (code, method) (rate(rest_client_requests_total{{{sel}}}[5m]))"),
                "{{method}} {{code}}",
            )],
        },
        Panel {
            title: "Throttling (429) and the write window",
            unit: "short",
            queries: vec![
                (
                    format!("sum(rate(podset_operator_api_throttled_requests_total{{{sel}}}[5m]))"),
                    "throttled/s",
                ),
                (
                    format!("max(podset_operator_api_write_window{{{sel}}})"),
                    "write window",
                ),
            ],
        },
        Panel {
            title: "At lateness",
            unit: "s",
            queries: vec![
                (p99("podset_operator_at_lateness_seconds", ""), "p99"),
                (
                    format!(
                        "histogram_quantile(0.5, sum by (le) (rate(podset_operator_at_lateness_seconds_bucket{{{sel}}}[5m])))"
                    ),
                    "p50",
                ),
            ],
        },
        Panel {
            title: "At outcomes (last hour)",
            unit: "short",
            queries: vec![(
                format!(
                    "sum by (verdict) (increase(podset_operator_at_outcomes_total{{{sel}}}[1h]))"
                ),
                "{{verdict}}",
            )],
        },
        Panel {
            title: "Managed pods by state",
            unit: "short",
            queries: vec![(
                format!("sum by (owner_kind, state) (podset_operator_managed_pods{{{sel}}})"),
                "{{owner_kind}} {{state}}",
            )],
        },
        Panel {
            title: "PodSets not converged for 5 minutes",
            unit: "short",
            queries: vec![(
                format!("max(podset_operator_podsets_unconverged{{{sel}}})"),
                "PodSets",
            )],
        },
        Panel {
            title: "Leadership",
            unit: "short",
            queries: vec![
                (format!("sum(podset_operator_leader{{{sel}}})"), "leaders"),
                (
                    format!("sum(increase(podset_operator_leader_transitions_total{{{sel}}}[1h]))"),
                    "transitions (1h)",
                ),
                (
                    format!("sum(increase(podset_operator_fence_refusals_total{{{sel}}}[1h]))"),
                    "fence refusals (1h)",
                ),
            ],
        },
    ]
}

/// The dashboard's JSON model: two panels a row, a Prometheus data source to pick.
pub fn dashboard() -> Value {
    let panels: Vec<Value> = panels()
        .iter()
        .enumerate()
        .map(|(i, p)| panel(i, p))
        .collect();
    json!({
        "title": "podset-operator",
        "uid": "podset-operator",
        "tags": ["podset-operator", "kubernetes", "operator"],
        "schemaVersion": 39,
        "version": 1,
        "editable": true,
        "refresh": "30s",
        "time": { "from": "now-1h", "to": "now" },
        "templating": { "list": [{
            "name": "datasource",
            "label": "Data source",
            "type": "datasource",
            "query": "prometheus",
        }]},
        "panels": panels,
    })
}

fn panel(i: usize, p: &Panel) -> Value {
    let refs = ["A", "B", "C", "D"];
    let targets: Vec<Value> = p
        .queries
        .iter()
        .zip(refs)
        .map(|((expr, legend), ref_id)| {
            json!({
                "datasource": { "type": "prometheus", "uid": "${datasource}" },
                "expr": expr,
                "legendFormat": legend,
                "refId": ref_id,
            })
        })
        .collect();
    json!({
        "id": i + 1,
        "type": "timeseries",
        "title": p.title,
        "datasource": { "type": "prometheus", "uid": "${datasource}" },
        "gridPos": { "h": 8, "w": 12, "x": (i % 2) * 12, "y": (i / 2) * 8 },
        "fieldConfig": { "defaults": { "unit": p.unit }, "overrides": [] },
        "targets": targets,
    })
}

/// Each panel's title and queries (what an end-to-end test asks a real Prometheus).
pub fn panel_queries() -> Vec<(&'static str, Vec<String>)> {
    panels()
        .into_iter()
        .map(|p| (p.title, p.queries.into_iter().map(|(q, _)| q).collect()))
        .collect()
}

/// Every query of the dashboard.
pub fn queries() -> Vec<String> {
    panel_queries().into_iter().flat_map(|(_, q)| q).collect()
}

/// The ConfigMap of `config/grafana/`, labelled for the kube-prometheus-stack sidecar.
pub fn config_map() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "podset-operator-dashboard",
            "namespace": "podset-operator-system",
            "labels": {
                "app.kubernetes.io/name": "podset-operator",
                "grafana_dashboard": "1",
            },
        },
        "data": { "podset-operator.json": json_text(&dashboard()) },
    })
}

/// `value` as the checked-in JSON files are written: pretty, with a final newline.
pub fn json_text(value: &Value) -> String {
    format!(
        "{}\n",
        serde_json::to_string_pretty(value).expect("JSON serializes")
    )
}
