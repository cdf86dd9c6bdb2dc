//! Presence backends: implementations of [`skua_core::Presence`], the slot that records who is
//! in which room.
//!
//! This crate depends on `skua-core` only; the edge never names it (only the server picks a
//! backend). Modules:
//! - [`memory`]: [`MemoryPresence`], presence in this process's memory, for a single node.
//!
//! Every implementation passes `skua_testkit::presence_conformance!`.

pub mod memory;

pub use memory::MemoryPresence;
