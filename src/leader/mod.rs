//! Leader election on a coordination.k8s.io Lease, with client-go's guarantees.
//!
//! The decisions are in [`record`]; this is the shell that reads and writes the Lease:
//! - every write goes over the `resourceVersion` last read (create, renew, takeover, release),
//!   so a release never wipes another holder and two instances never both win;
//! - a standby times the lease from when it observed the record change ([`record::Observed`]);
//! - a missing Lease is written again by its holder as soon as it notices, and created by a
//!   standby only a lease duration after it saw it missing (a Lease deleted under a live
//!   holder is no free lease: the holder acts until its renew deadline);
//! - a failed request is retried, by leader and standby alike: nothing here ends the process;
//! - the leader acts only while its [`Fence`] is open: until the renew deadline after the last
//!   renewal that landed (counted from when that renewal was sent), and never after it saw
//!   another holder.
//!
//! A watch on the Lease wakes a standby the moment a leader releases it, and a leader the
//! moment someone else writes it (confirmed by a read: a watch can lag).
//!
//! Lease requests go through a client of their own, which no pod write can hold up (see
//! `client::build`), and outside the fence: the leader must be able to renew.

pub mod fence;
pub mod record;

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{ObjectMeta, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{Config as WatchConfig, Event, watcher};
use kube::{Api, Client};
use parking_lot::Mutex;
use tokio::time::{Instant, sleep_until, timeout};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::clock::Clock;
use crate::health::Health;
use crate::jitter::jittered;
pub use fence::{Fence, NotLeading};
use record::{Decision, Observed, Timing};

pub struct LeaderElection {
    leases: Api<Lease>,
    namespace: String,
    name: String,
    identity: String,
    timing: Timing,
    fence: Fence,
    clock: Clock,
    observed: Mutex<Option<Observed>>,
    /// When this instance first saw that there is no Lease, while there is none.
    absent_since: Mutex<Option<Instant>>,
    /// A standby is ready unless it can never lead as things are ([`needs_a_person`]).
    health: Arc<Health>,
    /// When that was last logged, while it lasts.
    blocked_since_logged: Mutex<Option<Instant>>,
}

enum Holder {
    Me,
    Other,
    /// There is no Lease.
    Nobody,
    Unknown,
}

/// How a write of the Lease ended.
enum Wrote {
    /// It landed; it was sent at this instant.
    Landed(Instant),
    /// Someone else wrote it first (409), or it is gone (404): read it again.
    Lost,
}

/// Where the leader Lease is, and how long it lasts.
#[derive(Clone, Debug)]
pub struct Election {
    pub namespace: String,
    pub name: String,
    pub duration: Duration,
}

impl LeaderElection {
    /// `client` should be a client of its own (no queue behind pod writes, no fence).
    pub fn new(
        client: Client,
        election: &Election,
        identity: &str,
        fence: Fence,
        clock: Clock,
        health: Arc<Health>,
    ) -> Self {
        fence.close();
        Self {
            leases: Api::namespaced(client, &election.namespace),
            namespace: election.namespace.clone(),
            name: election.name.clone(),
            identity: identity.to_string(),
            timing: record::timing(election.duration),
            fence,
            clock,
            observed: Mutex::new(None),
            absent_since: Mutex::new(None),
            health,
            blocked_since_logged: Mutex::new(None),
        }
    }

    /// Waits until this instance holds the lease; `false` if `shutdown` came first. Errors
    /// are logged and retried: a standby never gives up.
    pub async fn acquire(&self, shutdown: &CancellationToken) -> bool {
        let changes = self.changes();
        let mut changes = std::pin::pin!(changes);
        loop {
            let attempt = self.try_acquire().await;
            self.report_blocked(attempt.as_ref().err());
            let next = match attempt {
                Ok(true) => {
                    self.fence.begin_term();
                    return true;
                }
                Ok(false) => self.wait_until(),
                Err(e) => {
                    if needs_a_person(&e, &self.namespace).is_none() {
                        warn!(error = %e, lease = %self.name, "reading or writing the leader lease failed; retrying");
                    }
                    Instant::now() + jittered(self.timing.retry_period)
                }
            };
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => return false,
                // Someone wrote the Lease (a release, a new holder): decide again at once.
                Some(()) = changes.next() => {}
                _ = sleep_until(next) => {}
            }
        }
    }

    /// A standby that can never lead as things are (the Lease's namespace does not exist,
    /// the operator may not use Leases there) says why, at most once a minute, and is not
    /// ready: a Deployment's rollout then stops instead of replacing working pods with ones
    /// that wait for good. Once that clears, it is ready again.
    fn report_blocked(&self, error: Option<&kube::Error>) {
        let mut logged = self.blocked_since_logged.lock();
        match error.and_then(|e| needs_a_person(e, &self.namespace)) {
            Some(why) => {
                self.health.set_ready(false);
                let now = Instant::now();
                if logged.is_none_or(|at| now - at >= Duration::from_secs(60)) {
                    error!(lease = %self.name, namespace = %self.namespace, "the leader lease cannot be used: {why}; retrying");
                    *logged = Some(now);
                }
            }
            None if logged.take().is_some() => {
                self.health.set_ready(true);
                info!(lease = %self.name, namespace = %self.namespace, "the leader lease can be used again");
            }
            None => {}
        }
    }

    /// Keeps renewing the lease; returns when leadership may have lapsed: no renewal landed
    /// within the renew deadline (a hung connection, a failing API server), or another holder
    /// wrote the Lease. The fence is closed by then.
    pub async fn hold(&self) {
        let changes = self.changes();
        let mut changes = std::pin::pin!(changes);
        let mut next = Instant::now() + self.timing.renew_every;
        loop {
            let Some(deadline) = self.fence.deadline().filter(|d| *d > Instant::now()) else {
                return self
                    .step_down("no renewal of the leader lease landed within the renew deadline");
            };
            tokio::select! {
                biased;
                _ = sleep_until(next) => match timeout(deadline - Instant::now(), self.renew()).await {
                    Ok(Ok(Wrote::Landed(sent))) => next = sent + self.timing.renew_every,
                    Ok(Ok(Wrote::Lost)) => return self.step_down("the leader lease names another holder"),
                    Ok(Err(e)) => {
                        warn!(error = %e, "renewing the leader lease failed; retrying until the renew deadline");
                        next = Instant::now() + jittered(self.timing.retry_period);
                    }
                    Err(_) => {}
                },
                _ = sleep_until(deadline) => {
                    return self.step_down("no renewal of the leader lease landed within the renew deadline");
                }
                Some(()) = changes.next() => match self.holder_now().await {
                    Holder::Other => return self.step_down("the leader lease names another holder"),
                    // Deleted: write it again at once, as a renewal.
                    Holder::Nobody => next = Instant::now(),
                    Holder::Me | Holder::Unknown => {}
                },
            }
        }
    }

    /// Gives the lease up so a standby takes over at once, if this instance still holds it
    /// as last read; written over that version, so another holder is never wiped. Bounded by
    /// the renew deadline: a failed release only means the standby waits out the lease. Not
    /// while a write of this term may still land (its controllers were stopped before its
    /// answer came): the standby then waits out the lease, as after a crash.
    pub async fn release(&self) {
        self.fence.close();
        if self.fence.writes_abandoned() {
            warn!(lease = %self.name, "writes of this term were stopped before their answers came and may still land; not releasing the leader lease: it expires by itself");
            return;
        }
        let Some(mine) = self.observed.lock().clone() else {
            return;
        };
        if mine.holder() != self.identity {
            return;
        }
        let free = record::released(&mine.spec, self.clock.now());
        let write = self.write(Some(&mine), free);
        match timeout(self.timing.renew_deadline, write).await {
            Ok(Ok(Wrote::Landed(_))) => info!(lease = %self.name, "released the leader lease"),
            Ok(Ok(Wrote::Lost)) => {
                info!(lease = %self.name, "the leader lease had already changed; not released")
            }
            Ok(Err(e)) => {
                warn!(error = %e, "could not release the leader lease; it expires by itself")
            }
            Err(_) => {
                warn!(deadline = ?self.timing.renew_deadline, "releasing the leader lease did not finish in time; it expires by itself")
            }
        }
    }

    /// Reads the Lease and acts on it as [`record::decide`] says; `true` if this instance now
    /// holds it.
    async fn try_acquire(&self) -> kube::Result<bool> {
        let observed = self.read().await?;
        let now = Instant::now();
        let absent_since = *self.absent_since.lock();
        let decision = record::decide(
            observed.as_ref(),
            absent_since,
            &self.identity,
            self.timing.lease,
            now,
        );
        if let Decision::WaitUntil(_) = decision {
            return Ok(false);
        }
        let claim = record::claim(
            observed.as_ref().map(|o| &o.spec),
            &self.identity,
            self.timing.lease,
            self.clock.now(),
        );
        Ok(matches!(
            self.write(observed.as_ref(), claim).await?,
            Wrote::Landed(_)
        ))
    }

    /// One renewal, over the version last read; a conflict is read again, and renewed again
    /// only if the Lease still names this instance (someone changed something else). A
    /// deleted Lease is created again.
    async fn renew(&self) -> kube::Result<Wrote> {
        loop {
            let mine = self.observed.lock().clone();
            if mine.as_ref().is_some_and(|m| m.holder() != self.identity) {
                return Ok(Wrote::Lost);
            }
            let claim = record::claim(
                mine.as_ref().map(|m| &m.spec),
                &self.identity,
                self.timing.lease,
                self.clock.now(),
            );
            match self.write(mine.as_ref(), claim).await? {
                Wrote::Landed(sent) => return Ok(Wrote::Landed(sent)),
                Wrote::Lost => {
                    self.read().await?;
                }
            }
        }
    }

    /// Who a fresh read says holds the Lease (a watch event can lag behind our own writes).
    async fn holder_now(&self) -> Holder {
        match timeout(self.timing.retry_period, self.read()).await {
            Ok(Ok(Some(o))) if o.holder() == self.identity => Holder::Me,
            Ok(Ok(Some(_))) => Holder::Other,
            Ok(Ok(None)) => Holder::Nobody,
            // The renew deadline decides.
            _ => Holder::Unknown,
        }
    }

    fn step_down(&self, why: &str) {
        self.fence.close();
        warn!(lease = %self.name, "{why}; stepping down");
    }

    /// When a standby should look again: at the observed expiry, or after a retry period
    /// when the Lease could be written at once but the write lost.
    fn wait_until(&self) -> Instant {
        let now = Instant::now();
        match record::decide(
            self.observed.lock().as_ref(),
            *self.absent_since.lock(),
            &self.identity,
            self.timing.lease,
            now,
        ) {
            Decision::WaitUntil(at) => at,
            _ => now + jittered(self.timing.retry_period),
        }
    }

    /// GETs the Lease and records the observation; `None` if there is none.
    async fn read(&self) -> kube::Result<Option<Observed>> {
        let lease = self.leases.get_opt(&self.name).await?;
        Ok(self.observe(lease, Instant::now()))
    }

    fn observe(&self, lease: Option<Lease>, now: Instant) -> Option<Observed> {
        let mut absent_since = self.absent_since.lock();
        *absent_since = match lease {
            Some(_) => None,
            None => absent_since.or(Some(now)),
        };
        let mut observed = self.observed.lock();
        *observed = lease.map(|l| {
            let version = l.metadata.resource_version.unwrap_or_default();
            Observed::seen(observed.as_ref(), l.spec.unwrap_or_default(), version, now)
        });
        observed.clone()
    }

    /// Creates the Lease (nothing observed) or replaces it over the observed version. A write
    /// that lands opens the fence until the renew deadline after it was sent.
    async fn write(
        &self,
        over: Option<&Observed>,
        spec: k8s_openapi::api::coordination::v1::LeaseSpec,
    ) -> kube::Result<Wrote> {
        let holds = spec.holder_identity.as_deref() == Some(self.identity.as_str());
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                resource_version: over.map(|o| o.version.clone()),
                ..Default::default()
            },
            spec: Some(spec),
        };
        let sent = Instant::now();
        let params = PostParams::default();
        let written = match over {
            None => self.leases.create(&params, &lease).await,
            Some(_) => self.leases.replace(&self.name, &params, &lease).await,
        };
        match written {
            Ok(lease) => {
                if holds {
                    self.fence.open_until(sent + self.timing.renew_deadline);
                }
                self.observe(Some(lease), Instant::now());
                Ok(Wrote::Landed(sent))
            }
            // A 404 on a create is the namespace's, not the Lease's: see `needs_a_person`.
            Err(kube::Error::Api(s)) if s.code == 409 || (s.code == 404 && over.is_some()) => {
                Ok(Wrote::Lost)
            }
            Err(e) => Err(e),
        }
    }

    /// A wake-up each time the Lease's record changes or the Lease goes, as its watch shows it
    /// (a relist that shows the same record is no change).
    fn changes(&self) -> impl Stream<Item = ()> + '_ {
        let config = WatchConfig::default().fields(&format!("metadata.name={}", self.name));
        // Whether the relist under way has shown the Lease.
        let mut listed = false;
        watcher(self.leases.clone(), config)
            .default_backoff()
            .filter_map(move |event| {
                let seen = match event {
                    Ok(Event::Apply(lease)) => Some(Some(lease)),
                    Ok(Event::InitApply(lease)) => {
                        listed = true;
                        Some(Some(lease))
                    }
                    Ok(Event::Delete(_)) => Some(None),
                    Ok(Event::Init) => {
                        listed = false;
                        None
                    }
                    Ok(Event::InitDone) => (!listed).then_some(None),
                    Err(_) => None,
                };
                let changed = seen.is_some_and(|lease| {
                    let before = self.observed.lock().clone().map(|b| b.spec);
                    self.observe(lease, Instant::now()).map(|o| o.spec) != before
                });
                async move { changed.then_some(()) }
            })
    }
}

/// Why a Lease request failed in a way only a person can mend, if it did.
fn needs_a_person(error: &kube::Error, namespace: &str) -> Option<String> {
    let kube::Error::Api(status) = error else {
        return None;
    };
    let about_namespace = status
        .details
        .as_ref()
        .is_some_and(|d| d.kind == "namespaces");
    match status.code {
        404 if about_namespace => Some(format!(
            "the leader election namespace {namespace:?} does not exist: create it, or set --leader-election-namespace (LEADER_ELECTION_NAMESPACE) to where the operator's Lease should live"
        )),
        403 => Some(format!(
            "the operator may not use Leases in namespace {namespace:?} ({}): grant it the leader election Role there, or set --leader-election-namespace (LEADER_ELECTION_NAMESPACE)",
            status.message
        )),
        _ => None,
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
mod tests;
