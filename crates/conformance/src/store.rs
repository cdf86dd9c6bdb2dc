//! The [`Store`] suite: every guarantee of the restore-record contract (per-connection records
//! and their claims included), as test bodies.
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
use skua_core::{
    ActorId, Claim, ClaimedRecord, ClientId, ConnectionRecord, Consumer, Holder, LiveClaim, NewMessage, NodeId,
    ProjectId, RecordId, Release, RestoreKey, RestoreRecord, RestoredTopic, Retention, SessionKey, Store,
};

use super::within;

mod members;
mod triggers;
pub use members::*;
pub use triggers::*;

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

    /// Whether [`Self::open`] opens a separate handle (its own pool onto a shared database) each
    /// time. `false` for an in-process store, where every node of an embedded cluster holds the
    /// one instance: then sharing is by construction, and the cases check that instead.
    fn distinct_handles(&self) -> bool {
        true
    }
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
            connection_records_of_one_actor_are_separate,
            claim_takes_the_record_released_last,
            claim_never_takes_a_record_in_use,
            claim_skips_expired_records,
            claim_takes_only_the_actor_s_connection_records,
            concurrent_claims_never_take_the_same_record,
            claim_returns_the_records_that_ended_together,
            releasing_a_node_ends_the_records_it_holds,
            releasing_other_nodes_keeps_only_the_survivor_s_records,
            a_lapsed_node_s_records_keep_when_it_was_last_seen,
            restore_holders_are_the_other_nodes_holding_records_in_use,
            an_actor_keeps_only_its_latest_ended_records,
            log_messages_before_a_consumer_are_not_pending,
            log_pending_follows_topic_and_filters,
            log_claim_hands_a_message_to_one_holder,
            log_claim_many_hands_each_message_to_one_holder,
            log_concurrent_claim_many_hand_each_message_once,
            log_claim_page_pages_in_seq_order_with_every_field,
            log_ack_ends_pending,
            log_ack_many_ends_pending_of_those_given,
            log_release_scopes,
            log_consumer_expires_unless_touched,
            log_prune_by_age_and_per_topic_cap,
            log_prune_in_batches_deletes_everything_past_retention,
            log_prune_caps_a_topic_that_grows_after_a_prune,
            log_open_consumer_replaces_filters,
            log_concurrent_pages_hand_each_message_once,
            log_drop_consumer_forgets_its_pending,
            log_an_actor_s_own_messages_are_not_kept_for_it,
            log_list_consumers_pages_by_prefix_with_backlogs,
            trigger_outbox_is_written_with_its_message,
            trigger_claims_hand_each_trigger_once,
            trigger_renew_only_while_owned,
            trigger_finish_and_dead_letter_leave_the_outbox,
            trigger_outbox_goes_with_its_message,
            trigger_expire_leases_of_other_owners,
            trigger_dead_letters_list_replace_cap_and_delete,
            trigger_dead_letter_batches_write_all_and_cap,
            trigger_dead_letters_cap_bytes_per_project,
            member_upsert_versions_offline_and_delete,
            member_wake_is_won_once,
            member_expiry_other_nodes_and_limit,
            member_project_limit_is_per_project,
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
    let smaller = RestoreRecord {
        topics: vec![topic("app/room/only", None)],
        lobbies: Vec::new(),
        holder_last_seen_ms: None,
        door_filters: Vec::new(),
    };
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
    let again = RestoreRecord {
        topics: Vec::new(),
        lobbies: vec!["lobby-2".to_owned()],
        holder_last_seen_ms: None,
        door_filters: Vec::new(),
    };
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

    let fresh = RestoreRecord {
        topics: vec![topic("app/room/fresh", None)],
        lobbies: Vec::new(),
        holder_last_seen_ms: None,
        door_filters: Vec::new(),
    };
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
    let other_project = RestoreKey::Session(SessionKey {
        project: project("proj-2"),
        actor: ActorId::parse("alice").unwrap_or_else(|e| panic!("test actor: {e}")),
        client_id: None,
    });
    let keys = [
        key("alice", None),
        key("alice", Some("w1")),
        key("alice", Some("w2")),
        key("bob", None),
        other_project,
        conn("alice", "r1"),
    ];
    let record_of = |i: usize| RestoreRecord {
        topics: Vec::new(),
        lobbies: vec![format!("lobby-{i}")],
        holder_last_seen_ms: None,
        door_filters: Vec::new(),
    };
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
    // Otherwise the case below would pass for any store, shared or not (issue 22).
    assert_eq!(
        !Arc::ptr_eq(&one, &two),
        h.distinct_handles(),
        "the harness must open what it says: separate handles onto one database, or the one instance"
    );
    let k = key("alice", Some("worker-1"));
    h.set_now(T0);
    save(&one, &k, &rich_record()).await;
    assert_eq!(load(&two, &k).await, Some(rich_record()));

    release(&two, &k, T0, 30).await;
    h.set_now(T0 + 31);
    assert_eq!(load(&one, &k).await, None);
}

/// Each connection of an actor keeps its own record: saving or releasing one never changes
/// another, the actor's session records included.
pub async fn connection_records_of_one_actor_are_separate<H: StoreHarness>(h: H) {
    let s = h.open().await;
    let (tab1, tab2, session) = (conn("alice", "tab-1"), conn("alice", "tab-2"), key("alice", None));
    h.set_now(T0);
    save(&s, &tab1, &rich_record()).await;
    save(&s, &session, &lobbies("session")).await;
    save(&s, &tab2, &RestoreRecord::default()).await;
    assert_eq!(load(&s, &tab1).await, Some(rich_record()), "a second connection's save left the first alone");
    release(&s, &tab2, T0, 10).await;
    h.set_now(T0 + 20);
    assert_eq!(load(&s, &tab2).await, None);
    assert_eq!(load(&s, &tab1).await, Some(rich_record()));
    assert_eq!(load(&s, &session).await, Some(lobbies("session")));
}

/// Contract 4: claims take released connection records, the one released last first; a
/// claimed record loads as before and is in use again until its next release.
pub async fn claim_takes_the_record_released_last<H: StoreHarness>(h: H) {
    let s = h.open().await;
    h.set_now(T0);
    for first in ["tab-1", "tab-2"] {
        let second = if first == "tab-1" { "tab-2" } else { "tab-1" };
        save(&s, &conn("alice", first), &lobbies(first)).await;
        save(&s, &conn("alice", second), &lobbies(second)).await;
        release(&s, &conn("alice", first), T0, 60).await;
        release(&s, &conn("alice", second), T0, 60).await;
        assert_eq!(claim(&s, "alice").await, Some(claimed(second)), "released {first} then {second}");
        assert_eq!(claim(&s, "alice").await, Some(claimed(first)));
        assert_eq!(claim(&s, "alice").await, None, "both claimed");
        assert_eq!(load(&s, &conn("alice", first)).await, Some(lobbies(first)));
        release(&s, &conn("alice", first), T0, 60).await;
        assert_eq!(claim(&s, "alice").await, Some(claimed(first)), "claimable again after its next release");
        release(&s, &conn("alice", first), T0, 60).await;
        release(&s, &conn("alice", second), T0, 60).await;
        assert_eq!(claim(&s, "alice").await, Some(claimed(second)));
        assert_eq!(claim(&s, "alice").await, Some(claimed(first)));
    }
}

