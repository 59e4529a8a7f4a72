//! `PodSet` (app.example.com/v1beta1, stored; v1alpha1 served deprecated with the same
//! schema): keeps `spec.replicas` pods running.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The desired state of a PodSet.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "app.example.com",
    version = "v1beta1",
    kind = "PodSet",
    plural = "podsets",
    shortname = "ps",
    namespaced,
    status = "PodSetStatus",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.availableReplicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn = r#"{"name":"Desired","type":"integer","description":"Pods wanted","jsonPath":".spec.replicas"}"#,
    printcolumn = r#"{"name":"Ready","type":"integer","description":"Ready pods","jsonPath":".status.readyReplicas"}"#,
    printcolumn = r#"{"name":"Available","type":"integer","description":"Pending or Running pods","jsonPath":".status.availableReplicas"}"#,
    printcolumn = r#"{"name":"Status","type":"string","description":"Ready, or why not: the Ready condition's reason","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    doc = "A PodSet keeps a number of identical pods running, like a small ReplicaSet."
)]
#[serde(rename_all = "camelCase")]
pub struct PodSetSpec {
    /// How many pods to keep Pending or Running: 1 to 10, default 1.
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 1, max = 10))]
    pub replicas: i32,

    /// Optional template for the pods. Without it, each pod runs busybox `sleep 3600` under a
    /// restricted security context. Changes apply to pods created afterwards only, as with a
    /// ReplicaSet; the labels `app` and `version` are enforced. As in a ReplicaSet's template,
    /// restartPolicy must be Always (or unset) and activeDeadlineSeconds unset: pods that end
    /// by themselves would be replaced without end.
    // Boxed: a PodTemplateSpec is kilobytes wide even when empty, and every cached PodSet
    // would carry that width, set or not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<Box<PodTemplateSpec>>,
}

fn default_replicas() -> i32 {
    1
}

/// The observed state of a PodSet.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodSetStatus {
    /// Names of the available (Pending or Running, not terminating) pods, sorted.
    #[serde(default)]
    pub pod_names: Vec<String>,

    /// How many pods are available (Pending or Running, not terminating).
    #[serde(default)]
    pub available_replicas: i32,

    /// How many of the available pods are Ready (their Ready condition True), as a
    /// ReplicaSet's `readyReplicas`; left out when 0, as a ReplicaSet's is, so that a status
    /// written before the field existed reads and compares the same.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ready_replicas: i32,

    /// The `metadata.generation` this status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Label selector of the pods, for the scale subresource (HorizontalPodAutoscaler).
    // Optional rather than defaulted to "": with the default in the schema, converged
    // PodSets drew writes while idle (tests/podset.rs converged_podsets_cost_no_writes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,

    /// `Available` (every wanted pod is available), `ReplicaFailure` (the last pod create or
    /// delete failed, with the API server's message), `PodsHealthy` (once a pod was in
    /// trouble); and kstatus's `Ready` (every wanted pod Running and Ready),
    /// `Reconciling` (getting there) and `Stalled` (it cannot, and why), as Flux, Argo CD and
    /// `kubectl wait --for=condition=Ready` read them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

/// What `kubectl` prints for a request at v1alpha1: where to move.
pub const DEPRECATION_WARNING: &str = "app.example.com/v1alpha1 PodSet is deprecated; use \
    app.example.com/v1beta1 PodSet, the same fields (docs/versioning.md)";

/// The rules a PodSet's template is held to, as a ReplicaSet's is (`ValidatePodTemplateSpecForReplicaSet`):
/// its pods are replaced when they end, so a pod that ends by itself (a deadline, a container
/// that does not restart) would be replaced without end, a new pod every deadline.
pub(super) const TEMPLATE_SPEC_RULES: [(&str, &str); 2] = [
    (
        "!has(self.activeDeadlineSeconds)",
        "activeDeadlineSeconds is not supported in a PodSet's template, as in a ReplicaSet's: \
         its pods would fail at the deadline and be replaced without end",
    ),
    (
        "!has(self.restartPolicy) || self.restartPolicy == 'Always'",
        "a PodSet's pods restart their containers in place: restartPolicy must be Always \
         (or unset), as in a ReplicaSet's template",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crd_keeps_only_the_template_metadata_pods_take() {
        let crd = serde_json::to_value(crate::api::podset_crd()).unwrap();
        let metadata = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
            ["properties"]["template"]["properties"]["metadata"]["properties"];
        let fields: Vec<&String> = metadata.as_object().unwrap().keys().collect();
        assert_eq!(fields, crate::api::template::METADATA);
    }

    /// Every PodSet in the controller's store carries this width, its template set or not.
    #[test]
    fn a_podset_is_narrow_without_a_template() {
        let (podset, template) = (
            std::mem::size_of::<PodSet>(),
            std::mem::size_of::<PodTemplateSpec>(),
        );
        assert!(podset <= 512, "PodSet {podset} bytes");
        assert!(
            template > 1024,
            "PodTemplateSpec {template} bytes: boxing it saves less"
        );
    }
}
