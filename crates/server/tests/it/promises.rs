//! Promises of docs/ that had no test (issue 22, item 3), each seen failing against a build that
//! breaks it.

use std::time::Duration;

use skua_control::pb;
use skua_testkit::cluster::{external_urls, unique_namespace};
use skua_testkit::control::Deadline;
use skua_testkit::http::{Scrape, get};
use skua_testkit::postgres::TestDatabase;
use skua_testkit::proxy::TcpProxy;
use skua_testkit::{Event, TestServer, WsClient, frame};

/// `max_subscriptions_per_connection`: a subscribe past the limit gets `too_many_subscriptions`
/// naming the topic; re-subscribing a held topic does not count; an unsubscribe frees a slot.
#[tokio::test]
async fn a_subscribe_past_the_per_connection_limit_is_refused_with_too_many_subscriptions() {
    let server = TestServer::builder().settings(|s| s.edge.max_subscriptions_per_connection = Some(2)).spawn().await;
    let mut c = server.auth("dev-token-alice").await;
    c.subscribe("demo/general/messages").await;
    c.subscribe("demo/general/events").await;
    c.send(frame! {"type" => "subscribe", "topic" => "demo/general/status"}).await;
    let e = c.expect_error("too_many_subscriptions").await;
    assert_eq!(e.str("topic"), "demo/general/status", "{e:?}");
    c.subscribe("demo/general/messages").await;
    c.send(frame! {"type" => "unsubscribe", "topic" => "demo/general/events"}).await;
    c.expect("unsubscribed").await;
    c.subscribe("demo/general/status").await;
    c.assert_nothing_pending().await;
}

fn ok<T>(r: Result<tonic::Response<T>, tonic::Status>) -> T {
    r.unwrap_or_else(|s| panic!("{:?}: {}", s.code(), s.message())).into_inner()
}

/// A single node serving the control plane: a change is installed on it before the RPC returns.
async fn with_control() -> (TestServer, skua_testkit::control::Control) {
    let server = TestServer::builder().grpc().spawn().await;
    let control = server.control().await;
    (server, control)
}

/// Announces presence in `room` and waits for the connection's own `join`.
async fn join(c: &mut WsClient, room: &str) {
    c.send(frame! {"type" => "presence", "roomId" => room, "data" => frame! {"s" => 1}}).await;
    let f = c.next_of("presence").await;
    assert_eq!(f.str("event"), "join", "{f:?}");
}

/// The `actor_token_id` of a presence event.
fn presence_actor(f: &skua_testkit::Frame) -> &str {
    f.get("data")["actor_token_id"].as_str().unwrap_or("")
}

/// control-plane.md: project deleted → close 4001 `project_not_found`, with no frame before it.
#[tokio::test]
async fn deleting_the_project_closes_its_connections_4001_project_not_found() {
    let (server, mut control) = with_control().await;
    let mut alice = server.auth("dev-token-alice").await;
    alice.subscribe("demo/general/messages").await;
    ok(control.delete_project(pb::DeleteProjectRequest { project_id: "demo-project".into(), force: true }).await);
    match alice.next_event().await {
        Event::Close(code, reason) => assert_eq!((code, reason.as_str()), (4001, "project_not_found")),
        other => panic!("no frame precedes the close: {other:?}"),
    }
}

/// control-plane.md: a deleted room ends each subscription in it with `unknown_topic` 42940
/// (topic, hint); subscriptions elsewhere stay.
#[tokio::test]
async fn deleting_a_room_ends_its_subscriptions_with_unknown_topic() {
    let (server, mut control) = with_control().await;
    let mut bob = server.auth("dev-token-bob").await;
    bob.subscribe("demo/random/messages").await;
    bob.subscribe("demo/random/events").await;
    bob.subscribe("demo/general/messages").await;
    ok(control
        .delete_room(pb::DeleteRoomRequest { app: "demo".into(), slug: "random".into(), ..Default::default() })
        .await);
    let mut topics = Vec::new();
    for _ in 0..2 {
        let f = bob.expect_error("unknown_topic").await;
        assert_eq!(f.int("code"), 42940, "{f:?}");
        assert!(!f.str("hint").is_empty(), "{f:?}");
        topics.push(f.str("topic").to_owned());
    }
    topics.sort();
    assert_eq!(topics, ["demo/random/events", "demo/random/messages"]);
    bob.assert_nothing_pending().await;
    let mut alice = server.auth("dev-token-alice").await;
    alice.publish_acked("demo/general/messages", "still".into()).await;
    assert_eq!(bob.expect("message").await.str("data"), "still");
}

