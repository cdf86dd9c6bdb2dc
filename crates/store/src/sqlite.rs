//! [`SqliteStore`]: restore records in an SQLite database, the embedded store of a single node.
//!
//! The store applies `migrations/sqlite/` itself whenever it opens the database. A file database
//! runs in WAL mode (readers beside the one writer) with `synchronous=NORMAL`: a committed write
//! survives a crash of the process; a power loss may take the last few transactions (restore
//! records are then a little older), and in exchange no transaction waits for an fsync, which
//! measured 500 → 4 300 connect+auth+subscribe+disconnect cycles/s. Restore-record writes are
//! also group-committed (`crate::group_commit`): concurrent writes share one transaction, and
//! each caller returns once its write is committed; for a file database they run on a connection
//! of the writer's own, whose page cache stays valid between batches (`group_commit::Target`).
//! `sqlite::memory:` lives
//! as long as the store: one connection that is never recycled, since the database vanishes with
//! its last connection.
//!
//! Expired rows are deleted as described in [`crate::prune`], never on a connection's release.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use skua_core::{ActorId, ClaimedRecord, NodeId, ProjectId, RestoreKey, RestoreRecord, Store, StoreError};
use sqlx::Connection;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

use crate::clock::UnixClock;
use crate::error::{self, sql};
use crate::group_commit::{Target, Write, Writer};
use crate::migrations;
use crate::record;
use crate::sql::{CONNECTION_PATTERN, decode_loaded, key_columns, unix_to_sql};

const BACKEND: &str = "sqlite";

/// Connections to a file database: reads run in parallel in WAL mode, writes queue on SQLite's
/// one write lock (waiting up to the busy timeout).
const FILE_POOL_SIZE: u32 = 4;

/// How long a statement waits for SQLite's write lock before it fails.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// How long an operation waits for a free connection before it fails.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

const LOAD: &str = "SELECT record, holder_seen_ms FROM restore_records \
                    WHERE project = ? AND actor = ? AND client_id = ? \
                    AND (expires_at IS NULL OR expires_at > ?)";
const RELEASE: &str = "UPDATE restore_records SET expires_at = ?, released_seq = ?, holder_seen_ms = NULL, \
                       ended_s = ? WHERE project = ? AND actor = ? AND client_id = ?";
/// Takes the actor's connection record released last; one statement, so SQLite's write lock
/// makes it atomic against every other claim.
const CLAIM: &str = "UPDATE restore_records SET expires_at = NULL, released_seq = NULL, node = ? \
                     WHERE project = ? AND actor = ? AND client_id = ( \
                         SELECT client_id FROM restore_records \
                         WHERE project = ? AND actor = ? AND client_id LIKE ? \
                         AND released_seq IS NOT NULL AND expires_at > ? \
                         ORDER BY released_seq DESC LIMIT 1) \
                     RETURNING client_id, record, holder_seen_ms, ended_s";
/// The actor's other connection records, in use or claimable, that ended within a window
/// (contract 4's `together`): the primary key's (project, actor) prefix, at most 64 ended rows
/// and the actor's open connections.
const TOGETHER: &str = "SELECT record FROM restore_records \
                        WHERE project = ? AND actor = ? AND client_id LIKE ? AND client_id <> ? \
                        AND ended_s BETWEEN ? AND ? AND (expires_at IS NULL OR expires_at > ?) \
                        ORDER BY ended_s DESC LIMIT ?";
/// The nodes holding an actor's connection records in use, but one.
const HOLDERS: &str = "SELECT DISTINCT node FROM restore_records \
                       WHERE project = ? AND actor = ? AND client_id LIKE ? \
                       AND expires_at IS NULL AND node <> ? ORDER BY node LIMIT ?";
/// Releases a lapsed node's rows; they share one place in the release order.
const RELEASE_NODE: &str = "UPDATE restore_records SET expires_at = ?, released_seq = ?, holder_seen_ms = ?, ended_s = ? \
                            WHERE node = ? AND expires_at IS NULL";
const RELEASE_OTHER_NODES: &str = "UPDATE restore_records SET expires_at = ?, released_seq = ?, holder_seen_ms = ?, ended_s = ? \
                                   WHERE node <> ? AND expires_at IS NULL";

/// Restore records in SQLite. Holds a connection pool: create one per database and share it
/// (behind an `Arc`); handles onto the same file see each other's records.
pub struct SqliteStore {
    pool: SqlitePool,
    /// Restore-record writes, group-committed (`crate::group_commit`).
    writer: Writer,
    /// Message log appends, group-committed (`crate::append_batch`).
    appends: crate::append_batch::Appender,
    clock: UnixClock,
}

