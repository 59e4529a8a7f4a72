//! A pod that left the operator's watch: someone took its `app.kubernetes.io/managed-by`
//! label off, or changed it, after it was made. The operator no longer counts it and makes
//! another, so the edited pod would run on in its owner's name, deleted with it, counted by
//! nobody. The ReplicaSet controller releases such a pod (`ClaimPods`: a pod whose labels no
//! longer match the selector loses its controller reference), and so does the operator: the
//! pod runs on as an orphan, its own person's to keep or delete (issue 45, fault 6).

use json_patch::Patch;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use serde_json::json;

use crate::api::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};

/// The JSON patch that takes `owner_uid`'s controller reference off `pod`, if `pod` left the
/// operator's watch and still names it: tested against the pod's UID and the reference's, so
/// that it never touches a pod made since under the name, or a reference someone changed.
pub fn release(pod: &Pod, owner_uid: &str) -> Option<Patch> {
    if pod.metadata.deletion_timestamp.is_some()
        || pod.labels().get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY_VALUE)
    {
        return None;
    }
    let refs = pod.metadata.owner_references.as_deref().unwrap_or_default();
    let i = refs
        .iter()
        .position(|r| r.controller == Some(true) && r.uid == owner_uid)?;
    let ops = json!([
        {"op": "test", "path": "/metadata/uid", "value": pod.uid()?},
        {"op": "test", "path": format!("/metadata/ownerReferences/{i}/uid"), "value": owner_uid},
        {"op": "remove", "path": format!("/metadata/ownerReferences/{i}")},
    ]);
    Some(serde_json::from_value(ops).expect("a JSON patch"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(labels: serde_json::Value, deleting: bool) -> Pod {
        let mut pod: Pod = serde_json::from_value(json!({"metadata": {"name": "web-pod-x",
            "uid": "p1", "labels": labels, "ownerReferences": [
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "c1"},
                {"apiVersion": "app.example.com/v1alpha1", "kind": "PodSet", "name": "web",
                 "uid": "ps1", "controller": true}]}}))
        .unwrap();
        if deleting {
            pod.metadata.deletion_timestamp = Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
            );
        }
        pod
    }

    #[test]
    fn only_a_pod_that_left_the_watch_and_names_its_owner_is_released() {
        let edited = pod(
            json!({MANAGED_BY_LABEL: "someone-else", "app": "web"}),
            false,
        );
        let patch = serde_json::to_value(release(&edited, "ps1").unwrap()).unwrap();
        assert_eq!(
            patch,
            json!([
                {"op": "test", "path": "/metadata/uid", "value": "p1"},
                {"op": "test", "path": "/metadata/ownerReferences/1/uid", "value": "ps1"},
                {"op": "remove", "path": "/metadata/ownerReferences/1"},
            ])
        );
        assert!(
            release(&pod(json!({}), false), "ps1").is_some(),
            "label taken off"
        );
        let still_ours = pod(json!({MANAGED_BY_LABEL: MANAGED_BY_VALUE}), false);
        assert!(release(&still_ours, "ps1").is_none());
        assert!(
            release(&pod(json!({}), true), "ps1").is_none(),
            "being deleted"
        );
        assert!(release(&edited, "other").is_none(), "another owner's");
    }
}
