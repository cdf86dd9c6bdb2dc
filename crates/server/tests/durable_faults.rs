//! Durable-delivery faults against real Postgres (durable-delivery issue): a node SIGKILLed
//! while a persistent load-balanced group consumes a stream of logged messages, Postgres
//! restarting under publishers, a Postgres crash (`kill -9`) right after a burst of
//! acknowledged publishes (issue 36), and Postgres restarting during a wake (issue 16). They
//! need Postgres (`SKUA_TEST_POSTGRES_URL`, or its binaries for a private restartable
//! instance), Mosquitto and Redis; without them they skip loudly, under CI=true they fail.

use std::collections::BTreeSet;
use std::time::Duration;

use rmpv::Value;
use skua_testkit::cluster::{external_urls, unique_namespace};
use skua_testkit::postgres::TestDatabase;
use skua_testkit::process::{ServiceProcess, SkuaProcess};
use skua_testkit::skip::skip;
use skua_testkit::{TestServer, WsClient, frame};

const BIN: &str = env!("CARGO_BIN_EXE_skua");
const TASKS: &str = "demo/general/tasks";

async fn agent(url: &str, client_id: &str, reconnect: bool) -> WsClient {
    let mut c = WsClient::connect(url).await;
    c.auth_session("dev-token-agent", Some(client_id), reconnect).await;
    c
}

