//! Store backends: implementations of [`skua_core::Store`], the slot for durable session state
//! (so far, the restore records of `reconnect: true`).
//!
//! This crate depends on `skua-core` only; the edge never names it (only the server picks a
//! backend). Modules:
//! - [`clock`]: [`UnixClock`], the injectable wall clock every store checks expiry with;
//! - [`memory`]: [`MemoryStore`], records in this process's memory, for a single node and tests.
//!
//! Every implementation passes `skua_testkit::store_conformance!`.

pub mod clock;
pub mod memory;

pub use clock::{UnixClock, system_clock};
pub use memory::MemoryStore;
