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
        let (seconds, grace) = lease_timing(duration);
        let manager = LeaseManagerBuilder::new(client.clone(), name)
            .with_namespace(namespace)
            .with_identity(identity)
            .with_duration(seconds)
            .with_grace(grace)
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

/// The lease duration and how long before its expiry the holder renews, in whole seconds.
/// A third of the duration, and at least a second: renewing only at expiry would let the
/// lease lapse on every renewal of a 2 s lease.
fn lease_timing(duration: Duration) -> (u64, u64) {
    let seconds = duration.as_secs().max(2);
    (seconds, (seconds / 3).max(1))
}

/// This instance's name in the Lease and in events, outside a cluster (where the pod name is
/// given): the hostname plus a random suffix, as client-go's leader election does, so that
/// two instances on one host never both believe they hold the lease.
pub fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "podset-operator".into());
    format!("{host}_{:08x}", fastrand::u32(..))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_lease_renews_before_it_expires() {
        for seconds in [1, 2, 3, 15] {
            let (duration, grace) = lease_timing(Duration::from_secs(seconds));
            assert!(
                grace > 0 && grace < duration,
                "{seconds} s: renews {grace} s before a {duration} s lease expires"
            );
        }
        assert_eq!(lease_timing(Duration::from_secs(15)), (15, 5));
    }

    /// Two instances on one host (two `make run`s, say) must not both think they hold the
    /// lease.
    #[test]
    fn default_identities_differ_per_process() {
        assert_ne!(default_identity(), default_identity());
    }
}
