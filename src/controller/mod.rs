//! The thin shell: watches, the exported pod cache, and the controllers' run loops.
//!
//! One pod watch (selecting the operator's own pods by label) feeds one [`PodCache`]; each
//! pod event lowers expectations and is routed to the controller of the pod's controlling
//! owner. PodSets and Ats are watched with a generation predicate, so the controllers' own
//! status writes never trigger them again.

pub mod at;
pub(crate) mod context;
#[cfg(test)]
pub(crate) mod fixtures;
mod fresh;
mod kept;
mod memory;
mod pods;
pub mod podset;
mod resync;
mod routing;
mod strays;
mod unreadable;
mod wakes;
mod watching;

use context::Context;
use routing::watch_into_store;
pub use watching::{Watching, watch};

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::channel::mpsc::UnboundedReceiver;
use futures::{FutureExt, StreamExt};
use kube::runtime::controller::{Action, Config as ControllerConfig};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{Controller, watcher};
use kube::{Client, Resource};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, info, warn};

use crate::api::decoded::{Decoded, Watched};
use crate::cache::PodCache;
use crate::clock::Clock;
use crate::error::Error;
use crate::health::Health;
use crate::metrics::{Metrics, key_of, object_key};
use crate::scope::Scope;

/// How long a starting instance watches before it acts (see `run`).
pub const STARTUP_GRACE: Duration = Duration::from_secs(2);

/// What to run, and where.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The namespaces watched.
    pub scope: Scope,
    pub podset: bool,
    pub at: bool,
    /// PodSet reconciles in flight at once (0 = unbounded).
    pub concurrency: u16,
    /// At reconciles in flight at once (0 = unbounded).
    pub at_concurrency: u16,
    /// How often a converged PodSet is looked at again though nothing changed.
    pub resync: Duration,
    /// The `reportingInstance` of events (the pod name, in a cluster).
    pub instance: String,
    /// The time of day (schedules, status and event times).
    pub clock: Clock,
}

/// What the controllers share with the probe and metrics endpoints.
#[derive(Clone, Default)]
pub struct Exported {
    pub metrics: Arc<Metrics>,
    /// Empty until the controllers fill it.
    pub pods: Arc<PodCache>,
    pub health: Arc<Health>,
}

/// Runs the selected controllers over `watching`'s pod cache until `shutdown` is cancelled,
/// then lets in-flight reconciles finish. Health turns ready once the caches synced, and dead
/// if a loop ends unasked.
pub async fn act(mut watching: Watching, shutdown: CancellationToken) -> anyhow::Result<()> {
    if !watching.synced(&shutdown).await {
        return Ok(());
    }
    let Watching {
        client,
        settings,
        ctx,
        health,
        ..
    } = &watching;
    if settings.podset {
        // Before the controllers start: each of their first reconciles releases its strays.
        strays::sweep(client, &settings.scope, ctx, &shutdown).await;
    }
    let queues = ctx.router.connect(settings.podset, settings.at);
    let mut controllers = JoinSet::new();
    let mut stores = Vec::new();
    let launch = Launch {
        client,
        settings,
        ctx,
        shutdown: &shutdown,
    };
    if let Some(podset_rx) = queues.podset {
        let ready = launch.spawn(
            &mut controllers,
            "podset",
            podset_rx,
            Some(settings.resync),
            settings.concurrency,
            podset::reconcile,
            podset::error_policy,
        );
        stores.push(ready);
    }
    if let Some(at_rx) = queues.at {
        let ready = launch.spawn(
            &mut controllers,
            "at",
            at_rx,
            None,
            settings.at_concurrency,
            at::reconcile,
            at::error_policy,
        );
        stores.push(ready);
    }
    // Ready once every cache holds its first full list: objects created earlier are seen.
    // (Not `Store::wait_until_ready`: it wakes only one waiter, and the Controller is one.)
    for mut ready in stores {
        let _ = ready.wait_for(|synced| *synced).await;
    }
    health.set_ready(true);
    info!("caches synced; ready");
    let supervised = supervise(controllers, &shutdown, health).await;
    info!("controllers stopped");
    supervised
}

/// Waits for the controllers to stop once `shutdown` asks. One that stops unasked (it
/// panicked, or its stream ended) takes its objects with it while the others look healthy:
/// the process is marked dead for `/livez` and the others are aborted, so that it exits and is
/// restarted whole.
async fn supervise(
    mut controllers: JoinSet<&'static str>,
    shutdown: &CancellationToken,
    health: &Health,
) -> anyhow::Result<()> {
    while let Some(stopped) = controllers.join_next().await {
        if shutdown.is_cancelled() && stopped.is_ok() {
            continue;
        }
        health.set_dead();
        controllers.abort_all();
        return Err(match stopped {
            Ok(name) => anyhow::anyhow!("the {name} controller stopped unasked"),
            Err(e) => anyhow::anyhow!("a controller failed: {e}"),
        });
    }
    Ok(())
}

/// What every controller is started with.
struct Launch<'a> {
    client: &'a Client,
    settings: &'a Settings,
    ctx: &'a Arc<Context>,
    shutdown: &'a CancellationToken,
}