/// Reads what a member is sent for `wait`, acking every message; returns their data.
async fn consume(c: &mut WsClient, wait: Duration) -> Vec<u64> {
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match c.next_event_within(left).await {
            Some(skua_testkit::Event::Frame(f)) if f.ty() == "message" => {
                got.push(f.get("data").as_u64().expect("integer data"));
                c.send(frame! {"type" => "ack", "msgId" => f.str("msgId")}).await;
            }
            Some(skua_testkit::Event::Frame(_) | skua_testkit::Event::Heartbeat) => {}
            _ => return got,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_node_loses_no_acknowledged_message_of_a_persistent_group() {
    let Some((mqtt, redis)) = external_urls() else { return };
    // Dropped (with the database) when the test ends, pass or panic.
    let Some(db) = TestDatabase::migrated().await else { return };
    let store = db.url.clone();
    let ns = unique_namespace();
    let common = [
        "--dev",
        "--store",
        &store,
        "--bus",
        &mqtt,
        "--presence",
        &redis,
        "--namespace",
        &ns,
        "--node-ttl",
        "4s",
        "--node-refresh",
        "1s",
        "--rate-limit",
        "1000",
    ];
    let mut nodes: Vec<SkuaProcess> = (0..3)
        .map(|i| {
            let id = format!("durable-kill-{i}");
            let mut args = common.to_vec();
            args.extend(["--node-id", id.as_str()]);
            SkuaProcess::spawn(BIN, &args)
        })
        .collect();
    // w1 on node 0 (to be killed), w2 on node 1; the publisher on node 2.
    let mut w1 = agent(&nodes[0].url(), "w1", false).await;
    let mut w2 = agent(&nodes[1].url(), "w2", false).await;
    for w in [&mut w1, &mut w2] {
        w.send(frame! {"type" => "subscribe", "topic" => TASKS, "loadBalance" => true, "loadBalanceGroup" => "fleet"})
            .await;
        w.expect("subscribed").await;
    }
    let mut publisher = WsClient::connect(&nodes[2].url()).await;
    publisher.auth_ok("dev-token-alice", 2).await;

    let mut acked = BTreeSet::new();
    let mut got = Vec::new();
    for i in 0..300u64 {
        publisher.send(frame! {"type" => "publish", "topic" => TASKS, "data" => i, "msgRef" => i.to_string()}).await;
        let f = publisher.next().await;
        assert_eq!(f.ty(), "published", "{f:?}");
        acked.insert(i);
        if i == 150 {
            // Mid-stream: w1's node dies with whatever w1 held unacked.
            got.extend(consume(&mut w1, Duration::from_millis(50)).await);
            nodes[0].kill9();
        }
    }
    got.extend(consume(&mut w2, Duration::from_millis(200)).await);
    // w1 comes back on another node and replays; w2 keeps consuming.
    let mut w1 = agent(&nodes[2].url(), "w1", true).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !acked.iter().all(|i| got.contains(i)) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "missing: {:?}",
            acked.iter().filter(|i| !got.contains(i)).collect::<Vec<_>>()
        );
        got.extend(consume(&mut w1, Duration::from_millis(300)).await);
        got.extend(consume(&mut w2, Duration::from_millis(300)).await);
    }
    // Every message got a `published` ack and was delivered (and acked) at least once.
    let distinct: BTreeSet<u64> = got.iter().copied().collect();
    assert_eq!(distinct, acked);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishes_to_logged_topics_fail_clearly_while_postgres_is_down_and_resume_by_themselves() {
    let Some(mut pg) = private_postgres().await else { return };
    let store = pg.url();
    let server = TestServer::builder().settings(move |s| s.node.store = Some(store)).spawn().await;
    let mut w = server.connect().await;
    w.auth_session("dev-token-agent", Some("pgw"), false).await;
    w.subscribe(TASKS).await;
    let mut alice = server.auth("dev-token-alice").await;
    alice.publish_acked(TASKS, Value::from(1)).await;
    assert_eq!(w.expect("message").await.get("data").as_u64(), Some(1));

    pg.interrupt();
    for i in 0..3 {
        alice
            .send(frame! {"type" => "publish", "topic" => TASKS, "data" => 100 + i, "msgRef" => format!("down-{i}")})
            .await;
        let f = alice.next_of_within("error", Duration::from_secs(15)).await;
        assert_eq!((f.str("error"), f.str("msgRef")), ("store_unavailable", format!("down-{i}").as_str()), "{f:?}");
        assert!(f.str("hint").contains("store"), "{f:?}");
    }
    // Unlogged topics are unaffected.
    alice.publish_acked("demo/general/messages", Value::from(5)).await;
    w.assert_nothing_pending().await;

    pg.restart();
    // The pool reconnects by itself: publishing succeeds again, with no client action.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut n = 200u64;
    loop {
        alice.send(frame! {"type" => "publish", "topic" => TASKS, "data" => n, "msgRef" => n.to_string()}).await;
        let f = alice.next_of_within_any(&["published", "error"], Duration::from_secs(15)).await;
        if f.ty() == "published" {
            break;
        }
        assert_eq!(f.str("error"), "store_unavailable", "{f:?}");
        assert!(tokio::time::Instant::now() < deadline, "the store did not come back");
        tokio::time::sleep(Duration::from_millis(200)).await;
        n += 1;
    }
    let m = w.next_of_within("message", Duration::from_secs(10)).await;
    assert_eq!(m.get("data").as_u64(), Some(n), "only the publish that was acknowledged arrives");
    assert!(m.has("msgId"));
}

/// Issue 36, no durability trade: one connection pipelines a burst of logged publishes, and the
/// moment [`CRASH_AFTER`] `published` receipts are in, the whole Postgres server is SIGKILLed
/// (postmaster, backends and WAL writer at once: what it held only in memory is gone) and
/// started again on the same data directory (crash recovery). Every publish is answered exactly
/// once, in order: `published`, or `store_unavailable` for those whose commit the crash cut
/// short; and every message that got `published` is in `log_messages` after the restart. A
/// receipt sent before the commit's WAL flush (`synchronous_commit = off`, a receipt before
/// the commit, an answer for the wrong message) fails it. The private server runs with
/// `fsync = off`: a process crash keeps what Postgres wrote to the kernel (only a machine
/// crash needs the fsync), so the test is about when skua answers, not about the disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acknowledged_logged_publish_survives_a_postgres_crash() {
    use sqlx::Connection;
    const BURST: u64 = 3000;
    const CRASH_AFTER: usize = 300;
    let Some(mut pg) = private_postgres().await else { return };
    let store = pg.url();
    let server = TestServer::builder()
        .settings(move |s| {
            s.node.store = Some(store);
            // The burst goes out at once: no rate limit in the way.
            s.edge.rate_limit = Some(1_000_000);
        })
        .spawn()
        .await;
    let mut alice = server.auth("dev-token-alice").await;
    for i in 0..BURST {
        alice.send(frame! {"type" => "publish", "topic" => TASKS, "data" => i, "msgRef" => i.to_string()}).await;
    }
    let (mut acked, mut refused, mut crashed) = (BTreeSet::new(), 0u64, false);
    for i in 0..BURST {
        let f = alice.next_of_within_any(&["published", "error"], Duration::from_secs(60)).await;
        assert_eq!(f.str("msgRef"), i.to_string(), "one answer per publish, in order: {f:?}");
        if f.ty() == "published" {
            acked.insert(i);
        } else {
            assert_eq!(f.str("error"), "store_unavailable", "{f:?}");
            assert!(crashed, "refused before the crash: {f:?}");
            refused += 1;
        }
        if !crashed && acked.len() == CRASH_AFTER {
            pg.crash();
            crashed = true;
            pg.restart();
        }
    }
    alice.assert_nothing_pending().await;
    assert!(crashed, "the crash came after {CRASH_AFTER} receipts");

    let mut conn = sqlx::PgConnection::connect(&pg.url()).await.expect("connect after the restart");
    let rows: Vec<Vec<u8>> =
        sqlx::query_scalar("SELECT data FROM log_messages").fetch_all(&mut conn).await.expect("read");
    let stored: Vec<u64> = rows
        .iter()
        .map(|d| rmpv::decode::read_value(&mut d.as_slice()).ok().and_then(|v| v.as_u64()).expect("integer data"))
        .collect();
    let distinct: BTreeSet<u64> = stored.iter().copied().collect();
    assert_eq!(distinct.len(), stored.len(), "a message stored twice");
    let lost: Vec<&u64> = acked.difference(&distinct).collect();
    assert!(lost.is_empty(), "{} acknowledged messages lost in the crash: {lost:?}", lost.len());
    eprintln!("{} acknowledged, {refused} refused (store_unavailable), {} stored", acked.len(), stored.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_under_a_stream_of_logged_publishes_loses_nothing() {
    use skua_testkit::Event;
    let Some((mqtt, redis)) = external_urls() else { return };
    // Dropped (with the database) when the test ends, pass or panic.
    let Some(db) = TestDatabase::migrated().await else { return };
    let store = db.url.clone();
    let ns = unique_namespace();
    let settings = move |s: &mut skua_server::Settings| {
        s.node.store = Some(store.clone());
        s.node.bus = Some(mqtt.clone());
        s.node.presence = Some(redis.clone());
        s.edge.namespace = Some(ns.clone());
        s.edge.drain_delay = Some("300ms".into());
        s.edge.shutdown_grace = Some("5s".into());
        s.edge.rate_limit = Some(1000);
    };
    let (s0, s1, s2) = (settings.clone(), settings.clone(), settings);
    let restarting = TestServer::builder().settings(move |s| s0(s)).spawn().await;
    let survivor = TestServer::builder().settings(move |s| s1(s)).spawn().await;
    let survivor_url = survivor.url();
    // A persistent subscriber and the publisher, both on the node that restarts.
    let mut sub = agent(&restarting.url(), "rolling", false).await;
    sub.subscribe(TASKS).await;

    // A steady stream (one every 5 ms) of acknowledged logged publishes; on the 1012 close the
    // publisher reconnects to the survivor, re-sends what was not acknowledged, and goes on.
    let (progress_tx, mut progress) = tokio::sync::watch::channel(0usize);
    let (first_url, second_url) = (restarting.url(), survivor_url.clone());
    let publisher = tokio::spawn(async move {
        let mut client = WsClient::connect(&first_url).await;
        client.auth_ok("dev-token-alice", 2).await;
        let (mut acked, mut closes, mut after_close) = (BTreeSet::new(), 0, 0);
        let mut tick = tokio::time::interval(Duration::from_millis(5));
        let mut i = 0u64;
        while closes == 0 || after_close < 30 {
            assert!(i < 5000, "no restart seen after {i} publishes");
            tick.tick().await;
            let publish = frame! {"type" => "publish", "topic" => TASKS, "data" => i, "msgRef" => i.to_string()};
            // A send that finds the socket gone reads the close that is waiting.
            let sent = client.try_send(publish).await;
            match client.next_event_within(Duration::from_secs(10)).await {
                Some(Event::Frame(f)) if sent && f.ty() == "published" => {
                    acked.insert(i);
                    i += 1;
                    after_close += usize::from(closes > 0);
                    let _ = progress_tx.send(acked.len());
                }
                Some(Event::Close(1012, _)) => {
                    closes += 1;
                    client = WsClient::connect(&second_url).await;
                    client.auth_ok("dev-token-alice", 2).await;
                }
                other => panic!("publish {i}: unexpected {other:?}"),
            }
        }
        acked
    });

    progress.wait_for(|n| *n >= 30).await.expect("the publisher made progress");
    let drained = tokio::spawn(restarting.shutdown());
    let _replacement = TestServer::builder().settings(move |s| s2(s)).spawn().await;

    // The subscriber acks what it gets; on 1012 it reconnects to the survivor with its clientId
    // and reconnect:true, and its stored messages are delivered there.
    let mut got = BTreeSet::new();
    let mut acked = None;
    let mut reconnects = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if acked.is_none() && publisher.is_finished() {
            acked = Some(publisher.await.expect("publisher task"));
            break;
        }
        match sub.next_event_within(Duration::from_millis(200)).await {
            Some(Event::Frame(f)) if f.ty() == "message" => {
                got.insert(f.get("data").as_u64().expect("integer data"));
                // An ack that finds the socket closing is lost; the message is delivered again
                // after the reconnect, as it is unacked.
                let _ = sub.try_send(frame! {"type" => "ack", "msgId" => f.str("msgId")}).await;
            }
            Some(Event::Close(code, _)) => {
                assert_eq!(code, 1012);
                reconnects += 1;
                sub = agent(&survivor_url, "rolling", true).await;
            }
            _ => {}
        }
        assert!(tokio::time::Instant::now() < deadline, "the publisher never finished");
    }
    let acked = acked.expect("publisher result");
    while !acked.is_subset(&got) {
        assert!(tokio::time::Instant::now() < deadline, "missing: {:?}", acked.difference(&got).collect::<Vec<_>>());
        for i in consume(&mut sub, Duration::from_millis(300)).await {
            got.insert(i);
        }
    }
    assert_eq!(reconnects, 1, "the subscriber moved once, from the restarted node to the survivor");
    assert!(drained.await.expect("shutdown task"), "the restarting node drained within its grace");
}

/// A cluster's shared services: nodes on one store, bus, presence and namespace.
struct Cluster<'a> {
    store: &'a str,
    mqtt: &'a str,
    redis: &'a str,
    ns: &'a str,
}

