//! An At never runs before its schedule, read in its time zone as the API says: `Z`, UTC;
//! else a local time in `timeZone` (UTC if unset), one that a daylight-saving change skips
//! read as much later as the clocks moved, one that comes twice as the first of the two. The
//! operator makes the At's pod, and releases it from its gate, only once the schedule of the
//! generation the pod is made from is due: by the clock of the replica that makes it, and of
//! one that may have recorded it RUNNING (another may release it) ([`clocks`]).
//! That a due one runs is liveness: it is DONE within the bound once the faults stop
//! (`liveness`, which reads the schedule here too).
//!
//! [`clocks`]: super::clocks

use std::collections::{BTreeMap, HashMap};

use jiff::Timestamp;
use jiff::civil::DateTime;
use jiff::tz::AmbiguousOffset;
use serde_json::Value;

use podset_operator::api::{AT_GATE, AT_GENERATION_ANNOTATION};

use super::{Actor, Oracle, Write};
use crate::model::objects::{self, controller};
use crate::model::store::Change;

/// Per At UID: its spec at each generation it had.
#[derive(Default)]
pub(super) struct Specs(HashMap<String, BTreeMap<i64, Value>>);

impl Oracle {
    /// An At was written: its spec at its generation.
    pub(super) fn spec_seen(&mut self, change: &Change) {
        let Some(at) = &change.new else {
            return;
        };
        let specs = self
            .specs
            .0
            .entry(objects::uid(at).to_string())
            .or_default();
        specs
            .entry(objects::generation(at))
            .or_insert_with(|| at["spec"].clone());
    }

    /// The spec At `uid` had at `generation`.
    pub(super) fn spec_at(&self, uid: &str, generation: i64) -> Option<&Value> {
        self.specs.0.get(uid)?.get(&generation)
    }

    /// The last spec At `uid` had.
    pub(super) fn latest_spec(&self, uid: &str) -> Option<&Value> {
        self.specs.0.get(uid)?.values().next_back()
    }

    /// The spec of the At that controls `pod`, at the generation the pod says it was made
    /// from, with the At's UID.
    pub(super) fn made_from<'a>(&'a self, pod: &Value) -> Option<(&'a Value, String)> {
        let (kind, _, at) = controller(pod)?;
        let made_from = pod["metadata"]["annotations"][AT_GENERATION_ANNOTATION].as_str()?;
        let spec = self.spec_at(at, made_from.parse().ok()?)?;
        (kind == "At").then(|| (spec, at.to_string()))
    }

    /// A pod write: one of the operator's that makes an At's pod, or takes the At's gate off
    /// it, lands only once its schedule is due by the clock of its replica.
    pub(super) fn runs_on_time(&mut self, w: &Write) {
        let (change, actor, wall) = (w.change, w.actor, w.wall);
        let Some(pod) = change.new.as_deref() else {
            return;
        };
        let released = change
            .old
            .as_deref()
            .is_some_and(|old| objects::gates(old).contains(&AT_GATE))
            && !objects::gates(pod).contains(&AT_GATE);
        let made = change.old.is_none();
        if !matches!(actor, Actor::Replica { .. }) || !(made || released) {
            return;
        }
        let Some(due) = self.made_from(pod).and_then(|(spec, _)| due(spec)) else {
            return;
        };
        // Made: decided by its maker. Released: by whoever recorded the At RUNNING.
        let read = match made {
            true => self.read_by(w, wall).1,
            false => self.latest_read(w),
        };
        if read < due {
            let what = if made { "made" } else { "released" };
            let (ns, name) = (&change.key.namespace, &change.key.name);
            self.violate(format!(
                "{actor} {what} pod {ns}/{name} at {wall} (its clock read {read} at most), before its schedule, due at {due}"
            ));
        }
    }
}

/// When an At's spec is due: its schedule read in its time zone (see the module's docs);
/// `None` if it cannot be read.
pub fn due(spec: &Value) -> Option<Timestamp> {
    let schedule = spec["schedule"].as_str()?;
    let (local, zone) = match (schedule.strip_suffix('Z'), spec["timeZone"].as_str()) {
        (Some(utc), _) => (utc, "UTC"),
        (None, zone) => (schedule, zone.unwrap_or("UTC")),
    };
    let zone = podset_operator::api::at::time_zone(zone).ok()?;
    let local = DateTime::strptime("%Y-%m-%dT%H:%M:%S", local).ok()?;
    let offset = match zone.to_ambiguous_timestamp(local).offset() {
        AmbiguousOffset::Unambiguous { offset } => offset,
        // Skipped: read with the offset before the change, which puts it as much later as
        // the clocks moved. Repeated: the first, with the offset before the change too.
        AmbiguousOffset::Gap { before, .. } | AmbiguousOffset::Fold { before, .. } => before,
    };
    offset.to_timestamp(local).ok()
}

#[cfg(test)]
mod tests {
    use super::due;
    use serde_json::json;

    #[test]
    fn a_schedule_is_read_in_its_zone_a_skipped_time_later_a_repeated_one_first() {
        let at = |schedule: &str, zone: Option<&str>| {
            let spec = json!({"schedule": schedule, "timeZone": zone});
            due(&spec).map(|t| t.to_string())
        };
        let utc = at("2030-01-01T00:00:00Z", None);
        assert_eq!(utc.as_deref(), Some("2030-01-01T00:00:00Z"));
        let berlin = at("2030-01-01T01:00:00", Some("Europe/Berlin"));
        assert_eq!(berlin.as_deref(), Some("2030-01-01T00:00:00Z"));
        // 02:30 does not happen on 2029-03-25 in Berlin: 03:30 CEST.
        let gap = at("2029-03-25T02:30:00", Some("Europe/Berlin"));
        assert_eq!(gap.as_deref(), Some("2029-03-25T01:30:00Z"));
        // 02:30 happens twice on 2029-10-28: first in CEST.
        let fold = at("2029-10-28T02:30:00", Some("Europe/Berlin"));
        assert_eq!(fold.as_deref(), Some("2029-10-28T00:30:00Z"));
        assert_eq!(at("2030-02-30T00:00:00Z", None), None);
    }
}
