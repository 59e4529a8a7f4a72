//! The pod a PodSet creates, decided without I/O.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use crate::api::{BUSYBOX_IMAGE, MANAGED_BY_LABEL, MANAGED_BY_VALUE, PodSet};
use crate::plan::owned;

/// The `version` label of every PodSet pod, as in the seeds.
pub const POD_VERSION: &str = "v0.1";

/// The label selector of a PodSet's pods.
pub fn selector(name: &str) -> String {
    format!("app={name},version={POD_VERSION}")
}

/// The pod to create for `ps`: its template (or busybox `sleep 3600`), the PodSet's labels,
/// and a controller ownerReference that blocks the owner's foreground deletion. Its
/// `generateName` is the prefix of the name the controller gives each pod ([`crate::plan::name`]).
pub fn pod_for(ps: &PodSet) -> Pod {
    let name = ps.name_any();
    let template = ps.spec.template.as_deref().cloned().unwrap_or_default();
    let template_meta = template.metadata.unwrap_or_default();
    let mut labels: BTreeMap<String, String> = template_meta.labels.unwrap_or_default();
    labels.insert("app".into(), name.clone());
    labels.insert("version".into(), POD_VERSION.into());
    labels.insert(MANAGED_BY_LABEL.into(), MANAGED_BY_VALUE.into());
    let owner = owned::controller_ref(ps);
    let mut spec = template.spec.unwrap_or_else(default_pod_spec);
    // As a ReplicaSet requires: a PodSet replaces pods that end, so containers restart in
    // place and no deadline ends a pod. The CRD refuses both (`api::podset`); a PodSet stored
    // before it did still makes pods that last (issue 45, fault 1: 38 pods in 90 s for 2).
    spec.restart_policy = Some("Always".into());
    spec.active_deadline_seconds = None;
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{name}-pod")),
            namespace: ps.namespace(),
            labels: Some(labels),
            annotations: template_meta.annotations,
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// The seeds' busybox pod under the restricted pod security profile.
fn default_pod_spec() -> PodSpec {
    PodSpec {
        automount_service_account_token: Some(false),
        security_context: Some(owned::restricted_pod_security_context()),
        containers: vec![Container {
            name: "busybox".into(),
            image: Some(BUSYBOX_IMAGE.into()),
            command: Some(vec!["sleep".into(), "3600".into()]),
            security_context: Some(owned::restricted_container_security_context()),
            ..Default::default()
        }],
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::fixtures::podset;
    use k8s_openapi::api::core::v1::PodTemplateSpec;

    #[test]
    fn default_pod_is_the_seeds_busybox_restricted() {
        let p = pod_for(&podset(1));
        assert_eq!(p.metadata.generate_name.as_deref(), Some("web-pod"));
        assert_eq!(p.metadata.namespace.as_deref(), Some("ns"));
        let labels = p.metadata.labels.unwrap();
        assert_eq!(labels["app"], "web");
        assert_eq!(labels["version"], "v0.1");
        assert_eq!(labels[MANAGED_BY_LABEL], MANAGED_BY_VALUE);
        let owner = &p.metadata.owner_references.unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("PodSet", "web", "ps-uid")
        );
        assert_eq!(
            (owner.controller, owner.block_owner_deletion),
            (Some(true), Some(true))
        );
        let spec = p.spec.unwrap();
        let c = &spec.containers[0];
        assert_eq!(
            (c.name.as_str(), c.image.as_deref()),
            ("busybox", Some(BUSYBOX_IMAGE))
        );
        assert_eq!(c.command.as_deref().unwrap(), ["sleep", "3600"]);
        let sc = c.security_context.as_ref().unwrap();
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(
            sc.capabilities.as_ref().unwrap().drop.as_deref().unwrap(),
            ["ALL"]
        );
        assert_eq!(sc.run_as_non_root, Some(true));
        assert!(
            sc.run_as_user.is_some_and(|u| u != 0),
            "busybox needs a non-root uid to start"
        );
        assert_eq!(sc.seccomp_profile.as_ref().unwrap().type_, "RuntimeDefault");
        assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
    }

    #[test]
    fn template_is_used_with_enforced_labels() {
        let mut ps = podset(1);
        let mut template: PodTemplateSpec = serde_json::from_value(serde_json::json!({
            "metadata": {"labels": {"tier": "web", "app": "spoofed"}, "annotations": {"a": "b"}},
            "spec": {"restartPolicy": "Never", "activeDeadlineSeconds": 30,
                "containers": [{"name": "nginx", "image": "nginx:1.25"}]}
        }))
        .unwrap();
        template.metadata.as_mut().unwrap().name = Some("ignored".into());
        ps.spec.template = Some(Box::new(template));
        let p = pod_for(&ps);
        let labels = p.metadata.labels.unwrap();
        assert_eq!(
            (labels["tier"].as_str(), labels["app"].as_str()),
            ("web", "web")
        );
        assert_eq!(p.metadata.annotations.unwrap()["a"], "b");
        assert_eq!(p.metadata.name, None);
        let spec = p.spec.unwrap();
        assert_eq!(spec.containers[0].image.as_deref(), Some("nginx:1.25"));
        assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
        // Issue 45, fault 1: a pod with a deadline fails at it and is replaced, without end.
        assert_eq!(spec.active_deadline_seconds, None);
    }
}