impl Cluster<'_> {
    /// A `skua serve --dev` node `id` of the cluster, without gRPC, with `extra` flags.
    fn node(&self, id: &str, extra: &[&str]) -> SkuaProcess {
        let mut args = vec!["--dev", "--store", self.store, "--bus", self.mqtt, "--presence", self.redis];
        args.extend(["--namespace", self.ns, "--grpc-listen", "", "--node-id", id]);
        args.extend_from_slice(extra);
        SkuaProcess::spawn(BIN, &args)
    }
}

// ---- trigger webhooks of logged topics (issue 14, N45) ----

/// A project whose app posts every publish's trigger to `url` with a 500 ms timeout; `jobs`
/// is logged. Written to `dir/hooks.toml`; returns its path.
fn trigger_fixtures(dir: &std::path::Path, url: &str) -> String {
    std::fs::create_dir_all(dir).expect("fixtures dir");
    let path = dir.join("hooks.toml");
    let text = format!(
        r#"
[[projects]]
id = "hooks"

[[projects.apps]]
id = "hooks-app"
slug = "h"
topics = ["jobs"]
logged_topics = ["jobs"]
webhook_secret = "s"
trigger_webhook = {{ url = "{url}", timeout_ms = 500 }}

[[projects.apps.rooms]]
slug = "r"

[[actors]]
id = "pub"
project = "hooks"
type = "device"
tokens = ["hooks-token-pub"]
"#
    );
    std::fs::write(&path, text).expect("write fixtures");
    path.display().to_string()
}

