//! Every pod write of both controllers, and what each answer means, in one place (the
//! ReplicaSet controller's `PodControlInterface`): a create that checks admission left the pod
//! the operator's; deletes guarded by UID, or by UID and version; the At's ungate; a stray's
//! release. Only here is an answer's code read: 404 gone; 409 a create's name taken, or a
//! delete's precondition failed; 422 a patch naming another pod's UID, or a failed test.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use tracing::warn;

use super::context::api_message;
use crate::api::AT_GATE;
use crate::client;
use crate::expectations::Answer;
use crate::plan::admitted;
use crate::pod::CachedPod;
use crate::uid::Uid;

/// What the API server answered to a create.
pub(super) enum Created {
    /// This pod.
    Made(Box<Pod>),
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
            Created::Made(pod) => Answer::Made(uid_of(pod)),
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

/// Creates `pod` (named).
pub(super) async fn create(api: &Api<Pod>, pod: &Pod) -> Created {
    match client::create(api, pod).await {
        Ok(made) => {
            let Some(message) = admitted::hidden(pod, &made) else {
                return Created::Made(Box::new(made));
            };
            let (name, uid) = (made.name_any(), uid_of(&made));
            let left = match delete(api, &name, &uid).await {
                Written::Refused(e) | Written::Unknown(e) | Written::Changed(e) => {
                    warn!(pod = name, error = %e, "could not delete a pod admission hid");
                    Some(uid)
                }
                Written::Sent | Written::Gone => None,
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

/// What the API server answered to a delete or a patch.
pub(super) enum Written {
    Sent,
    /// Gone already, or another pod has the name now: nothing of it to write.
    Gone,
    /// Changed since it was read (a version's precondition or a patch's test failed): not
    /// written.
    Changed(kube::Error),
    Refused(kube::Error),
    /// The reply was lost: it may have been carried out.
    Unknown(kube::Error),
}

impl Written {
    /// What a delete's answer says of the expected delete.
    pub(super) fn answer(&self) -> Answer {
        match self {
            Written::Sent => Answer::Deleting,
            Written::Gone | Written::Changed(_) | Written::Refused(_) => Answer::Nothing,
            Written::Unknown(_) => Answer::Unknown,
        }
    }
}

/// Deletes pod `name` if it is still the one with `uid` (409: another pod has the name).
pub(super) async fn delete(api: &Api<Pod>, name: &str, uid: &Uid) -> Written {
    let sent = client::delete_exact(api, name, &uid.to_string()).await;
    written(sent, |_| Written::Gone)
}

/// Deletes pod `name` if it is still the one with `uid`, unchanged since `version`.
pub(super) async fn delete_unchanged(
    api: &Api<Pod>,
    name: &str,
    uid: &str,
    version: Option<String>,
) -> Written {
    let sent = client::delete_unchanged(api, name, uid, version).await;
    written(sent, Written::Changed)
}

/// Takes the At's scheduling gate, and only that one, off pod `name` if it is still the one
/// with `uid`: another controller's gate (Kueue's admission, a site's hold) stays, and the
/// pod waits for that controller too. The gate is removed at the index `hint` if the pod
/// holds it there (the index the pod was made with), else where a read finds it; already
/// gone, it is released. A pod of another UID, or none, is `Gone`.
pub(super) async fn ungate(api: &Api<Pod>, name: &str, uid: &str, hint: usize) -> Written {
    let mut index = hint;
    let mut tries = 0;
    loop {
        let patch = Patch::Json::<()>(ungate_at(uid, index));
        let refused = match api.patch(name, &PatchParams::default(), &patch).await {
            // A test failed: the UID (another pod has the name) or the gate's place.
            Err(kube::Error::Api(s)) if s.code == 422 => kube::Error::Api(s),
            sent => return written(sent.map(drop), |_| Written::Gone),
        };
        tries += 1;
        let live = match api.get_opt(name).await {
            Ok(live) => live.filter(|p| p.metadata.uid.as_deref() == Some(uid)),
            Err(e) => return Written::Refused(e),
        };
        let Some(live) = live else {
            return Written::Gone;
        };
        match CachedPod::from_pod(&live).gate {
            None => return Written::Sent,
            Some(_) if tries == 3 => return Written::Changed(refused),
            Some(at) => index = usize::from(at),
        }
    }
}

/// The JSON patch that removes the At's gate at `index` of pod `uid`, tested first.
fn ungate_at(uid: &str, index: usize) -> json_patch::Patch {
    serde_json::from_value(serde_json::json!([
        {"op": "test", "path": "/metadata/uid", "value": uid},
        {"op": "test", "path": format!("/spec/schedulingGates/{index}/name"), "value": AT_GATE},
        {"op": "remove", "path": format!("/spec/schedulingGates/{index}")},
    ]))
    .expect("a JSON patch")
}

/// Sends the JSON patch `patch` to pod `name`; its tests guard what it changes (422 when
/// one fails).
pub(super) async fn patch_tested(api: &Api<Pod>, name: &str, patch: json_patch::Patch) -> Written {
    let params = PatchParams::default();
    match api.patch(name, &params, &Patch::Json::<()>(patch)).await {
        Err(kube::Error::Api(s)) if s.code == 422 => Written::Changed(kube::Error::Api(s)),
        sent => written(sent.map(drop), Written::Changed),
    }
}

/// A write's answer: 404 is gone, 409 what `conflict` makes of it.
fn written(sent: kube::Result<()>, conflict: impl FnOnce(kube::Error) -> Written) -> Written {
    match sent {
        Ok(()) => Written::Sent,
        Err(kube::Error::Api(s)) if s.code == 404 => Written::Gone,
        Err(kube::Error::Api(s)) if s.code == 409 => conflict(kube::Error::Api(s)),
        Err(e) if client::may_have_acted(&e) => Written::Unknown(e),
        Err(e) => Written::Refused(e),
    }
}

fn uid_of(pod: &Pod) -> Uid {
    Uid::from(pod.metadata.uid.as_deref().unwrap_or_default())
}