/// Contract 4: a record saved and not released since (its connection is open) is never
/// claimed; a save after a release makes it in use again.
pub async fn claim_never_takes_a_record_in_use<H: StoreHarness>(h: H) {
    let s = h.open().await;
    h.set_now(T0);
    save(&s, &conn("alice", "open"), &lobbies("open")).await;
    assert_eq!(claim(&s, "alice").await, None);
    save(&s, &conn("alice", "ended"), &lobbies("ended")).await;
    release(&s, &conn("alice", "ended"), T0, 60).await;
    save(&s, &conn("alice", "reopened"), &lobbies("reopened")).await;
    release(&s, &conn("alice", "reopened"), T0, 60).await;
    save(&s, &conn("alice", "reopened"), &lobbies("reopened")).await;
    assert_eq!(claim(&s, "alice").await, Some(claimed("ended")));
    assert_eq!(claim(&s, "alice").await, None);
    h.set_now(T0 + 100_000);
    assert_eq!(load(&s, &conn("alice", "ended")).await, Some(lobbies("ended")), "a claimed record has no expiry");
}

/// Contracts 2 and 4: an expired record is not claimed, even when it was released last.
pub async fn claim_skips_expired_records<H: StoreHarness>(h: H) {
    let s = h.open().await;
    h.set_now(T0);
    save(&s, &conn("alice", "long"), &lobbies("long")).await;
    save(&s, &conn("alice", "short"), &lobbies("short")).await;
    release(&s, &conn("alice", "long"), T0, 600).await;
    release(&s, &conn("alice", "short"), T0, 10).await;
    h.set_now(T0 + 11);
    assert_eq!(claim(&s, "alice").await, Some(claimed("long")));
    assert_eq!(claim(&s, "alice").await, None);
}

/// Contract 4: session records (with or without clientId) and other actors' or projects'
/// records are never claimed.
pub async fn claim_takes_only_the_actor_s_connection_records<H: StoreHarness>(h: H) {
    let s = h.open().await;
    h.set_now(T0);
    let other_project =
        RestoreKey::Connection(ConnectionRecord { project: project("proj-2"), ..conn_of("alice", "x") });
    for k in [key("alice", None), key("alice", Some("w1")), conn("bob", "b"), other_project] {
        save(&s, &k, &rich_record()).await;
        release(&s, &k, T0, 60).await;
    }
    assert_eq!(claim(&s, "alice").await, None);
    assert_eq!(
        claim(&s, "bob").await,
        Some(ClaimedRecord { id: record_id("b"), record: rich_record(), together: Vec::new() })
    );
}

/// Contract 4: many claims at once, through two handles, take each released record once.
pub async fn concurrent_claims_never_take_the_same_record<H: StoreHarness>(h: H) {
    let (one, two) = (h.open().await, h.open().await);
    h.set_now(T0);
    let ids: Vec<String> = (0..8).map(|i| format!("tab-{i}")).collect();
    for id in &ids {
        save(&one, &conn("alice", id), &lobbies(id)).await;
        release(&two, &conn("alice", id), T0, 60).await;
    }
    let claims = (0..12).map(|i| {
        let s = if i % 2 == 0 { one.clone() } else { two.clone() };
        async move { claim(&s, "alice").await }
    });
    let mut got: Vec<String> =
        futures_util::future::join_all(claims).await.into_iter().flatten().map(|c| c.id.as_str().to_owned()).collect();
    got.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(got, want, "every record claimed exactly once");
}

/// Contract 5: a lapsed node's records in use are released (and claimable); records another
/// node saved or claimed since, and records released before, keep their state.
pub async fn releasing_a_node_ends_the_records_it_holds<H: StoreHarness>(h: H) {
    let s = h.open().await;
    h.set_now(T0);
    save_on(&s, &conn("alice", "on-dead"), "dead", &lobbies("on-dead")).await;
    save_on(&s, &conn("alice", "on-live"), "live", &lobbies("on-live")).await;
    save_on(&s, &conn("alice", "moved"), "dead", &lobbies("moved")).await;
    release(&s, &conn("alice", "moved"), T0, 60).await;
    assert_eq!(claim_on(&s, "alice", "live").await, Some(claimed("moved")), "now held on live");
    save_on(&s, &key("alice", Some("w1")), "dead", &rich_record()).await;
    save_on(&s, &conn("alice", "ended"), "dead", &lobbies("ended")).await;
    release(&s, &conn("alice", "ended"), T0, 10).await;

    assert_eq!(release_node(&s, "dead", T0 + 5, 60, None).await, 2, "on-dead and w1");
    assert_eq!(claim(&s, "alice").await, Some(claimed("on-dead")), "released by the node's release, last");
    assert_eq!(claim(&s, "alice").await, Some(claimed("ended")));
    assert_eq!(claim(&s, "alice").await, None, "on-live and moved are in use on live");
    h.set_now(T0 + 66);
    assert_eq!(load(&s, &key("alice", Some("w1"))).await, None, "the session record expires like the others");
    assert_eq!(load(&s, &conn("alice", "on-live")).await, Some(lobbies("on-live")));
}

// ----------------------------------------------------------------------------------------------
// Helpers.

async fn claim(s: &Arc<dyn Store>, actor: &str) -> Option<ClaimedRecord> {
    claim_on(s, actor, "node-1").await
}

async fn claim_on(s: &Arc<dyn Store>, actor: &str, node: &str) -> Option<ClaimedRecord> {
    claim_together_on(s, actor, node, None).await
}

async fn claim_together_on(
    s: &Arc<dyn Store>,
    actor: &str,
    node: &str,
    together_s: Option<u64>,
) -> Option<ClaimedRecord> {
    let actor = ActorId::parse(actor).unwrap_or_else(|e| panic!("test actor: {e}"));
    within(
        format_args!("claim_restore of {actor:?}"),
        s.claim_restore(&project("proj"), &actor, &node_id(node), together_s),
    )
    .await
    .unwrap_or_else(|e| panic!("claim_restore of {actor:?}: {e}"))
}

/// The `lobbies` of the records a claim returned as ended together, sorted.
fn together_names(c: &ClaimedRecord) -> Vec<String> {
    let mut names: Vec<String> = c.together.iter().flat_map(|r| r.lobbies.clone()).collect();
    names.sort();
    names
}