/// Publishes one logged message on `node`; returns once `published` arrived.
async fn publish_logged(node: &SkuaProcess) {
    let mut c = WsClient::connect(&node.url()).await;
    c.auth_ok("hooks-token-pub", 2).await;
    c.publish_acked("h/r/jobs", "kept".into()).await;
}

fn delivery_id(r: &skua_testkit::RecordedRequest) -> String {
    r.json()["deliveryId"].as_str().expect("deliveryId").to_owned()
}

/// N45: the node SIGKILLed right after `published`, its first attempt hanging at the receiver;
/// the next run of the single node (same SQLite file) takes the outbox over and delivers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_logged_trigger_survives_kill_9_of_a_single_node() {
    use skua_testkit::webhook::{Mode, WebhookReceiver};
    let receiver = WebhookReceiver::start(Mode::Hang).await;
    let dir = std::env::temp_dir().join(format!("skua-trigger-crash-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let fixtures = trigger_fixtures(&dir, &receiver.url("/t"));
    let store = format!("sqlite://{}/skua.db", dir.display());
    let args = ["--dev", "--store", store.as_str(), "--grpc-listen", "", "--fixtures", fixtures.as_str()];
    let mut first = SkuaProcess::spawn(BIN, &args);
    publish_logged(&first).await;
    let hanging = receiver.wait_for(1).await;
    let msg_id = delivery_id(&hanging[0]);
    assert_eq!(hanging[0].json()["msgId"], msg_id.as_str(), "the first run's attempt (never answered)");
    first.kill9();

    receiver.set_mode(Mode::Ok(serde_json::json!({})));
    let _second = SkuaProcess::spawn(BIN, &args);
    let got = receiver.wait_for(2).await;
    assert_eq!(delivery_id(&got[1]), msg_id, "delivered by the next run, same deliveryId");
    assert!(got[1].signature_valid("s"));
    assert_eq!(got[1].json()["msgId"], msg_id.as_str());
    let _ = std::fs::remove_dir_all(&dir);
}

/// N45 in a cluster: node A SIGKILLed while its attempt hangs; node B's outbox scan takes the
/// trigger over once A's lease lapses and delivers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_logged_trigger_of_a_killed_node_is_delivered_by_the_other_node() {
    use skua_testkit::webhook::{Mode, WebhookReceiver};
    let Some((mqtt, redis)) = external_urls() else { return };
    let Some(db) = TestDatabase::migrated().await else { return };
    let receiver = WebhookReceiver::start(Mode::Hang).await;
    let dir = std::env::temp_dir().join(format!("skua-trigger-cluster-{}", std::process::id()));
    let fixtures = trigger_fixtures(&dir, &receiver.url("/t"));
    let ns = unique_namespace();
    let store = db.url.clone();
    let cluster = Cluster { store: &store, mqtt: &mqtt, redis: &redis, ns: &ns };
    let node = |id: &str| {
        let extra = ["--fixtures", fixtures.as_str(), "--trigger-lease", "1s", "--trigger-scan-interval", "200ms"];
        cluster.node(id, &[&extra[..], &["--webhook-trigger-first-retry", "1s"]].concat())
    };
    let mut a = node("trigger-a");
    let _b = node("trigger-b");
    publish_logged(&a).await;
    let hanging = receiver.wait_for(1).await;
    let msg_id = delivery_id(&hanging[0]);
    a.kill9();

    receiver.set_mode(Mode::Ok(serde_json::json!({})));
    let got = receiver.wait_for(2).await;
    assert_eq!(delivery_id(&got[1]), msg_id, "delivered by the surviving node, same deliveryId");
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- wake while Postgres restarts (issue 16, N47) ----

/// A private Postgres, started and migrated, or `None` (skipped loudly) without its binaries.
async fn private_postgres() -> Option<ServiceProcess> {
    let Some(pg) = ServiceProcess::postgres() else {
        skip("no Postgres binaries (/usr/lib/postgresql/*/bin) or no postgres user");
        return None;
    };
    // The first connection can race the server's startup.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while skua_store::migrate(&pg.url()).await.is_err() {
        assert!(tokio::time::Instant::now() < deadline, "private Postgres did not come up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Some(pg)
}

/// A persistent presence announce woken at `wake_url` (N46).
fn wakeable(wake_url: &str, timeout_ms: u64) -> Value {
    frame! {
        "persistent" => true,
        "wake" => frame! {"url" => wake_url, "timeoutMs" => timeout_ms},
    }
}

/// The next presence event of agent-1 that `observer` gets: (`event`, `status`).
async fn member_event(observer: &mut WsClient, within: Duration) -> (String, String) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let f = observer.next_of_within("presence", left).await;
        let data = f.get("data");
        if data["actor_token_id"].as_str() == Some("agent-1") {
            return (f.str("event").to_owned(), data["status"].as_str().unwrap_or_default().to_owned());
        }
    }
}

