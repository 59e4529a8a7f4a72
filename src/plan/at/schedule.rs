//! When an At is due: its `spec.schedule` read in its time zone (UTC by default, or by a
//! trailing `Z`), and how long is left.

use std::time::Duration;

use jiff::Timestamp;
use jiff::civil::DateTime;
use jiff::tz::TimeZone;

use crate::api::AtSpec;
use crate::api::at::time_zone;

/// The schedule's shape (the CRD's pattern enforces it), the `Z` left out.
const LOCAL_FORMAT: &str = "%Y-%m-%dT%H:%M:%S";

/// The longest single wait. The wait is timed on the monotonic clock but computed from the
/// wall clock, which can be stepped (NTP, a VM resumed): a look every minute bounds how late a
/// clock stepped back and then corrected can make an At. It costs a reconcile a minute per
/// waiting At, and no request.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// Why a schedule cannot be read: the condition's reason, and the message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unscheduled {
    pub reason: &'static str,
    pub message: String,
}

/// When `spec` is due: its schedule read as a UTC time if it ends in `Z`, else as a local
/// time in its zone (UTC if none). A local time that a daylight-saving change skips is read as
/// that much later, one that comes twice as the first (jiff's compatible disambiguation, as
/// RFC 5545). The schema's pattern lets through dates that do not exist (February 30th, hour
/// 25) and the CRD's rules zones that do not: those are refused here, with why.
pub fn due(spec: &AtSpec) -> Result<Timestamp, Unscheduled> {
    let zone = match spec.time_zone.as_deref() {
        Some(name) => time_zone(name).map_err(|message| Unscheduled {
            reason: super::REASON_UNKNOWN_TIME_ZONE,
            message,
        })?,
        None => TimeZone::UTC,
    };
    parse_schedule(&spec.schedule, zone).map_err(|message| Unscheduled {
        reason: super::REASON_INVALID_SCHEDULE,
        message,
    })
}

/// Parses `schedule` as a UTC time if it ends in `Z`, else as a local time in `zone`.
pub fn parse_schedule(schedule: &str, zone: TimeZone) -> Result<Timestamp, String> {
    let (local, zone) = match schedule.strip_suffix('Z') {
        Some(utc) => (utc, TimeZone::UTC),
        None => (schedule, zone),
    };
    DateTime::strptime(LOCAL_FORMAT, local)
        .and_then(|dt| dt.to_zoned(zone))
        .map(|z| z.timestamp())
        .map_err(|e| {
            format!(
                "schedule {schedule:?} is not a valid time (YYYY-MM-DDThh:mm:ss, Z for UTC): {e}"
            )
        })
}

/// How long until `schedule`, or `None` once it is due (a past schedule is due at once).
pub fn until_due(schedule: Timestamp, now: Timestamp) -> Option<Duration> {
    Duration::try_from(schedule.duration_since(now))
        .ok()
        .filter(|d| !d.is_zero())
}

/// How long to wait, from `now`, for a look decided for `wake`: at most [`MAX_WAIT`], however
/// far `now` has moved since the look was decided (a wall clock stepped back between the
/// decision and the wait being armed would otherwise put the look that much later).
pub fn wait_for(wake: Timestamp, now: Timestamp) -> Duration {
    until_due(wake, now).unwrap_or_default().min(MAX_WAIT)
}