/// Contract 4, with a window (issue 31, two tabs that drop together): the claim also returns the
/// actor's other records that ended within the window of the claimed one's end, whether still
/// claimable or claimed since (and saved again since: a save keeps the end); never one that ended
/// outside it, one never released, a session record or another actor's. Without a window,
/// nothing.
pub async fn claim_returns_the_records_that_ended_together<H: StoreHarness>(h: H) {
    let s = h.open().await;
    h.set_now(T0);
    for id in ["early", "tab-a", "tab-b", "tab-c", "open"] {
        save(&s, &conn("alice", id), &lobbies(id)).await;
    }
    save(&s, &conn("bob", "bob-tab"), &lobbies("bob-tab")).await;
    save(&s, &key("alice", Some("w1")), &lobbies("w1")).await;
    release(&s, &conn("alice", "early"), T0, 600).await;
    release(&s, &conn("alice", "tab-a"), T0 + 100, 600).await;
    release(&s, &conn("alice", "tab-b"), T0 + 100, 600).await;
    release(&s, &conn("alice", "tab-c"), T0 + 101, 600).await;
    release(&s, &conn("bob", "bob-tab"), T0 + 100, 600).await;
    release(&s, &key("alice", Some("w1")), T0 + 100, 600).await;
    h.set_now(T0 + 102);

    let first = claim_together_on(&s, "alice", "node-1", Some(1)).await.unwrap_or_else(|| panic!("tab-c is claimable"));
    assert_eq!(first.id, record_id("tab-c"), "the record released last");
    assert_eq!(together_names(&first), ["tab-a", "tab-b"], "ended within 1 s of tab-c: not early, open, bob's or w1");
    // The first claimant saves its (merged) record: the end it had is kept.
    save(&s, &conn("alice", "tab-c"), &lobbies("tab-c-saved")).await;

    let second =
        claim_together_on(&s, "alice", "node-1", Some(1)).await.unwrap_or_else(|| panic!("tab-b is claimable"));
    assert_eq!(second.id, record_id("tab-b"));
    assert_eq!(together_names(&second), ["tab-a", "tab-c-saved"], "a record claimed since still ended together");

    let narrow = claim_together_on(&s, "alice", "node-1", None).await.unwrap_or_else(|| panic!("tab-a is claimable"));
    assert_eq!(narrow.id, record_id("tab-a"));
    assert!(narrow.together.is_empty(), "no window, no together: {:?}", narrow.together);
    let wide =
        claim_together_on(&s, "alice", "node-1", Some(200)).await.unwrap_or_else(|| panic!("early is claimable"));
    assert_eq!(wide.id, record_id("early"));
    assert_eq!(together_names(&wide), ["tab-a", "tab-b", "tab-c-saved"], "never `open`, which never ended");
}

fn node_id(node: &str) -> NodeId {
    NodeId::parse(node).unwrap_or_else(|e| panic!("test node: {e}"))
}

/// Contract 5, every node but one: a single node starting after a crash under another id
/// frees what the dead run held, and keeps its own records in use.
pub async fn releasing_other_nodes_keeps_only_the_survivor_s_records<H: StoreHarness>(h: H) {
    let s = h.open().await;
    h.set_now(T0);
    save_on(&s, &conn("alice", "old-1"), "crashed", &lobbies("old-1")).await;
    save_on(&s, &conn("alice", "old-2"), "older", &lobbies("old-2")).await;
    save_on(&s, &conn("alice", "mine"), "survivor", &lobbies("mine")).await;
    let released = within("release_other_nodes_restores", s.release_other_nodes_restores(&node_id("survivor"), T0, 60))
        .await
        .unwrap_or_else(|e| panic!("release_other_nodes_restores: {e}"));
    assert_eq!(released, 2, "old-1 and old-2");
    let first = claim(&s, "alice").await;
    let second = claim(&s, "alice").await;
    let mut got: Vec<_> = [first, second].into_iter().flatten().collect();
    got.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
    let mut want = vec![claimed("old-1"), claimed("old-2")];
    want.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
    assert_eq!(got, want, "both dead runs' records are claimable");
    assert_eq!(claim(&s, "alice").await, None, "the survivor's own record stays in use");
}

/// Contract 5: records a node's release ended load and claim with the node's last sign of life
/// (`holder_last_seen_ms`); a claim keeps it, a save or a release by a connection clears it.
pub async fn a_lapsed_node_s_records_keep_when_it_was_last_seen<H: StoreHarness>(h: H) {
    let s = h.open().await;
    h.set_now(T0);
    let seen = (T0 - 7) * 1000 + 123;
    let with_seen = |name: &str| RestoreRecord { holder_last_seen_ms: Some(seen), ..lobbies(name) };
    save_on(&s, &conn("alice", "a-1"), "dead", &lobbies("a-1")).await;
    save_on(&s, &conn("alice", "a-2"), "dead", &lobbies("a-2")).await;
    save_on(&s, &key("alice", Some("w1")), "dead", &lobbies("w1")).await;
    save_on(&s, &conn("alice", "other"), "live", &lobbies("other")).await;
    release(&s, &conn("alice", "other"), T0, 60).await;
    assert_eq!(release_node(&s, "dead", T0, 60, Some(seen)).await, 3);
    assert_eq!(load(&s, &key("alice", Some("w1"))).await, Some(with_seen("w1")), "a session record carries it");
    let first = claim(&s, "alice").await.unwrap_or_else(|| panic!("a record of the dead node is claimable"));
    assert_eq!(first.record.holder_last_seen_ms, Some(seen), "a claimed record carries it: {first:?}");
    assert_eq!(
        load(&s, &conn("alice", first.id.as_str())).await,
        Some(with_seen(first.id.as_str())),
        "kept by the claim"
    );
    let second = claim(&s, "alice").await.unwrap_or_else(|| panic!("the dead node's other record is claimable"));
    assert_eq!(second.record.holder_last_seen_ms, Some(seen));
    assert_eq!(claim(&s, "alice").await, Some(claimed("other")), "released by its connection: not set");
    // The claimer's connection ends normally: its release clears it; so does a save.
    release(&s, &conn("alice", first.id.as_str()), T0 + 1, 60).await;
    let again = claim(&s, "alice").await.unwrap_or_else(|| panic!("released again: claimable"));
    assert_eq!(again.record.holder_last_seen_ms, None, "a connection's release clears it: {again:?}");
    save_on(&s, &key("alice", Some("w1")), "live", &lobbies("w1")).await;
    assert_eq!(load(&s, &key("alice", Some("w1"))).await, Some(lobbies("w1")), "a save clears it");
}

/// Contract 5: the holders of an actor's connection records in use are the distinct nodes that
/// saved or claimed them, but the one asking; ended records, session records and other actors'
/// records do not count; at most `limit` are listed.
pub async fn restore_holders_are_the_other_nodes_holding_records_in_use<H: StoreHarness>(h: H) {
    let s = h.open().await;
    h.set_now(T0);
    assert_eq!(holders(&s, "alice", "me", 10).await, Vec::<String>::new(), "nothing saved");
    save_on(&s, &conn("alice", "d-1"), "dead", &lobbies("d-1")).await;
    save_on(&s, &conn("alice", "d-2"), "dead", &lobbies("d-2")).await;
    save_on(&s, &conn("alice", "mine"), "me", &lobbies("mine")).await;
    save_on(&s, &conn("alice", "ended"), "gone", &lobbies("ended")).await;
    release(&s, &conn("alice", "ended"), T0, 60).await;
    save_on(&s, &key("alice", Some("w1")), "session-node", &lobbies("w1")).await;
    save_on(&s, &conn("bob", "b-1"), "bob-node", &lobbies("b-1")).await;
    assert_eq!(holders(&s, "alice", "me", 10).await, vec!["dead"], "distinct, not the asker, only records in use");
    assert_eq!(holders(&s, "alice", "dead", 10).await, vec!["me"]);
    save_on(&s, &conn("alice", "l-1"), "live", &lobbies("l-1")).await;
    assert_eq!(holders(&s, "alice", "me", 10).await, vec!["dead", "live"]);
    assert_eq!(holders(&s, "alice", "me", 1).await.len(), 1, "bounded by the limit");
    assert_eq!(release_node(&s, "dead", T0 + 1, 60, None).await, 2);
    assert_eq!(holders(&s, "alice", "me", 10).await, vec!["live"], "a node's release ends its holding");
    let taken = claim_on(&s, "alice", "other").await.unwrap_or_else(|| panic!("a released record is claimable"));
    assert!(["d-1", "d-2"].contains(&taken.id.as_str()), "one of the dead node's: {taken:?}");
    assert_eq!(holders(&s, "alice", "me", 10).await, vec!["live", "other"], "a claim makes the claimer a holder");
}

