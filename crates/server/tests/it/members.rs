//! Persistent presence (N46) with raw clients: `status`/`advertisementVersion` on the wire, the
//! `wake` object kept from other clients, offline instead of leave, removal, bad wake objects,
//! the list cap with 10 000 sleeping members, and ordinary presence never touching the store.

use rmpv::Value;
use skua_core::{MemberWrite, Store};
use skua_testkit::{Frame, TestServer, WsClient, frame};

async fn announce(c: &mut WsClient, room: &str, data: Value) {
    c.send(frame! {"type" => "presence", "roomId" => room, "data" => data}).await;
}

fn persistent(version: i64) -> Value {
    frame! {
        "persistent" => true,
        "advertisement" => frame! {"v" => version},
        "wake" => frame! {"url" => "http://127.0.0.1:9/secret-wake-path", "timeoutMs" => 5000},
    }
}

fn decode(raw: &[u8]) -> Frame {
    Frame(rmpv::decode::read_value(&mut &raw[..]).expect("msgpack"))
}

fn data_of(f: &Frame) -> &Value {
    f.get("data")
}

fn field<'a>(v: &'a Value, k: &str) -> Option<&'a Value> {
    v.as_map()?.iter().find(|(key, _)| key.as_str() == Some(k)).map(|(_, v)| v)
}

async fn agent(server: &TestServer, client_id: &str) -> WsClient {
    let mut c = server.connect().await;
    c.auth_session("dev-token-agent", Some(client_id), false).await;
    c
}

#[tokio::test]
async fn persistent_member_carries_status_goes_offline_and_is_removed() {
    let server = TestServer::start().await;
    let mut alice = server.auth("dev-token-alice").await;
    announce(&mut alice, "general", frame! {"who" => "alice"}).await;
    alice.expect("presence").await;

    let mut worker = agent(&server, "w1").await;
    announce(&mut worker, "general", persistent(1)).await;
    let raw = alice.next_raw().await;
    assert!(!raw.windows(6).any(|w| w == b"secret"), "the wake object reached another client");
    let j = decode(&raw);
    assert_eq!((j.str("event"), data_of(&j)["actor_token_id"].as_str()), ("join", Some("agent-1")));
    assert_eq!(data_of(&j)["status"].as_str(), Some("online"));
    assert_eq!(data_of(&j)["advertisementVersion"].as_i64(), Some(1));
    assert!(field(&data_of(&j)["presence"], "wake").is_none());
    assert_eq!(field(&data_of(&j)["presence"], "persistent"), Some(&Value::Boolean(true)));

    announce(&mut worker, "general", persistent(2)).await;
    let u = alice.next_of("presence").await;
    assert_eq!((u.str("event"), data_of(&u)["advertisementVersion"].as_i64()), ("update", Some(2)));

    // The last connection ends: update to offline, not leave.
    drop(worker);
    let off = alice.next_of("presence").await;
    assert_eq!(off.str("event"), "update", "{off:?}");
    assert_eq!(data_of(&off)["status"].as_str(), Some("offline"));
    alice.send(frame! {"type" => "getPresence", "roomId" => "general"}).await;
    let raw = loop {
        let raw = alice.next_raw().await;
        if decode(&raw).ty() == "presenceList" {
            break raw;
        }
    };
    assert!(!raw.windows(6).any(|w| w == b"secret"), "the wake object was listed");
    let list = decode(&raw);
    let entries = list.get("data").as_array().unwrap();
    let agent_entry = entries.iter().find(|e| e["actorTokenId"].as_str() == Some("agent-1")).expect("listed");
    assert_eq!(agent_entry["status"].as_str(), Some("offline"));
    assert_eq!(agent_entry["advertisementVersion"].as_i64(), Some(2));
    let alice_entry = entries.iter().find(|e| e["actorTokenId"].as_str() == Some("alice")).unwrap();
    assert!(field(alice_entry, "status").is_none(), "an ordinary member has no status");

    // data: null after a persistent announce removes it.
    let mut again = agent(&server, "w1").await;
    announce(&mut again, "general", persistent(2)).await;
    assert_eq!(alice.next_of("presence").await.str("event"), "join");
    again.send(frame! {"type" => "presence", "roomId" => "general", "data" => Value::Nil}).await;
    let l = alice.next_of("presence").await;
    assert_eq!((l.str("event"), data_of(&l)["actor_token_id"].as_str()), ("leave", Some("agent-1")));
    alice.send(frame! {"type" => "getPresence", "roomId" => "general"}).await;
    let list = alice.next_of("presenceList").await;
    assert_eq!(list.get("data").as_array().unwrap().len(), 1, "{list:?}");
}

