//! Restoring subscriptions with `reconnect:true` (N22, N23, N36).

use rmpv::Value;
use skua_testkit::{Frame, TestServer, WsClient, frame};

async fn auth_with(server: &TestServer, token: &str, reconnect: bool, client_id: Option<&str>) -> (WsClient, Frame) {
    let mut c = server.connect().await;
    let reply = c.auth_session(token, client_id, reconnect).await;
    (c, reply)
}

fn restored(reply: &Frame) -> Vec<Value> {
    reply.get("restoredSubscriptions").as_array().expect("restoredSubscriptions is a list").clone()
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
    server.close_and_settle(alice).await;

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
    let server = TestServer::start().await;
    let (mut a, _) = auth_with(&server, "dev-token-alice", false, None).await;
    a.subscribe("demo/general/messages").await;
    server.close_and_settle(a).await;
    let (mut fresh, reply) = auth_with(&server, "dev-token-alice", false, None).await;
    assert_eq!(restored(&reply), vec![]);
    let mut bob = server.auth("dev-token-bob").await;
    bob.publish_acked("demo/general/messages", "m".into()).await;
    fresh.assert_nothing_pending().await;
    server.close_and_settle(fresh).await;
    // The fresh connection's (empty) record replaced the old one.
    let (_c, reply) = auth_with(&server, "dev-token-alice", true, None).await;
    assert_eq!(restored(&reply), vec![]);
}

#[tokio::test]
async fn persistent_actors_keep_one_record_per_client_id() {
    let server = TestServer::start().await;
    let (mut w1, _) = auth_with(&server, "dev-token-agent", false, Some("worker-1")).await;
    w1.subscribe("demo/general/tasks").await;
    server.close_and_settle(w1).await;
    let (w2, reply) = auth_with(&server, "dev-token-agent", true, Some("worker-2")).await;
    assert_eq!(restored(&reply), vec![], "another clientId is another session (N23)");
    server.close_and_settle(w2).await;
    let (_w1, reply) = auth_with(&server, "dev-token-agent", true, Some("worker-1")).await;
    let entries = restored(&reply);
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["pattern"].as_str(), Some("demo/general/tasks"));
    // For other actor types clientId is accepted and ignored (N9): the key is the actor.
    let (mut u, _) = auth_with(&server, "dev-token-bob", false, Some("tab-1")).await;
    u.subscribe("demo/general/status").await;
    server.close_and_settle(u).await;
    let (_u, reply) = auth_with(&server, "dev-token-bob", true, Some("tab-2")).await;
    assert_eq!(restored(&reply).len(), 1);
}

#[tokio::test]
async fn records_expire_after_the_restore_ttl() {
    let server = TestServer::builder().settings(|s| s.restore_ttl = Some("0s".into())).spawn().await;
    let (mut a, _) = auth_with(&server, "dev-token-alice", false, None).await;
    a.subscribe("demo/general/messages").await;
    server.close_and_settle(a).await;
    let (_a, reply) = auth_with(&server, "dev-token-alice", true, None).await;
    assert_eq!(restored(&reply), vec![]);
}
