//! What every pod the operator makes carries: its owner as controller, and the restricted
//! pod security profile.

use k8s_openapi::api::core::v1::{
    Capabilities, PodSecurityContext, SeccompProfile, SecurityContext,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;

/// Non-root user for the operator's busybox pods (`nobody`): busybox runs as root unless
/// told otherwise, which `runAsNonRoot` would refuse.
const NON_ROOT_USER: i64 = 65534;

/// The controller ownerReference of a pod `owner` creates. `blockOwnerDeletion`, which kube
/// leaves unset, makes a foreground deletion of the owner wait for its pods.
pub fn controller_ref<K: Resource<DynamicType = ()>>(owner: &K) -> OwnerReference {
    let mut owner_ref = owner
        .controller_owner_ref(&())
        .expect("an object from the API has a name and uid");
    owner_ref.block_owner_deletion = Some(true);
    owner_ref
}

/// The pod-level half of the restricted pod security profile.
pub fn restricted_pod_security_context() -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(NON_ROOT_USER),
        seccomp_profile: Some(runtime_default_seccomp()),
        ..Default::default()
    }
}

/// allowPrivilegeEscalation false, all capabilities dropped, non-root, RuntimeDefault seccomp.
pub fn restricted_container_security_context() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Default::default()
        }),
        run_as_non_root: Some(true),
        run_as_user: Some(NON_ROOT_USER),
        seccomp_profile: Some(runtime_default_seccomp()),
        ..Default::default()
    }
}

fn runtime_default_seccomp() -> SeccompProfile {
    SeccompProfile {
        type_: "RuntimeDefault".into(),
        ..Default::default()
    }
}
