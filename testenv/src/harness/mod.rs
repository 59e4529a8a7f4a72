//! The end-to-end harness of podset-operator's tests: a shared real control plane per test
//! binary ([`clusters`]), a namespace per test ([`TestNs`]) with the operator's ServiceAccount
//! bound to exactly the generated RBAC rules ([`grants`]), the operator binary run as a
//! separate process under that account ([`crate::operator`]), fixtures, waits, leader
//! helpers and the fault tests' random source.
//!
//! A library's public items raise no dead-code warning, so each test binary uses what it
//! needs: `use testenv::harness::{TestNs, converged, ...}`.

pub mod clusters;
pub mod faults;
pub mod fixtures;
pub mod grants;
pub mod inspect;
pub mod leader;
pub mod namespace;
pub mod waits;

pub use crate::operator::Operator;
pub use crate::{controller_uid, poll, poll_some};
pub use clusters::{
    cluster, cluster_with_real_node, cluster_without_nodes, own_cluster, own_cluster_ns,
};
pub use faults::seeded_rng;
pub use fixtures::{
    alpha_at, at, condition, enforce_restricted, ensure_runs_command, phase, podset, set_pod_phase,
};
pub use grants::OPERATOR_SA;
pub use inspect::Kind;
pub use leader::{LEASE, leader_args, lease_holder, wait_for_holder};
pub use namespace::{TestNs, operator_binary};
pub use waits::{PROMPTLY, at_pod_released, converged, converged_within, failed_creates_back_off};
