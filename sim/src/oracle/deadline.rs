//! An At's deadlines, counted from its `status.startTime` (written to the second), as a Job's:
//! with `activeDeadlineSeconds` A, from start + A on, the command is not to run: its pod is
//! deleted (the kubelet then stops its containers: exit code 143) and the At ends DONE,
//! `DeadlineExceeded`. What holds, given that the kubelet stamps a container's end to the
//! second (`finishedAt`) and the operator reads the time on its own clock ([`clocks`]):
//! - a verdict from the run (`Succeeded`, `Failed`) is given only to a run that ended by its
//!   deadline: never to one whose `finishedAt` stamp is past start + A, whatever the clock of
//!   the replica that wrote the verdict read (a run stamped at start + A itself may have
//!   ended up to a second later: the operator, waking at the deadline, may see that end
//!   first);
//! - `DeadlineExceeded` is written only once the recorded pod is deleted (or gone), and only
//!   once the first of the At's deadlines (active, or start) has passed by that clock;
//! - that a run past its deadline is stopped at all is liveness: the At is DONE within the
//!   bound once the faults stop (no bound holds during them: a replica may be frozen for 40 s,
//!   its clock two hours behind).
//!
//! [`clocks`]: super::clocks

use std::collections::HashMap;

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;

use super::{Actor, Oracle, Write, at::reason};
use crate::model::objects;
use crate::model::resource::Kind;
use crate::model::store::{Change, Store};

/// Per pod UID: when its At's command's container ended, as the kubelet stamped it.
#[derive(Default)]
pub(super) struct Ends(HashMap<String, Timestamp>);

impl Oracle {
    /// A pod write: the end of its command's container, when the kubelet stamps it.
    pub(super) fn command_timed(&mut self, change: &Change) {
        let Some(pod) = change.new.as_deref() else {
            return;
        };
        let was = change.old.as_deref().and_then(finished_at);
        if let (None, Some(end)) = (was, finished_at(pod)) {
            self.ends.0.insert(objects::uid(pod).to_string(), end);
        }
    }

    /// An At write: if it is the operator's and ends the At, it keeps to its deadlines.
    pub(super) fn deadline_kept(&mut self, w: &Write, store: &Store) {
        let (change, actor, wall) = (w.change, w.actor, w.wall);
        let (Some(old), Some(new)) = (change.old.as_deref(), change.new.as_deref()) else {
            return;
        };
        let ends = objects::phase(new) == "DONE" && objects::phase(old) != "DONE";
        if !ends || !matches!(actor, Actor::Replica { .. }) {
            return;
        }
        let (active, starting) = deadlines(new);
        let pod = new["status"]["podUID"].as_str().unwrap_or_default();
        let at = format!("{}/{}", change.key.namespace, change.key.name);
        let why = match reason(new).unwrap_or_default() {
            verdict @ ("Succeeded" | "Failed") => {
                let (Some(deadline), Some(end)) = (active, self.ends.0.get(pod).copied()) else {
                    return;
                };
                // Both are stamps in the objects (the kubelet's, and start + A): the operator
                // compares them, reading no clock of its own.
                (end > deadline).then(|| {
                    format!("{verdict}, from a run that ended at {end}, after its active deadline, {deadline}")
                })
            }
            "DeadlineExceeded" => {
                let runs = store
                    .objects(Kind::Pod, Some(&change.key.namespace))
                    .any(|p| objects::uid(p) == pod && !objects::terminating(p));
                let first = active.into_iter().chain(starting).min();
                let (_, read) = self.read_by(w, wall);
                match first {
                    _ if runs => Some(format!(
                        "DeadlineExceeded, yet its pod {pod} was not deleted"
                    )),
                    Some(first) if read < first => Some(format!(
                        "DeadlineExceeded at {wall} (read {read} at most), before its first deadline, {first}"
                    )),
                    None => Some("DeadlineExceeded, with no deadline".into()),
                    Some(_) => None,
                }
            }
            _ => None,
        };
        if let Some(why) = why {
            self.violate(format!("{actor} recorded At {at} DONE {why}"));
        }
    }
}

impl Oracle {
    /// A pod write: the operator deletes the pod an At with a deadline records only past
    /// that deadline by its clock: the active one, or the start one if the pod never left
    /// Pending.
    pub(super) fn stopped_in_time(&mut self, w: &Write, store: &Store) {
        let (change, actor, wall) = (w.change, w.actor, w.wall);
        let Some(old) = change.old.as_deref() else {
            return;
        };
        let deletes =
            !objects::terminating(old) && change.new.as_deref().is_none_or(objects::terminating);
        let owner = objects::controller(old).filter(|(kind, _, _)| *kind == "At");
        let (true, Actor::Replica { .. }, Some((_, _, owner))) = (deletes, actor, owner) else {
            return;
        };
        let ns = &change.key.namespace;
        let Some(at) = store.by_uid(Kind::At, ns, owner) else {
            return;
        };
        if at["status"]["podUID"] != objects::uid(old) {
            return;
        }
        let (active, starting) = deadlines(at);
        if active.is_none() && starting.is_none() {
            return; // the At's own rule: never deleted (`at`)
        }
        let (_, read) = self.read_by(w, wall);
        let pending = objects::phase(old) == "Pending";
        let past = |d: Option<Timestamp>| d.is_some_and(|d| read >= d);
        if !(past(active) || pending && past(starting)) {
            let name = &change.key.name;
            self.violate(format!(
                "{actor} deleted pod {ns}/{name}, which its At records, at {wall} (its clock read {read} at most), before its deadline"
            ));
        }
    }
}

/// When an At's active and start deadlines fall: `status.startTime` and its spec's seconds.
fn deadlines(at: &Value) -> (Option<Timestamp>, Option<Timestamp>) {
    let start: Option<Timestamp> = at["status"]["startTime"]
        .as_str()
        .and_then(|t| t.parse().ok());
    let deadline = |field: &str| {
        let seconds = at["spec"][field].as_i64()?;
        start.map(|s| s + SignedDuration::from_secs(seconds))
    };
    (
        deadline("activeDeadlineSeconds"),
        deadline("startDeadlineSeconds"),
    )
}

/// When the command's container of an At's pod ended, as the kubelet stamped it.
fn finished_at(pod: &Value) -> Option<Timestamp> {
    let name = objects::command_container_name(pod);
    let statuses = pod["status"]["containerStatuses"].as_array()?;
    let ended = statuses.iter().find(|c| c["name"] == name)?;
    ended
        .pointer("/state/terminated/finishedAt")?
        .as_str()?
        .parse()
        .ok()
}
