//! The [`Store`] suite: every guarantee of the restore-record contract, as test bodies.
//!
//! Time is explicit: the suite passes `now_unix_s` to `release_restore` itself and sets, through
//! the harness, the clock that `load_restore` compares expiries with, so no case sleeps. An
//! external backend isolates each harness (a fresh database, or a unique project prefix).
//!
//! The suite does not pin the boundary instant `release time + ttl` itself: it checks one second
//! before (kept) and one second after (gone).

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use skua_core::{ActorId, ClientId, ProjectId, RestoreRecord, RestoredTopic, SessionKey, Store};

use super::within;

/// An instant for cases to start at: unix seconds, 2023-11-14.
pub const T0: u64 = 1_700_000_000;

/// Opens handles onto the store under test and sets its clock.
pub trait StoreHarness {
    /// A handle onto the harness's one store, as another node would open it: records saved
    /// through one handle load through every other.
    fn open(&self) -> impl Future<Output = Arc<dyn Store>>;

    /// Sets the time (unix seconds) that `load_restore` of every handle of this harness treats as
    /// now when it checks expiry. Before the first call it is [`T0`].
    fn set_now(&self, now_unix_s: u64);
}

/// Generates one `#[tokio::test]` per case of the [`Store`] suite.
///
/// `store_conformance!(harness_expr)` evaluates `harness_expr` (a [`StoreHarness`]) once per
/// test; `store_conformance!(setup = future)` awaits `future: impl Future<Output = Option<H>>`
/// once per test and skips the test on `None`.
#[macro_export]
macro_rules! store_conformance {
    (setup = $setup:expr $(,)?) => {
        $crate::store_conformance!(@cases setup, $setup);
    };
    (@cases $how:ident, $harness:expr) => {
        $crate::__conformance_tests!(store, $how, $harness;
            load_of_an_unknown_key_is_none,
            save_then_load_returns_the_record,
            save_replaces_the_record,
            released_record_is_kept_for_ttl_then_gone,
            save_clears_a_started_expiry,
            unreleased_record_never_expires,
            later_release_restarts_the_ttl,
            save_after_expiry_starts_a_fresh_record,
            release_of_an_unknown_key_is_ok,
            keys_with_and_without_client_id_are_distinct,
            records_are_shared_between_handles,
        );
    };
    ($harness:expr $(,)?) => {
        $crate::store_conformance!(@cases make, $harness);
    };
}

// ----------------------------------------------------------------------------------------------
// Cases.

/// Contract 3: nothing saved, nothing loaded.
pub async fn load_of_an_unknown_key_is_none<H: StoreHarness>(h: H) {
    let s = h.open().await;
    assert_eq!(load(&s, &key("alice", None)).await, None);
}

/// Contracts 1 and 3: a saved record loads back field for field.
pub async fn save_then_load_returns_the_record<H: StoreHarness>(h: H) {
    let s = h.open().await;
    let k = key("alice", Some("worker-1"));
    save(&s, &k, &rich_record()).await;
    assert_eq!(load(&s, &k).await, Some(rich_record()));
}

/// Contract 1: `save_restore` replaces the whole record; an empty record is still a record.
pub async fn save_replaces_the_record<H: StoreHarness>(h: H) {
    let s = h.open().await;
    let k = key("alice", None);
    save(&s, &k, &rich_record()).await;
    let smaller = RestoreRecord { topics: vec![topic("app/room/only", None)], lobbies: Vec::new() };
    save(&s, &k, &smaller).await;
    assert_eq!(load(&s, &k).await, Some(smaller));

    save(&s, &k, &RestoreRecord::default()).await;
    assert_eq!(load(&s, &k).await, Some(RestoreRecord::default()));
}

