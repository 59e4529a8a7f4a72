//! Sending again the creates and deletes whose answers were lost (or looking up the name of a
//! create one of whose sends landed), until the API server's answers say whether each
//! happened: the owner is acted on again only then.

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::{Resource, ResourceExt};
use tokio::time::Instant;

use super::act::{Verb, expected, report};
use super::calls::create;
use crate::api::PodSet;
use crate::controller::context::{Context, api_message};
use crate::controller::pods::{self, Created, Written};
use crate::expectations::{Answer, Unsettled, Write};
use crate::plan::podset::{self as plan, Outcome};
use crate::uid::Uid;

pub(super) async fn settle(ps: &PodSet, ctx: &Context) -> Outcome {
    let uid = ps.uid().unwrap_or_default();
    let unsettled = ctx.memory.to_send_again(&uid, Instant::now());
    if unsettled == Unsettled::default() {
        return Outcome::NotActed;
    }
    let (api, template) = (ctx.api::<Pod>(ps), plan::pod_for(ps));
    let (uid, api, template) = (&uid, &api, &template);
    let creates = unsettled.creates.iter().map(|name| {
        let write = Write::Create(name.clone());
        let send = resend_create(api, template, name);
        expected(ctx, uid, write, send, |r: &Resent| r.answer.clone())
    });
    let look_ups = unsettled.look_ups.iter().map(|name| {
        let write = Write::Create(name.clone());
        let send = look_up_create(api, name);
        expected(ctx, uid, write, send, |r: &Resent| r.answer.clone())
    });
    let deletes = unsettled.deletes.iter().map(|(pod, name)| {
        let write = Write::Delete(pod.clone(), name.clone());
        let send = resend_delete(api, name, pod);
        expected(ctx, uid, write, send, |r: &Resent| r.answer.clone())
    });
    let (creates, look_ups, deletes) = futures::join!(
        futures::future::join_all(creates),
        futures::future::join_all(look_ups),
        futures::future::join_all(deletes)
    );
    let names = unsettled.creates.into_iter().chain(unsettled.look_ups);
    let (created, create_error) = done(names, creates.into_iter().chain(look_ups));
    let names = unsettled.deletes.into_iter().map(|(_, name)| name);
    let (deleted, delete_error) = done(names, deletes);
    let failed_create = report(ps, ctx, Verb::Create, &created, create_error).await;
    let failed_delete = report(ps, ctx, Verb::Delete, &deleted, delete_error).await;
    match failed_create.or(failed_delete) {
        Some(f) => Outcome::Failed(f),
        None => Outcome::Succeeded,
    }
}

/// The names of the pods the sends carried out (made, or now terminating), and the first
/// error.
fn done(
    names: impl Iterator<Item = String>,
    results: impl IntoIterator<Item = Resent>,
) -> (Vec<String>, Option<String>) {
    let (mut names_done, mut error) = (Vec::new(), None);
    for (name, resent) in names.zip(results) {
        match resent.error {
            Some(e) => error = error.or(Some(e)),
            None if resent.by_this_send => names_done.push(name),
            None => {}
        }
    }
    (names_done, error)
}

/// What a create or delete sent again came to.
struct Resent {
    /// What it says of the expected write.
    answer: Answer,
    /// This send made the pod, or put it in deletion.
    by_this_send: bool,
    /// The error to report.
    error: Option<String>,
}

/// A create sent again. A refusal now does not say the first send made nothing, and a
/// conflict does not say which pod has the name, so a read decides. While that is unknown
/// the reconcile failed, and is retried as a failure is: taken for success, it would wait
/// out the expectations' TTL instead.
async fn resend_create(api: &Api<Pod>, template: &Pod, name: &str) -> Resent {
    let (answer, error) = match create(api, template, name).await {
        made @ Created::Made(_) => {
            return Resent {
                answer: made.answer(),
                by_this_send: true,
                error: None,
            };
        }
        Created::Exists(_) => return look_up_create(api, name).await,
        Created::Refused(e) => (
            look_up(api, name).await.unwrap_or(Answer::Unknown),
            Some(api_message(&e)),
        ),
        unknown @ Created::Unknown(_) => (Answer::Unknown, unknown.error()),
        hidden @ Created::Hidden { .. } => (Answer::Nothing, hidden.error()),
    };
    Resent {
        answer,
        by_this_send: false,
        error,
    }
}

/// A create settled by which pod has its name now: a send of it met 409 AlreadyExists, or
/// landed with its answer lost (sent again, it would make its pod anew had a person deleted
/// it since).
async fn look_up_create(api: &Api<Pod>, name: &str) -> Resent {
    let (answer, error) = match look_up(api, name).await {
        Ok(answer) => (answer, None),
        Err(e) => (Answer::Unknown, Some(api_message(&e))),
    };
    Resent {
        answer,
        by_this_send: false,
        error,
    }
}

/// Which pod has this name.
async fn look_up(api: &Api<Pod>, name: &str) -> Result<Answer, kube::Error> {
    Ok(match api.get_opt(name).await? {
        Some(pod) => Answer::Made(Uid::from(pod.uid().unwrap_or_default().as_str())),
        None => Answer::Nothing,
    })
}

/// A delete whose first answer was lost, sent again: whether the pod is now terminating (the
/// watch will show it gone), or nothing of it is pending (gone, or never deleted); unknown
/// while that is. A refusal says nothing of the first send, so the pod is looked up, as a
/// refused create's is.
async fn resend_delete(api: &Api<Pod>, name: &str, uid: &Uid) -> Resent {
    let (answer, error) = match pods::delete(api, name, uid).await {
        Written::Sent => {
            return Resent {
                answer: Answer::Deleting,
                by_this_send: true,
                error: None,
            };
        }
        Written::Gone => (Answer::Nothing, None),
        Written::Unknown(e) => (Answer::Unknown, Some(e)),
        Written::Refused(e) | Written::Changed(e) => {
            let answer = match api.get_opt(name).await {
                Ok(Some(pod)) if pod.metadata.uid.as_deref().is_some_and(|u| uid == u) => {
                    if pod.meta().deletion_timestamp.is_some() {
                        Answer::Deleting
                    } else {
                        Answer::Nothing
                    }
                }
                Ok(_) => Answer::Nothing,
                Err(_) => Answer::Unknown,
            };
            (answer, Some(e))
        }
    };
    Resent {
        answer,
        by_this_send: false,
        error: error.map(|e| api_message(&e)),
    }
}
