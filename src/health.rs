//! What the probes report: live while the controller loops run, ready once the caches
//! synced (a standby waiting for the lease is ready: it is healthy, only not leading).

use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Debug)]
pub struct Health {
    live: AtomicBool,
    ready: AtomicBool,
}

impl Default for Health {
    fn default() -> Self {
        Self {
            live: AtomicBool::new(true),
            ready: AtomicBool::new(false),
        }
    }
}

impl Health {
    pub fn is_live(&self) -> bool {
        self.live.load(Ordering::Relaxed)
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// A controller loop or the pod watch ended without being asked to: restart the process.
    pub fn set_dead(&self) {
        self.live.store(false, Ordering::Relaxed);
    }
}
