//! Each seed on a thread of its own, on paused time, its randomness following the seed; a
//! panic anywhere in it (an operator task, the model) is one of its violations.

use std::cell::RefCell;
use std::sync::Once;

use super::Report;
use crate::{determinism, trace};

thread_local! {
    /// Set on a simulation's thread: its panics are the run's, not the process's.
    static IN_SIMULATION: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    static PANICS: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// A panic anywhere in a run (an operator task, the model) fails it; tokio would otherwise
/// print it and carry on.
fn catch_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !IN_SIMULATION.with(std::cell::Cell::get) {
                return default(info);
            }
            let at = info
                .location()
                .map(|l| format!(" at {l}"))
                .unwrap_or_default();
            let message = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_default();
            PANICS.with(|p| p.borrow_mut().push(format!("panicked{at}: {message}")));
        }));
    });
}

/// Runs `f` on a fresh thread whose randomness follows `seed`, on a current-thread runtime
/// on paused time; `Err` if the simulation itself panicked. Panics of the operator's tasks
/// are added to the report's violations.
pub fn on_thread<F, Fut>(seed: u64, trace: bool, f: F) -> Result<Report, String>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Report>,
{
    catch_panics();
    let thread = std::thread::Builder::new()
        .name(format!("seed-{seed}"))
        .stack_size(16 << 20)
        .spawn(move || {
            IN_SIMULATION.with(|s| s.set(true));
            determinism::enter(seed);
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .expect("a runtime");
            // Built whether it is used or not: it draws on the thread's hash keys, and a run
            // must draw the same with its trace on as off, or the replay takes another path.
            let subscriber = tracing_subscriber::fmt()
                .with_writer(trace::LogWriter)
                .with_ansi(false)
                .without_time()
                .with_env_filter("info,podset_operator=debug")
                .finish();
            let _logs = trace.then(|| tracing::subscriber::set_default(subscriber));
            let mut report = runtime.block_on(f());
            drop(runtime);
            report
                .violations
                .extend(PANICS.with(|p| std::mem::take(&mut *p.borrow_mut())));
            report
        })
        .expect("a thread");
    thread
        .join()
        .map_err(|_| "the simulation itself panicked".to_string())
}

pub fn panicked() -> bool {
    PANICS.with(|p| !p.borrow().is_empty())
}
