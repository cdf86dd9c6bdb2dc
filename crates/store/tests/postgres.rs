//! [`PostgresStore`]: the store conformance suite against a real Postgres, then what the suite
//! does not cover: migrations (idempotent, required by `connect`), pruning, foreign bytes.
//!
//! Needs `SKUA_TEST_POSTGRES_URL`, an admin URL such as `postgres://postgres@127.0.0.1:5432/test`
//! whose role may create databases. Unset, every test prints `SKIPPED: …` and passes, except
//! under `CI=true`, where it fails.
//!
//! Isolation: each test creates its own database, `skua_test_<uuid>`, through the admin URL,
//! migrates it as `skua migrate` does (`skua_store::migrate`, through
//! `skua_conformance::postgres::TestDatabase`) and drops it when the test ends, pass or panic
//! (best-effort, `DROP DATABASE … WITH (FORCE)`; a killed run can leave `skua_test_*` databases
//! behind, harmless and safe to drop). A database rather than a
//! schema, so that migrations, `_sqlx_migrations` and the advisory lock are exercised exactly as
//! in production. A Postgres restart is out of scope here.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use skua_conformance::postgres::{TestDatabase, with_database};
use skua_conformance::store::{StoreHarness, T0};
use skua_core::{ActorId, NodeId, ProjectId, RestoreKey, RestoreRecord, RestoredTopic, SessionKey, Store, StoreError};
use skua_store::postgres::ACQUIRE_TIMEOUT;
use skua_store::{PostgresStore, SchemaNotMigrated, UnixClock};
use sqlx::{Connection, PgConnection};

/// A fresh database migrated as `skua migrate` does, or `None` when skipped.
async fn migrated() -> Option<TestDatabase> {
    TestDatabase::migrated_by(
        |url| async move { skua_store::migrate(&url).await.map(|_| ()).map_err(|e| format!("{e:?}")) },
    )
    .await
}

/// A settable clock, starting at [`T0`].
#[derive(Clone)]
struct TestClock(Arc<AtomicU64>);

impl TestClock {
    fn new() -> Self {
        Self(Arc::new(AtomicU64::new(T0)))
    }

    fn set(&self, now_unix_s: u64) {
        self.0.store(now_unix_s, Ordering::SeqCst);
    }

    fn clock(&self) -> UnixClock {
        let now = self.0.clone();
        Arc::new(move || now.load(Ordering::SeqCst))
    }
}

/// One migrated database; every handle is a new store (pool) on it, like another node.
struct PostgresHarness {
    clock: TestClock,
    db: TestDatabase,
}

impl StoreHarness for PostgresHarness {
    async fn open(&self) -> Arc<dyn Store> {
        let store = PostgresStore::connect(&self.db.url, self.clock.clock()).await;
        Arc::new(store.unwrap_or_else(|e| panic!("connecting to {}: {e:?}", self.db.name)))
    }

    fn set_now(&self, now_unix_s: u64) {
        self.clock.set(now_unix_s);
    }
}

async fn setup() -> Option<PostgresHarness> {
    Some(PostgresHarness { clock: TestClock::new(), db: migrated().await? })
}

mod conformance {
    use super::setup;

    skua_conformance::store_conformance!(setup = setup());
}

fn node() -> NodeId {
    NodeId::parse("node-1").unwrap()
}

fn key(actor: &str) -> RestoreKey {
    RestoreKey::Session(SessionKey {
        project: ProjectId::parse("proj").unwrap(),
        actor: ActorId::parse(actor).unwrap(),
        client_id: None,
    })
}

fn record() -> RestoreRecord {
    RestoreRecord {
        topics: vec![RestoredTopic {
            pattern: "app/room/orders".to_owned(),
            qos: 1,
            load_balance: false,
            load_balance_group: None,
            raw_filters: Some(Bytes::from_static(b"\x91\xa2eu")),
            history: None,
        }],
        lobbies: Vec::new(),
        holder_last_seen_ms: None,
        door_filters: Vec::new(),
    }
}

