//! Restoring subscriptions with `reconnect:true` (N22, N23, N36).

use std::time::Duration;

use rmpv::Value;
use skua_testkit::postgres::TestDatabase;
use skua_testkit::{Event, Frame, TestServer, WsClient, frame};

async fn auth_with(server: &TestServer, token: &str, reconnect: bool, client_id: Option<&str>) -> (WsClient, Frame) {
    let mut c = server.connect().await;
    let reply = c.auth_session(token, client_id, reconnect).await;
    (c, reply)
}

fn restored(reply: &Frame) -> Vec<Value> {
    reply.get("restoredSubscriptions").as_array().expect("restoredSubscriptions is a list").clone()
}

/// The restored patterns, sorted.
fn patterns(reply: &Frame) -> Vec<String> {
    let mut p: Vec<String> = restored(reply).iter().filter_map(|e| e["pattern"].as_str().map(str::to_owned)).collect();
    p.sort();
    p
}

/// A node that restores each connection's own record only (`restore_merge_window` 0s): these
/// tests close and reconnect tabs within the same second, which the default window would treat
/// as tabs that dropped together and give the union of their subscriptions (issue 31; tested
/// by `two_tabs_that_drop_together_each_get_the_union`).
pub(crate) fn one_record_each() -> skua_testkit::server::TestServerBuilder {
    TestServer::builder().settings(|s| s.edge.restore_merge_window = Some("0s".into()))
}

/// Issue 31, defect 5: two tabs that drop at the same moment cannot be told apart on reconnect,
/// so each gets the union of their plain subscriptions, whichever order they come back in; a
/// tab reconnecting after the window gets only its own record's.
#[tokio::test]
async fn two_tabs_that_drop_together_each_get_the_union() {
    let server = TestServer::start().await;
    let tabs = [open_tab(&server, 0).await, open_tab(&server, 1).await];
    for tab in tabs {
        server.close_settled(tab).await;
    }
    let (_first, got) = reconnect(&server).await;
    assert_eq!(got, TAB_TOPICS, "the first tab back");
    let (_second, got) = reconnect(&server).await;
    assert_eq!(got, TAB_TOPICS, "the second tab back");
}

/// The topics of alice's two tabs: one each.
const TAB_TOPICS: [&str; 2] = ["demo/general/messages", "demo/random/tasks"];

/// Alice's tab `i` on `node`: a fresh auth, subscribed to `TAB_TOPICS[i]`.
async fn open_tab(node: &TestServer, i: usize) -> WsClient {
    let (mut c, reply) = auth_with(node, "dev-token-alice", false, None).await;
    assert_eq!(restored(&reply), vec![]);
    c.subscribe(TAB_TOPICS[i]).await;
    c
}

/// Reconnects alice with `reconnect:true` on `node`; the client and the restored patterns.
async fn reconnect(node: &TestServer) -> (WsClient, Vec<String>) {
    let (c, reply) = auth_with(node, "dev-token-alice", true, None).await;
    let p = patterns(&reply);
    (c, p)
}

/// Two tabs of one actor (issue 13, item 6): tab `i` opens on `open_on[i]` and reconnects on
/// `reconnect_on[i]`. Whichever drops first, one at a time or both before either reconnects
/// (reconnecting in reverse order: the record released last is claimed first), each gets its
/// own subscriptions back. Reconnected tabs stay open, so their records are never claimed again.
pub(crate) async fn two_tabs_each_get_their_own_subscriptions_back(
    open_on: [&TestServer; 2],
    reconnect_on: [&TestServer; 2],
) {
    let mut kept = Vec::new();
    for first in [0, 1] {
        let second = 1 - first;
        // One at a time: the other tab's record is in use, so never claimed.
        let mut tabs = [Some(open_tab(open_on[0], 0).await), Some(open_tab(open_on[1], 1).await)];
        for i in [first, second] {
            open_on[i].close_settled(tabs[i].take().expect("open")).await;
            let (c, got) = reconnect(reconnect_on[i]).await;
            assert_eq!(got, [TAB_TOPICS[i]], "tab {i} reconnected alone ({first} first)");
            kept.push(c);
        }
        // Both dropped, then both reconnect, the one that dropped last first.
        let mut tabs = [Some(open_tab(open_on[0], 0).await), Some(open_tab(open_on[1], 1).await)];
        for i in [first, second] {
            open_on[i].close_settled(tabs[i].take().expect("open")).await;
        }
        for i in [second, first] {
            let (c, got) = reconnect(reconnect_on[i]).await;
            assert_eq!(got, [TAB_TOPICS[i]], "tab {i} after both dropped ({first} first)");
            kept.push(c);
        }
    }
    let (_c, got) = reconnect(reconnect_on[0]).await;
    assert_eq!(got, Vec::<String>::new(), "every record was claimed once");
}

