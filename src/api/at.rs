//! `At` (cnat.programming-kubernetes.info/v1alpha1): runs a command once, at a given time.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// When and what to run.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
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
    doc = "An At runs a command once, in a pod, at a scheduled UTC time."
)]
#[serde(rename_all = "camelCase")]
pub struct AtSpec {
    /// When to run the command, in UTC: `YYYY-MM-DDThh:mm:ssZ`, for example
    /// `2019-04-12T10:12:00Z`. A time in the past runs at once.
    #[schemars(regex(pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$"))]
    pub schedule: String,

    /// The command to run, through `sh -c` in a busybox container.
    #[schemars(length(min = 1))]
    pub command: String,
}

/// Where an At is in its life: PENDING until the schedule is due, RUNNING while its pod
/// runs, DONE (final) once the pod finished or could not run.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum AtPhase {
    Pending,
    Running,
    Done,
}

/// The observed state of an At.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AtStatus {
    /// PENDING, RUNNING or DONE.
    // The schema of the enum itself: `null` inside an enum is refused by kubectl's validation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "AtPhase")]
    pub phase: Option<AtPhase>,

    /// The pod that runs (or ran) the command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_name: Option<String>,

    /// When the pod was started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,

    /// When the At became DONE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,

    /// Whether the command succeeded; set once DONE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub succeeded: Option<bool>,

    /// `Scheduled` (the schedule is valid and when it is due) and `Completed` (how the run
    /// ended), each with a reason and message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