#[tokio::test]
async fn a_malformed_wake_is_invalid_frame() {
    let server = TestServer::start().await;
    let mut worker = agent(&server, "w1").await;
    for wake in [
        Value::from("http://x/"),
        frame! {"url" => "ftp://x/"},
        frame! {"url" => "http://x/", "headers" => frame! {"Host" => "y"}},
    ] {
        announce(&mut worker, "general", frame! {"persistent" => true, "wake" => wake}).await;
        let e = worker.expect_error("invalid_frame").await;
        assert_eq!(e.str("roomId"), "general");
    }
}

#[tokio::test]
async fn a_room_of_10000_sleeping_members_lists_at_most_the_limit() {
    for (limit, expected) in [(None, 1000), (Some(25), 25)] {
        let mut b = TestServer::builder();
        if let Some(l) = limit {
            b = b.settings(move |s| s.members.presence_list_limit = Some(l));
        }
        let server = b.spawn().await;
        let store: &dyn Store = &*server.state.store;
        let now = skua_testkit::now_s();
        for i in 0..10_000 {
            let actor = format!("sleeper-{i:05}");
            let w = MemberWrite {
                room: "demo-project/demo-app/general",
                actor: &actor,
                client_id: "c",
                data: &[0x81, 0xa1, b'i', 0x01],
                advertisement: b"",
                wake: None,
                node: "elsewhere",
                now_s: now,
                expires_at_s: now + 3600,
                project_limit: 0,
            };
            store.upsert_member(&w).await.unwrap();
        }
        assert_eq!(store.other_nodes_members_offline("", now + 3600).await.unwrap().len(), 10_000);
        let mut alice = server.auth("dev-token-alice").await;
        alice.send(frame! {"type" => "getPresence", "roomId" => "general"}).await;
        let list = alice.next_of("presenceList").await;
        let entries = list.get("data").as_array().unwrap();
        assert_eq!(entries.len(), expected);
        assert_eq!(entries[0]["actorTokenId"].as_str(), Some("sleeper-00000"));
        assert!(entries.iter().all(|e| e["status"].as_str() == Some("offline")));
    }
}

#[tokio::test]
async fn ordinary_presence_never_touches_the_member_store() {
    let server = TestServer::start().await;
    let mut alice = server.auth("dev-token-alice").await;
    let mut bob = server.auth("dev-token-bob").await;
    announce(&mut alice, "general", frame! {"status" => "one"}).await;
    alice.expect("presence").await;
    announce(&mut bob, "general", frame! {"status" => "two"}).await;
    announce(&mut bob, "general", frame! {"status" => "three"}).await;
    bob.send(frame! {"type" => "presence", "roomId" => "general", "data" => Value::Nil}).await;
    announce(&mut bob, "random", frame! {"status" => "four"}).await;
    server.close_settled(bob).await;
    // bob's join, update and leave in general (random is another room).
    for _ in 0..3 {
        alice.next_of("presence").await;
    }
    let ops: Vec<&str> = server
        .state
        .metrics
        .backend_latency
        .snapshot()
        .into_iter()
        // The once-a-second sweep (expire_members, expired_wakes) and the start runs regardless.
        .filter(|((slot, op), _)| {
            *slot == "store" && ["upsert_member", "members_offline", "delete_members", "list_members"].contains(op)
        })
        .map(|((_, op), _)| op)
        .collect();
    assert!(ops.is_empty(), "ordinary presence used the member store: {ops:?}");
}

