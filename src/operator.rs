//! One instance of the operator: the controllers, under leader election if asked, until
//! shutdown. Everything it talks to is given to it (the API clients, the clock in
//! [`Settings`]), so a process runs one (`main.rs`) and a simulation runs many.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info, warn};

use crate::controller::{self, Exported, Settings, Watching};
use crate::fence::Fence;
pub use crate::leader::Election;
use crate::leader::LeaderElection;
use crate::migrate;

pub struct Operator {
    /// The controllers' client: its writes leave only while `fence` is open (`client::ControllerWrites`).
    pub controllers: kube::Client,
    /// The Lease's client: never held up by the controllers' writes, nor stopped at the fence.
    pub lease: kube::Client,
    pub fence: Fence,
    pub settings: Settings,
    pub exported: Exported,
    /// Elect a leader on this Lease; `None` runs the controllers at once, alone.
    pub election: Option<Election>,
    /// A standby keeps its pod cache synced (watches, no writes), so that it acts as soon as it
    /// leads; otherwise it starts watching then.
    pub warm_standby: bool,
    /// How long, after shutdown is asked, in-flight reconciles may take.
    pub shutdown_timeout: Duration,
    /// At the start of each term, write back what is still stored at an older version
    /// ([`crate::migrate`]).
    pub migrate_storage: bool,
}

impl Operator {
    /// Runs until `shutdown` is cancelled, or a controller stops unasked.
    pub async fn run(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        match self.election.clone() {
            Some(election) => self.run_as_leader(election, shutdown).await,
            None => {
                self.exported.metrics.leading(true);
                let _migrating = self.migrate();
                self.run_controllers(self.watch(false), &shutdown).await
            }
        }
    }

    /// Starts the term's storage migration, if asked for; it stops when the guard is dropped,
    /// with the term (a deposed leader's writes are refused at the fence anyway).
    fn migrate(&self) -> Option<tokio_util::task::AbortOnDropHandle<()>> {
        let (client, scope) = (self.controllers.clone(), self.settings.scope.clone());
        self.migrate_storage.then(|| {
            tokio_util::task::AbortOnDropHandle::new(tokio::spawn(migrate::at_term_start(
                client, scope,
            )))
        })
    }

    /// Starts watching the pods (`warm`: before this instance leads).
    fn watch(&self, warm: bool) -> Watching {
        let (settings, exported) = (self.settings.clone(), self.exported.clone());
        controller::watch(self.controllers.clone(), settings, exported, warm)
    }

    /// Runs the controllers until `shutdown`, then gives in-flight reconciles the shutdown
    /// timeout.
    async fn run_controllers(
        &self,
        watching: Watching,
        shutdown: &CancellationToken,
    ) -> anyhow::Result<()> {
        let controllers = controller::act(watching, shutdown.clone());
        let mut controllers = std::pin::pin!(controllers);
        tokio::select! {
            biased;
            result = &mut controllers => return result,
            _ = shutdown.cancelled() => {}
        }
        let timeout = self.shutdown_timeout;
        match tokio::time::timeout(timeout, controllers).await {
            Ok(result) => result,
            Err(_) => {
                warn!(
                    ?timeout,
                    "in-flight reconciles did not finish in time; exiting anyway"
                );
                Ok(())
            }
        }
    }

    /// Waits for the lease, runs the controllers while holding it, and releases it on
    /// shutdown. Losing the lease stops the controllers first (the fence already refuses
    /// their writes), then releases it if still held, and waits for it again with fresh
    /// caches: what a term's controllers kept (expectations, writes remembered) is not carried
    /// into the next.
    async fn run_as_leader(
        &self,
        election: Election,
        shutdown: CancellationToken,
    ) -> anyhow::Result<()> {
        let leader = LeaderElection::new(
            self.lease.clone(),
            &election,
            &self.settings.instance,
            self.fence.clone(),
            self.settings.clock.clone(),
            self.exported.health.clone(),
        );
        let (lease, namespace) = (&election.name, &election.namespace);
        for term in 1.. {
            // A standby is healthy and ready: it is only waiting.
            self.exported.health.set_ready(true);
            info!(%lease, %namespace, warm = self.warm_standby, "waiting for the leader lease");
            let warm = self.warm_standby.then(|| self.watch(true));
            if !leader.acquire(&shutdown).await {
                return Ok(());
            }
            info!(%lease, "became the leader");
            let watching = warm.unwrap_or_else(|| self.watch(false));
            self.exported.metrics.leading(true);
            self.exported.health.set_ready(false);
            // Every line of this term carries the lease and the term's number in this process.
            let span = tracing::info_span!("term", %lease, term);
            let _migrating = self.migrate();
            let controllers = self.run_controllers(watching, &shutdown).instrument(span);
            // Losing the lease drops the controllers at once (their tasks are aborted): a
            // standby may already be acting. It comes first when both are ready.
            let result = tokio::select! {
                biased;
                _ = leader.hold() => None,
                result = controllers => Some(result),
            };
            self.exported.metrics.leading(false);
            leader.release().await;
            match result {
                Some(result) => return result,
                // Asked to stop meanwhile: the term ending changes nothing about that.
                None if shutdown.is_cancelled() => return Ok(()),
                None => warn!("stepped down; back to waiting for the lease with fresh caches"),
            }
        }
        Ok(())
    }
}
