//! A PodSet's pods are made from its template as it is, or as it was within [`STALE`] (a
//! cache that lags): "template changes apply to pods created afterwards only, as with a
//! ReplicaSet" (README). The template is told apart by its `busybox` container's command
//! (the default pod's is `sleep 3600`).

use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::{Oracle, STALE};

/// The container the default pod and the workload's templates name.
const CONTAINER: &str = "busybox";

impl Oracle {
    /// PodSet `uid` is now `podset`: its template's command, if it changed.
    pub(super) fn template_seen(&mut self, uid: &str, podset: &Value, now: Instant) {
        let command = match podset["spec"]["template"]["spec"].is_null() {
            true => json!(["sleep", "3600"]),
            false => command(&podset["spec"]["template"]["spec"]),
        };
        let history = self.templates.entry(uid.to_string()).or_default();
        if history.last().is_none_or(|(_, c)| *c != command) {
            history.push((now, command));
        }
    }

    /// The operator made `pod` for PodSet `owner`, sent `held` before `now`.
    pub(super) fn made_from_template(
        &mut self,
        pod: &Value,
        owner: &str,
        held: Duration,
        now: Instant,
    ) {
        let Some(history) = self.templates.get(owner) else {
            return;
        };
        let recent: Vec<&Value> =
            super::in_force_since(history, now.checked_sub(held + STALE)).collect();
        let made = command(&pod["spec"]);
        if !recent.contains(&&made) {
            let name = pod["metadata"]["name"].as_str().unwrap_or_default();
            let recent = Value::Array(recent.into_iter().cloned().collect());
            self.violate(format!(
                "pod {name} runs {made}, from no template its PodSet had in the last {STALE:?} ({recent})"
            ));
        }
    }
}

/// The command of the `busybox` container of a pod spec.
fn command(spec: &Value) -> Value {
    let containers = spec["containers"].as_array().into_iter().flatten();
    containers
        .filter(|c| c["name"] == CONTAINER)
        .map(|c| c["command"].clone())
        .next()
        .unwrap_or(Value::Null)
}
