//! What the controllers keep of a pod: only what a decision reads, compactly. A cached pod
//! takes 128 bytes; the full object takes several kilobytes.

use std::cmp::Ordering;
use std::num::NonZeroI64;
use std::sync::Arc;

use compact_str::CompactString;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

pub mod intern;
mod trouble;

use crate::api::{AT_COMMAND_CONTAINER, AT_CONTAINER_ANNOTATION, AT_GATE};
use crate::uid::Uid;
pub use trouble::Trouble;
use trouble::trouble;

/// A pod phase, as the API reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    Pending,
    Unknown,
    Running,
    Succeeded,
    Failed,
}

impl Phase {
    fn parse(s: Option<&str>) -> Self {
        match s {
            Some("Running") => Phase::Running,
            Some("Succeeded") => Phase::Succeeded,
            Some("Failed") => Phase::Failed,
            Some("Unknown") => Phase::Unknown,
            _ => Phase::Pending,
        }
    }

    pub fn finished(self) -> bool {
        matches!(self, Phase::Succeeded | Phase::Failed)
    }
}

/// A time to the second, as the API's object timestamps are, in 8 bytes (and as an `Option`,
/// still 8).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Stamp(NonZeroI64);

impl Stamp {
    /// The stored value is the seconds with the sign bit flipped: zero stands for `i64::MIN`
    /// seconds, far outside the times `Timestamp` can hold, so every time has a value.
    const FLIP: i64 = i64::MIN;

    pub fn seconds(self) -> i64 {
        self.0.get() ^ Self::FLIP
    }

    pub fn timestamp(self) -> Timestamp {
        Timestamp::from_second(self.seconds()).unwrap_or_default()
    }
}

impl From<Timestamp> for Stamp {
    fn from(t: Timestamp) -> Self {
        Self(NonZeroI64::new(t.as_second() ^ Self::FLIP).expect("within Timestamp's range"))
    }
}

impl Ord for Stamp {
    fn cmp(&self, other: &Self) -> Ordering {
        self.seconds().cmp(&other.seconds())
    }
}

impl PartialOrd for Stamp {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl std::fmt::Debug for Stamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.timestamp())
    }
}

/// How a pod ended, in its own words (`status.reason`, `status.message`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Ended {
    pub reason: Option<Box<str>>,
    pub message: Option<Box<str>>,
}

/// The controlling ownerReference of a pod. Kind and name are interned.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Owner {
    pub kind: Arc<str>,
    pub name: Arc<str>,
    pub uid: Uid,
}

/// Where a pod is and what controls it: the same for all the pods of an owner, so they share
/// one copy (interned) and each holds a pointer to it, 8 bytes instead of 72.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Home {
    pub namespace: Arc<str>,
    pub owner: Option<Owner>,
}

impl Home {
    /// The shared home of a pod in `namespace` controlled by `owner`.
    pub fn shared(namespace: &str, owner: Option<&OwnerReference>) -> Arc<Home> {
        intern::home(Home {
            namespace: intern::name(namespace),
            owner: owner.map(|r| Owner {
                kind: intern::name(&r.kind),
                name: intern::name(&r.name),
                uid: Uid::from(r.uid.as_str()),
            }),
        })
    }
}

/// The controlling owner a pod names, if any: the cache keeps only pods that name one.
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    let refs = meta.owner_references.as_deref().unwrap_or_default();
    refs.iter().find(|r| r.controller == Some(true))
}

/// The pod's `Ready` condition, if its status has one.
pub fn ready_condition(pod: &Pod) -> Option<&PodCondition> {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_deref());
    conditions?.iter().find(|c| c.type_ == "Ready")
}

