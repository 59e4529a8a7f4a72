//! What to report about an object the operator cannot read ([`Unreadable`]): one condition,
//! added to the conditions it has, and written only when it is not there yet, so that the
//! watch event of the report itself asks for nothing more.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::Value;

use crate::api::decoded::{Reported, Unreadable};

pub const REASON_UNREADABLE: &str = "Unreadable";

/// The report on `object`: its conditions with ours in, and the message (for the Warning
/// event too); `None` if it already carries this report.
pub fn report<K: Reported>(object: &Unreadable, now: Timestamp) -> Option<(Vec<Value>, String)> {
    let (type_, status) = K::CONDITION;
    let message = format!(
        "the operator cannot read this {}, so it leaves it alone until it is fixed or deleted: {}",
        K::kind(&()),
        object.error
    );
    let same = |c: &&Value| c.get("type").and_then(Value::as_str) == Some(type_);
    let old = object.conditions.iter().find(same);
    let field = |c: &Value, name: &str| c.get(name).and_then(Value::as_str).map(str::to_owned);
    if old.is_some_and(|c| {
        field(c, "status").as_deref() == Some(status)
            && field(c, "reason").as_deref() == Some(REASON_UNREADABLE)
            && field(c, "message").as_deref() == Some(message.as_str())
    }) {
        return None;
    }
    let since = old
        .filter(|c| field(c, "status").as_deref() == Some(status))
        .and_then(|c| serde_json::from_value::<Time>(c.get("lastTransitionTime")?.clone()).ok())
        .unwrap_or(Time(now));
    let condition = Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: REASON_UNREADABLE.to_string(),
        message: message.clone(),
        observed_generation: object.metadata.generation,
        last_transition_time: since,
    };
    let condition = serde_json::to_value(condition).expect("a condition serializes");
    let others = object.conditions.iter().filter(|c| !same(c)).cloned();
    Some((others.chain([condition]).collect(), message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::PodSet;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use serde_json::json;

    fn unreadable(conditions: Vec<Value>) -> Unreadable {
        Unreadable {
            metadata: ObjectMeta {
                generation: Some(3),
                ..Default::default()
            },
            error: "spec.replicas: invalid type".into(),
            conditions,
        }
    }

    #[test]
    fn the_report_is_added_to_the_other_conditions_once() {
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let available = json!({"type": "Available", "status": "True"});
        let (conditions, message) =
            report::<PodSet>(&unreadable(vec![available.clone()]), now).expect("a report");
        assert!(message.contains("cannot read this PodSet"), "{message}");
        assert!(
            message.ends_with("spec.replicas: invalid type"),
            "{message}"
        );
        assert_eq!(conditions[0], available);
        assert_eq!(conditions[1]["type"], "ReplicaFailure");
        assert_eq!(conditions[1]["status"], "True");
        assert_eq!(conditions[1]["reason"], REASON_UNREADABLE);
        assert_eq!(conditions[1]["observedGeneration"], 3);

        let later = Timestamp::from_second(1_800_000_100).unwrap();
        assert_eq!(report::<PodSet>(&unreadable(conditions), later), None);
    }

    /// A new error replaces the report, and keeps when the condition turned True.
    #[test]
    fn a_changed_error_is_reported_again_since_the_same_transition() {
        let then = Timestamp::from_second(1_800_000_000).unwrap();
        let (conditions, _) = report::<PodSet>(&unreadable(vec![]), then).unwrap();
        let mut changed = unreadable(conditions);
        changed.error = "spec.template: invalid type".into();
        let later = Timestamp::from_second(1_800_000_100).unwrap();
        let (conditions, message) = report::<PodSet>(&changed, later).expect("a new report");
        assert_eq!(conditions.len(), 1);
        assert!(message.ends_with("spec.template: invalid type"));
        assert_eq!(
            conditions[0]["lastTransitionTime"],
            serde_json::to_value(Time(then)).unwrap()
        );
    }
}
