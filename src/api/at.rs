//! `At` (cnat.programming-kubernetes.info/v1alpha1): runs a command once, at a given time.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API server's own refusal of a spec change once the At has left PENDING: the change
/// could no longer take effect (the command has run, or is running), and silently ignoring
/// it would mislead. The operator reads the spec only while PENDING.
pub const SPEC_FROZEN_RULE: &str = "!has(oldSelf.status) || !has(oldSelf.status.phase) \
    || oldSelf.status.phase == 'PENDING' || self.spec == oldSelf.spec";
pub const SPEC_FROZEN_MESSAGE: &str = "spec cannot change once the At has left PENDING: its \
    command has already run or is running; create a new At to run it again";

/// The latest schedule, as a literal the rule and the message are made of.
macro_rules! latest_schedule {
    () => {
        "9999-12-30T22:00:00Z"
    };
}

/// `spec.schedule` is a real time, not only the right shape: the pattern alone admits
/// February 30th or 25 o'clock. (Kubernetes' CEL format library, from 1.31.) And one the
/// operator can hold: its clock ends at [`LATEST_SCHEDULE`] (jiff's `Timestamp::MAX`, to the
/// second); the pattern fixes the shape, so the strings compare as the times do.
pub const SCHEDULE_RULE: &str = concat!(
    "!format.named('datetime').value().validate(self).hasValue() && self <= '",
    latest_schedule!(),
    "'"
);
pub const LATEST_SCHEDULE: &str = latest_schedule!();
pub const SCHEDULE_MESSAGE: &str = concat!(
    "must be a valid UTC time, YYYY-MM-DDThh:mm:ssZ, for example 2019-04-12T10:12:00Z, no \
    later than ",
    latest_schedule!()
);

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
    #[x_kube(validation = Rule::new(SCHEDULE_RULE).message(SCHEDULE_MESSAGE))]
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

    /// The UID of the one pod that may run the command. The pod is created unable to start
    /// (a scheduling gate) and released only once its UID is recorded here: no other pod
    /// ever runs the command.
    #[serde(default, rename = "podUID", skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,

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
