//! `skua migrate` on Postgres without stalling a cluster behind a lock (issue 36).
//!
//! A migration that needs a table lock (`ALTER TABLE`, a plain `CREATE INDEX`) queues behind
//! whoever holds a conflicting one (a `pg_dump`'s `ACCESS SHARE`, a long transaction), and every
//! reader of that table then queues behind the migration: every node stalls. So each attempt
//! runs on a connection of its own with `lock_timeout` set ([`MigrateOptions::lock_timeout`]):
//! a lock not granted by then fails the statement (SQLSTATE `55P03`), the transactional
//! migration rolls back, the queue behind it drains, and the attempt is repeated after a
//! backoff, for up to [`MigrateOptions::retry_for`].
//!
//! Indexes on tables that hold data are built with `CREATE INDEX CONCURRENTLY` in a
//! `-- no-transaction` migration of one statement (Postgres refuses it in a transaction, and a
//! multi-statement string is one). A concurrent build that fails (a lock timeout while it waits
//! for older transactions) leaves an invalid index behind, which `IF NOT EXISTS` would then take
//! as done: before each attempt, the invalid ones among [`CONCURRENT_INDEXES`] are dropped.
//! The attempt holds sqlx's migration advisory lock (taken under the same `lock_timeout`) from
//! that cleanup to the end, so it never drops an index another `skua migrate` is building.

use std::time::{Duration, Instant};

use skua_core::StoreError;
use sqlx::migrate::{Migrate, MigrateError};
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{AssertSqlSafe, ConnectOptions, Connection};

use crate::error;
use crate::migrations;

const BACKEND: &str = "postgres";

/// Postgres' SQLSTATE `lock_not_available` (what `lock_timeout` raises).
const LOCK_NOT_AVAILABLE: &str = "55P03";

/// The first wait between attempts; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// The longest wait between attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Indexes that `migrations/postgres/` builds concurrently: an invalid one is a failed build,
/// dropped before the next attempt. Append when a migration builds one.
pub(crate) const CONCURRENT_INDEXES: &[&str] = &["restore_records_released_seq"];

/// How `skua migrate` waits for locks on Postgres (`migrate_lock_timeout`,
/// `migrate_retry_for`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigrateOptions {
    /// How long one statement waits for a lock before the attempt gives up (and readers queued
    /// behind it go on); zero waits forever, as Postgres' own default does.
    pub lock_timeout: Duration,
    /// How long attempts are repeated after lock timeouts before `skua migrate` fails.
    pub retry_for: Duration,
}

impl Default for MigrateOptions {
    fn default() -> Self {
        Self { lock_timeout: Duration::from_secs(2), retry_for: Duration::from_secs(300) }
    }
}

/// Applies the migrations the database lacks, attempt after attempt while locks time out.
///
/// # Errors
/// [`StoreError::Unavailable`] when Postgres failed, a migration failed for another reason, or
/// the locks were still not granted after `retry_for`.
pub(crate) async fn run(connect: &PgConnectOptions, options: MigrateOptions) -> Result<(), StoreError> {
    let deadline = Instant::now() + options.retry_for;
    let mut backoff = FIRST_BACKOFF;
    let mut attempts = 1u32;
    loop {
        match attempt(connect, options.lock_timeout).await {
            Ok(()) => return Ok(()),
            Err(e) if is_lock_timeout(&e) && Instant::now() + backoff < deadline => {
                tracing::warn!(
                    backend = BACKEND,
                    attempts,
                    retry_in_ms = u64::try_from(backoff.as_millis()).unwrap_or(u64::MAX),
                    "A migration waited migrate_lock_timeout for a lock another session holds; it gave way to \
                     the queries queued behind it and will retry."
                );
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                attempts = attempts.saturating_add(1);
            }
            Err(e) => return Err(error::migrate(BACKEND)(e)),
        }
    }
}

/// One attempt on a connection of its own, closed afterwards: closing also releases the
/// advisory lock when the attempt failed half-way.
async fn attempt(connect: &PgConnectOptions, lock_timeout: Duration) -> Result<(), MigrateError> {
    let mut conn = connect.connect().await?;
    let result = async {
        let ms = u64::try_from(lock_timeout.as_millis()).unwrap_or(u64::MAX);
        sqlx::query("SELECT set_config('lock_timeout', $1, false)").bind(format!("{ms}ms")).execute(&mut conn).await?;
        conn.lock().await?;
        drop_invalid_indexes(&mut conn).await?;
        let mut migrator = migrations::migrator(migrations::POSTGRES);
        // This attempt holds the lock already (above).
        migrator.set_locking(false);
        migrator.run(&mut conn).await?;
        conn.unlock().await
    }
    .await;
    let _ = conn.close().await;
    result
}

/// Drops what failed concurrent builds of [`CONCURRENT_INDEXES`] left behind.
async fn drop_invalid_indexes(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    let invalid: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid \
         WHERE NOT i.indisvalid AND c.relnamespace = current_schema()::regnamespace AND c.relname = ANY($1)",
    )
    .bind(CONCURRENT_INDEXES)
    .fetch_all(&mut *conn)
    .await?;
    for name in invalid {
        // Only names of CONCURRENT_INDEXES get here (the query filters on them): plain identifiers.
        if CONCURRENT_INDEXES.contains(&name.as_str()) {
            tracing::warn!(backend = BACKEND, index = %name, "Dropping an index a failed concurrent build left invalid.");
            sqlx::query(AssertSqlSafe(format!("DROP INDEX CONCURRENTLY IF EXISTS {name}"))).execute(&mut *conn).await?;
        }
    }
    Ok(())
}

/// Whether `e` is a statement that gave up waiting for a lock.
fn is_lock_timeout(e: &MigrateError) -> bool {
    let sql = match e {
        MigrateError::Execute(e) | MigrateError::ExecuteMigration(e, _) => e,
        _ => return false,
    };
    matches!(sql, sqlx::Error::Database(d) if d.code().as_deref() == Some(LOCK_NOT_AVAILABLE))
}