impl Launch<'_> {
    /// Spawns the controller of `K`, triggered by its own watch (spec changes), by `owned`
    /// (its pods changed) and, given a period, by the [`resync`] of each object once a period.
    /// The receiver turns true once its cache is synced.
    #[allow(clippy::too_many_arguments)]
    fn spawn<K, Fut>(
        &self,
        set: &mut JoinSet<&'static str>,
        name: &'static str,
        owned: UnboundedReceiver<ObjectRef<K>>,
        resync: Option<Duration>,
        concurrency: u16,
        reconcile: fn(Arc<K>, Arc<Context>) -> Fut,
        error_policy: fn(Arc<K>, &Error, Arc<Context>) -> Action,
    ) -> tokio::sync::watch::Receiver<bool>
    where
        K: Watched + kept::Kept + kube::core::object::HasStatus,
        K::Status: serde::Serialize,
        Fut: Future<Output = crate::error::Result<Action>> + Send + 'static,
    {
        let (reader, writer) = reflector::store();
        let (synced, ready) = tokio::sync::watch::channel(false);
        let removed = |metadata| Decoded::Read(K::placeholder(metadata));
        let config = watcher::Config::default();
        let events = self.settings.scope.watch(self.client, &config, removed);
        let events = unreadable::readable(events, self.ctx.clone());
        let queues = Queued {
            controller: name,
            metrics: self.ctx.metrics.clone(),
        };
        let events = events.inspect(queues.clone().dropping_deleted());
        let primary = watch_into_store(events, writer, synced, self.ctx.clone())
            .inspect(queues.clone().adding_woken());
        let swept = resync.map(|period| resync::sweep(reader.clone(), period));
        let triggers = futures::stream::select(owned, futures::stream::iter(swept).flatten())
            .inspect(queues.clone().adding_triggered(reader.clone()));
        self.ctx.metrics.concurrency(name, concurrency);
        let controller = Controller::for_stream(primary, reader)
            .with_config(ControllerConfig::default().concurrency(concurrency))
            .reconcile_on(triggers)
            .graceful_shutdown_on(self.shutdown.clone().cancelled_owned())
            .run(reconcile, error_policy, self.ctx.clone())
            .for_each(move |res| {
                queues.settled(&res);
                async move { log_result(res) }
            })
            .instrument(tracing::info_span!("controller", controller = name));
        // In the current span (the leadership term's): a spawned task starts in none.
        set.spawn(controller.map(move |()| name).in_current_span());
        ready
    }
}

/// Keeps a controller's work-queue metrics (`metrics::WorkQueues`) from what reaches it.
#[derive(Clone)]
struct Queued {
    controller: &'static str,
    metrics: Arc<Metrics>,
}

impl Queued {
    fn add(&self, key: u64) {
        self.metrics
            .queues
            .add(self.controller, key, Instant::now());
    }

    /// An object its watch woke.
    fn adding_woken<K: Resource>(self) -> impl FnMut(&watcher::Result<K>) {
        move |woken| {
            if let Ok(obj) = woken {
                self.add(key_of(obj.meta()));
            }
        }
    }

    /// An object a pod or the resync triggered, if it is there to reconcile.
    fn adding_triggered<K>(self, store: reflector::Store<K>) -> impl FnMut(&ObjectRef<K>)
    where
        K: Resource<DynamicType = ()> + Clone,
    {
        move |triggered| {
            if store.get(triggered).is_some() {
                self.add(object_key(triggered.namespace.as_deref(), &triggered.name));
            }
        }
    }

    /// An object the controller found gone when its turn came leaves the queue: a trigger
    /// can queue it after its delete event dropped it but before the store lost it.
    fn settled<K: Resource, E>(
        &self,
        res: &Result<(ObjectRef<K>, Action), kube::runtime::controller::Error<Error, E>>,
    ) {
        if let Err(kube::runtime::controller::Error::ObjectNotFound(obj)) = res {
            let key = object_key(obj.namespace.as_deref(), &obj.name);
            self.metrics.queues.drop_object(self.controller, key);
        }
    }

    /// A deleted object is never reconciled: it leaves the queue.
    fn dropping_deleted<K: Resource>(self) -> impl FnMut(&watcher::Result<watcher::Event<K>>) {
        move |event| {
            if let Ok(watcher::Event::Delete(obj)) = event {
                self.metrics
                    .queues
                    .drop_object(self.controller, key_of(obj.meta()));
            }
        }
    }
}

/// Logs what the controller reports of a reconcile (inside the controller's span).
fn log_result<K: Resource, E: std::fmt::Display>(
    res: Result<(ObjectRef<K>, Action), kube::runtime::controller::Error<Error, E>>,
) {
    match res {
        Ok((obj, action)) => {
            debug!(namespace = obj.namespace.as_deref(), object = %obj.name, ?action, "reconciled")
        }
        Err(kube::runtime::controller::Error::ReconcilerFailed(e, obj)) => {
            warn!(namespace = obj.namespace.as_deref(), object = %obj.name, error = %e, "reconcile failed")
        }
        // Its watch failing (a CRD missing, a 403): nothing is reconciled until it recovers.
        Err(kube::runtime::controller::Error::QueueError(e)) => {
            warn!(error = %e, "watch failed; retrying with backoff")
        }
        Err(e) => debug!(error = %e, "controller event"),
    }
}

#[cfg(test)]
mod tests;
