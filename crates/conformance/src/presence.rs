//! The [`Presence`] suite: every guarantee of the trait's contract, as test bodies.
//!
//! A harness opens handles onto one presence backend, as separate nodes would; an external
//! backend isolates each harness under a unique key prefix. Rooms and actors are fixed per case.
//!
//! Time: the node-liveness cases (contracts 7 and 8) pass `now_unix_s` themselves, starting at
//! [`T0`], and let registrations lapse through [`PresenceHarness::wait_past`]. A backend that
//! compares the `now_unix_s` it is given (memory) fakes that wait; one with its own clock (Redis
//! key expiry) really waits, so those cases use a short [`TTL_S`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use skua_core::{ActorId, AppId, ConnId, ConnRef, NodeId, Presence, PresenceChange, PresenceEntry, ProjectId, RoomKey};
use tokio::task::JoinSet;

use super::within;

/// Opens handles onto the presence backend under test.
pub trait PresenceHarness {
    /// A handle onto the harness's one backend, as another node would open it: entries written
    /// through one handle are visible through every other.
    fn open(&self) -> impl Future<Output = Arc<dyn Presence>>;

    /// Lets node registrations made at `now_unix_s` with a ttl of `ttl_s` lapse, and returns the
    /// time for the case to pass as `now_unix_s` from then on (at least `now_unix_s + ttl_s`).
    ///
    /// The default really waits `ttl_s` plus [`LAPSE_MARGIN`], for backends that expire
    /// registrations on their own clock: the lapse is a deadline that must pass, not an event
    /// to poll for. A backend that only compares the given `now_unix_s` returns
    /// `now_unix_s + ttl_s` at once.
    fn wait_past(&self, now_unix_s: u64, ttl_s: u64) -> impl Future<Output = u64> {
        async move {
            tokio::time::sleep(Duration::from_secs(ttl_s) + LAPSE_MARGIN).await;
            now_unix_s + ttl_s
        }
    }
}

/// An instant for the liveness cases to start at: unix seconds, 2023-11-14.
pub const T0: u64 = 1_700_000_000;

/// The short node ttl of the liveness cases, in seconds: what a really waiting
/// [`PresenceHarness::wait_past`] waits for. The steps a case takes "within the ttl" (a few
/// backend round trips) must finish inside it: three seconds leaves a loaded machine room,
/// where one second did not.
pub const TTL_S: u64 = 3;

/// A node ttl no case outlives, in seconds.
pub const LONG_TTL_S: u64 = 60;

/// How much longer than the ttl the default [`PresenceHarness::wait_past`] waits: covers the
/// time between the case's call and the backend's clock reading.
pub const LAPSE_MARGIN: Duration = Duration::from_millis(200);

/// Generates one `#[tokio::test]` per case of the [`Presence`] suite.
///
/// `presence_conformance!(harness_expr)` evaluates `harness_expr` (a [`PresenceHarness`]) once
/// per test; `presence_conformance!(setup = future)` awaits `future: impl Future<Output =
/// Option<H>>` once per test and skips the test on `None`.
#[macro_export]
macro_rules! presence_conformance {
    (setup = $setup:expr $(,)?) => {
        $crate::presence_conformance!(@cases setup, $setup);
    };
    (@cases $how:ident, $harness:expr) => {
        $crate::__conformance_tests!(presence, $how, $harness;
            first_announce_joins_and_later_ones_update,
            another_connection_of_the_actor_is_an_update,
            remove_is_true_only_for_the_last_connection,
            remove_of_an_unknown_connection_keeps_the_entry,
            joined_at_is_kept_from_the_first_announce,
            list_returns_every_entry_of_the_room,
            remove_node_returns_the_entries_that_disappeared,
            rooms_are_independent,
            concurrent_announces_join_once_and_one_remove_is_last,
            refresh_node_is_true_only_without_a_live_registration,
            node_last_seen_is_the_time_of_the_last_refresh,
            lapsed_registration_is_listed_and_refresh_is_true_again,
            remove_node_forgets_the_registration,
            concurrent_remove_node_returns_each_entry_to_exactly_one_caller,
        );
    };
    ($harness:expr $(,)?) => {
        $crate::presence_conformance!(@cases make, $harness);
    };
}

