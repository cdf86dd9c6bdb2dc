//! Bus backends: implementations of [`skua_core::Bus`], the slot that moves publications and
//! presence events between nodes.
//!
//! This crate depends on `skua-core` only; the edge never names it (only the server picks a
//! backend). Modules:
//! - [`in_process`]: [`InProcessBus`], the embedded bus for a single process: every node is a
//!   handle onto one shared routing table, deliveries go through one bounded channel per node.
//!
//! Every implementation passes `skua_testkit::bus_conformance!`.

pub mod in_process;

pub use in_process::{DEFAULT_MAX_RETAINED, InProcessBus};
