//! Durable delivery (N24–N26, N37): logged topics, acks, persistent sessions, group replay.
//!
//! The dev fixtures' `tasks` topic is logged; `agent-1` (token `dev-token-agent`) is an agent, so
//! with a clientId it has a persistent session; alice (a user) publishes.

use std::sync::atomic::Ordering;
use std::time::Duration;

use rmpv::Value;
use skua_testkit::{Frame, TestServer, WsClient, frame};

const TASKS: &str = "demo/general/tasks";

/// Authenticates `token` with an optional clientId; returns the client and its auth reply.
async fn auth(server: &TestServer, token: &str, client_id: Option<&str>, reconnect: bool) -> (WsClient, Frame) {
    let mut c = server.connect().await;
    let reply = c.auth_session(token, client_id, reconnect).await;
    (c, reply)
}

async fn agent(server: &TestServer, client_id: &str, reconnect: bool) -> WsClient {
    auth(server, "dev-token-agent", Some(client_id), reconnect).await.0
}

async fn subscribe_group(c: &mut WsClient, group: &str) {
    c.send(frame! {"type" => "subscribe", "topic" => TASKS, "loadBalance" => true, "loadBalanceGroup" => group}).await;
    c.expect("subscribed").await;
}

async fn publish(c: &mut WsClient, n: i64) {
    c.publish_acked(TASKS, Value::from(n)).await;
}

fn data(f: &Frame) -> i64 {
    f.get("data").as_i64().unwrap_or_else(|| panic!("no integer data: {f:?}"))
}

fn is_replay(f: &Frame) -> bool {
    f.get("isReplay") == &Value::Boolean(true)
}

/// Polls `/metrics` until every `(name, kind label, value)` is reached (counters move after the
/// frame that caused them was answered), failing after 5 s with what was last read.
async fn metrics_reach(server: &TestServer, want: &[(&str, Option<&str>, f64)]) {
    let d = skua_testkit::control::Deadline::new("the counters on /metrics", Duration::from_secs(5));
    loop {
        let m = skua_testkit::http::Scrape::of(server.addr).await;
        let got: Vec<f64> = want
            .iter()
            .map(|(name, kind, _)| match kind {
                Some(k) => m.value(name, &[("kind", k)]),
                None => m.value(name, &[]),
            })
            .collect();
        if want.iter().zip(&got).all(|((_, _, w), g)| w == g) {
            return;
        }
        if d.elapsed() > Duration::from_secs(4) {
            panic!("want {want:?}, got {got:?}");
        }
        d.tick().await;
    }
}

async fn ack(c: &mut WsClient, f: &Frame) {
    c.send(frame! {"type" => "ack", "msgId" => f.str("msgId")}).await;
}

/// Asserts that `w` has nothing more coming on `TASKS`: a logged marker published now is queued
/// on `w`'s durable task behind whatever that task still has to deliver (restore, replay,
/// redelivery), so it must be the next frame `w` gets. A heartbeat echo alone is no such
/// barrier: it bypasses the durable task, so a late replay would arrive after it.
async fn assert_marker_comes_first(w: &mut WsClient, alice: &mut WsClient, marker: i64) {
    // The session has handled every frame `w` sent, so its restore and subscribes are queued.
    w.assert_nothing_pending().await;
    publish(alice, marker).await;
    let m = w.expect("message").await;
    assert_eq!(data(&m), marker, "delivered before the marker: {m:?}");
    ack(w, &m).await;
    w.assert_nothing_pending().await;
}

/// Store operations `op` (by the store's latency metrics) so far.
fn store_op_count(server: &TestServer, op: &str) -> u64 {
    let ops = server.state.metrics.backend_latency.snapshot();
    ops.into_iter().filter(|((slot, o), _)| *slot == "store" && *o == op).map(|(_, h)| h.count).sum()
}

/// Messages in a burst of live deliveries to one durable subscription.
const BURST: i64 = 300;

