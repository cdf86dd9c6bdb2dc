//! [`PostgresStore`]: restore records in Postgres, the store a cluster's nodes share.
//!
//! Unlike SQLite, the store never changes the schema on its own: `skua migrate` applies
//! `migrations/postgres/` ([`PostgresStore::migrate`] or [`crate::migrate`]; sqlx takes an
//! advisory lock, so concurrent runs are safe), and [`PostgresStore::connect`] refuses a
//! database that lacks a migration this build needs ([`SchemaNotMigrated`]). A database
//! migrated by a newer release is accepted: migrations only add (migrations/README.md).
//!
//! TLS comes from sqlx's `tls-rustls-ring` feature (ring only, shared/CRATES.md) and the url's
//! libpq parameters: `sslmode` (`prefer` by default, which falls back to plain text; production
//! uses `verify-full`), `sslrootcert`, `sslcert`, `sslkey` (docs/security.md).
//!
//! The pool reconnects by itself after Postgres restarts; while it is down, each operation
//! fails within [`ACQUIRE_TIMEOUT`]. Restore records are pruned as described in [`crate::prune`]:
//! one node at a time (an advisory lock of its own), about once per `restore_prune_interval` for
//! the whole cluster, never on a connection's release. Logged messages
//! are pruned by one node at a time (an advisory lock), at most about once per
//! `log_prune_interval` for the whole cluster, in batches (`log_prune_batch`).

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use skua_core::{ActorId, ClaimedRecord, NodeId, ProjectId, RestoreKey, RestoreRecord, Store, StoreError};
use sqlx::postgres::{PgPool, PgPoolOptions};

use crate::clock::UnixClock;
use crate::error::{self, SchemaNotMigrated, sql};
use crate::migrations;
pub use crate::postgres_migrate::MigrateOptions;
use crate::record;
use crate::sql::{CONNECTION_PATTERN, decode_loaded, key_columns, unix_to_sql};

const BACKEND: &str = "postgres";

/// Connections per store handle (per node) unless `store_pool_size` says otherwise.
pub const POOL_SIZE: u32 = 8;

/// Append writers ("lanes", `crate::append_batch`) on a pool of `pool_size` connections: half
/// of the pool, at least one, so group commits of different publishers are in flight at the
/// same time (each waits for its own WAL flush) and the other half serves claims, acks and
/// restore records. Also how many append transactions all lanes together keep open at once (a
/// busy lane overlaps up to three of its batches, `crate::append_batch`).
fn append_lanes(pool_size: u32) -> usize {
    usize::try_from(pool_size / 2).unwrap_or(1).max(1)
}

/// How long an operation waits for a connection (a new one included, so also how long it
/// takes to report that Postgres is down) before it fails.
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// Postgres' SQLSTATE `undefined_table`.
const UNDEFINED_TABLE: &str = "42P01";

const SAVE: &str = "INSERT INTO restore_records (project, actor, client_id, record, expires_at, node) \
                    VALUES ($1, $2, $3, $4, NULL, $5) \
                    ON CONFLICT (project, actor, client_id) \
                    DO UPDATE SET record = excluded.record, expires_at = NULL, released_seq = NULL, \
                    node = excluded.node, holder_seen_ms = NULL";
const LOAD: &str = "SELECT record, holder_seen_ms FROM restore_records \
                    WHERE project = $1 AND actor = $2 AND client_id = $3 \
                    AND (expires_at IS NULL OR expires_at > $4)";
/// Takes the actor's connection record released last. `SKIP LOCKED`: a concurrent claim that
/// locked that row first gets it, and this one takes the next, so no row is claimed twice.
const CLAIM: &str = "UPDATE restore_records SET expires_at = NULL, released_seq = NULL, node = $5 \
                     WHERE project = $1 AND actor = $2 AND client_id = ( \
                         SELECT client_id FROM restore_records \
                         WHERE project = $1 AND actor = $2 AND client_id LIKE $3 \
                         AND released_seq IS NOT NULL AND expires_at > $4 \
                         ORDER BY released_seq DESC LIMIT 1 FOR UPDATE SKIP LOCKED) \
                     RETURNING client_id, record, holder_seen_ms, ended_s";
