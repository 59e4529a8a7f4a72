//! `At` (cnat.programming-kubernetes.info/v1beta1, the hub and storage version): runs a pod's
//! command once, at a given time. The book's v1alpha1 ([`v1alpha1`]) is still served and
//! converted to and from this one ([`crate::api::conversion`]).

pub mod v1alpha1;

use jiff::tz::{TimeZone, TimeZoneDatabase};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps;
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

/// The latest schedule, as a literal the rules and the message are made of.
macro_rules! latest_schedule {
    () => {
        "9999-12-30T22:00:00Z"
    };
}

/// A v1alpha1 `spec.schedule` is a real UTC time, not only the right shape: the pattern alone
/// admits February 30th or 25 o'clock. (Kubernetes' CEL format library, from 1.31.) And one
/// the operator can hold: its clock ends at [`LATEST_SCHEDULE`] (jiff's `Timestamp::MAX`, to
/// the second); the pattern fixes the shape, so the strings compare as the times do.
pub const UTC_SCHEDULE_RULE: &str = concat!(
    "!format.named('datetime').value().validate(self).hasValue() && self <= '",
    latest_schedule!(),
    "'"
);
/// The same for v1beta1, whose schedule may leave out the `Z` (it is then read in the At's
/// time zone): the date and time must exist on a calendar, whatever the zone.
pub const SCHEDULE_RULE: &str = concat!(
    "!format.named('datetime').value().validate(self.endsWith('Z') ? self : self + 'Z')",
    ".hasValue() && self <= '",
    latest_schedule!(),
    "'"
);
pub const LATEST_SCHEDULE: &str = latest_schedule!();
pub const SCHEDULE_MESSAGE: &str = concat!(
    "must be a valid time, YYYY-MM-DDThh:mm:ssZ (UTC), for example 2019-04-12T10:12:00Z, no \
    later than ",
    latest_schedule!()
);

/// A schedule that names UTC (`Z`) and a time zone besides is refused: one of them is a
/// mistake, and the operator cannot tell which (CronJob refuses `CRON_TZ=` beside
/// `timeZone` likewise).
pub const ZONE_RULE: &str = "!has(self.timeZone) || !self.schedule.endsWith('Z')";
pub const ZONE_MESSAGE: &str = "a schedule ending in Z is UTC: with timeZone set, write the \
    schedule without the Z (2019-04-12T10:12:00), and it is read in that zone";

/// The command's container must be named when there are several, and exist.
pub const CONTAINER_RULE: &str = "has(self.containerName) ? \
    self.template.spec.containers.exists(c, c.name == self.containerName) : \
    size(self.template.spec.containers) == 1";
pub const CONTAINER_MESSAGE: &str = "containerName must name one of the template's \
    containers, and is required when there is more than one: its exit decides whether the At \
    succeeded";

/// When and what to run.
#[derive(CustomResource, KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq)]
#[kube(
    group = "cnat.programming-kubernetes.info",
    version = "v1beta1",
    kind = "At",
    plural = "ats",
    namespaced,
    status = "AtStatus",
    printcolumn = r#"{"name":"Schedule","type":"string","description":"When the command runs","jsonPath":".spec.schedule"}"#,
    printcolumn = r#"{"name":"Zone","type":"string","description":"The time zone a schedule without Z is read in (UTC if unset)","jsonPath":".spec.timeZone","priority":1}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Status","type":"string","description":"Ready once its command ran and succeeded, or why not: the Ready condition's reason","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    doc = "An At runs a pod's command once, at a scheduled time.",
    validation = Rule::new(SPEC_FROZEN_RULE)
        .message(SPEC_FROZEN_MESSAGE)
        .field_path(".spec")
        .reason(Reason::FieldValueForbidden)
)]
#[x_kube(validation = Rule::new(ZONE_RULE).message(ZONE_MESSAGE).field_path(".timeZone"))]
#[x_kube(validation = Rule::new(CONTAINER_RULE).message(CONTAINER_MESSAGE).field_path(".containerName"))]
#[serde(rename_all = "camelCase")]
pub struct AtSpec {
    /// When to run the command: `YYYY-MM-DDThh:mm:ss`, read in `timeZone` (UTC if unset), or
    /// with a trailing `Z` in UTC, for example `2019-04-12T10:12:00Z`. A time in the past
    /// runs at once. A local time that a daylight-saving change skips runs as much later as
    /// the clocks moved; one that happens twice runs at the first.
    #[schemars(
        regex(pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z?$"),
        length(max = 20)
    )]
    #[x_kube(validation = Rule::new(SCHEDULE_RULE).message(SCHEDULE_MESSAGE))]
    pub schedule: String,

    /// The IANA time zone the schedule is read in, as a CronJob's `timeZone`: for example
    /// `Europe/Berlin`. Unset: UTC. The zone database is the operator's own (built in), so
    /// every replica reads a schedule the same way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        regex(pattern = r"^[A-Za-z][A-Za-z0-9_+\-]*(/[A-Za-z0-9_+\-]+)*$"),
        length(max = 64)
    )]
    pub time_zone: Option<String>,

    /// The pod that runs the command, as a Job's template: created once the schedule is due,
    /// with `restartPolicy: Never`. The operator adds its labels, its owner reference and a
    /// scheduling gate that holds the pod until the At has recorded it; without a
    /// securityContext, the pod and each container get the restricted profile, and without
    /// `automountServiceAccountToken` no token is mounted. A container without an image runs
    /// `busybox:1.37.0`.
    pub template: Box<PodTemplateSpec>,

    /// The container whose exit decides whether the At succeeded: required when the template
    /// has more than one. Containers admission adds (a sidecar) never decide it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub container_name: Option<String>,

    /// How long, once the At started, its command may take to start (its pod scheduled, its
    /// image pulled). Past it, the pod is deleted and the At ends DONE, failed,
    /// DeadlineExceeded. Unset: it waits for good, saying why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 31536000))]
    pub start_deadline_seconds: Option<i64>,

    /// How long, once the At started, its command may run, as a Job's
    /// `activeDeadlineSeconds`: past it, the pod is deleted and the At ends DONE, failed,
    /// DeadlineExceeded. Unset: it runs until it ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 31536000))]
    pub active_deadline_seconds: Option<i64>,

    /// How long after it is DONE the At is deleted, and its pod with it, as a Job's
    /// `ttlSecondsAfterFinished`. Unset: it stays until someone deletes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 31536000))]
    pub ttl_seconds_after_finished: Option<i32>,
}