/// Makes `general` private: its first grant, for alice.
async fn make_general_private(control: &mut skua_testkit::control::Control) {
    ok(control
        .create_grant(pb::CreateGrantRequest {
            app: "demo".into(),
            room: "general".into(),
            actor_id: "alice".into(),
            permission: "pubSub".into(),
            ..Default::default()
        })
        .await);
}

/// control-plane.md: a room made private (its first grant) ends the subscriptions of actors
/// without a grant: v2 `unknown_topic` 42940, v1 `not_authorized` with the topic.
#[tokio::test]
async fn a_room_made_private_ends_ungranted_subscriptions_with_the_v2_and_v1_errors() {
    let (server, mut control) = with_control().await;
    let mut bob = server.auth("dev-token-bob").await;
    bob.subscribe("demo/general/messages").await;
    let mut carol = server.connect().await;
    carol.auth_ok("dev-token-carol", 1).await;
    carol.subscribe("demo/general/status").await;
    carol.subscribe("demo/random/status").await;
    make_general_private(&mut control).await;
    let f = bob.expect_error("unknown_topic").await;
    assert_eq!((f.int("code"), f.str("topic")), (42940, "demo/general/messages"), "{f:?}");
    let f = carol.expect_error("not_authorized").await;
    assert_eq!(f.str("topic"), "demo/general/status", "v1 form: {f:?}");
    assert!(!f.has("code"), "v1 form has no code: {f:?}");
    bob.assert_nothing_pending().await;
    carol.assert_nothing_pending().await;
    // The granted actor keeps the room; carol keeps her public one.
    let mut alice = server.auth("dev-token-alice").await;
    alice.subscribe("demo/general/messages").await;
    alice.publish_acked("demo/random/status", "public".into()).await;
    assert_eq!(carol.expect("message").await.str("data"), "public");
}

/// control-plane.md: "a presence room no longer readable is left (`leave` sent)": an actor
/// whose room became private without a grant for it leaves, and the members left see it.
#[tokio::test]
async fn a_room_made_private_leaves_the_presence_of_ungranted_actors() {
    let (server, mut control) = with_control().await;
    let mut alice = server.auth("dev-token-alice").await;
    join(&mut alice, "general").await;
    let mut bob = server.auth("dev-token-bob").await;
    join(&mut bob, "general").await;
    assert_eq!(presence_actor(&alice.next_of("presence").await), "bob");
    make_general_private(&mut control).await;
    let l = alice.next_of("presence").await;
    assert_eq!((l.str("event"), presence_actor(&l)), ("leave", "bob"), "{l:?}");
    alice.send(frame! {"type" => "getPresence", "roomId" => "general"}).await;
    let list = alice.expect("presenceList").await;
    let actors: Vec<&str> =
        list.get("data").as_array().unwrap().iter().filter_map(|e| e["actorTokenId"].as_str()).collect();
    assert_eq!(actors, ["alice"]);
}

/// control-plane.md: a topic removed from the app ends its subscriptions in every room; the
/// app's other topics stay.
#[tokio::test]
async fn removing_a_topic_from_the_app_ends_its_subscriptions() {
    let (server, mut control) = with_control().await;
    let mut bob = server.auth("dev-token-bob").await;
    bob.subscribe("demo/general/status").await;
    bob.subscribe("demo/random/status").await;
    bob.subscribe("demo/general/messages").await;
    let kept = ["messages", "events", "results", "tasks"];
    let topics = kept.iter().map(|t| pb::Topic { name: (*t).into(), logged: *t == "tasks", ..Default::default() });
    ok(control
        .update_app(pb::UpdateAppRequest {
            app: "demo".into(),
            topics: Some(pb::TopicList { topics: topics.collect() }),
            ..Default::default()
        })
        .await);
    let mut gone = Vec::new();
    for _ in 0..2 {
        let f = bob.expect_error("unknown_topic").await;
        assert_eq!(f.int("code"), 42940, "{f:?}");
        gone.push(f.str("topic").to_owned());
    }
    gone.sort();
    assert_eq!(gone, ["demo/general/status", "demo/random/status"]);
    bob.assert_nothing_pending().await;
    let mut alice = server.auth("dev-token-alice").await;
    alice.publish_acked("demo/general/messages", "kept".into()).await;
    assert_eq!(bob.expect("message").await.str("data"), "kept");
}

