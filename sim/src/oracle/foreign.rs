//! Pods the operator does not control are never changed or deleted by it (README: "pods with
//! the same labels but another owner, or none, are never counted, changed or deleted"): one
//! someone else made, one whose controller someone took off or handed elsewhere, one the
//! operator itself released. A write decided on a cache that lagged is excused for
//! [`STALE`], as a ReplicaSet's delete may land just after a pod was disowned. A pod handed
//! to a PodSet by someone else is not counted against its creates for as long: a cache that
//! has not shown the handover makes the pods it sees missing, as a ReplicaSet's would.

use super::{Actor, Oracle, STALE, Write};
use crate::model::objects::{self, controller};
use crate::model::resource::Kind;
use crate::model::store::Store;

impl Oracle {
    pub(super) fn control_changed(&mut self, w: &Write, store: &Store) {
        let (change, actor, held, now) = (w.change, w.actor, w.held, w.now);
        let Some(pod) = change.new.as_deref().or(change.old.as_deref()) else {
            return;
        };
        let uid = objects::uid(pod).to_string();
        let replica = matches!(actor, Actor::Replica { .. });
        let sent = now.checked_sub(held).unwrap_or(now);
        if let (true, Some(old), Some(since)) = (replica, &change.old, self.foreign.get(&uid))
            && *since + STALE < sent
        {
            let what = match &change.new {
                Some(new) if objects::terminating(new) && !objects::terminating(old) => "deleted",
                _ => "changed",
            };
            let (ns, name) = (&change.key.namespace, &change.key.name);
            let for_ = now - *since;
            self.violate(format!(
                "{actor} {what} pod {ns}/{name}, which the operator had not controlled for {for_:?}"
            ));
        }
        let ours = |p: &serde_json::Value| {
            controller(p).is_some_and(|(kind, _, owner)| {
                [("PodSet", Kind::PodSet), ("At", Kind::At)]
                    .iter()
                    .filter(|(k, _)| *k == kind)
                    .any(|(_, k)| {
                        store
                            .objects(*k, Some(&change.key.namespace))
                            .any(|o| objects::uid(o) == owner)
                    })
            })
        };
        match (&change.old, &change.new) {
            (None, Some(_)) if !replica => {
                self.foreign.insert(uid, now);
            }
            (Some(old), Some(new)) if controller(old) != controller(new) => match ours(new) {
                true => {
                    self.foreign.remove(&uid);
                    if !replica {
                        self.handed.insert(uid, now);
                    }
                }
                false => {
                    self.foreign.insert(uid, now);
                }
            },
            (_, None) => {
                self.foreign.remove(&uid);
                self.handed.remove(&uid);
            }
            _ => {}
        }
    }
}
