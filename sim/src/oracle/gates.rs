//! The operator takes off only its own scheduling gate ([`AT_GATE`]): another controller's
//! (a queue's admission, a site's hold) stays on the pod, which waits for that controller too.
//! It makes an At's pod with every gate the At's template holds and its own beside them, and
//! no write of its removes any gate but its own.

use podset_operator::api::AT_GATE;

use super::{Actor, Oracle};
use crate::model::objects;
use crate::model::store::Change;

impl Oracle {
    /// A pod write of `actor`'s: if it is the operator's, it keeps every other gate.
    pub(super) fn gates_kept(&mut self, change: &Change, actor: Actor) {
        let Some(new) = change.new.as_deref() else {
            return;
        };
        if !matches!(actor, Actor::Replica { .. }) {
            return;
        }
        let now = objects::gates(new);
        let missing: Vec<String> = match change.old.as_deref() {
            Some(old) => taken_off(&objects::gates(old), &now)
                .into_iter()
                .filter(|g| *g != AT_GATE)
                .map(String::from)
                .collect(),
            None => {
                let Some((spec, _)) = self.made_from(new) else {
                    return;
                };
                let template = spec.pointer("/template/spec/schedulingGates");
                let template = template.and_then(|g| g.as_array()).into_iter().flatten();
                let wanted: Vec<&str> = template.filter_map(|g| g["name"].as_str()).collect();
                let wanted = [wanted, vec![AT_GATE]].concat();
                taken_off(&wanted, &now)
                    .into_iter()
                    .map(String::from)
                    .collect()
            }
        };
        if !missing.is_empty() {
            let (ns, name) = (&change.key.namespace, &change.key.name);
            self.violate(format!(
                "{actor} left scheduling gates {missing:?} off pod {ns}/{name}: only its own, {AT_GATE}, is its to take off"
            ));
        }
    }
}

/// The gates of `had` that `has` no longer holds, each as often as it went.
fn taken_off<'a>(had: &[&'a str], has: &[&str]) -> Vec<&'a str> {
    let mut left = has.to_vec();
    had.iter()
        .filter(|g| match left.iter().position(|l| l == *g) {
            Some(i) => {
                left.remove(i);
                false
            }
            None => true,
        })
        .copied()
        .collect()
}