#[test]
fn with_database_replaces_only_the_database() {
    assert_eq!(with_database("postgres://postgres@127.0.0.1:5432/test", "x"), "postgres://postgres@127.0.0.1:5432/x");
    assert_eq!(with_database("postgres://u:p@h/test?sslmode=disable", "x"), "postgres://u:p@h/x?sslmode=disable");
    assert_eq!(with_database("postgresql://h:5432", "x"), "postgresql://h:5432/x");
}

#[tokio::test]
async fn migrations_are_idempotent() {
    let Some(db) = migrated().await else { return };
    skua_store::migrate(&db.url).await.expect("a second run does nothing");
    let store = PostgresStore::connect(&db.url, TestClock::new().clock()).await.unwrap();
    store.save_restore(&key("alice"), &node(), &record()).await.unwrap();
    store.migrate().await.expect("and a third, through a store");
    assert_eq!(store.load_restore(&key("alice")).await.unwrap(), Some(record()), "data untouched");

    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    let applied: Vec<(i64, bool)> = sqlx::query_as("SELECT version, success FROM _sqlx_migrations ORDER BY version")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    let want: Vec<(i64, bool)> = folder_versions().into_iter().map(|v| (v, true)).collect();
    assert_eq!(applied, want, "each migration recorded once");
    let _ = conn.close().await;
}

/// A migration a newer release applied, as `_sqlx_migrations` records it.
const NEWER_RELEASE_MIGRATION: i64 = 29_991_231_000_001;

/// Issue 23, item 5: after a rollback the older binary's `skua migrate` meets the newer
/// release's migrations; it succeeds, names them, and nodes still connect.
#[tokio::test]
async fn a_rollback_s_migrate_leaves_a_newer_release_s_migrations_alone() {
    let Some(db) = migrated().await else { return };
    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES ($1, 'from a newer release', TRUE, '\\x00'::bytea, 0)",
    )
    .bind(NEWER_RELEASE_MIGRATION)
    .execute(&mut conn)
    .await
    .unwrap();
    let _ = conn.close().await;
    let unknown = skua_store::migrate(&db.url).await.expect("a rollback's migrate succeeds");
    assert_eq!(unknown, vec![NEWER_RELEASE_MIGRATION], "and names what it does not know");
    let store = PostgresStore::connect(&db.url, TestClock::new().clock()).await.expect("nodes still start");
    store.save_restore(&key("alice"), &node(), &record()).await.unwrap();
    assert_eq!(store.migrate().await.unwrap(), vec![NEWER_RELEASE_MIGRATION]);
}

/// Issue 23, item 5: nodes can run with a role that may only read and write rows (no DDL),
/// `skua migrate` (a Job) using the owner's: connecting checks the schema and applies nothing.
#[tokio::test]
async fn nodes_run_with_a_role_that_cannot_change_the_schema() {
    let Some(db) = migrated().await else { return };
    let role = format!("skua_dml_{}", &db.name["skua_test_".len()..]);
    let mut owner = PgConnection::connect(&db.url).await.unwrap();
    // The role name is ours (hex digits), so it is safe to splice in.
    for stmt in [
        format!("CREATE ROLE {role} LOGIN"),
        "REVOKE CREATE ON SCHEMA public FROM PUBLIC".to_owned(),
        format!("GRANT USAGE ON SCHEMA public TO {role}"),
        format!("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}"),
        format!("GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO {role}"),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(stmt)).execute(&mut owner).await.unwrap();
    }
    let (scheme, rest) = db.url.split_once("://").unwrap();
    let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    let dml_url = format!("{scheme}://{role}@{rest}");
    let result = async {
        let mut dml = PgConnection::connect(&dml_url).await.unwrap();
        let ddl = sqlx::query("CREATE TABLE not_allowed (x INT)").execute(&mut dml).await;
        assert!(ddl.is_err(), "the role must not be able to change the schema");
        let _ = dml.close().await;
        let store = PostgresStore::connect(&dml_url, TestClock::new().clock()).await.expect("a node connects");
        store.save_restore(&key("alice"), &node(), &record()).await.unwrap();
        assert_eq!(store.load_restore(&key("alice")).await.unwrap(), Some(record()));
        let registry = skua_store::open_registry(&dml_url).await.expect("and opens the registry");
        assert_eq!(registry.version().await.unwrap(), 0);
        store.close().await;
    };
    // A role is server-wide, not the database's: it is dropped whether the checks pass or
    // panic (issue 35), then the panic goes on.
    let outcome = futures_util::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(result)).await;
    for stmt in [format!("DROP OWNED BY {role}"), format!("DROP ROLE {role}")] {
        let _ = sqlx::query(sqlx::AssertSqlSafe(stmt)).execute(&mut owner).await;
    }
    let _ = owner.close().await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// Issue 23, item 8: two nodes (two stores on one database) tick at once: one prunes, the
