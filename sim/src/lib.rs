//! A deterministic simulation of the whole operator (issue 26): several replicas of the real
//! operator library, with leader election, both controllers, the fence, expectations and
//! events, run in one process on simulated time against a model of the API server, under a
//! seeded fault schedule, with invariants checked at every write. See `run` for one seed.

pub mod determinism;
pub mod faults;
pub mod gc;
pub mod kubelet;
pub mod model;
pub mod oracle;
pub mod queue;
pub mod replica;
pub mod run;
pub mod scenario;
pub mod trace;
pub mod transport;
pub mod workload;
pub mod world;
