//! Issue 12, defect 2: retained messages can neither make a topic unusable (a snapshot larger
//! than a subscriber's queue used to close it 4008 before `subscribed`) nor grow memory
//! without bound (per-topic and node-wide byte caps with a defined error, in /metrics).

use rmpv::Value;
use skua_testkit::{TestServer, frame};

const TOPIC: &str = "demo/general/messages";
const BIG: usize = 921_000;

fn retained(filter: &str, fill: u8, msg_ref: &str) -> Value {
    frame! {"type" => "publish", "topic" => TOPIC, "data" => Value::Binary(vec![fill; BIG]),
    "filter" => filter, "retain" => true, "msgRef" => msg_ref}
}

#[tokio::test]
async fn a_retained_snapshot_larger_than_the_queue_is_paced_not_closed() {
    // Ten ~900 KB retained messages: more than twice the 4 MiB outbound queue.
    let server =
        TestServer::builder().settings(|s| s.edge.max_retained_bytes_per_topic = Some(16 * 1024 * 1024)).spawn().await;
    let mut bob = server.auth("dev-token-bob").await;
    for i in 0..10u8 {
        bob.send(retained(&format!("k{i}"), i, &format!("r{i}"))).await;
        assert_eq!(bob.expect("published").await.str("msgRef"), format!("r{i}"));
    }
    let mut alice = server.auth("dev-token-alice").await;
    alice.send(frame! {"type" => "subscribe", "topic" => TOPIC}).await;
    assert_eq!(alice.expect("subscribed").await.str("topic"), TOPIC);
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..10 {
        let m = alice.expect("message").await;
        let filter = m.str("filter").to_owned();
        let i: u8 = filter[1..].parse().expect("k<i>");
        assert_eq!(m.get("data"), &Value::Binary(vec![i; BIG]), "{filter}: data intact");
        assert!(seen.insert(i), "{filter} twice");
    }
    // Still open and usable: a live publish after the snapshot arrives.
    bob.send(frame! {"type" => "publish", "topic" => TOPIC, "data" => "live", "msgRef" => "live"}).await;
    bob.expect("published").await;
    assert_eq!(alice.next_of("message").await.get("data"), &Value::from("live"));
    let m = skua_testkit::http::Scrape::of(server.addr).await;
    assert_eq!(m.value_or_zero("skua_closes_total", &[("reason", "slow_consumer")]), 0.0);
}

#[tokio::test]
async fn retained_bytes_are_capped_per_topic_and_per_node_with_a_defined_error() {
    let server = TestServer::start().await;
    let mut bob = server.auth("dev-token-bob").await;
    // The default 4 MiB per topic holds four ~900 KB messages; the fifth key is refused and
    // nothing of it is published.
    let mut alice = server.auth("dev-token-alice").await;
    alice.subscribe(TOPIC).await;
    for i in 0..4u8 {
        bob.send(retained(&format!("k{i}"), i, &format!("r{i}"))).await;
        bob.expect("published").await;
        alice.expect("message").await;
    }
    bob.send(retained("k4", 4, "r4")).await;
    let e = bob.expect("error").await;
    assert_eq!(e.str("error"), "retained_limit_exceeded");
    assert_eq!(e.str("msgRef"), "r4");
    assert!(e.str("hint").contains("max_retained_bytes_per_topic"), "{}", e.str("hint"));
    alice.assert_nothing_pending().await;
    // Replacing a kept key always fits; a small message on another topic too.
    bob.send(retained("k0", 9, "again")).await;
    bob.expect("published").await;
    alice.expect("message").await;
    bob.send(
        frame! {"type" => "publish", "topic" => "demo/general/status", "data" => 1, "retain" => true, "msgRef" => "s"},
    )
    .await;
    bob.expect("published").await;
    let m = skua_testkit::http::Scrape::of(server.addr).await;
    assert_eq!(m.value("skua_retained_refused_total", &[("cap", "topic_bytes")]), 1.0);
    let kept = m.value("skua_retained_bytes", &[]);
    assert!(kept > 4.0 * BIG as f64 && kept < 4.0 * 1024.0 * 1024.0 + 1024.0, "skua_retained_bytes {kept}");
}