/// The actor's other connection records, in use or claimable, that ended within a window
/// (contract 4's `together`): the primary key's (project, actor) prefix, at most 64 ended rows
/// and the actor's open connections.
const TOGETHER: &str = "SELECT record FROM restore_records \
                        WHERE project = $1 AND actor = $2 AND client_id LIKE $3 AND client_id <> $4 \
                        AND ended_s BETWEEN $5 AND $6 AND (expires_at IS NULL OR expires_at > $7) \
                        ORDER BY ended_s DESC LIMIT $8";
/// The nodes holding an actor's connection records in use, but one.
const HOLDERS: &str = "SELECT DISTINCT node FROM restore_records \
                       WHERE project = $1 AND actor = $2 AND client_id LIKE $3 \
                       AND expires_at IS NULL AND node <> $4 ORDER BY node LIMIT $5";
const RELEASE_NODE: &str = "UPDATE restore_records \
                            SET expires_at = $2, released_seq = nextval('restore_records_release_seq'), \
                            holder_seen_ms = $3, ended_s = $4 WHERE node = $1 AND expires_at IS NULL";
const RELEASE_OTHER_NODES: &str = "UPDATE restore_records \
                                   SET expires_at = $2, released_seq = nextval('restore_records_release_seq'), \
                                   holder_seen_ms = $3, ended_s = $4 WHERE node <> $1 AND expires_at IS NULL";

/// Restore records in Postgres. Holds a connection pool: create one per node and share it
/// (behind an `Arc`); every node connected to the database sees the same records.
pub struct PostgresStore {
    pool: PgPool,
    /// Message log appends, group-committed (`crate::append_batch`).
    appends: crate::append_batch::Appender,
    /// Restore record releases, group-committed (`crate::release_batch`).
    releases: crate::release_batch::Releaser,
    clock: UnixClock,
}

impl PostgresStore {
    /// Connects to the database at `url` (`postgres://user[:password]@host[:port]/database`,
    /// or `postgresql://…`) and checks that every migration of this build has been applied;
    /// it applies none itself (see [`PostgresStore::migrate`]). `clock` is what `load_restore`
    /// compares expiries with.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the URL does not parse, Postgres cannot be reached or
    /// refuses the login within [`ACQUIRE_TIMEOUT`], or the schema is behind: then the source
    /// is a [`SchemaNotMigrated`].
    pub async fn connect(url: &str, clock: UnixClock) -> Result<Self, StoreError> {
        Self::connect_with_pool(url, clock, POOL_SIZE).await
    }

    /// [`connect`](Self::connect) on a pool of `pool_size` connections (`store_pool_size`;
    /// at least 1).
    ///
    /// # Errors
    /// As [`connect`](Self::connect).
    pub async fn connect_with_pool(url: &str, clock: UnixClock, pool_size: u32) -> Result<Self, StoreError> {
        let store = Self::connect_unchecked(url, clock, pool_size.max(1)).await?;
        store.check_schema().await?;
        Ok(store)
    }

    /// [`connect`](Self::connect), but first applies pending migrations: for tests and
    /// single-command setups. A cluster runs `skua migrate` once instead.
    ///
    /// # Errors
    /// As [`connect`](Self::connect) and [`migrate`](Self::migrate).
    pub async fn connect_and_migrate(url: &str, clock: UnixClock) -> Result<Self, StoreError> {
        let store = Self::connect_unchecked(url, clock, POOL_SIZE).await?;
        store.migrate().await?;
        Ok(store)
    }

