//! Reading the fields of stored objects that the world and the oracle care about.

use serde_json::Value;

use podset_operator::api::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};

/// The controller owner reference of an object: (kind, name, uid).
pub fn controller(o: &Value) -> Option<(&str, &str, &str)> {
    o["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"].as_bool() == Some(true))
        .map(|r| {
            let s = |k: &str| r[k].as_str().unwrap_or_default();
            (s("kind"), s("name"), s("uid"))
        })
}

pub fn uid(o: &Value) -> &str {
    o["metadata"]["uid"].as_str().unwrap_or_default()
}

pub fn name(o: &Value) -> &str {
    o["metadata"]["name"].as_str().unwrap_or_default()
}

pub fn namespace(o: &Value) -> &str {
    o["metadata"]["namespace"].as_str().unwrap_or_default()
}

pub fn phase(o: &Value) -> &str {
    o["status"]["phase"].as_str().unwrap_or_default()
}

pub fn terminating(o: &Value) -> bool {
    o["metadata"].get("deletionTimestamp").is_some()
}

/// A pod that counts toward its owner, as the operator counts: not terminating, not finished.
pub fn active(o: &Value) -> bool {
    !terminating(o) && matches!(phase(o), "Pending" | "Running" | "Unknown" | "")
}

/// A pod the operator's watch selects (its label selector).
pub fn managed(o: &Value) -> bool {
    o["metadata"]["labels"][MANAGED_BY_LABEL].as_str() == Some(MANAGED_BY_VALUE)
}

pub fn generation(o: &Value) -> i64 {
    o["metadata"]["generation"].as_i64().unwrap_or(0)
}

/// A pod held back by a scheduling gate: no node starts it.
pub fn gated(o: &Value) -> bool {
    o["spec"]["schedulingGates"]
        .as_array()
        .is_some_and(|g| !g.is_empty())
}

/// The names of a pod's scheduling gates, in order.
pub fn gates(o: &Value) -> Vec<&str> {
    let gates = o["spec"]["schedulingGates"]
        .as_array()
        .into_iter()
        .flatten();
    gates.filter_map(|g| g["name"].as_str()).collect()
}

/// The name of the container of an At's pod that runs its command (admission may add
/// others, the template may hold more): the one the pod's annotation names, else `busybox`.
pub fn command_container_name(pod: &Value) -> &str {
    pod["metadata"]["annotations"][podset_operator::api::AT_CONTAINER_ANNOTATION]
        .as_str()
        .unwrap_or(podset_operator::api::AT_COMMAND_CONTAINER)
}

/// The container of an At's pod that runs its command ([`command_container_name`]).
pub fn command_container(pod: &Value) -> &Value {
    let name = command_container_name(pod);
    pod["spec"]["containers"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == name))
        .unwrap_or(&Value::Null)
}

/// The spec of an At (as stored, at v1beta1), if it reads.
pub fn at_spec(at: &Value) -> Option<podset_operator::api::AtSpec> {
    serde_json::from_value(at["spec"].clone()).ok()
}

/// The line an At's command container runs through `sh -c`, as v1alpha1 writes it.
pub fn command_line(at: &Value) -> String {
    at_spec(at)
        .and_then(|s| s.shell_line().map(String::from))
        .unwrap_or_default()
}

/// What a container runs under `sh -c`.
pub fn command_of(container: &Value) -> &str {
    container["command"]
        .as_array()
        .and_then(|c| c.last())
        .and_then(Value::as_str)
        .unwrap_or_default()
}