// ----------------------------------------------------------------------------------------------
// Cases.

/// Contracts 1 and 2: the first announce of an actor joins; later ones update the data and
/// keep `joined_at`.
pub async fn first_announce_joins_and_later_ones_update<H: PresenceHarness>(h: H) {
    let p = h.open().await;
    let (r, alice, c1) = (room("room-1"), actor("alice"), conn("n1", 1));

    assert_eq!(announce(&p, &r, &alice, &c1, "v1", 100).await, PresenceChange::Join);
    assert_eq!(list(&p, &r).await, [entry(&alice, "v1", 100)]);
    assert_eq!(announce(&p, &r, &alice, &c1, "v2", 150).await, PresenceChange::Update);
    assert_eq!(list(&p, &r).await, [entry(&alice, "v2", 100)], "data is the latest announce's");
}

/// Contract 1: all connections of an actor share one entry, across nodes; a connection is
/// (node, conn), so one `ConnId` on two nodes is two connections.
pub async fn another_connection_of_the_actor_is_an_update<H: PresenceHarness>(h: H) {
    let (p1, p2) = (h.open().await, h.open().await);
    let (r, alice) = (room("room-1"), actor("alice"));

    assert_eq!(announce(&p1, &r, &alice, &conn("n1", 1), "first", 100).await, PresenceChange::Join);
    assert_eq!(announce(&p1, &r, &alice, &conn("n1", 2), "second", 110).await, PresenceChange::Update);
    assert_eq!(announce(&p2, &r, &alice, &conn("n2", 1), "third", 120).await, PresenceChange::Update);
    assert_eq!(list(&p1, &r).await, [entry(&alice, "third", 100)]);
    assert_eq!(list(&p2, &r).await, [entry(&alice, "third", 100)]);

    assert!(!remove(&p2, &r, &alice, &conn("n2", 1)).await, "n1's connections are still there");
    assert!(!remove(&p1, &r, &alice, &conn("n1", 1)).await, "n1/c2 is still there");
    assert!(remove(&p1, &r, &alice, &conn("n1", 2)).await);
}

/// Contract 3: `remove` is `true` only for the actor's last connection, which deletes the entry.
pub async fn remove_is_true_only_for_the_last_connection<H: PresenceHarness>(h: H) {
    let p = h.open().await;
    let (r, alice, c1, c2) = (room("room-1"), actor("alice"), conn("n1", 1), conn("n1", 2));
    announce(&p, &r, &alice, &c1, "a", 100).await;
    announce(&p, &r, &alice, &c2, "b", 100).await;

    assert!(!remove(&p, &r, &alice, &c1).await);
    assert_eq!(list(&p, &r).await, [entry(&alice, "b", 100)]);
    assert!(remove(&p, &r, &alice, &c2).await);
    assert_eq!(list(&p, &r).await, []);
    assert!(!remove(&p, &r, &alice, &c2).await, "nothing left to remove");
    assert!(!remove(&p, &r, &actor("nobody"), &c1).await, "an actor never announced");
}

/// Contract 3: removing a connection the entry does not hold removes nothing.
pub async fn remove_of_an_unknown_connection_keeps_the_entry<H: PresenceHarness>(h: H) {
    let p = h.open().await;
    let (r, alice, c1) = (room("room-1"), actor("alice"), conn("n1", 1));
    announce(&p, &r, &alice, &c1, "a", 100).await;

    assert!(!remove(&p, &r, &alice, &conn("n1", 9)).await);
    assert!(!remove(&p, &r, &alice, &conn("n2", 1)).await);
    assert!(!remove(&p, &room("room-2"), &alice, &c1).await, "alice is not in room-2");
    assert_eq!(list(&p, &r).await, [entry(&alice, "a", 100)]);
    assert!(remove(&p, &r, &alice, &c1).await);
}

