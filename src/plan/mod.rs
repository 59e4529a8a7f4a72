//! The functional core: pure decisions, unit-tested without I/O.

pub mod admitted;
pub mod at;
#[cfg(test)]
pub(crate) mod fixtures;
pub mod health;
pub mod kstatus;
pub mod name;
pub mod owned;
pub mod podset;
pub mod rank;
pub mod release;
pub mod unreadable;
