//! The simulated cluster: the API server model, the oracle watching every write, the fault
//! schedule, and the simulated time all of it runs on. One [`Sim`] per seed, shared by every
//! task of the run (they all run on one thread, so the lock is never contended).

use std::sync::Arc;
use std::time::Duration;

use ::http::Method;
use bytes::Bytes;
use jiff::Timestamp;
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::faults::Faults;
use crate::model::http::{self as api, Answer, Env};
use crate::model::store::Store;
use crate::oracle::{Actor, Oracle};
use crate::trace;
use crate::{gc, kubelet, queue};

/// The simulation's wall clock starts here: 2030-01-01T00:00:00Z.
pub const EPOCH_SECONDS: i64 = 1_893_456_000;

pub struct World {
    pub store: Store,
    pub oracle: Oracle,
    pub faults: Faults,
    /// The world's own choices (kubelet timings, generated names).
    pub rng: fastrand::Rng,
    pub requests: u64,
}

pub struct Sim {
    world: Mutex<World>,
    start: Instant,
}

impl Sim {
    pub fn new(world: World) -> Arc<Self> {
        Arc::new(Self {
            world: Mutex::new(world),
            start: Instant::now(),
        })
    }

    /// Simulated time since the run began.
    pub fn elapsed(&self) -> Duration {
        Instant::now() - self.start
    }

    /// The true time of day (a replica's own clock may be off: see `replica`).
    pub fn now(&self) -> Timestamp {
        let epoch = Timestamp::from_second(EPOCH_SECONDS).expect("a valid time");
        epoch + jiff::SignedDuration::try_from(self.elapsed()).expect("a short run")
    }

    /// Runs `f` on the world, for anything that reads it or changes no object.
    pub fn with<R>(&self, f: impl FnOnce(&mut World) -> R) -> R {
        f(&mut self.world.lock())
    }

    pub fn trace(&self, line: impl FnOnce() -> String) {
        trace::record(line);
    }

    /// Carries out a request `actor` sent, which the server held for `held`, as the API
    /// server would.
    pub fn serve(
        self: &Arc<Self>,
        actor: Actor,
        held: Duration,
        method: &Method,
        path: &str,
        query: &str,
        body: &Bytes,
    ) -> Answer {
        let now = self.now();
        self.act_held(actor, held, |world| {
            world.requests += 1;
            let World { store, rng, .. } = world;
            let mut suffix = || podset_operator::plan::name::generated("", |n| rng.usize(..n));
            let env = Env {
                now,
                name_suffix: &mut suffix,
            };
            api::handle(store, method, path, query, body, env)
        })
    }

    /// Runs `f`, a change to the store by `actor`; then checks each write it made against
    /// the oracle, and sets off the world's reactions to them (the kubelet, the garbage
    /// collector).
    pub fn act<R>(self: &Arc<Self>, actor: Actor, f: impl FnOnce(&mut World) -> R) -> R {
        self.act_held(actor, Duration::ZERO, f)
    }

    fn act_held<R>(
        self: &Arc<Self>,
        actor: Actor,
        held: Duration,
        f: impl FnOnce(&mut World) -> R,
    ) -> R {
        let now = Instant::now();
        let (result, reactions, collections, held_pods) = {
            let mut world = self.world.lock();
            let result = f(&mut world);
            let wall = self.now();
            let World { store, oracle, .. } = &mut *world;
            let (mut reactions, mut collections) = (Vec::new(), Vec::new());
            let mut held_pods = Vec::new();
            for change in store.take_committed() {
                trace::record(|| {
                    let what = match (&change.old, &change.new) {
                        (None, Some(_)) => "created",
                        (Some(_), Some(_)) => "updated",
                        _ => "deleted",
                    };
                    let k = &change.key;
                    let held = match held.is_zero() {
                        true => String::new(),
                        false => format!(" (held {held:?} by the server)"),
                    };
                    format!(
                        "{actor} {what} {:?} {}/{} rv={}{held}",
                        k.kind, k.namespace, k.name, change.rv
                    )
                });
                oracle.observe(&change, actor, held, store, (now, wall));
                reactions.extend(kubelet::reactions(&change));
                collections.extend(gc::reactions(&change));
                held_pods.extend(queue::reactions(&change));
            }
            (result, reactions, collections, held_pods)
        };
        for reaction in reactions {
            tokio::spawn(kubelet::react(self.clone(), reaction));
        }
        for collection in collections {
            tokio::spawn(gc::react(self.clone(), collection));
        }
        for pod in held_pods {
            tokio::spawn(queue::admit(self.clone(), pod));
        }
        result
    }

    pub fn violations(&self) -> Vec<String> {
        self.world.lock().oracle.violations().to_vec()
    }

    pub fn violate(&self, what: String) {
        self.world.lock().oracle.violate(what);
    }
}

/// The world's choice of a delay between `low` and `high`.
pub fn pick(sim: &Sim, low: Duration, high: Duration) -> Duration {
    sim.with(|w| low + (high - low).mul_f64(w.rng.f64()))
}
