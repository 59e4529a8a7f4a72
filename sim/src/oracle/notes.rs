//! The operator's events are true of their object when written, now or within [`STALE`] (an
//! event is published after the write that made it true; a later write may land first):
//! - one that tells of a condition (every At event; a PodSet's `PodsHealthy` ones) carries a
//!   reason and message the object's conditions showed;
//! - a PodSet's `SuccessfulCreate` and `SuccessfulDelete` name pods the operator made for
//!   it, or deleted.
//!
//! A series told again must carry what is true now (issue 45, fault 4: a series kept its
//! first note).

use std::collections::HashMap;
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use super::{Actor, Oracle, STALE};
use crate::model::objects;
use crate::model::store::{Change, Key};

/// What the operator's objects and their pods said and did, and when last.
#[derive(Default)]
pub(super) struct Said {
    /// Per object UID: each (reason, message) its conditions showed.
    conditions: HashMap<String, HashMap<(String, String), Instant>>,
    /// Per pod: when the operator made it, and when it was deleted.
    made: HashMap<Key, Instant>,
    deleted: HashMap<Key, Instant>,
}

impl Oracle {
    /// A PodSet or an At is now as written: what its conditions say.
    pub(super) fn object_says(&mut self, object: &Value, now: Instant) {
        let uid = objects::uid(object).to_string();
        let said = self.said.conditions.entry(uid).or_default();
        let conditions = object["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten();
        for c in conditions {
            let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            said.insert((text("reason"), text("message")), now);
        }
    }

    /// A pod changed: made by the operator, or deleted.
    pub(super) fn pod_done(&mut self, change: &Change, actor: Actor, now: Instant) {
        let deleted = change.new.as_deref().is_none_or(objects::terminating);
        if change.old.is_none() && matches!(actor, Actor::Replica { .. }) {
            self.said.made.insert(change.key.clone(), now);
        } else if deleted {
            self.said.deleted.entry(change.key.clone()).or_insert(now);
        }
    }

    /// An event was written: if it is the operator's, what it says must be true.
    pub(super) fn note_written(
        &mut self,
        change: &Change,
        actor: Actor,
        held: Duration,
        now: Instant,
    ) {
        let Some(event) = &change.new else {
            return;
        };
        let note = event["note"].as_str().unwrap_or_default();
        let count = |e: &Value| e["series"]["count"].as_i64().unwrap_or(1);
        let told = change
            .old
            .as_deref()
            .is_none_or(|o| count(o) != count(event) || o["note"] != event["note"]);
        if !told || !matches!(actor, Actor::Replica { .. }) {
            return;
        }
        let since = now.checked_sub(held + STALE).unwrap_or(now);
        let recent = |t: Option<&Instant>| t.is_some_and(|t| *t >= since);
        let reason = event["reason"].as_str().unwrap_or_default();
        let regarding = &event["regarding"];
        let ns = &change.key.namespace;
        let pods = |prefix: &str| -> Vec<Key> {
            let names = note.strip_prefix(prefix).unwrap_or_default().split(", ");
            names
                .map(|name| Key {
                    kind: crate::model::resource::Kind::Pod,
                    namespace: ns.clone(),
                    name: name.into(),
                })
                .collect()
        };
        let said = &self.said;
        let true_ = match (regarding["kind"].as_str(), reason) {
            (Some("PodSet"), "SuccessfulCreate") => pods("Created pods: ")
                .iter()
                .all(|p| recent(said.made.get(p))),
            (Some("PodSet"), "SuccessfulDelete") => pods("Deleted pods: ")
                .iter()
                .all(|p| recent(said.deleted.get(p))),
            _ if of_a_condition(event) => {
                let uid = regarding["uid"].as_str().unwrap_or_default();
                let key = (reason.to_string(), note.to_string());
                recent(said.conditions.get(uid).and_then(|s| s.get(&key)))
            }
            _ => true,
        };
        if !true_ {
            let name = regarding["name"].as_str().unwrap_or_default();
            let kind = regarding["kind"].as_str().unwrap_or_default();
            self.violate(format!(
                "{actor} told {kind} {ns}/{name} {reason} \"{note}\", which was not true in the last {STALE:?}"
            ));
        }
    }
}

/// Whether the event tells of a condition: every At's, and a PodSet's `Run` ones
/// (`PodsHealthy`).
fn of_a_condition(event: &Value) -> bool {
    event["regarding"]["kind"] == "At"
        || event["regarding"]["kind"] == "PodSet" && event["action"] == "Run"
}
