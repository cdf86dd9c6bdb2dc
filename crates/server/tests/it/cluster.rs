//! Several nodes as one broker (cluster issue): each case runs on an in-process cluster over
//! the embedded backends, and again over the real MQTT broker and Redis when
//! `SKUA_TEST_MQTT_URL` / `SKUA_TEST_REDIS_URL` are set (required under CI=true).

use rmpv::Value;
use skua_testkit::{TestCluster, TestServer, frame};

const TOPIC: &str = "demo/general/messages";

macro_rules! cluster_cases {
    ($($case:ident),+ $(,)?) => {
        mod embedded {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                super::$case(skua_testkit::TestCluster::embedded(3, super::builder()).await).await;
            })+
        }
        mod external {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let Some(c) = skua_testkit::TestCluster::external(3, super::builder()).await else { return };
                super::$case(c).await;
            })+
        }
    };
}

cluster_cases!(
    publish_on_one_node_reaches_subscribers_on_every_node,
    filters_and_the_echo_rule_hold_across_nodes,
    retained_message_survives_its_publishing_node,
    load_balanced_group_gets_each_message_once_across_nodes,
    presence_and_lobbies_span_nodes,
    reconnect_restores_on_another_node,
    two_tabs_restore_their_own_subscriptions_on_other_nodes,
    order_is_kept_per_publisher_across_nodes,
    one_bus_subscription_serves_every_local_subscriber,
    durable_sessions_span_nodes,
);

fn builder() -> skua_testkit::server::TestServerBuilder {
    // One restore record per connection (`two_tabs_restore_their_own_subscriptions_on_other_nodes`
    // closes tabs within one second: see `reconnect::one_record_each`).
    TestServer::builder().settings(|s| {
        s.edge.rate_limit = Some(1000);
        s.edge.restore_merge_window = Some("0s".into());
    })
}

async fn publish_on_one_node_reaches_subscribers_on_every_node(c: TestCluster) {
    let mut subs = Vec::new();
    for n in &c.nodes {
        let mut a = n.auth("dev-token-alice").await;
        a.subscribe(TOPIC).await;
        subs.push(a);
    }
    let mut bob = c.node(1).auth("dev-token-bob").await;
    bob.publish_acked(TOPIC, "x".into()).await;
    for s in &mut subs {
        let m = s.expect("message").await;
        assert_eq!((m.str("data"), m.str("from")), ("x", "bob"));
    }
}

async fn filters_and_the_echo_rule_hold_across_nodes(c: TestCluster) {
    let mut filtered = c.node(0).auth("dev-token-alice").await;
    filtered.send(frame! {"type" => "subscribe", "topic" => TOPIC, "filters" => Value::Array(vec!["eu".into()])}).await;
    filtered.expect("subscribed").await;
    let mut wildcard = c.node(2).auth("dev-token-carol").await;
    wildcard.subscribe(TOPIC).await;
    // bob on two nodes: the publishing actor gets nothing on either (N16).
    let mut bob0 = c.node(0).auth("dev-token-bob").await;
    bob0.subscribe(TOPIC).await;
    let mut bob1 = c.node(1).auth("dev-token-bob").await;
    bob1.send(frame! {"type" => "publish", "topic" => TOPIC, "data" => "plain", "msgRef" => "1"}).await;
    bob1.expect("published").await;
    bob1.send(frame! {"type" => "publish", "topic" => TOPIC, "data" => "eu", "filter" => "eu", "msgRef" => "2"}).await;
    bob1.expect("published").await;
    assert_eq!(filtered.expect("message").await.str("data"), "eu");
    let w1 = wildcard.expect("message").await;
    let w2 = wildcard.expect("message").await;
    assert_eq!((w1.str("data"), w2.str("data"), w2.str("filter")), ("plain", "eu", "eu"));
    // A message from carol reaches bob: it proves bob's queue is past bob's own two publishes.
    let mut carol = c.node(2).auth("dev-token-carol").await;
    carol.publish_acked(TOPIC, "from-carol".into()).await;
    assert_eq!(bob0.expect("message").await.str("data"), "from-carol", "bob never got his own messages");
}

async fn retained_message_survives_its_publishing_node(mut c: TestCluster) {
    {
        let mut bob = c.node(0).auth("dev-token-bob").await;
        bob.send(frame! {"type" => "publish", "topic" => TOPIC, "data" => "kept", "retain" => true, "msgRef" => "r"})
            .await;
        bob.expect("published").await;
    }
    let first = c.nodes.remove(0);
    assert!(first.shutdown().await);
    let mut alice = c.node(1).auth("dev-token-alice").await;
    alice.subscribe(TOPIC).await;
    assert_eq!(alice.expect("message").await.str("data"), "kept");
    let mut carol = c.node(0).auth("dev-token-carol").await;
    carol.subscribe(TOPIC).await;
    assert_eq!(carol.expect("message").await.str("data"), "kept");
}