/// protocol.md: restored subscriptions whose room or grant has gone are left out of
/// `restoredSubscriptions`; the others are restored and the auth succeeds.
#[tokio::test]
async fn restored_subscriptions_whose_room_or_grant_is_gone_are_left_out() {
    let (server, mut control) = with_control().await;
    let mut alice = server.auth("dev-token-alice").await;
    alice.subscribe("demo/ops/messages").await;
    alice.subscribe("demo/random/messages").await;
    alice.subscribe("demo/general/messages").await;
    server.close_settled(alice).await;

    // Bob's grant keeps ops private once alice's goes.
    skua_testkit::control::revoke_alices_ops_grant(&mut control).await;
    ok(control
        .delete_room(pb::DeleteRoomRequest { app: "demo".into(), slug: "random".into(), ..Default::default() })
        .await);

    let mut alice = server.connect().await;
    let reply = alice.auth_session("dev-token-alice", None, true).await;
    let restored: Vec<&str> = reply
        .get("restoredSubscriptions")
        .as_array()
        .expect("restoredSubscriptions is a list")
        .iter()
        .filter_map(|e| e["pattern"].as_str())
        .collect();
    assert_eq!(restored, ["demo/general/messages"], "{reply:?}");
    alice.assert_nothing_pending().await;
    let mut bob = server.auth("dev-token-bob").await;
    bob.publish_acked("demo/ops/messages", "secret".into()).await;
    bob.publish_acked("demo/general/messages", "public".into()).await;
    assert_eq!(alice.expect("message").await.str("data"), "public");
    alice.assert_nothing_pending().await;
}

/// architecture.md (Shutdown): a draining node's sessions leave their presence rooms, so
/// listeners on other nodes get `leave` events before the sockets close.
#[tokio::test]
async fn a_draining_node_sends_presence_leave_for_its_sessions() {
    let mut c = skua_testkit::TestCluster::embedded(2, TestServer::builder()).await;
    let mut bob = c.node(1).auth("dev-token-bob").await;
    join(&mut bob, "general").await;
    let mut alice = c.node(0).auth("dev-token-alice").await;
    join(&mut alice, "general").await;
    assert_eq!(presence_actor(&bob.next_of("presence").await), "alice");
    let draining = c.nodes.remove(0);
    assert!(draining.shutdown().await, "drained within the grace");
    assert_eq!(alice.expect_close().await, (1012, "server_restart".to_owned()));
    let l = bob.next_of("presence").await;
    assert_eq!((l.str("event"), presence_actor(&l)), ("leave", "alice"), "{l:?}");
    bob.send(frame! {"type" => "getPresence", "roomId" => "general"}).await;
    let list = bob.expect("presenceList").await;
    let actors: Vec<&str> =
        list.get("data").as_array().unwrap().iter().filter_map(|e| e["actorTokenId"].as_str()).collect();
    assert_eq!(actors, ["bob"]);
}

/// The logged topic of the dev fixtures.
const TASKS: &str = "demo/general/tasks";

/// `host:port` of a service URL such as `redis://127.0.0.1:6379` or `mqtt://host:1883/`.
fn service_addr(url: &str) -> std::net::SocketAddr {
    use std::net::ToSocketAddrs;
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or(rest);
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    host_port.to_socket_addrs().ok().and_then(|mut a| a.next()).unwrap_or_else(|| panic!("no address in {url}"))
}

/// A node whose store is a fresh Postgres database reached through a proxy the test can cut.
async fn on_postgres_behind_a_proxy() -> Option<(TestDatabase, TcpProxy, TestServer)> {
    let db = TestDatabase::migrated().await?;
    let proxy = TcpProxy::start(db.server_addr()).await;
    let url = db.url_via(proxy.addr);
    let server = TestServer::builder().settings(move |s| s.node.store = Some(url)).spawn().await;
    Some((db, proxy, server))
}

