//! Ats all due in the same second, and the baseline: as many CronJobs due in the same minute.

use std::time::Duration;

use anyhow::{Result, bail};
use jiff::{Timestamp, Unit};
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::{Client, ResourceExt};
use podset_operator::api::{At, AtSpec};

use crate::NS;
use crate::cli::{BenchArgs, Sizes};
use crate::env::{Env, Target};
use crate::report::Sample;
use crate::scenario::cronjob;
use crate::scenario::lateness::{FirstPods, OwnerOf, due_after};
use crate::workload::{create_each, names};

/// `s.ats` Ats (or CronJobs) all due at once: lateness of their pods, and duplicates.
pub async fn at_run(target: Target, args: &BenchArgs, s: &Sizes) -> Result<Sample> {
    let (unit, owner_of): (Unit, OwnerOf) = match target {
        Target::Operator => (Unit::Second, at_of),
        // Cron schedules have minute granularity.
        Target::CronJob => (Unit::Minute, cronjob::cronjob_of),
        Target::ReplicaSet(_) | Target::Floor => bail!("{} runs no Ats", target.label()),
    };
    let env = Env::start(target, &args.operator, "at").await?;
    // Creating 500 takes a few seconds.
    let lead = Duration::from_secs(if s.ats > 100 { 15 } else { 5 });
    let due = due_after(lead, unit)?;
    let pods = FirstPods::start(&env.client, owner_of);
    if target == Target::CronJob {
        cronjob::create(&env.client, s.ats, due).await?;
    } else {
        create_ats(&env.client, s.ats, due).await?;
    }
    pods.measure(s.ats, due).await
}

/// The At that controls a pod.
fn at_of(pod: &Pod) -> Option<String> {
    let owner = pod.owner_references().iter().find(|r| r.kind == "At")?;
    Some(owner.name.clone())
}

async fn create_ats(client: &Client, n: usize, due: Timestamp) -> Result<()> {
    let schedule = due.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let spec = AtSpec::shell(schedule, "echo YAY");
    let ats = names("at", n)
        .iter()
        .map(|name| At::new(name, spec.clone()))
        .collect();
    create_each(&Api::<At>::namespaced(client.clone(), NS), ats).await
}