/// Contract 6: an actor's ended connection records beyond the latest
/// `MAX_ENDED_RECORDS_PER_ACTOR` go (the durable stores in `prune_restores`, contract 7); the
/// latest are kept, newest claimed first; other actors' are untouched.
pub async fn an_actor_keeps_only_its_latest_ended_records<H: StoreHarness>(h: H) {
    let max = skua_core::store::MAX_ENDED_RECORDS_PER_ACTOR;
    let s = h.open().await;
    h.set_now(T0);
    save(&s, &conn("bob", "bob-1"), &lobbies("bob-1")).await;
    release(&s, &conn("bob", "bob-1"), T0, 3600).await;
    for i in 0..max + 10 {
        let id = format!("c-{i:03}");
        save(&s, &conn("alice", &id), &lobbies(&id)).await;
        release(&s, &conn("alice", &id), T0, 3600).await;
    }
    // A minute later one more release, then the periodic prune: every store has capped by now.
    h.set_now(T0 + 61);
    let last = format!("c-{:03}", max + 10);
    save(&s, &conn("alice", &last), &lobbies(&last)).await;
    release(&s, &conn("alice", &last), T0 + 61, 3600).await;
    within("prune_restores", s.prune_restores(T0 + 61, 60, 1_000)).await.unwrap_or_else(|e| panic!("prune: {e}"));
    let mut claimed_ids = Vec::new();
    while let Some(c) = claim(&s, "alice").await {
        claimed_ids.push(c.id.as_str().to_owned());
        assert!(claimed_ids.len() <= max + 1, "more than {max} ended records kept: {claimed_ids:?}");
    }
    assert!(claimed_ids.len() >= max, "the latest {max} are kept: {} claimed", claimed_ids.len());
    assert_eq!(claimed_ids[0], last, "newest first");
    assert!(!claimed_ids.iter().any(|id| id == "c-000"), "the oldest went first: {claimed_ids:?}");
    assert_eq!(claim(&s, "bob").await, Some(claimed("bob-1")), "another actor's record is untouched");
}

/// `restore_holders` of `actor` asked by `node`, as sorted strings.
async fn holders(s: &Arc<dyn Store>, actor: &str, node: &str, limit: usize) -> Vec<String> {
    let actor = ActorId::parse(actor).unwrap_or_else(|e| panic!("test actor: {e}"));
    let mut got: Vec<String> = within(
        format_args!("restore_holders of {actor:?}"),
        s.restore_holders(&project("proj"), &actor, &node_id(node), limit),
    )
    .await
    .unwrap_or_else(|e| panic!("restore_holders of {actor:?}: {e}"))
    .into_iter()
    .map(|n| n.as_str().to_owned())
    .collect();
    got.sort();
    got
}

async fn release_node(s: &Arc<dyn Store>, node: &str, now: u64, ttl: u64, seen_ms: Option<u64>) -> u64 {
    let id = node_id(node);
    within(format_args!("release_node_restores of {node}"), s.release_node_restores(&id, now, ttl, seen_ms))
        .await
        .unwrap_or_else(|e| panic!("release_node_restores of {node}: {e}"))
}

fn record_id(id: &str) -> RecordId {
    RecordId::parse(id).unwrap_or_else(|e| panic!("test record id: {e}"))
}

fn conn_of(actor: &str, id: &str) -> ConnectionRecord {
    ConnectionRecord {
        project: project("proj"),
        actor: ActorId::parse(actor).unwrap_or_else(|e| panic!("test actor: {e}")),
        id: record_id(id),
    }
}

/// The connection record `id` of `actor` in project `proj`.
fn conn(actor: &str, id: &str) -> RestoreKey {
    RestoreKey::Connection(conn_of(actor, id))
}

/// A record told apart by one lobby named `name`.
fn lobbies(name: &str) -> RestoreRecord {
    RestoreRecord {
        topics: Vec::new(),
        lobbies: vec![name.to_owned()],
        holder_last_seen_ms: None,
        door_filters: Vec::new(),
    }
}

/// What claiming record `id` (saved as `lobbies(id)`) returns.
fn claimed(id: &str) -> ClaimedRecord {
    ClaimedRecord { id: record_id(id), record: lobbies(id), together: Vec::new() }
}

async fn save(s: &Arc<dyn Store>, k: &RestoreKey, record: &RestoreRecord) {
    save_on(s, k, "node-1", record).await;
}

async fn save_on(s: &Arc<dyn Store>, k: &RestoreKey, node: &str, record: &RestoreRecord) {
    within(format_args!("save_restore of {k:?}"), s.save_restore(k, &node_id(node), record))
        .await
        .unwrap_or_else(|e| panic!("save_restore of {k:?}: {e}"));
}

async fn load(s: &Arc<dyn Store>, k: &RestoreKey) -> Option<RestoreRecord> {
    within(format_args!("load_restore of {k:?}"), s.load_restore(k))
        .await
        .unwrap_or_else(|e| panic!("load_restore of {k:?}: {e}"))
}

async fn release(s: &Arc<dyn Store>, k: &RestoreKey, now: u64, ttl: u64) {
    within(format_args!("release_restore of {k:?}"), s.release_restore(k, now, ttl))
        .await
        .unwrap_or_else(|e| panic!("release_restore of {k:?}: {e}"));
}

fn project(name: &str) -> ProjectId {
    ProjectId::parse(name).unwrap_or_else(|e| panic!("test project: {e}"))
}

fn key(actor: &str, client_id: Option<&str>) -> RestoreKey {
    RestoreKey::Session(SessionKey {
        project: project("proj"),
        actor: ActorId::parse(actor).unwrap_or_else(|e| panic!("test actor: {e}")),
        client_id: client_id.map(|c| ClientId::parse(c).unwrap_or_else(|e| panic!("test clientId: {e}"))),
    })
}

fn topic(pattern: &str, group: Option<&str>) -> RestoredTopic {
    RestoredTopic {
        pattern: pattern.to_owned(),
        qos: 0,
        load_balance: group.is_some(),
        load_balance_group: group.map(str::to_owned),
        raw_filters: None,
        history: None,
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
                history: None,
                ..topic("app/room-1/orders", None)
            },
            RestoredTopic { qos: 2, ..topic("app/room-1/jobs", Some("workers")) },
            // An empty filter list, which is not the same as none (`None`, wildcard).
            RestoredTopic { raw_filters: Some(Bytes::from_static(b"\x90")), ..topic("app/room-2/empty-filters", None) },
        ],
        lobbies: vec!["lobby-b".to_owned(), "lobby-a".to_owned()],
        holder_last_seen_ms: None,
        door_filters: Vec::new(),
    }
}

// ----------------------------------------------------------------------------------------------
// The message log of logged topics (N24–N26): consumers, pending messages, claims, acks.

const TOPIC: &str = "p/app/room/jobs";
const KEEP: u64 = 3600;

