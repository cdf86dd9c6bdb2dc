//! Room presence: join/update/leave, snapshots, several connections, moving rooms (N21, N39).

use rmpv::Value;
use skua_testkit::{Frame, TestServer, WsClient, frame};

fn status(s: &str) -> Value {
    frame! {"status" => s}
}

async fn announce(c: &mut WsClient, room: &str, data: Value) {
    c.send(frame! {"type" => "presence", "roomId" => room, "data" => data}).await;
}

fn event(f: &Frame) -> (&str, &str) {
    assert_eq!(f.ty(), "presence", "{f:?}");
    (f.str("event"), f.get("data").as_map().and_then(|_| f.get("data")["actor_token_id"].as_str()).unwrap_or(""))
}

#[tokio::test]
async fn join_update_leave_reach_everyone_in_the_room_including_the_announcer() {
    let server = TestServer::start().await;
    let mut alice = server.auth("dev-token-alice").await;
    let mut bob = server.auth("dev-token-bob").await;
    announce(&mut alice, "general", status("online")).await;
    let j = alice.expect("presence").await;
    assert_eq!(event(&j), ("join", "alice"));
    assert_eq!(j.get("data")["presence"], status("online"));
    assert!(
        !j.get("data").as_map().unwrap().iter().any(|(k, _)| k.as_str() == Some("actor_type")),
        "N21: no actor_type"
    );

    announce(&mut bob, "general", status("here")).await;
    assert_eq!(event(&bob.expect("presence").await), ("join", "bob"));
    assert_eq!(event(&alice.expect("presence").await), ("join", "bob"));

    announce(&mut alice, "general", status("away")).await;
    let u = bob.expect("presence").await;
    assert_eq!(event(&u), ("update", "alice"));
    assert_eq!(u.get("data")["presence"], status("away"));
    assert_eq!(event(&alice.expect("presence").await), ("update", "alice"));

    // data: null leaves (the SDK's clear_presence, N21); the leave carries only the actor.
    alice.send(frame! {"type" => "presence", "roomId" => "general", "data" => Value::Nil}).await;
    let l = bob.expect("presence").await;
    assert_eq!(event(&l), ("leave", "alice"));
    assert_eq!(l.get("data"), &frame! {"actor_token_id" => "alice"});
    alice.assert_nothing_pending().await;
}

#[tokio::test]
async fn snapshot_lists_entries_and_keeps_joined_at_across_updates() {
    let server = TestServer::start().await;
    let mut alice = server.auth("dev-token-alice").await;
    let before = skua_testkit::now_s();
    announce(&mut alice, "general", status("one")).await;
    alice.expect("presence").await;
    alice.send(frame! {"type" => "getPresence", "roomId" => "general"}).await;
    let l = alice.expect("presenceList").await;
    assert_eq!(l.str("roomId"), "general");
    let entries = l.get("data").as_array().unwrap().clone();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["actorTokenId"].as_str(), Some("alice"));
    assert_eq!(entries[0]["presence"], status("one"));
    let joined = entries[0]["joinedAt"].as_u64().unwrap();
    assert!(joined >= before && joined <= skua_testkit::now_s());

    announce(&mut alice, "general", status("two")).await;
    alice.expect("presence").await;
    alice.send(frame! {"type" => "getPresence", "roomId" => "general"}).await;
    let l = alice.expect("presenceList").await;
    let e = &l.get("data").as_array().unwrap()[0];
    assert_eq!((e["presence"].clone(), e["joinedAt"].as_u64()), (status("two"), Some(joined)));

    // Another room is empty; observers may read presence.
    let mut viewer = server.auth("dev-token-viewer").await;
    viewer.send(frame! {"type" => "getPresence", "roomId" => "random"}).await;
    assert_eq!(viewer.expect("presenceList").await.get("data"), &Value::Array(vec![]));
}

#[tokio::test]
async fn an_actors_connections_share_one_entry_and_leave_is_sent_after_the_last() {
    let server = TestServer::start().await;
    let mut bob = server.auth("dev-token-bob").await;
    announce(&mut bob, "general", status("watching")).await;
    bob.expect("presence").await;
    let mut a1 = server.auth("dev-token-alice").await;
    let mut a2 = server.auth("dev-token-alice").await;
    announce(&mut a1, "general", status("tab1")).await;
    assert_eq!(event(&bob.expect("presence").await), ("join", "alice"));
    announce(&mut a2, "general", status("tab2")).await;
    assert_eq!(event(&bob.expect("presence").await), ("update", "alice"), "second connection → update (N39)");
    bob.send(frame! {"type" => "getPresence", "roomId" => "general"}).await;
    let l = bob.next_of("presenceList").await;
    assert_eq!(l.get("data").as_array().unwrap().len(), 2, "bob + one alice entry");

    a1.close().await;
    bob.assert_nothing_pending().await; // nothing yet: alice still has a connection there
    drop(a2);
    let l = bob.expect("presence").await;
    assert_eq!(event(&l), ("leave", "alice"));
}

#[tokio::test]
async fn moving_rooms_leaves_the_old_room_first() {
    let server = TestServer::start().await;
    let mut bob = server.auth("dev-token-bob").await;
    announce(&mut bob, "general", status("g")).await;
    bob.expect("presence").await;
    let mut carol = server.auth("dev-token-carol").await;
    announce(&mut carol, "random", status("r")).await;
    carol.expect("presence").await;

    let mut alice = server.auth("dev-token-alice").await;
    announce(&mut alice, "general", status("1")).await;
    assert_eq!(event(&bob.expect("presence").await), ("join", "alice"));
    alice.expect("presence").await;
    announce(&mut alice, "random", status("2")).await;
    assert_eq!(event(&bob.expect("presence").await), ("leave", "alice"));
    assert_eq!(event(&carol.expect("presence").await), ("join", "alice"));
    assert_eq!(event(&alice.expect("presence").await), ("join", "alice"), "the mover sees its join in the new room");
    alice.assert_nothing_pending().await;
}

#[tokio::test]
async fn presence_without_room_is_stored_but_not_broadcast() {
    let server = TestServer::start().await;
    let mut bob = server.auth("dev-token-bob").await;
    announce(&mut bob, "general", status("g")).await;
    bob.expect("presence").await;
    let mut alice = server.auth("dev-token-alice").await;
    alice.send(frame! {"type" => "presence", "data" => status("legacy")}).await;
    alice.assert_nothing_pending().await;
    bob.assert_nothing_pending().await;
}

#[tokio::test]
async fn disconnect_sends_leave_to_the_others() {
    let server = TestServer::start().await;
    let mut bob = server.auth("dev-token-bob").await;
    announce(&mut bob, "general", status("g")).await;
    bob.expect("presence").await;
    let mut carol = server.auth("dev-token-carol").await;
    announce(&mut carol, "general", status("c")).await;
    assert_eq!(event(&bob.expect("presence").await), ("join", "carol"));
    drop(carol);
    assert_eq!(event(&bob.expect("presence").await), ("leave", "carol"));
    bob.send(frame! {"type" => "getPresence", "roomId" => "general"}).await;
    let l = bob.expect("presenceList").await;
    let ids: Vec<&str> = l.get("data").as_array().unwrap().iter().filter_map(|e| e["actorTokenId"].as_str()).collect();
    assert_eq!(ids, vec!["bob"]);
}
