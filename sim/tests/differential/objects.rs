//! The objects the sequences write.

use serde_json::{Value, json};

use podset_operator::api::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};

pub(crate) fn pod(name: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}]},
    })
}

pub(crate) fn managed() -> Value {
    json!({ MANAGED_BY_LABEL: MANAGED_BY_VALUE })
}

pub(crate) fn podset(name: &str, replicas: i64) -> Value {
    json!({
        "apiVersion": "app.example.com/v1beta1", "kind": "PodSet",
        "metadata": {"name": name},
        "spec": {"replicas": replicas},
    })
}

/// The book's At, written at v1alpha1, as the API server stores it (v1beta1).
pub(crate) fn at(name: &str) -> Value {
    let alpha = json!({
        "apiVersion": "cnat.programming-kubernetes.info/v1alpha1", "kind": "At",
        "metadata": {"name": name},
        "spec": {"schedule": "2030-01-01T00:00:00Z", "command": "echo YAY"},
    });
    let hub = "cnat.programming-kubernetes.info/v1beta1";
    podset_operator::api::conversion::convert(alpha, hub).expect("an At converts")
}

pub(crate) fn lease(name: &str, holder: &str) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15},
    })
}