/// Contract 2: after `release_restore(now, ttl)` the record loads until `now + ttl`, then not.
pub async fn released_record_is_kept_for_ttl_then_gone<H: StoreHarness>(h: H) {
    let s = h.open().await;
    let k = key("alice", None);
    h.set_now(T0);
    save(&s, &k, &rich_record()).await;
    release(&s, &k, T0, 60).await;

    assert_eq!(load(&s, &k).await, Some(rich_record()), "right after release");
    h.set_now(T0 + 59);
    assert_eq!(load(&s, &k).await, Some(rich_record()), "one second before the ttl ends");
    h.set_now(T0 + 61);
    assert_eq!(load(&s, &k).await, None, "one second after the ttl ended");
}

/// Contract 1: a record being saved has no expiry, even after a release started one.
pub async fn save_clears_a_started_expiry<H: StoreHarness>(h: H) {
    let s = h.open().await;
    let k = key("alice", None);
    h.set_now(T0);
    save(&s, &k, &rich_record()).await;
    release(&s, &k, T0, 60).await;
    let again = RestoreRecord { topics: Vec::new(), lobbies: vec!["lobby-2".to_owned()] };
    save(&s, &k, &again).await;

    h.set_now(T0 + 100_000);
    assert_eq!(load(&s, &k).await, Some(again));
}

/// Contract 1: without a release, a record does not expire.
pub async fn unreleased_record_never_expires<H: StoreHarness>(h: H) {
    let s = h.open().await;
    let k = key("alice", None);
    save(&s, &k, &rich_record()).await;
    h.set_now(T0 + 10 * 365 * 24 * 3600);
    assert_eq!(load(&s, &k).await, Some(rich_record()));
}

/// Contract 2: the ttl runs from the latest `release_restore` call, longer or shorter.
pub async fn later_release_restarts_the_ttl<H: StoreHarness>(h: H) {
    let s = h.open().await;
    let (longer, shorter) = (key("alice", None), key("bob", None));
    h.set_now(T0);
    save(&s, &longer, &rich_record()).await;
    save(&s, &shorter, &rich_record()).await;
    release(&s, &longer, T0, 60).await;
    release(&s, &shorter, T0, 600).await;
    release(&s, &longer, T0 + 50, 60).await;
    release(&s, &shorter, T0 + 10, 10).await;

    h.set_now(T0 + 100);
    assert_eq!(load(&s, &longer).await, Some(rich_record()), "kept until T0 + 110");
    assert_eq!(load(&s, &shorter).await, None, "gone since T0 + 20");
    h.set_now(T0 + 111);
    assert_eq!(load(&s, &longer).await, None);
}

/// Contracts 1 and 3: once expired, a new save makes a record with no expiry.
pub async fn save_after_expiry_starts_a_fresh_record<H: StoreHarness>(h: H) {
    let s = h.open().await;
    let k = key("alice", Some("worker-1"));
    h.set_now(T0);
    save(&s, &k, &rich_record()).await;
    release(&s, &k, T0, 10).await;
    h.set_now(T0 + 20);
    assert_eq!(load(&s, &k).await, None);

    let fresh = RestoreRecord { topics: vec![topic("app/room/fresh", None)], lobbies: Vec::new() };
    save(&s, &k, &fresh).await;
    h.set_now(T0 + 100_000);
    assert_eq!(load(&s, &k).await, Some(fresh));
}

/// Releasing a key with no record succeeds and creates nothing; a later save has no expiry.
pub async fn release_of_an_unknown_key_is_ok<H: StoreHarness>(h: H) {
    let s = h.open().await;
    let k = key("alice", None);
    h.set_now(T0);
    release(&s, &k, T0, 60).await;
    assert_eq!(load(&s, &k).await, None);

    save(&s, &k, &rich_record()).await;
    h.set_now(T0 + 100_000);
    assert_eq!(load(&s, &k).await, Some(rich_record()));
}