/// `room`'s stored members.
async fn stored(server: &TestServer, room: &str) -> Vec<skua_core::StoredMember> {
    let store: &dyn Store = &*server.state.store;
    store.list_members(&format!("demo-project/demo-app/{room}"), skua_testkit::now_s(), 100).await.unwrap()
}

/// Issue 33: only the actor types that are woken (agent, orchestrator, device) may carry a
/// `wake`; a user's or an observer's persistent presence with one is refused with an error frame
/// naming `wake`, and nothing is stored or announced.
#[tokio::test]
async fn a_wake_from_a_user_or_an_observer_is_refused_and_nothing_is_stored() {
    let server = TestServer::start().await;
    for token in ["dev-token-alice", "dev-token-viewer"] {
        let mut c = server.auth(token).await;
        announce(&mut c, "general", persistent(1)).await;
        let e = c.expect_error("invalid_frame").await;
        assert!(e.str("hint").contains("wake"), "{token}: {e:?}");
        assert_eq!(e.str("roomId"), "general");
        // The connection is intact, and nothing was announced.
        c.send(frame! {"type" => "getPresence", "roomId" => "general"}).await;
        let list = c.next_of("presenceList").await;
        assert!(list.get("data").as_array().unwrap().is_empty(), "{token}: {list:?}");
    }
    assert!(stored(&server, "general").await.is_empty());
    // Without a wake, or with it disabled, a user's persistent presence is accepted.
    let mut alice = server.auth("dev-token-alice").await;
    let off = frame! {"persistent" => true, "wake" => frame! {"url" => "http://127.0.0.1:9/", "enabled" => false}};
    announce(&mut alice, "general", off).await;
    assert_eq!(alice.next_of("presence").await.str("event"), "join");
    // An agent's is accepted.
    let mut worker = agent(&server, "w1").await;
    announce(&mut worker, "general", persistent(1)).await;
    worker.send(frame! {"type" => "getPresence", "roomId" => "general"}).await;
    worker.next_of("presenceList").await;
    let members = stored(&server, "general").await;
    assert!(members.iter().any(|m| m.actor == "agent-1" && m.wake.is_some()), "{members:?}");
    assert!(members.iter().all(|m| m.actor != "alice" || m.wake.is_none()), "{members:?}");
}

/// Issue 33: outside `--dev` a wake URL naming a loopback or private address, in any spelling
/// (decimal, hex, octal, IPv4-mapped), is refused at announce with an error frame naming `wake`
/// and nothing is stored; `wake_allowed_hosts` allows exact hosts and ranges.
#[tokio::test]
async fn internal_wake_urls_are_refused_at_announce_unless_allowed() {
    let urls = [
        "http://127.0.0.1:9/w",
        "http://10.1.2.3/w",
        "http://2130706433:9/w",
        "http://0x7f000001:9/w",
        "http://0177.0.0.1:9/w",
        "http://[::ffff:127.0.0.1]:9/w",
        "http://[::ffff:a01:203]/w",
        "http://100.64.0.1/w",
        "http://localhost:9/w",
    ];
    let server = TestServer::builder().settings(|s| s.members.wake_allowed_hosts = Some(Vec::new())).spawn().await;
    let mut worker = agent(&server, "w1").await;
    for url in urls {
        let wake = frame! {"persistent" => true, "wake" => frame! {"url" => url, "timeoutMs" => 5000}};
        announce(&mut worker, "general", wake).await;
        let e = worker.expect_error("invalid_frame").await;
        assert!(e.str("hint").contains("wake") && e.str("hint").contains("wake_allowed_hosts"), "{url}: {e:?}");
    }
    assert!(stored(&server, "general").await.is_empty());

    let allowed =
        vec!["127.0.0.0/8".to_owned(), "10.0.0.0/8".to_owned(), "100.64.0.0/10".to_owned(), "localhost".into()];
    let server = TestServer::builder().settings(move |s| s.members.wake_allowed_hosts = Some(allowed)).spawn().await;
    let mut worker = agent(&server, "w1").await;
    for url in urls {
        let wake = frame! {"persistent" => true, "wake" => frame! {"url" => url, "timeoutMs" => 5000}};
        announce(&mut worker, "general", wake).await;
        worker.send(frame! {"type" => "getPresence", "roomId" => "general"}).await;
        let f = worker.next_of_within_any(&["presenceList", "error"], std::time::Duration::from_secs(5)).await;
        assert_eq!(f.ty(), "presenceList", "{url}: {f:?}");
        let members = stored(&server, "general").await;
        assert!(members[0].wake.as_deref().is_some_and(|w| w.contains(url)), "{url}: {members:?}");
    }
}