/// A `skua serve --dev` node on `store`, its observer (alice, present in `general`) and an
/// agent-1 member `sleepy` of `general` woken at `wake_url`, disconnected: offline.
async fn sleeping_member(store: &str, wake_url: &str, timeout_ms: u64) -> (SkuaProcess, WsClient) {
    let node = SkuaProcess::spawn(BIN, &["--dev", "--store", store, "--grpc-listen", ""]);
    let mut alice = WsClient::connect(&node.url()).await;
    alice.auth_ok("dev-token-alice", 2).await;
    alice.send(frame! {"type" => "presence", "roomId" => "general", "data" => frame! {"who" => "alice"}}).await;
    alice.expect("presence").await;
    let mut worker = agent(&node.url(), "sleepy", false).await;
    worker.send(frame! {"type" => "presence", "roomId" => "general", "data" => wakeable(wake_url, timeout_ms)}).await;
    assert_eq!(member_event(&mut alice, Duration::from_secs(10)).await, ("join".into(), "online".into()));
    drop(worker);
    assert_eq!(member_event(&mut alice, Duration::from_secs(10)).await, ("update".into(), "offline".into()));
    (node, alice)
}

/// Publishes an unlogged message (v2, with a msgRef) into `general` and waits for `published`.
async fn publish_unlogged(c: &mut WsClient, msg_ref: &str) {
    publish_unlogged_to(c, "demo/general/messages", msg_ref).await;
}