/// other skips, also for a while after (half of `min_interval_s`), then prunes again.
#[tokio::test]
async fn retention_runs_on_one_node_per_interval() {
    let Some(db) = migrated().await else { return };
    let clock = TestClock::new();
    let a: Arc<dyn Store> = Arc::new(PostgresStore::connect(&db.url, clock.clock()).await.unwrap());
    let b: Arc<dyn Store> = Arc::new(PostgresStore::connect(&db.url, clock.clock()).await.unwrap());
    let r = skua_core::Retention { max_age_s: 100, max_per_topic: 1_000, min_interval_s: 60, batch: 3 };
    let append = |s: Arc<dyn Store>, id: String, at: u64| async move {
        let m = skua_core::NewMessage {
            msg_id: &id,
            topic: "p/app/room/t",
            filter: None,
            publisher: "alice",
            stream: 0,
            timestamp_ms: at * 1000,
            qos: 1,
            data: b"x",
            trigger: None,
        };
        s.append(&m, at).await.unwrap();
    };
    for i in 0..10 {
        append(a.clone(), format!("old{i}"), T0).await;
    }
    let now = T0 + 1_000;
    let (x, y) = tokio::join!(a.prune_log(now, r), b.prune_log(now, r));
    let (x, y) = (x.unwrap(), y.unwrap());
    assert_eq!((x.min(y), x.max(y)), (0, 10), "one node pruned everything (batches of 3), the other skipped");
    for i in 0..4 {
        append(b.clone(), format!("later{i}"), T0).await;
    }
    assert_eq!(b.prune_log(now + 29, r).await.unwrap(), 0, "within half the interval of the last run: skipped");
    assert_eq!(a.prune_log(now + 29, r).await.unwrap(), 0, "on every node");
    assert_eq!(b.prune_log(now + 30, r).await.unwrap(), 4, "then the next turn prunes");
}

#[tokio::test]
async fn connect_refuses_an_unmigrated_database_and_connect_and_migrate_fixes_it() {
    let Some(db) = TestDatabase::create().await else { return };
    let Err(StoreError::Unavailable(source)) = PostgresStore::connect(&db.url, TestClock::new().clock()).await else {
        panic!("connected to an unmigrated database");
    };
    let not_migrated = source.downcast_ref::<SchemaNotMigrated>().unwrap_or_else(|| panic!("{source}"));
    assert_eq!(not_migrated.missing, folder_versions());
    assert!(source.to_string().contains("skua migrate"), "{source}");
    let Err(StoreError::Unavailable(source)) = skua_store::open(&db.url, TestClock::new().clock()).await else {
        panic!("open connected to an unmigrated database");
    };
    assert!(source.is::<SchemaNotMigrated>(), "{source}");

    let store = PostgresStore::connect_and_migrate(&db.url, TestClock::new().clock()).await.unwrap();
    store.save_restore(&key("alice"), &node(), &record()).await.unwrap();
    PostgresStore::connect(&db.url, TestClock::new().clock()).await.expect("migrated now");
}

