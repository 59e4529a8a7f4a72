//! The At invariants: a command run at most once, released only as recorded, and a verdict
//! that says what happened (see the module docs of `oracle`).

use serde_json::Value;

use super::{Actor, Oracle};
use crate::model::objects;
use crate::model::resource::Kind;
use crate::model::store::{Change, Store};

/// What happened to one At's command.
#[derive(Default, Debug)]
pub(super) struct AtRecord {
    /// Runs started (the kubelet started its container), and how each ended.
    runs: Vec<Option<bool>>,
    vanished: bool,
    /// `spec.command` when the At was first recorded RUNNING: the spec that runs.
    started_with: Option<String>,
    /// The pod whose command was last killed for its memory: a verdict on that pod says so.
    /// Another's run (one someone else released, then deleted) is not the verdict's.
    oom_killed: Option<String>,
    /// The pod UID it last recorded: what it says once deleted, to a cache that still shows it.
    pod_uid: Option<String>,
    /// The kubelet's reason for a pod it rejected before the command started.
    rejected: Option<String>,
    /// A pod someone else released from its gate before the At recorded it.
    taken_over: Option<String>,
    /// That pod was deleted before the At recorded it: nothing is left that says it ran,
    /// so a second run is the one who took it over's doing, not the operator's.
    lost: bool,
}

impl Oracle {
    pub(super) fn at_pod_changed(
        &mut self,
        change: &Change,
        at_uid: &str,
        actor: Actor,
        store: &Store,
    ) {
        let old_phase = change.old.as_deref().map(objects::phase);
        let new_phase = change.new.as_deref().map(objects::phase);
        let at = store.by_uid(Kind::At, &change.key.namespace, at_uid);
        let vanished = at
            .filter(|a| reason(a) == Some("PodVanished"))
            .map(|a| objects::name(a).to_string());
        // Released: the At's own gate taken off (the pod may wait on another's still).
        let at_gated = |p: &Value| objects::gates(p).contains(&podset_operator::api::AT_GATE);
        let released = change.old.as_deref().is_some_and(at_gated)
            && change.new.as_deref().is_some_and(|p| !at_gated(p));
        let recorded = match at {
            Some(a) => a["status"]["podUID"].as_str().map(String::from),
            None => self.ats.get(at_uid).and_then(|r| r.pod_uid.clone()),
        };
        let pod_uid = change.new.as_deref().map(objects::uid).unwrap_or_default();
        // Someone else may take the gate off (`UngateAtPod`): only the operator's release
        // answers to these two rules.
        let released_by_other = released && !matches!(actor, Actor::Replica { .. });
        let released = released && !released_by_other;
        if released && recorded.as_deref() != Some(pod_uid) {
            self.violate(format!(
                "pod {}/{} was released from its gate, yet its At records {recorded:?}",
                change.key.namespace, change.key.name
            ));
        }
        let deleted = change.new.as_deref().is_none_or(objects::terminating)
            && change
                .old
                .as_deref()
                .is_some_and(|p| !objects::terminating(p));
        let pod_uid = change.old.as_deref().map(objects::uid).unwrap_or(pod_uid);
        // One with a deadline is stopped past it (`deadline`); the At may be gone since.
        let spec = at.map(|a| &a["spec"]).or_else(|| self.latest_spec(at_uid));
        let deadlined = spec.is_some_and(|s| {
            s["activeDeadlineSeconds"].is_i64() || s["startDeadlineSeconds"].is_i64()
        });
        if deleted
            && matches!(actor, Actor::Replica { .. })
            && recorded.as_deref() == Some(pod_uid)
            && !deadlined
        {
            self.violate(format!(
                "{actor} deleted pod {}/{}, which its At records: the command is given up on",
                change.key.namespace, change.key.name
            ));
        }
        let runs_command = change
            .new
            .as_deref()
            .map(|p| objects::command_of(objects::command_container(p)));
        let started_with = self.ats.get(at_uid).and_then(|r| r.started_with.clone());
        if released && runs_command != started_with.as_deref() {
            self.violate(format!(
                "pod {}/{} was released to run {runs_command:?}, yet its At was started with {started_with:?}",
                change.key.namespace, change.key.name
            ));
        }
        let record = self.ats.entry(at_uid.to_string()).or_default();
        if released_by_other && recorded.as_deref() != Some(pod_uid) {
            record.taken_over = Some(pod_uid.to_string());
        }
        record.lost |= deleted
            && !matches!(actor, Actor::Replica { .. })
            && record.taken_over.as_deref() == Some(pod_uid)
            && recorded.as_deref() != Some(pod_uid);
        let started = matches!(
            (old_phase, new_phase),
            (Some("Pending" | ""), Some("Running"))
        );
        let ended = |p: Option<&str>| matches!(p, Some("Succeeded" | "Failed"));
        // A run's outcome is its command's container's, whatever a sidecar did; the pod's
        // phase only where that container never ended.
        let (was, is) = (
            change.old.as_deref().and_then(command_ended),
            change.new.as_deref().and_then(command_ended),
        );
        let outcome = match (old_phase, new_phase) {
            (Some("Pending" | ""), Some("Running")) => {
                record.runs.push(None);
                None
            }
            _ if was.is_none() && is.is_some() => {
                let (code, reason) = is.unwrap_or_default();
                if reason == "OOMKilled" {
                    record.oom_killed = Some(pod_uid.to_string());
                }
                Some(code == 0)
            }
            (Some("Pending" | ""), Some("Failed")) if is.is_none() => {
                let pod = change.new.as_deref().unwrap_or(&Value::Null);
                let why = pod["status"]["reason"].as_str().unwrap_or("Failed");
                record.rejected = Some(why.to_string());
                None
            }
            (old, Some(new)) if is.is_none() && !ended(old) && ended(Some(new)) => {
                Some(new == "Succeeded")
            }
            _ => None,
        };
        let runs = record.runs.len();
        if let Some(succeeded) = outcome
            && let Some(last) = record.runs.last_mut()
        {
            *last = Some(succeeded);
        }
        if runs > 1 && !record.lost {
            self.violate(format!(
                "the command of At {}/{} started {runs} times",
                change.key.namespace,
                change.key.name.trim_end_matches("-pod")
            ));
        }
        if let Some(at) = vanished.filter(|_| started || outcome.is_some()) {
            let what = match outcome {
                Some(true) => "ran and succeeded",
                Some(false) => "ran and failed",
                None => "started",
            };
            self.violate(format!(
                "At {}/{at} was recorded DONE as PodVanished (not run), yet its command {what} afterwards",
                change.key.namespace
            ));
        }
    }

