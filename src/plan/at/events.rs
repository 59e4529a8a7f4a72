//! The events that tell an At's story: one per condition that appeared or changed, a
//! Warning where a user has to act or know that something went wrong.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::runtime::events::EventType;

use super::{
    CONDITION_COMPLETED, CONDITION_SCHEDULED, REASON_DEADLINE_EXCEEDED, REASON_FAILED,
    REASON_FAILED_CREATE, REASON_INVALID_SCHEDULE, REASON_POD_NAME_TAKEN, REASON_POD_VANISHED,
    REASON_SPEC_CHANGE_IGNORED, REASON_STARTED, REASON_STARTING, REASON_UNKNOWN_TIME_ZONE,
};
use crate::api::AtStatus;
use crate::conditions;
use crate::plan::kstatus;

/// Condition reasons a user has to act on or know went wrong: their events are Warnings.
const WARNING_REASONS: [&str; 8] = [
    REASON_DEADLINE_EXCEEDED,
    REASON_INVALID_SCHEDULE,
    REASON_UNKNOWN_TIME_ZONE,
    REASON_POD_NAME_TAKEN,
    REASON_FAILED_CREATE,
    REASON_SPEC_CHANGE_IGNORED,
    REASON_FAILED,
    REASON_POD_VANISHED,
];

/// Whether a condition tells of something a user has to act on or know went wrong: its event
/// is a Warning.
fn warns(c: &Condition) -> bool {
    let troubled_run = c.type_ == CONDITION_COMPLETED
        && c.status == "False"
        && ![REASON_STARTING, REASON_STARTED].contains(&c.reason.as_str());
    troubled_run || WARNING_REASONS.contains(&c.reason.as_str())
}

/// An event to publish.
#[derive(Clone, Debug, PartialEq)]
pub struct StatusEvent {
    pub type_: EventType,
    pub reason: String,
    pub action: &'static str,
    pub note: String,
}

/// One event per condition of the At's own (not kstatus's, which repeat them) that appeared
/// or changed its status or reason from `old` to `new`: the conditions follow the phases, so `kubectl describe at` tells the whole story,
/// and recomputing an unchanged status publishes nothing.
pub fn status_events(old: Option<&AtStatus>, new: &AtStatus) -> Vec<StatusEvent> {
    let before = old.map(|s| s.conditions.as_slice()).unwrap_or_default();
    new.conditions
        .iter()
        .filter(|c| !kstatus::TYPES.contains(&c.type_.as_str()))
        .filter(|c| {
            !conditions::find(before, &c.type_)
                .is_some_and(|b| b.status == c.status && b.reason == c.reason)
        })
        .map(|c| StatusEvent {
            type_: if warns(c) {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: c.reason.clone(),
            action: if c.type_ == CONDITION_SCHEDULED {
                "Schedule"
            } else {
                "Run"
            },
            note: c.message.clone(),
        })
        .collect()
}
