//! One seed: a cluster, the operator's replicas and the users drawn from it, a fault phase,
//! then the faults stop and the run waits for everything to converge within
//! [`LIVENESS_BOUND`], and for the operator to stay quiet once it has.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument as _;

use podset_operator::controller::STARTUP_GRACE;
use podset_operator::leader::record::timing;
use podset_operator::scope::Scope;

use crate::faults::{Fault, Faults, MAX_HOLD, STALLS_OVER, secs};
use crate::model::objects;
use crate::model::resource::Kind;
use crate::model::store::Store;
use crate::oracle::Oracle;
use crate::replica::{LEASE_NAMESPACE, Replica, ReplicaSettings};
use crate::trace;
use crate::workload::{self, NAMESPACES};
use crate::world::{Sim, World, pick};

/// Once the faults stop, everything converges within this: a PodSet's backoff grown during
/// the faults (at most 5 minutes) to its next try, a lease (at most 30 s) and the start-up
/// grace (2 s) to a leader acting, and a margin.
pub const LIVENESS_BOUND: Duration = Duration::from_secs(345);
mod threads;
pub use threads::{on_thread, panicked};

/// How long a converged operator is watched for writes it should not make.
pub const IDLE_WATCH: Duration = Duration::from_secs(180);

#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Record the trace (requests, writes, faults, the operators' logs).
    pub trace: bool,
    /// Switch on exactly these faults, instead of each with even odds.
    pub faults: Option<Vec<Fault>>,
}

#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Report {
    pub seed: u64,
    pub violations: Vec<String>,
    pub faults: BTreeMap<Fault, u64>,
    pub checks: u64,
    pub requests: u64,
    /// From the end of the faults to everything converged.
    pub converged_after: Option<Duration>,
    pub simulated: Duration,
    pub trace: Vec<String>,
}

impl Report {
    pub fn failed(&self) -> bool {
        !self.violations.is_empty()
    }
}

/// Runs seed `seed` on a thread of its own.
pub fn run(seed: u64, options: &Options) -> Report {
    let options = options.clone();
    let trace = options.trace;
    on_thread(seed, trace, move || async move {
        simulate(seed, &options).await
    })
    .unwrap_or_else(|panicked| Report {
        seed,
        violations: vec![panicked],
        ..Report::default()
    })
}

/// A simulated cluster: the model with its namespaces and the world's tasks (bookmarks,
/// compaction), and `count` replicas set up with `settings`, not started yet.
pub fn cluster(
    seed: u64,
    faults: Faults,
    namespaces: &[&str],
    count: usize,
    settings: ReplicaSettings,
) -> (Arc<Sim>, Vec<Arc<Replica>>) {
    let mut store = Store::starting_at(100);
    for ns in namespaces {
        store.add_namespace(ns);
    }
    let world = World {
        store,
        oracle: Oracle::default(),
        faults,
        rng: stream(seed, 3),
        requests: 0,
    };
    let sim = Sim::new(world);
    // A warm standby acts as it wins: the lease's own separation, without the start-up grace.
    let (margin, excused) = match (settings.lease, settings.warm_standby) {
        (None, _) => (Duration::MAX, STARTUP_GRACE),
        (Some(l), false) => (l / 3 + STARTUP_GRACE, STARTUP_GRACE),
        (Some(l), true) => (l / 3, STARTUP_GRACE.min(l / 3)),
    };
    sim.with(|w| {
        w.oracle.takeover_margin = margin;
        w.oracle.held_excused = excused;
        w.oracle.lease = settings.lease;
    });
    tokio::spawn(bookmarks(sim.clone()).in_current_span());
    let replicas = (0..count)
        .map(|id| Replica::new(id, settings.clone()))
        .collect();
    (sim, replicas)
}

/// What the run found, once it is over: every replica is stopped first.
pub fn finish(sim: &Arc<Sim>, replicas: &[Arc<Replica>], report: &mut Report) {
    for replica in replicas {
        replica.crash(sim);
    }
    sim.with(|w| {
        report
            .violations
            .extend(w.oracle.violations().iter().cloned());
        report.faults = w.faults.counts.clone();
        report.checks = w.oracle.checks;
        report.requests = w.requests;
    });
    report.simulated = sim.elapsed();
    report.trace = trace::take();
}

