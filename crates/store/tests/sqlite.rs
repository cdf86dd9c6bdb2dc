//! [`SqliteStore`]: the store conformance suite against `sqlite::memory:` and against a file
//! (where every `open` is a new store on the same file, as after a restart), then what the suite
//! does not cover: reopening, pruning, picking by URL, migrating, foreign bytes.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use skua_conformance::store::{StoreHarness, T0};
use skua_core::{
    ActorId, ClientId, NodeId, ProjectId, RestoreKey, RestoreRecord, RestoredTopic, SessionKey, Store, StoreError,
};
use skua_store::{SqliteStore, UnixClock, UnsupportedStoreUrl};

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

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!("skua-store-test-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        Self(dir)
    }

    /// `sqlite://` URL of `file` inside the directory (absolute, so `sqlite:///tmp/…`).
    fn url(&self, file: &str) -> String {
        format!("sqlite://{}", self.0.join(file).display())
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

mod memory {
    use super::*;

    /// One in-memory store; every handle is that store (a second `connect` would be a second,
    /// empty database).
    struct MemoryHarness {
        clock: TestClock,
        store: Arc<SqliteStore>,
    }

    async fn setup() -> Option<MemoryHarness> {
        let clock = TestClock::new();
        let store = SqliteStore::connect("sqlite::memory:", clock.clock()).await.expect("sqlite::memory: opens");
        Some(MemoryHarness { clock, store: Arc::new(store) })
    }

    impl StoreHarness for MemoryHarness {
        async fn open(&self) -> Arc<dyn Store> {
            self.store.clone()
        }

        fn set_now(&self, now_unix_s: u64) {
            self.clock.set(now_unix_s);
        }

        fn distinct_handles(&self) -> bool {
            false
        }
    }

    skua_conformance::store_conformance!(setup = setup());
}

mod file {
    use super::*;

    /// One database file; every handle is a new store (pool) on it, like another process.
    struct FileHarness {
        clock: TestClock,
        dir: TempDir,
    }

    impl FileHarness {
        fn new() -> Self {
            Self { clock: TestClock::new(), dir: TempDir::new() }
        }
    }

    impl StoreHarness for FileHarness {
        async fn open(&self) -> Arc<dyn Store> {
            let url = self.dir.url("store.db");
            Arc::new(SqliteStore::connect(&url, self.clock.clock()).await.unwrap_or_else(|e| panic!("{url}: {e:?}")))
        }

        fn set_now(&self, now_unix_s: u64) {
            self.clock.set(now_unix_s);
        }
    }

    skua_conformance::store_conformance!(FileHarness::new());
}

fn node() -> NodeId {
    NodeId::parse("node-1").unwrap()
}

fn key(actor: &str, client_id: Option<&str>) -> RestoreKey {
    RestoreKey::Session(SessionKey {
        project: ProjectId::parse("proj").unwrap(),
        actor: ActorId::parse(actor).unwrap(),
        client_id: client_id.map(|c| ClientId::parse(c).unwrap()),
    })
}

fn record() -> RestoreRecord {
    RestoreRecord {
        topics: vec![RestoredTopic {
            pattern: "app/room/orders".to_owned(),
            qos: 1,
            load_balance: true,
            load_balance_group: Some("workers".to_owned()),
            raw_filters: Some(Bytes::from_static(b"\x91\xa2eu")),
            history: None,
        }],
        lobbies: vec!["online".to_owned()],
        holder_last_seen_ms: None,
        door_filters: Vec::new(),
    }
}

#[tokio::test]
async fn records_survive_closing_and_reopening_the_file() {
    let dir = TempDir::new();
    let url = dir.url("store.db");
    let clock = TestClock::new();
    let store = SqliteStore::connect(&url, clock.clock()).await.unwrap();
    store.save_restore(&key("alice", None), &node(), &record()).await.unwrap();
    store.save_restore(&key("bob", Some("w1")), &node(), &record()).await.unwrap();
    store.release_restore(&key("bob", Some("w1")), T0, 60).await.unwrap();
    store.close().await;
    drop(store);

    let reopened = SqliteStore::connect(&url, clock.clock()).await.unwrap();
    assert_eq!(reopened.load_restore(&key("alice", None)).await.unwrap(), Some(record()));
    assert_eq!(reopened.load_restore(&key("bob", Some("w1"))).await.unwrap(), Some(record()));
    clock.set(T0 + 61);
    assert_eq!(reopened.load_restore(&key("bob", Some("w1"))).await.unwrap(), None, "the expiry was kept too");
}

/// Issue 36: `prune_restores` deletes expired records only; a release never prunes.
#[tokio::test]
async fn prune_restores_deletes_expired_records_only_and_release_never_prunes() {
    let clock = TestClock::new();
    let store = SqliteStore::connect("sqlite::memory:", clock.clock()).await.unwrap();
    for actor in ["a", "b", "c"] {
        store.save_restore(&key(actor, None), &node(), &record()).await.unwrap();
    }
    store.release_restore(&key("a", None), T0, 10).await.unwrap();
    store.release_restore(&key("b", None), T0, 1_000).await.unwrap();
    // An interval under 2 s: no turn is skipped.
    assert_eq!(store.prune_restores(T0 + 9, 1, 100).await.unwrap(), 0);
    assert_eq!(store.prune_restores(T0 + 10, 1, 100).await.unwrap(), 1, "a expired at T0 + 10");
    assert_eq!(store.load_restore(&key("b", None)).await.unwrap(), Some(record()));
    assert_eq!(store.load_restore(&key("c", None)).await.unwrap(), Some(record()), "never released");

    clock.set(T0 + 2_000);
    store.release_restore(&key("c", None), T0 + 2_000, 10).await.unwrap();
    assert_eq!(store.prune_restores(T0 + 2_000, 1, 100).await.unwrap(), 1, "the release left b (expired) alone");
    assert_eq!(store.prune_restores(T0 + 2_010, 1, 100).await.unwrap(), 1, "then c");
}

#[tokio::test]
async fn open_picks_the_backend_by_url_scheme() {
    let dir = TempDir::new();
    let store = skua_store::open(&dir.url("picked.db"), TestClock::new().clock()).await.unwrap();
    store.save_restore(&key("alice", None), &node(), &record()).await.unwrap();
    assert!(dir.0.join("picked.db").is_file());
    let memory = skua_store::open("sqlite::memory:", TestClock::new().clock()).await.unwrap();
    assert_eq!(memory.load_restore(&key("alice", None)).await.unwrap(), None);

    for url in ["redis://:secret@127.0.0.1/0", "mysql://root@db/skua", "/var/lib/skua.db", "memory", ""] {
        let Err(StoreError::Unavailable(source)) = skua_store::open(url, TestClock::new().clock()).await else {
            panic!("{url:?} opened");
        };
        let unsupported = source.downcast_ref::<UnsupportedStoreUrl>().unwrap_or_else(|| panic!("{url:?}: {source}"));
        assert!(!unsupported.to_string().contains("secret"));
        let Err(StoreError::Unavailable(source)) = skua_store::migrate(url).await else { panic!("{url:?} migrated") };
        assert!(source.is::<UnsupportedStoreUrl>(), "{url:?}: {source}");
    }
}

#[tokio::test]
async fn migrate_is_idempotent_and_what_connect_does() {
    let dir = TempDir::new();
    let url = dir.url("migrated.db");
    skua_store::migrate(&url).await.unwrap();
    skua_store::migrate(&url).await.unwrap();
    let store = SqliteStore::connect(&url, TestClock::new().clock()).await.unwrap();
    store.save_restore(&key("alice", None), &node(), &record()).await.unwrap();
    skua_store::migrate(&url).await.unwrap();
    assert_eq!(store.load_restore(&key("alice", None)).await.unwrap(), Some(record()));
}

#[tokio::test]
async fn a_database_in_a_missing_directory_fails_to_open() {
    let dir = TempDir::new();
    let url = dir.url("no/such/dir/store.db");
    let Err(StoreError::Unavailable(source)) = SqliteStore::connect(&url, TestClock::new().clock()).await else {
        panic!("opened {url}");
    };
    assert_eq!(source.to_string(), "sqlite: open failed");
    assert!(source.source().is_some(), "keeps sqlx's error");
}

#[tokio::test]
async fn a_record_this_store_did_not_write_loads_as_none() {
    let dir = TempDir::new();
    let url = dir.url("foreign.db");
    let store = SqliteStore::connect(&url, TestClock::new().clock()).await.unwrap();
    store.save_restore(&key("alice", None), &node(), &record()).await.unwrap();

    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    sqlx::query("UPDATE restore_records SET record = X'C1FF'").execute(&pool).await.unwrap();
    pool.close().await;
    assert_eq!(store.load_restore(&key("alice", None)).await.unwrap(), None);

    store.save_restore(&key("alice", None), &node(), &record()).await.unwrap();
    assert_eq!(store.load_restore(&key("alice", None)).await.unwrap(), Some(record()), "a save repairs it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_through_two_handles_all_land() {
    let dir = TempDir::new();
    let url = dir.url("busy.db");
    let clock = TestClock::new();
    let handles = [
        Arc::new(SqliteStore::connect(&url, clock.clock()).await.unwrap()),
        Arc::new(SqliteStore::connect(&url, clock.clock()).await.unwrap()),
    ];
    let mut writers = tokio::task::JoinSet::new();
    for i in 0..64 {
        let store = handles[i % 2].clone();
        writers.spawn(async move {
            let k = key(&format!("actor-{i}"), None);
            store.save_restore(&k, &node(), &record()).await?;
            store.release_restore(&k, T0, 600).await?;
            store.save_restore(&k, &node(), &record()).await
        });
    }
    while let Some(written) = writers.join_next().await {
        written.unwrap().unwrap_or_else(|e| panic!("a concurrent write failed: {e:?}"));
    }
    for i in 0..64 {
        let loaded = handles[(i + 1) % 2].load_restore(&key(&format!("actor-{i}"), None)).await.unwrap();
        assert_eq!(loaded, Some(record()), "actor-{i}");
    }
}

/// The registry store suite on a fresh file per test: every `open` is another handle (another
/// pool) onto the same file.
struct SqliteRegistryHarness {
    dir: TempDir,
}

impl skua_conformance::registry::RegistryHarness for SqliteRegistryHarness {
    async fn open(&self) -> Arc<dyn skua_core::RegistryStore> {
        let url = self.dir.url("registry.db");
        Arc::new(skua_store::SqliteRegistryStore::connect(&url).await.unwrap_or_else(|e| panic!("{url}: {e:?}")))
    }
}

mod registry_conformance {
    use super::{SqliteRegistryHarness, TempDir};

    skua_conformance::registry_store_conformance!(SqliteRegistryHarness { dir: TempDir::new() });
}

#[tokio::test]
async fn the_registry_opens_by_url_next_to_the_session_store() {
    let dir = TempDir::new();
    let url = dir.url("skua.db");
    let sessions = skua_store::open(&url, TestClock::new().clock()).await.unwrap();
    drop(sessions);
    let registry = skua_store::open_registry(&url).await.unwrap();
    assert_eq!(registry.version().await.unwrap(), 0, "the session store's migrations created the registry tables");
    let Err(StoreError::Unavailable(source)) = skua_store::open_registry("redis://x").await else {
        panic!("opened a registry on redis");
    };
    assert!(source.is::<UnsupportedStoreUrl>(), "{source}");
}

#[path = "common/append_batch.rs"]
mod append_batch;

#[tokio::test]
async fn appends_commit_in_order_and_a_failed_batch_fails_every_append() {
    let dir = TempDir::new();
    let store = SqliteStore::connect(&dir.url("log.db"), TestClock::new().clock()).await.unwrap();
    append_batch::appends_commit_in_order_and_a_failed_batch_fails_every_append(&store, T0).await;
}

#[tokio::test]
async fn a_burst_of_one_connection_spans_batches_in_order() {
    let dir = TempDir::new();
    let store = SqliteStore::connect(&dir.url("burst.db"), TestClock::new().clock()).await.unwrap();
    append_batch::a_burst_of_one_connection_spans_batches_in_order(&store, T0).await;
}
