//! What an At's run is measured by: how late its pod was made, and how it ended.

use std::time::Duration;

use jiff::Timestamp;

use super::{REASON_DEADLINE_EXCEEDED, REASON_FAILED, REASON_POD_VANISHED, REASON_SUCCEEDED, due};
use crate::api::{At, AtPhase, AtStatus};
use crate::conditions;

/// How long after it was due an At's pod is made at `now`: after its schedule, or after the
/// At was made if that was later (an At made for a past time is due as it is made, to the
/// second the API server keeps). `None` for a schedule that cannot be read (no pod is made
/// for it).
pub fn lateness(at: &At, now: Timestamp) -> Option<Duration> {
    let scheduled = due(&at.spec).ok()?;
    let made = at.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let due = made.map_or(scheduled, |made| made.max(scheduled));
    Some(Duration::try_from(now.duration_since(due)).unwrap_or(Duration::ZERO))
}

/// The verdict of the At that `new` ends (DONE, where `old` was not): `succeeded`, `failed`,
/// `vanished` (its pod gone before its end was seen: not run again), or `deadline_exceeded`
/// (its command never started by its start deadline).
pub fn verdict(old: Option<&AtStatus>, new: &AtStatus) -> Option<&'static str> {
    let done = |s: Option<&AtStatus>| s.is_some_and(|s| s.phase == Some(AtPhase::Done));
    if !done(Some(new)) || done(old) {
        return None;
    }
    let completed = conditions::find(&new.conditions, super::CONDITION_COMPLETED);
    Some(match completed.map(|c| c.reason.as_str()) {
        Some(REASON_POD_VANISHED) => "vanished",
        Some(REASON_DEADLINE_EXCEEDED) => "deadline_exceeded",
        Some(REASON_SUCCEEDED) => "succeeded",
        Some(REASON_FAILED) => "failed",
        _ if new.succeeded == Some(true) => "succeeded",
        _ => "failed",
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::AtSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    fn at(schedule: &str) -> At {
        At::new("a", AtSpec::shell(schedule, "true"))
    }

    #[test]
    fn lateness_counts_from_the_schedule_and_is_never_negative() {
        let now: Timestamp = "2026-11-27T12:00:01.5Z".parse().unwrap();
        let late = |s| lateness(&at(s), now);
        assert_eq!(
            late("2026-11-27T12:00:00Z"),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(late("2026-11-27T12:00:05Z"), Some(Duration::ZERO));
        assert_eq!(late("2026-02-30T12:00:00Z"), None);
        let mut past = at("2019-04-12T10:12:00Z");
        past.metadata.creation_timestamp = Some(Time("2026-11-27T12:00:01Z".parse().unwrap()));
        assert_eq!(
            lateness(&past, now),
            Some(Duration::from_millis(500)),
            "due as made"
        );
    }

    fn status(phase: AtPhase, reason: &str, succeeded: bool) -> AtStatus {
        AtStatus {
            phase: Some(phase),
            succeeded: Some(succeeded),
            conditions: vec![Condition {
                type_: super::super::CONDITION_COMPLETED.into(),
                status: "True".into(),
                reason: reason.into(),
                message: String::new(),
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    Timestamp::UNIX_EPOCH,
                ),
                observed_generation: None,
            }],
            ..Default::default()
        }
    }

    #[test]
    fn an_at_is_judged_once_as_it_turns_done() {
        let running = status(AtPhase::Running, "Started", false);
        let cases = [
            (REASON_SUCCEEDED, true, "succeeded"),
            (REASON_FAILED, false, "failed"),
            (REASON_POD_VANISHED, false, "vanished"),
            (REASON_DEADLINE_EXCEEDED, false, "deadline_exceeded"),
        ];
        for (reason, succeeded, expected) in cases {
            let done = status(AtPhase::Done, reason, succeeded);
            assert_eq!(verdict(Some(&running), &done), Some(expected));
            assert_eq!(verdict(None, &done), Some(expected));
            assert_eq!(verdict(Some(&done), &done), None, "already DONE");
        }
        assert_eq!(verdict(None, &running), None);
    }
}