/// Issue 33: a wake header carrying CR/LF is refused at announce (error frame naming `wake`).
#[tokio::test]
async fn a_wake_header_with_cr_lf_is_refused_at_announce() {
    let server = TestServer::start().await;
    let mut worker = agent(&server, "w1").await;
    let wake = frame! {"url" => "http://127.0.0.1:9/", "headers" => frame! {"X-A" => "a\r\nCookie: stolen=1"}};
    announce(&mut worker, "general", frame! {"persistent" => true, "wake" => wake}).await;
    let e = worker.expect_error("invalid_frame").await;
    assert!(e.str("hint").contains("wake"), "{e:?}");
    assert!(stored(&server, "general").await.is_empty());
}

/// Issue 33: one agent with many clientIds and `timeoutMs: 1` gets at most
/// `wake_limit_per_actor` wake requests per period, however often the room is published to.
#[tokio::test]
async fn wakes_are_bounded_per_actor_per_period() {
    use skua_testkit::webhook::{Mode, WebhookReceiver};
    use std::sync::atomic::Ordering;
    use std::time::Duration;
    let rx = WebhookReceiver::start(Mode::Ok(serde_json::json!({}))).await;
    let server = TestServer::builder().settings(|s| s.members.wake_limit_per_actor = Some(3)).spawn().await;
    let mut alice = server.auth("dev-token-alice").await;
    six_offline_members(&server, &rx.url("/wake")).await;
    let metrics = &server.state.members.metrics;
    for i in 0..10 {
        alice.send(frame! {"type" => "publish", "topic" => "demo/general/messages", "data" => i}).await;
    }
    let d = skua_testkit::control::Deadline::new("wakes limited", Duration::from_secs(10));
    while metrics.limited.load(Ordering::Relaxed) < 3 {
        d.tick().await;
    }
    assert_eq!(rx.wait_for(3).await.len(), 3);
    // Past the members' 1 s floor, every publish finds them offline again: still limited.
    let before = metrics.limited.load(Ordering::Relaxed);
    let d = skua_testkit::control::Deadline::new("the woken members offline again", Duration::from_secs(10));
    while metrics.timed_out.load(Ordering::Relaxed) < 3 {
        d.tick().await;
    }
    for i in 0..10 {
        alice.send(frame! {"type" => "publish", "topic" => "demo/general/messages", "data" => i}).await;
    }
    let d = skua_testkit::control::Deadline::new("later wakes limited", Duration::from_secs(10));
    while metrics.limited.load(Ordering::Relaxed) < before + 6 {
        d.tick().await;
    }
    assert_eq!(metrics.started.load(Ordering::Relaxed), 3);
    assert_eq!(rx.requests().len(), 3, "at most wake_limit_per_actor requests per period");
    wakes_on_metrics(&server, 3, metrics.limited.load(Ordering::Relaxed)).await;
}

