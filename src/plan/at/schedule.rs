//! When an At is due: its `spec.schedule` read as a UTC time, and how long is left.

use std::time::Duration;

use jiff::Timestamp;
use jiff::civil::DateTime;
use jiff::tz::TimeZone;

/// The only shape `spec.schedule` has (the CRD's pattern enforces it).
const SCHEDULE_FORMAT: &str = "%Y-%m-%dT%H:%M:%SZ";

/// The longest single wait. The wait is timed on the monotonic clock but computed from the
/// wall clock, which can be stepped (NTP, a VM resumed): a look every minute bounds how late a
/// clock stepped back and then corrected can make an At. It costs a reconcile a minute per
/// waiting At, and no request.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// Parses `spec.schedule` as a UTC time. The schema's pattern lets through dates that do not
/// exist (February 30th, hour 25); those are refused here, with jiff's explanation.
pub fn parse_schedule(schedule: &str) -> Result<Timestamp, String> {
    DateTime::strptime(SCHEDULE_FORMAT, schedule)
        .and_then(|dt| dt.to_zoned(TimeZone::UTC))
        .map(|z| z.timestamp())
        .map_err(|e| {
            format!("schedule {schedule:?} is not a valid UTC time (YYYY-MM-DDThh:mm:ssZ): {e}")
        })
}

/// How long until `schedule`, or `None` once it is due (a past schedule is due at once).
pub fn until_due(schedule: Timestamp, now: Timestamp) -> Option<Duration> {
    Duration::try_from(schedule.duration_since(now))
        .ok()
        .filter(|d| !d.is_zero())
}

/// How long to wait, from `now`, for a look decided for `wake`: at most [`MAX_WAIT`], however
/// far `now` has moved since the look was decided. A wall clock stepped back between the
/// decision and the wait being armed would otherwise put the look that much later (sim seed
/// 19302362: an hour and a half).
pub fn wait_for(wake: Timestamp, now: Timestamp) -> Duration {
    until_due(wake, now).unwrap_or_default().min(MAX_WAIT)
}