impl SqliteStore {
    /// Opens the database at `url` and applies pending migrations. `url` is `sqlite://PATH`
    /// (`sqlite:///abs/path` for an absolute one; the file is created if missing, its directory
    /// is not) or `sqlite::memory:` (a private database that lives as long as this store).
    /// `clock` is what `load_restore` compares expiries with.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the URL does not parse, the database cannot be opened
    /// (no such directory, no permission, not an SQLite file), or a migration fails; the source
    /// says which.
    pub async fn connect(url: &str, clock: UnixClock) -> Result<Self, StoreError> {
        let pool = open_pool(url, FILE_POOL_SIZE, BACKEND).await?;
        let target = if is_in_memory(url) {
            Target::Pool(pool.clone())
        } else {
            let options = (*pool.connect_options()).clone();
            let conn = SqliteConnection::connect_with(&options).await.map_err(sql(BACKEND, "open"))?;
            Target::Own(Box::new(conn))
        };
        let writer = Writer::start(target, pool.close_event(), RELEASE);
        let log_pool = pool.clone();
        let appends = crate::append_batch::Appender::start(
            BACKEND,
            1,
            1,
            || pool.close_event(),
            || async { Ok(()) },
            move |(), batch| {
                let pool = log_pool.clone();
                async move { crate::append_batch::apply_sqlite(&pool, batch).await }
            },
        );
        Ok(Self { pool, writer, appends, clock })
    }

    /// The migrations applied in the database that this build does not know (a newer
    /// release's, after a rollback); opening left them alone.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the database failed.
    pub async fn unknown_migrations(&self) -> Result<Vec<i64>, StoreError> {
        let applied: Vec<i64> = sqlx::query_scalar(migrations::APPLIED)
            .fetch_all(&self.pool)
            .await
            .map_err(sql(BACKEND, "read the applied migrations"))?;
        Ok(migrations::unknown(migrations::SQLITE, &applied))
    }

    /// Closes the pool, waiting for operations in flight; later operations fail. Dropping the
    /// store also closes it, without waiting.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// A group-commit failure as a [`StoreError`].
fn writer_error(op: &'static str) -> impl Fn(String) -> StoreError {
    move |e| StoreError::Unavailable(format!("{BACKEND} {op}: {e}").into())
}

/// Whether `url` names an in-memory database (`sqlite::memory:`, `sqlite://:memory:`, or a
/// `mode=memory` parameter), as sqlx's parser decides it.
/// Opens the SQLite database at `url` and applies pending migrations: an in-memory database on
/// one connection that is never recycled (it would lose the data), a file in WAL mode with
/// `synchronous = NORMAL` on `file_pool_size` connections. `backend` names it in errors.
pub(crate) async fn open_pool(url: &str, file_pool_size: u32, backend: &'static str) -> Result<SqlitePool, StoreError> {
    let options = SqliteConnectOptions::from_str(url).map_err(sql(backend, "parse the URL"))?;
    let (pool, options) = if is_in_memory(url) {
        let pool = SqlitePoolOptions::new().max_connections(1).min_connections(1);
        (pool.idle_timeout(None).max_lifetime(None), options)
    } else {
        let options =
            options.create_if_missing(true).journal_mode(SqliteJournalMode::Wal).synchronous(SqliteSynchronous::Normal);
        (SqlitePoolOptions::new().max_connections(file_pool_size), options)
    };
    let pool = pool
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .connect_with(options.busy_timeout(BUSY_TIMEOUT))
        .await
        .map_err(sql(backend, "open"))?;
    migrations::migrator(migrations::SQLITE).run(&pool).await.map_err(error::migrate(backend))?;
    let applied: Vec<i64> = sqlx::query_scalar(migrations::APPLIED)
        .fetch_all(&pool)
        .await
        .map_err(sql(backend, "read the applied migrations"))?;
    migrations::warn_unknown(backend, &migrations::unknown(migrations::SQLITE, &applied));
    Ok(pool)
}

fn is_in_memory(url: &str) -> bool {
    let rest = url.strip_prefix("sqlite:").unwrap_or(url);
    let (path, params) = rest.split_once('?').unwrap_or((rest, ""));
    path.trim_start_matches('/') == ":memory:" || params.split('&').any(|p| p == "mode=memory")
}

impl SqliteStore {
    /// The connection retention pruning runs on: one process owns a SQLite file, so no lock.
    async fn prune_begin(&self) -> Result<Option<sqlx::pool::PoolConnection<sqlx::Sqlite>>, StoreError> {
        self.pool.acquire().await.map(Some).map_err(sql(BACKEND, "prune_log"))
    }

    /// Nothing to release.
    async fn prune_end(&self, conn: sqlx::pool::PoolConnection<sqlx::Sqlite>) {
        drop(conn);
    }