/// Publishes an unlogged message (v2, with a msgRef) to `topic` and waits for `published`
/// (frames before it are passed over).
async fn publish_unlogged_to(c: &mut WsClient, topic: &str, msg_ref: &str) {
    c.send(frame! {"type" => "publish", "topic" => topic, "data" => 1, "msgRef" => msg_ref}).await;
    let f = c.next_of_within_any(&["published", "error"], Duration::from_secs(15)).await;
    assert_eq!((f.ty(), f.str("msgRef")), ("published", msg_ref), "{f:?}");
}

/// Polls `/metrics` until `skua_wakes_total{outcome}` reaches `at_least` (at most 30 s).
async fn wait_for_wakes(node: &SkuaProcess, outcome: &str, at_least: f64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let scrape = skua_testkit::http::Scrape::of(node.addr).await;
        if scrape.value_or_zero("skua_wakes_total", &[("outcome", outcome)]) >= at_least {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "skua_wakes_total{{outcome={outcome:?}}} < {at_least}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// N47 with Postgres down at the publish: the wake check the store cannot answer is kept and run
/// again once Postgres is back, so the sleeping member is woken exactly once, after the restart;
/// not connecting, it is back to offline at its timeout (never left waking), and it is wakeable
/// again; the node serves throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_while_postgres_is_down_wakes_the_sleeping_member_once_postgres_is_back() {
    use skua_testkit::webhook::{Mode, WebhookReceiver};
    let Some(mut pg) = private_postgres().await else { return };
    let receiver = WebhookReceiver::start(Mode::Ok(serde_json::json!({}))).await;
    let (node, mut alice) = sleeping_member(&pg.url(), &receiver.url("/wake"), 2000).await;

    pg.interrupt();
    publish_unlogged(&mut alice, "during-outage").await;
    // The check met the unreachable store and was kept for later; nothing was posted.
    wait_for_wakes(&node, "deferred", 1.0).await;
    assert!(receiver.requests().is_empty(), "woken while Postgres was down");

    pg.restart();
    let wake = receiver.wait_for(1).await;
    let body = wake[0].json();
    assert_eq!((body["clientId"].as_str(), body["topic"].as_str()), (Some("sleepy"), Some("messages")), "{body}");
    assert_eq!(member_event(&mut alice, Duration::from_secs(10)).await, ("waking".into(), "waking".into()));
    // It does not connect: back to offline at its timeout, woken once.
    assert_eq!(member_event(&mut alice, Duration::from_secs(15)).await, ("update".into(), "offline".into()));
    assert_eq!(receiver.requests().len(), 1, "woken more than once");
    wait_for_wakes(&node, "timed_out", 1.0).await;

    // Still serving, and the member is wakeable again.
    publish_unlogged(&mut alice, "after").await;
    assert_eq!(member_event(&mut alice, Duration::from_secs(10)).await, ("waking".into(), "waking".into()));
    assert_eq!(receiver.wait_for(2).await.len(), 2);
}

/// N47 with Postgres restarting between the waking mark and the timeout: the wake request fails
/// (500) while Postgres is down, so the member cannot be set back to offline then; the publisher
/// still gets `42950 wake_failed`, and once Postgres is back the sweep sets the member offline
/// (never left waking); it is wakeable again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_restart_during_a_wake_leaves_the_member_offline_and_wakeable() {
    use skua_testkit::webhook::{Mode, WebhookReceiver};
    let Some(mut pg) = private_postgres().await else { return };
    let receiver = WebhookReceiver::start(Mode::Status(500)).await;
    let (node, mut alice) = sleeping_member(&pg.url(), &receiver.url("/wake"), 4000).await;

    publish_unlogged(&mut alice, "wakes").await;
    assert_eq!(member_event(&mut alice, Duration::from_secs(10)).await, ("waking".into(), "waking".into()));
    pg.interrupt();
    // The attempts fail (500) while Postgres is down: the publisher is told all the same.
    let f = alice.next_of_within("error", Duration::from_secs(30)).await;
    assert_eq!((f.int("code"), f.str("msgRef"), f.str("topic")), (42950, "wakes", "demo/general/messages"), "{f:?}");
    wait_for_wakes(&node, "failed", 1.0).await;
    // Unlogged publishes go on while the store is away (into another room: one into `general`
    // would wake the member again once Postgres is back, as the test above shows).
    publish_unlogged_to(&mut alice, "demo/random/messages", "meanwhile").await;

    pg.restart();
    assert_eq!(member_event(&mut alice, Duration::from_secs(30)).await, ("update".into(), "offline".into()));
    receiver.set_mode(Mode::Ok(serde_json::json!({})));
    let before = receiver.requests().len();
    publish_unlogged(&mut alice, "again").await;
    assert_eq!(member_event(&mut alice, Duration::from_secs(10)).await, ("waking".into(), "waking".into()));
    let after = receiver.wait_for(before + 1).await;
    assert_eq!(after.len(), before + 1, "one wake request for the new waking period");
}

