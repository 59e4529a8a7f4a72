//! Sending again the creates and deletes whose answers were lost, until the API server's
//! answers say whether each happened: the owner is acted on again only then.

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::{Resource, ResourceExt};
use tokio::time::Instant;

use super::{Created, Deleted, Verb, create, delete, pods_api, report};
use crate::api::PodSet;
use crate::controller::context::{Context, api_message};
use crate::expectations::{Resent, Unanswered, Unsettled};
use crate::plan::podset::{self as plan, Outcome};
use crate::uid::Uid;

pub(super) async fn settle(ps: &PodSet, ctx: &Context) -> Outcome {
    let uid = ps.uid().unwrap_or_default();
    let unsettled = ctx.expectations.unsettled(&uid, Instant::now());
    if unsettled == Unsettled::default() {
        return Outcome::NotActed;
    }
    let (api, template) = (pods_api(ps, ctx), plan::pod_for(ps));
    let (uid, api, template) = (&uid, &api, &template);
    let (creates, deletes) = futures::join!(
        futures::future::join_all(
            unsettled
                .creates
                .iter()
                .map(|n| resend(ctx, uid, api, template, n))
        ),
        futures::future::join_all(
            unsettled
                .deletes
                .iter()
                .map(|(pod_uid, n)| resend_delete(api, n, pod_uid))
        ),
    );
    let (mut created, mut create_error) = (Vec::new(), None);
    for (name, (resent, made, e)) in unsettled.creates.into_iter().zip(creates) {
        ctx.expectations
            .create_resent(uid, &name, resent, Instant::now());
        if made {
            created.push(name);
        }
        create_error = create_error.or(e);
    }
    let (mut deleted, mut delete_error) = (Vec::new(), None);
    for ((pod_uid, name), (terminating, e)) in unsettled.deletes.into_iter().zip(deletes) {
        let now = Instant::now();
        match terminating {
            Some(true) => ctx.expectations.delete_settled(uid, &pod_uid, now),
            Some(false) => ctx.expectations.delete_done(uid, &pod_uid, now),
            None => {}
        }
        match e {
            Some(e) => delete_error = delete_error.or(Some(api_message(&e))),
            None if terminating == Some(true) => deleted.push(name),
            None => {}
        }
    }
    let failed_create = report(ps, ctx, Verb::Create, &created, create_error).await;
    let failed_delete = report(ps, ctx, Verb::Delete, &deleted, delete_error).await;
    match failed_create.or(failed_delete) {
        Some(f) => Outcome::Failed(f),
        None => Outcome::Succeeded,
    }
}

/// Sends the create of pod `name` again, recorded as such while it is under way.
async fn resend(
    ctx: &Context,
    uid: &str,
    api: &Api<Pod>,
    template: &Pod,
    name: &str,
) -> (Resent, bool, Option<String>) {
    ctx.expectations.create_resending(uid, name, Instant::now());
    let unanswered = Unanswered::create(&ctx.expectations, uid, name);
    let result = resend_create(api, template, name).await;
    unanswered.answered();
    result
}

/// A create sent again: which pod now has its name, once known; whether this send made it;
/// the error to report. A refusal now does not say the first send made nothing, and a
/// conflict does not say which pod has the name, so a read decides. While that is unknown
/// the reconcile failed, and is retried as a failure is: taken for success, it would wait
/// out the expectations' TTL instead.
async fn resend_create(
    api: &Api<Pod>,
    template: &Pod,
    name: &str,
) -> (Resent, bool, Option<String>) {
    match create(api, template, name).await {
        Created::Made(uid) => (Resent::Pod(uid), true, None),
        Created::Exists(_) => match look_up(api, name).await {
            Ok(resent) => (resent, false, None),
            Err(e) => (Resent::Unknown, false, Some(api_message(&e))),
        },
        Created::Refused(e) => (
            look_up(api, name).await.unwrap_or(Resent::Unknown),
            false,
            Some(api_message(&e)),
        ),
        Created::Unknown(e) => (Resent::Unknown, false, Some(api_message(&e))),
        Created::Hidden(message) => (Resent::NoPod, false, Some(message)),
    }
}

/// Which pod has this name.
async fn look_up(api: &Api<Pod>, name: &str) -> Result<Resent, kube::Error> {
    Ok(match api.get_opt(name).await? {
        Some(pod) => Resent::Pod(Uid::from(pod.uid().unwrap_or_default().as_str())),
        None => Resent::NoPod,
    })
}

/// A delete whose first answer was lost, sent again: whether the pod is now terminating (the
/// watch will show it gone), or nothing of it is pending (`false`: gone, or never deleted);
/// `None` while that is unknown. A refusal says nothing of the first send, so the pod is
/// looked up, as a refused create's is.
async fn resend_delete(
    api: &Api<Pod>,
    name: &str,
    uid: &Uid,
) -> (Option<bool>, Option<kube::Error>) {
    match delete(api, name, uid).await {
        Deleted::Sent => (Some(true), None),
        Deleted::Gone => (Some(false), None),
        Deleted::Unknown(e) => (None, Some(e)),
        Deleted::Refused(e) => match api.get_opt(name).await {
            Ok(Some(pod)) if pod.metadata.uid.as_deref().is_some_and(|u| uid == u) => {
                (Some(pod.meta().deletion_timestamp.is_some()), Some(e))
            }
            Ok(_) => (Some(false), Some(e)),
            Err(_) => (None, Some(e)),
        },
    }
}
