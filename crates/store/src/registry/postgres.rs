//! [`PostgresRegistryStore`]: the registry in Postgres, shared by a cluster's nodes.

use std::fmt;

use skua_core::StoreError;
use sqlx::postgres::{PgPool, PgPoolOptions};

use crate::error::{self, SchemaNotMigrated, sql};
use crate::migrations;
use crate::postgres::ACQUIRE_TIMEOUT;

const BACKEND: &str = "postgres registry";

/// Connections per node: the edge's poller, the usage flusher and the gRPC service.
pub const POOL_SIZE: u32 = 4;

/// Postgres' SQLSTATE `undefined_table`.
const UNDEFINED_TABLE: &str = "42P01";

/// The registry in Postgres. Like [`crate::PostgresStore`] it never migrates on its own.
pub struct PostgresRegistryStore {
    pub(crate) pool: PgPool,
}

impl PostgresRegistryStore {
    /// Connects to `url` and checks that the registry migration has been applied.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when Postgres cannot be reached, or with a
    /// [`SchemaNotMigrated`] source when `skua migrate` has not been run.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let pool = PgPoolOptions::new()
            .max_connections(POOL_SIZE)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect(url)
            .await
            .map_err(sql(BACKEND, "connect"))?;
        match sqlx::query(super::VERSION).fetch_one(&pool).await {
            Ok(_) => Ok(Self { pool }),
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some(UNDEFINED_TABLE) => {
                let missing = migrations::versions(migrations::POSTGRES);
                Err(error::unavailable(SchemaNotMigrated { missing }))
            }
            Err(e) => Err(sql(BACKEND, "read the registry version")(e)),
        }
    }

    /// Closes the pool.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

impl fmt::Debug for PostgresRegistryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = self.pool.connect_options();
        f.debug_struct("PostgresRegistryStore")
            .field("host", &o.get_host())
            .field("database", &o.get_database())
            .finish()
    }
}

// One snapshot for the version and the objects it belongs to.
super::registry_store_impl!(PostgresRegistryStore, BACKEND, Some("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"));