    /// Applies the migrations of `migrations/postgres/` that the database lacks; running it
    /// again does nothing. Safe to run from several nodes at once (sqlx holds an advisory lock).
    /// Migrations applied by a newer release (a rollback) are left alone and returned (and
    /// logged): they only add, so this build runs on the schema. Lock waits are bounded and
    /// retried with the default [`MigrateOptions`] ([`migrate_with`](Self::migrate_with)).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when Postgres failed, a migration failed (it is rolled back),
    /// or the database has applied a migration whose file has since changed.
    pub async fn migrate(&self) -> Result<Vec<i64>, StoreError> {
        self.migrate_with(MigrateOptions::default()).await
    }

    /// [`migrate`](Self::migrate) with `options`: each statement waits at most
    /// `options.lock_timeout` for a lock, then the attempt gives way and is repeated for up to
    /// `options.retry_for` (`crate::postgres_migrate`).
    ///
    /// # Errors
    /// As [`migrate`](Self::migrate), and when the locks were still not granted after
    /// `options.retry_for`.
    pub async fn migrate_with(&self, options: MigrateOptions) -> Result<Vec<i64>, StoreError> {
        crate::postgres_migrate::run(&self.pool.connect_options(), options).await?;
        let applied = self.applied().await?;
        let unknown = migrations::unknown(migrations::POSTGRES, &applied);
        migrations::warn_unknown(BACKEND, &unknown);
        Ok(unknown)
    }

    /// The versions recorded as applied (none before the first migration).
    async fn applied(&self) -> Result<Vec<i64>, StoreError> {
        match sqlx::query_scalar(migrations::APPLIED).fetch_all(&self.pool).await {
            Ok(applied) => Ok(applied),
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some(UNDEFINED_TABLE) => Ok(Vec::new()),
            Err(e) => Err(sql(BACKEND, "read the applied migrations")(e)),
        }
    }

    /// Closes the pool, waiting for operations in flight; later operations fail. Dropping the
    /// store also closes it, without waiting.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// A store on a pool of `size` connections, without looking at the schema.
    pub(crate) async fn connect_unchecked(url: &str, clock: UnixClock, size: u32) -> Result<Self, StoreError> {
        let pool = PgPoolOptions::new()
            .max_connections(size)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect(url)
            .await
            .map_err(sql(BACKEND, "connect"))?;
        let writer = pool.clone();
        let appends = crate::append_batch::Appender::start(
            BACKEND,
            append_lanes(size),
            append_lanes(size),
            || pool.close_event(),
            move || {
                let pool = writer.clone();
                async move { pool.begin().await }
            },
            crate::append_batch::apply_postgres,
        );
        let releases = crate::release_batch::Releaser::start(pool.clone(), pool.close_event());
        Ok(Self { pool, appends, releases, clock })
    }

    async fn check_schema(&self) -> Result<(), StoreError> {
        let applied = self.applied().await?;
        let missing: Vec<i64> =
            migrations::versions(migrations::POSTGRES).into_iter().filter(|v| !applied.contains(v)).collect();
        if missing.is_empty() { Ok(()) } else { Err(error::unavailable(SchemaNotMigrated { missing })) }
    }
}

/// The advisory lock retention pruning holds (`skuaprun` in ASCII): one node prunes at a time.
const PRUNE_LOCK: i64 = 0x736b_7561_7072_756e;

impl PostgresStore {
    /// A connection holding the pruning lock (session-level `pg_try_advisory_lock`), or `None`
    /// when another node is pruning.
    async fn prune_begin(&self) -> Result<Option<sqlx::pool::PoolConnection<sqlx::Postgres>>, StoreError> {
        let mut conn = self.pool.acquire().await.map_err(sql(BACKEND, "prune_log"))?;
        let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(PRUNE_LOCK)
            .fetch_one(&mut *conn)
            .await
            .map_err(sql(BACKEND, "prune_log"))?;
        Ok(locked.then_some(conn))
    }

