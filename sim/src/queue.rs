//! Another controller that holds pods at a scheduling gate of its own, as Kueue holds a job's
//! pods until its queue admits them: it takes its gate, and only its gate, off a while after
//! the pod is made, by a JSON patch that tests the pod's UID and the gate's name at its index.
//! A pod that still holds a gate, its or the At's, is not scheduled (see `kubelet`).

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::kubelet::current;
use crate::model::objects;
use crate::model::resource::Kind;
use crate::model::store::{Change, Key};
use crate::oracle::Actor;
use crate::world::{Sim, pick};

/// The other controller's gate.
pub const GATE: &str = "kueue.x-k8s.io/admission";

/// The longest the queue holds a pod: the workload's users wait that much longer for a run.
pub const LONGEST_HOLD: Duration = Duration::from_secs(30);

/// A pod made with [`GATE`]: the queue admits it later.
pub fn reactions(change: &Change) -> Option<(Key, String)> {
    let new = change.new.as_deref()?;
    let made = change.key.kind == Kind::Pod && change.old.is_none();
    (made && objects::gates(new).contains(&GATE))
        .then(|| (change.key.clone(), objects::uid(new).to_string()))
}

/// Admits the pod `uid` (if it still holds the gate) after a while.
pub async fn admit(sim: Arc<Sim>, (key, uid): (Key, String)) {
    tokio::time::sleep(pick(&sim, Duration::from_millis(200), LONGEST_HOLD)).await;
    sim.act(Actor::User, |w| {
        let Some(pod) = current(&w.store, &key, &uid) else {
            return;
        };
        let Some(index) = objects::gates(&pod).iter().position(|g| *g == GATE) else {
            return;
        };
        let patch = json!([
            {"op": "test", "path": "/metadata/uid", "value": uid},
            {"op": "test", "path": format!("/spec/schedulingGates/{index}/name"), "value": GATE},
            {"op": "remove", "path": format!("/spec/schedulingGates/{index}")},
        ]);
        let _ = w.store.json_patch(&key, &patch, None);
    });
}
