//! The operator under leader election: its flags, and who holds the Lease.

use anyhow::Result;
use k8s_openapi::api::coordination::v1::Lease;

use super::{PROMPTLY, TestNs};
use crate::operator::Operator;
use crate::poll_some;

/// The leader-election Lease the operator uses by default.
pub const LEASE: &str = "podset-operator-leader";

/// The PodSet controller under leader election on a `lease_seconds` Lease in `ns`.
pub fn leader_args(ns: &TestNs, lease_seconds: u64) -> Vec<String> {
    vec![
        "--controllers=podset".into(),
        "--leader-elect".into(),
        format!("--leader-election-namespace={}", ns.name),
        format!("--lease-duration-seconds={lease_seconds}"),
    ]
}

/// Waits until one of `candidates` holds the [`LEASE`] in `ns` and leads: the one that created
/// the Lease leads only a lease duration later. Its name.
pub async fn wait_for_holder(ns: &TestNs, candidates: &[&Operator]) -> Result<String> {
    poll_some(PROMPTLY, "a leader", || async {
        let holder = lease_holder(ns).await?;
        Ok(candidates
            .iter()
            .any(|o| o.instance == holder && o.leads())
            .then_some(holder))
    })
    .await
}

/// Who holds the [`LEASE`] in `ns` ("" for nobody).
pub async fn lease_holder(ns: &TestNs) -> Result<String> {
    let lease = ns.api::<Lease>().get_opt(LEASE).await?;
    Ok(lease
        .and_then(|l| l.spec?.holder_identity)
        .unwrap_or_default())
}