/// What the controllers need to know of a pod.
#[derive(Clone, Debug, PartialEq)]
pub struct CachedPod {
    /// Inline up to 24 bytes (a generated name of a PodSet named up to 15 characters).
    pub name: CompactString,
    pub uid: Uid,
    /// Its namespace and controlling owner, shared with the owner's other pods.
    pub home: Arc<Home>,
    pub phase: Phase,
    pub ready: bool,
    /// `metadata.deletionTimestamp` is set.
    pub terminating: bool,
    /// Where the At's scheduling gate ([`AT_GATE`]) is among the pod's gates while it holds
    /// the pod back: an At's pod, until released. Another controller's gate is not the At's:
    /// a pod the At released may still wait on it.
    pub gate: Option<u8>,
    /// The `controller.kubernetes.io/pod-deletion-cost` annotation (0 when absent or invalid).
    pub deletion_cost: i32,
    /// The restart count of the most restarted container, as upstream ranks pods by.
    pub restarts: i32,
    /// When the Ready condition last became true.
    pub ready_since: Option<Stamp>,
    pub created: Option<Stamp>,
    pub node_name: Option<Arc<str>>,
    /// What its status says beyond the phase: rarely anything, so kept out of line (a pod
    /// shares one allocation with its `Arc`'s counts: 128 bytes, one of jemalloc's size
    /// classes; 8 bytes more would take the next, 160).
    pub notes: Option<Box<Notes>>,
}

/// How a pod ended and why it is not getting on, as its status says, and for an At's pod the
/// At generation it was made from and how its command's container ended.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Notes {
    pub ended: Option<Ended>,
    pub trouble: Option<Trouble>,
    pub made_from: Option<i64>,
    /// An At's pod: its command's container (the one [`AT_CONTAINER_ANNOTATION`] names, else
    /// [`AT_COMMAND_CONTAINER`]) has terminated.
    pub command: Option<Exited>,
}

/// How a container ended: its exit code, the kubelet's reason (`Completed`, `Error`,
/// `OOMKilled`, ...), and when, as the kubelet stamped it (`finishedAt`, to the second).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Exited {
    pub code: i32,
    pub reason: Option<Box<str>>,
    pub finished: Option<Stamp>,
}

/// How the command's container of an At's pod ended, if it has: read from that container
/// alone, never from a sidecar or an init container admission added.
fn command_exited(meta: &ObjectMeta, containers: &[ContainerStatus]) -> Option<Exited> {
    controller_of(meta).filter(|r| r.kind == "At")?;
    let name = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(AT_CONTAINER_ANNOTATION))
        .map_or(AT_COMMAND_CONTAINER, String::as_str);
    let ended = containers
        .iter()
        .find(|c| c.name == name)?
        .state
        .as_ref()?
        .terminated
        .as_ref()?;
    Some(Exited {
        code: ended.exit_code,
        reason: ended.reason.as_deref().map(Box::from),
        finished: ended.finished_at.as_ref().map(|t| t.0.into()),
    })
}

/// The pod's notes, if it has any (`containers`: its container statuses).
fn notes(pod: &Pod, containers: &[ContainerStatus]) -> Option<Box<Notes>> {
    let ended = pod
        .status
        .as_ref()
        .filter(|s| s.reason.is_some() || s.message.is_some())
        .map(|s| Ended {
            reason: s.reason.as_deref().map(Box::from),
            message: s.message.as_deref().map(Box::from),
        });
    let made_from = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(crate::api::AT_GENERATION_ANNOTATION))
        .and_then(|g| g.parse().ok());
    let notes = Notes {
        ended,
        trouble: trouble(pod),
        made_from,
        command: command_exited(&pod.metadata, containers),
    };
    (notes != Notes::default()).then(|| Box::new(notes))
}