fn consumer(id: &str, topic: &str, filters: &[&str]) -> Consumer {
    Consumer {
        id: id.to_owned(),
        topic: topic.to_owned(),
        actor: "worker".to_owned(),
        filters: filters.iter().map(|f| (*f).to_owned()).collect(),
    }
}

fn holder<'a>(session: &'a str, node: &'a str, conn: u64) -> Holder<'a> {
    Holder { session, node, conn }
}

async fn open_consumer(s: &Arc<dyn Store>, c: &Consumer) {
    s.open_consumer(c, T0, KEEP).await.expect("open_consumer");
}

/// Appends a message `id` (also its data) at `T0`; returns its seq.
async fn append(s: &Arc<dyn Store>, topic: &str, id: &str, filter: Option<&str>) -> u64 {
    append_at(s, topic, id, filter, T0).await
}

async fn append_at(s: &Arc<dyn Store>, topic: &str, id: &str, filter: Option<&str>, now: u64) -> u64 {
    let m = NewMessage {
        msg_id: id,
        topic,
        filter,
        publisher: "alice",
        stream: 0,
        timestamp_ms: now * 1000 + 7,
        qos: 1,
        data: id.as_bytes(),
        trigger: None,
    };
    s.append(&m, now).await.expect("append")
}

/// `Some(redelivered)` of a [`Claim::Claimed`], `None` for any other claim.
fn redelivered(c: Claim) -> Option<bool> {
    match c {
        Claim::Claimed { redelivered, .. } => Some(redelivered),
        _ => None,
    }
}

async fn backlog(s: &Arc<dyn Store>, c: &str) -> u64 {
    s.backlog(c).await.expect("backlog").0
}

async fn page_ids(s: &Arc<dyn Store>, c: &str, h: Holder<'_>, limit: u32) -> Vec<String> {
    s.claim_page(c, h, 0..=u64::MAX, limit).await.expect("claim_page").into_iter().map(|m| m.msg_id).collect()
}

/// A consumer receives what is appended after it exists, nothing from before.
pub async fn log_messages_before_a_consumer_are_not_pending<H: StoreHarness>(h: H) {
    let s = h.open().await;
    append(&s, TOPIC, "m-early", None).await;
    open_consumer(&s, &consumer("c1", TOPIC, &[])).await;
    assert_eq!(backlog(&s, "c1").await, 0);
    append(&s, TOPIC, "m-late", None).await;
    assert_eq!(page_ids(&s, "c1", holder("s1", "n1", 1), 10).await, ["m-late"]);
    assert_eq!(s.claim("c1", "m-early", holder("s1", "n1", 1)).await.unwrap(), Claim::Absent);
}

/// A wildcard consumer gets every message of its topic; a filtered one unfiltered messages
/// never, filtered ones of its keys only (N13); other topics' consumers nothing.
pub async fn log_pending_follows_topic_and_filters<H: StoreHarness>(h: H) {
    let s = h.open().await;
    open_consumer(&s, &consumer("all", TOPIC, &[])).await;
    open_consumer(&s, &consumer("eu", TOPIC, &["eu", "asia"])).await;
    open_consumer(&s, &consumer("other", "p/app/room/other", &[])).await;
    let seqs = [
        append(&s, TOPIC, "m1", None).await,
        append(&s, TOPIC, "m2", Some("eu")).await,
        append(&s, TOPIC, "m3", Some("us")).await,
        append(&s, TOPIC, "m4", Some("asia")).await,
    ];
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "seq increases: {seqs:?}");
    assert_eq!(s.backlog("all").await.unwrap(), (4, seqs[3]));
    assert_eq!(page_ids(&s, "eu", holder("s", "n", 1), 10).await, ["m2", "m4"]);
    assert_eq!(backlog(&s, "other").await, 0);
    assert_eq!(backlog(&s, "unknown").await, 0);
}

/// `claim` hands a pending message to one holder; a released one is a redelivery.
pub async fn log_claim_hands_a_message_to_one_holder<H: StoreHarness>(h: H) {
    let s = h.open().await;
    open_consumer(&s, &consumer("g", TOPIC, &[])).await;
    append(&s, TOPIC, "m1", None).await;
    let (a, b) = (holder("sa", "n1", 1), holder("sb", "n2", 2));
    assert_eq!(redelivered(s.claim("g", "m1", a).await.unwrap()), Some(false));
    assert_eq!(s.claim("g", "m1", b).await.unwrap(), Claim::Held);
    assert_eq!(s.claim("g", "m1", a).await.unwrap(), Claim::Held, "a holder does not get it twice");
    assert_eq!(s.claim("g", "nope", a).await.unwrap(), Claim::Absent);
    assert_eq!(s.claim("nobody", "m1", a).await.unwrap(), Claim::Absent);
    assert_eq!(backlog(&s, "g").await, 0, "held messages are not backlog");

    assert_eq!(s.release(Release::Conn { node: "n1", conn: 1 }).await.unwrap(), ["g"]);
    assert_eq!(backlog(&s, "g").await, 1);
    assert_eq!(redelivered(s.claim("g", "m1", b).await.unwrap()), Some(true));
}

fn live<'a>(consumer: &'a str, msg_id: &'a str, holder: Holder<'a>) -> LiveClaim<'a> {
    LiveClaim { consumer, msg_id, holder }
}

/// `claim_many` claims several messages, of several consumers and for several holders, in one
/// call: one outcome per entry in order, each message to one holder, held and absent ones told
/// apart, a message given twice claimed once; more entries than one statement carries
/// ([`skua_core::MAX_BATCH_IDS`]) are all claimed.
pub async fn log_claim_many_hands_each_message_to_one_holder<H: StoreHarness>(h: H) {
    let s = h.open().await;
    open_consumer(&s, &consumer("c", TOPIC, &[])).await;
    open_consumer(&s, &consumer("d", TOPIC, &[])).await;
    let mut seqs = Vec::new();
    for i in 1..=4 {
        seqs.push(append(&s, TOPIC, &format!("m{i}"), None).await);
    }
    let (a, b) = (holder("sa", "n1", 1), holder("sb", "n2", 2));
    assert_eq!(redelivered(s.claim("c", "m2", b).await.unwrap()), Some(false));
    let got = s
        .claim_many(&[
            live("c", "m3", a),
            live("c", "m1", a),
            live("d", "m1", b),
            live("c", "m2", a),
            live("c", "nope", a),
            live("c", "m3", a),
            live("c", "m4", b),
            live("c", "m4", a),
        ])
        .await
        .expect("claim_many");
    assert_eq!(
        got,
        [
            Claim::Claimed { redelivered: false, seq: seqs[2] },
            Claim::Claimed { redelivered: false, seq: seqs[0] },
            Claim::Claimed { redelivered: false, seq: seqs[0] },
            Claim::Held,
            Claim::Absent,
            Claim::Held,
            Claim::Claimed { redelivered: false, seq: seqs[3] },
            Claim::Held,
        ],
        "in the order given; m1 is pending for c and d apart; m2 is b's; nope was never pending; \
         m3 is claimed once; m4 goes to the first holder that asked"
    );
    assert_eq!(s.claim("c", "m1", b).await.unwrap(), Claim::Held, "claimed by a");
    assert_eq!(s.claim("d", "m1", a).await.unwrap(), Claim::Held, "claimed by b");
    assert_eq!(s.claim_many(&[]).await.unwrap(), [], "nothing to claim");
    assert_eq!(s.claim_many(&[live("nobody", "m4", a)]).await.unwrap(), [Claim::Absent]);
    assert_eq!(s.release(Release::Conn { node: "n1", conn: 1 }).await.unwrap(), ["c"]);
    let again = s.claim_many(&[live("c", "m1", b), live("d", "m4", b)]).await.unwrap();
    assert_eq!(
        again,
        [Claim::Claimed { redelivered: true, seq: seqs[0] }, Claim::Claimed { redelivered: false, seq: seqs[3] }]
    );

    open_consumer(&s, &consumer("big", TOPIC, &[])).await;
    let n = skua_core::MAX_BATCH_IDS + 3;
    let ids: Vec<String> = (0..n).map(|i| format!("big-{i}")).collect();
    for id in &ids {
        append(&s, TOPIC, id, None).await;
    }
    let claims: Vec<LiveClaim<'_>> = ids.iter().map(|id| live("big", id, a)).collect();
    let all = s.claim_many(&claims).await.unwrap();
    assert_eq!(all.len(), n);
    assert!(all.iter().all(|c| matches!(c, Claim::Claimed { redelivered: false, .. })), "{all:?}");
    assert_eq!(backlog(&s, "big").await, 0, "every one is held");
}