/// Contract 2: `joined_at` comes from the first announce and survives updates from any
/// connection; once the entry is gone, the next announce joins afresh.
pub async fn joined_at_is_kept_from_the_first_announce<H: PresenceHarness>(h: H) {
    let p = h.open().await;
    let (r, alice, c1, c2) = (room("room-1"), actor("alice"), conn("n1", 1), conn("n1", 2));
    announce(&p, &r, &alice, &c1, "a", 100).await;
    announce(&p, &r, &alice, &c2, "b", 200).await;
    announce(&p, &r, &alice, &c1, "c", 300).await;
    assert_eq!(list(&p, &r).await, [entry(&alice, "c", 100)]);

    remove(&p, &r, &alice, &c1).await;
    remove(&p, &r, &alice, &c2).await;
    assert_eq!(announce(&p, &r, &alice, &c1, "d", 400).await, PresenceChange::Join);
    assert_eq!(list(&p, &r).await, [entry(&alice, "d", 400)]);
}

/// Contract 4: `list` returns every entry of the room (order is not part of the contract).
pub async fn list_returns_every_entry_of_the_room<H: PresenceHarness>(h: H) {
    let p = h.open().await;
    let r = room("room-1");
    assert_eq!(list(&p, &r).await, [], "an empty room");

    announce(&p, &r, &actor("carol"), &conn("n2", 1), "c", 30).await;
    announce(&p, &r, &actor("alice"), &conn("n1", 1), "a", 10).await;
    announce(&p, &r, &actor("bob"), &conn("n1", 2), "b", 20).await;
    announce(&p, &room("room-2"), &actor("dave"), &conn("n1", 3), "d", 40).await;
    assert_eq!(
        list(&p, &r).await,
        [entry(&actor("alice"), "a", 10), entry(&actor("bob"), "b", 20), entry(&actor("carol"), "c", 30)]
    );
}

/// Contract 5: `remove_node` removes every connection of the node and returns exactly the
/// (room, actor) entries that disappeared; entries still held by other nodes stay.
pub async fn remove_node_returns_the_entries_that_disappeared<H: PresenceHarness>(h: H) {
    let (dying, survivor) = (h.open().await, h.open().await);
    let (r1, r2) = (room("room-1"), room("room-2"));
    let (alice, bob, carol) = (actor("alice"), actor("bob"), actor("carol"));
    announce(&dying, &r1, &alice, &conn("n1", 1), "a", 10).await;
    announce(&dying, &r2, &alice, &conn("n1", 1), "a", 10).await;
    announce(&dying, &r1, &alice, &conn("n1", 2), "a", 10).await;
    announce(&dying, &r1, &bob, &conn("n1", 3), "b", 20).await;
    announce(&survivor, &r1, &bob, &conn("n2", 1), "b2", 25).await;
    announce(&survivor, &r1, &carol, &conn("n2", 2), "c", 30).await;

    let mut gone =
        within("remove_node", survivor.remove_node(&node("n1"))).await.unwrap_or_else(|e| panic!("remove_node: {e}"));
    gone.sort();
    assert_eq!(gone, [(r1.clone(), alice.clone()), (r2.clone(), alice.clone())]);
    assert_eq!(list(&survivor, &r1).await, [entry(&bob, "b2", 20), entry(&carol, "c", 30)]);
    assert_eq!(list(&survivor, &r2).await, []);

    assert!(remove(&survivor, &r1, &bob, &conn("n2", 1)).await, "n1's connection of bob went with n1");
    let none =
        within("remove_node", survivor.remove_node(&node("n9"))).await.unwrap_or_else(|e| panic!("remove_node: {e}"));
    assert_eq!(none, [], "an unknown node holds nothing");
    assert_eq!(list(&survivor, &r1).await, [entry(&carol, "c", 30)]);
}