impl CachedPod {
    pub fn from_pod(pod: &Pod) -> Self {
        let meta = &pod.metadata;
        let status = pod.status.as_ref();
        let ready_condition = ready_condition(pod);
        let container_statuses = status
            .and_then(|s| s.container_statuses.as_deref())
            .unwrap_or_default();
        Self {
            name: CompactString::from(meta.name.as_deref().unwrap_or_default()),
            uid: Uid::from(meta.uid.as_deref().unwrap_or_default()),
            home: Home::shared(
                meta.namespace.as_deref().unwrap_or_default(),
                controller_of(meta),
            ),
            phase: Phase::parse(status.and_then(|s| s.phase.as_deref())),
            ready: ready_condition.is_some_and(|c| c.status == "True"),
            ready_since: ready_condition
                .filter(|c| c.status == "True")
                .and_then(|c| c.last_transition_time.as_ref())
                .map(|t| t.0.into()),
            node_name: pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .map(intern::name),
            terminating: meta.deletion_timestamp.is_some(),
            gate: pod
                .spec
                .as_ref()
                .and_then(|s| s.scheduling_gates.as_ref())
                .and_then(|gates| gates.iter().position(|g| g.name == AT_GATE))
                .and_then(|i| u8::try_from(i).ok()),
            created: meta.creation_timestamp.as_ref().map(|t| t.0.into()),
            deletion_cost: meta
                .annotations
                .as_ref()
                .and_then(|a| a.get("controller.kubernetes.io/pod-deletion-cost"))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            restarts: container_statuses
                .iter()
                .map(|c| c.restart_count)
                .max()
                .unwrap_or(0),
            notes: notes(pod, container_statuses),
        }
    }

    pub fn namespace(&self) -> &Arc<str> {
        &self.home.namespace
    }

    pub fn owner(&self) -> Option<&Owner> {
        self.home.owner.as_ref()
    }

    pub fn ended(&self) -> Option<&Ended> {
        self.notes.as_ref()?.ended.as_ref()
    }

    pub fn trouble(&self) -> Option<&Trouble> {
        self.notes.as_ref()?.trouble.as_ref()
    }

    /// Whether the At's gate still holds the pod: it has not started, and never did.
    pub fn gated(&self) -> bool {
        self.gate.is_some()
    }

    /// The generation of the At this pod was made from, if it is an At's pod that says.
    pub fn made_from(&self) -> Option<i64> {
        self.notes.as_ref()?.made_from
    }

    /// How an At's command ended, if it has.
    pub fn command(&self) -> Option<&Exited> {
        self.notes.as_ref()?.command.as_ref()
    }

    /// A short name of where the pod is, for metrics.
    pub fn state(&self) -> &'static str {
        match (self.terminating, self.phase) {
            (true, _) => "terminating",
            (_, Phase::Pending) => "pending",
            (_, Phase::Running) => "running",
            (_, Phase::Succeeded) => "succeeded",
            (_, Phase::Failed) => "failed",
            (_, Phase::Unknown) => "unknown",
        }
    }

    /// Counted as available: not terminating and not finished, as upstream's
    /// `IsPodActive`. A pod in phase Unknown (its node stopped reporting) may still run:
    /// replacing it at once would churn pods on every node hiccup.
    pub fn is_active(&self) -> bool {
        !self.terminating && !self.phase.finished()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size the module's doc promises; a field added carelessly shows here.
    #[test]
    fn a_cached_pod_stays_small() {
        let size = std::mem::size_of::<CachedPod>();
        assert!(size <= 112, "{size} bytes");
    }

    #[test]
    fn stamps_keep_the_seconds_and_their_order() {
        let times = [
            "-000001-01-01T00:00:00Z",
            "1969-12-31T23:59:59Z",
            "1970-01-01T00:00:00Z",
        ];
        let times = times.map(|t| t.parse::<Timestamp>().unwrap());
        let stamps = times.map(Stamp::from);
        for (t, s) in times.iter().zip(stamps) {
            assert_eq!(s.timestamp(), *t);
        }
        assert!(stamps.is_sorted(), "{stamps:?}");
        assert_eq!(std::mem::size_of::<Option<Stamp>>(), 8);
    }
}
