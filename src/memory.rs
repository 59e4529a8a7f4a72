//! Giving memory back to the system. The initial lists, and a scale-up of thousands of pods,
//! decode many megabytes of objects that are dropped soon after, and an allocator keeps the
//! freed pages, in holes between the cached objects that outlive them, until asked (glibc's)
//! or for a while (jemalloc's, the binary's with the `jemalloc` feature): the process would
//! hold its peak longer than it needs to.

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
#[cfg(not(feature = "jemalloc"))]
pub fn release() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only takes the allocator's own locks; any thread may call it.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Returns jemalloc's freed pages to the system now, every arena's (4096 is jemalloc's
/// `MALLCTL_ARENAS_ALL`).
#[cfg(feature = "jemalloc")]
pub fn release() {
    // SAFETY: a purge takes no value and returns none; any thread may call it.
    let rc = unsafe {
        tikv_jemalloc_sys::mallctl(
            c"arena.4096.purge".as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
    };
    debug_assert_eq!(rc, 0, "jemalloc refused the purge");
}

/// [`release`], off the async workers when called on the runtime: a sweep of a heap at its
/// peak (after a relist) takes milliseconds, holding the allocator's lock, and would stall
/// every task on that worker meanwhile.
pub fn release_soon() {
    drop(off_the_workers(release));
}

fn off_the_workers(f: fn()) -> Option<tokio::task::JoinHandle<()>> {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => Some(runtime.spawn_blocking(f)),
        Err(_) => {
            f();
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::thread::ThreadId;

    use super::*;

    static RAN_ON: Mutex<Option<ThreadId>> = Mutex::new(None);

    fn record() {
        *RAN_ON.lock().unwrap() = Some(std::thread::current().id());
    }

    #[test]
    fn the_allocator_takes_the_release() {
        release();
    }

    /// Issue 26, fault 10: the pod cache's relist trimmed the heap on the async task that
    /// applied it.
    #[tokio::test]
    async fn a_release_from_the_runtime_runs_on_a_blocking_thread() {
        off_the_workers(record).expect("spawned").await.unwrap();
        let ran_on = RAN_ON.lock().unwrap().expect("ran");
        assert_ne!(ran_on, std::thread::current().id());
    }
}
