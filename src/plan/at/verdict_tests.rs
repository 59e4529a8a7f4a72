//! The At plan's unit tests of its verdict: read from the command's container alone,
//! whatever containers admission added beside it (issue 45, fault 2).

use super::tests::{at_with, pod, record, ts};
use super::*;
use crate::conditions;
use crate::pod::Phase;

/// An At's pod, read from the API, with these container statuses (`init`: native sidecars).
fn pod_with(phase: &str, init: serde_json::Value, containers: serde_json::Value) -> CachedPod {
    let pod = serde_json::json!({
        "metadata": {"name": "example-at-pod", "namespace": "ns", "uid": "pod-uid",
            "ownerReferences": [{"apiVersion": "cnat.programming-kubernetes.info/v1beta1",
                "kind": "At", "name": "example-at", "uid": "at-uid", "controller": true}]},
        "spec": {"containers": [{"name": "busybox"}]},
        "status": {"phase": phase, "initContainerStatuses": init,
            "containerStatuses": containers},
    });
    CachedPod::from_pod(&serde_json::from_value(pod).unwrap())
}

/// A container status: `state` is `running`, or `terminated` with this code and reason.
fn container(name: &str, ended: Option<(i32, &str)>) -> serde_json::Value {
    let state = match ended {
        Some((code, reason)) => {
            serde_json::json!({"terminated": {"exitCode": code, "reason": reason}})
        }
        None => serde_json::json!({"running": {}}),
    };
    serde_json::json!({"name": name, "ready": false, "restartCount": 0, "image": "busybox",
        "imageID": "", "state": state})
}

/// Issue 45, fault 2: admission may add containers to the At's pod (a sidecar as a container
/// or as an init container that keeps running). The verdict, its exit code and its reason
/// (OOMKilled) are the command's container's alone, and the At ends when that container has,
/// whatever a sidecar still does.
#[test]
fn the_verdict_is_the_command_containers_alone() {
    let now = ts("2019-04-12T10:12:09Z");
    let at = at_with(Some(progress(&at_with(None), &pod(Phase::Pending), now)));
    let none = serde_json::json!([]);
    let proxy = |ended| serde_json::json!([container("a-proxy", ended)]);
    let cases = [
        // A sidecar container failed after the command succeeded: the pod Failed.
        (
            pod_with(
                "Failed",
                none.clone(),
                serde_json::json!([
                    container("a-proxy", Some((2, "Error"))),
                    container("busybox", Some((0, "Completed")))
                ]),
            ),
            true,
            "pod example-at-pod succeeded (exit code 0)",
        ),
        // A native sidecar killed as the pod ends, the command failed.
        (
            pod_with(
                "Failed",
                proxy(Some((137, "Error"))),
                serde_json::json!([container("busybox", Some((1, "Error")))]),
            ),
            false,
            "pod example-at-pod failed (exit code 1)",
        ),
        // A sidecar container still runs: the pod runs on, the command is done.
        (
            pod_with(
                "Running",
                none.clone(),
                serde_json::json!([
                    container("a-proxy", None),
                    container("busybox", Some((0, "Completed")))
                ]),
            ),
            true,
            "pod example-at-pod succeeded (exit code 0)",
        ),
        // The command ran out of memory: told as such.
        (
            pod_with(
                "Failed",
                proxy(Some((0, "Completed"))),
                serde_json::json!([container("busybox", Some((137, "OOMKilled")))]),
            ),
            false,
            "pod example-at-pod failed: OOMKilled (exit code 137)",
        ),
    ];
    for (pod, succeeded, message) in cases {
        let done = record(step_for(&at, Some(&pod), now));
        assert_eq!(
            (done.phase, done.succeeded),
            (Some(AtPhase::Done), Some(succeeded)),
            "{pod:?}"
        );
        let c = conditions::find(&done.conditions, CONDITION_COMPLETED).unwrap();
        assert_eq!(c.message, message, "{pod:?}");
    }
    // The command still runs, whatever a sidecar did: RUNNING.
    let sidecar_ended = pod_with(
        "Running",
        none,
        serde_json::json!([
            container("a-proxy", Some((1, "Error"))),
            container("busybox", None)
        ]),
    );
    let running = record(step_for(&at, Some(&sidecar_ended), now));
    assert_eq!(
        (running.phase, running.succeeded),
        (Some(AtPhase::Running), None)
    );
}
