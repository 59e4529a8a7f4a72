//! The pod creates and deletes a PodSet sends, and what their answers say of its
//! expectations.

use k8s_openapi::api::core::v1::Pod;
use kube::{Api, ResourceExt};
use tracing::warn;

use crate::api::PodSet;
use crate::client;
use crate::controller::context::{Context, api_message};
use crate::expectations::Answer;
use crate::plan::admitted;
use crate::uid::Uid;

pub(super) fn pods_api(ps: &PodSet, ctx: &Context) -> Api<Pod> {
    Api::namespaced(ctx.client.clone(), &ps.namespace().unwrap_or_default())
}

pub(super) fn prefix(template: &Pod) -> &str {
    template
        .metadata
        .generate_name
        .as_deref()
        .unwrap_or_default()
}

/// What the API server answered to a create.
pub(super) enum Created {
    /// This pod.
    Made(Uid),
    /// 409 AlreadyExists: a pod has the name.
    Exists(kube::Error),
    /// Turned away before anything was stored.
    Refused(kube::Error),
    /// The reply was lost: the pod may have been made.
    Unknown(kube::Error),
    /// Made, but admission changed what the operator finds its pods by (why, in words): it
    /// is deleted at once, as the operator would never see it; `left`, its UID, if that
    /// delete failed: its PodSet's next reconcile deletes it (`controller::strays`).
    Hidden { message: String, left: Option<Uid> },
}

impl Created {
    /// What it says of the expected create.
    pub(super) fn answer(&self) -> Answer {
        match self {
            Created::Made(uid) => Answer::Made(uid.clone()),
            // Refused, or the name was taken (a one in 14 million chance): no pod of ours.
            // A pod admission hid was deleted: its watch will never show it.
            Created::Exists(_) | Created::Refused(_) | Created::Hidden { .. } => Answer::Nothing,
            Created::Unknown(_) => Answer::Unknown,
        }
    }

    /// The API server's words for a create that made no pod of ours, or may not have.
    pub(super) fn error(&self) -> Option<String> {
        match self {
            Created::Made(_) => None,
            Created::Exists(e) | Created::Refused(e) | Created::Unknown(e) => Some(api_message(e)),
            Created::Hidden { message, .. } => Some(message.clone()),
        }
    }
}

pub(super) async fn create(api: &Api<Pod>, template: &Pod, name: &str) -> Created {
    let mut pod = template.clone();
    pod.metadata.name = Some(name.to_string());
    match client::create(api, &pod).await {
        Ok(made) => {
            let uid = Uid::from(made.uid().unwrap_or_default().as_str());
            let Some(message) = admitted::hidden(&pod, &made) else {
                return Created::Made(uid);
            };
            let left = match delete(api, name, &uid).await {
                Deleted::Refused(e) | Deleted::Unknown(e) => {
                    warn!(pod = name, error = %e, "could not delete a pod admission hid");
                    Some(uid)
                }
                Deleted::Sent | Deleted::Gone => None,
            };
            Created::Hidden { message, left }
        }
        Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists" => {
            Created::Exists(kube::Error::Api(s))
        }
        Err(e) if client::may_have_acted(&e) => Created::Unknown(e),
        Err(e) => Created::Refused(e),
    }
}

/// What the API server answered to a delete.
pub(super) enum Deleted {
    Sent,
    /// Gone already, or a different pod now has the name: nothing of ours to delete.
    Gone,
    Refused(kube::Error),
    /// The reply was lost: the pod may be terminating.
    Unknown(kube::Error),
}

impl Deleted {
    /// What it says of the expected delete.
    pub(super) fn answer(&self) -> Answer {
        match self {
            Deleted::Sent => Answer::Deleting,
            Deleted::Gone | Deleted::Refused(_) => Answer::Nothing,
            Deleted::Unknown(_) => Answer::Unknown,
        }
    }
}

pub(super) async fn delete(api: &Api<Pod>, name: &str, uid: &Uid) -> Deleted {
    match client::delete_exact(api, name, &uid.to_string()).await {
        Ok(_) => Deleted::Sent,
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Deleted::Gone,
        Err(e) if client::may_have_acted(&e) => Deleted::Unknown(e),
        Err(e) => Deleted::Refused(e),
    }
}
