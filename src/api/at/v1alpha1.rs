//! `At` at `cnat.programming-kubernetes.info/v1alpha1`: the book's version, a shell command
//! and an image. Still served, deprecated: the API server converts it to and from the hub,
//! [`super::At`] (v1beta1), through the operator's conversion webhook
//! ([`crate::api::conversion`]), which keeps what this version cannot express in an
//! annotation. The operator itself reads and writes only the hub.

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::{AtStatus, SCHEDULE_MESSAGE, SPEC_FROZEN_MESSAGE, SPEC_FROZEN_RULE, UTC_SCHEDULE_RULE};

/// What `kubectl` prints for a request at this version: where to move.
pub const DEPRECATION_WARNING: &str = "cnat.programming-kubernetes.info/v1alpha1 At is \
    deprecated; use cnat.programming-kubernetes.info/v1beta1 At (docs/versioning.md)";

/// When and what to run.
#[derive(CustomResource, KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq)]
#[kube(
    group = "cnat.programming-kubernetes.info",
    version = "v1alpha1",
    kind = "At",
    plural = "ats",
    namespaced,
    status = "AtStatus",
    printcolumn = r#"{"name":"Schedule","type":"string","description":"When the command runs (UTC)","jsonPath":".spec.schedule"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    doc = "An At runs a command once, in a pod, at a scheduled UTC time.",
    validation = Rule::new(SPEC_FROZEN_RULE)
        .message(SPEC_FROZEN_MESSAGE)
        .field_path(".spec")
        .reason(Reason::FieldValueForbidden)
)]
#[serde(rename_all = "camelCase")]
pub struct AtSpec {
    /// When to run the command, in UTC: `YYYY-MM-DDThh:mm:ssZ`, for example
    /// `2019-04-12T10:12:00Z`. A time in the past runs at once.
    #[schemars(
        regex(pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$"),
        length(max = 20)
    )]
    #[x_kube(validation = Rule::new(UTC_SCHEDULE_RULE).message(SCHEDULE_MESSAGE))]
    pub schedule: String,

    /// The command to run, through `sh -c` in a busybox container.
    #[schemars(length(min = 1))]
    pub command: String,

    /// The image the command runs in; it needs `sh`. Default `busybox:1.37.0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    pub image: Option<String>,

    /// How long, once the At started, its command may take to start (its pod scheduled, its
    /// image pulled). Past it, the pod is deleted and the At ends DONE, failed,
    /// DeadlineExceeded. Unset: it waits for good, saying why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 31536000))]
    pub start_deadline_seconds: Option<i64>,
}