#[tokio::test]
async fn open_picks_postgres_for_both_schemes() {
    let Some(db) = migrated().await else { return };
    let postgresql = db.url.replacen("postgres://", "postgresql://", 1);
    for url in [&db.url, &postgresql] {
        let store = skua_store::open(url, TestClock::new().clock()).await.unwrap_or_else(|e| panic!("{url}: {e:?}"));
        store.save_restore(&key("alice"), &node(), &record()).await.unwrap();
        assert_eq!(store.load_restore(&key("alice")).await.unwrap(), Some(record()));
    }
}

fn conn_key(actor: &str, id: &str) -> RestoreKey {
    RestoreKey::Connection(skua_core::ConnectionRecord {
        project: ProjectId::parse("proj").unwrap(),
        actor: ActorId::parse(actor).unwrap(),
        id: skua_core::RecordId::parse(id).unwrap(),
    })
}

/// Issue 36: restore records are pruned by one node per interval (two stores on one database
/// tick at once: one prunes, in batches, the other gets 0, also within half the interval), and
/// never by a connection's release.
#[tokio::test]
async fn restore_pruning_runs_on_one_node_per_interval_and_never_on_release() {
    let Some(db) = migrated().await else { return };
    let clock = TestClock::new();
    let a: Arc<dyn Store> = Arc::new(PostgresStore::connect(&db.url, clock.clock()).await.unwrap());
    let b: Arc<dyn Store> = Arc::new(PostgresStore::connect(&db.url, clock.clock()).await.unwrap());
    for i in 0..10 {
        let k = key(&format!("x{i}"));
        a.save_restore(&k, &node(), &record()).await.unwrap();
        a.release_restore(&k, T0, 10).await.unwrap();
    }
    let now = T0 + 1_000;
    clock.set(now);
    let later = key("later");
    b.save_restore(&later, &node(), &record()).await.unwrap();
    b.release_restore(&later, T0, 10).await.unwrap();
    let (x, y) = tokio::join!(a.prune_restores(now, 60, 3), b.prune_restores(now, 60, 3));
    let (x, y) = (x.unwrap(), y.unwrap());
    assert_eq!((x.min(y), x.max(y)), (0, 11), "one node pruned every expired record (batches of 3), one skipped");
    for i in 0..4 {
        let k = key(&format!("y{i}"));
        b.save_restore(&k, &node(), &record()).await.unwrap();
        b.release_restore(&k, T0, 10).await.unwrap();
    }
    assert_eq!(b.prune_restores(now + 29, 60, 3).await.unwrap(), 0, "within half the interval of the last run");
    assert_eq!(a.prune_restores(now + 29, 60, 3).await.unwrap(), 0, "on every node");
    assert_eq!(b.prune_restores(now + 30, 60, 3).await.unwrap(), 4, "then the next turn prunes");
}

/// Issue 36: the per-actor cap of ended connection records only looks at actors released since
/// the last prune (`restore_records_released_seq`), not at the whole table: rows over the cap
/// released before the last prune stay until their actor's next release.
#[tokio::test]
async fn the_ended_record_cap_looks_only_at_actors_released_since_the_last_prune() {
    let Some(db) = migrated().await else { return };
    let store = PostgresStore::connect(&db.url, TestClock::new().clock()).await.unwrap();
    let fresh = conn_key("fresh", "f-1");
    store.save_restore(&fresh, &node(), &record()).await.unwrap();
    store.release_restore(&fresh, T0, 3_600).await.unwrap();
    assert_eq!(store.prune_restores(T0, 1, 100).await.unwrap(), 0, "nothing expired, nobody over the cap");
    let max = skua_core::store::MAX_ENDED_RECORDS_PER_ACTOR;
    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    // Ended records released "before" that prune: seqs at or under its watermark.
    sqlx::query(
        "INSERT INTO restore_records (project, actor, client_id, record, expires_at, released_seq, node) \
         SELECT 'proj', 'old', '#o-' || i, '\\x80', $1, 0, 'node-1' FROM generate_series(1, $2) AS i",
    )
    .bind(i64::try_from(T0 + 3_600).unwrap())
    .bind(i32::try_from(max + 6).unwrap())
    .execute(&mut conn)
    .await
    .unwrap();
    let _ = conn.close().await;
    assert_eq!(store.prune_restores(T0 + 1, 1, 100).await.unwrap(), 0, "not released since: not looked at");
    let last = conn_key("old", "o-last");
    store.save_restore(&last, &node(), &record()).await.unwrap();
    store.release_restore(&last, T0 + 2, 3_600).await.unwrap();
    assert_eq!(store.prune_restores(T0 + 2, 1, 100).await.unwrap(), 7, "released now: capped at {max}");
    let (project, actor) = (ProjectId::parse("proj").unwrap(), ActorId::parse("old").unwrap());
    let kept = store.claim_restore(&project, &actor, &node(), None).await;
    assert_eq!(kept.unwrap().map(|c| c.id.as_str().to_owned()), Some("o-last".to_owned()), "newest kept");
}

