//! Liveness: what is not yet as it should be once the faults stopped.

use serde_json::Value;

use podset_operator::api::AT_GENERATION_ANNOTATION;

use super::Oracle;
use crate::model::objects::{self, controller};
use crate::model::resource::Kind;
use crate::model::store::Store;

impl Oracle {
    /// A due At that has not started (PENDING still, not being deleted): once the faults
    /// stopped, the operator starts it within the liveness bound, whatever the At's own times
    /// (another controller's hold, its command's run, its TTL) add to its end.
    pub fn unstarted(&self, store: &Store, now: jiff::Timestamp) -> Option<String> {
        let waits = |a: &&std::sync::Arc<Value>| {
            !objects::terminating(a) && matches!(objects::phase(a), "" | "PENDING")
        };
        let at = store
            .objects(Kind::At, None)
            .filter(waits)
            .find(|a| due_by(a, now))?;
        let (ns, name) = (objects::namespace(at), objects::name(at));
        Some(format!("At {ns}/{name} is due and has not started"))
    }

    /// What is not yet as it should be once the operator caught up: `None` when everything
    /// converged.
    pub fn unconverged(&self, store: &Store, now: jiff::Timestamp) -> Option<String> {
        for ps in store.objects(Kind::PodSet, None) {
            if let Some(why) = podset_unconverged(store, ps) {
                return Some(why);
            }
        }
        // One being deleted waits for its finalizers: the operator does nothing more for it.
        for at in store
            .objects(Kind::At, None)
            .filter(|a| !objects::terminating(a))
        {
            let due = due_by(at, now);
            let phase = objects::phase(at);
            // Its pod stuck Terminating on a lost node: what became of the command is unknown
            // until the node comes back, as for a Job.
            let stuck = store
                .objects(Kind::Pod, Some(objects::namespace(at)))
                .any(|p| {
                    objects::terminating(p)
                        && controller(p).is_some_and(|(_, _, uid)| uid == objects::uid(at))
                });
            if due && phase != "DONE" && !stuck {
                let name = objects::name(at);
                return Some(format!(
                    "At {}/{name} is due and {phase:?}",
                    objects::namespace(at)
                ));
            }
            // DONE with a time to live that runs out before the quiet operator is watched to
            // its end: it is to be deleted, its pod with it.
            if super::ttl::expires(at).is_some_and(|t| t <= now + super::ttl::HORIZON) {
                return Some(format!(
                    "At {}/{} is DONE with a ttlSecondsAfterFinished, and not deleted",
                    objects::namespace(at),
                    objects::name(at)
                ));
            }
            // A pod held at its gate that its At will never release (the At is DONE, or the
            // pod was made from an older spec): litter, and a name the At's next run would
            // find taken.
            let generation = objects::generation(at).to_string();
            let gated = store
                .objects(Kind::Pod, Some(objects::namespace(at)))
                .find(|p| {
                    objects::gated(p)
                        && !objects::terminating(p)
                        && controller(p).is_some_and(|(_, _, uid)| uid == objects::uid(at))
                });
            let never = |p: &&std::sync::Arc<Value>| -> bool {
                let made_from = &p["metadata"]["annotations"][AT_GENERATION_ANNOTATION];
                phase == "DONE" || made_from.as_str() != Some(generation.as_str())
            };
            if let Some(pod) = gated.filter(never) {
                return Some(format!(
                    "At {}/{} is {phase:?} and its pod {} waits at its gate for good",
                    objects::namespace(at),
                    objects::name(at),
                    objects::name(pod)
                ));
            }
        }
        self.expired_pod_left(store)
    }
}

/// Whether `at`'s schedule, read in its zone (`schedule`), is due at `now`.
fn due_by(at: &Value, now: jiff::Timestamp) -> bool {
    super::schedule::due(&at["spec"]).is_some_and(|due| due <= now)
}

fn podset_unconverged(store: &Store, ps: &Value) -> Option<String> {
    let (ns, name, uid) = (objects::namespace(ps), objects::name(ps), objects::uid(ps));
    let want = ps["spec"]["replicas"].as_i64().unwrap_or(1);
    let mut pods: Vec<&str> = store
        .objects(Kind::Pod, Some(ns))
        .filter(|p| {
            // Labelled or not: see `Oracle::podset_create_landed`.
            controller(p).is_some_and(|(_, _, u)| u == uid) && objects::active(p)
        })
        .map(|p| objects::name(p))
        .collect();
    pods.sort();
    let status = &ps["status"];
    let named: Vec<&str> = status["podNames"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    // One being deleted (waiting for its finalizers) keeps what pods it has, and says so.
    let converged = match objects::terminating(ps) {
        true => named == pods,
        false => {
            pods.len() as i64 == want
                && status["availableReplicas"].as_i64() == Some(want)
                && named == pods
                && status["observedGeneration"].as_i64() == Some(objects::generation(ps))
        }
    };
    (!converged).then(|| format!("PodSet {ns}/{name} wants {want}: pods {pods:?}, status {status}"))
}
