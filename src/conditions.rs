//! Status conditions that change only when their meaning changes, so an unchanged status
//! compares equal and is not written.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// The condition a status should carry, before timestamps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Desired<'a> {
    pub type_: &'a str,
    pub status: bool,
    pub reason: &'a str,
    pub message: String,
}

/// Builds a condition from `want`, keeping `lastTransitionTime` from `previous` when the
/// status did not flip.
pub fn condition(
    previous: &[Condition],
    want: Desired<'_>,
    generation: Option<i64>,
    now: Timestamp,
) -> Condition {
    let status = if want.status { "True" } else { "False" };
    let last_transition_time = previous
        .iter()
        .find(|c| c.type_ == want.type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(Time(now));
    Condition {
        type_: want.type_.to_string(),
        status: status.to_string(),
        reason: want.reason.to_string(),
        message: want.message,
        observed_generation: generation,
        last_transition_time,
    }
}

/// The condition of `type_`, if present.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_transition_time_while_status_holds() {
        let t0 = Timestamp::from_second(1_000).unwrap();
        let t1 = Timestamp::from_second(2_000).unwrap();
        let want = |status, reason: &'static str| Desired {
            type_: "Available",
            status,
            reason,
            message: "m".into(),
        };
        let first = condition(&[], want(false, "A"), Some(1), t0);
        assert_eq!(first.last_transition_time, Time(t0));
        let same = condition(std::slice::from_ref(&first), want(false, "B"), Some(2), t1);
        assert_eq!(
            same.last_transition_time,
            Time(t0),
            "reason changed, status did not"
        );
        assert_eq!(same.reason, "B");
        let flipped = condition(&[same], want(true, "B"), Some(2), t1);
        assert_eq!(flipped.last_transition_time, Time(t1));
        assert_eq!(flipped.status, "True");
    }
}
