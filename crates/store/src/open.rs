//! Picking a store by its URL (`--store` in shared/CONTRACT.md), and `skua migrate`.

use std::sync::Arc;

use skua_core::{Store, StoreError};

use crate::clock::{UnixClock, system_clock};
use crate::error::{UnsupportedStoreUrl, unavailable};
use crate::postgres::{MigrateOptions, PostgresStore};
use crate::sqlite::SqliteStore;

/// The backend a store URL names.
enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    fn of(url: &str) -> Result<Self, StoreError> {
        if url.starts_with("sqlite:") {
            Ok(Self::Sqlite)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Self::Postgres)
        } else {
            Err(unavailable(UnsupportedStoreUrl::of(url)))
        }
    }
}

/// Opens the store that `url` names: `sqlite://PATH` or `sqlite::memory:` opens (and migrates)
/// a [`SqliteStore`], `postgres://…` or `postgresql://…` connects a [`PostgresStore`] (which
/// checks, but does not apply, migrations). `clock` is what the store checks expiry with
/// ([`system_clock`] outside tests).
///
/// # Errors
/// [`StoreError::Unavailable`] with an [`UnsupportedStoreUrl`] source for any other URL, and as
/// [`SqliteStore::connect`] or [`PostgresStore::connect`] otherwise.
pub async fn open(url: &str, clock: UnixClock) -> Result<Arc<dyn Store>, StoreError> {
    open_with(url, clock, crate::postgres::POOL_SIZE).await
}

/// [`open`], with a Postgres pool of `pool_size` connections (`store_pool_size`; SQLite keeps
/// its own fixed pool: one writer and a few readers).
///
/// # Errors
/// As [`open`].
pub async fn open_with(url: &str, clock: UnixClock, pool_size: u32) -> Result<Arc<dyn Store>, StoreError> {
    Ok(match Backend::of(url)? {
        Backend::Sqlite => Arc::new(SqliteStore::connect(url, clock).await?),
        Backend::Postgres => Arc::new(PostgresStore::connect_with_pool(url, clock, pool_size).await?),
    })
}

/// Applies the pending migrations of the store that `url` names, then closes it: what
/// `skua migrate` does. Running it again does nothing. For SQLite this is what opening the store
/// does anyway (and for `sqlite::memory:` it has no lasting effect). Returns the versions
/// applied in the database that this build does not know: a newer release's (a rollback),
/// which are left alone rather than refused.
///
/// # Errors
/// [`StoreError::Unavailable`] with an [`UnsupportedStoreUrl`] source for an unknown URL, and as
/// [`SqliteStore::connect`] or [`PostgresStore::migrate`] otherwise.
pub async fn migrate(url: &str) -> Result<Vec<i64>, StoreError> {
    migrate_with(url, MigrateOptions::default()).await
}

/// [`migrate`] with Postgres' lock waits bounded and retried as `options` say
/// (`migrate_lock_timeout`, `migrate_retry_for`); SQLite ignores them.
///
/// # Errors
/// As [`migrate`].
pub async fn migrate_with(url: &str, options: MigrateOptions) -> Result<Vec<i64>, StoreError> {
    match Backend::of(url)? {
        Backend::Sqlite => {
            let store = SqliteStore::connect(url, system_clock()).await?;
            let unknown = store.unknown_migrations().await;
            store.close().await;
            unknown
        }
        Backend::Postgres => {
            // One connection: the migrator runs on one anyway.
            let store = PostgresStore::connect_unchecked(url, system_clock(), 1).await?;
            let migrated = store.migrate_with(options).await;
            store.close().await;
            migrated
        }
    }
}