/// Six persistent members of `general` (agent-1, six clientIds) with a wake to `url`, all
/// offline.
async fn six_offline_members(server: &TestServer, url: &str) {
    use std::time::Duration;
    let mut workers = Vec::new();
    for i in 0..6 {
        let mut w = agent(server, &format!("w{i}")).await;
        let wake = frame! {"persistent" => true, "wake" => frame! {"url" => url, "timeoutMs" => 1}};
        announce(&mut w, "general", wake).await;
        w.send(frame! {"type" => "getPresence", "roomId" => "general"}).await;
        w.next_of("presenceList").await;
        workers.push(w);
    }
    for w in workers {
        server.close_settled(w).await;
    }
    let d = skua_testkit::control::Deadline::new("six offline members", Duration::from_secs(10));
    while !{
        let m = stored(server, "general").await;
        m.len() == 6 && m.iter().all(|m| m.status == skua_core::MemberStatus::Offline)
    } {
        d.tick().await;
    }
}

/// docs/operations.md: `skua_wakes_total{outcome}` on /metrics shows `started` wakes, all
/// answered (`sent`), and at least `limited` limited ones (publishes still being handled add
/// more).
async fn wakes_on_metrics(server: &TestServer, started: u64, limited: u64) {
    use std::time::Duration;
    let d = skua_testkit::control::Deadline::new("the wakes on /metrics", Duration::from_secs(5));
    loop {
        let m = skua_testkit::http::Scrape::of(server.addr).await;
        let got = ["started", "sent", "limited"].map(|o| m.value_or_zero("skua_wakes_total", &[("outcome", o)]));
        if got[..2] == [started as f64, started as f64] && got[2] >= limited as f64 {
            return;
        }
        assert!(
            d.elapsed() < Duration::from_secs(4),
            "started, sent, limited: {got:?}, want {started}, {started}, {limited}+"
        );
        d.tick().await;
    }
}

/// docs/agents.md: `wake_limit_per_url` wakes per project and wake URL origin per period, for
/// members of any actor; the others are counted `limited`.
#[tokio::test]
async fn wakes_are_bounded_per_url_origin_per_period() {
    use skua_testkit::webhook::{Mode, WebhookReceiver};
    use std::sync::atomic::Ordering;
    use std::time::Duration;
    let rx = WebhookReceiver::start(Mode::Ok(serde_json::json!({}))).await;
    let server = TestServer::builder()
        .settings(|s| {
            s.members.wake_limit_per_actor = Some(100);
            s.members.wake_limit_per_url = Some(2);
        })
        .spawn()
        .await;
    let mut alice = server.auth("dev-token-alice").await;
    six_offline_members(&server, &rx.url("/wake")).await;
    alice.send(frame! {"type" => "publish", "topic" => "demo/general/messages", "data" => 1}).await;
    let metrics = &server.state.members.metrics;
    let d = skua_testkit::control::Deadline::new("four wakes limited", Duration::from_secs(10));
    while metrics.limited.load(Ordering::Relaxed) < 4 {
        d.tick().await;
    }
    assert_eq!(rx.wait_for(2).await.len(), 2);
    assert_eq!(metrics.started.load(Ordering::Relaxed), 2);
    wakes_on_metrics(&server, 2, 4).await;
    assert_eq!(rx.requests().len(), 2, "at most wake_limit_per_url requests to one origin per period");
}

/// The next presence event of agent-1 that `observer` gets: (`event`, `status`).
async fn member_event(observer: &mut WsClient) -> (String, String) {
    loop {
        let f = observer.next_of("presence").await;
        let data = f.get("data");
        if data["actor_token_id"].as_str() == Some("agent-1") {
            return (f.str("event").to_owned(), data["status"].as_str().unwrap_or_default().to_owned());
        }
    }
}

