//! Scripted scenarios on the simulation: a fault aimed at particular requests or moments
//! instead of drawn at random, for an order of events known to break something. The same
//! model, replicas and oracle as a random run; the script drives the users and the faults.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use podset_operator::scope::Scope;
use serde_json::Value;

use crate::faults::{Faults, Rule};
use crate::model::objects;
use crate::model::resource::Kind;
use crate::model::store::{Key, Store};
use crate::oracle::Actor;
use crate::replica::{LEASE_NAMESPACE, Replica, ReplicaSettings};
use crate::run::{self, Report};
use crate::trace;
use crate::workload::{self, Action, NAMESPACES};
use crate::world::Sim;

/// How a scenario's cluster is set up.
#[derive(Clone, Debug)]
pub struct Setup {
    pub replicas: usize,
    pub settings: ReplicaSettings,
    /// The namespaces that exist (the Lease's among them, unless a scenario leaves it out).
    pub namespaces: Vec<&'static str>,
}

impl Default for Setup {
    fn default() -> Self {
        Self {
            replicas: 2,
            settings: ReplicaSettings {
                lease: Some(Duration::from_secs(15)),
                resync: Duration::from_secs(300),
                concurrency: 64,
                max_mutating_requests: 64,
                shutdown_timeout: Duration::from_secs(10),
                warm_standby: true,
                scope: Scope::All,
            },
            namespaces: NAMESPACES.into_iter().chain([LEASE_NAMESPACE]).collect(),
        }
    }
}

/// What a script works with.
#[derive(Clone)]
pub struct Scene {
    pub sim: Arc<Sim>,
    pub replicas: Vec<Arc<Replica>>,
}

impl Scene {
    /// A user acts now.
    pub fn user(&self, action: Action) {
        self.sim.trace(|| format!("user: {action:?}"));
        workload::perform(&self.sim, &action);
    }

    /// Aims a fault at the requests `rule` matches.
    pub fn rule(&self, rule: Rule) {
        self.sim.with(|w| w.faults.add_rule(rule));
    }

    pub async fn sleep(&self, d: Duration) {
        tokio::time::sleep(d).await;
    }

    /// Waits until `done` holds of the store, up to `within`.
    pub async fn until(
        &self,
        what: &str,
        within: Duration,
        done: impl Fn(&Store) -> bool,
    ) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if self.sim.with(|w| done(&w.store)) {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!("{what}: not within {within:?}"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until everything converged, up to `within` (a violation otherwise).
    pub async fn converged(&self, within: Duration) -> Option<Duration> {
        run::converge(&self.sim, within).await
    }

    /// The replica that leads (its fence open).
    pub fn leader(&self) -> Option<Arc<Replica>> {
        self.replicas.iter().find(|r| r.leads()).cloned()
    }

    /// The object `name` of `kind` in `namespace`, as stored.
    pub fn get(&self, kind: Kind, namespace: &str, name: &str) -> Option<Value> {
        self.sim.with(|w| {
            let key = Key {
                kind,
                namespace: namespace.into(),
                name: name.into(),
            };
            w.store.get(&key).map(|o| (**o).clone())
        })
    }

    /// An At's phase.
    pub fn at_phase(&self, namespace: &str, name: &str) -> String {
        self.get(Kind::At, namespace, name)
            .map(|a| objects::phase(&a).to_string())
            .unwrap_or_default()
    }

    pub fn actor(&self, replica: usize) -> Actor {
        self.replicas[replica].current()
    }
}

/// Plays `script` on a cluster set up as `setup`, with no random fault: only the script's.
/// The report holds the oracle's violations and anything the script returned as an error.
pub fn play<F, Fut>(seed: u64, setup: Setup, script: F) -> Report
where
    F: FnOnce(Scene) -> Fut + Send + 'static,
    Fut: Future<Output = Result<(), String>>,
{
    let played = run::on_thread(seed, true, move || async move {
        trace::begin(true);
        let faults = Faults::new(fastrand::Rng::with_seed(seed), Some(&[]));
        let (sim, replicas) = run::cluster(
            seed,
            faults,
            &setup.namespaces,
            setup.replicas,
            setup.settings.clone(),
        );
        for replica in &replicas {
            replica.start(&sim, false);
        }
        let scene = Scene {
            sim: sim.clone(),
            replicas: replicas.clone(),
        };
        let result = script(scene).await;
        let mut report = Report {
            seed,
            ..Report::default()
        };
        if let Err(e) = result {
            report.violations.push(e);
        }
        run::finish(&sim, &replicas, &mut report);
        report
    });
    played.unwrap_or_else(|panicked| Report {
        seed,
        violations: vec![panicked],
        ..Report::default()
    })
}

/// Fails with the trace when the report holds a violation (prints it anyway with
/// `SIM_TRACE=1`).
pub fn assert_ok(report: &Report) {
    if report.failed() || std::env::var_os("SIM_TRACE").is_some() {
        for line in &report.trace {
            eprintln!("{line}");
        }
    }
    if report.failed() {
        panic!("violations:\n  {}", report.violations.join("\n  "));
    }
}