    /// Releases the pruning lock; if that fails the connection is closed, which releases it.
    async fn prune_end(&self, conn: sqlx::pool::PoolConnection<sqlx::Postgres>) {
        unlock(conn, PRUNE_LOCK).await;
    }

    /// A connection holding the restore-record pruning lock, or `None` when another node is
    /// pruning them. A lock of its own, so that log and restore pruning never skip each other.
    async fn restore_prune_begin(&self) -> Result<Option<sqlx::pool::PoolConnection<sqlx::Postgres>>, StoreError> {
        let mut conn = self.pool.acquire().await.map_err(sql(BACKEND, "prune_restores"))?;
        let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(RESTORE_PRUNE_LOCK)
            .fetch_one(&mut *conn)
            .await
            .map_err(sql(BACKEND, "prune_restores"))?;
        Ok(locked.then_some(conn))
    }

    /// Releases the restore-record pruning lock.
    async fn restore_prune_end(&self, conn: sqlx::pool::PoolConnection<sqlx::Postgres>) {
        unlock(conn, RESTORE_PRUNE_LOCK).await;
    }
}

/// The advisory lock restore-record pruning holds (`skuarstp` in ASCII).
const RESTORE_PRUNE_LOCK: i64 = 0x736b_7561_7273_7470;

/// Releases advisory lock `key` held by `conn`; if that fails the connection is closed, which
/// releases it.
async fn unlock(mut conn: sqlx::pool::PoolConnection<sqlx::Postgres>, key: i64) {
    let unlocked: Result<bool, _> =
        sqlx::query_scalar("SELECT pg_advisory_unlock($1)").bind(key).fetch_one(&mut *conn).await;
    if !matches!(unlocked, Ok(true)) {
        conn.close_on_drop();
    }
}

