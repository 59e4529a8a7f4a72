//! What every reconcile is given and does the same way: the shared [`Context`], the frame
//! a reconcile runs in (its span, its deadline, its metrics), its retry delay, and how it
//! publishes events and words an API error.

use std::any::TypeId;
use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use kube::api::ListParams;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Api, Client, Resource, ResourceExt};
use tracing::{Instrument, warn};

use super::memory::Memory;
use super::routing::Router;
use crate::cache::PodCache;
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::events::{Note, Recorder};
use crate::metrics::{Metrics, key_of};
use std::sync::Arc;
use tokio::time::Instant;

/// Shared by every reconcile.
pub struct Context {
    pub client: Client,
    pub pods: Arc<PodCache>,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
    /// What is remembered of each object between its reconciles.
    pub memory: Memory,
    /// Hands pod changes (and pods handed on out of the watch) to the controllers.
    pub(super) router: Router,
    pub clock: Clock,
}

impl Context {
    /// Nothing expected, failing, queued or written yet; events are reported as from
    /// `instance`.
    pub fn new(
        client: Client,
        pods: Arc<PodCache>,
        metrics: Arc<Metrics>,
        instance: &str,
        clock: Clock,
    ) -> Self {
        metrics.queues.clear();
        metrics.unconverged.clear();
        Context {
            recorder: Recorder::new(client.clone(), "podset-operator", instance, clock.clone()),
            client,
            pods,
            metrics,
            memory: Memory::default(),
            router: Router::default(),
            clock,
        }
    }

    /// The API of `T` in `obj`'s namespace: `obj`'s own kind, or its pods.
    pub fn api<T>(&self, obj: &impl Resource) -> Api<T>
    where
        T: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &obj.namespace().unwrap_or_default())
    }

    /// Drops everything kept for an object that was deleted.
    pub(super) fn forget(&self, uid: &str) {
        self.metrics.unconverged.forget(uid, Instant::now());
        self.memory.forget(uid);
    }
}

/// `obj` as the API server has it now: a list of its one name (a consistent read the
/// operator's `list` permission covers, where a `get` would need a permission of its own),
/// or `None` if it is gone. Another object of the same name is a new one: `obj` is gone all
/// the same.
pub async fn read_by_name<K>(api: &Api<K>, obj: &K) -> Result<Option<K>>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let one = ListParams::default().fields(&format!("metadata.name={}", obj.name_any()));
    let found = api.list(&one).await.map_err(Error::ApiRead)?;
    Ok(found.items.into_iter().find(|o| o.uid() == obj.uid()))
}

/// The delay after a failed reconcile, growing per object.
pub fn retry_after<K: Resource>(obj: &K, ctx: &Context) -> Action {
    Action::requeue(ctx.memory.retry_delay(&obj.uid().unwrap_or_default()))
}

/// Status writes name the operator as their field manager (`kubectl get -o yaml
/// --show-managed-fields` shows who wrote what).
pub fn status_patch_params() -> kube::api::PatchParams {
    kube::api::PatchParams {
        field_manager: Some("podset-operator".into()),
        ..Default::default()
    }
}

/// A status merge patch over resourceVersion `version` that leaves nothing of the old status:
/// every field the status's schema names and `status` leaves out is sent as null, so removed.
/// Left out, the stored value would stay (a merge patch keeps what it does not name): a
/// PodSet's readyReplicas, left out at 0, kept its old count and drew the same write at every
/// resync (sim seed 5435).
pub fn status_patch<S: serde::Serialize + schemars::JsonSchema + 'static>(
    version: &str,
    status: &S,
) -> serde_json::Value {
    let mut value = serde_json::to_value(status).expect("a status serializes");
    if let Some(fields) = value.as_object_mut() {
        for key in schema_fields::<S>().iter() {
            fields.entry(key.clone()).or_insert(serde_json::Value::Null);
        }
    }
    serde_json::json!({ "metadata": { "resourceVersion": version }, "status": value })
}

