//! The objects tests make and the checks of what the operator made of them.

use anyhow::{Result, ensure};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use podset_operator::api::at::v1alpha1;
use podset_operator::api::{At, AtSpec, PodSet, PodSetSpec};

use super::TestNs;

/// An At (v1beta1) running `command` through `sh -c` in busybox at `schedule`: what the
/// book's v1alpha1 At says, in the stored version.
pub fn at(name: &str, schedule: &str, command: &str) -> At {
    At::new(name, AtSpec::shell(schedule, command))
}

/// The book's At (v1alpha1, converted by the webhook): `command` at `schedule`.
pub fn alpha_at(name: &str, schedule: &str, command: &str) -> v1alpha1::At {
    v1alpha1::At::new(
        name,
        v1alpha1::AtSpec {
            schedule: schedule.into(),
            command: command.into(),
            image: None,
            start_deadline_seconds: None,
        },
    )
}

pub fn podset(name: &str, replicas: i32) -> PodSet {
    PodSet::new(
        name,
        PodSetSpec {
            replicas,
            template: None,
        },
    )
}

/// The PodSet's condition `type_`: its status, reason and message.
pub fn condition(ps: &PodSet, type_: &str) -> Option<(String, String, String)> {
    ps.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

pub fn phase(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

/// Fails unless `pod` runs exactly an At's `command`, as `sh -c`.
pub fn ensure_runs_command(pod: &Pod, command: &str) -> Result<()> {
    let ran = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .map(|c| c.command.clone());
    let want = vec!["sh".to_string(), "-c".into(), command.into()];
    ensure!(
        ran == Some(Some(want)),
        "the pod's command is not the At's: {ran:.200?}"
    );
    Ok(())
}

/// Plays the kubelet: the pod's phase, and for a finished pod its container's exit code.
pub async fn set_pod_phase(
    ns: &TestNs,
    pod: &str,
    phase: &str,
    exit_code: Option<i32>,
) -> Result<()> {
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let state = match exit_code {
        None => serde_json::json!({"running": {"startedAt": now}}),
        Some(code) => serde_json::json!({"terminated": {
            "exitCode": code,
            "reason": if code == 0 { "Completed" } else { "Error" },
            "startedAt": now, "finishedAt": now}}),
    };
    let patch = serde_json::json!({"status": {
        "phase": phase,
        "containerStatuses": [{
            "name": "busybox", "image": "busybox", "imageID": "", "restartCount": 0,
            "ready": exit_code.is_none(), "state": state,
        }],
    }});
    ns.api::<Pod>()
        .patch_status(pod, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// Labels namespace `ns` so that the API server enforces the `restricted` Pod Security
/// Standard there.
pub async fn enforce_restricted(client: &Client, ns: &str) -> Result<()> {
    Api::<Namespace>::all(client.clone())
        .patch(
            ns,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {
                "pod-security.kubernetes.io/enforce": "restricted",
                "pod-security.kubernetes.io/enforce-version": "latest",
            }}})),
        )
        .await?;
    Ok(())
}
