//! Leader election on a coordination.k8s.io Lease, with client-go's guarantees.
//!
//! The decisions are in [`record`]; this is the shell that reads and writes the Lease:
//! - every write goes over the `resourceVersion` last read (create, renew, takeover, release),
//!   so a release never wipes another holder and two instances never both win;
//! - a standby times the lease from when it observed the record change ([`record::Observed`]);
//! - a missing Lease is created at once by whoever finds it missing, but its creator leads
//!   only a lease duration later, renewing it meanwhile: a missing Lease cannot say who held
//!   it last, and a holder whose Lease a person deleted acts on, unaware, until its renew
//!   deadline. A leader that finds its Lease gone steps down and creates it the same way.
//!   So does an instance that finds the Lease naming it in a record it did not see its own
//!   write make: its own create, held at the server past its answer, may have landed after
//!   such a deletion;
//! - a failed request is retried, by leader and standby alike: nothing here ends the process;
//! - the leader acts only while its [`Fence`] is open: until the renew deadline after the last
//!   renewal that landed (counted from when that renewal was sent, with the host's suspends
//!   counted: see [`suspended`]), and never after it saw another holder.
//!
//! A watch on the Lease wakes a standby the moment a leader releases it, and a leader the
//! moment someone else writes it (confirmed by a read: a watch can lag).
//!
//! Lease requests go through a client of their own, which no pod write can hold up (see
//! `client::build`), and outside the fence: the leader must be able to renew.

mod blocked;
mod lease;
pub mod record;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use parking_lot::Mutex;
use tokio::time::{Instant, sleep_until, timeout, timeout_at};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::clock::Clock;
use crate::fence::Fence;
use crate::health::Health;
use crate::jitter::jittered;
use blocked::{Blocked, needs_a_person};
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
    /// The `resourceVersion` of the last write of the Lease this instance saw land.
    written: Mutex<Option<String>>,
    /// A standby is ready unless it can never lead as things are ([`needs_a_person`]).
    health: Arc<Health>,
    /// When that was last said, while it lasts.
    blocked: Blocked,
}

enum Holder {
    Me,
    Other,
    /// There is no Lease.
    Nobody,
    Unknown,
}

/// A write that made this instance the Lease's holder.
enum Claim {
    /// Over a record it observed, sent at that instant: it leads at once.
    Taken(Instant),
    /// It leads at `lead_at`, a lease duration after its create of the Lease was answered or
    /// it first saw it named in a record it cannot vouch for (`why`).
    Deferred {
        sent: Instant,
        lead_at: Instant,
        why: &'static str,
    },
}

