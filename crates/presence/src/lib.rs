//! Presence backends: implementations of [`skua_core::Presence`], the slot that records who is
//! in which room.
//!
//! This crate depends on `skua-core` and the `redis` client, no other workspace crate; the edge
//! never names it (only the server picks a backend). Modules:
//! - [`conn`]: [`RedisConn`], the Redis connection the Redis slots share, re-made when its
//!   certificate files are renewed;
//! - [`memory`]: [`MemoryPresence`], presence in this process's memory, for a single node;
//! - [`idempotency`]: [`MemoryIdempotency`] and [`RedisIdempotency`], publish idempotency keys
//!   (issue 19) in memory for a single node and in Redis for a cluster;
//! - [`limits`]: [`RedisSharedLimits`], fixed-window counters in Redis shared by a cluster's
//!   nodes (the wake limits, issue 33);
//! - [`redis`]: [`RedisPresence`], presence in Redis 7, shared by the nodes of a cluster (its
//!   docs give the key layout).
//!
//! Every implementation passes `skua_conformance::presence_conformance!`.

pub mod conn;
pub mod history;
pub mod idempotency;
pub mod limits;
pub mod memory;
pub mod redis;

pub use self::conn::{RedisConn, RedisTls, RedisTlsReload};
pub use self::idempotency::{MemoryIdempotency, RedisIdempotency};
pub use self::limits::RedisSharedLimits;
pub use self::memory::MemoryPresence;
pub use self::redis::RedisPresence;