/// The random streams of a run, each its own so that drawing more from one (a fault added)
/// leaves the others as they were.
fn stream(seed: u64, n: u64) -> fastrand::Rng {
    fastrand::Rng::with_seed(seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

async fn simulate(seed: u64, options: &Options) -> Report {
    trace::begin(options.trace);
    let mut setup = stream(seed, 1);
    let mut faults = Faults::new(stream(seed, 2), options.faults.as_deref());
    let span = Duration::from_secs(setup.u64(60..=180));
    let (count, settings) = replica_settings(&mut setup);
    faults.slow_path(settings.lease.map(|l| timing(l).renew_deadline));
    faults.draw_rejecting("web-0");
    let namespaces: Vec<&str> = NAMESPACES.into_iter().chain([LEASE_NAMESPACE]).collect();
    let scope = settings.scope.clone();
    let (sim, replicas) = cluster(seed, faults, &namespaces, count, settings);
    let plan = workload::plan(&mut stream(seed, 4), span);
    // The users' own waits (an At's command, its time to live) come on top of the operator's.
    let bound = LIVENESS_BOUND + workload::lasts(&plan);
    sim.trace(|| {
        let enabled = sim.with(|w| w.faults.enabled().clone());
        let rejecting = sim.with(|w| w.faults.rejecting.clone());
        format!("seed {seed}: {count} replicas watching {scope}, faults for {span:?}: {enabled:?}, every pod rejected of {rejecting:?}")
    });
    for replica in &replicas {
        replica.start(&sim, false);
    }
    tokio::spawn(workload::run(sim.clone(), plan));
    tokio::spawn(replica_faults(sim.clone(), replicas.clone()));
    let mut report = Report {
        seed,
        ..Report::default()
    };
    if until_violation(&sim, span).await {
        end_faults(&sim, &replicas);
        report.converged_after = converge(&sim, bound).await;
        if report.converged_after.is_some() {
            stays_quiet(&sim, bound).await;
            metrics_agree(&sim, &replicas);
        }
    }
    finish(&sim, &replicas, &mut report);
    report
}

/// Once everything converged and stayed quiet, the leader's gauges say so, as the README's
/// alerts read them: no PodSet unconverged, every pod of the operator's counted (with its
/// label and a controller: one orphaned by its owner's deletion is no one's to manage), and
/// no object waiting in a work queue.
fn metrics_agree(sim: &Sim, replicas: &[Arc<Replica>]) {
    let Some(leader) = replicas.iter().find(|r| r.leads()) else {
        return;
    };
    let managed = sim.with(|w| {
        let pods = w.store.objects(Kind::Pod, None);
        pods.filter(|p| objects::managed(p) && objects::controller(p).is_some())
            .count()
    });
    let counted = leader.managed_pods();
    let unconverged = leader.scrape("podset_operator_podsets_unconverged");
    // Quiet for minutes: nothing waits for a reconcile (a key left queued would never leave).
    let queued = leader.scrape("workqueue_depth");
    if counted != managed || unconverged != 0.0 || queued != 0.0 {
        sim.violate(format!(
            "converged, yet the leader's metrics say managed_pods {counted} (the store has {managed}), podsets_unconverged {unconverged} and workqueue_depth {queued}"
        ));
    }
}

/// One replica alone without leader election, or one to three electing a leader, on a
/// lease across the range `--lease-duration-seconds` admits in practice (2 s is its least).
fn replica_settings(rng: &mut fastrand::Rng) -> (usize, ReplicaSettings) {
    const LEASES: [u64; 6] = [2, 3, 6, 10, 15, 30];
    let (count, lease) = match rng.f64() {
        x if x < 0.15 => (1, None),
        _ => (
            rng.usize(1..=3),
            Some(secs(LEASES[rng.usize(..LEASES.len())])),
        ),
    };
    let settings = ReplicaSettings {
        lease,
        resync: secs(300),
        concurrency: [1, 4, 64][rng.usize(..3)],
        max_mutating_requests: [1, 8, 64][rng.usize(..3)],
        shutdown_timeout: secs([1, 10][rng.usize(..2)]),
        warm_standby: rng.bool(),
        scope: match rng.bool() {
            true => Scope::All,
            false => Scope::Namespaces(NAMESPACES.map(String::from).into()),
        },
    };
    (count, settings)
}

/// Watches get a bookmark about every minute, and the change log is compacted now and then.
async fn bookmarks(sim: Arc<Sim>) {
    let mut tick = 0u64;
    loop {
        tokio::time::sleep(secs(1)).await;
        tick += 1;
        sim.with(|w| {
            if tick.is_multiple_of(60) {
                w.store.bookmark();
            }
            if w.faults.fire(Fault::Compaction) {
                let keep = w.rng.usize(..10);
                w.store.compact(keep);
            }
        });
    }
}

/// Each simulated second of the fault phase, each replica may crash, be asked to stop, be
/// frozen, or have its clock jump.
async fn replica_faults(sim: Arc<Sim>, replicas: Vec<Arc<Replica>>) {
    loop {
        tokio::time::sleep(secs(1)).await;
        for replica in &replicas {
            if !replica.is_running() || replica.gate.is_frozen() {
                continue;
            }
            let fire = |f| sim.with(|w| w.faults.fire(f));
            if fire(Fault::Crash) {
                replica.crash(&sim);
                let (sim, replica) = (sim.clone(), replica.clone());
                let new_identity = sim.with(|w| w.rng.bool());
                tokio::spawn(async move {
                    tokio::time::sleep(pick(&sim, Duration::ZERO, secs(20))).await;
                    replica.start(&sim, new_identity);
                });
            } else if fire(Fault::Terminate) {
                let (sim, replica) = (sim.clone(), replica.clone());
                tokio::spawn(async move {
                    replica.terminate(&sim).await;
                    tokio::time::sleep(pick(&sim, Duration::ZERO, secs(5))).await;
                    replica.start(&sim, true);
                });
            } else if fire(Fault::Freeze) {
                replica.gate.freeze();
                sim.trace(|| format!("replica {} freezes", replica.id));
                let (sim, replica) = (sim.clone(), replica.clone());
                tokio::spawn(async move {
                    tokio::time::sleep(pick(&sim, secs(1), secs(40))).await;
                    sim.trace(|| format!("replica {} thaws", replica.id));
                    replica.gate.thaw();
                });
            } else if fire(Fault::ClockJump) {
                let jump = sim.with(|w| w.rng.i64(-7200..=7200));
                sim.trace(|| format!("replica {}'s clock jumps to {jump:+} s", replica.id));
                replica.jump_clock(&sim, jump);
            }
        }
    }
}

/// Waits out the fault phase; `false` if an invariant broke first.
async fn until_violation(sim: &Sim, span: Duration) -> bool {
    let end = tokio::time::Instant::now() + span;
    while tokio::time::Instant::now() < end {
        tokio::time::sleep(secs(1)).await;
        if !sim.violations().is_empty() || panicked() {
            return false;
        }
    }
    true
}

/// No more faults: every replica runs, thawed, on the true time.
fn end_faults(sim: &Arc<Sim>, replicas: &[Arc<Replica>]) {
    sim.with(|w| w.faults.active = false);
    sim.trace(|| "the faults stop".into());
    for replica in replicas {
        replica.gate.thaw();
        replica.jump_clock(sim, 0);
        replica.start(sim, false);
    }
}

/// How long after the faults everything converged; a violation if not within `bound`.
pub async fn converge(sim: &Sim, bound: Duration) -> Option<Duration> {
    let start = tokio::time::Instant::now();
    loop {
        let why = sim.with(|w| w.oracle.unconverged(&w.store, sim.now()));
        let Some(why) = why else {
            return Some(start.elapsed());
        };
        if !sim.violations().is_empty() || panicked() {
            return None;
        }
        // A due At starts within the bound, however long its own times make it last.
        let unstarted = sim.with(|w| w.oracle.unstarted(&w.store, sim.now()));
        if let Some(why) = unstarted.filter(|_| start.elapsed() > LIVENESS_BOUND) {
            sim.violate(format!(
                "not started {LIVENESS_BOUND:?} after the faults stopped: {why}"
            ));
            return None;
        }
        // A TTL that runs out later is waited for (see `oracle::ttl`).
        let expiring = sim.with(|w| w.oracle.expiring(&w.store));
        let excused = expiring.is_some_and(|t| sim.now() < t + LIVENESS_BOUND);
        if start.elapsed() > bound && !excused {
            sim.violate(format!(
                "not converged {bound:?} after the faults stopped: {why}"
            ));
            return None;
        }
        tokio::time::sleep(secs(1)).await;
    }
}

/// A converged operator makes no writes: no hot loop, no status written again. Watched once
/// every request the server held during the faults has landed (and been answered: a late
/// pod is deleted), every watch stalled by them has been given up (a held watch request may
/// stall once it arrives), and everything converged again: until then a replica may rightly
/// act on what it had not seen.
pub async fn stays_quiet(sim: &Sim, bound: Duration) {
    tokio::time::sleep(MAX_HOLD + STALLS_OVER + secs(5)).await;
    if converge(sim, bound).await.is_none() {
        return;
    }
    let counts = |w: &mut World| (w.oracle.own_writes, w.oracle.writes_sent);
    let (landed, sent) = sim.with(counts);
    tokio::time::sleep(IDLE_WATCH).await;
    let (landed, sent) = sim.with(|w| {
        let (l, s) = counts(w);
        (l - landed, s - sent)
    });
    if landed > 0 || sent > 0 {
        sim.violate(format!(
            "{landed} writes landed and {sent} were sent in the {IDLE_WATCH:?} after everything converged"
        ));
    }
}
