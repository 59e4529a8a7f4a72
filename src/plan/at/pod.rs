//! The pod that runs an At's command: its template, with what the at-most-once protocol
//! needs added to whatever the template holds.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, PodSchedulingGate};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};

use super::{GATE, pod_name};
use crate::api::{
    AT_COMMAND_CONTAINER, AT_CONTAINER_ANNOTATION, AT_GENERATION_ANNOTATION, At, BUSYBOX_IMAGE,
    MANAGED_BY_LABEL, MANAGED_BY_VALUE,
};
use crate::plan::owned;

/// The pod that runs the command once, from the At's template: `restartPolicy: Never`, so a
/// failing command ends as Failed instead of restarting; gated ([`GATE`], beside any gate
/// the template holds): no node runs it until the At has recorded it and released it. It is
/// labelled and owned as the operator's, and says which generation of the At it was made
/// from and which container's exit is the verdict. Without their own, the pod and each
/// container run under the restricted security profile and mount no ServiceAccount token; a
/// container without an image runs busybox.
pub fn pod_for(at: &At) -> Pod {
    let template = (*at.spec.template).clone();
    let meta = template.metadata.unwrap_or_default();
    let mut labels = meta.labels.unwrap_or_default();
    labels.insert("app".into(), at.name_any());
    labels.insert(MANAGED_BY_LABEL.into(), MANAGED_BY_VALUE.into());
    let mut annotations: BTreeMap<String, String> = meta.annotations.unwrap_or_default();
    annotations.insert(
        AT_GENERATION_ANNOTATION.into(),
        at.meta().generation.unwrap_or_default().to_string(),
    );
    let container = at
        .spec
        .command_container()
        .map_or(AT_COMMAND_CONTAINER, |c| c.name.as_str());
    annotations.insert(AT_CONTAINER_ANNOTATION.into(), container.into());
    let mut spec = template.spec.unwrap_or_default();
    spec.restart_policy = Some("Never".into());
    spec.scheduling_gates
        .get_or_insert_default()
        .push(PodSchedulingGate { name: GATE.into() });
    spec.automount_service_account_token.get_or_insert(false);
    spec.security_context
        .get_or_insert_with(owned::restricted_pod_security_context);
    for c in &mut spec.containers {
        c.image.get_or_insert_with(|| BUSYBOX_IMAGE.into());
        c.security_context
            .get_or_insert_with(owned::restricted_container_security_context);
    }
    Pod {
        metadata: ObjectMeta {
            name: Some(pod_name(at)),
            namespace: at.namespace(),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: Some(vec![owned::controller_ref(at)]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// Where the At's gate is among its pod's gates as [`pod_for`] makes it: after the template's.
/// Admission may have put others before it since.
pub fn gate_index(at: &At) -> usize {
    let spec = at.spec.template.spec.as_ref();
    spec.and_then(|s| s.scheduling_gates.as_ref())
        .map_or(0, Vec::len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::at::tests::at_with;
    use crate::pod::CachedPod;

    /// The pod carries the generation it was made from.
    #[test]
    fn the_pod_says_which_generation_it_was_made_from() {
        let mut at = at_with(None);
        at.metadata.generation = Some(4);
        let made = CachedPod::from_pod(&pod_for(&at));
        assert_eq!(made.made_from(), Some(4));
        assert!(made.gated());
    }

    #[test]
    fn pod_runs_the_command_once_through_a_shell_restricted() {
        let mut at = at_with(None);
        at.spec = crate::api::AtSpec::shell(at.spec.schedule.clone(), "echo YAY && exit 3");
        let pod = pod_for(&at);
        assert_eq!(pod.metadata.name.as_deref(), Some("example-at-pod"));
        assert_eq!(pod.metadata.namespace.as_deref(), Some("ns"));
        let labels = pod.metadata.labels.unwrap();
        assert_eq!(labels.get("app").map(String::as_str), Some("example-at"));
        assert_eq!(
            labels.get(MANAGED_BY_LABEL).map(String::as_str),
            Some(MANAGED_BY_VALUE)
        );
        let owner = &pod.metadata.owner_references.unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("At", "at-uid"));
        assert_eq!(
            (owner.controller, owner.block_owner_deletion),
            (Some(true), Some(true))
        );
        let spec = pod.spec.unwrap();
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        assert_eq!(spec.automount_service_account_token, Some(false));
        let psc = spec.security_context.unwrap();
        assert_eq!(psc.run_as_non_root, Some(true));
        assert!(psc.run_as_user.is_some_and(|u| u != 0));
        let c = &spec.containers[0];
        assert_eq!(
            c.image.as_deref(),
            Some(crate::api::BUSYBOX_IMAGE),
            "pinned"
        );
        assert_eq!(
            c.command.as_deref().unwrap(),
            ["sh", "-c", "echo YAY && exit 3"]
        );
        let sc = c.security_context.as_ref().unwrap();
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(
            sc.capabilities.as_ref().unwrap().drop.as_deref().unwrap(),
            ["ALL"]
        );
        assert_eq!(sc.seccomp_profile.as_ref().unwrap().type_, "RuntimeDefault");
    }

    /// The command runs in the image its container names, else in a pinned busybox.
    #[test]
    fn pod_runs_in_the_ats_image_or_a_pinned_busybox() {
        let mut at = at_with(None);
        let image = |at: &At| pod_for(at).spec.unwrap().containers[0].image.clone();
        assert_eq!(image(&at).as_deref(), Some("busybox:1.37.0"));
        at.spec.command_container_mut().unwrap().image =
            Some("registry.example.com/tools:2.1".into());
        assert_eq!(
            image(&at).as_deref(),
            Some("registry.example.com/tools:2.1")
        );
    }
}