/// Two holders claiming the same messages at once with `claim_many` (through separate handles
/// where the harness has them) never both get one.
pub async fn log_concurrent_claim_many_hand_each_message_once<H: StoreHarness>(h: H) {
    let s = h.open().await;
    let t = h.open().await;
    open_consumer(&s, &consumer("g", TOPIC, &[])).await;
    let ids: Vec<String> = (0..40).map(|i| format!("m{i}")).collect();
    for id in &ids {
        append(&s, TOPIC, id, None).await;
    }
    let (a, b) = (holder("sa", "n1", 1), holder("sb", "n2", 2));
    let for_a: Vec<LiveClaim<'_>> = ids.iter().map(|id| live("g", id, a)).collect();
    let for_b: Vec<LiveClaim<'_>> = ids.iter().rev().map(|id| live("g", id, b)).collect();
    let (x, y) = tokio::join!(s.claim_many(&for_a), t.claim_many(&for_b));
    let (x, mut y) = (x.expect("claim_many a"), y.expect("claim_many b"));
    y.reverse();
    for (i, (cx, cy)) in x.iter().zip(&y).enumerate() {
        let won = usize::from(matches!(cx, Claim::Claimed { .. })) + usize::from(matches!(cy, Claim::Claimed { .. }));
        assert_eq!(won, 1, "m{i} claimed by exactly one: {cx:?} / {cy:?}");
        assert!(!matches!(cx, Claim::Absent) && !matches!(cy, Claim::Absent), "m{i} is pending");
    }
}

/// `claim_page` takes the oldest unheld messages up to a seq, in order, with every field.
pub async fn log_claim_page_pages_in_seq_order_with_every_field<H: StoreHarness>(h: H) {
    let s = h.open().await;
    open_consumer(&s, &consumer("c", TOPIC, &[])).await;
    let mut seqs = Vec::new();
    for i in 1..=5 {
        seqs.push(append(&s, TOPIC, &format!("m{i}"), (i == 2).then_some("eu")).await);
    }
    let me = holder("s", "n", 9);
    assert_eq!(s.claim("c", "m3", me).await.unwrap(), Claim::Claimed { redelivered: false, seq: seqs[2] });
    let first = s.claim_page("c", me, 0..=seqs[4], 2).await.unwrap();
    assert_eq!(first.iter().map(|m| m.msg_id.as_str()).collect::<Vec<_>>(), ["m1", "m2"]);
    let m2 = &first[1];
    assert_eq!((m2.seq, m2.filter.as_deref(), m2.publisher.as_str()), (seqs[1], Some("eu"), "alice"));
    assert_eq!((m2.timestamp_ms, &m2.data[..], m2.redelivered), (T0 * 1000 + 7, &b"m2"[..], false));
    assert_eq!(page_ids(&s, "c", me, 10).await, ["m4", "m5"], "m3 is held");
    assert!(page_ids(&s, "c", me, 10).await.is_empty());

    append(&s, TOPIC, "m6", None).await;
    let bounded = s.claim_page("c", me, 0..=seqs[4], 10).await.unwrap();
    assert!(bounded.is_empty(), "m6 is past the range's end");
    append(&s, TOPIC, "m7", None).await;
    append(&s, TOPIC, "m8", None).await;
    let other = holder("s2", "n", 10);
    let m7 = s.claim("c", "m7", other).await.unwrap();
    let Claim::Claimed { seq: m7_seq, .. } = m7 else { panic!("m7 not claimed: {m7:?}") };
    s.release(Release::Conn { node: "n", conn: 10 }).await.unwrap();
    let from_m7 = s.claim_page("c", me, m7_seq..=u64::MAX, 10).await.unwrap();
    assert_eq!(
        from_m7.iter().map(|m| m.msg_id.as_str()).collect::<Vec<_>>(),
        ["m7", "m8"],
        "m6 is before the range's start"
    );
    assert!(
        s.claim_page("c", me, std::ops::RangeInclusive::new(m7_seq, m7_seq - 1), 10).await.unwrap().is_empty(),
        "an empty range claims nothing"
    );
    assert_eq!(page_ids(&s, "c", me, 10).await, ["m6"]);
}

/// `list_consumers` pages the consumers of one id prefix in id order, each with its pending and
/// held counts and the timestamp of its oldest pending message.
pub async fn log_list_consumers_pages_by_prefix_with_backlogs<H: StoreHarness>(h: H) {
    let s = h.open().await;
    for id in ["g/p/app/room/jobs/w2", "g/p/app/room/jobs/w1", "g/p/app/room/jobs/w3", "s/p/app/room/jobs/alice/"] {
        open_consumer(&s, &consumer(id, TOPIC, &[])).await;
    }
    open_consumer(&s, &consumer("g/q/app/room/jobs/w1", "q/app/room/jobs", &[])).await;
    open_consumer(&s, &consumer("g/pp/app/room/jobs/w1", "pp/app/room/jobs", &[])).await;
    append(&s, TOPIC, "m1", None).await;
    append(&s, TOPIC, "m2", None).await;
    append_at(&s, TOPIC, "m3", None, T0 + 5).await;
    assert_eq!(redelivered(s.claim("g/p/app/room/jobs/w1", "m1", holder("s", "n", 1)).await.unwrap()), Some(false));
    assert!(s.ack("g/p/app/room/jobs/w2", "m1").await.unwrap());
    for m in ["m1", "m2", "m3"] {
        assert!(s.ack("g/p/app/room/jobs/w3", m).await.unwrap());
    }

    let first = s.list_consumers("g/p/", "", 2).await.expect("list_consumers");
    let ids: Vec<&str> = first.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["g/p/app/room/jobs/w1", "g/p/app/room/jobs/w2"], "id order, at most the limit");
    let (w1, w2) = (&first[0], &first[1]);
    assert_eq!((w1.pending, w1.held, w1.oldest_timestamp_ms), (3, 1, Some(T0 * 1000 + 7)), "held counts as pending");
    assert_eq!((w2.pending, w2.held, w2.oldest_timestamp_ms), (2, 0, Some(T0 * 1000 + 7)));
    assert_eq!(w1.expires_at_unix_s, T0 + KEEP);

    let rest = s.list_consumers("g/p/", &first[1].id, 2).await.expect("list_consumers");
    assert_eq!(rest.len(), 1, "the next page: {rest:?}");
    assert_eq!((rest[0].id.as_str(), rest[0].pending, rest[0].held), ("g/p/app/room/jobs/w3", 0, 0));
    assert_eq!(rest[0].oldest_timestamp_ms, None, "nothing pending: no oldest message");
    assert!(s.list_consumers("g/p/", &rest[0].id, 2).await.unwrap().is_empty(), "past the last");

    let other = s.list_consumers("g/q/", "", 10).await.unwrap();
    assert_eq!(other.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["g/q/app/room/jobs/w1"]);
    assert_eq!(other[0].pending, 0, "another topic's messages are not pending for it");
    let sessions = s.list_consumers("s/", "", 10).await.unwrap();
    assert_eq!(sessions.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["s/p/app/room/jobs/alice/"]);
    assert!(s.list_consumers("g/x/", "", 10).await.unwrap().is_empty());
    assert!(s.list_consumers("g/p/", "", 0).await.unwrap().is_empty(), "limit 0: nothing");
}