/// Issue 33: `wake.timeoutMs` below `wake_timeout_min` is raised to it, so a member asking for
/// `timeoutMs: 1` is not woken again at every publish: it stays `waking` for the floor.
#[tokio::test]
async fn a_tiny_wake_timeout_is_raised_to_the_floor() {
    use skua_testkit::webhook::{Mode, WebhookReceiver};
    use std::time::{Duration, Instant};
    let rx = WebhookReceiver::start(Mode::Ok(serde_json::json!({}))).await;
    let server = TestServer::builder().settings(|s| s.members.wake_timeout_min = Some("3s".into())).spawn().await;
    let mut alice = server.auth("dev-token-alice").await;
    announce(&mut alice, "general", frame! {"who" => "alice"}).await;
    alice.expect("presence").await;
    let mut worker = agent(&server, "w1").await;
    let wake = frame! {"persistent" => true, "wake" => frame! {"url" => rx.url("/wake"), "timeoutMs" => 1}};
    announce(&mut worker, "general", wake).await;
    assert_eq!(member_event(&mut alice).await, ("join".into(), "online".into()));
    drop(worker);
    assert_eq!(member_event(&mut alice).await, ("update".into(), "offline".into()));
    alice.send(frame! {"type" => "publish", "topic" => "demo/general/messages", "data" => 1}).await;
    assert_eq!(member_event(&mut alice).await.0, "waking");
    let woken = Instant::now();
    rx.wait_for(1).await;
    let back = loop {
        let f = alice.next_of_within("presence", Duration::from_secs(10)).await;
        if f.get("data")["status"].as_str() == Some("offline") {
            break woken.elapsed();
        }
    };
    assert!(back >= Duration::from_millis(2500), "back offline after {back:?}, before the 3 s floor");
    assert_eq!(rx.requests().len(), 1);
}

/// Issue 33: the address rule of wake URLs applies again when the request is made: a member
/// stored with a loopback wake URL (say, by a node with another `wake_allowed_hosts`) is not
/// called; the publisher gets `42950 wake_failed` and the member is offline again.
#[tokio::test]
async fn an_internal_wake_url_is_refused_again_when_the_wake_is_sent() {
    use skua_testkit::webhook::{Mode, WebhookReceiver};
    let rx = WebhookReceiver::start(Mode::Ok(serde_json::json!({}))).await;
    let server = TestServer::builder().settings(|s| s.members.wake_allowed_hosts = Some(Vec::new())).spawn().await;
    let store: &dyn Store = &*server.state.store;
    let now = skua_testkit::now_s();
    let wake = serde_json::json!({"url": rx.url("/wake"), "headers": {}, "timeoutMs": 5000}).to_string();
    let w = MemberWrite {
        room: "demo-project/demo-app/general",
        actor: "agent-1",
        client_id: "w1",
        data: &[0x81, 0xaa, b'p', b'e', b'r', b's', b'i', b's', b't', b'e', b'n', b't', 0xc3],
        advertisement: b"",
        wake: Some(&wake),
        node: "elsewhere",
        now_s: now,
        expires_at_s: now + 3600,
        project_limit: 0,
    };
    store.upsert_member(&w).await.unwrap();
    store.other_nodes_members_offline("", now + 3600).await.unwrap();
    let mut alice = server.connect().await;
    alice.auth_ok("dev-token-alice", 2).await;
    alice.send(frame! {"type" => "publish", "topic" => "demo/general/messages", "data" => 1, "msgRef" => "m1"}).await;
    alice.expect("published").await;
    let e = alice.expect_error("wake_failed").await;
    assert_eq!((e.int("code"), e.str("msgRef")), (42950, "m1"), "{e:?}");
    assert!(rx.requests().is_empty(), "the internal wake URL was called");
    let m = stored(&server, "general").await;
    assert_eq!(m[0].status, skua_core::MemberStatus::Offline, "{m:?}");
}

/// The wake checks that asked the store so far (`wake_candidates` calls).
fn wake_queries(server: &TestServer) -> u64 {
    let ops = server.state.metrics.backend_latency.snapshot();
    ops.into_iter().filter(|((slot, op), _)| *slot == "store" && *op == "wake_candidates").map(|(_, h)| h.count).sum()
}

