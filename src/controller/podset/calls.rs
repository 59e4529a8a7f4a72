//! A PodSet's pods as its reconcile names them before `controller::pods` sends them.

use k8s_openapi::api::core::v1::Pod;
use kube::Api;

use crate::controller::pods::{self, Created};

pub(super) fn prefix(template: &Pod) -> &str {
    template
        .metadata
        .generate_name
        .as_deref()
        .unwrap_or_default()
}

/// Creates a pod from `template` named `name` (chosen here, so that a create whose answer
/// is lost can be looked up and sent again under it).
pub(super) async fn create(api: &Api<Pod>, template: &Pod, name: &str) -> Created {
    let mut pod = template.clone();
    pod.metadata.name = Some(name.to_string());
    pods::create(api, &pod).await
}