    pub(super) fn at_changed(&mut self, change: &Change, actor: Actor, store: &Store) {
        let (Some(old), Some(new)) = (&change.old, &change.new) else {
            return;
        };
        let (was, is) = (objects::phase(old), objects::phase(new));
        let at = format!("{}/{}", change.key.namespace, change.key.name);
        if was == "DONE" && is != "DONE" {
            self.violate(format!("At {at} left DONE for {is:?}: DONE is final"));
        }
        let _ = actor;
        let record = self.ats.entry(objects::uid(new).into()).or_default();
        record.pod_uid = new["status"]["podUID"].as_str().map(String::from);
        if is == "RUNNING" && !matches!(was, "RUNNING" | "DONE") {
            record.started_with = Some(objects::command_line(new));
        }
        if is != "DONE" || was == "DONE" {
            return;
        }
        let verdict = reason(new).unwrap_or_default().to_string();
        let ended: Vec<bool> = record.runs.iter().flatten().copied().collect();
        let wrong = match verdict.as_str() {
            "Succeeded" => (!ended.contains(&true)).then_some("no run of its command succeeded"),
            "Failed"
                if record.oom_killed.is_some()
                    && record.oom_killed == record.pod_uid
                    && !message(new).contains("OOMKilled") =>
            {
                Some("its command was OOMKilled and it does not say so")
            }
            "Failed" => match &record.rejected {
                Some(why) if ended.is_empty() && !message(new).contains(why.as_str()) => {
                    Some("the kubelet rejected its pod and it does not say why")
                }
                Some(_) => None,
                None => (!ended.contains(&false)).then_some("no run of its command failed"),
            },
            "PodVanished" => {
                record.vanished = true;
                let recorded = new["status"]["podUID"].as_str();
                let pod_exists = store
                    .objects(Kind::Pod, Some(&change.key.namespace))
                    .any(|p| Some(objects::uid(p)) == recorded);
                match recorded {
                    None => Some("it recorded no pod: its command never ran, and can still"),
                    Some(_) if pod_exists => Some("its recorded pod still exists"),
                    Some(_) => None,
                }
            }
            _ => None,
        };
        if let Some(why) = wrong {
            self.violate(format!("At {at} was recorded DONE {verdict}, but {why}"));
        }
    }

    /// An At ends once (DONE is final): its end is told in one event, never twice (issue 45,
    /// fault 3: a reconcile holding a copy from before its own DONE told it again).
    pub(super) fn event_changed(&mut self, change: &Change) {
        let Some(new) = &change.new else {
            return;
        };
        let regarding = &new["regarding"];
        let reason = new["reason"].as_str().unwrap_or_default();
        if regarding["kind"] != "At" || !["Succeeded", "Failed", "PodVanished"].contains(&reason) {
            return;
        }
        let count = |e: Option<&Value>| e.map_or(0, |e| e["series"]["count"].as_i64().unwrap_or(1));
        let more = count(Some(new)) - count(change.old.as_deref());
        let uid = regarding["uid"].as_str().unwrap_or_default().to_string();
        let told = self.ends_told.entry((uid, reason.into())).or_default();
        *told += more;
        let told = *told;
        if told > 1 {
            let at = regarding["name"].as_str().unwrap_or_default();
            self.violate(format!(
                "At {}/{at} was told {reason} {told} times: its end is told once",
                change.key.namespace
            ));
        }
    }
}

/// How the command's container of an At's pod ended: its exit code and reason.
fn command_ended(pod: &Value) -> Option<(i64, &str)> {
    let ended = pod["status"]["containerStatuses"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == objects::command_container_name(pod))?
        .pointer("/state/terminated")?;
    Some((
        ended["exitCode"].as_i64()?,
        ended["reason"].as_str().unwrap_or_default(),
    ))
}

/// The message of an At's `Completed` condition.
fn message(at: &Value) -> &str {
    completed(at)
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
}

fn completed(at: &Value) -> Option<&Value> {
    at["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Completed")
}

/// The reason of an At's `Completed` condition.
pub(super) fn reason(at: &Value) -> Option<&str> {
    completed(at)?["reason"].as_str()
}