/// Waits until at least `n` wake checks asked the store.
async fn until_wake_queries(server: &TestServer, n: u64) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    while wake_queries(server) < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} wake checks asked the store, not {n}",
            wake_queries(server)
        );
        tokio::task::yield_now().await;
    }
}

/// Issue 36: a room found without wakeable members is not asked about again, whenever the next
/// publish comes (on a single node `wake_negative_cache` does not bound it: every member change
/// passes through the node), until a member of the room changes: one announced later with a
/// wake, once offline, is woken by the next publish.
#[tokio::test]
async fn a_room_without_wakeable_members_costs_no_store_query_until_a_member_changes() {
    let server = TestServer::builder().settings(|s| s.members.wake_negative_cache = Some("0s".into())).spawn().await;
    let mut alice = server.auth("dev-token-alice").await;
    alice.publish_acked("demo/general/messages", "first".into()).await;
    until_wake_queries(&server, 1).await;
    for i in 0..10 {
        alice.publish_acked("demo/general/messages", format!("again {i}").into()).await;
    }
    // Checks run in order: once another room's has run, every one before it has.
    alice.publish_acked("demo/random/tasks", "barrier".into()).await;
    until_wake_queries(&server, 2).await;
    assert_eq!(wake_queries(&server), 2, "publishes into a room without wakeable members asked the store");

    announce(&mut alice, "general", frame! {"who" => "alice"}).await;
    alice.expect("presence").await;
    let mut worker = agent(&server, "w1").await;
    announce(&mut worker, "general", persistent(1)).await;
    alice.next_of("presence").await;
    drop(worker);
    let off = alice.next_of("presence").await;
    assert_eq!(data_of(&off)["status"].as_str(), Some("offline"), "{off:?}");
    alice.publish_acked("demo/general/messages", "wake up".into()).await;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    while server.state.members.metrics.started.load(std::sync::atomic::Ordering::Relaxed) < 1 {
        assert!(tokio::time::Instant::now() < deadline, "the member that went offline was not woken");
        tokio::task::yield_now().await;
    }
}

/// A second project with an agent, for the per-project limit.
const TENANT_B: &str = r#"
[[projects]]
id = "tenant-b"

[[projects.apps]]
id = "tenant-b-app"
slug = "b"
topics = ["t"]

[[projects.apps.rooms]]
slug = "r1"

[[actors]]
id = "b-agent"
project = "tenant-b"
type = "agent"
tokens = ["b-agent-token"]
"#;

/// Issue 33, item 4: `presence_max_members_per_project` bounds the stored members of one
/// project; an announce beyond it is refused with `presence_limit_exceeded` and stores
/// nothing, a member's own record is still replaced, and another project is not affected.
#[tokio::test]
async fn persistent_members_are_limited_per_project() {
    let server = TestServer::builder()
        .fixtures(TENANT_B)
        .settings(|s| s.members.presence_max_members_per_project = Some(2))
        .spawn()
        .await;
    let mut b = Vec::new();
    for id in ["b1", "b2", "b3"] {
        let mut c = server.connect().await;
        c.auth_session("b-agent-token", Some(id), false).await;
        b.push(c);
    }
    for c in &mut b[..2] {
        announce(c, "r1", frame! {"persistent" => true}).await;
        c.expect("presence").await;
    }
    announce(&mut b[2], "r1", frame! {"persistent" => true}).await;
    let e = b[2].expect_error("presence_limit_exceeded").await;
    assert_eq!(e.str("roomId"), "r1");
    assert!(e.str("hint").contains("presence_max_members_per_project"), "{}", e.str("hint"));
    let store: &dyn Store = &*server.state.store;
    assert_eq!(store.list_members("tenant-b/tenant-b-app/r1", skua_testkit::now_s(), 100).await.unwrap().len(), 2);
    // A member at the limit still replaces its own record (frames of one connection are
    // handled in order: the list answers after the announce was stored).
    announce(&mut b[0], "r1", frame! {"persistent" => true, "advertisement" => 2}).await;
    b[0].send(frame! {"type" => "getPresence", "roomId" => "r1"}).await;
    b[0].next_of("presenceList").await;
    let stored = store.list_members("tenant-b/tenant-b-app/r1", skua_testkit::now_s(), 100).await.unwrap();
    let b1 = stored.iter().find(|m| m.client_id == "b1").expect("b1's record");
    assert_eq!(b1.advertisement_version, 2);
    // The demo project has its own two.
    for id in ["w1", "w2"] {
        let mut worker = agent(&server, id).await;
        announce(&mut worker, "general", frame! {"persistent" => true}).await;
        worker.next_of_within_any(&["presence", "error"], std::time::Duration::from_secs(10)).await;
    }
    assert_eq!(store.list_members("demo-project/demo-app/general", skua_testkit::now_s(), 100).await.unwrap().len(), 2);
}

