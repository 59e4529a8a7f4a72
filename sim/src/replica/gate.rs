//! A replica held still, as SIGSTOP holds a process: its main task is not polled and its
//! network passes nothing until it is thawed.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;
use tokio::sync::Notify;

/// Holds a replica still: its main task is not polled and its network passes nothing.
#[derive(Default)]
pub struct Gate {
    frozen: AtomicBool,
    /// How many times it was frozen.
    pub(super) freezes: AtomicU32,
    thawed: Notify,
    wakers: Mutex<Vec<Waker>>,
}

impl Gate {
    pub fn freeze(&self) {
        self.frozen.store(true, Ordering::SeqCst);
        self.freezes.fetch_add(1, Ordering::SeqCst);
    }

    pub fn thaw(&self) {
        self.frozen.store(false, Ordering::SeqCst);
        self.thawed.notify_waiters();
        for waker in self.wakers.lock().drain(..) {
            waker.wake();
        }
    }

    pub fn is_frozen(&self) -> bool {
        self.frozen.load(Ordering::SeqCst)
    }

    /// Returns once the replica is not frozen.
    pub async fn pass(&self) {
        loop {
            let thawed = self.thawed.notified();
            if !self.is_frozen() {
                return;
            }
            thawed.await;
        }
    }
}

/// A future that is not polled while its gate is frozen.
pub(super) struct Gated<F> {
    pub(super) gate: Arc<Gate>,
    pub(super) inner: Pin<Box<F>>,
}

impl<F: Future> Future for Gated<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        if self.gate.is_frozen() {
            self.gate.wakers.lock().push(cx.waker().clone());
            return Poll::Pending;
        }
        self.inner.as_mut().poll(cx)
    }
}
