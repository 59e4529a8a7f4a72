//! Leader election on a coordination.k8s.io Lease, with kube-lease-manager.
//!
//! kube-lease-manager lets a standby sleep until the holder's lease expires. A leader that
//! shuts down releases the lease, and the standby should take over at once, not a lease
//! duration later: so the standby also watches the Lease and retries as soon as it shows no
//! holder.
//!
//! A leader acts only while it sees its renewals land, as client-go's renew deadline: one
//! whose renewals hang or fail for two thirds of the lease stops before a standby may take
//! over (at the full lease). Errors short of that deadline (an API server restart) are
//! retried, by leader and standby alike, instead of ending the process. A leader also stops at
//! once when the Lease names another holder.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use futures::{Stream, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::jitter::jittered;

pub struct LeaderElection {
    manager: LeaseManager,
    leases: Api<Lease>,
    name: String,
    identity: String,
    renew_deadline: Duration,
    retry_period: Duration,
    /// A release that failed after stepping down: until it succeeds, the lease manager still
    /// believes it leads, and its `changed()` would keep renewing the lease for an instance
    /// that no longer acts, so no one else could ever take it.
    unreleased: AtomicBool,
}

impl LeaderElection {
    pub async fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: &str,
        duration: Duration,
    ) -> kube_lease_manager::Result<Self> {
        let Timing {
            seconds,
            grace,
            renew_deadline,
            retry_period,
        } = lease_timing(duration);
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
            identity: identity.to_string(),
            renew_deadline,
            retry_period,
            unreleased: Default::default(),
        })
    }

    /// Waits until this instance holds the lease. `false` if `shutdown` came first.
    pub async fn acquire(&self, shutdown: &CancellationToken) -> kube_lease_manager::Result<bool> {
        let released = holders(self.leases.clone(), self.name.clone())
            .filter_map(|holder| async move { holder.is_empty().then_some(()) });
        let mut released = std::pin::pin!(released);
        while self.unreleased.load(Ordering::Relaxed) {
            tokio::select! {
                _ = tokio::time::sleep(jittered(self.retry_period)) => self.release().await,
                _ = shutdown.cancelled() => return Ok(false),
            }
        }
        loop {
            tokio::select! {
                held = self.manager.changed() => match held {
                    Ok(true) => return Ok(true),
                    Ok(false) => {}
                    Err(e) => {
                        warn!(error = %e, "reading the leader lease failed; retrying");
                        tokio::select! {
                            _ = tokio::time::sleep(jittered(self.retry_period)) => {}
                            _ = shutdown.cancelled() => return Ok(false),
                        }
                    }
                },
                // The lease is free: abandon the sleep inside `changed()`. Its cached state
                // still names the old holder until expiry; `release()` by a non-holder
                // changes nothing on the server but re-reads the Lease.
                Some(()) = released.next() => self.manager.release().await?,
                _ = shutdown.cancelled() => return Ok(false),
            }
        }
    }

    /// Keeps renewing the lease; returns when it was lost, or when no renewal was seen to land
    /// for the renew deadline (whatever the reason: a hung connection, a failing API server),
    /// so that the caller stops acting before a standby can take over. The Lease watch that
    /// shows renewals also shows a write by anyone else (a standby that judged the lease
    /// expired, an administrator): that ends leadership at once, where the lease manager
    /// would notice only at its next renewal, a third of the lease later.
    pub async fn hold(&self) {
        let writes = holders(self.leases.clone(), self.name.clone());
        let mut writes = std::pin::pin!(writes);
        let mut deadline = Instant::now() + self.renew_deadline;
        // After a failed renewal, when to try again; the deadline keeps running meanwhile.
        let mut pause: Option<Instant> = None;
        loop {
            tokio::select! {
                changed = self.manager.changed(), if pause.is_none() => match changed {
                    Ok(true) => {}
                    Ok(false) => return warn!("lost the leader lease"),
                    Err(e) => {
                        warn!(error = %e, "renewing the leader lease failed; retrying until the renew deadline");
                        pause = Some(Instant::now() + jittered(self.retry_period));
                    }
                },
                _ = tokio::time::sleep_until(pause.unwrap_or(deadline)), if pause.is_some() => pause = None,
                Some(holder) = writes.next() => {
                    if holder != self.identity {
                        return warn!(%holder, "the leader lease names another holder; stepping down at once");
                    }
                    deadline = Instant::now() + self.renew_deadline;
                }
                _ = tokio::time::sleep_until(deadline) => {
                    return warn!(deadline = ?self.renew_deadline, "no renewal of the leader lease seen within the renew deadline; stepping down before it can expire");
                }
            }
        }
    }

    /// Gives the lease up so a standby takes over at once. Bounded by the renew deadline: a
    /// leader that stepped down because its connection hangs would otherwise wait on that
    /// connection (kube's read timeout, minutes) before it rejoins the election or exits.
    pub async fn release(&self) {
        let released = tokio::time::timeout(self.renew_deadline, self.manager.release()).await;
        self.unreleased
            .store(!matches!(released, Ok(Ok(()))), Ordering::Relaxed);
        match released {
            Ok(Ok(())) => info!(lease = %self.name, "released the leader lease"),
            Ok(Err(e)) => {
                warn!(error = %e, "could not release the leader lease; retrying before rejoining the election")
            }
            Err(_) => warn!(
                deadline = ?self.renew_deadline,
                "releasing the leader lease did not finish within the renew deadline; retrying before rejoining the election"
            ),
        }
    }
}

