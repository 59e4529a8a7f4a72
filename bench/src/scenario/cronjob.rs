//! The At scenario's baseline: CronJobs on kube-controller-manager's cronjob and job controllers.

use anyhow::Result;
use jiff::Timestamp;
use jiff::tz::TimeZone;
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::NS;
use crate::workload::{create_each, names};

/// `n` CronJobs due once, at `due` (a whole minute, UTC).
pub async fn create(client: &Client, n: usize, due: Timestamp) -> Result<()> {
    let at = due.to_zoned(TimeZone::UTC);
    // minute hour day-of-month month day-of-week: that one minute of the year.
    let schedule = format!(
        "{} {} {} {} *",
        at.minute(),
        at.hour(),
        at.day(),
        at.month()
    );
    let cronjobs = names("cron", n)
        .iter()
        .map(|name| cronjob(name, &schedule))
        .collect::<Result<_>>()?;
    create_each(&Api::<CronJob>::namespaced(client.clone(), NS), cronjobs).await
}

/// A CronJob whose Job runs one busybox pod `echo YAY` once, like an At's.
fn cronjob(name: &str, schedule: &str) -> Result<CronJob> {
    let container =
        json!({ "name": "busybox", "image": "busybox", "command": ["sh", "-c", "echo YAY"] });
    Ok(serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "schedule": schedule,
            // kube-controller-manager's own time zone is the host's.
            "timeZone": "Etc/UTC",
            // Late is measured, never skipped.
            "startingDeadlineSeconds": 120,
            "concurrencyPolicy": "Forbid",
            "jobTemplate": { "spec": {
                "backoffLimit": 0,
                "template": { "spec": { "restartPolicy": "Never", "containers": [container] } },
            } },
        },
    }))?)
}

/// The CronJob a Job's pod runs for: the CronJob controller names its Jobs
/// `<cronjob>-<scheduled unix time / 60>`.
pub fn cronjob_of(pod: &Pod) -> Option<String> {
    let job = pod.labels().get("batch.kubernetes.io/job-name")?;
    let (cronjob, minutes) = job.rsplit_once('-')?;
    minutes
        .bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| cronjob.to_string())
}
