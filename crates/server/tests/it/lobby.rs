//! Lobbies: snapshots over covered rooms and lobbyPresence events (N22, N35).

use rmpv::Value;
use skua_testkit::{TestServer, frame};

#[tokio::test]
async fn lobby_subscribe_returns_every_covered_room_and_then_events() {
    let server = TestServer::start().await;
    let mut bob = server.auth("dev-token-bob").await;
    bob.send(frame! {"type" => "presence", "roomId" => "general", "data" => frame!{"s" => "b"}}).await;
    bob.expect("presence").await;

    let mut viewer = server.auth("dev-token-viewer").await;
    viewer.send(frame! {"type" => "lobbySubscribe", "lobbyId" => "online"}).await;
    let snap = viewer.expect("lobbySubscribed").await;
    assert_eq!(snap.str("lobbyId"), "online");
    let p = snap.get("presence");
    assert_eq!(p["random"], Value::Map(vec![]), "empty rooms appear as {{}} (N22)");
    let entry = &p["general"]["bob"];
    assert_eq!(entry["actorTokenId"].as_str(), Some("bob"));
    assert_eq!(entry["presence"], frame! {"s" => "b"});
    assert!(entry["joinedAt"].as_u64().is_some());
    assert!(p["ops"].is_nil(), "rooms outside the lobby are not listed");

    let mut carol = server.auth("dev-token-carol").await;
    carol.send(frame! {"type" => "presence", "roomId" => "random", "data" => frame!{"s" => "c"}}).await;
    let e = viewer.expect("lobbyPresence").await;
    assert_eq!(
        (e.str("event"), e.str("lobbyId"), e.str("roomId"), e.str("actorId")),
        ("join", "online", "random", "carol")
    );
    assert_eq!(e.get("data"), &frame! {"s" => "c"});
    carol.send(frame! {"type" => "presence", "roomId" => "random", "data" => frame!{"s" => "c2"}}).await;
    let e = viewer.expect("lobbyPresence").await;
    assert_eq!((e.str("event"), e.get("data").clone()), ("update", frame! {"s" => "c2"}));
    drop(carol);
    let e = viewer.expect("lobbyPresence").await;
    assert_eq!((e.str("event"), e.str("actorId")), ("leave", "carol"));
    assert_eq!(e.get("data"), &Value::Map(vec![]), "a lobby leave carries data {{}} (N35)");

    viewer.send(frame! {"type" => "getLobbyPresence", "lobbyId" => "online"}).await;
    let l = viewer.expect("lobbyPresenceList").await;
    assert_eq!(l.get("presence")["random"], Value::Map(vec![]));
    assert_eq!(l.get("presence")["general"]["bob"]["actorTokenId"].as_str(), Some("bob"));

    viewer.send(frame! {"type" => "lobbyUnsubscribe", "lobbyId" => "online"}).await;
    assert_eq!(viewer.expect("lobbyUnsubscribed").await.str("lobbyId"), "online");
    bob.send(frame! {"type" => "presence", "roomId" => "general", "data" => frame!{"s" => "b2"}}).await;
    bob.expect("presence").await;
    viewer.assert_nothing_pending().await;
}

#[tokio::test]
async fn presence_in_rooms_outside_the_lobby_is_not_reported() {
    let server = TestServer::start().await;
    let mut viewer = server.auth("dev-token-viewer").await;
    viewer.send(frame! {"type" => "lobbySubscribe", "lobbyId" => "online"}).await;
    viewer.expect("lobbySubscribed").await;
    let mut alice = server.auth("dev-token-alice").await;
    alice.send(frame! {"type" => "presence", "roomId" => "ops", "data" => frame!{"s" => "x"}}).await;
    alice.expect("presence").await;
    alice.send(frame! {"type" => "presence", "roomId" => "general", "data" => frame!{"s" => "y"}}).await;
    // The ops leave is not a lobby room either; the first lobby event is the general join.
    let e = viewer.expect("lobbyPresence").await;
    assert_eq!((e.str("event"), e.str("roomId")), ("join", "general"));
}