/// protocol.md (Durable delivery): while the store is down, a persistent session's subscribe
/// to a logged topic gets `store_unavailable` with the topic; its other subscribes, and a
/// non-persistent client's subscribe to the same topic, go through.
#[tokio::test]
async fn a_persistent_session_s_logged_subscribe_while_the_store_is_down_gets_store_unavailable() {
    let Some((_db, proxy, server)) = on_postgres_behind_a_proxy().await else { return };
    let mut agent = server.connect().await;
    agent.auth_session("dev-token-agent", Some("p1"), false).await;
    let mut alice = server.auth("dev-token-alice").await;
    proxy.cut();
    store_is_down(&mut alice).await;
    let failures =
        || async { skua_testkit::http::Scrape::of(server.addr).await.value("skua_store_failures_total", &[]) };
    let before = failures().await;
    agent.send(frame! {"type" => "subscribe", "topic" => TASKS}).await;
    let f = agent.expect_error("store_unavailable").await;
    assert_eq!(f.str("topic"), TASKS, "{f:?}");
    assert_eq!(failures().await, before + 1.0, "the refused subscribe is in skua_store_failures_total");
    agent.subscribe("demo/general/messages").await;
    let mut bob = server.auth("dev-token-bob").await;
    bob.subscribe(TASKS).await;
    // It did not subscribe: nothing of the topic reaches it once the store is back.
    proxy.restore();
    let d = Deadline::new("a logged publish succeeds again", Duration::from_secs(30));
    loop {
        alice.send(frame! {"type" => "publish", "topic" => TASKS, "data" => "back", "msgRef" => "r"}).await;
        let f = alice.next_of_within_any(&["published", "error"], Duration::from_secs(20)).await;
        if f.ty() == "published" {
            break;
        }
        assert_eq!(f.str("error"), "store_unavailable", "{f:?}");
        d.tick().await;
    }
    assert_eq!(bob.next_of("message").await.str("data"), "back");
    agent.assert_nothing_pending().await;
    agent.subscribe(TASKS).await;
}

/// Waits (bounded) until a logged publish of `c` is refused with `store_unavailable`.
async fn store_is_down(c: &mut WsClient) {
    let d = Deadline::new("a logged publish gets store_unavailable", Duration::from_secs(30));
    loop {
        c.send(frame! {"type" => "publish", "topic" => TASKS, "data" => "down", "msgRef" => "d"}).await;
        let f = c.next_of_within_any(&["published", "error"], Duration::from_secs(20)).await;
        if f.ty() == "error" {
            assert_eq!((f.str("error"), f.str("topic")), ("store_unavailable", TASKS), "{f:?}");
            return;
        }
        d.tick().await;
    }
}

/// operations.md: Postgres does not fail readiness, on purpose: during an outage `/readyz`
/// stays 200 while logged publishes fail (and are counted).
#[tokio::test]
async fn readiness_stays_200_during_a_postgres_outage() {
    let Some((_db, proxy, server)) = on_postgres_behind_a_proxy().await else { return };
    let mut alice = server.auth("dev-token-alice").await;
    assert_eq!(get(server.addr, "/readyz").await, (200, "ready".to_owned()));
    proxy.cut();
    store_is_down(&mut alice).await;
    assert_eq!(get(server.addr, "/readyz").await, (200, "ready".to_owned()), "a database outage");
    let m = Scrape::of(server.addr).await;
    assert_eq!(m.value("skua_ready", &[]), 1.0);
    assert!(m.value("skua_publishes_total", &[("result", "store_unavailable")]) >= 1.0, "{}", m.text);
    // Everything else keeps working.
    alice.subscribe("demo/general/messages").await;
    alice.publish_acked("demo/general/events", "x".into()).await;
}

/// protocol.md: presence backend failures answer `broker_unavailable` with `roomId` (presence)
/// or `lobbyId` (lobby subscribe); the connection stays usable.
#[tokio::test]
async fn presence_backend_failures_answer_broker_unavailable_with_the_room_or_lobby() {
    let Some((_, redis)) = external_urls() else { return };
    let proxy = TcpProxy::start(service_addr(&redis)).await;
    let (url, ns) = (format!("redis://{}", proxy.addr), unique_namespace());
    let server = TestServer::builder()
        .settings(move |s| {
            s.node.presence = Some(url);
            s.edge.namespace = Some(ns);
        })
        .spawn()
        .await;
    let mut alice = server.auth("dev-token-alice").await;
    join(&mut alice, "general").await;
    proxy.cut();
    let d = Deadline::new("presence fails with the link cut", Duration::from_secs(30));
    let f = loop {
        alice.send(frame! {"type" => "presence", "roomId" => "random", "data" => frame! {"s" => 2}}).await;
        let f = alice.next_of_within_any(&["presence", "error"], Duration::from_secs(20)).await;
        if f.ty() == "error" {
            break f;
        }
        d.tick().await;
    };
    assert_eq!((f.str("error"), f.str("roomId")), ("broker_unavailable", "random"), "{f:?}");
    assert!(!f.has("lobbyId"), "{f:?}");
    alice.send(frame! {"type" => "lobbySubscribe", "lobbyId" => "online"}).await;
    let f = alice.next_of_within_any(&["lobbySubscribed", "error"], Duration::from_secs(20)).await;
    assert_eq!((f.str("error"), f.str("lobbyId")), ("broker_unavailable", "online"), "{f:?}");
    alice.subscribe("demo/general/messages").await;
}