/// Why a holder stops holding, when no renewal landed in time.
const LAPSED: &str = "no renewal of the leader lease landed within the renew deadline";

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
            written: Mutex::new(None),
            health,
            blocked: Blocked::default(),
        }
    }

    /// Waits until this instance holds the lease; `false` if `shutdown` came first. Errors
    /// are logged and retried: a standby never gives up.
    pub async fn acquire(&self, shutdown: &CancellationToken) -> bool {
        let changes = self.changes();
        let mut changes = std::pin::pin!(changes);
        loop {
            // A read or write that hangs must not hold up a shutdown.
            let attempt = tokio::select! {
                biased;
                _ = shutdown.cancelled() => return false,
                attempt = self.try_acquire() => attempt,
            };
            let error = attempt.as_ref().err();
            self.blocked
                .report(error, &self.name, &self.namespace, &self.health);
            let next = match attempt {
                Ok(Some(Claim::Taken(sent))) => {
                    return self.lead(sent + self.timing.renew_deadline);
                }
                Ok(Some(Claim::Deferred { sent, lead_at, why })) => {
                    let wait = lead_at.saturating_duration_since(Instant::now());
                    info!(lease = %self.name, ?wait, "{why}; leading once a lease duration has passed, by when any holder it had has stopped");
                    let deadline = sent + self.timing.renew_deadline;
                    let waited = tokio::select! {
                        biased;
                        // Not released: that would hand over before the wait is out. It expires.
                        _ = shutdown.cancelled() => return false,
                        waited = self.renewing(deadline, Some(lead_at)) => waited,
                    };
                    match waited {
                        Ok(deadline) => return self.lead(deadline),
                        Err(why) => {
                            // Its record, unled, vouches for nothing: found naming this
                            // instance again, it is reclaimed (waited out), not renewed.
                            *self.written.lock() = None;
                            info!(lease = %self.name, "{why}; waiting for the lease again");
                            Instant::now() + jittered(self.timing.retry_period)
                        }
                    }
                }
                Ok(None) => self.wait_until(),
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

    /// The term begins: writes may leave until `deadline`.
    fn lead(&self, deadline: Instant) -> bool {
        self.fence.open_until(deadline);
        self.fence.begin_term();
        true
    }

    /// Keeps renewing the lease; returns when leadership may have lapsed: no renewal landed
    /// within the renew deadline (a hung connection, a failing API server), or the Lease
    /// names another holder or is gone. The fence is closed by then.
    pub async fn hold(&self) {
        let why = match self.fence.deadline() {
            Some(deadline) => self.renewing(deadline, None).await.err(),
            None => None,
        };
        self.step_down(why.unwrap_or(LAPSED));
    }

    /// Renews the Lease every third of it, starting from the renewal whose renew deadline is
    /// `deadline`: for good while leading (`until` is `None`; each renewal that lands opens
    /// the fence further), or until `until` after creating it, with the fence closed. Then,
    /// the renew deadline of the last renewal that landed. Stops early, saying why, when none
    /// landed within the renew deadline, or the Lease names another holder or is gone.
    async fn renewing(
        &self,
        mut deadline: Instant,
        until: Option<Instant>,
    ) -> Result<Instant, &'static str> {
        const LOST: &str = "the leader lease names another holder or was deleted";
        let changes = self.changes();
        let mut changes = std::pin::pin!(changes);
        let mut next = deadline - self.timing.renew_deadline + self.timing.renew_every;
        loop {
            let now = Instant::now();
            if deadline <= now {
                return Err(LAPSED);
            }
            if until.is_some_and(|until| until <= now) {
                return Ok(deadline);
            }
            tokio::select! {
                biased;
                _ = sleep_until(next) => match timeout(deadline - Instant::now(), self.renew()).await {
                    Ok(Ok(Wrote::Landed(sent))) => {
                        deadline = sent + self.timing.renew_deadline;
                        if until.is_none() {
                            self.fence.open_until(deadline);
                        }
                        next = sent + self.timing.renew_every;
                    }
                    Ok(Ok(Wrote::Lost)) => return Err(LOST),
                    Ok(Err(e)) => {
                        warn!(error = %e, "renewing the leader lease failed; retrying until the renew deadline");
                        next = Instant::now() + jittered(self.timing.retry_period);
                    }
                    Err(_) => {}
                },
                _ = sleep_until(until.unwrap_or(deadline).min(deadline)) => {}
                // The watch showing a record that names this instance (its own write, often
                // before that write's answer comes) is no news; another holder, or none, is
                // confirmed by a read. A read here would hold up the renewal due meanwhile:
                // behind a slow path, past its renew deadline (issue 45, fault 9).
                Some(()) = changes.next() => {
                    if !self.observed_holder_is_me() {
                        match self.holder_now().await {
                            Holder::Other | Holder::Nobody => return Err(LOST),
                            Holder::Me | Holder::Unknown => {}
                        }
                    }
                }
            }
        }
    }

    /// Gives the lease up so a standby takes over at once, if this instance still holds it;
    /// written over the version last read, so another holder is never wiped. First the
    /// writes of this term still in flight are let land (the controllers have stopped; no new
    /// one leaves): a successor must not act before they do. Bounded by the renew deadline: a
    /// release that does not happen in time only means the standby waits out the lease. Not
    /// at all if a write of this term was dropped before its answer came (its controllers were
    /// stopped first): it may still land, so the standby waits out the lease, as after a crash.
    pub async fn release(&self) {
        self.fence.close();
        let deadline = Instant::now() + self.timing.renew_deadline;
        if timeout_at(deadline, self.fence.settled()).await.is_err() {
            warn!(lease = %self.name, wait = ?self.timing.renew_deadline, "writes of this term were still unanswered; not releasing the leader lease: it expires by itself");
            return;
        }
        if self.fence.writes_abandoned() {
            warn!(lease = %self.name, "writes of this term were stopped before their answers came and may still land; not releasing the leader lease: it expires by itself");
            return;
        }
        let released = self.rewrite(|mine| record::released(mine, self.clock.now()));
        match timeout_at(deadline, released).await {
            Ok(Ok(Wrote::Landed(_))) => info!(lease = %self.name, "released the leader lease"),
            Ok(Ok(Wrote::Lost)) => {
                info!(lease = %self.name, "the leader lease names another holder or is gone; not released")
            }
            Ok(Err(e)) => {
                warn!(error = %e, "could not release the leader lease; it expires by itself")
            }
            Err(_) => {
                warn!(deadline = ?self.timing.renew_deadline, "releasing the leader lease did not finish in time; it expires by itself")
            }
        }
    }

    /// Reads the Lease and acts on it as [`record::decide`] says: how this instance now holds
    /// it, if it does.
    async fn try_acquire(&self) -> kube::Result<Option<Claim>> {
        let observed = self.read().await?;
        let decision = record::decide(
            observed.as_ref(),
            &self.identity,
            self.written.lock().as_deref(),
            self.timing.lease,
            Instant::now(),
        );
        if let Decision::WaitUntil(_) = decision {
            return Ok(None);
        }
        let claim = record::claim(
            observed.as_ref().map(|o| &o.spec),
            &self.identity,
            self.timing.lease,
            self.clock.now(),
        );
        Ok(match self.write(observed.as_ref(), claim).await? {
            Wrote::Landed(sent) => Some(match decision {
                // From the answer, not the send: a create held at the server may land long
                // after it left, after a person deleted the Lease under its holder.
                Decision::Create => Claim::Deferred {
                    sent,
                    lead_at: Instant::now() + self.timing.lease,
                    why: "created the leader lease",
                },
                Decision::Reclaim(lead_at) => Claim::Deferred {
                    sent,
                    lead_at,
                    why: "the leader lease names this instance, though no write of it this instance saw land did (a create of its own may have landed late)",
                },
                _ => Claim::Taken(sent),
            }),
            Wrote::Lost => None,
        })
    }

    /// One renewal, over the version last read (see [`Self::rewrite`]).
    async fn renew(&self) -> kube::Result<Wrote> {
        self.rewrite(|mine| {
            record::claim(
                Some(mine),
                &self.identity,
                self.timing.lease,
                self.clock.now(),
            )
        })
        .await
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
            &self.identity,
            self.written.lock().as_deref(),
            self.timing.lease,
            now,
        ) {
            Decision::WaitUntil(at) => at,
            _ => now + jittered(self.timing.retry_period),
        }
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
