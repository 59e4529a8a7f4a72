//! The At (cnat) operator end to end, on a real control plane without scheduler or nodes:
//! pods stay unscheduled and the test plays the kubelet, moving them through Running to
//! Succeeded or Failed by writing `pods/status`.

mod admission;
mod failures;
mod restart;
mod schedule;
mod webhook;

use anyhow::{Result, bail};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use podset_operator::api::{At, AtPhase, AtStatus};
use podset_operator::plan::at::{CONDITION_COMPLETED, REASON_STARTED};
use testenv::harness::{Operator, PROMPTLY, TestNs, cluster_without_nodes, poll, poll_some};

/// A namespace on the node-less cluster, with the At controller running in it.
async fn setup(prefix: &str) -> Result<(TestNs, Operator, Api<At>)> {
    let ns = TestNs::new_in(cluster_without_nodes().await?, prefix).await?;
    let operator = ns.start_operator(&["--controllers=at"]).await?;
    let api = ns.api::<At>();
    Ok((ns, operator, api))
}

fn status(at: &At) -> AtStatus {
    at.status.clone().unwrap_or_default()
}

/// (status, reason, message) of a condition.
fn condition(at: &At, type_: &str) -> Option<(String, String, String)> {
    status(at)
        .conditions
        .into_iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status, c.reason, c.message))
}

async fn wait_for(ns: &TestNs, name: &str, what: &str, check: impl Fn(&At) -> bool) -> Result<At> {
    let api = ns.api::<At>();
    poll_some(PROMPTLY, &format!("at {name}: {what}"), || async {
        let at = api.get(name).await?;
        Ok(check(&at).then_some(at))
    })
    .await
}

/// RUNNING with its pod made: RUNNING alone is written before the pod is created.
async fn wait_started(ns: &TestNs, name: &str) -> Result<At> {
    wait_for(ns, name, "RUNNING with its pod created", |at| {
        status(at).phase == Some(AtPhase::Running)
            && condition(at, CONDITION_COMPLETED).is_some_and(|(_, r, _)| r == REASON_STARTED)
    })
    .await
}

async fn wait_phase(ns: &TestNs, name: &str, phase: AtPhase) -> Result<At> {
    wait_for(ns, name, &format!("phase {phase:?}"), |at| {
        status(at).phase == Some(phase)
    })
    .await
}

/// The At's pods, which must be exactly one, named `<at>-pod`.
async fn only_pod(ns: &TestNs, at: &At) -> Result<Pod> {
    let mut pods = ns.pods_of(&at.uid().unwrap()).await?;
    if pods.len() != 1 {
        bail!(
            "at {} has {} pods: {:?}",
            at.name_any(),
            pods.len(),
            pods.iter().map(|p| p.name_any()).collect::<Vec<_>>()
        );
    }
    let pod = pods.remove(0);
    assert_eq!(pod.name_any(), format!("{}-pod", at.name_any()));
    Ok(pod)
}

/// (type, reason) of the events about `name`.
async fn events_about(ns: &TestNs, name: &str) -> Result<Vec<(String, String)>> {
    let events = ns.api::<Event>().list(&ListParams::default()).await?;
    Ok(events
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| (e.type_.unwrap_or_default(), e.reason.unwrap_or_default()))
        .collect())
}

async fn wait_event(ns: &TestNs, name: &str, type_: &str, reason: &str) -> Result<()> {
    poll(
        PROMPTLY,
        &format!("{type_} event {reason} about {name}"),
        || async {
            Ok(events_about(ns, name)
                .await?
                .iter()
                .any(|(t, r)| t == type_ && r == reason))
        },
    )
    .await
}