    /// The connection restore-record pruning runs on (no lock, as for [`Self::prune_begin`]).
    async fn restore_prune_begin(&self) -> Result<Option<sqlx::pool::PoolConnection<sqlx::Sqlite>>, StoreError> {
        self.pool.acquire().await.map(Some).map_err(sql(BACKEND, "prune_restores"))
    }

    /// Nothing to release.
    async fn restore_prune_end(&self, conn: sqlx::pool::PoolConnection<sqlx::Sqlite>) {
        drop(conn);
    }
}

crate::log::sql_message_log!(SqliteStore, BACKEND);
crate::prune::prune_restores!(SqliteStore, BACKEND);
crate::triggers::sql_trigger_store!(SqliteStore, BACKEND);
crate::members::sql_member_store!(SqliteStore, BACKEND);

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let options = self.pool.connect_options();
        f.debug_struct("SqliteStore").field("file", &options.get_filename()).finish_non_exhaustive()
    }
}

#[async_trait]
impl Store for SqliteStore {
    /// # Errors
    /// [`StoreError::Unavailable`] when the database failed.
    async fn prune_restores(&self, now_unix_s: u64, min_interval_s: u64, batch: u64) -> Result<u64, StoreError> {
        self.prune_restores_sql(now_unix_s, min_interval_s, batch).await
    }

    /// # Errors
    /// [`StoreError::Unavailable`] when the database failed.
    async fn save_restore(&self, key: &RestoreKey, node: &NodeId, record: &RestoreRecord) -> Result<(), StoreError> {
        let (project, actor, client_id) = key_columns(key);
        let (project, actor, node) = (project.to_owned(), actor.to_owned(), node.as_str().to_owned());
        let w = Write::Save(project, actor, client_id.into_owned(), record::encode(record), node);
        self.writer.write(w).await.map_err(writer_error("save_restore"))
    }

    /// A stored record that does not decode is logged and loads as `None`.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the database failed.
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
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the database failed.
    async fn release_restore(&self, key: &RestoreKey, now_unix_s: u64, ttl_s: u64) -> Result<(), StoreError> {
        let (project, actor, client_id) = key_columns(key);
        let at = unix_to_sql(now_unix_s.saturating_add(ttl_s));
        let w = Write::Release(
            at,
            next_release_seq(),
            unix_to_sql(now_unix_s),
            project.to_owned(),
            actor.to_owned(),
            client_id.into_owned(),
        );
        self.writer.write(w).await.map_err(writer_error("release_restore"))?;
        Ok(())
    }

    /// A claimed row whose record does not decode is logged and restores nothing; the claimer
    /// keeps its id and overwrites it.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the database failed.
    async fn claim_restore(
        &self,
        project: &ProjectId,
        actor: &ActorId,
        node: &NodeId,
        together_s: Option<u64>,
    ) -> Result<Option<ClaimedRecord>, StoreError> {
        let now = unix_to_sql((self.clock)());
        let row: Option<(String, Vec<u8>, Option<i64>, Option<i64>)> = sqlx::query_as(CLAIM)
            .bind(node.as_str())
            .bind(project.as_str())
            .bind(actor.as_str())
            .bind(project.as_str())
            .bind(actor.as_str())
            .bind(CONNECTION_PATTERN)
            .bind(now)
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
    /// [`StoreError::Unavailable`] when the database failed.
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
    /// [`StoreError::Unavailable`] when the database failed.
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

impl SqliteStore {
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
            .bind(unix_to_sql(now_unix_s.saturating_add(ttl_s)))
            .bind(next_release_seq())
            .bind(last_seen_ms.map(unix_to_sql))
            .bind(unix_to_sql(now_unix_s))
            .bind(node.as_str())
            .execute(&self.pool)
            .await
            .map_err(sql(BACKEND, "release_node_restores"))?;
        Ok(done.rows_affected())
    }
}

/// The next release order (`released_seq`): microseconds since the epoch, made strictly
/// increasing within the process, so a release that returned before another began is lower,
/// through every handle onto the file and across restarts (unless the clock steps back). One
/// process owns an SQLite database (it is the embedded store of a single node).
fn next_release_seq() -> i64 {
    use std::sync::atomic::{AtomicI64, Ordering};
    static LAST: AtomicI64 = AtomicI64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
    let mut last = LAST.load(Ordering::Relaxed);
    loop {
        let next = now.max(last.saturating_add(1));
        match LAST.compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return next,
            Err(seen) => last = seen,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_memory_urls_are_recognised() {
        for url in
            ["sqlite::memory:", "sqlite://:memory:", "sqlite://skua?mode=memory", "sqlite:x?cache=shared&mode=memory"]
        {
            assert!(is_in_memory(url), "{url}");
        }
        for url in ["sqlite://data/skua.db", "sqlite:///var/lib/skua/store.db", "sqlite://memory.db?mode=rwc"] {
            assert!(!is_in_memory(url), "{url}");
        }
    }
}
