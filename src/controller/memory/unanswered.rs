//! A write under an expectation until its answer is recorded: dropped unanswered, it counts
//! as unknown, to be sent again.

use tokio::time::Instant;

use super::Memory;
use crate::expectations::{Answer, Write};

/// A create or delete sent under an expectation whose answer has not been recorded yet. If
/// it is dropped unanswered (its reconcile cut off at its deadline, or stopped), it may have
/// been carried out or not: it is recorded as [`Answer::Unknown`], to be sent again, rather
/// than left expected until the TTL.
pub struct Unanswered<'a> {
    memory: &'a Memory,
    owner_uid: &'a str,
    write: Write,
    answered: bool,
}

impl<'a> Unanswered<'a> {
    pub fn new(memory: &'a Memory, owner_uid: &'a str, write: Write) -> Self {
        Self {
            memory,
            owner_uid,
            write,
            answered: false,
        }
    }

    /// Records the answer.
    pub fn answered(mut self, answer: Answer) {
        self.record(answer);
    }

    fn record(&mut self, answer: Answer) {
        self.answered = true;
        let now = Instant::now();
        self.memory
            .answered(self.owner_uid, &self.write, answer, now);
    }
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.record(Answer::Unknown);
        }
    }
}