/// Contract 1: entries are per room; one actor in two rooms has two independent entries.
pub async fn rooms_are_independent<H: PresenceHarness>(h: H) {
    let p = h.open().await;
    let (r1, r2, alice, c1) = (room("room-1"), room("room-2"), actor("alice"), conn("n1", 1));
    assert_eq!(announce(&p, &r1, &alice, &c1, "one", 10).await, PresenceChange::Join);
    assert_eq!(announce(&p, &r2, &alice, &c1, "two", 20).await, PresenceChange::Join);

    assert!(remove(&p, &r1, &alice, &c1).await);
    assert_eq!(list(&p, &r1).await, []);
    assert_eq!(list(&p, &r2).await, [entry(&alice, "two", 20)]);

    // The same room slug in another app is another room.
    let other_app = RoomKey { app: AppId::parse("app-2").unwrap_or_else(|e| panic!("{e}")), ..r2.clone() };
    assert_eq!(announce(&p, &other_app, &alice, &c1, "three", 30).await, PresenceChange::Join);
    assert_eq!(list(&p, &r2).await, [entry(&alice, "two", 20)]);
}

/// Contract 6: concurrent operations on one (room, actor), through two handles, are atomic:
/// of 16 concurrent first announces exactly one joins, and of 16 concurrent removes exactly one
/// removes the last connection.
pub async fn concurrent_announces_join_once_and_one_remove_is_last<H: PresenceHarness>(h: H) {
    const N: u64 = 16;
    let handles = [h.open().await, h.open().await];
    let (r, alice) = (room("room-1"), actor("alice"));
    let conns: Vec<(Arc<dyn Presence>, ConnRef)> =
        (0..N).map(|i| (handles[(i % 2) as usize].clone(), conn(if i % 2 == 0 { "n1" } else { "n2" }, i))).collect();

    let mut tasks = JoinSet::new();
    for (p, c) in conns.clone() {
        let (r, alice) = (r.clone(), alice.clone());
        tasks.spawn(async move { p.announce(&r, &alice, &c, Bytes::from_static(b"x"), 100).await });
    }
    let mut joins = 0;
    while let Some(done) = within("concurrent announces", tasks.join_next()).await {
        let change = done.unwrap_or_else(|e| panic!("announce task: {e}")).unwrap_or_else(|e| panic!("announce: {e}"));
        joins += usize::from(change == PresenceChange::Join);
    }
    assert_eq!(joins, 1, "exactly one concurrent announce is the join");
    assert_eq!(list(&handles[0], &r).await, [entry(&alice, "x", 100)]);

    let mut tasks = JoinSet::new();
    for (p, c) in conns {
        let (r, alice) = (r.clone(), alice.clone());
        tasks.spawn(async move { p.remove(&r, &alice, &c).await });
    }
    let mut lasts = 0;
    while let Some(done) = within("concurrent removes", tasks.join_next()).await {
        let last = done.unwrap_or_else(|e| panic!("remove task: {e}")).unwrap_or_else(|e| panic!("remove: {e}"));
        lasts += usize::from(last);
    }
    assert_eq!(lasts, 1, "exactly one concurrent remove is the last");
    assert_eq!(list(&handles[1], &r).await, []);
}

