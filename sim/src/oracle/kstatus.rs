//! What the operator writes of an At's health, as kstatus readers (Flux, Argo CD, `kubectl
//! wait --for=condition=Ready`) read it. Every status it writes describes the At it wrote
//! over: `status.observedGeneration`, and each of kstatus's conditions' `observedGeneration`,
//! is that At's `metadata.generation`. And exactly one of these holds, each with the reason
//! the At's own conditions give:
//! - `Ready` True, alone: DONE and succeeded;
//! - `Stalled` True (and `Ready` False with its reason): DONE and not succeeded (the reason
//!   of `Completed`), RUNNING with its pod in trouble (`Completed` False for another reason
//!   than `Started` or `Starting`), or PENDING and blocked (`Scheduled` False);
//! - `Reconciling` True (and `Ready` False with its reason): anything else, waiting for its
//!   time or running.

use serde_json::Value;

use super::{Actor, Oracle};
use crate::model::objects;
use crate::model::store::Change;

impl Oracle {
    /// An At write: if the operator wrote its status, the status says what the At is.
    pub(super) fn health_told(&mut self, change: &Change, actor: Actor) {
        let (Some(old), Some(new)) = (change.old.as_deref(), change.new.as_deref()) else {
            return;
        };
        if !matches!(actor, Actor::Replica { .. }) || old.get("status") == new.get("status") {
            return;
        }
        if let Some(why) = wrong(new, objects::generation(old)) {
            let at = format!("{}/{}", change.key.namespace, change.key.name);
            self.violate(format!(
                "{actor} wrote a status of At {at} that {why}: {}",
                new["status"]
            ));
        }
    }
}

/// What is wrong with the status of `at`, written over generation `generation`.
fn wrong(at: &Value, generation: i64) -> Option<String> {
    let status = &at["status"];
    let observed = status["observedGeneration"].as_i64();
    if observed != Some(generation) {
        return Some(format!(
            "describes generation {observed:?}, not {generation}"
        ));
    }
    let condition = |type_: &str| -> Option<&Value> {
        let conditions = status["conditions"].as_array()?;
        conditions.iter().find(|c| c["type"] == type_)
    };
    let says = |c: Option<&Value>, status: &str| c.is_some_and(|c| c["status"] == status);
    let reason = |c: Option<&Value>| c.and_then(|c| c["reason"].as_str()).map(String::from);
    let (completed, scheduled) = (condition("Completed"), condition("Scheduled"));
    let stalled = match (objects::phase(at), status["succeeded"].as_bool()) {
        ("DONE", Some(true)) => None,
        ("DONE", _) => Some(reason(completed).unwrap_or_else(|| "Failed".into())),
        ("RUNNING", _)
            if says(completed, "False")
                && !["Started", "Starting"]
                    .contains(&reason(completed).as_deref().unwrap_or("")) =>
        {
            reason(completed)
        }
        ("RUNNING", _) => None,
        _ if says(scheduled, "False") => reason(scheduled),
        _ => None,
    };
    let ready = objects::phase(at) == "DONE" && status["succeeded"] == true;
    let kstatus = ["Ready", "Reconciling", "Stalled"].map(condition);
    let [told_ready, reconciling, told_stalled] = kstatus;
    if says(told_ready, "True") != ready {
        return Some(format!(
            "is Ready {}, yet DONE and succeeded is {ready}",
            !ready
        ));
    }
    if told_stalled.is_some() != stalled.is_some()
        || reconciling.is_some() != (!ready && stalled.is_none())
    {
        let expected = match (&stalled, ready) {
            (Some(_), _) => "Stalled",
            (None, true) => "neither Stalled nor Reconciling",
            (None, false) => "Reconciling",
        };
        return Some(format!("is not {expected} alone"));
    }
    if let Some(why) = stalled
        && (reason(told_stalled).as_deref() != Some(&why)
            || reason(told_ready).as_deref() != Some(&why))
    {
        return Some(format!("is not Stalled for {why:?}"));
    }
    let abnormal = told_stalled.into_iter().chain(reconciling);
    if abnormal
        .chain(told_ready)
        .any(|c| !says(Some(c), "True") && c["type"] != "Ready")
    {
        return Some("has a kstatus condition that is not True".into());
    }
    let stale = kstatus
        .into_iter()
        .flatten()
        .find(|c| c["observedGeneration"].as_i64() != Some(generation));
    stale.map(|c| {
        format!(
            "has {} of generation {}",
            c["type"], c["observedGeneration"]
        )
    })
}
