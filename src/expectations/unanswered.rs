//! The guard that keeps a write dropped before its answer from being expected until the TTL.

use tokio::time::Instant;

use super::Expectations;
use crate::uid::Uid;

/// A create or delete sent under an expectation whose answer has not been recorded yet. If
/// it is dropped unanswered (its reconcile cut off at its deadline, or stopped), it may have
/// been carried out or not: it is recorded as unsettled, to be sent again, rather than left
/// expected until the TTL.
pub struct Unanswered<'a> {
    expectations: &'a Expectations,
    owner_uid: &'a str,
    pending: Option<Write>,
}

enum Write {
    Create(String),
    Delete(Uid, String),
}

impl<'a> Unanswered<'a> {
    pub fn create(expectations: &'a Expectations, owner_uid: &'a str, name: &str) -> Self {
        let pending = Some(Write::Create(name.to_string()));
        Self {
            expectations,
            owner_uid,
            pending,
        }
    }

    pub fn delete(
        expectations: &'a Expectations,
        owner_uid: &'a str,
        pod: &Uid,
        name: &str,
    ) -> Self {
        let pending = Some(Write::Delete(pod.clone(), name.to_string()));
        Self {
            expectations,
            owner_uid,
            pending,
        }
    }

    /// The answer came: the caller records it.
    pub fn answered(mut self) {
        self.pending = None;
    }
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        let now = Instant::now();
        match self.pending.take() {
            Some(Write::Create(name)) => {
                self.expectations
                    .create_unsettled(self.owner_uid, &name, now)
            }
            Some(Write::Delete(pod, name)) => {
                self.expectations
                    .delete_unsettled(self.owner_uid, &pod, &name, now)
            }
            None => {}
        }
    }
}