/// Contract 7: `refresh_node` is `true` for a node with no registration and `false` while its
/// registration is live, through any handle; live registrations are not listed as expired.
pub async fn refresh_node_is_true_only_without_a_live_registration<H: PresenceHarness>(h: H) {
    let (p1, p2) = (h.open().await, h.open().await);
    let (n1, n2) = (node("n1"), node("n2"));
    assert_eq!(expired(&p1, T0).await, [], "nothing registered yet");

    assert!(refresh(&p1, &n1, T0, TTL_S).await, "the first refresh finds no registration");
    assert!(!refresh(&p1, &n1, T0, TTL_S).await, "a second refresh within the ttl finds it live");
    assert!(!refresh(&p2, &n1, T0, TTL_S).await, "the registration is seen through every handle");
    assert!(refresh_with_bus(&p2, &n2, T0, TTL_S, false).await, "each node has its own registration");
    assert_eq!(expired(&p1, T0).await, [], "live registrations are not expired");
    assert_eq!(expired(&p2, T0).await, []);

    // Contract 9: both listed through any handle, live, with their last refresh, version and
    // bus link (n2's is down).
    let seen = nodes(&p2, T0).await;
    assert_eq!(seen.iter().map(|n| n.node.clone()).collect::<Vec<_>>(), [n1.clone(), n2.clone()]);
    for n in &seen {
        assert!(n.alive, "{n:?}");
        assert_eq!(n.last_seen_unix_ms, Some(T0 * 1000), "{n:?}");
        assert_eq!(n.version.as_deref(), Some(env!("CARGO_PKG_VERSION")), "{n:?}");
        assert_eq!(n.bus_up, Some(n.node == n1), "{n:?}");
    }
    // The next refresh says the link is back.
    assert!(!refresh(&p1, &n2, T0, TTL_S).await);
    assert!(nodes(&p1, T0).await.iter().all(|n| n.bus_up == Some(true)));
}

/// `node_last_seen` is the `now_unix_s` of the node's last refresh (in ms), through any handle,
/// and still known once the registration lapsed; `None` for a node never registered.
pub async fn node_last_seen_is_the_time_of_the_last_refresh<H: PresenceHarness>(h: H) {
    let (p, observer) = (h.open().await, h.open().await);
    let (n1, n2) = (node("n1"), node("n2"));
    assert_eq!(last_seen(&observer, &n1).await, None, "never registered");
    assert!(refresh(&p, &n1, T0, TTL_S).await);
    assert_eq!(last_seen(&observer, &n1).await, Some(T0 * 1000));
    assert!(!refresh(&p, &n1, T0 + 2, TTL_S).await);
    assert_eq!(last_seen(&observer, &n1).await, Some((T0 + 2) * 1000), "the last refresh counts");
    assert_eq!(last_seen(&observer, &n2).await, None, "each node has its own");
    let t1 = h.wait_past(T0 + 2, TTL_S).await;
    assert_eq!(expired(&observer, t1).await, [node("n1")]);
    assert_eq!(last_seen(&observer, &n1).await, Some((T0 + 2) * 1000), "a lapsed node's last refresh is kept");
}

/// Contract 7: once its ttl lapses a registration is listed by `expired_nodes` and
/// `refresh_node` is `true` again; a node refreshed in time (here for longer) is not listed.
pub async fn lapsed_registration_is_listed_and_refresh_is_true_again<H: PresenceHarness>(h: H) {
    let (p, observer) = (h.open().await, h.open().await);
    let (n1, n2) = (node("n1"), node("n2"));
    assert!(refresh(&p, &n1, T0, TTL_S).await);
    assert!(refresh(&p, &n2, T0, TTL_S).await);
    assert!(!refresh(&p, &n2, T0, LONG_TTL_S).await, "n2 refreshed in time, for longer");

    let t1 = h.wait_past(T0, TTL_S).await;
    assert_eq!(expired(&observer, t1).await, [node("n1")], "n1 lapsed, n2 did not");
    assert_eq!(expired(&observer, t1).await, [node("n1")], "listing does not forget the node");
    let seen = nodes(&observer, t1).await;
    assert_eq!(
        seen.iter().map(|n| (n.node.clone(), n.alive)).collect::<Vec<_>>(),
        [(n1.clone(), false), (n2.clone(), true)]
    );
    assert_eq!(seen[1].last_seen_unix_ms, Some(T0 * 1000), "n2's last refresh");
    assert!(refresh(&p, &n1, t1, LONG_TTL_S).await, "a lapsed registration counts as none");
    assert_eq!(expired(&observer, t1).await, [], "refreshed again: no longer expired");
    assert!(!refresh(&p, &n2, t1, LONG_TTL_S).await, "n2's registration is still live");
}

