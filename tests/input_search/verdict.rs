//! What must become of a generated object the API server admitted: the operator acts on it
//! (and what it did is true), or it says why in a condition and a Warning event with the same
//! reason. Read as raw JSON: the check must not depend on the operator's own types.

use anyhow::{Result, bail};
use jiff::Timestamp;
use kube::ResourceExt;
use serde_json::Value;

use crate::generate::Generated;
use testenv::harness::{Kind, TestNs, ensure_runs_command};

#[derive(Clone, Debug)]
pub enum Verdict {
    /// The operator did what the object asks (which kind of action).
    Acted(String),
    /// The operator said why not: the reason of its condition and Warning event.
    Reported(String),
}

/// The verdict on `g` as the cluster shows it now; `None` while the operator has neither
/// acted nor reported; an error for what it must never do.
pub async fn verdict(ns: &TestNs, g: &Generated) -> Result<Option<Verdict>> {
    let object = ns.get_raw(g.kind, &g.name).await?;
    if let Some(reason) = reported(ns, g, &object).await? {
        return Ok(Some(Verdict::Reported(reason)));
    }
    match g.kind {
        Kind::PodSet => podset_acted(ns, &object).await,
        Kind::At => at_acted(ns, &object).await,
    }
}

/// The reason of a failure condition (PodSet `ReplicaFailure` True, At `Scheduled` False, or
/// an At DONE other than Succeeded), once a Warning event with that reason names the object.
async fn reported(ns: &TestNs, g: &Generated, object: &Value) -> Result<Option<String>> {
    let conditions = object["status"]["conditions"].as_array().cloned();
    let failure = conditions.into_iter().flatten().find(|c| {
        matches!(
            (c["type"].as_str(), c["status"].as_str()),
            (Some("ReplicaFailure"), Some("True")) | (Some("Scheduled"), Some("False"))
        ) || (c["type"] == "Completed"
            && object["status"]["phase"] == "DONE"
            && c["reason"] != "Succeeded")
    });
    let Some(failure) = failure else {
        return Ok(None);
    };
    let reason = failure["reason"].as_str().unwrap_or_default().to_string();
    if failure["message"].as_str().unwrap_or_default().is_empty() {
        bail!("condition {reason} without a message: {failure}");
    }
    // The schema admits only schedules the operator can read (`api::at::SCHEDULE_RULE`).
    if g.kind == Kind::At && reason == "InvalidSchedule" {
        bail!("the CRD admitted a schedule the operator cannot read: {failure}");
    }
    Ok(ns.warned(&g.name, &reason, "").await?.then_some(reason))
}

/// The schedule, if it is a time our own reading accepts: `YYYY-MM-DDThh:mm:ssZ`, real.
fn valid_schedule(at: &Value) -> Option<Timestamp> {
    let schedule = at["spec"]["schedule"].as_str()?;
    let shaped = schedule.len() == 20
        && schedule.ends_with('Z')
        && schedule.as_bytes()[10] == b'T'
        && !schedule.contains("T24:")
        && !schedule.contains(":60Z");
    shaped.then(|| schedule.parse().ok()).flatten()
}

/// Every wanted pod exists, is ours, and the status says so.
async fn podset_acted(ns: &TestNs, ps: &Value) -> Result<Option<Verdict>> {
    let name = ps["metadata"]["name"].as_str().unwrap_or_default();
    let uid = ps["metadata"]["uid"].as_str().unwrap_or_default();
    let replicas = ps["spec"]["replicas"].as_u64().unwrap_or(1) as usize;
    let status = &ps["status"];
    let pods = ns.pods_of(uid).await?;
    let live: Vec<_> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    if live.len() > replicas {
        bail!("{} live pods for {replicas} replicas", live.len());
    }
    let mut names: Vec<String> = live.iter().map(|p| p.name_any()).collect();
    names.sort();
    let reported: Vec<String> = status["podNames"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n.as_str().map(String::from))
        .collect();
    let done = live.len() == replicas
        && status["availableReplicas"].as_u64() == Some(replicas as u64)
        && reported == names
        && status["observedGeneration"] == ps["metadata"]["generation"];
    if !done {
        return Ok(None);
    }
    for pod in &live {
        let labels = pod.labels();
        if labels.get("app").map(String::as_str) != Some(name)
            || labels.get("version").map(String::as_str) != Some("v0.1")
        {
            bail!(
                "pod {} lacks app={name}, version=v0.1: {labels:?}",
                pod.name_any()
            );
        }
    }
    Ok(Some(Verdict::Acted("PodSet: its pods".into())))
}

/// Due: RUNNING (or DONE) with its own pod running exactly its command. Ahead: PENDING and
/// Scheduled True.
async fn at_acted(ns: &TestNs, at: &Value) -> Result<Option<Verdict>> {
    let phase = at["status"]["phase"].as_str().unwrap_or_default();
    let due = valid_schedule(at).map(|t| t <= Timestamp::now());
    match phase {
        "RUNNING" | "DONE" => {
            if due == Some(false) {
                bail!("{phase} before its schedule");
            }
            let pods = ns
                .pods_of(at["metadata"]["uid"].as_str().unwrap_or(""))
                .await?;
            let [pod] = &pods[..] else {
                bail!("{phase} with {} pods of its own", pods.len());
            };
            ensure_runs_command(pod, at["spec"]["command"].as_str().unwrap_or_default())?;
            Ok(Some(Verdict::Acted(format!("At: {phase}, its pod"))))
        }
        "PENDING" if due == Some(true) => Ok(None),
        "PENDING" => {
            let scheduled = at["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Scheduled" && c["status"] == "True");
            Ok(scheduled.then(|| Verdict::Acted("At: PENDING, scheduled ahead".into())))
        }
        _ => Ok(None),
    }
}