/// `SessionKey`: (project, actor) without a clientId, and each (project, actor, clientId), are
/// separate records, saved, released and expired independently.
pub async fn keys_with_and_without_client_id_are_distinct<H: StoreHarness>(h: H) {
    let s = h.open().await;
    let other_project = SessionKey { project: project("proj-2"), ..key("alice", None) };
    let keys =
        [key("alice", None), key("alice", Some("w1")), key("alice", Some("w2")), key("bob", None), other_project];
    let record_of = |i: usize| RestoreRecord { topics: Vec::new(), lobbies: vec![format!("lobby-{i}")] };
    h.set_now(T0);
    for (i, k) in keys.iter().enumerate() {
        save(&s, k, &record_of(i)).await;
    }
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(load(&s, k).await, Some(record_of(i)), "{k:?}");
    }

    release(&s, &keys[0], T0, 10).await;
    release(&s, &keys[2], T0, 1000).await;
    h.set_now(T0 + 20);
    assert_eq!(load(&s, &keys[0]).await, None);
    for (i, k) in keys.iter().enumerate().skip(1) {
        assert_eq!(load(&s, k).await, Some(record_of(i)), "{k:?} after another key expired");
    }
}

/// Records are durable across the cluster: saved through one handle, loaded (and released)
/// through another.
pub async fn records_are_shared_between_handles<H: StoreHarness>(h: H) {
    let (one, two) = (h.open().await, h.open().await);
    let k = key("alice", Some("worker-1"));
    h.set_now(T0);
    save(&one, &k, &rich_record()).await;
    assert_eq!(load(&two, &k).await, Some(rich_record()));

    release(&two, &k, T0, 30).await;
    h.set_now(T0 + 31);
    assert_eq!(load(&one, &k).await, None);
}

// ----------------------------------------------------------------------------------------------
// Helpers.

async fn save(s: &Arc<dyn Store>, k: &SessionKey, record: &RestoreRecord) {
    within(format_args!("save_restore of {k:?}"), s.save_restore(k, record))
        .await
        .unwrap_or_else(|e| panic!("save_restore of {k:?}: {e}"));
}

async fn load(s: &Arc<dyn Store>, k: &SessionKey) -> Option<RestoreRecord> {
    within(format_args!("load_restore of {k:?}"), s.load_restore(k))
        .await
        .unwrap_or_else(|e| panic!("load_restore of {k:?}: {e}"))
}

async fn release(s: &Arc<dyn Store>, k: &SessionKey, now: u64, ttl: u64) {
    within(format_args!("release_restore of {k:?}"), s.release_restore(k, now, ttl))
        .await
        .unwrap_or_else(|e| panic!("release_restore of {k:?}: {e}"));
}

fn project(name: &str) -> ProjectId {
    ProjectId::parse(name).unwrap_or_else(|e| panic!("test project: {e}"))
}

fn key(actor: &str, client_id: Option<&str>) -> SessionKey {
    SessionKey {
        project: project("proj"),
        actor: ActorId::parse(actor).unwrap_or_else(|e| panic!("test actor: {e}")),
        client_id: client_id.map(|c| ClientId::parse(c).unwrap_or_else(|e| panic!("test clientId: {e}"))),
    }
}

fn topic(pattern: &str, group: Option<&str>) -> RestoredTopic {
    RestoredTopic {
        pattern: pattern.to_owned(),
        qos: 0,
        load_balance: group.is_some(),
        load_balance_group: group.map(str::to_owned),
        raw_filters: None,
    }
}

/// A record using every field, with values that survive only an exact round trip.
fn rich_record() -> RestoreRecord {
    RestoreRecord {
        topics: vec![
            RestoredTopic {
                qos: 1,
                // ["eu", "us"] as packed msgpack.
                raw_filters: Some(Bytes::from_static(b"\x92\xa2eu\xa2us")),
                ..topic("app/room-1/orders", None)
            },
            RestoredTopic { qos: 2, ..topic("app/room-1/jobs", Some("workers")) },
            // An empty filter list, which is not the same as none (`None`, wildcard).
            RestoredTopic { raw_filters: Some(Bytes::from_static(b"\x90")), ..topic("app/room-2/empty-filters", None) },
        ],
        lobbies: vec!["lobby-b".to_owned(), "lobby-a".to_owned()],
    }
}