async fn load_balanced_group_gets_each_message_once_across_nodes(c: TestCluster) {
    let mut members = Vec::new();
    for (i, token) in ["dev-token-alice", "dev-token-carol", "dev-token-agent"].into_iter().enumerate() {
        let mut m = c.node(i).auth(token).await;
        m.send(
            frame! {"type" => "subscribe", "topic" => TOPIC, "loadBalance" => true, "loadBalanceGroup" => "workers"},
        )
        .await;
        m.expect("subscribed").await;
        members.push(m);
    }
    let mut witness = c.node(0).auth("dev-token-viewer").await;
    witness.subscribe(TOPIC).await;
    let mut bob = c.node(1).auth("dev-token-bob").await;
    for i in 0..90u64 {
        bob.send(frame! {"type" => "publish", "topic" => TOPIC, "data" => i}).await;
    }
    for i in 0..90u64 {
        assert_eq!(witness.expect("message").await.get("data").as_u64(), Some(i));
    }
    // Deliveries to other nodes may still be in flight: collect until all 90 are seen.
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    while seen.len() < 90 && tokio::time::Instant::now() < deadline {
        for m in &mut members {
            seen.extend(m.drain_frames().await.iter().map(|f| f.get("data").as_u64().unwrap()));
        }
    }
    for m in &mut members {
        seen.extend(m.drain_frames().await.iter().map(|f| f.get("data").as_u64().unwrap()));
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..90).collect::<Vec<_>>(), "exactly one delivery per message across the cluster");
}

async fn presence_and_lobbies_span_nodes(c: TestCluster) {
    let mut viewer = c.node(2).auth("dev-token-viewer").await;
    viewer.send(frame! {"type" => "lobbySubscribe", "lobbyId" => "online"}).await;
    viewer.expect("lobbySubscribed").await;
    let mut bob = c.node(0).auth("dev-token-bob").await;
    bob.send(frame! {"type" => "presence", "roomId" => "general", "data" => frame!{"s" => "b"}}).await;
    bob.expect("presence").await;
    let mut alice = c.node(1).auth("dev-token-alice").await;
    alice.send(frame! {"type" => "presence", "roomId" => "general", "data" => frame!{"s" => "a"}}).await;
    let j = bob.expect("presence").await;
    assert_eq!((j.str("event"), j.get("data")["actor_token_id"].as_str()), ("join", Some("alice")));
    let e = viewer.expect("lobbyPresence").await;
    assert_eq!((e.str("event"), e.str("actorId")), ("join", "bob"));
    let e = viewer.expect("lobbyPresence").await;
    assert_eq!((e.str("event"), e.str("actorId")), ("join", "alice"));
    alice.send(frame! {"type" => "getPresence", "roomId" => "general"}).await;
    let l = alice.next_of("presenceList").await;
    let mut ids: Vec<&str> =
        l.get("data").as_array().unwrap().iter().filter_map(|e| e["actorTokenId"].as_str()).collect();
    ids.sort_unstable();
    assert_eq!(ids, vec!["alice", "bob"]);
    drop(alice);
    let l = bob.expect("presence").await;
    assert_eq!((l.str("event"), l.get("data")["actor_token_id"].as_str()), ("leave", Some("alice")));
    let e = viewer.expect("lobbyPresence").await;
    assert_eq!((e.str("event"), e.str("actorId")), ("leave", "alice"));
}

async fn reconnect_restores_on_another_node(c: TestCluster) {
    let mut a = c.node(0).connect().await;
    a.send(frame! {"type" => "auth", "token" => "dev-token-agent", "protocolVersion" => 2, "clientId" => "w1"}).await;
    a.expect("auth").await;
    a.subscribe(TOPIC).await;
    a.close().await;
    let mut witness = c.node(0).auth("dev-token-viewer").await;
    witness.subscribe(TOPIC).await; // the old session's cleanup has run by now on node 0
    let mut b = c.node(2).connect().await;
    b.send(frame! {"type" => "auth", "token" => "dev-token-agent", "protocolVersion" => 2, "clientId" => "w1", "reconnect" => true})
        .await;
    let r = b.expect("auth").await;
    assert_eq!(r.get("restoredSubscriptions").as_array().map(Vec::len), Some(1), "{r:?}");
    let mut bob = c.node(1).auth("dev-token-bob").await;
    bob.publish_acked(TOPIC, "after".into()).await;
    assert_eq!(b.expect("message").await.str("data"), "after");
}

async fn two_tabs_restore_their_own_subscriptions_on_other_nodes(c: TestCluster) {
    let open_on = [c.node(0), c.node(1)];
    let reconnect_on = [c.node(2), c.node(0)];
    crate::reconnect::two_tabs_each_get_their_own_subscriptions_back(open_on, reconnect_on).await;
}

