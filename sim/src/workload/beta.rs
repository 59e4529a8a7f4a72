//! An At as a user writes it at v1beta1: a schedule in UTC or as a local time in a time zone
//! (with daylight-saving changes and far offsets, now and then a local time that a change
//! skips or repeats), a pod template whose command container is named, now and then beside a
//! second container, held by another controller's scheduling gate too, a command that sleeps
//! longer or shorter than its active deadline, a start deadline, a time to live.

use std::time::Duration;

use jiff::civil::DateTime;
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

use crate::model::store::seconds;
use crate::queue;

/// The zones schedules are written in: the first [`CHANGING`] change their clocks (by an hour,
/// or by half an hour at Lord Howe), the others are far from UTC (+05:30, +14, -11).
const ZONES: [&str; 8] = [
    "Europe/Berlin",
    "America/New_York",
    "Pacific/Chatham",
    "Australia/Lord_Howe",
    "America/St_Johns",
    "Asia/Kolkata",
    "Pacific/Kiritimati",
    "Pacific/Pago_Pago",
];
const CHANGING: usize = 5;

/// What the second container does once the command ended: runs on, ends, or fails.
const HELPERS: [&str; 3] = ["sleep infinity", "echo helper", "echo helper; exit 1"];
const CONTAINERS: [&str; 3] = ["busybox", "main", "job"];

#[derive(Clone, Debug, PartialEq)]
pub struct BetaAt {
    /// Seconds from the create to the schedule.
    pub due_in: i64,
    /// The zone the schedule is written in, as a local time (none: in UTC, with `Z`).
    pub zone: Option<&'static str>,
    /// The schedule is instead a local time in a daylight-saving gap (or fold) of the zone,
    /// at its change before the create (due at once) or after it (not due in the run).
    pub odd: Option<Odd>,
    /// The command container's name, and whether `containerName` says it.
    pub container: &'static str,
    pub named: bool,
    /// Its `sh -c` line.
    pub command: String,
    /// How long the command sleeps: it runs that long and a few seconds.
    pub sleep: u64,
    /// A second container (`helper`), before or after the command's.
    pub helper: Option<&'static str>,
    pub helper_first: bool,
    /// `startDeadlineSeconds`.
    pub start_deadline: Option<i64>,
    /// `activeDeadlineSeconds`.
    pub active_deadline: Option<i64>,
    /// Held by [`queue::GATE`] as well.
    pub queued: bool,
    /// `ttlSecondsAfterFinished`.
    pub ttl: Option<i32>,
}

/// Which odd local time: one repeated (`fold`) or skipped, at the zone's last change (`past`)
/// or its next.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Odd {
    pub fold: bool,
    pub past: bool,
}

impl BetaAt {
    /// One due `due_in` seconds after it is made.
    pub fn draw(rng: &mut fastrand::Rng, due_in: i64) -> Self {
        let zone = (rng.f64() < 0.6).then(|| rng.usize(..ZONES.len()));
        let odd = zone.filter(|z| *z < CHANGING && rng.f64() < 0.2);
        let odd = odd.map(|_| Odd {
            fold: rng.bool(),
            past: rng.f64() < 0.7,
        });
        let sleep = if rng.f64() < 0.4 { 0 } else { rng.u64(1..=40) };
        let exit = (rng.f64() < 0.2).then(|| rng.u8(1..=9));
        let command = match (sleep, exit) {
            (0, None) => "echo YAY".to_string(),
            (0, Some(code)) => format!("echo no; exit {code}"),
            (s, None) => format!("sleep {s}; echo YAY"),
            (s, Some(code)) => format!("sleep {s}; exit {code}"),
        };
        let helper = (rng.f64() < 0.3).then(|| HELPERS[rng.usize(..HELPERS.len())]);
        let s = sleep as i64;
        // Shorter than the command, longer, or just as long (a race with its end).
        let active_deadline = (rng.f64() < 0.4).then(|| match (s, rng.usize(..3)) {
            (0, _) => rng.i64(1..=20),
            (s, 0) => (s / 2).max(1),
            (s, 1) => s + 10,
            (s, _) => s,
        });
        BetaAt {
            due_in,
            zone: zone.map(|z| ZONES[z]),
            odd,
            container: CONTAINERS[rng.usize(..CONTAINERS.len())],
            named: helper.is_some() || rng.f64() < 0.3,
            command,
            sleep,
            helper,
            helper_first: rng.bool(),
            queued: rng.f64() < 0.25,
            start_deadline: (rng.f64() < 0.15).then(|| rng.i64(5..=40)),
            active_deadline,
            ttl: (rng.f64() < 0.35).then(|| rng.i32(0..=20)),
        }
    }

