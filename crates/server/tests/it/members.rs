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
            b = b.settings(move |s| s.presence_list_limit = Some(l));
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
    let server = TestServer::builder().settings(|s| s.wake_negative_cache = Some("0s".into())).spawn().await;
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
