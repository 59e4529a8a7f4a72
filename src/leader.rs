//! Leader election on a coordination.k8s.io Lease, with kube-lease-manager.
//!
//! kube-lease-manager lets a standby sleep until the holder's lease expires. A leader that
//! shuts down releases the lease, and the standby should take over at once, not a lease
//! duration later: so the standby also watches the Lease and retries as soon as it shows no
//! holder.

use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

pub struct LeaderElection {
    manager: LeaseManager,
    leases: Api<Lease>,
    name: String,
}

impl LeaderElection {
    pub async fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: &str,
        duration: Duration,
    ) -> kube_lease_manager::Result<Self> {
        let seconds = duration.as_secs().max(2);
        let manager = LeaseManagerBuilder::new(client.clone(), name)
            .with_namespace(namespace)
            .with_identity(identity)
            .with_duration(seconds)
            // Renew a third of the duration before expiry.
            .with_grace(seconds / 3)
            .build()
            .await?;
        Ok(Self {
            manager,
            leases: Api::namespaced(client, namespace),
            name: name.to_string(),
        })
    }

    /// Waits until this instance holds the lease. `false` if `shutdown` came first.
    pub async fn acquire(&self, shutdown: &CancellationToken) -> kube_lease_manager::Result<bool> {
        let mut released = std::pin::pin!(released(self.leases.clone(), self.name.clone()));
        loop {
            tokio::select! {
                held = self.manager.changed() => {
                    if held? {
                        return Ok(true);
                    }
                }
                // The lease is free: abandon the sleep inside `changed()`. Its cached state
                // still names the old holder until expiry; `release()` by a non-holder
                // changes nothing on the server but re-reads the Lease.
                Some(()) = released.next() => self.manager.release().await?,
                _ = shutdown.cancelled() => return Ok(false),
            }
        }
    }

    /// Keeps renewing the lease; returns when it was lost (or could not be renewed).
    pub async fn hold(&self) {
        match self.manager.changed().await {
            Ok(true) => warn!("lease state changed while leading; treating it as lost"),
            Ok(false) => warn!("lost the leader lease"),
            Err(e) => warn!(error = %e, "could not renew the leader lease"),
        }
    }

    /// Gives the lease up so a standby takes over at once.
    pub async fn release(&self) {
        match self.manager.release().await {
            Ok(()) => info!(lease = %self.name, "released the leader lease"),
            Err(e) => warn!(error = %e, "could not release the leader lease"),
        }
    }
}

/// Yields each time the Lease shows no holder.
fn released(leases: Api<Lease>, name: String) -> impl Stream<Item = ()> {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    watcher(leases, config)
        .default_backoff()
        .applied_objects()
        .filter_map(|lease| async move {
            let lease = lease.ok()?;
            let holder = lease
                .spec
                .and_then(|s| s.holder_identity)
                .unwrap_or_default();
            holder.is_empty().then_some(())
        })
}
