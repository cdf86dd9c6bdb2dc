//! [`SqliteRegistryStore`]: the registry in SQLite, the embedded store of a single node.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use skua_core::StoreError;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};

use crate::error::{self, sql};
use crate::migrations;

const BACKEND: &str = "sqlite registry";

/// Connections to a file database (reads in parallel in WAL mode; writes queue on the lock).
const FILE_POOL_SIZE: u32 = 2;

/// How long a statement waits for SQLite's write lock, and an operation for a connection.
const TIMEOUT: Duration = Duration::from_secs(5);

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
        let options = SqliteConnectOptions::from_str(url).map_err(sql(BACKEND, "parse the URL"))?;
        let memory = url.contains(":memory:") || url.contains("mode=memory");
        let (pool, options) = if memory {
            (
                SqlitePoolOptions::new().max_connections(1).min_connections(1).idle_timeout(None).max_lifetime(None),
                options,
            )
        } else {
            let options = options
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Normal);
            (SqlitePoolOptions::new().max_connections(FILE_POOL_SIZE), options)
        };
        let pool = pool
            .acquire_timeout(TIMEOUT)
            .connect_with(options.busy_timeout(TIMEOUT))
            .await
            .map_err(sql(BACKEND, "open"))?;
        migrations::migrator(migrations::SQLITE).run(&pool).await.map_err(error::migrate(BACKEND))?;
        Ok(Self { pool })
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
