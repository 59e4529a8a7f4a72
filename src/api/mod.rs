//! The custom resources this operator serves, and their CRD manifests.

pub mod at;
pub mod podset;

use kube::CustomResourceExt;

pub use at::{At, AtPhase, AtSpec, AtStatus};
pub use podset::{PodSet, PodSetSpec, PodSetStatus};

/// Label on every pod this operator creates; its pod watch selects on it, so the
/// operator caches only its own pods.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY_VALUE: &str = "podset-operator";

/// Every CRD, as one multi-document YAML stream (`podset-operator crds`).
pub fn crds_yaml() -> String {
    [PodSet::crd(), At::crd()]
        .iter()
        .map(|crd| serde_yaml::to_string(crd).expect("CRDs serialize"))
        .collect::<Vec<_>>()
        .join("---\n")
}
