//! What kube-apiserver's pod strategy adds: a pod made with a scheduling gate says so in a
//! `PodScheduled` condition; a gate may only be taken off (an added one is 422,
//! `FieldValueForbidden`), and none left is no list; a pod condition is served with `lastProbeTime`, null when unset.

use jiff::Timestamp;
use serde_json::{Value, json};

use super::{Key, seconds};
use crate::model::error::ApiError;

/// Refuses `new` if it adds a scheduling gate `old` did not have.
pub(super) fn check_update(key: &Key, old: &Value, new: &Value) -> Result<(), ApiError> {
    let gates = |pod: &Value| -> Vec<String> {
        let gates = pod["spec"]["schedulingGates"].as_array().cloned();
        let names = gates.unwrap_or_default().into_iter();
        names
            .filter_map(|g| g["name"].as_str().map(String::from))
            .collect()
    };
    let had = gates(old);
    let added = gates(new)
        .into_iter()
        .enumerate()
        .find(|(_, g)| !had.contains(g));
    match added {
        Some((i, gate)) => Err(ApiError::invalid(
            key.kind,
            &key.name,
            &format!("spec.schedulingGates[{i}].name"),
            "FieldValueForbidden",
            &format!("Forbidden: only deletion is allowed, but found new scheduling gate '{gate}'"),
        )),
        None => Ok(()),
    }
}

/// A pod's spec as the API server stores it: no scheduling gate left is no `schedulingGates`
/// (a JSON patch that removes the last one leaves an empty list, which it omits).
pub(super) fn omit_empty_gates(pod: &mut Value) {
    let spec = pod.get_mut("spec").and_then(Value::as_object_mut);
    if let Some(spec) = spec
        && spec
            .get("schedulingGates")
            .and_then(Value::as_array)
            .is_some_and(Vec::is_empty)
    {
        spec.remove("schedulingGates");
    }
}

/// Serves each pod condition with a `lastProbeTime`, as the API server does.
pub(super) fn default_status(pod: &mut Value) {
    // `pointer_mut`: indexing a `Value` mutably would add the keys it does not find.
    let conditions = pod
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut);
    for condition in conditions.into_iter().flatten() {
        if let Some(c) = condition.as_object_mut() {
            c.entry("lastProbeTime").or_insert(Value::Null);
        }
    }
}

/// The status of a pod as it is created: Pending, and held at its gate if it has one.
pub(super) fn created_status(pod: &Value, now: Timestamp) -> Value {
    let mut status = json!({"phase": "Pending", "qosClass": "BestEffort"});
    if crate::model::objects::gated(pod) {
        status["conditions"] = json!([{"type": "PodScheduled", "status": "False",
            "reason": "SchedulingGated",
            "message": "Scheduling is blocked due to non-empty scheduling gates",
            "lastProbeTime": null, "lastTransitionTime": seconds(now)}]);
    }
    status
}
