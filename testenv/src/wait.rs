//! Waiting for a condition with a deadline, and knowing whether the test is failing (so that
//! Drop impls print the components' logs).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;

static FAILED: AtomicBool = AtomicBool::new(false);

/// Polls `check` every 100 ms until it returns true, failing after `timeout`.
pub async fn poll<F, Fut>(timeout: Duration, what: &str, mut check: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool>>,
{
    poll_some(timeout, what, || {
        let fut = check();
        async move { Ok(fut.await?.then_some(())) }
    })
    .await
}

/// Polls `check` every 100 ms until it returns `Some`, failing after `timeout` with the last
/// error seen.
pub async fn poll_some<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    let mut last_err = None;
    loop {
        match check().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last_err = Some(e),
        }
        if Instant::now() > deadline {
            let why = last_err
                .map(|e| format!(" (last error: {e:#})"))
                .unwrap_or_default();
            return Err(timed_out(timeout, &format!("{what}{why}")));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The error of a wait that timed out, which also marks the test as failing.
pub(crate) fn timed_out(timeout: Duration, what: &str) -> anyhow::Error {
    FAILED.store(true, Ordering::Relaxed);
    anyhow::anyhow!("timed out after {timeout:?} waiting for {what}")
}

/// Whether a test is failing: panicking, or a [`poll`] timed out (a test that returns its
/// error instead of panicking). Drop impls print the logs then.
pub fn failing() -> bool {
    std::thread::panicking() || FAILED.load(Ordering::Relaxed)
}