#[tokio::test]
async fn a_record_this_store_did_not_write_loads_as_none() {
    let Some(db) = migrated().await else { return };
    let store = PostgresStore::connect(&db.url, TestClock::new().clock()).await.unwrap();
    store.save_restore(&key("alice"), &node(), &record()).await.unwrap();
    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    sqlx::query("UPDATE restore_records SET record = '\\xc1ff'::bytea").execute(&mut conn).await.unwrap();
    let _ = conn.close().await;
    assert_eq!(store.load_restore(&key("alice")).await.unwrap(), None);
}

#[tokio::test]
async fn an_unreachable_postgres_fails_to_connect() {
    // Port 1 on loopback: nothing listens there. Needs no Postgres, so it never skips. The pool
    // retries a refused connection until its acquire timeout.
    let started = std::time::Instant::now();
    let Err(StoreError::Unavailable(source)) =
        PostgresStore::connect("postgres://postgres@127.0.0.1:1/test", TestClock::new().clock()).await
    else {
        panic!("connected to port 1");
    };
    assert_eq!(source.to_string(), "postgres: connect failed");
    // It gives up after about the acquire timeout; three times it is slack for a loaded machine,
    // and still fails a pool that retries without end (or for sqlx's default 30 s).
    assert!(started.elapsed() < ACQUIRE_TIMEOUT * 3, "{:?}", started.elapsed());
}

/// The versions of `migrations/postgres/`, oldest first.
fn folder_versions() -> Vec<i64> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../migrations/postgres");
    let mut v: Vec<i64> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok()?.file_name().to_str()?.split_once('_')?.0.parse().ok())
        .collect();
    v.sort_unstable();
    v
}

/// The registry store suite on a fresh migrated database per test.
struct PostgresRegistryHarness {
    db: TestDatabase,
}

impl skua_conformance::registry::RegistryHarness for PostgresRegistryHarness {
    async fn open(&self) -> Arc<dyn skua_core::RegistryStore> {
        let store = skua_store::PostgresRegistryStore::connect(&self.db.url).await;
        Arc::new(store.unwrap_or_else(|e| panic!("connecting to {}: {e:?}", self.db.name)))
    }
}

async fn registry_setup() -> Option<PostgresRegistryHarness> {
    Some(PostgresRegistryHarness { db: migrated().await? })
}

mod registry_conformance {
    use super::registry_setup;

    skua_conformance::registry_store_conformance!(setup = registry_setup());
}

#[tokio::test]
async fn the_registry_store_refuses_an_unmigrated_database() {
    let Some(db) = TestDatabase::create().await else { return };
    let Err(StoreError::Unavailable(source)) = skua_store::open_registry(&db.url).await else {
        panic!("opened the registry of an unmigrated database");
    };
    assert!(source.is::<SchemaNotMigrated>(), "{source}");
}

#[path = "common/append_batch.rs"]
mod append_batch;

#[tokio::test]
async fn appends_commit_in_order_and_a_failed_batch_fails_every_append() {
    let Some(db) = migrated().await else { return };
    let store = PostgresStore::connect(&db.url, TestClock::new().clock()).await.unwrap();
    append_batch::appends_commit_in_order_and_a_failed_batch_fails_every_append(&store, T0).await;
}

