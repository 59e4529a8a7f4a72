//! The `apf` scenario's API Priority and Fairness level: a tight one for the controller under
//! test alone, and what the API server counted in it.

use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::flowcontrol::v1::{FlowSchema, PriorityLevelConfiguration};
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::env::{Target, operator_metrics};
use crate::report::Sample;
use crate::system::{apiserver_metrics, metric_sum};

/// The priority level's name, and its FlowSchema's.
const LEVEL: &str = "bench-tight";

/// Puts every request of `target`'s ServiceAccount in a level of its own of about 3 seats
/// (1 share of the server's 600 seats, beside the defaults' 245), which neither lends nor
/// borrows, with short queues; waits until the API server applies it. The user in the level.
pub async fn confine(client: &Client, target: Target) -> Result<String> {
    let (namespace, name) = target.account().context("no controller to confine")?;
    let level: PriorityLevelConfiguration = serde_json::from_value(json!({
        "metadata": { "name": LEVEL },
        "spec": { "type": "Limited", "limited": {
            "nominalConcurrencyShares": 1,
            "lendablePercent": 0,
            "borrowingLimitPercent": 0,
            "limitResponse": { "type": "Queue", "queuing": {
                "queues": 8, "handSize": 2, "queueLengthLimit": 5,
            } },
        } },
    }))?;
    let account = json!({ "namespace": namespace, "name": name });
    let schema: FlowSchema = serde_json::from_value(json!({
        "metadata": { "name": LEVEL },
        "spec": {
            "priorityLevelConfiguration": { "name": LEVEL },
            // Ahead of every default schema but exempt (1, system:masters) and probes (2).
            "matchingPrecedence": 50,
            "distinguisherMethod": { "type": "ByUser" },
            "rules": [{
                "subjects": [{ "kind": "ServiceAccount", "serviceAccount": account }],
                "resourceRules": [{
                    "verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                    "namespaces": ["*"], "clusterScope": true,
                }],
                "nonResourceRules": [{ "verbs": ["*"], "nonResourceURLs": ["*"] }],
            }],
        },
    }))?;
    let pp = PostParams::default();
    Api::<PriorityLevelConfiguration>::all(client.clone())
        .create(&pp, &level)
        .await?;
    let schemas: Api<FlowSchema> = Api::all(client.clone());
    schemas.create(&pp, &schema).await?;
    // The API server's configuration controller marks the schema not dangling once it
    // classifies requests by it; until then they go where the defaults say.
    let what = format!("the API server to apply FlowSchema {LEVEL}");
    testenv::poll(Duration::from_secs(30), &what, || async {
        Ok(applied(&schemas.get(LEVEL).await?))
    })
    .await?;
    Ok(format!("system:serviceaccount:{namespace}:{name}"))
}

fn applied(schema: &FlowSchema) -> bool {
    let conditions = schema.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.is_some_and(|cs| {
        cs.iter()
            .any(|c| c.type_.as_deref() == Some("Dangling") && c.status.as_deref() == Some("False"))
    })
}

/// What the API server counted in the level so far: the requests it rejected (429, any
/// reason) and those it dispatched; its seats and `user` in the note.
pub async fn count(client: &Client, user: &str, sample: &mut Sample) -> Result<()> {
    let text = apiserver_metrics(client).await?;
    let seats = in_level(&text, "apiserver_flowcontrol_nominal_limit_seats");
    sample.level_rejected = Some(in_level(
        &text,
        "apiserver_flowcontrol_rejected_requests_total",
    ));
    sample.level_dispatched = Some(in_level(
        &text,
        "apiserver_flowcontrol_dispatched_requests_total",
    ));
    let reasons: Vec<String> = ["queue-full", "time-out", "concurrency-limit", "cancelled"]
        .into_iter()
        .filter_map(|reason| {
            let label = format!("reason=\"{reason}\"");
            let n = metric_sum(
                &text,
                "apiserver_flowcontrol_rejected_requests_total",
                |l| l.contains(&format!("priority_level=\"{LEVEL}\"")) && l.contains(&label),
            );
            (n > 0.0).then(|| format!("{reason} {n}"))
        })
        .collect();
    sample.note = format!("{user} alone in {LEVEL}, {seats} seats");
    if !reasons.is_empty() {
        sample.note += &format!(" (429s: {})", reasons.join(", "));
    }
    Ok(())
}

/// What the operator's own counters say: its requests and those throttled, by verb.
pub async fn operator_throttled(metrics_port: u16) -> Result<String> {
    let text = operator_metrics(metrics_port).await?;
    let by_verb = |metric: &str| -> Vec<String> {
        ["GET", "POST", "PATCH", "PUT", "DELETE"]
            .into_iter()
            .filter_map(|verb| {
                let label = format!("method=\"{verb}\"");
                let n = metric_sum(&text, metric, |l| l.contains(&label));
                (n > 0.0).then(|| format!("{verb} {n}"))
            })
            .collect()
    };
    let sent = by_verb("rest_client_requests_total");
    let throttled = by_verb("podset_operator_api_throttled_requests_total");
    Ok(format!(
        "; the operator sent {}, throttled {}",
        sent.join(" "),
        throttled.join(" ")
    ))
}

/// The sum of `metric` over the level's series (all flow schemas, all reasons).
fn in_level(text: &str, metric: &str) -> f64 {
    let label = format!("priority_level=\"{LEVEL}\"");
    metric_sum(text, metric, |labels| labels.contains(&label))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_the_level_only() {
        let text = r#"
# TYPE apiserver_flowcontrol_rejected_requests_total counter
apiserver_flowcontrol_rejected_requests_total{flow_schema="bench-tight",priority_level="bench-tight",reason="queue-full"} 40
apiserver_flowcontrol_rejected_requests_total{flow_schema="bench-tight",priority_level="bench-tight",reason="time-out"} 2
apiserver_flowcontrol_rejected_requests_total{flow_schema="global-default",priority_level="global-default",reason="queue-full"} 7
apiserver_flowcontrol_rejected_requests_total{flow_schema="x",priority_level="bench-tight-2",reason="queue-full"} 5
apiserver_flowcontrol_dispatched_requests_total{flow_schema="bench-tight",priority_level="bench-tight"} 1.234e+03
apiserver_flowcontrol_nominal_limit_seats{priority_level="bench-tight"} 3
apiserver_flowcontrol_nominal_limit_seats{priority_level="workload-low"} 245
"#;
        let rejected = "apiserver_flowcontrol_rejected_requests_total";
        assert_eq!(in_level(text, rejected), 42.0);
        let dispatched = "apiserver_flowcontrol_dispatched_requests_total";
        assert_eq!(in_level(text, dispatched), 1234.0);
        assert_eq!(
            in_level(text, "apiserver_flowcontrol_nominal_limit_seats"),
            3.0
        );
        assert_eq!(in_level("", rejected), 0.0);
    }
}
