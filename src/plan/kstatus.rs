//! kstatus's conditions (sigs.k8s.io/cli-utils), the way GitOps tools (Flux, Argo CD) and
//! `kubectl wait --for=condition=Ready` read an object's health: `Ready` True once the object
//! has become what its spec asks, False otherwise; `Reconciling` True while it is getting
//! there; `Stalled` True when it cannot, and why. The last two are "abnormal-true": present
//! only while true. They summarise the kind's own conditions, which say more.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::conditions::{self, Desired};

pub const CONDITION_READY: &str = "Ready";
pub const CONDITION_RECONCILING: &str = "Reconciling";
pub const CONDITION_STALLED: &str = "Stalled";

/// The three conditions' types: the kind's own events leave them out (they repeat its own).
pub const TYPES: [&str; 3] = [CONDITION_READY, CONDITION_RECONCILING, CONDITION_STALLED];

/// Where an object stands, with the reason and message its conditions carry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    /// It is what its spec asks.
    Ready(String, String),
    /// It is getting there.
    Reconciling(String, String),
    /// It cannot get there without someone acting, or it ended failed.
    Stalled(String, String),
}

/// `conditions` (the kind's own) followed by kstatus's for `progress`, each keeping its
/// transition time from `previous` while its status holds.
pub fn summarized(
    mut conditions: Vec<Condition>,
    previous: &[Condition],
    progress: Progress,
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    conditions.retain(|c| !TYPES.contains(&c.type_.as_str()));
    let (ready, reason, message, abnormal) = match progress {
        Progress::Ready(reason, message) => (true, reason, message, None),
        Progress::Reconciling(reason, message) => {
            (false, reason, message, Some(CONDITION_RECONCILING))
        }
        Progress::Stalled(reason, message) => (false, reason, message, Some(CONDITION_STALLED)),
    };
    let mut set = |type_, status| {
        let want = Desired {
            type_,
            status,
            reason: &reason,
            message: message.clone(),
        };
        conditions.push(conditions::condition(previous, want, generation, now));
    };
    set(CONDITION_READY, ready);
    if let Some(type_) = abnormal {
        set(type_, true);
    }
    conditions
}

#[cfg(test)]
mod tests {
    use super::*;

    fn types(c: &[Condition]) -> Vec<(&str, &str, &str)> {
        c.iter()
            .map(|c| (c.type_.as_str(), c.status.as_str(), c.reason.as_str()))
            .collect()
    }

    #[test]
    fn ready_alone_or_false_with_the_one_abnormal_condition_that_says_why() {
        let now = Timestamp::UNIX_EPOCH;
        let own = conditions::condition(
            &[],
            Desired {
                type_: "Available",
                status: true,
                reason: "R",
                message: String::new(),
            },
            Some(1),
            now,
        );
        let ready = summarized(
            vec![own.clone()],
            &[],
            Progress::Ready("Done".into(), "m".into()),
            Some(1),
            now,
        );
        assert_eq!(
            types(&ready),
            [("Available", "True", "R"), ("Ready", "True", "Done")]
        );
        let stalled = summarized(
            ready.clone(),
            &ready,
            Progress::Stalled("Quota".into(), "m".into()),
            Some(2),
            now,
        );
        assert_eq!(
            types(&stalled),
            [
                ("Available", "True", "R"),
                ("Ready", "False", "Quota"),
                ("Stalled", "True", "Quota")
            ]
        );
        let going = summarized(
            stalled.clone(),
            &stalled,
            Progress::Reconciling("Scaling".into(), "m".into()),
            Some(2),
            now,
        );
        assert_eq!(
            types(&going),
            [
                ("Available", "True", "R"),
                ("Ready", "False", "Scaling"),
                ("Reconciling", "True", "Scaling")
            ]
        );
        assert!(
            going
                .iter()
                .all(|c| c.observed_generation == Some(2) || c.type_ == "Available")
        );
    }
}
