//! Waits for what the operator does: a PodSet converged, an At's pod released, failed creates
//! backing off, and admission's changes taken up by the API server.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{DeleteParams, ListParams, PostParams};
use podset_operator::api::PodSet;
use podset_operator::plan::podset::CONDITION_AVAILABLE;

use super::{TestNs, condition, phase};
use crate::{poll, poll_some};

/// Short deadline for things the operator should do promptly.
pub const PROMPTLY: Duration = Duration::from_secs(60);

/// Waits until the PodSet has exactly `n` Running pods of its own and its status names them.
pub async fn converged(ns: &TestNs, name: &str, n: usize) -> Result<Vec<Pod>> {
    converged_within(PROMPTLY, ns, name, n).await
}

/// [`converged`], waiting up to `deadline`.
pub async fn converged_within(
    deadline: Duration,
    ns: &TestNs,
    name: &str,
    n: usize,
) -> Result<Vec<Pod>> {
    let api = ns.api::<PodSet>();
    poll_some(
        deadline,
        &format!("podset {name} to have {n} Running pods named in its status"),
        || async {
            let ps = api.get(name).await?;
            let pods: Vec<Pod> = ns
                .pods_of(&ps.uid().unwrap())
                .await?
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .collect();
            let mut names: Vec<String> = pods.iter().map(|p| p.name_any()).collect();
            names.sort();
            let status = ps.status.clone().unwrap_or_default();
            let ready = pods.iter().filter(|p| is_ready(p)).count();
            let ok = pods.len() == n
                && pods.iter().all(|p| phase(p) == "Running")
                && status.pod_names == names
                && status.available_replicas == n as i32
                && status.ready_replicas == ready as i32
                && status.observed_generation == ps.metadata.generation
                && condition(&ps, CONDITION_AVAILABLE).is_some_and(|c| c.0 == "True");
            Ok(ok.then_some(pods))
        },
    )
    .await
}

/// The pod's Ready condition is True.
fn is_ready(pod: &Pod) -> bool {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// Waits until At `name`'s pod exists and is released from its scheduling gate (the
/// scheduler, or a test playing it, may look at it); the pod.
pub async fn at_pod_released(ns: &TestNs, name: &str) -> Result<Pod> {
    let pods = ns.api::<Pod>();
    let pod_name = format!("{name}-pod");
    poll_some(
        PROMPTLY,
        &format!("At {name}'s pod made and released"),
        || async {
            let released = |p: &Pod| {
                p.spec
                    .as_ref()
                    .is_some_and(|s| s.scheduling_gates.as_ref().is_none_or(Vec::is_empty))
            };
            Ok(pods.get_opt(&pod_name).await?.filter(released))
        },
    )
    .await
}

/// Waits for a FailedCreate Warning event in the namespace, then checks that the failed
/// creates are retried with a backoff, not in a hot loop: at most 5 more in 10 s, counted
/// through the Warning events (a repeat becomes an event series with a count).
pub async fn failed_creates_back_off(ns: &TestNs) -> Result<()> {
    let events = ns.api::<Event>();
    poll(PROMPTLY, "a FailedCreate Warning event", || async {
        let list = events.list(&ListParams::default()).await?;
        Ok(list.items.iter().any(|e| {
            e.reason.as_deref() == Some("FailedCreate") && e.type_.as_deref() == Some("Warning")
        }))
    })
    .await?;
    let attempts = |list: &[Event]| -> i32 {
        list.iter()
            .filter(|e| e.reason.as_deref() == Some("FailedCreate"))
            .map(|e| e.series.as_ref().map_or(1, |s| s.count))
            .sum()
    };
    let before = attempts(&events.list(&ListParams::default()).await?.items);
    let window = tokio::time::Instant::now();
    tokio::time::sleep_until(window + Duration::from_secs(10)).await; // observation window, not a wait
    let after = attempts(&events.list(&ListParams::default()).await?.items);
    anyhow::ensure!(
        after - before <= 5,
        "{} failed attempts in 10 s: not backing off",
        after - before
    );
    Ok(())
}

impl TestNs {
    /// Creates probe pods (busybox, with `labels`) in this namespace until `taken_up` says
    /// admission's change shows: it is given the pod as stored (deleted again at once), or
    /// the API server's refusal. The API server takes a moment to take up a new admission
    /// object; `what` names the change.
    pub async fn probe_pod_creates(
        &self,
        what: &str,
        labels: &[(&str, &str)],
        taken_up: impl Fn(Result<&Pod, &str>) -> bool,
    ) -> Result<()> {
        let pods = self.api::<Pod>();
        let tries = AtomicUsize::new(0);
        poll(PROMPTLY, what, || async {
            let n = tries.fetch_add(1, Ordering::Relaxed);
            let probe: Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("probe-{n}"), "labels": labels
                    .iter().map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<std::collections::BTreeMap<_, _>>()},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            }))?;
            match pods.create(&PostParams::default(), &probe).await {
                Err(kube::Error::Api(s)) => Ok(taken_up(Err(&s.message))),
                Err(e) => Err(e.into()),
                Ok(made) => {
                    let dp = DeleteParams::default().grace_period(0);
                    pods.delete(&made.name_any(), &dp).await?;
                    Ok(taken_up(Ok(&made)))
                }
            }
        })
        .await
    }
}