/// Issue 33: with Redis presence the wake limits hold for the cluster, not per node: after
/// node 0 started `wake_limit_per_actor` wakes of an agent, publishes on node 1 wake none of
/// its other offline members in the period (each node counting alone would start as many
/// again). Needs the external MQTT broker and Redis (skips loudly without, fails under CI).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wake_limits_hold_for_the_cluster_with_redis_presence() {
    use skua_testkit::webhook::{Mode, WebhookReceiver};
    use std::sync::atomic::Ordering;
    use std::time::Duration;
    let rx = WebhookReceiver::start(Mode::Ok(serde_json::json!({}))).await;
    let builder = TestServer::builder().settings(|s| s.members.wake_limit_per_actor = Some(3));
    let Some(c) = skua_testkit::TestCluster::external(2, builder).await else { return };
    let (n0, n1) = (c.node(0), c.node(1));
    let mut workers = Vec::new();
    for i in 0..6 {
        let mut w = agent(n0, &format!("w{i}")).await;
        let wake = frame! {"persistent" => true, "wake" => frame! {"url" => rx.url("/wake"), "timeoutMs" => 60_000}};
        announce(&mut w, "general", wake).await;
        w.send(frame! {"type" => "getPresence", "roomId" => "general"}).await;
        w.next_of("presenceList").await;
        workers.push(w);
    }
    for w in workers {
        n0.close_settled(w).await;
    }
    let d = skua_testkit::control::Deadline::new("six offline members", Duration::from_secs(10));
    while !{
        let m = stored(n0, "general").await;
        m.len() == 6 && m.iter().all(|m| m.status == skua_core::MemberStatus::Offline)
    } {
        d.tick().await;
    }
    let mut alice = n0.auth("dev-token-alice").await;
    alice.publish_acked("demo/general/messages", "wake up".into()).await;
    let (m0, m1) = (&n0.state.members.metrics, &n1.state.members.metrics);
    let d = skua_testkit::control::Deadline::new("node 0 limited", Duration::from_secs(10));
    while m0.limited.load(Ordering::Relaxed) < 3 {
        d.tick().await;
    }
    assert_eq!(rx.wait_for(3).await.len(), 3);
    // Node 1 finds the other three offline; the cluster's count has none left for agent-1.
    let mut bob = n1.auth("dev-token-bob").await;
    bob.publish_acked("demo/general/messages", "wake up too".into()).await;
    let d = skua_testkit::control::Deadline::new("node 1 limited", Duration::from_secs(10));
    while m1.limited.load(Ordering::Relaxed) < 3 {
        d.tick().await;
    }
    assert_eq!(m0.started.load(Ordering::Relaxed) + m1.started.load(Ordering::Relaxed), 3);
    assert_eq!(rx.requests().len(), 3, "wake_limit_per_actor for the cluster, not per node");
}