/// `ack` ends a message's pending state for that consumer only.
pub async fn log_ack_ends_pending<H: StoreHarness>(h: H) {
    let s = h.open().await;
    open_consumer(&s, &consumer("c1", TOPIC, &[])).await;
    open_consumer(&s, &consumer("c2", TOPIC, &[])).await;
    append(&s, TOPIC, "m1", None).await;
    append(&s, TOPIC, "m2", None).await;
    assert!(s.ack("c1", "m1").await.unwrap());
    assert!(!s.ack("c1", "m1").await.unwrap(), "a second ack finds nothing");
    assert!(!s.ack("c1", "unknown").await.unwrap());
    assert_eq!(page_ids(&s, "c1", holder("s", "n", 1), 10).await, ["m2"]);
    assert_eq!(backlog(&s, "c2").await, 2, "another consumer's ack changes nothing here");
    assert!(s.ack("c1", "m2").await.unwrap(), "a held message can be acked");
    assert_eq!(s.claim("c1", "m2", holder("s", "n", 1)).await.unwrap(), Claim::Absent);
}

/// `ack_many` ends the pending state of the given `(consumer, msg_id)` pairs that were
/// pending, for those consumers only, and says which they were; more pairs than one statement
/// carries are all acked.
pub async fn log_ack_many_ends_pending_of_those_given<H: StoreHarness>(h: H) {
    let s = h.open().await;
    open_consumer(&s, &consumer("c1", TOPIC, &[])).await;
    open_consumer(&s, &consumer("c2", TOPIC, &[])).await;
    for i in 1..=4 {
        append(&s, TOPIC, &format!("m{i}"), None).await;
    }
    assert_eq!(redelivered(s.claim("c1", "m2", holder("s", "n", 1)).await.unwrap()), Some(false));
    let acked = s
        .ack_many(&[("c1", "m2"), ("c1", "m1"), ("c1", "unknown"), ("c1", "m1"), ("c2", "m3"), ("nobody", "m4")])
        .await
        .expect("ack_many");
    assert_eq!(acked, [true, true, false, false, true, false], "each pending one once, held or not");
    assert_eq!(s.ack_many(&[("c1", "m1"), ("c1", "m2")]).await.unwrap(), [false, false], "a second ack finds nothing");
    assert!(s.ack_many(&[]).await.unwrap().is_empty());
    assert_eq!(page_ids(&s, "c1", holder("s", "n", 1), 10).await, ["m3", "m4"]);
    assert_eq!(page_ids(&s, "c2", holder("s", "n", 1), 10).await, ["m1", "m2", "m4"], "c2 acked m3 only");
    s.release(Release::Conn { node: "n", conn: 1 }).await.unwrap();

    let n = skua_core::MAX_BATCH_IDS + 3;
    let ids: Vec<String> = (0..n).map(|i| format!("big-{i}")).collect();
    for id in &ids {
        append(&s, TOPIC, id, None).await;
    }
    let pairs: Vec<(&str, &str)> = ids.iter().map(|id| ("c2", id.as_str())).collect();
    assert!(s.ack_many(&pairs).await.unwrap().into_iter().all(|a| a));
    assert_eq!(backlog(&s, "c2").await, 3, "m1, m2 and m4 are left");
}

/// Release by connection, by session except the current connection, and by node.
pub async fn log_release_scopes<H: StoreHarness>(h: H) {
    let s = h.open().await;
    open_consumer(&s, &consumer("g", TOPIC, &[])).await;
    for i in 1..=4 {
        append(&s, TOPIC, &format!("m{i}"), None).await;
    }
    let old = holder("s1", "n1", 1);
    let other = holder("s2", "n1", 2);
    let new = holder("s1", "n2", 3);
    let far = holder("s3", "n3", 1);
    for (m, h) in [("m1", old), ("m2", other), ("m3", new), ("m4", far)] {
        assert_eq!(redelivered(s.claim("g", m, h).await.unwrap()), Some(false));
    }
    assert_eq!(s.release(Release::SessionExcept(new)).await.unwrap(), ["g"]);
    assert_eq!(page_ids(&s, "g", far, 10).await, ["m1"], "only the session's other connection");
    assert_eq!(s.release(Release::Node("n1")).await.unwrap(), ["g"]);
    assert_eq!(page_ids(&s, "g", far, 10).await, ["m2"]);
    assert!(s.release(Release::Node("n9")).await.unwrap().is_empty());
    let c = Release::ConnConsumer { node: "n3", conn: 1, consumer: "other" };
    assert!(s.release(c).await.unwrap().is_empty(), "another consumer's hold only");
    assert_eq!(s.release(Release::ConnConsumer { node: "n3", conn: 1, consumer: "g" }).await.unwrap(), ["g"]);
    assert_eq!(redelivered(s.claim("g", "m4", far).await.unwrap()), Some(true));
    assert_eq!(s.release(Release::Conn { node: "n3", conn: 1 }).await.unwrap(), ["g"]);
    let again = s.claim_page("g", new, 0..=u64::MAX, 10).await.unwrap();
    assert_eq!(
        again.iter().map(|m| (m.msg_id.as_str(), m.redelivered)).collect::<Vec<_>>(),
        [("m1", true), ("m2", true), ("m4", true)]
    );
}

/// A consumer stops collecting once its time runs out, unless touched; pruning deletes it.
pub async fn log_consumer_expires_unless_touched<H: StoreHarness>(h: H) {
    let s = h.open().await;
    s.open_consumer(&consumer("short", TOPIC, &[]), T0, 60).await.unwrap();
    s.open_consumer(&consumer("touched", TOPIC, &[]), T0, 60).await.unwrap();
    s.touch_consumers(&["touched", "unknown"], T0 + 50, 60).await.unwrap();
    append_at(&s, TOPIC, "m1", None, T0 + 61).await;
    assert_eq!(backlog(&s, "short").await, 0, "expired consumers collect nothing");
    assert_eq!(backlog(&s, "touched").await, 1);
    let keep = Retention { max_age_s: 1_000_000, max_per_topic: 1_000, min_interval_s: 0, batch: 1_000 };
    s.prune_log(T0 + 200, keep).await.unwrap();
    assert_eq!(backlog(&s, "touched").await, 0, "pruned with its consumer");
    s.open_consumer(&consumer("touched", TOPIC, &[]), T0 + 200, 60).await.unwrap();
    assert_eq!(backlog(&s, "touched").await, 0, "a reopened consumer starts empty");
}

