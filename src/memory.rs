//! Giving memory back to the system. The initial lists, and a scale-up of thousands of pods,
//! decode many megabytes of objects that are dropped soon after, and glibc's allocator keeps
//! the freed pages, in holes between the cached objects that outlive them, until asked: the
//! process would go on holding its peak.

use std::time::Duration;

/// How often freed pages are given back (a sweep of the heap, off the async workers).
pub const RELEASE_EVERY: Duration = Duration::from_secs(10);

/// Gives freed pages back every `period`, for as long as the process runs.
pub async fn release_every(period: Duration) {
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        tokio::task::spawn_blocking(release);
    }
}

/// Returns the allocator's whole free pages to the system (`malloc_trim`).
pub fn release() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only takes the allocator's own locks; any thread may call it.
    unsafe {
        libc::malloc_trim(0);
    }
}
