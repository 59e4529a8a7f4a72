//! A controller's watch of its own objects, read one object at a time (see
//! [`crate::api::decoded`]): an object the operator cannot read is reported (a condition and
//! a Warning event) and dropped from the store, and every other object goes on being served.

use std::sync::Arc;

use futures::{Stream, StreamExt};
use kube::Api;
use kube::api::Patch;
use kube::runtime::events::EventType;
use kube::runtime::watcher::{self, Event};
use tracing::warn;

use super::context::{Context, publish, status_patch_params};
use crate::api::decoded::{Decoded, Unreadable, Watched};
use crate::plan::unreadable::{REASON_UNREADABLE, report};

/// `events` with the objects that could be read; the others reported.
pub(super) fn readable<K>(
    events: impl Stream<Item = watcher::Result<Event<Decoded<K>>>> + Send,
    ctx: Arc<Context>,
) -> impl Stream<Item = watcher::Result<Event<K>>> + Send
where
    K: Watched,
{
    events.filter_map(move |event| {
        let event = match event {
            Ok(event) => sort(event, &ctx).map(Ok),
            Err(e) => Some(Err(e)),
        };
        futures::future::ready(event)
    })
}

/// The event the store and the controller get, if any. An object that turned unreadable is
/// dropped from the store: acting on the copy it held would act on a spec that is no longer
/// the object's.
fn sort<K>(event: Event<Decoded<K>>, ctx: &Arc<Context>) -> Option<Event<K>>
where
    K: Watched,
{
    Some(match event {
        Event::Init => Event::Init,
        Event::InitDone => Event::InitDone,
        Event::InitApply(Decoded::Read(object)) => Event::InitApply(object),
        Event::Apply(Decoded::Read(object)) => Event::Apply(object),
        Event::Delete(Decoded::Read(object)) => Event::Delete(object),
        Event::Delete(Decoded::Unreadable(object)) => {
            Event::Delete(K::placeholder(object.metadata))
        }
        Event::InitApply(Decoded::Unreadable(object)) => {
            report_unreadable::<K>(object, ctx);
            return None;
        }
        Event::Apply(Decoded::Unreadable(object)) => {
            let metadata = object.metadata.clone();
            report_unreadable::<K>(object, ctx);
            Event::Delete(K::placeholder(metadata))
        }
    })
}

/// Logs `object`, and writes its report unless it carries it already.
fn report_unreadable<K>(object: Box<Unreadable>, ctx: &Arc<Context>)
where
    K: Watched,
{
    let (namespace, name) = (
        object.metadata.namespace.clone(),
        object.metadata.name.clone(),
    );
    warn!(kind = %K::kind(&()), namespace, object = name, error = %object.error, "cannot read this object: it is reported, and left alone until it is fixed or deleted");
    let (Some(namespace), Some(name)) = (namespace, name) else {
        return;
    };
    let Some((conditions, message)) = report::<K>(&object, ctx.clock.now()) else {
        return;
    };
    let ctx = ctx.clone();
    tokio::spawn(async move {
        let api: Api<Decoded<K>> = Api::namespaced(ctx.client.clone(), &namespace);
        let patch = serde_json::json!({ "status": { "conditions": conditions } });
        let written = api
            .patch_status(&name, &status_patch_params(), &Patch::Merge(&patch))
            .await;
        match written {
            Ok(_) => {
                let object = Decoded::<K>::Unreadable(object);
                let action = "Read";
                publish(
                    &object,
                    &ctx,
                    EventType::Warning,
                    REASON_UNREADABLE,
                    action,
                    message,
                )
                .await;
            }
            Err(e) => {
                warn!(kind = %K::kind(&()), namespace, object = name, error = %e, "could not report an unreadable object")
            }
        }
    });
}