#[tokio::test]
async fn a_burst_of_one_connection_spans_batches_in_order() {
    let Some(db) = migrated().await else { return };
    let store = PostgresStore::connect(&db.url, TestClock::new().clock()).await.unwrap();
    append_batch::a_burst_of_one_connection_spans_batches_in_order(&store, T0).await;
}

/// Makes migration `version` pending again in a migrated database, after `undo` removed what
/// it created.
async fn unapply(db: &TestDatabase, version: i64, undo: &str) {
    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(undo.to_owned())).execute(&mut conn).await.unwrap();
    sqlx::query("DELETE FROM _sqlx_migrations WHERE version = $1").bind(version).execute(&mut conn).await.unwrap();
    let _ = conn.close().await;
}

/// Waits until some session waits for a lock on `table` (the migration queued behind `holder`).
async fn until_a_lock_waits(url: &str, table: &str) {
    let mut conn = PgConnection::connect(url).await.unwrap();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_locks l LEFT JOIN pg_class c ON c.oid = l.relation \
             WHERE NOT l.granted AND (c.relname = $1 OR l.locktype = 'virtualxid')",
        )
        .bind(table)
        .fetch_one(&mut conn)
        .await
        .unwrap();
        if waiting > 0 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the migration never waited for a lock on {table}");
        tokio::task::yield_now().await;
    }
    let _ = conn.close().await;
}

/// `count` reads and writes of `restore_records`, each on a new connection that gives up after
/// 3 s: none may queue behind the waiting migration for longer than its lock_timeout.
async fn readers_and_writers_go_on(url: &str, count: usize) {
    for i in 0..count {
        let mut conn = PgConnection::connect(url).await.unwrap();
        sqlx::query("SET statement_timeout = '3s'").execute(&mut conn).await.unwrap();
        let started = std::time::Instant::now();
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM restore_records")
            .fetch_one(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("read {i} blocked behind the migration: {e}"));
        sqlx::query("INSERT INTO restore_records (project, actor, client_id, record) VALUES ('p', $1, '', '\\x80')")
            .bind(format!("reader-{i}"))
            .execute(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("write {i} blocked behind the migration: {e}"));
        assert!(started.elapsed() < std::time::Duration::from_secs(2), "read {i} took {:?}", started.elapsed());
        let _ = conn.close().await;
    }
}

/// Issue 36: an `ALTER TABLE` migration behind a lock another session holds (a `pg_dump`'s
/// `ACCESS SHARE`, a long transaction) gives way after `lock_timeout` and retries, so readers
/// and writers queued behind it go on, instead of every node stalling; once the lock is
/// released it completes.
#[tokio::test]
async fn a_migration_behind_a_held_lock_retries_and_readers_go_on() {
    let Some(db) = migrated().await else { return };
    unapply(&db, 20_261_202_091_500, "ALTER TABLE restore_records DROP COLUMN holder_seen_ms").await;
    let mut holder = PgConnection::connect(&db.url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut holder).await.unwrap();
    sqlx::query("LOCK TABLE restore_records IN ACCESS SHARE MODE").execute(&mut holder).await.unwrap();

    let options = skua_store::MigrateOptions {
        lock_timeout: std::time::Duration::from_millis(200),
        retry_for: std::time::Duration::from_secs(60),
    };
    let migrate = skua_store::migrate_with(&db.url, options);
    tokio::pin!(migrate);
    let meanwhile = async {
        until_a_lock_waits(&db.url, "restore_records").await;
        readers_and_writers_go_on(&db.url, 5).await;
    };
    tokio::select! {
        r = &mut migrate => panic!("the migration waits while the lock is held, yet it ended: {r:?}"),
        () = meanwhile => {}
    }
    sqlx::query("COMMIT").execute(&mut holder).await.unwrap();
    let _ = holder.close().await;
    let done = tokio::time::timeout(std::time::Duration::from_secs(20), migrate).await;
    done.expect("the migration completes once the lock is released").expect("and succeeds");
    let store = PostgresStore::connect(&db.url, TestClock::new().clock()).await.expect("schema complete");
    store.save_restore(&key("alice"), &node(), &record()).await.unwrap();
    assert_eq!(store.load_restore(&key("alice")).await.unwrap(), Some(record()), "holder_seen_ms is back");
}