/// Contract 8: `remove_node` forgets the node's registration, lapsed or live: the node is no
/// longer listed, and its next `refresh_node` is a first one.
pub async fn remove_node_forgets_the_registration<H: PresenceHarness>(h: H) {
    let (dying, survivor) = (h.open().await, h.open().await);
    let (n1, n2, r, alice) = (node("n1"), node("n2"), room("room-1"), actor("alice"));
    assert!(refresh(&dying, &n1, T0, TTL_S).await);
    assert!(refresh(&survivor, &n2, T0, LONG_TTL_S).await);
    announce(&dying, &r, &alice, &conn("n1", 1), "a", T0).await;

    let t1 = h.wait_past(T0, TTL_S).await;
    assert_eq!(expired(&survivor, t1).await, [node("n1")]);
    assert_eq!(remove_node(&survivor, &n1).await, [(r.clone(), alice.clone())]);
    assert_eq!(expired(&survivor, t1).await, [], "a removed node is no longer listed");
    assert_eq!(remove_node(&survivor, &n1).await, [], "removing it again finds nothing");
    assert_eq!(list(&survivor, &r).await, []);

    assert_eq!(remove_node(&survivor, &n2).await, [], "n2 held nothing");
    assert!(refresh(&survivor, &n2, t1, LONG_TTL_S).await, "n2's live registration was forgotten");
    assert!(refresh(&dying, &n1, t1, LONG_TTL_S).await, "n1 comes back: a first refresh");
    assert_eq!(expired(&survivor, t1).await, []);
}

/// Contract 8: of concurrent `remove_node` calls for one node, from several handles, each
/// disappeared entry is returned to exactly one caller; entries other nodes hold stay.
pub async fn concurrent_remove_node_returns_each_entry_to_exactly_one_caller<H: PresenceHarness>(h: H) {
    const CALLERS: usize = 8;
    let mut handles = Vec::new();
    for _ in 0..4 {
        handles.push(h.open().await);
    }
    let (dying, n1) = (handles[0].clone(), node("n1"));
    assert!(refresh(&dying, &n1, T0, LONG_TTL_S).await);

    // Actor i holds 1 or 2 connections on n1 in each room; every third actor is on n2 too.
    let (mut gone_expected, mut kept) = (Vec::new(), Vec::new());
    for r in ["room-1", "room-2", "room-3"].map(room) {
        for i in 0..6_u64 {
            let a = actor(&format!("actor-{i}"));
            announce(&dying, &r, &a, &conn("n1", i * 10), "x", T0).await;
            if i % 2 == 1 {
                announce(&dying, &r, &a, &conn("n1", i * 10 + 1), "x", T0).await;
            }
            if i % 3 == 0 {
                announce(&handles[1], &r, &a, &conn("n2", i), "x", T0).await;
                kept.push((r.clone(), a));
            } else {
                gone_expected.push((r.clone(), a));
            }
        }
    }

    let mut tasks = JoinSet::new();
    for i in 0..CALLERS {
        let (p, n1) = (handles[i % handles.len()].clone(), n1.clone());
        tasks.spawn(async move { p.remove_node(&n1).await });
    }
    let mut gone = Vec::new();
    while let Some(done) = within("concurrent remove_node", tasks.join_next()).await {
        gone.extend(
            done.unwrap_or_else(|e| panic!("remove_node task: {e}")).unwrap_or_else(|e| panic!("remove_node: {e}")),
        );
    }
    gone.sort();
    gone_expected.sort();
    assert_eq!(gone, gone_expected, "every disappeared entry, each returned once over all callers");

    for r in ["room-1", "room-2", "room-3"].map(room) {
        let in_room: Vec<PresenceEntry> =
            kept.iter().filter(|(kr, _)| *kr == r).map(|(_, a)| entry(a, "x", T0)).collect();
        assert_eq!(list(&handles[3], &r).await, in_room, "n2's entries stay");
    }
    assert!(refresh(&handles[2], &n1, T0, LONG_TTL_S).await, "the registration went with the node");
}

// ----------------------------------------------------------------------------------------------
// Helpers.