crate::log::sql_message_log!(PostgresStore, BACKEND);
crate::prune::prune_restores!(PostgresStore, BACKEND);
crate::triggers::sql_trigger_store!(PostgresStore, BACKEND);
crate::members::sql_member_store!(PostgresStore, BACKEND);

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let options = self.pool.connect_options();
        f.debug_struct("PostgresStore")
            .field("host", &options.get_host())
            .field("database", &options.get_database())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Store for PostgresStore {
    /// # Errors
    /// [`StoreError::Unavailable`] when the database failed.
    async fn prune_restores(&self, now_unix_s: u64, min_interval_s: u64, batch: u64) -> Result<u64, StoreError> {
        self.prune_restores_sql(now_unix_s, min_interval_s, batch).await
    }

    /// # Errors
    /// [`StoreError::Unavailable`] when Postgres failed.
    async fn save_restore(&self, key: &RestoreKey, node: &NodeId, record: &RestoreRecord) -> Result<(), StoreError> {
        let (project, actor, client_id) = key_columns(key);
        sqlx::query(SAVE)
            .bind(project)
            .bind(actor)
            .bind(&*client_id)
            .bind(record::encode(record))
            .bind(node.as_str())
            .execute(&self.pool)
            .await
            .map_err(sql(BACKEND, "save_restore"))?;
        Ok(())
    }

    /// A stored record that does not decode is logged and loads as `None`.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when Postgres failed.
    async fn load_restore(&self, key: &RestoreKey) -> Result<Option<RestoreRecord>, StoreError> {
        let (project, actor, client_id) = key_columns(key);
        let row: Option<(Vec<u8>, Option<i64>)> = sqlx::query_as(LOAD)
            .bind(project)
            .bind(actor)
            .bind(&*client_id)
            .bind(unix_to_sql((self.clock)()))
            .fetch_optional(&self.pool)
            .await
            .map_err(sql(BACKEND, "load_restore"))?;
        Ok(row.and_then(|(bytes, seen)| decode_loaded(BACKEND, key, &bytes, seen)))
    }

    /// Releasing a key without a record does nothing. Never prunes ([`crate::prune`]).
    /// Group-committed with the releases waiting beside it (`crate::release_batch`).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when Postgres failed.
    async fn release_restore(&self, key: &RestoreKey, now_unix_s: u64, ttl_s: u64) -> Result<(), StoreError> {
        let (project, actor, client_id) = key_columns(key);
        let release = (
            project.to_owned(),
            actor.to_owned(),
            client_id.into_owned(),
            unix_to_sql(now_unix_s.saturating_add(ttl_s)),
            unix_to_sql(now_unix_s),
        );
        self.releases.release(release).await.map_err(|why| crate::error::failed(BACKEND, "release_restore", why))
    }

    /// A claimed row whose record does not decode is logged and restores nothing; the claimer
    /// keeps its id and overwrites it.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when Postgres failed.
    async fn claim_restore(
        &self,
        project: &ProjectId,
        actor: &ActorId,
        node: &NodeId,
        together_s: Option<u64>,
    ) -> Result<Option<ClaimedRecord>, StoreError> {
        let now = unix_to_sql((self.clock)());
        let row: Option<(String, Vec<u8>, Option<i64>, Option<i64>)> = sqlx::query_as(CLAIM)
            .bind(project.as_str())
            .bind(actor.as_str())
            .bind(CONNECTION_PATTERN)
            .bind(now)
            .bind(node.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(sql(BACKEND, "claim_restore"))?;
        let Some((column, bytes, seen, ended)) = row else { return Ok(None) };
        let Some(mut claimed) = crate::sql::claimed(BACKEND, project, actor, &column, &bytes, seen) else {
            return Ok(None);
        };
        if let (Some(w), Some(ended)) = (together_s, ended) {
            claimed.together =
                crate::sql::claim_together!(BACKEND, &self.pool, TOGETHER, project, actor, &column, ended, w, now);
        }
        Ok(Some(claimed))
    }

    /// A node column that is not a valid node id (written by hand) is skipped.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when Postgres failed.
    async fn restore_holders(
        &self,
        project: &ProjectId,
        actor: &ActorId,
        except: &NodeId,
        limit: usize,
    ) -> Result<Vec<NodeId>, StoreError> {
        let rows: Vec<(String,)> = sqlx::query_as(HOLDERS)
            .bind(project.as_str())
            .bind(actor.as_str())
            .bind(CONNECTION_PATTERN)
            .bind(except.as_str())
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await
            .map_err(sql(BACKEND, "restore_holders"))?;
        Ok(rows.into_iter().filter_map(|(node,)| NodeId::parse(&node).ok()).collect())
    }

    /// # Errors
    /// [`StoreError::Unavailable`] when Postgres failed.
    async fn release_node_restores(
        &self,
        node: &NodeId,
        now_unix_s: u64,
        ttl_s: u64,
        last_seen_ms: Option<u64>,
    ) -> Result<u64, StoreError> {
        self.release_nodes(RELEASE_NODE, node, now_unix_s, ttl_s, last_seen_ms).await
    }

    async fn release_other_nodes_restores(
        &self,
        keep: &NodeId,
        now_unix_s: u64,
        ttl_s: u64,
    ) -> Result<u64, StoreError> {
        self.release_nodes(RELEASE_OTHER_NODES, keep, now_unix_s, ttl_s, None).await
    }
}

impl PostgresStore {
    /// Runs `query` (one of the node releases) for `node`.
    async fn release_nodes(
        &self,
        query: &'static str,
        node: &NodeId,
        now_unix_s: u64,
        ttl_s: u64,
        last_seen_ms: Option<u64>,
    ) -> Result<u64, StoreError> {
        let done = sqlx::query(query)
            .bind(node.as_str())
            .bind(unix_to_sql(now_unix_s.saturating_add(ttl_s)))
            .bind(last_seen_ms.map(unix_to_sql))
            .bind(unix_to_sql(now_unix_s))
            .execute(&self.pool)
            .await
            .map_err(sql(BACKEND, "release_node_restores"))?;
        Ok(done.rows_affected())
    }
}
