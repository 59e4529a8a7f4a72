//! A standby that can never lead as things are: it says why, and is not ready.

use std::time::Duration;

use tokio::time::Instant;
use tracing::{error, info};

use parking_lot::Mutex;

use crate::health::Health;

/// When a standby that can never lead as things are last said why.
#[derive(Default)]
pub(super) struct Blocked {
    logged: Mutex<Option<Instant>>,
}

impl Blocked {
    /// A standby that can never lead as things are (the Lease's namespace does not exist,
    /// the operator may not use Leases there) says why, at most once a minute, and is not
    /// ready: a Deployment's rollout then stops instead of replacing working pods with ones
    /// that wait for good. Once that clears, it is ready again.
    pub(super) fn report(
        &self,
        error: Option<&kube::Error>,
        lease: &str,
        namespace: &str,
        health: &Health,
    ) {
        let mut logged = self.logged.lock();
        match error.and_then(|e| needs_a_person(e, namespace)) {
            Some(why) => {
                health.set_ready(false);
                let now = Instant::now();
                if logged.is_none_or(|at| now - at >= Duration::from_secs(60)) {
                    error!(
                        lease,
                        namespace, "the leader lease cannot be used: {why}; retrying"
                    );
                    *logged = Some(now);
                }
            }
            None if logged.take().is_some() => {
                health.set_ready(true);
                info!(lease, namespace, "the leader lease can be used again");
            }
            None => {}
        }
    }
}

/// Why a Lease request failed in a way only a person can mend, if it did.
pub(super) fn needs_a_person(error: &kube::Error, namespace: &str) -> Option<String> {
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
