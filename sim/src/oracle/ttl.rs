//! An At's time to live, as a Job's TTL-after-finished: with `ttlSecondsAfterFinished` T, a
//! DONE At is deleted in the foreground T after its `status.completionTime`, and its pod with
//! it. The operator deletes an At only so: DONE, with a TTL, and not before completion + T by
//! the clock of the replica that deletes it ([`clocks`]). That it is deleted, and its pod
//! gone, is liveness: the At is unconverged until it is being deleted, and the pod of one it
//! deleted until that pod is (`liveness`): within the bound once the faults stop, beyond the
//! At's own times (its run, its TTL: `workload::BetaAt::lasts`), or once the TTL ran out if
//! that is later (a `completionTime` written by a clock ahead: [`Oracle::expiring`]).
//!
//! [`clocks`]: super::clocks

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;

use super::{Actor, Oracle, Write};
use crate::faults::{MAX_HOLD, STALLS_OVER};
use crate::model::objects;
use crate::model::resource::Kind;
use crate::model::store::Store;
use crate::run::IDLE_WATCH;

/// How far ahead an At's TTL running out is waited for: past the watch of the quiet operator
/// (`run::stays_quiet`), which its deletion would not leave quiet. One that runs out later
/// (its `completionTime` written by a clock ahead) is deleted after the run.
pub const HORIZON: SignedDuration = SignedDuration::from_secs(
    (MAX_HOLD.as_secs() + STALLS_OVER.as_secs() + IDLE_WATCH.as_secs() + 30) as i64,
);

/// When a DONE At with a TTL, not being deleted, is to be: its `completionTime` plus its TTL.
pub fn expires(at: &Value) -> Option<Timestamp> {
    let ttl = at["spec"]["ttlSecondsAfterFinished"].as_i64()?;
    let done = at["status"]["completionTime"]
        .as_str()?
        .parse::<Timestamp>()
        .ok()?;
    let waits = objects::phase(at) == "DONE" && !objects::terminating(at);
    waits.then(|| done + SignedDuration::from_secs(ttl))
}

/// The pods (namespace, UID) of the Ats the operator deleted for their TTL.
#[derive(Default)]
pub(super) struct Expired(Vec<(String, String)>);

impl Oracle {
    /// An At write: if it is the operator's and deletes the At, the At's TTL is over.
    pub(super) fn ttl_kept(&mut self, w: &Write) {
        let (change, actor, wall) = (w.change, w.actor, w.wall);
        let Some(old) = change.old.as_deref() else {
            return;
        };
        let deletes =
            !objects::terminating(old) && change.new.as_deref().is_none_or(objects::terminating);
        if !deletes || !matches!(actor, Actor::Replica { .. }) {
            return;
        }
        let ttl = old["spec"]["ttlSecondsAfterFinished"].as_i64();
        let done = old["status"]["completionTime"].as_str();
        let done: Option<Timestamp> = done.and_then(|t| t.parse().ok());
        let at = format!("{}/{}", change.key.namespace, change.key.name);
        let why = match (objects::phase(old), ttl, done) {
            ("DONE", Some(ttl), Some(done)) => {
                let expires = done + SignedDuration::from_secs(ttl);
                let (_, read) = self.read_by(w, wall);
                (read < expires).then(|| {
                    format!("at {wall} (its clock read {read} at most), before its TTL ran out at {expires}")
                })
            }
            _ => Some("which is not DONE with a ttlSecondsAfterFinished".into()),
        };
        if let Some(why) = why {
            self.violate(format!("{actor} deleted At {at} {why}"));
        }
        if let Some(pod) = old["status"]["podUID"].as_str() {
            let ns = change.key.namespace.clone();
            self.expired.0.push((ns, pod.to_string()));
        }
    }

    /// The latest time a DONE At is to be deleted for its TTL, if one is waiting: it is gone
    /// within the liveness bound after that.
    pub fn expiring(&self, store: &Store) -> Option<Timestamp> {
        store
            .objects(Kind::At, None)
            .filter_map(|a| expires(a))
            .max()
    }

    /// The pod of an At the operator deleted for its TTL, if one is still there and not
    /// being deleted.
    pub(super) fn expired_pod_left(&self, store: &Store) -> Option<String> {
        self.expired.0.iter().find_map(|(ns, uid)| {
            let pods = store.objects(Kind::Pod, Some(ns));
            let left = pods
                .filter(|p| objects::uid(p) == uid && !objects::terminating(p))
                .map(|p| objects::name(p).to_string())
                .next()?;
            Some(format!(
                "pod {ns}/{left} of an At deleted for its TTL is still there"
            ))
        })
    }
}
