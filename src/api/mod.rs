//! The custom resources this operator serves, and their CRD manifests.

pub mod at;
mod bounds;
pub mod conversion;
pub mod decoded;
pub mod podset;
mod template;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition, CustomResourceDefinitionVersion,
    JSONSchemaProps, ServiceReference, WebhookClientConfig, WebhookConversion,
};
use kube::CustomResourceExt;
use kube::core::crd::merge_crds;

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

/// The scheduling gate an At's pod is created with, and released from once the At has
/// recorded it: until then no node may run it.
pub const AT_GATE: &str = "cnat.programming-kubernetes.info/recorded";

/// Annotation on an At's pod: the container whose exit decides the At's verdict (its
/// `spec.containerName`, or its template's only container). A pod without it (from an
/// operator before v1beta1) ran its command in [`AT_COMMAND_CONTAINER`].
pub const AT_CONTAINER_ANNOTATION: &str = "cnat.programming-kubernetes.info/container";

/// Longest name a PodSet or At may have: the name is also the value of its pods' `app`
/// label, and a label value has at most 63 characters.
pub const MAX_NAME_LENGTH: i64 = 63;

/// The version every object is stored at and the operator reads: the hub that the other
/// versions are converted through.
pub const STORAGE_VERSION: &str = "v1beta1";
/// The version the book and the seeds wrote, still served, deprecated.
pub const DEPRECATED_VERSION: &str = "v1alpha1";

/// The Service in front of every operator replica's conversion webhook, as the committed
/// manifests name it; the operator points its CRD at its own Service when it runs elsewhere.
pub const WEBHOOK_SERVICE: (&str, &str) =
    ("podset-operator-system", "podset-operator-webhook-service");
/// The path the conversion webhook answers on.
pub const CONVERT_PATH: &str = "/convert";

/// The PodSet CRD: v1beta1 stored, v1alpha1 served deprecated with the same schema, so the
/// API server converts between them itself (strategy `None`: only `apiVersion` changes) and
/// no PodSet read ever waits on a webhook.
pub fn podset_crd() -> CustomResourceDefinition {
    let mut crd = shaped::<PodSet>();
    let mut deprecated = crd.spec.versions[0].clone();
    deprecated.name = DEPRECATED_VERSION.into();
    deprecated.storage = false;
    deprecate(&mut deprecated, podset::DEPRECATION_WARNING);
    // The template's field docs once, at v1beta1: the CRD is half as large (a server-side
    // apply's managed fields nearly double it, and etcd takes 1.5 MiB an object).
    if let Some(schema) = deprecated
        .schema
        .as_mut()
        .and_then(|s| s.open_api_v3_schema.as_mut())
        .and_then(|s| template::field_of_spec(s, "template"))
    {
        template::undocumented(schema);
    }
    crd.spec.versions.push(deprecated);
    crd
}

/// The At CRD: v1beta1 stored, v1alpha1 served deprecated, converted by the operator's
/// webhook ([`conversion`]) behind [`WEBHOOK_SERVICE`]. The `caBundle` is the operator's to
/// write (or cert-manager's CA injector's): empty here.
pub fn at_crd() -> CustomResourceDefinition {
    let versions = vec![shaped::<at::v1alpha1::At>(), shaped::<At>()];
    let mut crd = merge_crds(versions, STORAGE_VERSION).expect("the At versions merge");
    for version in &mut crd.spec.versions {
        if version.name == DEPRECATED_VERSION {
            deprecate(version, at::v1alpha1::DEPRECATION_WARNING);
        }
        if let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            at::require_template_spec(schema);
        }
    }
    let (namespace, name) = WEBHOOK_SERVICE;
    crd.spec.conversion = Some(CustomResourceConversion {
        strategy: "Webhook".into(),
        webhook: Some(WebhookConversion {
            conversion_review_versions: vec!["v1".into()],
            client_config: Some(WebhookClientConfig {
                service: Some(ServiceReference {
                    namespace: namespace.into(),
                    name: name.into(),
                    path: Some(CONVERT_PATH.into()),
                    port: Some(443),
                }),
                ..Default::default()
            }),
        }),
    });
    crd
}

fn deprecate(version: &mut CustomResourceDefinitionVersion, warning: &str) {
    version.deprecated = Some(true);
    version.deprecation_warning = Some(warning.into());
}

/// The CRD of `K` (one version), refusing names its pods' `app` label could not carry
/// (without this the API server would accept a PodSet whose pods can never be created) and
/// numbers its Rust type cannot hold ([`bounds`]), its template held to its kind's rules.
fn shaped<K: CustomResourceExt>() -> CustomResourceDefinition {
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
    let template_rules = if crd.spec.names.kind == "At" {
        at::TEMPLATE_SPEC_RULES.as_slice()
    } else {
        podset::TEMPLATE_SPEC_RULES.as_slice()
    };
    for version in &mut crd.spec.versions {
        if let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            bounds::bound(schema);
            template::prune_metadata(schema);
            template::hold_to(schema, template_rules);
            schema
                .properties
                .get_or_insert_default()
                .insert("metadata".into(), metadata.clone());
        }
    }
    crd
}

/// Both CRDs.
pub fn crds() -> [CustomResourceDefinition; 2] {
    [podset_crd(), at_crd()]
}

/// Every CRD, as one multi-document YAML stream (`podset-operator crds`).
pub fn crds_yaml() -> String {
    crds()
        .iter()
        .map(|crd| serde_yaml::to_string(crd).expect("CRDs serialize"))
        .collect::<Vec<_>>()
        .join("---\n")
}