#[tokio::test]
async fn the_node_wide_retained_cap_refuses_new_keys_anywhere() {
    let server = TestServer::builder().settings(|s| s.edge.max_retained_bytes = Some(2 * 1024 * 1024)).spawn().await;
    let mut bob = server.auth("dev-token-bob").await;
    bob.send(retained("a", 1, "1")).await;
    bob.expect("published").await;
    bob.send(retained("b", 2, "2")).await;
    bob.expect("published").await;
    bob.send(frame! {"type" => "publish", "topic" => "demo/random/status", "data" => Value::Binary(vec![0; 300_000]),
    "retain" => true, "msgRef" => "3"})
        .await;
    let e = bob.expect("error").await;
    assert_eq!(e.str("error"), "retained_limit_exceeded");
    assert!(e.str("hint").contains("max_retained_bytes"), "{}", e.str("hint"));
    // Not retained, the same publish goes through.
    bob.send(frame! {"type" => "publish", "topic" => "demo/random/status", "data" => 1, "msgRef" => "4"}).await;
    bob.expect("published").await;
    let m = skua_testkit::http::Scrape::of(server.addr).await;
    assert_eq!(m.value("skua_retained_refused_total", &[("cap", "node_bytes")]), 1.0);
}

// ---------------------------------------------------------------------------------------------
// Issue 33, item 4: the retained pool is shared by tenants; deleting rooms gives their bytes
// back, and each project may take only its share.

/// A second tenant, `tenant-b`, with rooms `r1`..`r3` (topic `t`), a publisher `b-token` and a
/// subscriber `b-sub-token`.
const TENANT_B: &str = r#"
[[projects]]
id = "tenant-b"

[[projects.apps]]
id = "tenant-b-app"
slug = "b"
topics = ["t"]

[[projects.apps.rooms]]
slug = "r1"

[[projects.apps.rooms]]
slug = "r2"

[[projects.apps.rooms]]
slug = "r3"

[[actors]]
id = "b-pub"
project = "tenant-b"
type = "device"
tokens = ["b-token"]

[[actors]]
id = "b-sub"
project = "tenant-b"
type = "user"
tokens = ["b-sub-token"]
"#;

fn retained_on(topic: &str, fill: u8, msg_ref: &str) -> Value {
    frame! {"type" => "publish", "topic" => topic, "data" => Value::Binary(vec![fill; BIG]),
    "retain" => true, "msgRef" => msg_ref}
}

#[tokio::test]
async fn deleting_a_tenant_s_rooms_gives_their_retained_bytes_back_to_the_others() {
    let server = TestServer::builder()
        .fixtures(TENANT_B)
        .grpc()
        .settings(|s| s.edge.max_retained_bytes = Some(3 * 1024 * 1024))
        .spawn()
        .await;
    let mut b = server.auth("b-token").await;
    for room in ["r1", "r2", "r3"] {
        b.send(retained_on(&format!("b/{room}/t"), 1, room)).await;
        assert_eq!(b.expect("published").await.str("msgRef"), room);
    }
    let mut alice = server.auth("dev-token-alice").await;
    alice.send(retained_on(TOPIC, 2, "a1")).await;
    assert_eq!(alice.expect_error("retained_limit_exceeded").await.str("msgRef"), "a1", "the pool is full");
    let mut control = server.control().await;
    for room in ["r1", "r2", "r3"] {
        let r =
            skua_control::pb::DeleteRoomRequest { project_id: "tenant-b".into(), app: "b".into(), slug: room.into() };
        control.delete_room(r).await.expect("delete_room");
    }
    // The control plane installs the change on this node before answering: the bytes are back.
    alice.send(retained_on(TOPIC, 2, "a2")).await;
    assert_eq!(alice.expect("published").await.str("msgRef"), "a2");
    let m = skua_testkit::http::Scrape::of(server.addr).await;
    let kept = m.value("skua_retained_bytes", &[]);
    assert!(kept < 2.0 * BIG as f64, "only alice's message is counted: {kept}");
    // And the messages themselves are gone: a room made again with the same name replays nothing.
    let r = skua_control::pb::CreateRoomRequest {
        project_id: "tenant-b".into(),
        app: "b".into(),
        slug: "r1".into(),
        ..Default::default()
    };
    control.create_room(r).await.expect("create_room");
    let mut watcher = server.auth("b-sub-token").await;
    watcher.subscribe("b/r1/t").await;
    // A replay is queued when the subscription is made, so it would come before a live message.
    b.publish_acked("b/r1/t", "live".into()).await;
    let first = watcher.expect("message").await;
    assert!(first.get("data").as_str() == Some("live"), "the deleted room's retained message was replayed");
}