async fn refresh(p: &Arc<dyn Presence>, n: &NodeId, now: u64, ttl_s: u64) -> bool {
    refresh_with_bus(p, n, now, ttl_s, true).await
}

async fn refresh_with_bus(p: &Arc<dyn Presence>, n: &NodeId, now: u64, ttl_s: u64, bus_up: bool) -> bool {
    within(format_args!("refresh_node of {n}"), p.refresh_node(n, now, ttl_s, bus_up))
        .await
        .unwrap_or_else(|e| panic!("refresh_node of {n}: {e}"))
}

async fn last_seen(p: &Arc<dyn Presence>, n: &NodeId) -> Option<u64> {
    within(format_args!("node_last_seen of {n}"), p.node_last_seen(n))
        .await
        .unwrap_or_else(|e| panic!("node_last_seen of {n}: {e}"))
}

/// Every registered node, sorted by id.
async fn nodes(p: &Arc<dyn Presence>, now: u64) -> Vec<skua_core::NodeSeen> {
    let mut seen = within("nodes", p.nodes(now)).await.unwrap_or_else(|e| panic!("nodes: {e}"));
    seen.sort_by(|a, b| a.node.cmp(&b.node));
    seen
}

/// The expired nodes, sorted.
async fn expired(p: &Arc<dyn Presence>, now: u64) -> Vec<NodeId> {
    let mut nodes =
        within("expired_nodes", p.expired_nodes(now)).await.unwrap_or_else(|e| panic!("expired_nodes: {e}"));
    nodes.sort();
    nodes
}

/// The entries that disappeared with `n`, sorted.
async fn remove_node(p: &Arc<dyn Presence>, n: &NodeId) -> Vec<(RoomKey, ActorId)> {
    let mut gone = within(format_args!("remove_node of {n}"), p.remove_node(n))
        .await
        .unwrap_or_else(|e| panic!("remove_node of {n}: {e}"));
    gone.sort();
    gone
}

async fn announce(
    p: &Arc<dyn Presence>,
    r: &RoomKey,
    a: &ActorId,
    c: &ConnRef,
    data: &str,
    now: u64,
) -> PresenceChange {
    within(format_args!("announce of {a} in {r:?}"), p.announce(r, a, c, Bytes::from(data.to_owned()), now))
        .await
        .unwrap_or_else(|e| panic!("announce of {a} in {r:?}: {e}"))
}

async fn remove(p: &Arc<dyn Presence>, r: &RoomKey, a: &ActorId, c: &ConnRef) -> bool {
    within(format_args!("remove of {a} in {r:?}"), p.remove(r, a, c))
        .await
        .unwrap_or_else(|e| panic!("remove of {a} in {r:?}: {e}"))
}

/// The room's entries, sorted by actor.
async fn list(p: &Arc<dyn Presence>, r: &RoomKey) -> Vec<PresenceEntry> {
    let mut entries =
        within(format_args!("list of {r:?}"), p.list(r)).await.unwrap_or_else(|e| panic!("list of {r:?}: {e}"));
    entries.sort_by(|x, y| x.actor.cmp(&y.actor));
    entries
}

fn entry(a: &ActorId, data: &str, joined_at: u64) -> PresenceEntry {
    PresenceEntry { actor: a.clone(), data: Bytes::from(data.to_owned()), joined_at }
}

fn room(name: &str) -> RoomKey {
    RoomKey {
        project: ProjectId::parse("proj").unwrap_or_else(|e| panic!("test project: {e}")),
        app: AppId::parse("app").unwrap_or_else(|e| panic!("test app: {e}")),
        room: Arc::from(name),
    }
}

fn actor(name: &str) -> ActorId {
    ActorId::parse(name).unwrap_or_else(|e| panic!("test actor: {e}"))
}

fn node(name: &str) -> NodeId {
    NodeId::parse(name).unwrap_or_else(|e| panic!("test node: {e}"))
}

fn conn(node_name: &str, n: u64) -> ConnRef {
    ConnRef { node: node(node_name), conn: ConnId(n) }
}