/// durable.md: "If the bus publish then fails, the client gets `broker_unavailable`, but the
/// message stays stored and reaches durable consumers". The bus is MQTT through a proxy the
/// test cuts, with a one-message publish buffer so that a publish fails once the link is down.
#[tokio::test]
async fn a_logged_publish_whose_bus_publish_fails_still_reaches_durable_consumers() {
    let Some((mqtt, _)) = external_urls() else { return };
    let proxy = TcpProxy::start(service_addr(&mqtt)).await;
    let (url, ns) = (format!("mqtt://{}", proxy.addr), unique_namespace());
    let server = TestServer::builder()
        .settings(move |s| {
            s.node.bus = Some(url);
            s.edge.namespace = Some(ns);
            s.node.bus_publish_buffer = Some(1);
        })
        .spawn()
        .await;
    let mut agent = server.connect().await;
    agent.auth_session("dev-token-agent", Some("bus-down"), false).await;
    agent.subscribe(TASKS).await;
    let mut alice = server.auth("dev-token-alice").await;
    alice.publish_acked(TASKS, "before".into()).await;
    let m = agent.expect("message").await;
    agent.send(frame! {"type" => "ack", "msgId" => m.str("msgId")}).await;

    proxy.cut();
    let d = Deadline::new("a logged publish gets broker_unavailable", Duration::from_secs(30));
    let failed = loop {
        let data = format!("m{}", d.elapsed().as_millis());
        alice.send(frame! {"type" => "publish", "topic" => TASKS, "data" => data.as_str(), "msgRef" => "r"}).await;
        let f = alice.next_of_within_any(&["published", "error"], Duration::from_secs(20)).await;
        if f.ty() == "error" {
            assert_eq!((f.str("error"), f.str("topic"), f.str("msgRef")), ("broker_unavailable", TASKS, "r"), "{f:?}");
            break data;
        }
        d.tick().await;
    };
    server.close_settled(agent).await;
    proxy.restore();
    // New auths are refused while the bus is down; the session comes back once it is up.
    let d = Deadline::new("the session reconnects", Duration::from_secs(30));
    let mut agent = loop {
        let mut c = server.connect().await;
        c.send(frame! {"type" => "auth", "token" => "dev-token-agent", "protocolVersion" => 2, "reconnect" => true, "clientId" => "bus-down"}).await;
        // Restoring waits for the broker's SUBACKs, which may take a reconnect's back-off.
        let r = c.next_of_within("auth", Duration::from_secs(30)).await;
        if r.get("success") == &rmpv::Value::Boolean(true) {
            eprintln!("reconnected {:?} after the restore", d.elapsed());
            break c;
        }
        assert_eq!(r.str("error"), "broker_unavailable", "{r:?}");
        d.tick().await;
    };
    let d = Deadline::new("the refused publish arrives", Duration::from_secs(20));
    loop {
        let m = agent.next_of_within("message", Duration::from_secs(20)).await;
        assert!(m.has("msgId"), "{m:?}");
        agent.send(frame! {"type" => "ack", "msgId" => m.str("msgId")}).await;
        if m.str("data") == failed {
            break;
        }
        d.tick().await;
    }
}