#[tokio::test]
async fn one_project_cannot_take_the_whole_retained_pool() {
    let server = TestServer::builder()
        .fixtures(TENANT_B)
        .settings(|s| {
            s.edge.max_retained_bytes = Some(4 * 1024 * 1024);
            s.edge.max_retained_bytes_per_project = Some(2 * 1024 * 1024);
        })
        .spawn()
        .await;
    let mut b = server.auth("b-token").await;
    for room in ["r1", "r2"] {
        b.send(retained_on(&format!("b/{room}/t"), 1, room)).await;
        assert_eq!(b.expect("published").await.str("msgRef"), room);
    }
    b.send(retained_on("b/r3/t", 1, "r3")).await;
    let e = b.expect_error("retained_limit_exceeded").await;
    assert_eq!(e.str("msgRef"), "r3");
    assert!(e.str("hint").contains("max_retained_bytes_per_project"), "{}", e.str("hint"));
    // The other tenant still has its share.
    let mut alice = server.auth("dev-token-alice").await;
    for (topic, r) in [(TOPIC, "a1"), ("demo/random/messages", "a2")] {
        alice.send(retained_on(topic, 2, r)).await;
        assert_eq!(alice.expect("published").await.str("msgRef"), r);
    }
    let m = skua_testkit::http::Scrape::of(server.addr).await;
    assert_eq!(m.value("skua_retained_refused_total", &[("cap", "project_bytes")]), 1.0);
}

// ---------------------------------------------------------------------------------------------
// docs/security.md: across nodes, a retained publication another node sent that would break
// this node's cap is delivered live but not kept, and the older one of its key is dropped
// (never served stale).

/// The `data` of every retained message a new subscriber of `TOPIC` on `node` is sent.
async fn retained_seen_by_a_new_subscriber(node: &TestServer) -> Vec<Value> {
    let mut carol = node.auth("dev-token-alice").await;
    carol.subscribe(TOPIC).await;
    let got = carol.drain_frames().await.into_iter().filter(|f| f.ty() == "message").map(|f| f.get("data").clone());
    got.collect()
}

#[tokio::test]
async fn a_retained_publication_from_another_node_over_this_node_s_cap_is_delivered_live_but_not_kept() {
    let embedded = skua_server::node::Embedded::default();
    let namespace = skua_testkit::cluster::unique_namespace();
    let node = |id: &str, cap: Option<usize>| {
        let (ns, id) = (namespace.clone(), id.to_owned());
        TestServer::builder().settings(move |s| {
            s.edge.namespace = Some(ns);
            s.node.node_id = Some(id);
            s.edge.max_retained_bytes_per_topic = cap;
        })
    };
    // Node 0 keeps the default 4 MiB per topic; node 1 only 2000 bytes.
    let n0 = node("node-0", None).spawn_with(&embedded).await;
    let n1 = node("node-1", Some(2000)).spawn_with(&embedded).await;
    let mut alice = n1.auth("dev-token-alice").await;
    alice.subscribe(TOPIC).await;
    let mut bob = n0.auth("dev-token-bob").await;
    let publish = |key: &str, data: Value| {
        frame! {"type" => "publish", "topic" => TOPIC, "data" => data, "filter" => key, "retain" => true, "msgRef" => key}
    };

    // Small: kept on both nodes.
    bob.send(publish("k", Value::from("small"))).await;
    bob.expect("published").await;
    assert_eq!(alice.next_of("message").await.get("data"), &Value::from("small"));
    assert_eq!(retained_seen_by_a_new_subscriber(&n1).await, [Value::from("small")]);

    // Over node 1's cap: node 0 accepts and keeps it; node 1 delivers it live, does not keep
    // it, and drops the older value of the key rather than serve it stale.
    let big = Value::Binary(vec![7; 3000]);
    bob.send(publish("k", big.clone())).await;
    bob.expect("published").await;
    assert_eq!(alice.next_of("message").await.get("data"), &big, "delivered live on node 1");
    assert_eq!(retained_seen_by_a_new_subscriber(&n0).await, [big], "kept on node 0");
    assert_eq!(retained_seen_by_a_new_subscriber(&n1).await, Vec::<Value>::new(), "neither kept nor stale on node 1");
    let m = skua_testkit::http::Scrape::of(n1.addr).await;
    assert!(m.value("skua_retained_bytes", &[]) < 2000.0, "node 1 keeps nothing of it");
}