/// The holder ("" for none) each time the Lease is written: every renewal shows here.
fn holders(leases: Api<Lease>, name: String) -> impl Stream<Item = String> {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    watcher(leases, config)
        .default_backoff()
        .applied_objects()
        .filter_map(
            |lease| async move { Some(lease.ok()?.spec?.holder_identity.unwrap_or_default()) },
        )
}

#[derive(Debug, PartialEq)]
struct Timing {
    /// The lease duration, in whole seconds.
    seconds: u64,
    /// How long before its expiry the holder renews, in whole seconds.
    grace: u64,
    /// How long the holder acts without seeing a renewal land.
    renew_deadline: Duration,
    /// How long a failed Lease request waits before the next.
    retry_period: Duration,
}

/// Renewals every third of the lease (with two thirds left, so that one late or lost
/// renewal never lets it lapse), and a renew deadline of two thirds: a third of the lease
/// between the holder stepping down and a standby taking over. Failed requests are retried
/// five times within the deadline (client-go's 2 s for its 10 s).
fn lease_timing(duration: Duration) -> Timing {
    let seconds = duration.as_secs().max(2);
    let renew_deadline = Duration::from_secs(seconds) * 2 / 3;
    Timing {
        seconds,
        grace: (seconds * 2 / 3).clamp(1, seconds - 1),
        renew_deadline,
        retry_period: renew_deadline / 5,
    }
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
    fn a_leader_renews_then_steps_down_before_its_lease_can_expire() {
        for seconds in [1, 2, 3, 8, 15] {
            let t = lease_timing(Duration::from_secs(seconds));
            let (lease, every) = (
                Duration::from_secs(t.seconds),
                Duration::from_secs(t.seconds - t.grace),
            );
            assert!(t.grace > 0 && t.grace < t.seconds, "{t:?}");
            assert!(
                every <= t.renew_deadline && t.renew_deadline < lease,
                "{seconds} s: renews every {every:?}, steps down after {:?}",
                t.renew_deadline
            );
        }
        assert_eq!(
            lease_timing(Duration::from_secs(15)),
            Timing {
                seconds: 15,
                grace: 10,
                renew_deadline: Duration::from_secs(10),
                retry_period: Duration::from_secs(2),
            }
        );
    }

    /// Two instances on one host (two `make run`s, say) must not both think they hold the
    /// lease.
    #[test]
    fn default_identities_differ_per_process() {
        assert_ne!(default_identity(), default_identity());
    }
}