impl AtSpec {
    /// What the book's v1alpha1 At says, in this version: `command` run through `sh -c` in
    /// one container named `busybox`, in the operator's default image.
    pub fn shell(schedule: impl Into<String>, command: impl Into<String>) -> Self {
        let container = Container {
            name: super::AT_COMMAND_CONTAINER.into(),
            command: Some(vec!["sh".into(), "-c".into(), command.into()]),
            ..Default::default()
        };
        AtSpec {
            schedule: schedule.into(),
            time_zone: None,
            template: Box::new(PodTemplateSpec {
                metadata: None,
                spec: Some(PodSpec {
                    containers: vec![container],
                    ..Default::default()
                }),
            }),
            container_name: None,
            start_deadline_seconds: None,
            active_deadline_seconds: None,
            ttl_seconds_after_finished: None,
        }
    }

    /// The container whose exit decides the At: the one `containerName` names, else the
    /// template's first (its only one, as the CRD holds it).
    pub fn command_container(&self) -> Option<&Container> {
        let containers = &self.template.spec.as_ref()?.containers;
        match &self.container_name {
            Some(name) => containers.iter().find(|c| c.name == *name),
            None => containers.first(),
        }
    }

    /// The line the command container runs through `sh -c`, if that is what it runs (an At
    /// written at v1alpha1 always does).
    pub fn shell_line(&self) -> Option<&str> {
        match self.command_container()?.command.as_deref()? {
            [sh, dash_c, line] if sh == "sh" && dash_c == "-c" => Some(line),
            _ => None,
        }
    }

    /// The same, to change: what a test or a fixture edits.
    pub fn command_container_mut(&mut self) -> Option<&mut Container> {
        let containers = &mut self.template.spec.as_mut()?.containers;
        match &self.container_name {
            Some(name) => containers.iter_mut().find(|c| c.name == *name),
            None => containers.first_mut(),
        }
    }
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

/// The observed state of an At (the same in every version).
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

    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// `Scheduled` (the schedule is valid and when it is due) and `Completed` (how the run
    /// ended), each with a reason and message; and kstatus's `Ready` (the command ran and
    /// succeeded), `Reconciling` (waiting for its time, or running) and `Stalled` (it cannot
    /// go on, or failed), as Flux, Argo CD and `kubectl wait --for=condition=Ready` read them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// The rules an At's template is held to. Its command runs at most once: a container that
/// restarts in place would run it again (`restartPolicy` other than Never); and the pod is
/// held by a scheduling gate until the At records it, which a pod bound to a node by
/// `nodeName` skips (the API server refuses such a pod with a gate, so it would never run).
pub(super) const TEMPLATE_SPEC_RULES: [(&str, &str); 2] = [
    (
        "!has(self.restartPolicy) || self.restartPolicy == 'Never'",
        "an At runs its command at most once: restartPolicy must be Never (or unset); a \
         container restarted in place would run it again",
    ),
    (
        "!has(self.nodeName)",
        "an At's pod waits behind a scheduling gate until the At has recorded it, and nodeName \
         skips the scheduler and its gates: choose the node with nodeSelector or affinity",
    ),
];

/// An At's template has a pod spec: there is no command without one.
pub(super) fn require_template_spec(schema: &mut JSONSchemaProps) {
    if let Some(template) = schema
        .properties
        .as_mut()
        .and_then(|p| p.get_mut("spec"))
        .and_then(|s| s.properties.as_mut())
        .and_then(|p| p.get_mut("template"))
    {
        template.required = Some(vec!["spec".into()]);
    }
}

/// The zone database schedules are read in: the one built into the binary, so that every
/// replica, and the conversion webhook, reads a time the same way whatever its host holds.
static ZONES: std::sync::LazyLock<TimeZoneDatabase> =
    std::sync::LazyLock::new(TimeZoneDatabase::bundled);

/// The IANA time zone `name` (`Europe/Berlin`), or why there is none.
pub fn time_zone(name: &str) -> Result<TimeZone, String> {
    ZONES
        .get(name)
        .map_err(|_| format!("unknown time zone {name:?}: use an IANA name, such as Europe/Berlin"))
}
