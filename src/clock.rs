//! The time of day, injected. The operator reads wall-clock time only through a [`Clock`], so
//! that a simulation can run many operators on simulated time in one process and jump one
//! operator's clock while the others' stay put. Durations and deadlines use tokio's
//! monotonic `Instant`, which a paused runtime controls the same way.

use std::sync::Arc;

use jiff::Timestamp;

#[derive(Clone)]
pub struct Clock(Arc<dyn Fn() -> Timestamp + Send + Sync>);

impl Clock {
    /// The host's clock.
    pub fn system() -> Self {
        Self(Arc::new(Timestamp::now))
    }

    /// A clock that reads `now`.
    pub fn new(now: impl Fn() -> Timestamp + Send + Sync + 'static) -> Self {
        Self(Arc::new(now))
    }

    pub fn now(&self) -> Timestamp {
        (self.0)()
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::system()
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Clock({})", self.now())
    }
}
