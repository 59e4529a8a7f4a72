//! One replica of the operator: the library's `Operator` over two transports into the model
//! (the controllers' controller_writes behind the fence, and the Lease's), with a wall clock that can
//! jump, and the lifecycle a process has: started, crashed (its memory gone, the cluster's
//! state kept), asked to stop, frozen and thawed.
//!
//! A freeze stops the replica's main task (the leadership term loop) and everything that
//! crosses its network: no request leaves, no answer or watch event is read. The reconciles
//! kube spawns as tasks of their own keep computing meanwhile, but can do nothing the
//! cluster would see; on thaw everything due runs at once, as in a process resumed after
//! SIGSTOP.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use podset_operator::client::{self, ControllerWrites};
use podset_operator::clock::Clock;
use podset_operator::controller::{Exported, Settings};
use podset_operator::fence::Fence;
use podset_operator::operator::{Election, Operator};
use podset_operator::scope::Scope;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::oracle::Actor;
use crate::transport::Transport;
use crate::world::{Sim, pick};

pub const LEASE_NAMESPACE: &str = "operators";
pub const LEASE_NAME: &str = "podset-operator-leader";

mod gate;
pub use gate::Gate;
use gate::Gated;

/// How the replicas of a run are set up.
#[derive(Clone, Debug)]
pub struct ReplicaSettings {
    /// `None`: a single replica without leader election.
    pub lease: Option<Duration>,
    pub resync: Duration,
    pub concurrency: u16,
    pub max_mutating_requests: usize,
    /// How long, once asked to stop, in-flight reconciles may take.
    pub shutdown_timeout: Duration,
    /// A standby watches the pods before it leads.
    pub warm_standby: bool,
    /// Every namespace, or the workload's as a list (one watch each, merged).
    pub scope: Scope,
}

struct Running {
    task: JoinHandle<()>,
    shutdown: CancellationToken,
}

struct State {
    incarnation: u32,
    identity: String,
    running: Option<Running>,
    alive: bool,
    /// What the current incarnation shares with its probes.
    exported: Exported,
    /// The current incarnation's fence: open while it leads.
    fence: Fence,
}

pub struct Replica {
    pub id: usize,
    pub gate: Arc<Gate>,
    settings: ReplicaSettings,
    /// Seconds the replica's wall clock is ahead of the true time.
    clock_offset: Arc<AtomicI64>,
    state: Mutex<State>,
    /// Woken each time an incarnation ends.
    ended: Notify,
}

impl Replica {
    pub fn new(id: usize, settings: ReplicaSettings) -> Arc<Self> {
        Arc::new(Self {
            id,
            gate: Arc::default(),
            settings,
            clock_offset: Arc::default(),
            state: Mutex::new(State {
                incarnation: 0,
                identity: format!("replica-{id}"),
                running: None,
                alive: false,
                exported: Exported::default(),
                fence: Fence::closed(),
            }),
            ended: Notify::new(),
        })
    }

    /// Whether `actor` is this replica's live incarnation.
    pub fn is_alive(&self, actor: Actor) -> bool {
        let state = self.state.lock();
        state.alive && actor == self.actor_of(&state)
    }

    fn actor_of(&self, state: &State) -> Actor {
        Actor::Replica {
            id: self.id,
            incarnation: state.incarnation,
        }
    }

    /// The name this replica holds the Lease under.
    pub fn identity(&self) -> String {
        self.state.lock().identity.clone()
    }

    /// Whether the current incarnation leads: it runs, and its fence is open.
    pub fn leads(&self) -> bool {
        let state = self.state.lock();
        state.running.is_some() && state.fence.is_open()
    }

    /// How many pods the current incarnation's cache holds.
    pub fn cached_pods(&self) -> usize {
        self.state.lock().exported.pods.len()
    }

    /// How many pods the current incarnation's `managed_pods` metric counts, as scraped.
    pub fn managed_pods(&self) -> usize {
        self.scrape("podset_operator_managed_pods") as usize
    }