/// protocol.md (Bus failures): "A subscribe the bus refuses gets the same error with topic."
/// The broker is stalled behind a proxy (connection open, no SUBACK), so the MQTT bus gives
/// up after its ack timeout (10 s); the connection's other subscriptions keep working.
#[tokio::test]
async fn a_subscribe_the_bus_refuses_gets_broker_unavailable_with_the_topic() {
    let Some((mqtt, _)) = external_urls() else { return };
    let proxy = TcpProxy::start(service_addr(&mqtt)).await;
    let (url, ns) = (format!("mqtt://{}", proxy.addr), unique_namespace());
    let server = TestServer::builder()
        .settings(move |s| {
            s.node.bus = Some(url);
            s.edge.namespace = Some(ns);
        })
        .spawn()
        .await;
    let mut alice = server.auth("dev-token-alice").await;
    alice.subscribe("demo/general/messages").await;
    proxy.stall();
    alice.send(frame! {"type" => "subscribe", "topic" => "demo/general/events"}).await;
    let f = alice.next_of_within_any(&["subscribed", "error"], Duration::from_secs(30)).await;
    assert_eq!((f.str("error"), f.str("topic")), ("broker_unavailable", "demo/general/events"), "{f:?}");
    assert!(!f.str("hint").is_empty(), "{f:?}");
    proxy.resume();
    // Not subscribed: a publish to it does not arrive; the earlier subscription still works.
    let mut bob = server.auth("dev-token-bob").await;
    bob.publish_acked("demo/general/events", "missed".into()).await;
    bob.publish_acked("demo/general/messages", "kept".into()).await;
    assert_eq!(alice.next_of_within("message", Duration::from_secs(20)).await.str("data"), "kept");
    alice.assert_nothing_pending().await;
    alice.subscribe("demo/general/events").await;
}

/// protocol.md (Group replay): `replayed` can be below `count` when retention pruned messages
/// meanwhile, and the node counts the difference (`skua_replay_shortfall_total`). The member
/// does not read while its replay runs (the replay is paced by the socket), so retention
/// prunes the backlog under it: 30 messages of 800 KB (24 MB) do not fit the loopback buffers
/// (about 5 MB here; Linux's default maxima allow 10 MB).
#[tokio::test]
async fn a_group_replay_cut_short_by_retention_reports_the_shortfall() {
    const N: usize = 30;
    let server = TestServer::builder()
        .settings(|s| {
            s.edge.log_max_per_topic = Some(N);
            s.edge.log_prune_interval = Some("1s".into());
            s.edge.replay_page_size = Some(1);
            s.edge.outbound_queue_messages = Some(2);
            s.edge.rate_limit = Some(1000);
        })
        .spawn()
        .await;
    let join_group =
        frame! {"type" => "subscribe", "topic" => TASKS, "loadBalance" => true, "loadBalanceGroup" => "workers"};
    let mut member = server.connect().await;
    member.auth_session("dev-token-agent", Some("g1"), false).await;
    member.send(join_group.clone()).await;
    member.expect("subscribed").await;
    server.close_settled(member).await;

    let mut alice = server.auth("dev-token-alice").await;
    let big = rmpv::Value::Binary(vec![7u8; 800_000]);
    for _ in 0..N {
        alice.publish_acked(TASKS, big.clone()).await;
    }
    let mut member = server.connect().await;
    member.auth_session("dev-token-agent", Some("g1"), false).await;
    member.send(join_group).await;
    member.expect("subscribed").await;
    let count = member.expect("replayStart").await.int("count");
    assert_eq!(count, N as i64);
    // N newer messages push the whole backlog past retention while the member reads nothing.
    for _ in 0..N {
        alice.publish_acked(TASKS, "new".into()).await;
    }
    let d = Deadline::new("retention prunes the backlog", Duration::from_secs(15));
    while Scrape::of(server.addr).await.value("skua_log_pruned_total", &[]) < N as f64 {
        d.tick().await;
    }
    let mut got = 0;
    let end = loop {
        let f = member.next().await;
        match f.ty() {
            "message" => {
                assert_eq!(f.get("isReplay"), &rmpv::Value::Boolean(true), "{f:?}");
                got += 1;
            }
            "replayEnd" => break f,
            _ => panic!("{f:?}"),
        }
    };
    let replayed = end.int("replayed");
    eprintln!("replayed {replayed} of {count}");
    assert_eq!(replayed, got, "{end:?}");
    assert!(replayed < count, "retention pruned part of the backlog, yet {replayed} of {count} were replayed");
    let m = Scrape::of(server.addr).await;
    assert_eq!(m.value("skua_replay_shortfall_total", &[]), (count - replayed) as f64, "the shortfall is counted");
}