#[tokio::test]
async fn two_connections_of_one_actor_each_get_their_own_subscriptions_back() {
    let server = one_record_each().spawn().await;
    two_tabs_each_get_their_own_subscriptions_back([&server, &server], [&server, &server]).await;
}

/// The same on an SQLite file, the default store: restore writes go through the store's own
/// writer connection, claims through its pool, so each must see the other's commits.
#[tokio::test]
async fn two_connections_on_an_sqlite_file_each_get_their_own_subscriptions_back() {
    let dir = std::env::temp_dir().join(format!("skua-two-tabs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    let store = format!("sqlite://{}/skua.db", dir.display());
    let server = one_record_each().settings(|s| s.node.store = Some(store.clone())).spawn().await;
    two_tabs_each_get_their_own_subscriptions_back([&server, &server], [&server, &server]).await;
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_fresh_auth_leaves_another_connection_s_record_alone() {
    let server = TestServer::start().await;
    let first = open_tab(&server, 0).await;
    // A second tab opens while the first is still there, and subscribes elsewhere.
    let _second = open_tab(&server, 1).await;
    server.close_settled(first).await;
    let (mut back, got) = reconnect(&server).await;
    assert_eq!(got, [TAB_TOPICS[0]], "the second tab's auth and subscribe did not touch the first's record");
    let mut bob = server.auth("dev-token-bob").await;
    bob.publish_acked(TAB_TOPICS[0], "m".into()).await;
    assert_eq!(back.expect("message").await.str("topic"), TAB_TOPICS[0]);
}

#[tokio::test]
async fn two_nodes_on_postgres_restore_each_connection_s_own_record() {
    let Some(db) = TestDatabase::migrated().await else { return };
    let builder = one_record_each().settings(|s| s.node.store = Some(db.url.clone()));
    let embedded = skua_server::node::Embedded::default();
    let (n0, n1) = (builder.spawn_with(&embedded).await, builder.spawn_with(&embedded).await);
    two_tabs_each_get_their_own_subscriptions_back([&n0, &n0], [&n1, &n1]).await;
}

#[tokio::test]
async fn reconnect_restores_topics_and_lobbies_without_resubscribing() {
    let server = TestServer::start().await;
    let (mut alice, reply) = auth_with(&server, "dev-token-alice", false, None).await;
    assert_eq!(restored(&reply), vec![]);
    alice.subscribe("demo/general/messages").await;
    let filters = Value::Array(vec![Value::from("vip"), Value::Array(vec!["B".into(), "a".into()])]);
    alice.send(frame! {"type" => "subscribe", "topic" => "demo/general/events", "filters" => filters.clone()}).await;
    alice.expect("subscribed").await;
    alice.send(frame! {"type" => "subscribe", "topic" => "demo/random/tasks", "loadBalance" => true, "loadBalanceGroup" => "pool"}).await;
    alice.expect("subscribed").await;
    alice.send(frame! {"type" => "lobbySubscribe", "lobbyId" => "online"}).await;
    alice.expect("lobbySubscribed").await;
    server.close_settled(alice).await;

    let (mut alice, reply) = auth_with(&server, "dev-token-alice", true, None).await;
    let mut entries = restored(&reply);
    entries.sort_by_key(|e| e["pattern"].as_str().map(str::to_owned));
    assert_eq!(entries.len(), 3, "{entries:?}");
    for e in &entries {
        let keys: Vec<&str> = e.as_map().unwrap().iter().filter_map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            vec!["pattern", "topic", "load_balance", "load_balance_group", "filters"],
            "all five keys (N23)"
        );
    }
    assert_eq!(entries[0]["pattern"].as_str(), Some("demo/general/events"));
    assert_eq!(entries[0]["filters"], filters, "filters as the client sent them");
    assert_eq!(entries[1]["pattern"].as_str(), Some("demo/general/messages"));
    assert_eq!(entries[1]["topic"].as_str(), Some("skua/v1/m/demo-project/demo-app/general/messages"));
    assert_eq!(entries[1]["load_balance"], Value::Boolean(false), "N36");
    assert_eq!(entries[1]["load_balance_group"], Value::Nil, "N36");
    assert_eq!(entries[1]["filters"], Value::Array(vec![]), "N36");
    assert_eq!(entries[2]["load_balance"], Value::Boolean(true));
    assert_eq!(entries[2]["load_balance_group"].as_str(), Some("pool"));
    // No `subscribed` frames and no lobby snapshot on restore (N22).
    alice.assert_nothing_pending().await;

    let mut bob = server.auth("dev-token-bob").await;
    bob.publish_acked("demo/general/messages", "m".into()).await;
    assert_eq!(alice.expect("message").await.str("topic"), "demo/general/messages");
    bob.send(frame! {"type" => "publish", "topic" => "demo/general/events", "data" => "f", "filters" => Value::Array(vec!["a".into(), "b".into()]), "msgRef" => "x"}).await;
    bob.expect("published").await;
    assert_eq!(alice.expect("message").await.get("filter").as_str(), Some("a|b"));
    bob.publish_acked("demo/random/tasks", "t".into()).await;
    assert_eq!(alice.expect("message").await.str("topic"), "demo/random/tasks");
    bob.send(frame! {"type" => "presence", "roomId" => "general", "data" => frame!{"x" => 1}}).await;
    let e = alice.expect("lobbyPresence").await;
    assert_eq!((e.str("lobbyId"), e.str("actorId")), ("online", "bob"));
}

#[tokio::test]
async fn fresh_connect_restores_nothing_and_starts_a_new_record() {
    let server = one_record_each().spawn().await;
    let (mut a, _) = auth_with(&server, "dev-token-alice", false, None).await;
    a.subscribe("demo/general/messages").await;
    server.close_settled(a).await;
    let (mut fresh, reply) = auth_with(&server, "dev-token-alice", false, None).await;
    assert_eq!(restored(&reply), vec![]);
    let mut bob = server.auth("dev-token-bob").await;
    bob.publish_acked("demo/general/messages", "m".into()).await;
    fresh.assert_nothing_pending().await;
    server.close_settled(fresh).await;
    // The fresh connection's (empty) record ended last; the first one's is still there.
    let (_c, reply) = auth_with(&server, "dev-token-alice", true, None).await;
    assert_eq!(restored(&reply), vec![]);
    let (_c, reply) = auth_with(&server, "dev-token-alice", true, None).await;
    assert_eq!(patterns(&reply), ["demo/general/messages"]);
}

#[tokio::test]
async fn persistent_actors_keep_one_record_per_client_id() {
    let server = TestServer::start().await;
    let (mut w1, _) = auth_with(&server, "dev-token-agent", false, Some("worker-1")).await;
    w1.subscribe("demo/general/tasks").await;
    server.close_settled(w1).await;
    let (w2, reply) = auth_with(&server, "dev-token-agent", true, Some("worker-2")).await;
    assert_eq!(restored(&reply), vec![], "another clientId is another session (N23)");
    server.close_settled(w2).await;
    let (_w1, reply) = auth_with(&server, "dev-token-agent", true, Some("worker-1")).await;
    let entries = restored(&reply);
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["pattern"].as_str(), Some("demo/general/tasks"));
    // For other actor types clientId is accepted and ignored (N9): the key is the actor.
    let (mut u, _) = auth_with(&server, "dev-token-bob", false, Some("tab-1")).await;
    u.subscribe("demo/general/status").await;
    server.close_settled(u).await;
    let (_u, reply) = auth_with(&server, "dev-token-bob", true, Some("tab-2")).await;
    assert_eq!(restored(&reply).len(), 1);
}

#[tokio::test]
async fn records_expire_after_the_restore_ttl() {
    let server = TestServer::builder().settings(|s| s.edge.restore_ttl = Some("0s".into())).spawn().await;
    let (mut a, _) = auth_with(&server, "dev-token-alice", false, None).await;
    a.subscribe("demo/general/messages").await;
    server.close_settled(a).await;
    let (_a, reply) = auth_with(&server, "dev-token-alice", true, None).await;
    assert_eq!(restored(&reply), vec![]);
}

/// The topics every tab of [`a_reconnect_on_1012_always_gets_its_subscriptions_back`] holds.
const BOTH_TOPICS: [&str; 2] = ["demo/general/messages", "demo/random/tasks"];

/// Issue 36: a drain commits each connection's restore-record release before its 1012, so a
/// client that reconnects to another node the moment it reads the 1012 always gets its
/// subscriptions back. Node A's store pool has one connection, so its releases queue as they
/// do when a node drains thousands of connections: a 1012 sent before its release commits
/// loses the race (the reconnect finds no released record, and A is alive, so it does not
/// wait for one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_on_1012_always_gets_its_subscriptions_back() {
    let Some(db) = TestDatabase::migrated().await else { return };
    let embedded = skua_server::node::Embedded::default();
    let url = db.url.clone();
    let a = TestServer::builder()
        .settings(move |s| {
            s.node.store = Some(url);
            s.node.store_pool_size = Some(1);
        })
        .spawn_with(&embedded)
        .await;
    let url = db.url.clone();
    let b = TestServer::builder().settings(move |s| s.node.store = Some(url)).spawn_with(&embedded).await;
    const TABS: usize = 24;
    let mut tabs = Vec::new();
    for _ in 0..TABS {
        let (mut c, reply) = auth_with(&a, "dev-token-alice", true, None).await;
        assert_eq!(restored(&reply), vec![], "nothing released yet");
        for t in BOTH_TOPICS {
            c.subscribe(t).await;
        }
        tabs.push(c);
    }
    let b = &b;
    let reconnects = tabs.into_iter().map(|mut c| async move {
        let (code, _) = c.expect_close().await;
        assert_eq!(code, 1012, "the drain closes with server_restart");
        reconnect(b).await
    });
    let (back, drained) = tokio::join!(futures_util::future::join_all(reconnects), a.shutdown());
    assert!(drained, "node A drained within the grace");
    for (i, (_c, got)) in back.iter().enumerate() {
        assert_eq!(got, &BOTH_TOPICS, "reconnect {i} of {TABS} got its subscriptions back");
    }
}

