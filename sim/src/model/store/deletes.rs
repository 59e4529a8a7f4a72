//! Deletes: with preconditions on the UID and resourceVersion, a pod's graceful deletion
//! (`grace`), and the finalizers an object waits for (`finalizers`).

use jiff::Timestamp;

use super::finalizers::{self, Propagation};
use super::grace::{Grace, grace};
use super::{Key, Object, Preconditions, Store};
use crate::model::error::ApiError;
use crate::model::resource::Kind;

impl Store {
    /// A delete in the background (see [`Self::delete_propagating`]).
    pub fn delete(
        &mut self,
        key: &Key,
        pre: &Preconditions,
        grace_seconds: Option<i64>,
        now: Timestamp,
    ) -> Result<Object, ApiError> {
        self.delete_propagating(key, pre, grace_seconds, Propagation::Background, now)
    }

    /// A delete. A pod goes as the API server deletes it gracefully: marked (see `grace`),
    /// then removed at once if its grace is none (two writes), or else later by its kubelet
    /// (see [`Self::remove`]). Anything else goes at once, unless it has finalizers or
    /// `propagation` adds one: then it is marked, and goes once they are all taken off (see
    /// [`finalizers`]).
    pub fn delete_propagating(
        &mut self,
        key: &Key,
        pre: &Preconditions,
        grace_seconds: Option<i64>,
        propagation: Propagation,
        now: Timestamp,
    ) -> Result<Object, ApiError> {
        let old = self.current(key)?;
        let meta = &old["metadata"];
        let uid = meta["uid"].as_str().unwrap_or_default();
        if let Some(wanted) = pre.uid.as_deref().filter(|w| *w != uid) {
            return Err(ApiError::precondition(
                key.kind, &key.name, "UID", wanted, uid,
            ));
        }
        let version = meta["resourceVersion"].as_str().unwrap_or_default();
        if let Some(wanted) = pre.resource_version.as_deref().filter(|w| *w != version) {
            return Err(ApiError::precondition(
                key.kind,
                &key.name,
                "ResourceVersion",
                wanted,
                version,
            ));
        }
        if key.kind != Kind::Pod {
            return Ok(match finalizers::mark(&old, propagation, now) {
                Some(marked) if marked == *old => old,
                Some(marked) => self.commit(key.clone(), Some(marked)),
                None => self.remove(key).unwrap_or(old),
            });
        }
        match grace(&old, grace_seconds, now) {
            Grace::Now => Ok(self.remove(key).unwrap_or(old)),
            Grace::Pending => Ok(old),
            Grace::Mark(marked, 0) => {
                self.commit(key.clone(), Some(marked));
                Ok(self.remove(key).expect("just marked"))
            }
            Grace::Mark(marked, _) => Ok(self.commit(key.clone(), Some(marked))),
        }
    }
}