/// The fields `S`'s schema names, worked out once per type rather than at every status
/// write: a schema is generated whole, its conditions' included.
fn schema_fields<S: schemars::JsonSchema + 'static>() -> Arc<[String]> {
    static FIELDS: parking_lot::Mutex<BTreeMap<TypeId, Arc<[String]>>> =
        parking_lot::Mutex::new(BTreeMap::new());
    let mut known = FIELDS.lock();
    let fields = known.entry(TypeId::of::<S>()).or_insert_with(|| {
        let schema = schemars::schema_for!(S);
        let named = schema.get("properties").and_then(|p| p.as_object());
        named.into_iter().flat_map(|n| n.keys().cloned()).collect()
    });
    fields.clone()
}

/// Publishes an event on `obj`; a failure is logged, never fatal to the reconcile.
pub async fn publish<K: Resource<DynamicType = ()>>(
    obj: &K,
    ctx: &Context,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) {
    let note = Note {
        type_,
        reason,
        action,
        note: truncate_note(note),
    };
    if let Err(e) = ctx.recorder.publish(&obj.object_ref(&()), note).await {
        warn!(error = %e, reason, "could not publish event");
    }
}

/// The API server refuses an event note over 1024 bytes, and an API error message (a pod
/// template with many invalid fields, say) can be longer: cut it, at a character boundary.
fn truncate_note(mut note: String) -> String {
    const MAX: usize = 1024;
    const ELLIPSIS: &str = "...";
    if note.len() > MAX {
        let mut end = MAX - ELLIPSIS.len();
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
        note.push_str(ELLIPSIS);
    }
    note
}

/// The API server's own words for a failed call (a quota message, say).
pub fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
}

/// How long a reconcile may take: a few requests, each bounded by `client::REQUEST_TIMEOUT`
/// and its retries. kube never starts another reconcile of an object whose reconcile hangs,
/// so without a bound one hung request would stop that object for good.
pub const RECONCILE_DEADLINE: Duration = Duration::from_secs(120);

/// Runs one reconcile of `obj`, as both controllers do: in a span naming the object (every
/// line logged inside carries it, beside its controller's span), timed, cut off at
/// [`RECONCILE_DEADLINE`], and counted by its error's kind.
pub async fn reconcile_within_deadline<K, F>(
    ctx: &Context,
    controller: &'static str,
    obj: &K,
    reconcile: F,
) -> Result<Action>
where
    K: Resource,
    F: Future<Output = Result<Action>>,
{
    let span = tracing::info_span!(
        "reconcile",
        namespace = obj.namespace().unwrap_or_default(),
        object = obj.name_any(),
        generation = obj.meta().generation.unwrap_or_default(),
    );
    let key = key_of(obj.meta());
    ctx.metrics.queues.take(controller, key, Instant::now());
    let _timer = ctx.metrics.reconcile(controller);
    let res = tokio::time::timeout(RECONCILE_DEADLINE, reconcile)
        .instrument(span)
        .await
        .unwrap_or(Err(Error::Timeout(RECONCILE_DEADLINE)));
    let outcome = match &res {
        Ok(action) => Ok(*action != Action::await_change()),
        Err(e) => Err(e.metric_label()),
    };
    ctx.metrics.reconciled(controller, outcome);
    res
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::PodSetStatus;

    #[test]
    fn event_notes_fit_the_api_limit() {
        assert_eq!(truncate_note("short".into()), "short");
        let long = "é".repeat(1000); // 2000 bytes, 2 per character
        let cut = truncate_note(long);
        assert!(cut.len() <= 1024, "{}", cut.len());
        assert!(cut.ends_with("..."));
        assert!(cut.starts_with("éé"));
        let exact = "a".repeat(1024);
        assert_eq!(truncate_note(exact.clone()), exact);
    }

    #[test]
    fn a_status_patch_removes_what_the_status_leaves_out() {
        let status = PodSetStatus {
            available_replicas: 2,
            ..Default::default()
        };
        let patch = status_patch("7", &status);
        assert_eq!(patch["metadata"]["resourceVersion"], "7");
        let sent = patch["status"].as_object().unwrap();
        assert_eq!(sent["availableReplicas"], 2);
        for removed in [
            "readyReplicas",
            "observedGeneration",
            "selector",
            "conditions",
        ] {
            assert!(sent[removed].is_null(), "{removed} not removed: {sent:?}");
        }
    }
}
