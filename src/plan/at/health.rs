//! An At's health as kstatus reads it, summarised from its own conditions: Ready once its
//! command ran and succeeded; Reconciling while it waits for its time or runs; Stalled when
//! it cannot start (a schedule or zone that cannot be read, a name taken, a refused create, a
//! pod that cannot start) or ended failed. A Job reads the same: in progress until it
//! completes, failed when it failed.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Resource;

use super::{
    CONDITION_COMPLETED, CONDITION_SCHEDULED, REASON_SCHEDULED, REASON_STARTED, REASON_STARTING,
    REASON_SUCCEEDED,
};
use crate::api::{At, AtPhase, AtStatus};
use crate::conditions;
use crate::plan::kstatus::{self, Progress};

/// `status` with kstatus's conditions for it, and the generation it describes.
pub(super) fn summarized(at: &At, mut status: AtStatus, now: Timestamp) -> AtStatus {
    let previous = at.status.as_ref().map(|s| s.conditions.as_slice());
    let generation = at.meta().generation;
    let own = std::mem::take(&mut status.conditions);
    let progress = progress(&status, &own);
    status.conditions = kstatus::summarized(
        own.clone(),
        previous.unwrap_or_default(),
        progress,
        generation,
        now,
    );
    status.observed_generation = generation;
    status
}

fn progress(status: &AtStatus, own: &[Condition]) -> Progress {
    let completed = conditions::find(own, CONDITION_COMPLETED);
    let scheduled = conditions::find(own, CONDITION_SCHEDULED);
    let said = |c: Option<&Condition>, reason: &str| {
        c.map_or((reason.to_string(), String::new()), |c| {
            (c.reason.clone(), c.message.clone())
        })
    };
    match status.phase {
        Some(AtPhase::Done) if status.succeeded == Some(true) => {
            let (_, message) = said(completed, REASON_SUCCEEDED);
            Progress::Ready(REASON_SUCCEEDED.into(), message)
        }
        Some(AtPhase::Done) => {
            let (reason, message) = said(completed, super::REASON_FAILED);
            Progress::Stalled(reason, message)
        }
        Some(AtPhase::Running) => match completed {
            Some(c)
                if c.status == "False"
                    && ![REASON_STARTED, REASON_STARTING].contains(&c.reason.as_str()) =>
            {
                Progress::Stalled(c.reason.clone(), c.message.clone())
            }
            _ => {
                let pod = status.pod_name.as_deref().unwrap_or_default();
                let message = format!("the command is running in pod {pod}");
                Progress::Reconciling("Running".into(), message)
            }
        },
        None | Some(AtPhase::Pending) => match scheduled {
            Some(c) if c.status == "False" => {
                Progress::Stalled(c.reason.clone(), c.message.clone())
            }
            _ => {
                let (_, message) = said(scheduled, REASON_SCHEDULED);
                Progress::Reconciling(REASON_SCHEDULED.into(), message)
            }
        },
    }
}