/// N46/N47 with Postgres down when a persistent member's last connection ends: the member
/// cannot be stored offline then, so no `leave` goes out; once Postgres is back it is set
/// offline (an `update`), not left `online` (which no publish would wake), and a publish wakes
/// it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_leaving_while_postgres_is_down_goes_offline_once_postgres_is_back_and_is_wakeable() {
    use skua_testkit::webhook::{Mode, WebhookReceiver};
    let Some(mut pg) = private_postgres().await else { return };
    let receiver = WebhookReceiver::start(Mode::Ok(serde_json::json!({}))).await;
    let node = SkuaProcess::spawn(BIN, &["--dev", "--store", &pg.url(), "--grpc-listen", ""]);
    let mut alice = WsClient::connect(&node.url()).await;
    alice.auth_ok("dev-token-alice", 2).await;
    alice.send(frame! {"type" => "presence", "roomId" => "general", "data" => frame! {"who" => "alice"}}).await;
    alice.expect("presence").await;
    let mut worker = agent(&node.url(), "leaver", false).await;
    let wake_url = receiver.url("/wake");
    worker.send(frame! {"type" => "presence", "roomId" => "general", "data" => wakeable(&wake_url, 2000)}).await;
    assert_eq!(member_event(&mut alice, Duration::from_secs(10)).await, ("join".into(), "online".into()));

    pg.interrupt();
    drop(worker);
    let scrape_deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let scrape = skua_testkit::http::Scrape::of(node.addr).await;
        if scrape.value("skua_members_offline_deferred_total", &[]) >= 1.0 {
            break;
        }
        assert!(tokio::time::Instant::now() < scrape_deadline, "the going offline was not deferred");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    pg.restart();
    // The first event about the member after its disconnect: offline, not leave.
    assert_eq!(member_event(&mut alice, Duration::from_secs(30)).await, ("update".into(), "offline".into()));
    publish_unlogged(&mut alice, "wake-the-leaver").await;
    assert_eq!(member_event(&mut alice, Duration::from_secs(10)).await, ("waking".into(), "waking".into()));
    let wake = receiver.wait_for(1).await;
    assert_eq!(wake[0].json()["clientId"].as_str(), Some("leaver"));
}

