//! What must become of a generated object the API server admitted: the operator acts on it
//! (and what it did is true), or it says why in a condition and a Warning event with the same
//! reason. Read as raw JSON at v1beta1, the version the operator reads, whatever version the
//! object was written at: the check must not depend on the operator's own types.

use anyhow::{Result, bail, ensure};
use jiff::Timestamp;
use jiff::civil::DateTime;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use podset_operator::api::STORAGE_VERSION;
use serde_json::Value;

use crate::generate::Generated;
use crate::readable::get;
use testenv::harness::{Kind, TestNs};

/// The image of a template's container that names none, as the At API documents it.
const DEFAULT_IMAGE: &str = "busybox:1.37.0";
/// How a DONE At's run ended other than in success: one of these, in a Warning event, tells
/// of an At its time to live deleted.
const ENDED: [&str; 3] = ["DeadlineExceeded", "Failed", "PodVanished"];

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
    let Some(object) = get(ns, g.kind, STORAGE_VERSION, &g.name).await? else {
        return expired(ns, g).await;
    };
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

/// Gone: only an At that ended and had a time to live may be (the test deletes nothing
/// before its verdict), and a Warning event tells how it ended.
async fn expired(ns: &TestNs, g: &Generated) -> Result<Option<Verdict>> {
    let lived = g.body["spec"]["ttlSecondsAfterFinished"].is_number()
        || g.body.to_string().contains("ttlSecondsAfterFinished");
    ensure!(
        g.kind == Kind::At && lived,
        "deleted, by none but the operator"
    );
    for reason in ENDED {
        if ns.warned(&g.name, reason, "").await? {
            return Ok(Some(Verdict::Acted(format!(
                "At: DONE ({reason}), deleted by its TTL"
            ))));
        }
    }
    bail!("deleted by its TTL before any event told how it ended")
}

/// When the At is due, if its schedule is a time our own reading accepts:
/// `YYYY-MM-DDThh:mm:ss`, real, in UTC with a `Z`, else in its `timeZone` (UTC if none); a
/// local time a daylight-saving change skips or repeats read as RFC 5545 reads it.
fn due(at: &Value) -> Option<Timestamp> {
    let schedule = at["spec"]["schedule"].as_str()?;
    let (local, zone) = match schedule.strip_suffix('Z') {
        Some(utc) => (utc, "UTC"),
        None => (schedule, at["spec"]["timeZone"].as_str().unwrap_or("UTC")),
    };
    let shaped = local.len() == 19
        && local.as_bytes()[10] == b'T'
        && !local.contains("T24:")
        && !local.ends_with(":60");
    let time = DateTime::strptime("%Y-%m-%dT%H:%M:%S", local).ok()?;
    let zone = jiff::tz::db().get(zone).ok()?;
    shaped
        .then(|| time.to_zoned(zone).ok())
        .flatten()
        .map(|t| t.timestamp())
}

/// The pod runs the At's command: its deciding container (`containerName`'s, else the
/// template's first) has the template's command and arguments (none and empty alike), and
/// its image, or the default.
fn ensure_runs_command(pod: &Pod, at: &Value) -> Result<()> {
    let spec = &at["spec"];
    let containers = spec
        .pointer("/template/spec/containers")
        .and_then(Value::as_array);
    let want = containers
        .into_iter()
        .flatten()
        .find(|c| match spec["containerName"].as_str() {
            Some(name) => c["name"] == name,
            None => true,
        });
    let Some(want) = want else {
        bail!("RUNNING without the container that decides");
    };
    let pod = serde_json::to_value(pod)?;
    let ran = pod["spec"]["containers"].as_array().into_iter().flatten();
    let Some(ran) = ran.into_iter().find(|c| c["name"] == want["name"]) else {
        bail!("the pod has no container {}", want["name"]);
    };
    let words = |c: &Value, field: &str| c[field].as_array().cloned().unwrap_or_default();
    for field in ["command", "args"] {
        ensure!(
            words(ran, field) == words(want, field),
            "the pod's {field} is not the At's: {:.200}",
            ran[field]
        );
    }
    let image = want["image"].as_str().unwrap_or(DEFAULT_IMAGE);
    ensure!(
        ran["image"] == image,
        "the pod runs {} for {image}",
        ran["image"]
    );
    Ok(())
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
    let due = due(at).map(|t| t <= Timestamp::now());
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
            ensure_runs_command(pod, at)?;
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