/// The store operations `op` a node made so far.
fn store_ops(node: &TestServer, op: &str) -> u64 {
    let ops = node.state.metrics.backend_latency.snapshot();
    ops.into_iter().filter(|((slot, o), _)| *slot == "store" && *o == op).map(|(_, h)| h.count).sum()
}

/// Issue 36: a reconnect that restores a claimed record as it was stored costs the new node one
/// commit (the claim), no save; the record stays claimable by the next reconnect.
#[tokio::test]
async fn a_reconnect_that_restores_the_record_unchanged_does_not_save_it_again() {
    let server = TestServer::start().await;
    let tab = open_tab(&server, 0).await;
    server.close_settled(tab).await;
    let (saves, claims) = (store_ops(&server, "save_restore"), store_ops(&server, "claim_restore"));
    let (back, got) = reconnect(&server).await;
    assert_eq!(got, [TAB_TOPICS[0]]);
    assert_eq!(store_ops(&server, "claim_restore"), claims + 1, "one claim");
    assert_eq!(store_ops(&server, "save_restore"), saves, "and no save of the unchanged record");
    server.close_settled(back).await;
    let (mut again, got) = reconnect(&server).await;
    assert_eq!(got, [TAB_TOPICS[0]], "the claimed record is still whole for the next reconnect");
    let mut bob = server.auth("dev-token-bob").await;
    bob.publish_acked(TAB_TOPICS[0], "m".into()).await;
    assert_eq!(again.expect("message").await.str("topic"), TAB_TOPICS[0]);
}

