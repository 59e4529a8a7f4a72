//! A pod's graceful deletion, as the API server does it: what a delete does to a pod (see
//! [`super::Store::delete`]).

use jiff::Timestamp;
use serde_json::Value;

use super::seconds;

/// How long a deleted pod is given to stop, unless the request says otherwise.
const POD_GRACE_SECONDS: i64 = 30;

/// What a delete does to a pod.
pub(super) enum Grace {
    /// Remove it as it is: it was marked with no grace already.
    Now,
    /// Nothing: it is terminating, within no more than the grace asked.
    Pending,
    /// Store it marked so, with this grace (none: then remove it).
    Mark(Value, i64),
}

/// A pod's graceful deletion, as the API server's (`rest.BeforeDelete` and the pod strategy):
/// the first delete marks it with a `deletionTimestamp` after the grace asked for (else its
/// spec's, 30 s by default; none if it is unscheduled or finished) and a new generation; a
/// later one may only shorten the grace, never into the past.
pub(super) fn grace(pod: &Value, requested: Option<i64>, now: Timestamp) -> Grace {
    let at_least_one = |g: i64| if g < 0 { 1 } else { g };
    let requested = requested.map(at_least_one);
    let meta = &pod["metadata"];
    let mut marked = pod.clone();
    let (deadline, period) = match meta["deletionTimestamp"].as_str() {
        Some(since) => {
            let current = meta["deletionGracePeriodSeconds"].as_i64().unwrap_or(0);
            if current == 0 {
                return Grace::Now;
            }
            let Some(period) = requested.filter(|p| *p < current) else {
                return Grace::Pending;
            };
            let since: Timestamp = since.parse().unwrap_or(now);
            let deadline = since + jiff::SignedDuration::from_secs(period - current);
            match deadline < now {
                true => (now, period.min(1)),
                false => (deadline, period),
            }
        }
        None => {
            let scheduled = pod["spec"]["nodeName"]
                .as_str()
                .is_some_and(|n| !n.is_empty());
            let finished = matches!(
                pod["status"]["phase"].as_str(),
                Some("Succeeded" | "Failed")
            );
            let period = match scheduled && !finished {
                true => requested
                    .or(pod["spec"]["terminationGracePeriodSeconds"].as_i64())
                    .map_or(POD_GRACE_SECONDS, at_least_one),
                false => 0,
            };
            let generation = meta["generation"].as_i64().unwrap_or(0);
            if generation > 0 {
                marked["metadata"]["generation"] = (generation + 1).into();
            }
            (now + jiff::SignedDuration::from_secs(period), period)
        }
    };
    marked["metadata"]["deletionTimestamp"] = seconds(deadline).into();
    marked["metadata"]["deletionGracePeriodSeconds"] = period.into();
    Grace::Mark(marked, period)
}
