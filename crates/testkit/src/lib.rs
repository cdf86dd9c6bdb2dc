//! Test harness for Skua (a dev-dependency, used only from `tests/`).
//!
//! - [`conformance`]: behavioural suites for the bus, presence and store slots: test bodies
//!   plus macros that turn them into tests for one implementation.

pub mod conformance;