    /// The sum of the current incarnation's metric `name` (every label set), as scraped.
    pub fn scrape(&self, name: &str) -> f64 {
        let exported = self.state.lock().exported.clone();
        let registry = exported.metrics.registry(exported.pods.clone());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("metrics encode");
        text.lines()
            .filter(|l| {
                l.strip_prefix(name)
                    .is_some_and(|r| r.starts_with(['{', ' ']))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// Whether the current incarnation reports ready (`/readyz`).
    pub fn ready(&self) -> bool {
        self.state.lock().exported.health.is_ready()
    }

    /// The current incarnation.
    pub fn current(&self) -> Actor {
        self.actor_of(&self.state.lock())
    }

    pub fn lease(&self) -> Option<Duration> {
        self.settings.lease
    }

    pub fn is_running(&self) -> bool {
        self.state.lock().running.is_some()
    }

    /// Starts a new incarnation: fresh memory, the same identity unless `new_identity` (a new
    /// pod rather than a container restarted in place).
    pub fn start(self: &Arc<Self>, sim: &Arc<Sim>, new_identity: bool) {
        let mut state = self.state.lock();
        if state.running.is_some() {
            return;
        }
        state.incarnation += 1;
        state.alive = true;
        if new_identity {
            state.identity = format!("replica-{}-{}", self.id, state.incarnation);
        }
        let actor = self.actor_of(&state);
        sim.trace(|| format!("{actor} starts as {}", state.identity));
        let operator = self.operator(sim, actor, &state.identity);
        state.fence = operator.fence.clone();
        sim.with(|w| {
            w.oracle
                .identify(actor, &state.identity, state.fence.clone())
        });
        state.exported = operator.exported.clone();
        let shutdown = CancellationToken::new();
        let span = tracing::info_span!("replica", r = %actor);
        let gated = Gated {
            gate: self.gate.clone(),
            inner: Box::pin(operator.run(shutdown.clone()).instrument(span)),
        };
        let (sim, replica) = (sim.clone(), self.clone());
        let task = tokio::spawn(async move {
            let result = gated.await;
            if let Err(e) = result {
                sim.violate(format!("{actor} stopped with an error: {e:#}"));
            }
            sim.trace(|| format!("{actor} stopped"));
            sim.with(|w| w.oracle.gone(actor));
            replica.stopped(actor);
        });
        state.running = Some(Running { task, shutdown });
    }

    fn operator(self: &Arc<Self>, sim: &Arc<Sim>, actor: Actor, identity: &str) -> Operator {
        let fence = match self.settings.lease {
            Some(_) => Fence::closed(),
            None => Fence::always_open(),
        };
        let exported = Exported::default();
        let transport = |fence| Transport::new(sim.clone(), self.clone(), actor, fence);
        let controller_writes = ControllerWrites {
            max_in_flight: self.settings.max_mutating_requests,
            fence: fence.clone(),
        };
        let metrics = exported.metrics.clone();
        let controllers = client::over(
            transport(Some(fence.clone())),
            "default",
            metrics.clone(),
            Some(controller_writes),
        );
        let lease = client::over(transport(None), "default", metrics, None);
        let (clock_sim, offset) = (sim.clone(), self.clock_offset.clone());
        let clock = Clock::new(move || {
            let skew = jiff::SignedDuration::from_secs(offset.load(Ordering::SeqCst));
            clock_sim.now() + skew
        });
        Operator {
            migrate_storage: false,
            controllers,
            lease,
            fence,
            settings: Settings {
                scope: self.settings.scope.clone(),
                podset: true,
                at: true,
                concurrency: self.settings.concurrency,
                at_concurrency: self.settings.concurrency,
                resync: self.settings.resync,
                instance: identity.to_string(),
                clock,
            },
            exported,
            election: self.settings.lease.map(|duration| Election {
                namespace: LEASE_NAMESPACE.into(),
                name: LEASE_NAME.into(),
                duration,
            }),
            shutdown_timeout: self.settings.shutdown_timeout,
            warm_standby: self.settings.warm_standby,
        }
    }

    fn stopped(&self, actor: Actor) {
        let mut state = self.state.lock();
        if self.actor_of(&state) == actor {
            state.running = None;
            state.alive = false;
        }
        self.ended.notify_waiters();
    }

    /// Kills the process: nothing it holds in memory survives, nothing more leaves it.
    pub fn crash(&self, sim: &Sim) {
        let mut state = self.state.lock();
        let Some(running) = state.running.take() else {
            return;
        };
        state.alive = false;
        running.task.abort();
        let actor = self.actor_of(&state);
        sim.with(|w| w.oracle.gone(actor));
        sim.trace(|| format!("{actor} crashes"));
        self.ended.notify_waiters();
    }

    /// Crashes `actor` (if it is still the live incarnation), and starts it again a little
    /// later.
    pub fn crash_and_restart(self: &Arc<Self>, sim: &Arc<Sim>, actor: Actor) {
        if !self.is_alive(actor) {
            return;
        }
        self.crash(sim);
        let (sim, replica) = (sim.clone(), self.clone());
        let new_identity = sim.with(|w| w.rng.bool());
        tokio::spawn(async move {
            tokio::time::sleep(pick(&sim, Duration::ZERO, Duration::from_secs(10))).await;
            replica.start(&sim, new_identity);
        });
    }

    /// SIGTERM: the replica stops as it would in a rolling upgrade, and is waited for. It
    /// stays the running incarnation until it has stopped: nothing restarts it meanwhile, and
    /// a crash kills it.
    ///
    /// The README's promise: in-flight reconciles get the shutdown timeout, the Lease's
    /// release its renew deadline, and then the process exits; not doing so while it ran is
    /// a violation. The kubelet kills it at 30 s.
    pub async fn terminate(&self, sim: &Sim) {
        const GRACE: Duration = Duration::from_secs(30);
        let renew_deadline = self.settings.lease.unwrap_or_default() * 2 / 3;
        let promised = self.settings.shutdown_timeout + renew_deadline + Duration::from_secs(1);
        let actor = {
            let state = self.state.lock();
            let Some(running) = &state.running else {
                return;
            };
            running.shutdown.cancel();
            self.actor_of(&state)
        };
        sim.trace(|| format!("{actor} is asked to stop"));
        let freezes = self.gate.freezes.load(Ordering::SeqCst);
        let ended = async {
            loop {
                let ended = self.ended.notified();
                tokio::pin!(ended);
                ended.as_mut().enable();
                if !self.is_alive(actor) {
                    return;
                }
                ended.await;
            }
        };
        tokio::pin!(ended);
        if tokio::time::timeout(promised, &mut ended).await.is_ok() {
            return;
        }
        let why = format!("{actor} did not stop within {promised:?} of SIGTERM");
        // A process paused meanwhile could not stop; one that ran should have.
        match self.gate.freezes.load(Ordering::SeqCst) == freezes {
            true => sim.violate(why),
            false => sim.trace(|| format!("{why} (it was frozen meanwhile)")),
        }
        let grace = GRACE.saturating_sub(promised);
        if tokio::time::timeout(grace, ended).await.is_err() {
            sim.trace(|| format!("{actor} is killed at the end of its grace period"));
            self.crash(sim);
        }
    }

    /// Sets the replica's wall clock `seconds` ahead of the true time (behind: negative).
    pub fn jump_clock(&self, sim: &Sim, seconds: i64) {
        self.clock_offset.store(seconds, Ordering::SeqCst);
        sim.with(|w| w.oracle.clock_jumped(self.id, seconds));
    }
}
