//! What admission may change of a pod the operator creates, and what the operator cannot live
//! with: the label its pod watch selects on, and the controller reference it counts pods by.
//! A mutating webhook or policy that takes either away hides the pod from the operator, which
//! would wait for it, give up, and make another: a pod leaked every expectations timeout,
//! with nothing said (issue 31, item 5).

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use crate::api::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};

/// Why the operator cannot see `made`, the pod admission stored for `sent`, if it cannot.
pub fn hidden(sent: &Pod, made: &Pod) -> Option<String> {
    let label = made.labels().get(MANAGED_BY_LABEL).map(String::as_str);
    let controller = |p: &Pod| -> Option<String> {
        let refs = p.metadata.owner_references.as_ref()?;
        let r = refs.iter().find(|r| r.controller == Some(true))?;
        Some(r.uid.clone())
    };
    let changed = if label != Some(MANAGED_BY_VALUE) {
        format!("without the label {MANAGED_BY_LABEL}={MANAGED_BY_VALUE}")
    } else if controller(made) != controller(sent) {
        "with another controller reference".to_string()
    } else {
        return None;
    };
    Some(format!(
        "pod {} was admitted {changed}, which the operator finds its pods by: it could not \
         see it, so it deleted it. A mutating admission webhook or policy changed it; exclude \
         pods labelled {MANAGED_BY_LABEL}={MANAGED_BY_VALUE} from it",
        made.name_any()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(labels: serde_json::Value, owner: &str) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "web-pod-x", "labels": labels,
            "ownerReferences": [{"apiVersion": "app.example.com/v1beta1", "kind": "PodSet",
                "name": "web", "uid": owner, "controller": true}]}}))
        .unwrap()
    }

    #[test]
    fn additions_are_fine_and_a_lost_label_or_owner_is_told() {
        let ours = json!({MANAGED_BY_LABEL: MANAGED_BY_VALUE, "app": "web"});
        let sent = pod(ours.clone(), "u1");
        assert_eq!(hidden(&sent, &sent), None);
        let added = json!({MANAGED_BY_LABEL: MANAGED_BY_VALUE, "app": "web", "team": "x"});
        assert_eq!(hidden(&sent, &pod(added, "u1")), None);

        let stripped = hidden(&sent, &pod(json!({"app": "web"}), "u1")).unwrap();
        assert!(
            stripped.contains("without the label app.kubernetes.io/managed-by"),
            "{stripped}"
        );
        let moved = hidden(&sent, &pod(ours, "u2")).unwrap();
        assert!(moved.contains("another controller reference"), "{moved}");
    }
}