/// Pruning deletes messages older than the age and beyond the per-topic cap, oldest first;
/// their pending entries go with them.
pub async fn log_prune_by_age_and_per_topic_cap<H: StoreHarness>(h: H) {
    let s = h.open().await;
    s.open_consumer(&consumer("c", TOPIC, &[]), T0, 1_000_000).await.unwrap();
    s.open_consumer(&consumer("o", "p/app/room/other", &[]), T0, 1_000_000).await.unwrap();
    for i in 1..=5 {
        append_at(&s, TOPIC, &format!("m{i}"), None, T0 + i).await;
    }
    append_at(&s, "p/app/room/other", "o1", None, T0).await;
    let cap = Retention { max_age_s: 1_000_000, max_per_topic: 3, min_interval_s: 0, batch: 1_000 };
    assert_eq!(s.prune_log(T0 + 10, cap).await.unwrap(), 2);
    assert_eq!(page_ids(&s, "c", holder("s", "n", 1), 10).await, ["m3", "m4", "m5"]);
    assert_eq!(backlog(&s, "o").await, 1, "other topics keep theirs");
    let age = Retention { max_age_s: 100, max_per_topic: 1_000, min_interval_s: 0, batch: 1_000 };
    assert_eq!(s.prune_log(T0 + 104, age).await.unwrap(), 2, "o1 (T0) and m3 (T0+3) are older than 100 s");
    assert_eq!(backlog(&s, "o").await, 0);
    assert_eq!(s.claim("c", "m5", holder("s", "n", 2)).await.unwrap(), Claim::Held, "m5 is kept");
}

/// Pruning with a batch smaller than what is past retention repeats until all of it is gone
/// (issue 23, item 8).
pub async fn log_prune_in_batches_deletes_everything_past_retention<H: StoreHarness>(h: H) {
    let s = h.open().await;
    s.open_consumer(&consumer("c", TOPIC, &[]), T0, 1_000_000).await.unwrap();
    s.open_consumer(&consumer("o", "p/app/room/other", &[]), T0, 1_000_000).await.unwrap();
    for i in 1..=7 {
        append_at(&s, "p/app/room/other", &format!("old{i}"), None, T0).await;
    }
    for i in 1..=6 {
        append_at(&s, TOPIC, &format!("m{i}"), None, T0 + 500 + i).await;
    }
    let r = Retention { max_age_s: 100, max_per_topic: 2, min_interval_s: 0, batch: 2 };
    assert_eq!(s.prune_log(T0 + 510, r).await.unwrap(), 7 + 4, "7 past the age, 4 past the cap, 2 per statement");
    assert_eq!(backlog(&s, "o").await, 0);
    assert_eq!(page_ids(&s, "c", holder("s", "n", 1), 10).await, ["m5", "m6"]);
    assert_eq!(s.prune_log(T0 + 511, r).await.unwrap(), 0, "nothing left");
}

/// A topic that goes over its cap after a prune is trimmed by the next one.
pub async fn log_prune_caps_a_topic_that_grows_after_a_prune<H: StoreHarness>(h: H) {
    let s = h.open().await;
    s.open_consumer(&consumer("c", TOPIC, &[]), T0, 1_000_000).await.unwrap();
    let r = Retention { max_age_s: 1_000_000, max_per_topic: 3, min_interval_s: 0, batch: 1_000 };
    for i in 1..=3 {
        append_at(&s, TOPIC, &format!("m{i}"), None, T0 + i).await;
    }
    assert_eq!(s.prune_log(T0 + 10, r).await.unwrap(), 0, "at the cap, not over it");
    for i in 4..=5 {
        append_at(&s, TOPIC, &format!("m{i}"), None, T0 + i).await;
    }
    assert_eq!(s.prune_log(T0 + 20, r).await.unwrap(), 2);
    assert_eq!(page_ids(&s, "c", holder("s", "n", 1), 10).await, ["m3", "m4", "m5"]);
}

/// Re-opening a consumer replaces its filters.
pub async fn log_open_consumer_replaces_filters<H: StoreHarness>(h: H) {
    let s = h.open().await;
    open_consumer(&s, &consumer("c", TOPIC, &["eu"])).await;
    open_consumer(&s, &consumer("c", TOPIC, &["us"])).await;
    append(&s, TOPIC, "m-eu", Some("eu")).await;
    append(&s, TOPIC, "m-us", Some("us")).await;
    open_consumer(&s, &consumer("c", TOPIC, &[])).await;
    append(&s, TOPIC, "m-all", None).await;
    assert_eq!(page_ids(&s, "c", holder("s", "n", 1), 10).await, ["m-us", "m-all"]);
}

/// Two handles paging one consumer at once never get the same message.
pub async fn log_concurrent_pages_hand_each_message_once<H: StoreHarness>(h: H) {
    let (a, b) = (h.open().await, h.open().await);
    open_consumer(&a, &consumer("g", TOPIC, &[])).await;
    for i in 0..60 {
        append(&a, TOPIC, &format!("m{i:02}"), None).await;
    }
    let take = |s: Arc<dyn Store>, node: &'static str| async move {
        let mut got = Vec::new();
        loop {
            let page = page_ids(&s, "g", holder(node, node, 1), 7).await;
            if page.is_empty() {
                return got;
            }
            got.extend(page);
        }
    };
    let (x, y) = tokio::join!(take(a, "n1"), take(b, "n2"));
    let mut all: Vec<String> = x.iter().chain(&y).cloned().collect();
    all.sort();
    let want: Vec<String> = (0..60).map(|i| format!("m{i:02}")).collect();
    assert_eq!(all, want, "every message exactly once (n1 got {}, n2 got {})", x.len(), y.len());
}

/// Dropping a consumer forgets what was pending for it.
pub async fn log_drop_consumer_forgets_its_pending<H: StoreHarness>(h: H) {
    let s = h.open().await;
    open_consumer(&s, &consumer("c", TOPIC, &[])).await;
    append(&s, TOPIC, "m1", None).await;
    s.drop_consumer("c").await.unwrap();
    s.drop_consumer("c").await.unwrap();
    assert_eq!(backlog(&s, "c").await, 0);
    append(&s, TOPIC, "m2", None).await;
    assert_eq!(backlog(&s, "c").await, 0, "a dropped consumer collects nothing");
}

/// A consumer does not collect what its own actor publishes (N16).
pub async fn log_an_actor_s_own_messages_are_not_kept_for_it<H: StoreHarness>(h: H) {
    let s = h.open().await;
    open_consumer(&s, &consumer("c", TOPIC, &[])).await;
    let own = NewMessage {
        msg_id: "own",
        topic: TOPIC,
        filter: None,
        publisher: "worker",
        stream: 0,
        timestamp_ms: 1,
        qos: 0,
        data: b"",
        trigger: None,
    };
    s.append(&own, T0).await.unwrap();
    append(&s, TOPIC, "theirs", None).await;
    assert_eq!(page_ids(&s, "c", holder("s", "n", 1), 10).await, ["theirs"]);
}
