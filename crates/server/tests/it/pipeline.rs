//! A connection's publish pipeline (issue 36): the connection keeps reading and submitting its
//! logged publishes while earlier ones commit, and still gets each `published` once, in order,
//! only after its commit; every message is stored and delivered once, in order.

use std::time::Duration;

use rmpv::Value;
use skua_testkit::postgres::TestDatabase;
use skua_testkit::{Event, TestServer, WsClient, frame};

const TASKS: &str = "demo/general/tasks";
const MESSAGES: &str = "demo/general/messages";
/// Publishes one connection sends without waiting.
const BURST: i64 = 2000;

async fn server_on(store: &str) -> TestServer {
    let store = store.to_owned();
    TestServer::builder()
        .settings(move |s| {
            s.node.store = Some(store);
            // The burst goes out at once: no rate limit in the way.
            s.edge.rate_limit = Some(1_000_000);
        })
        .spawn()
        .await
}

async fn agent(server: &TestServer, client_id: &str, reconnect: bool) -> WsClient {
    let mut c = server.connect().await;
    c.auth_session("dev-token-agent", Some(client_id), reconnect).await;
    c
}

fn publish(topic: &str, n: i64) -> Value {
    frame! {"type" => "publish", "topic" => topic, "data" => n, "msgRef" => n.to_string()}
}

/// The next frame, which must be the `published` receipt of `n`.
async fn expect_receipt(c: &mut WsClient, n: i64) {
    let f = c.next().await;
    assert_eq!(f.ty(), "published", "receipt {n} expected, got {f:?}");
    assert_eq!(f.str("msgRef"), n.to_string(), "receipts out of order: {f:?}");
}

/// One connection sends [`BURST`] logged publishes without waiting: it gets every receipt
/// exactly once and in order, a live subscriber every message once and in order, and a
/// persistent session that was away finds every one of them stored, in order.
async fn a_burst_is_acknowledged_once_in_order_and_stored(server: &TestServer) {
    // A persistent group whose consumer keeps what is published while its member is away.
    let mut w = agent(server, "pipe", false).await;
    w.send(frame! {"type" => "subscribe", "topic" => TASKS, "loadBalance" => true, "loadBalanceGroup" => "pipe"}).await;
    w.expect("subscribed").await;
    server.close_settled(w).await;
    let mut bob = server.auth("dev-token-bob").await;
    bob.subscribe(TASKS).await;

    let mut alice = server.auth("dev-token-alice").await;
    for n in 0..BURST {
        alice.send(publish(TASKS, n)).await;
    }
    for n in 0..BURST {
        expect_receipt(&mut alice, n).await;
    }
    alice.assert_nothing_pending().await;

    for n in 0..BURST {
        let m = bob.expect("message").await;
        assert_eq!(m.get("data").as_i64(), Some(n), "live deliveries in order, once each: {m:?}");
    }
    bob.assert_nothing_pending().await;

    let mut w = agent(server, "pipe", true).await;
    assert_eq!(w.expect("replayStart").await.int("count"), BURST, "every acknowledged message is stored");
    for n in 0..BURST {
        let m = w.expect("message").await;
        assert_eq!(m.get("data").as_i64(), Some(n), "stored in publish order: {m:?}");
    }
    assert_eq!(w.expect("replayEnd").await.int("replayed"), BURST);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_acknowledges_a_pipelined_burst_once_in_order_and_stores_it() {
    let path = std::env::temp_dir().join(format!("skua-pipeline-{}.db", uuid::Uuid::new_v4().simple()));
    let server = server_on(&format!("sqlite://{}", path.display())).await;
    a_burst_is_acknowledged_once_in_order_and_stored(&server).await;
    drop(server);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_acknowledges_a_pipelined_burst_once_in_order_and_stores_it() {
    let Some(db) = TestDatabase::migrated().await else { return };
    let server = server_on(&db.url).await;
    a_burst_is_acknowledged_once_in_order_and_stored(&server).await;
}

/// While a logged publish waits for its commit (Postgres holds the table locked), the
/// connection is still read — a heartbeat is echoed — but nothing after it is answered
/// before it: a later publish to a plain topic waits behind it. Once the lock goes, the
/// receipts come in order. Before pipelining the heartbeat waited for the commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_keeps_reading_while_its_logged_publish_commits() {
    use sqlx::Connection;
    let Some(db) = TestDatabase::migrated().await else { return };
    let server = server_on(&db.url).await;
    let mut alice = server.auth("dev-token-alice").await;

    let mut lock = sqlx::PgConnection::connect(&db.url).await.expect("connect");
    let mut tx = lock.begin().await.expect("begin");
    sqlx::query("LOCK TABLE log_messages IN EXCLUSIVE MODE").execute(&mut *tx).await.expect("lock");

    alice.send(publish(TASKS, 1)).await;
    alice.send(publish(MESSAGES, 2)).await;
    alice.heartbeat().await;
    match alice.next_event_within(Duration::from_secs(10)).await {
        Some(Event::Heartbeat) => {}
        other => panic!("the heartbeat echo comes while the publish commits, before any receipt: {other:?}"),
    }
    // Both receipts are still waiting: the heartbeat's echo is the next thing to arrive.
    alice.assert_nothing_pending().await;

    tx.commit().await.expect("unlock");
    expect_receipt(&mut alice, 1).await;
    expect_receipt(&mut alice, 2).await;
    alice.assert_nothing_pending().await;
}

/// The receipts of a pipelined burst wait for room in the connection's own outbound queue
/// instead of overflowing it (issue 36): with an outbound queue of 16 frames and 400 logged
/// publishes in flight, whole group commits of receipts become ready at once. Before, they were
/// queued in one go and the publisher was closed 4008 as a slow consumer of its own receipts;
/// now the session queues each receipt once the queue is at most half full, so the publisher
/// gets every receipt, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receipts_wait_for_room_in_the_publishers_outbound_queue() {
    const N: i64 = 400;
    let path = std::env::temp_dir().join(format!("skua-pipeline-room-{}.db", uuid::Uuid::new_v4().simple()));
    let store = format!("sqlite://{}", path.display());
    let server = TestServer::builder()
        .settings(move |s| {
            s.node.store = Some(store);
            s.edge.rate_limit = Some(1_000_000);
            s.edge.outbound_queue_messages = Some(16);
        })
        .spawn()
        .await;
    let mut alice = server.auth("dev-token-alice").await;
    for n in 0..N {
        alice.send(publish(TASKS, n)).await;
    }
    for n in 0..N {
        expect_receipt(&mut alice, n).await;
    }
    alice.assert_nothing_pending().await;
    drop(server);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}
