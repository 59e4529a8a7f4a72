//! What a run did, line by line, for a replayed seed: the requests and their answers, the
//! writes, the faults, the users' actions and the operators' own logs, in one timeline of
//! simulated time. Off while searching (formatting costs more than the run); a failing seed
//! is run again with it on. Kept per thread: each seed runs on a thread of its own.

use std::cell::{Cell, RefCell};
use std::io::Write;

use tokio::time::Instant;

thread_local! {
    static ON: Cell<bool> = const { Cell::new(false) };
    static START: Cell<Option<Instant>> = const { Cell::new(None) };
    static LINES: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// Starts this thread's trace, on (`true`) or off, at simulated time zero.
pub fn begin(on: bool) {
    ON.with(|o| o.set(on));
    START.with(|s| s.set(Some(Instant::now())));
    LINES.with(|l| l.borrow_mut().clear());
}

pub fn is_on() -> bool {
    ON.with(Cell::get)
}

/// Records `line` at the current simulated time, if tracing.
pub fn record(line: impl FnOnce() -> String) {
    if is_on() {
        push(line());
    }
}

fn push(line: String) {
    let elapsed = START
        .with(Cell::get)
        .map(|s| Instant::now() - s)
        .unwrap_or_default();
    LINES.with(|l| {
        l.borrow_mut()
            .push(format!("{:>9.3}s {line}", elapsed.as_secs_f64()))
    });
}

/// A copy of the trace so far.
pub fn snapshot() -> Vec<String> {
    LINES.with(|l| l.borrow().clone())
}

/// The trace so far.
pub fn take() -> Vec<String> {
    LINES.with(|l| std::mem::take(&mut *l.borrow_mut()))
}

/// A writer for the operators' logs that adds each line to the trace.
#[derive(Clone, Copy, Default)]
pub struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        for line in String::from_utf8_lossy(buf).lines() {
            push(format!("  | {line}"));
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = LogWriter;

    fn make_writer(&'a self) -> LogWriter {
        LogWriter
    }
}
