//! An object's status writes ([`crate::status_writes`]) in its record.

use serde::Serialize;
use tokio::time::Instant;

use super::Memory;
use crate::status_writes::{Status, Written};

impl Memory {
    /// The status this instance wrote to `uid` over the copy at resourceVersion `seen`
    /// ([`crate::status_writes::Statuses::written_over`]).
    pub fn written_over<S: Status>(
        &self,
        uid: &str,
        seen: &str,
        now: Instant,
    ) -> Option<Written<S>> {
        self.read(uid, |r| r.statuses.as_ref()?.written_over(seen, now))
    }

    /// A status about to be written to `uid`.
    pub fn sending<S: Serialize>(&self, uid: &str, status: &S) {
        self.with(uid, Instant::now(), |r| {
            r.statuses.get_or_insert_default().sending(status)
        });
    }

    /// Whether `uid`'s version `resource_version`, whose status hashes to `status`, is this
    /// instance's own status write.
    pub fn wrote(&self, uid: &str, resource_version: &str, status: u64) -> bool {
        self.read(uid, |r| {
            Some(r.statuses.as_ref()?.wrote(resource_version, status))
        })
        .unwrap_or(false)
    }

    /// The status being written to `uid` did not land, or may not have.
    pub fn unsent(&self, uid: &str) {
        self.change(uid, Instant::now(), |r| {
            r.statuses.as_mut().map(|s| s.unsent())
        });
    }

    /// The watch showed `uid` at `resource_version`.
    pub fn observed(&self, uid: &str, resource_version: &str) {
        self.change(uid, Instant::now(), |r| {
            r.statuses.as_mut().map(|s| s.observed(resource_version))
        });
    }

    /// A status written to `uid` over the copy at `over`, which made version `written`.
    pub fn wrote_status<S: Status>(
        &self,
        uid: &str,
        over: &str,
        written: &str,
        status: S,
        now: Instant,
    ) {
        self.with(uid, now, |r| {
            (r.statuses.get_or_insert_default()).record(over, written, status, now)
        });
    }
}
