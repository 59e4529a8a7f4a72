//! The pod that runs an At's command.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, PodSchedulingGate, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};

use super::{GATE, pod_name};
use crate::api::{
    AT_COMMAND_CONTAINER, AT_GENERATION_ANNOTATION, At, BUSYBOX_IMAGE, MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
};
use crate::plan::owned;

/// The pod that runs the command once: `sh -c`, so shell syntax works, and
/// `restartPolicy: Never`, so a failing command ends as Failed instead of restarting. Gated
/// ([`GATE`]): no node runs it until the At has recorded it and released it.
pub fn pod_for(at: &At) -> Pod {
    let labels = BTreeMap::from([
        ("app".to_string(), at.name_any()),
        (MANAGED_BY_LABEL.to_string(), MANAGED_BY_VALUE.to_string()),
    ]);
    Pod {
        metadata: ObjectMeta {
            name: Some(pod_name(at)),
            namespace: at.namespace(),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([(
                AT_GENERATION_ANNOTATION.to_string(),
                at.meta().generation.unwrap_or_default().to_string(),
            )])),
            owner_references: Some(vec![owned::controller_ref(at)]),
            ..Default::default()
        },
        spec: Some(PodSpec {
            scheduling_gates: Some(vec![PodSchedulingGate { name: GATE.into() }]),
            restart_policy: Some("Never".into()),
            automount_service_account_token: Some(false),
            security_context: Some(owned::restricted_pod_security_context()),
            containers: vec![Container {
                name: AT_COMMAND_CONTAINER.into(),
                image: Some(at.spec.image.as_deref().unwrap_or(BUSYBOX_IMAGE).into()),
                command: Some(vec!["sh".into(), "-c".into(), at.spec.command.clone()]),
                security_context: Some(owned::restricted_container_security_context()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    }
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
        assert!(made.gated);
    }

    #[test]
    fn pod_runs_the_command_once_through_a_shell_restricted() {
        let mut at = at_with(None);
        at.spec.command = "echo YAY && exit 3".into();
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

    /// Issue 45, fault 8: the command runs in the image the At names, else in a pinned busybox.
    #[test]
    fn pod_runs_in_the_ats_image_or_a_pinned_busybox() {
        let mut at = at_with(None);
        let image = |at: &At| pod_for(at).spec.unwrap().containers[0].image.clone();
        assert_eq!(image(&at).as_deref(), Some("busybox:1.37.0"));
        at.spec.image = Some("registry.example.com/tools:2.1".into());
        assert_eq!(
            image(&at).as_deref(),
            Some("registry.example.com/tools:2.1")
        );
    }
}