/// Issue 36: an index is built `CONCURRENTLY`: writers are never blocked by the build; a build
/// that gave up waiting for an open writing transaction leaves an invalid index, which the next
/// attempt drops and builds again, so the migration ends with a valid index.
#[tokio::test]
async fn a_concurrent_index_build_retries_past_an_open_writer_and_ends_valid() {
    let Some(db) = migrated().await else { return };
    unapply(&db, 20_261_207_200_001, "DROP INDEX restore_records_released_seq").await;
    let mut holder = PgConnection::connect(&db.url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut holder).await.unwrap();
    sqlx::query("UPDATE restore_records SET node = node WHERE FALSE").execute(&mut holder).await.unwrap();

    let options = skua_store::MigrateOptions {
        lock_timeout: std::time::Duration::from_millis(200),
        retry_for: std::time::Duration::from_secs(60),
    };
    let migrate = skua_store::migrate_with(&db.url, options);
    tokio::pin!(migrate);
    let meanwhile = async {
        until_a_lock_waits(&db.url, "restore_records").await;
        readers_and_writers_go_on(&db.url, 5).await;
    };
    tokio::select! {
        r = &mut migrate => panic!("the build waits for the open writer, yet it ended: {r:?}"),
        () = meanwhile => {}
    }
    sqlx::query("COMMIT").execute(&mut holder).await.unwrap();
    let _ = holder.close().await;
    let done = tokio::time::timeout(std::time::Duration::from_secs(20), migrate).await;
    done.expect("the migration completes once the writer is done").expect("and succeeds");
    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    let valid: Vec<bool> = sqlx::query_scalar(
        "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid \
         WHERE c.relname = 'restore_records_released_seq'",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    assert_eq!(valid, vec![true], "one index, valid");
    let _ = conn.close().await;
}

/// Issue 36: a node draining its connections releases all their restore records at once;
/// the releases waiting together are one statement (one commit), so 500 of them on a pool of
/// two connections all commit (they used to queue one commit each behind the pool and fail
/// after its acquire timeout at scale), and each record is claimable afterwards.
#[tokio::test]
async fn releases_waiting_together_commit_in_one_statement() {
    let Some(db) = migrated().await else { return };
    let clock = TestClock::new();
    let store = Arc::new(PostgresStore::connect_with_pool(&db.url, clock.clock(), 2).await.unwrap());
    let n = 500;
    let keys: Vec<RestoreKey> = (0..n).map(|i| conn_key(&format!("a{i}"), &format!("r{i}"))).collect();
    for k in &keys {
        store.save_restore(k, &node(), &record()).await.unwrap();
    }
    let releases = keys.iter().map(|k| {
        let store = store.clone();
        async move { store.release_restore(k, T0, 600).await }
    });
    for r in futures_util::future::join_all(releases).await {
        r.unwrap();
    }
    // Each row's xmin is the transaction that released it: a handful, not one per release.
    let mut conn = PgConnection::connect(&db.url).await.unwrap();
    let transactions: i64 =
        sqlx::query_scalar("SELECT count(DISTINCT xmin::text) FROM restore_records WHERE released_seq IS NOT NULL")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    assert!(transactions < 50, "{n} releases took {transactions} transactions; batched, they take a handful");
    let other = NodeId::parse("node-2").unwrap();
    for i in 0..n {
        let actor = ActorId::parse(&format!("a{i}")).unwrap();
        let claimed = store.claim_restore(&ProjectId::parse("proj").unwrap(), &actor, &other, None).await.unwrap();
        assert!(claimed.is_some(), "actor a{i}'s released record is claimable");
    }
}