/// N46/N47 with the node holding a sleeping member's last connection `kill -9`ed: in a cluster
/// (Mosquitto, Redis, Postgres) the member, connected to node A, is seen `offline` by an
/// observer on node B once A's lease lapses (not `leave`), and a publish on B wakes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_whose_node_was_killed_is_offline_and_woken_by_a_publish_on_another_node() {
    use skua_testkit::webhook::{Mode, WebhookReceiver};
    let Some((mqtt, redis)) = external_urls() else { return };
    let Some(db) = TestDatabase::migrated().await else { return };
    let receiver = WebhookReceiver::start(Mode::Ok(serde_json::json!({}))).await;
    let ns = unique_namespace();
    let store = db.url.clone();
    let cluster = Cluster { store: &store, mqtt: &mqtt, redis: &redis, ns: &ns };
    let node = |id: &str| cluster.node(id, &["--node-ttl", "2s", "--node-refresh", "500ms"]);
    let mut a = node("wake-a");
    let b = node("wake-b");
    let mut alice = WsClient::connect(&b.url()).await;
    alice.auth_ok("dev-token-alice", 2).await;
    alice.send(frame! {"type" => "presence", "roomId" => "general", "data" => frame! {"who" => "alice"}}).await;
    alice.expect("presence").await;
    let mut worker = agent(&a.url(), "killed-holder", false).await;
    let wake_url = receiver.url("/wake");
    worker.send(frame! {"type" => "presence", "roomId" => "general", "data" => wakeable(&wake_url, 2000)}).await;
    assert_eq!(member_event(&mut alice, Duration::from_secs(10)).await, ("join".into(), "online".into()));

    a.kill9();
    drop(worker);
    // The first event about the member after its node died: offline, not leave.
    assert_eq!(member_event(&mut alice, Duration::from_secs(20)).await, ("update".into(), "offline".into()));
    publish_unlogged(&mut alice, "wake-after-kill").await;
    assert_eq!(member_event(&mut alice, Duration::from_secs(10)).await, ("waking".into(), "waking".into()));
    let wake = receiver.wait_for(1).await;
    let body = wake[0].json();
    assert_eq!(
        (body["clientId"].as_str(), body["topic"].as_str()),
        (Some("killed-holder"), Some("messages")),
        "{body}"
    );
    // Not connecting, it is back to offline at its timeout.
    assert_eq!(member_event(&mut alice, Duration::from_secs(15)).await, ("update".into(), "offline".into()));
}
