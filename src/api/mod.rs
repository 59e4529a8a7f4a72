//! The custom resources this operator serves, and their CRD manifests.

pub mod at;
mod bounds;
pub mod decoded;
pub mod podset;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps,
};
use kube::CustomResourceExt;

pub use at::{At, AtPhase, AtSpec, AtStatus};
pub use podset::{PodSet, PodSetSpec, PodSetStatus};

/// Label on every pod this operator creates; its pod watch selects on it, so the
/// operator caches only its own pods.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY_VALUE: &str = "podset-operator";

/// Annotation on an At's pod: the At's `metadata.generation` it was made from, which says
/// whether a gated pod holds the At's current spec.
pub const AT_GENERATION_ANNOTATION: &str = "cnat.programming-kubernetes.info/generation";

/// The image of the pods the operator makes when told none: busybox, pinned to a release
/// (an untagged image is whatever `latest` is on the day a node pulls it).
pub const BUSYBOX_IMAGE: &str = "busybox:1.37.0";

/// The container of an At's pod that runs the command. Admission may add others (a sidecar,
/// as a container or an init container): the At's verdict is this one's alone.
pub const AT_COMMAND_CONTAINER: &str = "busybox";

/// Longest name a PodSet or At may have: the name is also the value of its pods' `app`
/// label, and a label value has at most 63 characters.
pub const MAX_NAME_LENGTH: i64 = 63;

/// The CRD of `K`, refusing names its pods' `app` label could not carry (without this the
/// API server would accept a PodSet whose pods can never be created) and numbers its Rust
/// type cannot hold ([`bounds`]).
pub fn crd<K: CustomResourceExt>() -> CustomResourceDefinition {
    let mut crd = K::crd();
    let name = JSONSchemaProps {
        type_: Some("string".into()),
        max_length: Some(MAX_NAME_LENGTH),
        ..Default::default()
    };
    let metadata = JSONSchemaProps {
        type_: Some("object".into()),
        properties: Some([("name".to_string(), name)].into()),
        ..Default::default()
    };
    for version in &mut crd.spec.versions {
        if let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            bounds::bound(schema);
            podset::prune_template_metadata(schema);
            podset::refuse_self_ending_templates(schema);
            schema
                .properties
                .get_or_insert_default()
                .insert("metadata".into(), metadata.clone());
        }
    }
    crd
}

/// Every CRD, as one multi-document YAML stream (`podset-operator crds`).
pub fn crds_yaml() -> String {
    [crd::<PodSet>(), crd::<At>()]
        .iter()
        .map(|crd| serde_yaml::to_string(crd).expect("CRDs serialize"))
        .collect::<Vec<_>>()
        .join("---\n")
}