async fn burst_server(store: &str) -> TestServer {
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

/// Holds a durable task still while work queues behind it, so that what a test counts does not
/// depend on how fast the machine is: on Postgres, a row lock on a message's pending row makes
/// the subscriber's ack of it wait in the store, and its durable task with it (a task stores its
/// acks before it takes the next batch); whatever reaches the task meanwhile is one batch when
/// the lock goes. Without a Postgres URL there is no gate and the batches are what they are.
struct Gate {
    url: Option<String>,
}

impl Gate {
    /// Delivers a logged marker to `w`, locks its pending row (Postgres) and sends its ack:
    /// `w`'s durable task then waits until the returned lock is dropped.
    async fn close(&self, w: &mut WsClient, alice: &mut WsClient, marker: i64) -> Option<sqlx::PgConnection> {
        use sqlx::Connection as _;
        publish(alice, marker).await;
        let m = w.expect("message").await;
        assert_eq!(data(&m), marker, "{m:?}");
        let lock = match &self.url {
            Some(url) => {
                let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
                sqlx::query("BEGIN").execute(&mut conn).await.expect("begin");
                let locked = sqlx::query("SELECT 1 FROM log_pending WHERE msg_id = $1 FOR UPDATE")
                    .bind(m.str("msgId"))
                    .fetch_all(&mut conn)
                    .await
                    .expect("lock the marker's pending row");
                assert_eq!(locked.len(), 1, "the marker is pending for the subscriber");
                Some(conn)
            }
            None => None,
        };
        ack(w, &m).await;
        // The session has handed the ack to the durable task. A copy of the marker itself may
        // come once more as a replay (at least once; seen once in CI on Postgres, issue 36
        // notes): acked too, it is not what this gate is about.
        w.heartbeat().await;
        loop {
            match w.next_event().await {
                skua_testkit::Event::Heartbeat => break,
                skua_testkit::Event::Frame(f) if f.ty() == "message" && data(&f) == marker && is_replay(&f) => {
                    ack(w, &f).await;
                }
                other => panic!("expected nothing but the heartbeat echo, got {other:?}"),
            }
        }
        lock
    }

    /// Lets the durable task go on.
    async fn open(lock: Option<sqlx::PgConnection>) {
        if let Some(mut conn) = lock {
            sqlx::query("ROLLBACK").execute(&mut conn).await.expect("unlock");
        }
    }
}

/// Live deliveries that wait together on a durable subscription are claimed together, and acks
/// that arrive together are stored together (issue 36): a burst of [`BURST`] messages, each
/// acked with a frame of its own, costs far fewer claim and ack statements than messages, and
/// still reaches the subscriber once each, in order, and nothing stays pending. On Postgres a
/// [`Gate`] holds the subscriber's durable task while the burst and then its acks queue, so the
/// counts do not depend on the machine's speed (a busy CI machine trickled them one by one).
async fn a_burst_is_claimed_and_acked_in_batches(server: &TestServer, gate: Gate) {
    let mut w = agent(server, "batch", false).await;
    w.subscribe(TASKS).await;
    let mut alice = server.auth("dev-token-alice").await;
    let lock = gate.close(&mut w, &mut alice, -1).await;
    let claims_before = store_op_count(server, "claim_many");
    for n in 0..BURST {
        alice.send(frame! {"type" => "publish", "topic" => TASKS, "data" => n, "msgRef" => n.to_string()}).await;
    }
    for _ in 0..BURST {
        alice.expect("published").await;
    }
    Gate::open(lock).await;
    let mut ids = Vec::new();
    for n in 0..BURST {
        let m = w.expect("message").await;
        assert_eq!(data(&m), n, "live deliveries in order, once each: {m:?}");
        assert!(!is_replay(&m), "{m:?}");
        ids.push(m.str("msgId").to_owned());
    }
    let claims = store_op_count(server, "claim_many") - claims_before;
    let lock = gate.close(&mut w, &mut alice, -2).await;
    let acks_before = store_op_count(server, "ack_many");
    for id in &ids {
        w.send(frame! {"type" => "ack", "msgId" => id.as_str()}).await;
    }
    // The session has handed every ack to the durable task.
    w.assert_nothing_pending().await;
    Gate::open(lock).await;
    let stored = BURST as u64 + 2;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while server.state.metrics.acks.load(Ordering::Relaxed) < stored {
        assert!(tokio::time::Instant::now() < deadline, "not every ack was stored");
        tokio::task::yield_now().await;
    }
    let single = store_op_count(server, "claim");
    let acks = (store_op_count(server, "ack_many") - acks_before, store_op_count(server, "ack"));
    eprintln!("{BURST} deliveries: {claims} claim_many, {single} claim, {acks:?} ack_many/ack");
    assert_eq!(single, 0, "live deliveries are claimed in batches only");
    assert!(claims * 4 <= BURST as u64, "{claims} claim statements for {BURST} live deliveries");
    assert_eq!(acks.1, 0, "acks are stored in batches only");
    assert!(acks.0 * 4 <= BURST as u64, "{} ack statements for {BURST} acks", acks.0);
    let consumers = server.state.store.list_consumers("s/", "", 10).await.expect("list_consumers");
    let mine: Vec<_> = consumers.iter().filter(|c| c.id.ends_with("/agent-1/batch")).collect();
    assert_eq!(mine.len(), 1, "{consumers:?}");
    assert_eq!((mine[0].pending, mine[0].held), (0, 0), "every message acked: {mine:?}");
    server.close_settled(w).await;
    let mut w = agent(server, "batch", true).await;
    assert_marker_comes_first(&mut w, &mut alice, BURST).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_claims_and_acks_a_burst_of_live_deliveries_in_batches() {
    let path = std::env::temp_dir().join(format!("skua-durable-batch-{}.db", uuid::Uuid::new_v4().simple()));
    let server = burst_server(&format!("sqlite://{}", path.display())).await;
    a_burst_is_claimed_and_acked_in_batches(&server, Gate { url: None }).await;
    drop(server);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_claims_and_acks_a_burst_of_live_deliveries_in_batches() {
    let Some(db) = skua_testkit::postgres::TestDatabase::migrated().await else { return };
    let server = burst_server(&db.url).await;
    a_burst_is_claimed_and_acked_in_batches(&server, Gate { url: Some(db.url.clone()) }).await;
}

/// One message fanned out to several durable subscribers of a node is claimed for them together
/// (the node's writer, issue 36): messages published one at a time to [`FANOUT_SUBS`] persistent
/// sessions cost far fewer claim and ack statements than deliveries, though each connection's
/// durable task has only one message at a time to claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_message_to_many_durable_subscribers_is_claimed_together() {
    const FANOUT_SUBS: usize = 8;
    const MESSAGES: i64 = 30;
    let path = std::env::temp_dir().join(format!("skua-durable-fanout-{}.db", uuid::Uuid::new_v4().simple()));
    let server = burst_server(&format!("sqlite://{}", path.display())).await;
    let mut workers = Vec::new();
    for i in 0..FANOUT_SUBS {
        let mut w = agent(&server, &format!("fan-{i}"), false).await;
        w.subscribe(TASKS).await;
        workers.push(w);
    }
    let mut alice = server.auth("dev-token-alice").await;
    for n in 0..MESSAGES {
        publish(&mut alice, n).await;
        let mut got = Vec::new();
        for w in &mut workers {
            let m = w.expect("message").await;
            assert_eq!(data(&m), n, "{m:?}");
            got.push(m);
        }
        for (w, m) in workers.iter_mut().zip(&got) {
            ack(w, m).await;
        }
    }
    let deliveries = MESSAGES as u64 * FANOUT_SUBS as u64;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while server.state.metrics.acks.load(Ordering::Relaxed) < deliveries {
        assert!(tokio::time::Instant::now() < deadline, "not every ack was stored");
        tokio::task::yield_now().await;
    }
    let (claims, acks) = (store_op_count(&server, "claim_many"), store_op_count(&server, "ack_many"));
    eprintln!("{deliveries} deliveries: {claims} claim_many, {acks} ack_many");
    assert!(claims * 2 <= deliveries, "{claims} claim statements for {deliveries} live deliveries");
    assert!(acks * 2 <= deliveries, "{acks} ack statements for {deliveries} acks");
    drop(server);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}

#[tokio::test]
async fn logged_messages_carry_a_uuid_v7_msg_id_and_require_ack() {
    let server = TestServer::start().await;
    let mut bob = server.auth("dev-token-bob").await;
    bob.subscribe(TASKS).await;
    bob.subscribe("demo/general/messages").await;
    let mut alice = server.auth("dev-token-alice").await;
    publish(&mut alice, 1).await;
    alice.publish_acked("demo/general/messages", Value::from(2)).await;

    let m = bob.expect("message").await;
    let id = uuid::Uuid::parse_str(m.str("msgId")).expect("msgId is a UUID");
    assert_eq!(id.get_version_num(), 7, "UUIDv7 (N24)");
    assert_eq!(m.get("requiresAck"), &Value::Boolean(true));
    assert!(!m.has("isReplay"), "a live message is no replay: {m:?}");
    let plain = bob.expect("message").await;
    assert!(!plain.has("msgId") && !plain.has("requiresAck"), "unlogged topics carry neither: {plain:?}");

    // Acks get no reply; unknown ids and non-persistent acks are ignored (N24).
    ack(&mut bob, &m).await;
    bob.send(frame! {"type" => "ack", "msgId" => "not-a-stored-id"}).await;
    bob.send(frame! {"type" => "batchAck", "msgIds" => vec![Value::from("a"), Value::from("b")]}).await;
    bob.assert_nothing_pending().await;
    assert_eq!(server.state.metrics.logged_appends.load(Ordering::Relaxed), 1);
}

#[tokio::test]
async fn a_persistent_session_gets_what_was_published_while_away_and_unacked_messages_again() {
    let server = TestServer::start().await;
    let mut w = agent(&server, "worker-1", false).await;
    w.subscribe(TASKS).await;
    let mut alice = server.auth("dev-token-alice").await;
    publish(&mut alice, 1).await;
    publish(&mut alice, 2).await;
    let m1 = w.expect("message").await;
    let m2 = w.expect("message").await;
    assert_eq!((data(&m1), data(&m2)), (1, 2));
    ack(&mut w, &m1).await;
    w.assert_nothing_pending().await;
    server.close_settled(w).await;

    publish(&mut alice, 3).await;
    publish(&mut alice, 4).await;
    let (mut w, reply) = auth(&server, "dev-token-agent", Some("worker-1"), true).await;
    assert_eq!(reply.get("restoredSubscriptions").as_array().map(Vec::len), Some(1));
    let again = w.expect("message").await;
    assert_eq!(data(&again), 2, "the unacked message first");
    assert_eq!(again.str("msgId"), m2.str("msgId"), "it keeps its msgId (N37)");
    assert!(is_replay(&again), "a redelivery carries isReplay (N37)");
    for n in [3, 4] {
        let m = w.expect("message").await;
        assert_eq!(data(&m), n);
        assert!(!is_replay(&m), "published while away: no isReplay (N37): {m:?}");
        ack(&mut w, &m).await;
    }
    ack(&mut w, &again).await;
    w.assert_nothing_pending().await;
    server.close_settled(w).await;

    // Everything was acked: the next return delivers nothing.
    let mut w = agent(&server, "worker-1", true).await;
    assert_marker_comes_first(&mut w, &mut alice, 5).await;
    // On /metrics (docs/operations.md): five stored and acked, one delivered again, two returns
    // that restored the subscription.
    metrics_reach(
        &server,
        &[
            ("skua_logged_appends_total", None, 5.0),
            ("skua_acks_total", None, 5.0),
            ("skua_redeliveries_total", None, 1.0),
            ("skua_replays_total", Some("restored_subscription"), 2.0),
        ],
    )
    .await;
}

#[tokio::test]
async fn clients_without_a_client_id_or_of_other_types_keep_no_backlog() {
    let server = TestServer::start().await;
    let (mut bob, _) = auth(&server, "dev-token-bob", Some("laptop"), false).await;
    bob.subscribe(TASKS).await;
    let (mut plain_agent, _) = auth(&server, "dev-token-agent", None, false).await;
    plain_agent.subscribe(TASKS).await;
    server.close_settled(bob).await;
    let mut alice = server.auth("dev-token-alice").await;
    publish(&mut alice, 1).await;
    plain_agent.expect("message").await;
    server.close_settled(plain_agent).await;
    publish(&mut alice, 2).await;
    let (mut plain_agent, _) = auth(&server, "dev-token-agent", None, true).await;
    plain_agent.subscribe(TASKS).await;
    assert_marker_comes_first(&mut plain_agent, &mut alice, 3).await;
    let (mut bob, _) = auth(&server, "dev-token-bob", Some("laptop"), true).await;
    bob.subscribe(TASKS).await;
    assert_marker_comes_first(&mut bob, &mut alice, 4).await;
}

#[tokio::test]
async fn two_client_ids_on_one_token_keep_separate_sessions() {
    let server = TestServer::start().await;
    let mut a = agent(&server, "inst-a", false).await;
    let mut b = agent(&server, "inst-b", false).await;
    a.subscribe(TASKS).await;
    b.subscribe(TASKS).await;
    server.close_settled(b).await;
    let mut alice = server.auth("dev-token-alice").await;
    publish(&mut alice, 7).await;
    let live = a.expect("message").await;
    ack(&mut a, &live).await;
    a.assert_nothing_pending().await;

    let mut b = agent(&server, "inst-b", true).await;
    let m = b.expect("message").await;
    assert_eq!(data(&m), 7, "inst-b's session kept it although inst-a acked it");
    assert!(!is_replay(&m));
}

#[tokio::test]
async fn a_newer_connection_takes_a_client_id_session_over() {
    let server = TestServer::start().await;
    let mut older = agent(&server, "solo", false).await;
    let mut newer = agent(&server, "solo", false).await;
    assert_eq!(older.expect_close().await, (4009, "session_taken_over".to_owned()));
    newer.assert_nothing_pending().await;
    // Another clientId of the same token is untouched.
    let mut other = agent(&server, "other", false).await;
    newer.assert_nothing_pending().await;
    other.assert_nothing_pending().await;
}

#[tokio::test]
async fn a_group_replays_what_accumulated_while_every_member_was_gone() {
    let server = TestServer::start().await;
    let mut w1 = agent(&server, "w1", false).await;
    let mut w2 = agent(&server, "w2", false).await;
    subscribe_group(&mut w1, "workers").await;
    subscribe_group(&mut w2, "workers").await;
    server.close_settled(w1).await;
    server.close_settled(w2).await;

    let mut alice = server.auth("dev-token-alice").await;
    for n in 1..=5 {
        publish(&mut alice, n).await;
    }
    let mut w1 = agent(&server, "w1", true).await;
    assert_eq!(w1.expect("replayStart").await.int("count"), 5);
    let mut seen = Vec::new();
    for _ in 0..5 {
        let m = w1.expect("message").await;
        assert!(is_replay(&m), "{m:?}");
        assert_eq!(m.str("topic"), TASKS);
        seen.push(data(&m));
        ack(&mut w1, &m).await;
    }
    assert_eq!(seen, [1, 2, 3, 4, 5], "in publish order");
    assert_eq!(w1.expect("replayEnd").await.int("replayed"), 5);
    publish(&mut alice, 6).await;
    let live = w1.expect("message").await;
    assert_eq!(data(&live), 6);
    assert!(!is_replay(&live), "live after replayEnd");
    ack(&mut w1, &live).await;
    w1.assert_nothing_pending().await;

    // The second member finds nothing left: each message went to one member. (w1 leaves, so
    // the marker can only go to w2.)
    server.close_settled(w1).await;
    let mut w2 = agent(&server, "w2", true).await;
    assert_marker_comes_first(&mut w2, &mut alice, 7).await;
    // On /metrics (docs/operations.md): one group replay of five messages, nothing delivered
    // twice.
    metrics_reach(
        &server,
        &[
            ("skua_replays_total", Some("group"), 1.0),
            ("skua_replayed_messages_total", None, 5.0),
            ("skua_acks_total", None, 7.0),
            ("skua_redeliveries_total", None, 0.0),
        ],
    )
    .await;
}

#[tokio::test]
async fn live_group_messages_reach_one_member_and_a_leaver_s_unacked_ones_go_to_another() {
    let server = TestServer::start().await;
    let mut w1 = agent(&server, "w1", false).await;
    let mut w2 = agent(&server, "w2", false).await;
    subscribe_group(&mut w1, "pool").await;
    subscribe_group(&mut w2, "pool").await;
    let mut alice = server.auth("dev-token-alice").await;
    for n in 1..=10 {
        publish(&mut alice, n).await;
    }
    // Messages alternate between the members; which one gets the first is not fixed.
    let mut got1 = Vec::new();
    let mut got2 = Vec::new();
    while got1.len() + got2.len() < 10 {
        tokio::select! {
            m = w1.expect("message") => got1.push(data(&m)),
            m = w2.expect("message") => { ack(&mut w2, &m).await; got2.push(data(&m)) }
        }
    }
    let mut all: Vec<i64> = got1.iter().chain(&got2).copied().collect();
    all.sort_unstable();
    assert_eq!(all, (1..=10).collect::<Vec<_>>(), "each message to exactly one member");
    assert!(!got1.is_empty() && !got2.is_empty(), "both members got work: {got1:?} {got2:?}");
    w2.assert_nothing_pending().await;

    // w1 leaves without acking: w2 gets w1's messages again, flagged isReplay.
    server.close_settled(w1).await;
    let mut again = Vec::new();
    for _ in 0..got1.len() {
        let m = w2.expect("message").await;
        assert!(is_replay(&m), "{m:?}");
        again.push(data(&m));
        ack(&mut w2, &m).await;
    }
    assert_eq!(again, got1, "in order");
    w2.assert_nothing_pending().await;
}

#[tokio::test]
async fn a_backlog_larger_than_the_outbound_queue_is_paged_without_a_slow_consumer_close() {
    let server = TestServer::builder()
        .settings(|s| {
            s.edge.outbound_queue_messages = Some(16);
            s.edge.replay_page_size = Some(7);
            s.edge.rate_limit = Some(100_000);
        })
        .spawn()
        .await;
    let mut w = agent(&server, "big", false).await;
    subscribe_group(&mut w, "batch").await;
    server.close_settled(w).await;
    let mut alice = server.auth("dev-token-alice").await;
    const N: i64 = 500;
    for n in 0..N {
        alice.send(frame! {"type" => "publish", "topic" => TASKS, "data" => n}).await;
    }
    alice.assert_nothing_pending().await;
    let mut w = agent(&server, "big", true).await;
    assert_eq!(w.expect("replayStart").await.int("count"), N);
    for n in 0..N {
        let m = w.expect("message").await;
        assert_eq!(data(&m), n);
    }
    assert_eq!(w.expect("replayEnd").await.int("replayed"), N);
    assert_eq!(server.state.metrics.slow_consumer_closes.load(Ordering::Relaxed), 0);
}

#[tokio::test]
async fn unsubscribing_ends_a_session_s_backlog() {
    let server = TestServer::start().await;
    let mut w = agent(&server, "quitter", false).await;
    w.subscribe(TASKS).await;
    w.send(frame! {"type" => "unsubscribe", "topic" => TASKS}).await;
    w.expect("unsubscribed").await;
    w.subscribe("demo/general/messages").await;
    server.close_settled(w).await;
    let mut alice = server.auth("dev-token-alice").await;
    publish(&mut alice, 1).await;
    let (mut w, reply) = auth(&server, "dev-token-agent", Some("quitter"), true).await;
    assert_eq!(reply.get("restoredSubscriptions").as_array().map(Vec::len), Some(1), "only messages: {reply:?}");
    // Subscribing again starts afresh: the old consumer, and message 1 with it, is gone.
    w.subscribe(TASKS).await;
    assert_marker_comes_first(&mut w, &mut alice, 2).await;
}

#[tokio::test]
async fn retention_caps_what_a_session_finds_on_return() {
    let server = TestServer::builder()
        .settings(|s| {
            s.edge.log_max_per_topic = Some(3);
            s.edge.log_prune_interval = Some("1s".into());
        })
        .spawn()
        .await;
    let mut w = agent(&server, "late", false).await;
    w.subscribe(TASKS).await;
    server.close_settled(w).await;
    let mut alice = server.auth("dev-token-alice").await;
    for n in 1..=5 {
        publish(&mut alice, n).await;
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while server.state.metrics.log_pruned.load(Ordering::Acquire) < 2 {
        assert!(tokio::time::Instant::now() < deadline, "retention did not run");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut w = agent(&server, "late", true).await;
    for n in 3..=5 {
        let m = w.expect("message").await;
        assert_eq!(data(&m), n, "the newest three are kept");
        ack(&mut w, &m).await;
    }
    assert_marker_comes_first(&mut w, &mut alice, 6).await;
}

#[tokio::test]
async fn sqlite_keeps_sessions_and_backlogs_too() {
    let server = TestServer::builder().settings(|s| s.node.store = Some("sqlite::memory:".into())).spawn().await;
    let mut w = agent(&server, "sq", false).await;
    subscribe_group(&mut w, "sq-group").await;
    server.close_settled(w).await;
    let mut alice = server.auth("dev-token-alice").await;
    publish(&mut alice, 1).await;
    publish(&mut alice, 2).await;
    let mut w = agent(&server, "sq", true).await;
    assert_eq!(w.expect("replayStart").await.int("count"), 2);
    assert_eq!(data(&w.expect("message").await), 1);
    assert_eq!(data(&w.expect("message").await), 2);
    assert_eq!(w.expect("replayEnd").await.int("replayed"), 2);
}

/// The index (first element of the data) of a `[index, blob]` message.
fn index_of(f: &Frame) -> i64 {
    match f.get("data") {
        Value::Array(a) => a[0].as_i64().expect("index"),
        other => panic!("unexpected data {other:?}"),
    }
}

/// Which member of the group got each message: fails as soon as a message reaches a second
/// member (or the same one twice), since nobody here leaves without acking (N26).
#[derive(Default)]
struct GroupLedger {
    owner: std::collections::BTreeMap<i64, &'static str>,
}

impl GroupLedger {
    /// Records that `member` got `f` and acks it.
    async fn take(&mut self, member: &'static str, c: &mut WsClient, f: &Frame) {
        let n = index_of(f);
        if let Some(first) = self.owner.insert(n, member) {
            panic!("message {n} (isReplay {}) reached {member} after {first} had it", is_replay(f));
        }
        ack(c, f).await;
    }

    /// Handles one event of `member`'s connection: messages are taken, anything else but a
    /// replay frame or a heartbeat echo fails.
    async fn on_event(&mut self, member: &'static str, c: &mut WsClient, ev: Option<skua_testkit::Event>) {
        match ev {
            Some(skua_testkit::Event::Frame(f)) if f.ty() == "message" => self.take(member, c, &f).await,
            Some(skua_testkit::Event::Frame(f)) if matches!(f.ty(), "replayStart" | "replayEnd") => {}
            Some(skua_testkit::Event::Heartbeat) => {}
            other => panic!("{member}: unexpected {other:?} with {} of the messages seen", self.owner.len()),
        }
    }
}

/// Found by the chaos harness (docs/reliability.md): a live copy of a group message reached a
/// member after another member had been given it by a replay and had acked it; the pending row
/// was gone, the claim found nothing, and the copy was delivered again as a new message. A
/// group's message goes to a second member only when the first left without acking it (N26).
///
/// Every wait is for an event (issue 35: no quiet windows): the hub's delivery counter, the
/// newcomer's `replayEnd`, the last message of the group, and a marker queued behind whatever
/// the stalled member's durable task still holds.
#[tokio::test]
async fn a_group_message_another_member_acked_is_not_delivered_again() {
    let server = TestServer::builder()
        .settings(|s| {
            s.edge.outbound_queue_messages = Some(4);
            s.edge.rate_limit = Some(1000);
        })
        .spawn()
        .await;
    let mut slow = agent(&server, "slow", false).await;
    let mut fast = agent(&server, "fast", false).await;
    subscribe_group(&mut slow, "pool").await;
    subscribe_group(&mut fast, "pool").await;
    let mut alice = server.auth("dev-token-alice").await;
    // Large messages: `slow` reads nothing, so once the socket buffers are full its durable task
    // waits for room with its share of the live messages queued behind it, unclaimed.
    const N: i64 = 60;
    let blob = Value::Binary(vec![7u8; 256 * 1024]);
    for n in 0..N {
        alice.publish_acked(TASKS, Value::Array(vec![Value::from(n), blob.clone()])).await;
    }
    // The hub has handed every message to a member's durable task.
    let d = skua_testkit::control::Deadline::new("every message handed to a member", Duration::from_secs(30));
    while server.state.metrics.deliveries.load(Ordering::Acquire) < N as u64 {
        d.tick().await;
    }
    let mut ledger = GroupLedger::default();
    // A third member joins: its replay takes every pending message nobody holds, those waiting
    // in `slow`'s queue included, and acks them.
    let mut third = agent(&server, "third", false).await;
    subscribe_group(&mut third, "pool").await;
    third.expect("replayStart").await;
    let replayed = loop {
        let f = third.next().await;
        match f.ty() {
            "message" => ledger.take("third", &mut third, &f).await,
            "replayEnd" => break f.int("replayed"),
            other => panic!("unexpected {other} in the replay: {f:?}"),
        }
    };
    assert!(replayed > 0, "the stalled member's queued messages were replayed to the newcomer");
    // Everyone reads at last, `slow` too: what it held before stalling, never what another
    // member acked (`GroupLedger::take` fails on a second delivery), until the whole group's
    // share is in.
    let all = tokio::time::timeout(Duration::from_secs(60), async {
        while ledger.owner.len() < N as usize {
            tokio::select! {
                ev = fast.next_event_within(Duration::from_secs(60)) => ledger.on_event("fast", &mut fast, ev).await,
                ev = slow.next_event_within(Duration::from_secs(60)) => ledger.on_event("slow", &mut slow, ev).await,
                ev = third.next_event_within(Duration::from_secs(60)) => ledger.on_event("third", &mut third, ev).await,
            }
        }
    })
    .await;
    assert!(all.is_ok(), "only {} of {N} messages reached the group", ledger.owner.len());
    assert_eq!(ledger.owner.keys().copied().collect::<Vec<_>>(), (0..N).collect::<Vec<_>>());
    // `slow`'s task may still hold live copies the others acked. With the others gone, a marker
    // goes to `slow` and queues behind them: it must come next, the copies skipped (a copy
    // before it fails in `GroupLedger::take`, named by its index rather than printed whole).
    server.close_settled(fast).await;
    server.close_settled(third).await;
    publish(&mut alice, N).await;
    loop {
        match slow.next_event().await {
            skua_testkit::Event::Frame(f) if f.ty() == "message" && f.get("data").as_i64() == Some(N) => {
                ack(&mut slow, &f).await;
                break;
            }
            ev => ledger.on_event("slow", &mut slow, Some(ev)).await,
        }
    }
    slow.assert_nothing_pending().await;
}

/// Found by the chaos harness (docs/reliability.md): a logged message that missed the bus (the
/// broker restarted before the subscribing node resubscribed) stayed pending, unheld, with
/// members connected, until some unrelated reconnect kicked the group (seconds to forever).
/// Here two nodes share the store but not a bus, so every message misses it; the durable
/// sweep delivers it anyway.
#[tokio::test]
async fn a_logged_message_that_missed_the_bus_reaches_a_connected_member_by_the_sweep() {
    let path = std::env::temp_dir().join(format!("skua-sweep-{}.db", uuid_like()));
    let store = format!("sqlite://{}", path.display());
    let (s1, s2) = (store.clone(), store);
    let subscriber_node = TestServer::builder()
        .settings(move |s| {
            s.node.store = Some(s1.clone());
            s.edge.durable_sweep_interval = Some("200ms".into());
        })
        .spawn()
        .await;
    let publisher_node = TestServer::builder().settings(move |s| s.node.store = Some(s2.clone())).spawn().await;
    let mut w = agent(&subscriber_node, "swept", false).await;
    subscribe_group(&mut w, "sweepers").await;
    let mut alice = publisher_node.auth("dev-token-alice").await;
    publish(&mut alice, 41).await;
    let m = w.next_of_within("message", Duration::from_secs(10)).await;
    assert_eq!(data(&m), 41);
    assert!(!is_replay(&m), "first delivery: {m:?}");
    ack(&mut w, &m).await;
    // Acked: the next sweeps find nothing more. Two more sweeps (each reads the backlog) have
    // run before the second look, whatever the machine's load (issue 35: no fixed quiet window).
    w.assert_nothing_pending().await;
    let sweeps = store_ops(&subscriber_node, "backlog");
    tokio::time::timeout(Duration::from_secs(30), async {
        while store_ops(&subscriber_node, "backlog") < sweeps + 2 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("two more sweeps within 30 s");
    w.assert_nothing_pending().await;
    drop((w, alice, publisher_node, subscriber_node));
    let _ = std::fs::remove_file(&path);
}

fn uuid_like() -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{}-{nanos}", std::process::id())
}

/// Found by the soak (docs/reliability.md): a live message dropped because the member's durable
/// queue was full was caught up from the store only after later live messages had gone out, so
/// the member got it out of order. With a queue of one, a burst overflows it every time.
#[tokio::test]
async fn a_member_whose_durable_queue_overflowed_still_gets_messages_in_order() {
    let server = TestServer::builder()
        .settings(|s| {
            s.edge.durable_queue = Some(1);
            s.edge.rate_limit = Some(100_000);
        })
        .spawn()
        .await;
    let mut w = agent(&server, "burst", false).await;
    subscribe_group(&mut w, "ordered").await;
    let mut alice = server.auth("dev-token-alice").await;
    const N: i64 = 300;
    for n in 0..N {
        alice.send(frame! {"type" => "publish", "topic" => TASKS, "data" => n}).await;
    }
    alice.assert_nothing_pending().await;
    let mut got = Vec::new();
    while got.len() < usize::try_from(N).expect("small") {
        let m = w.expect("message").await;
        assert!(!is_replay(&m), "a first delivery: {m:?}");
        got.push(data(&m));
        ack(&mut w, &m).await;
    }
    assert_eq!(got, (0..N).collect::<Vec<_>>(), "in publish order");
    assert!(server.state.metrics.durable_overflows.load(Ordering::Relaxed) > 0, "the queue overflowed at least once");
    let m = skua_testkit::http::Scrape::of(server.addr).await;
    assert!(m.value("skua_durable_overflows_total", &[]) > 0.0, "the overflow is on /metrics");
}

/// Found by the soak (docs/reliability.md, issue 18): in a group with a slow member, the other
/// member's catch-up after an overflow took messages routed to the slow one (waiting in its
/// queue, or dropped there) that were older than messages it had already got live, so they
/// reached it out of order. Member `b` is made slow by 16 MiB of its own logged messages on
/// another topic, which it does not read until `a` has a quarter of the group's messages (its
/// durable task waits for room, its group share piles up unclaimed); `a` reads all along. Each
/// member's stream stays in publish order, and every message reaches exactly one member, once.
#[tokio::test]
async fn each_member_of_a_group_with_a_slow_member_gets_its_share_in_order() {
    const FILL: &str = "demo/random/tasks";
    let server = TestServer::builder()
        .settings(|s| {
            s.edge.durable_queue = Some(1);
            s.edge.outbound_queue_messages = Some(4);
            s.edge.rate_limit = Some(100_000);
        })
        .spawn()
        .await;
    let mut a = agent(&server, "pair-a", false).await;
    subscribe_group(&mut a, "pair").await;
    let mut b = agent(&server, "pair-b", false).await;
    subscribe_group(&mut b, "pair").await;
    b.send(frame! {"type" => "subscribe", "topic" => FILL}).await;
    b.expect("subscribed").await;
    let mut alice = server.auth("dev-token-alice").await;
    let pad = "x".repeat(256 * 1024);
    for _ in 0..64 {
        alice.publish_acked(FILL, Value::from(pad.as_str())).await;
    }
    const N: usize = 400;
    let (tx, mut from_a) = tokio::sync::mpsc::channel(N);
    let reader = tokio::spawn(async move {
        loop {
            let m = a.next_of_within("message", Duration::from_secs(30)).await;
            ack(&mut a, &m).await;
            if tx.send(m).await.is_err() {
                return a;
            }
        }
    });
    for n in 0..N {
        alice.send(frame! {"type" => "publish", "topic" => TASKS, "data" => i64::try_from(n).expect("small")}).await;
    }
    alice.assert_nothing_pending().await;
    let (mut got_a, mut got_b) = (Vec::new(), Vec::new());
    while got_a.len() < N / 4 {
        let m = from_a.recv().await.expect("a's reader ended");
        assert!(!is_replay(&m), "a first delivery: {m:?}");
        got_a.push(data(&m));
    }
    while got_a.len() + got_b.len() < N {
        tokio::select! {
            m = from_a.recv() => {
                let m = m.expect("a's reader ended");
                assert!(!is_replay(&m), "a first delivery: {m:?}");
                got_a.push(data(&m));
            }
            m = b.next_of_within("message", Duration::from_secs(30)) => {
                ack(&mut b, &m).await;
                if m.str("topic") == TASKS {
                    assert!(!is_replay(&m), "a first delivery: {m:?}");
                    got_b.push(data(&m));
                }
            }
        }
    }
    for (name, got) in [("a", &got_a), ("b", &got_b)] {
        assert!(got.windows(2).all(|w| w[0] < w[1]), "member {name} got its share out of order: {got:?}");
    }
    let mut all: Vec<i64> = got_a.iter().chain(&got_b).copied().collect();
    all.sort_unstable();
    assert_eq!(all, (0..i64::try_from(N).expect("small")).collect::<Vec<_>>(), "each message once");
    assert!(!got_b.is_empty(), "the slow member took work too");
    assert!(server.state.metrics.durable_overflows.load(Ordering::Relaxed) > 0, "a queue overflowed at least once");
    drop(from_a);
    reader.abort();
}

/// The store operations `op` a node made so far.
fn store_ops(node: &TestServer, op: &str) -> u64 {
    let ops = node.state.metrics.backend_latency.snapshot();
    ops.into_iter().filter(|((slot, o), _)| *slot == "store" && *o == op).map(|(_, h)| h.count).sum()
}

/// A session that reconnects at once, before the node finished its old connection's cleanup
/// (the socket dropped, not settled), gets the message that connection held (unacked) first,
/// then what was published while it was away (the MQTT door's fast reconnect, for SDKs).
#[tokio::test]
async fn a_session_reconnecting_at_once_gets_what_its_old_connection_held_first() {
    let server = TestServer::start().await;
    let mut alice = server.auth("dev-token-alice").await;
    for round in 0..6 {
        let id = format!("worker-fast-{round}");
        let mut w = agent(&server, &id, false).await;
        w.subscribe(TASKS).await;
        publish(&mut alice, 1).await;
        let held = w.expect("message").await;
        assert_eq!(data(&held), 1);
        drop(w);
        publish(&mut alice, 2).await;
        let mut w = agent(&server, &id, true).await;
        let again = w.expect("message").await;
        assert_eq!((data(&again), is_replay(&again)), (1, true), "the unacked one first: {again:?}");
        let away = w.expect("message").await;
        assert_eq!(data(&away), 2, "then the one published while away");
        ack(&mut w, &again).await;
        ack(&mut w, &away).await;
        w.assert_nothing_pending().await;
        server.close_settled(w).await;
    }
}