/// Issue 35: the idle clock starts when the `auth` reply is sent, not when `auth` arrived. The
/// restore claim waits behind a lock held on `restore_records` (a slow store) for longer than
/// `idle_timeout`; the client answers the reply at once with a keep-alive and stays connected.
/// Before, the node closed it 4000 right after the reply: the frame's arrival was the last
/// activity, already more than an idle timeout ago.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_idle_clock_starts_after_an_auth_reply_that_waited_on_the_store() {
    use sqlx::Connection as _;
    let Some(db) = TestDatabase::migrated().await else { return };
    let url = db.url.clone();
    let server = TestServer::builder()
        .settings(move |s| {
            s.node.store = Some(url);
            s.edge.idle_timeout = Some("2s".into());
        })
        .spawn()
        .await;
    let mut locker = sqlx::PgConnection::connect(&db.url).await.expect("connect");
    let mut tx = locker.begin().await.expect("begin");
    sqlx::query("LOCK TABLE restore_records IN ACCESS EXCLUSIVE MODE").execute(&mut *tx).await.expect("lock");
    let mut c = server.connect().await;
    let auth = async {
        let reply = c.auth_session("dev-token-alice", None, true).await;
        // At once: the keep-alive answers the reply; the echo proves the socket is still served.
        c.heartbeat().await;
        let echo = c.next_event_within(Duration::from_secs(5)).await;
        (reply, echo)
    };
    // The claim waits for the lock; release it only after twice the idle timeout has passed.
    let release = async {
        tokio::time::sleep(Duration::from_secs(4)).await;
        tx.rollback().await.expect("rollback");
    };
    let ((reply, echo), ()) = tokio::join!(auth, release);
    assert_eq!(reply.get("success"), &Value::Boolean(true), "{reply:?}");
    assert!(matches!(echo, Some(Event::Heartbeat)), "got {echo:?} instead of the keep-alive's echo");
}
