//! [`SqliteRegistryStore`]: the registry in SQLite, the embedded store of a single node.

use std::fmt;

use skua_core::StoreError;
use sqlx::sqlite::SqlitePool;

const BACKEND: &str = "sqlite registry";

/// Connections to a file database (reads in parallel in WAL mode; writes queue on the lock).
const FILE_POOL_SIZE: u32 = 2;

/// The registry in SQLite. `sqlite::memory:` is a private database that lives as long as the
/// store (one connection, never recycled); nodes that should share it share the handle.
pub struct SqliteRegistryStore {
    pub(crate) pool: SqlitePool,
}

impl SqliteRegistryStore {
    /// Opens the database at `url` (as [`crate::SqliteStore::connect`]) and applies pending
    /// migrations.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the URL does not parse, the database cannot be opened or
    /// a migration fails.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Ok(Self { pool: crate::sqlite::open_pool(url, FILE_POOL_SIZE, BACKEND).await? })
    }

    /// Closes the pool.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

impl fmt::Debug for SqliteRegistryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteRegistryStore").field("file", &self.pool.connect_options().get_filename()).finish()
    }
}

// SQLite: a read transaction sees one snapshot from its first read on; nothing to set.
super::registry_store_impl!(SqliteRegistryStore, BACKEND, None::<&'static str>);
