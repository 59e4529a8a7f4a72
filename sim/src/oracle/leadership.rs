//! The leadership invariants (see the module docs of `oracle`): no write past a closed fence
//! or beside another open one, no Lease taken within the lease its holder gave, and no older
//! term's writes landing after a newer term's unless the server held them.

use std::time::Duration;

use tokio::time::Instant;

use super::{Actor, Oracle};
use crate::model::store::Change;

impl Oracle {
    /// A write of replica `actor` leaves it: it may land, or not. `fenced` is whether it went
    /// through the controllers' fence, and whether that was open.
    pub fn departs(&mut self, actor: Actor, fenced: Option<bool>, what: &str) {
        if !matches!(actor, Actor::Replica { .. }) {
            return;
        }
        if fenced == Some(false) {
            self.violate(format!(
                "{actor} sent {what} while its fence was closed: a write after its leadership lapsed"
            ));
        }
        if fenced != Some(true) {
            return;
        }
        self.writes_sent += 1;
        self.outlived_its_lease(actor, what);
        let other = self
            .fences
            .iter()
            .find(|(other, fence)| **other != actor && fence.is_open());
        if let Some((other, _)) = other {
            self.violate(format!(
                "{actor} sent {what} while the fence of {other} was open too: two leaders at once"
            ));
        }
    }

    pub(super) fn lease_changed(&mut self, change: &Change, now: Instant) {
        let holder = change
            .new
            .as_ref()
            .and_then(|l| l["spec"]["holderIdentity"].as_str())
            .filter(|h| !h.is_empty())
            .map(String::from);
        if holder.is_some() && holder != self.holder {
            self.term += 1;
            let h = holder.clone().unwrap_or_default();
            self.terms.entry(h).or_default().push((now, self.term));
            self.taken_over(holder.as_deref().unwrap_or_default(), now);
        }
        if holder != self.holder {
            self.holder_since = Some(now);
        }
        let duration = change
            .new
            .as_ref()
            .and_then(|l| l["spec"]["leaseDurationSeconds"].as_u64());
        self.held_until = holder
            .as_ref()
            .zip(duration)
            .map(|(_, d)| (now, Duration::from_secs(d)));
        self.holder = holder;
    }

    /// `holder`, a replica, took the Lease from the holder before it: only once that one's last write had
    /// gone unrenewed for the lease duration it gave (client-go's promise: another holder is
    /// never written over while its lease runs).
    pub(super) fn taken_over(&mut self, holder: &str, now: Instant) {
        let (Some(old), Some((written, duration))) = (&self.holder, self.held_until) else {
            return;
        };
        // A person (or another deployment) may take it whenever they like.
        let replica = self.identities.values().any(|i| i == holder);
        if replica && now - written < duration {
            self.violate(format!(
                "{holder} took the Lease from {old} {:?} after its last write, within the {duration:?} it gave",
                now - written
            ));
        }
    }

    /// A replica's controller write leaves while the Lease has named someone no replica is
    /// for longer than the renew deadline: the fence stays open until the renew deadline
    /// after the last renewal that landed, and none lands once another holder wrote the
    /// Lease.
    pub(super) fn outlived_its_lease(&mut self, actor: Actor, what: &str) {
        let (Some(holder), Some(since), Some(lease)) =
            (&self.holder, self.holder_since, self.lease)
        else {
            return;
        };
        let renew_deadline = lease * 2 / 3;
        let lasted = Instant::now() - since;
        if !self.identities.values().any(|i| i == holder) && lasted > renew_deadline {
            self.violate(format!(
                "{actor} sent {what} {lasted:?} after the Lease came to name {holder}, past its renew deadline ({renew_deadline:?}): two leaders at once"
            ));
        }
    }

    /// Writes of an older leadership term do not land after a newer term's, unless the server
    /// held them past the takeover margin. A write belongs to the term its writer's identity
    /// held when it reached the server.
    pub(super) fn term_order(
        &mut self,
        actor: Actor,
        change: &Change,
        held: Duration,
        now: Instant,
    ) {
        let identity = self.identities.get(&actor).cloned().unwrap_or_default();
        let arrived = now - held;
        let terms = self
            .terms
            .get(&identity)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let term = terms
            .iter()
            .rev()
            .find(|(began, _)| *began <= arrived)
            .map_or(0, |(_, term)| *term);
        if term < self.newest_written && held < self.takeover_margin {
            self.violate(format!(
                "{actor} wrote {:?} {}/{} in leadership term {term} (held {held:?} at the server), after a write of term {}: two leaders' writes interleaved",
                change.key.kind, change.key.namespace, change.key.name, self.newest_written
            ));
        }
        self.newest_written = self.newest_written.max(term);
    }
}