async fn order_is_kept_per_publisher_across_nodes(c: TestCluster) {
    let mut subs = Vec::new();
    for n in &c.nodes {
        let mut a = n.auth("dev-token-alice").await;
        a.subscribe(TOPIC).await;
        subs.push(a);
    }
    let mut bob = c.node(0).auth("dev-token-bob").await;
    for i in 0..300u64 {
        bob.send(frame! {"type" => "publish", "topic" => TOPIC, "data" => i}).await;
    }
    for s in &mut subs {
        for i in 0..300u64 {
            assert_eq!(s.expect("message").await.get("data").as_u64(), Some(i));
        }
    }
}

async fn one_bus_subscription_serves_every_local_subscriber(c: TestCluster) {
    let node = c.node(0);
    let mut clients = Vec::new();
    for _ in 0..40 {
        let mut a = node.auth("dev-token-alice").await;
        a.subscribe(TOPIC).await;
        clients.push(a);
    }
    let subs = node.state.hub.bus_subscriptions().await;
    assert_eq!(subs.len(), 1, "40 local subscribers, one bus subscription: {subs:?}");
    for a in clients.drain(..) {
        a.close().await;
    }
    // Closes are processed asynchronously: wait (bounded) for the last release.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    while !node.state.hub.bus_subscriptions().await.is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "the last unsubscribe released the bus subscription");
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_isolate_clusters_on_one_broker_and_redis() {
    let Some(a) = TestCluster::external(1, builder()).await else { return };
    let Some(b) = TestCluster::external(1, builder()).await else { return };
    assert_ne!(a.namespace, b.namespace);
    let mut in_b = b.node(0).auth("dev-token-alice").await;
    in_b.subscribe(TOPIC).await;
    in_b.send(frame! {"type" => "presence", "roomId" => "general", "data" => frame!{"s" => 1}}).await;
    in_b.expect("presence").await;
    let mut in_a = a.node(0).auth("dev-token-bob").await;
    in_a.publish_acked(TOPIC, "a-only".into()).await;
    in_a.send(frame! {"type" => "getPresence", "roomId" => "general"}).await;
    assert_eq!(in_a.expect("presenceList").await.get("data"), &Value::Array(vec![]), "b's presence is not in a");
    let mut b_pub = b.node(0).auth("dev-token-carol").await;
    b_pub.publish_acked(TOPIC, "b".into()).await;
    assert_eq!(in_b.expect("message").await.str("data"), "b", "a's publish never reached b");
}

async fn durable_agent(n: &TestServer, client_id: &str, reconnect: bool) -> skua_testkit::WsClient {
    let mut c = n.connect().await;
    c.auth_session("dev-token-agent", Some(client_id), reconnect).await;
    c
}

/// Takeover, backlogs and a group's redelivery work whichever nodes the connections are on.
async fn durable_sessions_span_nodes(c: TestCluster) {
    const TASKS: &str = "demo/general/tasks";
    // A clientId claimed on node 2 closes its older connection on node 0.
    let mut older = durable_agent(c.node(0), "roamer", false).await;
    older.subscribe(TASKS).await;
    let newer = durable_agent(c.node(2), "roamer", false).await;
    assert_eq!(older.expect_close().await, (4009, "session_taken_over".to_owned()));
    newer.close().await;

    // Published on node 1 while the session is away; collected on node 2 by a fresh process of
    // the worker (no reconnect flag: it subscribes again and finds its queue, N25).
    let mut bob = c.node(1).auth("dev-token-bob").await;
    bob.publish_acked(TASKS, Value::from(1)).await;
    let mut back = durable_agent(c.node(2), "roamer", false).await;
    back.subscribe(TASKS).await;
    assert_eq!(back.expect("message").await.get("data").as_i64(), Some(1));
    back.close().await;

    // A group member on node 0 leaves without acking; the member on node 1 gets its message.
    let mut w0 = durable_agent(c.node(0), "g0", false).await;
    let mut w1 = durable_agent(c.node(1), "g1", false).await;
    for w in [&mut w0, &mut w1] {
        w.send(frame! {"type" => "subscribe", "topic" => TASKS, "loadBalance" => true, "loadBalanceGroup" => "span"})
            .await;
        w.expect("subscribed").await;
    }
    for n in 10..14 {
        bob.publish_acked(TASKS, Value::from(n)).await;
    }
    let mut on_w1 = Vec::new();
    let mut on_w0 = Vec::new();
    while on_w0.len() + on_w1.len() < 4 {
        tokio::select! {
            m = w0.expect("message") => on_w0.push(m.get("data").as_i64().unwrap()),
            m = w1.expect("message") => {
                w1.send(frame! {"type" => "ack", "msgId" => m.str("msgId")}).await;
                on_w1.push(m.get("data").as_i64().unwrap());
            }
        }
    }
    w0.close().await;
    for want in &on_w0 {
        let m = w1.expect("message").await;
        assert_eq!(m.get("data").as_i64().as_ref(), Some(want));
        assert_eq!(m.get("isReplay"), &Value::Boolean(true));
    }
    w1.assert_nothing_pending().await;
}
