//! The log of changes as watches see it: starting a watch from it (or from the current
//! objects), its compaction, bookmarks, and the end of every watch.

use bytes::Bytes;
use tokio::sync::mpsc;

use super::{Object, Store};
use crate::model::error::ApiError;
use crate::model::watch::{WatchSpec, Watcher};

impl Store {
    /// Drops all but the last `keep` changes: a watch from a version before them is told
    /// 410 Gone, as after an etcd compaction.
    pub fn compact(&mut self, keep: usize) {
        while self.log.len() > keep {
            if let Some(c) = self.log.pop_front() {
                self.oldest = c.rv;
            }
        }
    }

    /// Starts a watch: from `spec.from` (the changes since, from the log), or with the
    /// current objects as ADDED events when it names no version; then every change.
    pub fn watch(&mut self, spec: WatchSpec) -> Result<mpsc::UnboundedReceiver<Bytes>, ApiError> {
        let mut watcher = Watcher::new(spec);
        match watcher.spec.from {
            None => {
                let current: Vec<Object> = self
                    .objects(watcher.spec.kind, watcher.spec.namespace.as_deref())
                    .cloned()
                    .collect();
                for object in current {
                    watcher.send_added(&object);
                }
            }
            // As the API server does once a watch is accepted: an ERROR event, not a refusal.
            Some(from) if from < self.oldest => {
                let gone = ApiError::gone(format!(
                    "too old resource version: {from} ({})",
                    self.oldest
                ));
                return Ok(watcher.error(&gone));
            }
            Some(from) => {
                for change in self.log.iter().filter(|c| c.rv > from) {
                    watcher.send_change(change);
                }
            }
        }
        let events = watcher.events();
        self.watchers.push(watcher);
        Ok(events)
    }

    /// A BOOKMARK at the current version to every watch that asked for them.
    pub fn bookmark(&mut self) {
        let rv = self.rv;
        self.watchers.retain(|w| w.send_bookmark(rv));
    }

    /// Ends every watch (an API server restart): each client relists or resumes.
    pub fn end_watches(&mut self) {
        self.watchers.clear();
    }
}
