//! Store backends: implementations of [`skua_core::Store`], the slot for durable session state
//! (so far, the restore records of `reconnect: true`, docs/protocol.md N23).
//!
//! This crate depends on `skua-core` only; the edge never names it (only the server picks a
//! backend, with [`open`]). Modules:
//! - [`clock`]: [`UnixClock`], the injectable wall clock every store checks expiry with;
//! - [`memory`]: [`MemoryStore`], records in this process's memory, for tests and nodes that may
//!   lose their sessions on restart;
//! - [`sqlite`]: [`SqliteStore`], the embedded durable store of a single node, which migrates
//!   itself;
//! - [`postgres`]: [`PostgresStore`], the store a cluster shares, migrated by `skua migrate`
//!   ([`migrate`]);
//! - [`prune`]: when the durable stores delete expired records;
//! - [`registry`]: the control plane's registry ([`skua_core::RegistryStore`]) in the same database;
//! - [`open`] and [`migrate`]: a store by its `--store` URL; errors in [`error`].
//!   `postgres_migrate` (private) bounds and retries the lock waits of Postgres migrations.
//!
//! Private modules: `record` (the byte form of a record in the `record` column), `migrations`
//! (`migrations/{sqlite,postgres}/` compiled in), `sql` (what the two SQL stores share),
//! `log`, `triggers` and `members` (the message log, the trigger outbox/dead letters and the
//! persistent presence members in SQL); `memory_members` (the memory store's members);
//! `append_batch` (group commit of the log's appends); `release_batch` (group commit of
//! Postgres' restore record releases).
//! The schema and the forward-only rule are in `migrations/README.md`.
//!
//! Every implementation passes `skua_conformance::store_conformance!`.

mod append_batch;
pub mod clock;
pub mod error;
mod group_commit;
mod log;
mod members;
pub mod memory;
mod memory_log;
mod memory_members;
mod migrations;
mod open;
pub mod postgres;
mod postgres_migrate;
pub mod prune;
mod record;
pub mod registry;
mod release_batch;
mod sql;
pub mod sqlite;
mod triggers;

pub use clock::{UnixClock, system_clock};
pub use error::{SchemaNotMigrated, UnsupportedStoreUrl};
pub use memory::MemoryStore;
pub use open::{migrate, migrate_with, open, open_with};
pub use postgres::{MigrateOptions, PostgresStore};
pub use prune::{MAX_ENDED_RECORDS_PER_ACTOR, PRUNE_INTERVAL_S};
pub use registry::{PostgresRegistryStore, SqliteRegistryStore, open_registry};
pub use sqlite::SqliteStore;
