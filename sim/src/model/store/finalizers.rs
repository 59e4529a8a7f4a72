//! Deletion that waits for finalizers, as the API server's generic registry does it for the
//! objects that are not pods (`updateForGracefulDeletionAndFinalizers`, `markAsDeleting`): a
//! delete asking for foreground or orphan propagation adds the garbage collector's finalizer;
//! an object with any finalizer is then marked (`deletionTimestamp`, no grace, a new
//! generation) and stays until an update takes its last finalizer off.

use jiff::Timestamp;
use serde_json::Value;

use super::seconds;
use crate::model::objects::terminating;

/// The garbage collector's finalizer for a foreground deletion: the object goes once its
/// blocking dependents have.
pub const FOREGROUND: &str = "foregroundDeletion";
/// The garbage collector's finalizer for an orphaning deletion: the object goes once its
/// dependents no longer name it.
pub const ORPHAN: &str = "orphan";

/// What a delete asks of the object's dependents (`propagationPolicy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Propagation {
    /// The object goes now, its dependents after it (a custom resource's default).
    #[default]
    Background,
    Foreground,
    Orphan,
}

impl Propagation {
    /// The `propagationPolicy` of a DeleteOptions body.
    pub fn of(options: &Value) -> Self {
        match options["propagationPolicy"].as_str() {
            Some("Foreground") => Self::Foreground,
            Some("Orphan") => Self::Orphan,
            _ => Self::Background,
        }
    }

    fn finalizer(self) -> Option<&'static str> {
        match self {
            Self::Background => None,
            Self::Foreground => Some(FOREGROUND),
            Self::Orphan => Some(ORPHAN),
        }
    }
}

/// The finalizers of `object`.
pub fn finalizers(object: &Value) -> Vec<&str> {
    object["metadata"]["finalizers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// Whether `object` is marked for deletion and waits for no finalizer: it goes now.
pub fn finalized(object: &Value) -> bool {
    terminating(object) && finalizers(object).is_empty()
}

/// `object` as a delete with `propagation` leaves it, if it must wait for finalizers (else
/// it goes now); unchanged if it was marked already and the delete adds no finalizer.
pub(super) fn mark(object: &Value, propagation: Propagation, now: Timestamp) -> Option<Value> {
    let mut names: Vec<Value> = finalizers(object).into_iter().map(Value::from).collect();
    if let Some(f) = propagation.finalizer()
        && !names.iter().any(|n| n == f)
    {
        names.push(f.into());
    }
    if names.is_empty() {
        return None;
    }
    let mut marked = object.clone();
    let meta = &mut marked["metadata"];
    meta["finalizers"] = names.into();
    if meta["deletionTimestamp"].is_null() {
        meta["deletionTimestamp"] = seconds(now).into();
        meta["deletionGracePeriodSeconds"] = 0.into();
        if let Some(generation) = meta["generation"].as_i64() {
            meta["generation"] = (generation + 1).into();
        }
    }
    Some(marked)
}