    /// Its spec, as written at `now`.
    pub fn spec(&self, now: Timestamp) -> Value {
        let command = json!({"name": self.container, "command": ["sh", "-c", self.command]});
        let mut containers = vec![command];
        if let Some(helper) = self.helper {
            let helper = json!({"name": "helper", "image": "busybox:1.37.0",
                "command": ["sh", "-c", helper]});
            match self.helper_first {
                true => containers.insert(0, helper),
                false => containers.push(helper),
            }
        }
        let mut pod = json!({"containers": containers});
        if self.queued {
            pod["schedulingGates"] = json!([{"name": queue::GATE}]);
        }
        let mut spec = json!({"schedule": self.schedule(now), "template": {"spec": pod}});
        let optional = [
            ("timeZone", self.zone.map(Value::from)),
            ("containerName", self.named.then(|| self.container.into())),
            ("startDeadlineSeconds", self.start_deadline.map(Value::from)),
            (
                "activeDeadlineSeconds",
                self.active_deadline.map(Value::from),
            ),
            ("ttlSecondsAfterFinished", self.ttl.map(Value::from)),
        ];
        for (field, value) in optional {
            if let Some(value) = value {
                spec[field] = value;
            }
        }
        spec
    }

    /// The most its own times (another controller's hold, its command's run, its time to
    /// live) add to how long after its start it is gone or DONE: the users' wait, on top of
    /// the operator's.
    pub fn lasts(&self) -> Duration {
        let held = if self.queued {
            queue::LONGEST_HOLD
        } else {
            Duration::ZERO
        };
        let ttl = Duration::from_secs(self.ttl.unwrap_or(0) as u64);
        // The kubelet's start and end (5.5 s at most), the garbage collector's delete.
        held + Duration::from_secs(self.sleep + 10) + ttl
    }

    fn schedule(&self, now: Timestamp) -> String {
        let due = now + SignedDuration::from_secs(self.due_in);
        let Some(name) = self.zone else {
            return seconds(due);
        };
        let zone = podset_operator::api::at::time_zone(name).expect("a known zone");
        let odd = self.odd.and_then(|odd| odd_local(&zone, now, odd));
        let local = odd.unwrap_or_else(|| due.to_zoned(zone).datetime());
        local.strftime("%Y-%m-%dT%H:%M:%S").to_string()
    }
}

/// A local time that `zone` skips (or repeats, for a fold) at its change of clocks before
/// `now` (or after it): the middle of the hour, or half hour, the change skips or repeats.
fn odd_local(zone: &TimeZone, now: Timestamp, odd: Odd) -> Option<DateTime> {
    let changes: Vec<_> = match odd.past {
        true => zone.preceding(now).take(8).collect(),
        false => zone.following(now).take(8).collect(),
    };
    changes.into_iter().find_map(|change| {
        let at = change.timestamp();
        let before = zone.to_offset(at.checked_sub(SignedDuration::from_secs(1)).ok()?);
        let after = change.offset();
        let shift = i64::from(after.seconds() - before.seconds());
        if shift == 0 || (shift < 0) != odd.fold {
            return None;
        }
        // Skipped: from the change read at the offset before; repeated: at the one after.
        let first = at.to_zoned(TimeZone::fixed(before.min(after))).datetime();
        first
            .checked_add(SignedDuration::from_secs(shift.abs() / 2))
            .ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(schedule: &str, zone: &TimeZone) -> jiff::tz::AmbiguousOffset {
        let local = DateTime::strptime("%Y-%m-%dT%H:%M:%S", schedule).unwrap();
        zone.to_ambiguous_timestamp(local).offset()
    }

    #[test]
    fn odd_local_times_are_skipped_or_repeated_by_their_zone() {
        let now: Timestamp = "2030-01-01T00:00:00Z".parse().unwrap();
        for name in &ZONES[..CHANGING] {
            let zone = podset_operator::api::at::time_zone(name).unwrap();
            for (fold, past) in [(false, true), (true, true), (false, false), (true, false)] {
                let local = odd_local(&zone, now, Odd { fold, past }).unwrap();
                let schedule = local.strftime("%Y-%m-%dT%H:%M:%S").to_string();
                let offset = read(&schedule, &zone);
                let odd = match offset {
                    jiff::tz::AmbiguousOffset::Gap { .. } => !fold,
                    jiff::tz::AmbiguousOffset::Fold { .. } => fold,
                    _ => false,
                };
                assert!(odd, "{name} {schedule}: {offset:?}, fold {fold}");
            }
        }
    }
}
