//! Waiting on a [`Notify`] until a condition holds.

use tokio::sync::Notify;

/// Returns once `done` holds, looked at again each time `notify` wakes its waiters.
pub async fn until(notify: &Notify, done: impl Fn() -> bool) {
    loop {
        let notified = notify.notified();
        let mut notified = std::pin::pin!(notified);
        // Registered before the condition is read, so a change in between still wakes it.
        notified.as_mut().enable();
        if done() {
            return;
        }
        notified.await;
    }
}
