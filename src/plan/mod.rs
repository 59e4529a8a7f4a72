//! The functional core: pure decisions, unit-tested without I/O.

pub mod podset;
