//! A pod that left the operator's watch: someone took its `app.kubernetes.io/managed-by`
//! label off, or changed it, after it was made. The operator no longer counts it and makes
//! another, so the edited pod would run on in its owner's name, deleted with it, counted by
//! nobody. The ReplicaSet controller releases such a pod (`ClaimPods`: a pod whose labels no
//! longer match the selector loses its controller reference), and so does the operator: the
//! pod runs on as an orphan, its own person's to keep or delete (issue 45, fault 6).
//!
//! A pod admission stripped of the label as it was made is no person's: the operator deletes
//! it at once, but a crash (or a lost answer) between the create and the delete left it
//! running unseen (issue 45, fault 7). The API server tells the two apart: it records the
//! fields a create set before admission changes them, so the operator's own entry in
//! `managedFields` still claims the label admission took away, while a person who removed
//! or changed it later took it out of that entry.

use json_patch::Patch;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
use kube::ResourceExt;
use serde_json::json;

use crate::api::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};

/// The field manager the API server names the operator's writes by: its user agent's product
/// (`client::user_agent`).
const FIELD_MANAGER: &str = "podset-operator";

/// What becomes of a pod of `owner_uid`'s that is out of the operator's watch.
#[derive(Debug, PartialEq)]
pub enum Stray {
    /// A person edited its label: release it with this JSON patch.
    Release(Patch),
    /// Admission hid it as it was made: delete it.
    Delete,
}

/// What to do with `pod`, if it is out of the operator's watch and names `owner_uid` as its
/// controller.
pub fn stray(pod: &Pod, owner_uid: &str) -> Option<Stray> {
    let patch = release(pod, owner_uid)?;
    let fields = pod.metadata.managed_fields.as_deref().unwrap_or_default();
    Some(match fields.iter().any(claims_the_label) {
        true => Stray::Delete,
        false => Stray::Release(patch),
    })
}

/// Whether `entry`, the operator's, claims the label: set by its create, never taken off.
fn claims_the_label(entry: &ManagedFieldsEntry) -> bool {
    let Some(fields) = entry.fields_v1.as_ref() else {
        return false;
    };
    entry.manager.as_deref() == Some(FIELD_MANAGER)
        && !fields.0["f:metadata"]["f:labels"][format!("f:{MANAGED_BY_LABEL}")].is_null()
}

/// Whether `pod` is out of the operator's watch (its label edited) and not being deleted.
pub fn out_of_watch(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod.labels().get(MANAGED_BY_LABEL).map(String::as_str) != Some(MANAGED_BY_VALUE)
}

/// The JSON patch that takes `owner_uid`'s controller reference off `pod`, if `pod` left the
/// operator's watch and still names it: tested against the pod's UID and the reference's, so
/// that it never touches a pod made since under the name, or a reference someone changed.
fn release(pod: &Pod, owner_uid: &str) -> Option<Patch> {
    if !out_of_watch(pod) {
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
                {"apiVersion": "app.example.com/v1beta1", "kind": "PodSet", "name": "web",
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

    /// Issue 45, fault 7: what kube-apiserver 1.37 records of a create whose label a
    /// mutating policy took away, and after a person took another label off.
    #[test]
    fn a_pod_admission_hid_at_its_create_is_deleted_one_a_person_edited_is_released() {
        let entry = |labels: serde_json::Value, manager: &str| {
            json!([{"apiVersion": "v1", "fieldsType": "FieldsV1", "manager": manager,
                "operation": "Update", "fieldsV1": {"f:metadata": {"f:labels": labels}}}])
        };
        let with = |fields| {
            let mut p = pod(json!({"version": "v0.1"}), false);
            p.metadata.managed_fields = Some(serde_json::from_value(fields).unwrap());
            p
        };
        let ghost = json!({".": {}, "f:app.kubernetes.io/managed-by": {}, "f:version": {}});
        let hidden = with(entry(ghost.clone(), "podset-operator"));
        assert_eq!(stray(&hidden, "ps1"), Some(Stray::Delete));
        let edited = with(entry(json!({".": {}, "f:version": {}}), "podset-operator"));
        assert!(matches!(stray(&edited, "ps1"), Some(Stray::Release(_))));
        let others = with(entry(ghost, "kubectl-edit"));
        assert!(matches!(stray(&others, "ps1"), Some(Stray::Release(_))));
    }
}
