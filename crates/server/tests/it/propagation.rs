//! Control-plane changes reach every node's connections (issue 5, N15, N28): two nodes share
//! one registry store; changes go in through node 0's gRPC API and are observed by clients of
//! node 1. N15 promises 1 s; the nodes poll every 250 ms and the tests print what they measure,
//! but assert 3 s (twelve polls), so that a loaded machine does not fail them while a node
//! that stops propagating, or polls far too slowly, still does.

use std::time::{Duration, Instant};

use skua_control::pb;
use skua_testkit::control::{Control, Deadline};
use skua_testkit::postgres::TestDatabase;
use skua_testkit::{Event, TestCluster, TestServer, WsClient, frame};

/// The bound every change is held to here: N15's 1 s (docs/control-plane.md, "Propagation": a
/// design figure for a healthy node, not a hard bound) plus 2 s of slack for a loaded machine.
const WITHIN: Duration = Duration::from_secs(3);

async fn cluster() -> (TestCluster, Control) {
    let c = TestCluster::embedded(2, TestServer::builder().grpc()).await;
    let control = c.node(0).control().await;
    (c, control)
}

/// Subscribes until `subscribed` comes back (an unknown room answers `unknown_topic` until the
/// change arrives); returns how long it took.
async fn subscribe_within(client: &mut WsClient, topic: &str, within: Duration) -> Duration {
    let d = Deadline::new(&format!("subscribing to {topic}"), within);
    loop {
        client.send(frame! {"type" => "subscribe", "topic" => topic}).await;
        let f = client.next().await;
        match f.ty() {
            "subscribed" => return d.elapsed(),
            "error" => assert_eq!(f.str("error"), "unknown_topic", "{f:?}"),
            _ => panic!("unexpected {f:?}"),
        }
        d.tick().await;
    }
}

/// Authenticates `client` with `token`, retrying until the token is known.
async fn auth_within(client: &mut WsClient, token: &str, within: Duration) {
    let d = Deadline::new("authenticating", within);
    while client.auth(token, Some(2)).await.get("success") != &rmpv::Value::Boolean(true) {
        d.tick().await;
    }
}

/// Waits for the close frame and checks it came within `WITHIN` of `since`.
async fn closes_within(client: &mut WsClient, since: Instant) -> (u16, String) {
    let close = client.expect_close().await;
    assert!(since.elapsed() < WITHIN, "closed after {:?}", since.elapsed());
    close
}

fn ok<T>(r: Result<tonic::Response<T>, tonic::Status>) -> T {
    r.unwrap_or_else(|s| panic!("{:?}: {}", s.code(), s.message())).into_inner()
}

#[tokio::test]
async fn a_room_created_after_connect_is_subscribable_on_every_node_within_the_bound() {
    let (c, mut control) = cluster().await;
    let mut far = c.node(1).auth("dev-token-bob").await;
    let mut near = c.node(0).auth("dev-token-carol").await;
    far.send(frame! {"type" => "subscribe", "topic" => "demo/lobby-7/messages"}).await;
    assert_eq!(
        far.expect_error("unknown_topic").await.str("topic"),
        "demo/lobby-7/messages",
        "N15: never created on the data path"
    );
    ok(control
        .create_room(pb::CreateRoomRequest { app: "demo".into(), slug: "lobby-7".into(), ..Default::default() })
        .await);
    let took = subscribe_within(&mut far, "demo/lobby-7/messages", WITHIN).await;
    eprintln!("room visible on the other node after {took:?}");
    near.subscribe("demo/lobby-7/messages").await;
    let mut pub_ = c.node(1).auth("dev-token-alice").await;
    pub_.publish_acked("demo/lobby-7/messages", "hi".into()).await;
    assert_eq!(far.expect("message").await.str("topic"), "demo/lobby-7/messages");
    assert_eq!(near.expect("message").await.str("topic"), "demo/lobby-7/messages");
}

#[tokio::test]
async fn a_revoked_grant_ends_each_affected_subscription_with_an_error_frame() {
    let (c, mut control) = cluster().await;
    let mut alice = c.node(1).auth("dev-token-alice").await;
    alice.subscribe("demo/ops/messages").await;
    alice.subscribe("demo/ops/status").await;
    alice.subscribe("demo/ops/tasks").await;
    alice.subscribe("demo/general/messages").await;
    // Bob gets a grant of his own, so that the room stays private once alice's goes.
    skua_testkit::control::revoke_alices_ops_grant(&mut control).await;
    let since = Instant::now();
    let mut topics = Vec::new();
    for _ in 0..3 {
        let f = alice.expect_error("unknown_topic").await;
        assert_eq!(f.int("code"), 42940);
        topics.push(f.str("topic").to_owned());
    }
    assert!(since.elapsed() < WITHIN, "revoked after {:?}", since.elapsed());
    topics.sort();
    assert_eq!(topics, ["demo/ops/messages", "demo/ops/status", "demo/ops/tasks"]);
    // The subscriptions are gone, the logged one's durable delivery too; the unaffected one stays.
    let mut bob = c.node(0).auth("dev-token-bob").await;
    bob.publish_acked("demo/ops/messages", "secret".into()).await;
    bob.publish_acked("demo/ops/tasks", "secret task".into()).await;
    bob.publish_acked("demo/general/messages", "public".into()).await;
    let m = alice.expect("message").await;
    assert_eq!(m.str("topic"), "demo/general/messages");
    alice.assert_nothing_pending().await;
}

#[tokio::test]
async fn deactivated_and_deleted_actors_close_4001_on_every_node() {
    let (c, mut control) = cluster().await;
    let mut a0 = c.node(0).auth("dev-token-alice").await;
    let mut a1 = c.node(1).auth("dev-token-alice").await;
    let mut b1 = c.node(1).auth("dev-token-bob").await;
    let since = Instant::now();
    ok(control.deactivate_actor(pb::ActorRef { actor_id: "alice".into() }).await);
    assert_eq!(closes_within(&mut a0, since).await, (4001, "token_revoked".into()));
    assert_eq!(closes_within(&mut a1, since).await, (4001, "token_revoked".into()));
    let since = Instant::now();
    ok(control.delete_actor(pb::ActorRef { actor_id: "bob".into() }).await);
    assert_eq!(closes_within(&mut b1, since).await, (4001, "token_not_found".into()));
}

#[tokio::test]
async fn a_rotated_token_closes_the_connections_that_used_the_old_one() {
    let (c, mut control) = cluster().await;
    let created = ok(control
        .create_actor(pb::CreateActorRequest {
            id: "worker-3".into(),
            actor_type: "agent".into(),
            ..Default::default()
        })
        .await);
    let mut old = WsClient::connect(&c.node(1).url()).await;
    // The new actor reaches node 1 within a second too.
    auth_within(&mut old, &created.access_token, WITHIN).await;
    let since = Instant::now();
    let rotated = ok(control.rotate_actor_token(pb::ActorRef { actor_id: "worker-3".into() }).await);
    assert_eq!(closes_within(&mut old, since).await, (4001, "token_revoked".into()));
    let mut new = c.node(1).connect().await;
    auth_within(&mut new, &rotated.access_token, WITHIN).await;
}

#[tokio::test]
async fn disconnect_actor_closes_its_connections_on_every_node_and_lets_it_back() {
    let (c, mut control) = cluster().await;
    let mut a0 = c.node(0).auth("dev-token-agent").await;
    let mut a1 = c.node(1).auth("dev-token-agent").await;
    let since = Instant::now();
    let r = ok(control.disconnect_actor(pb::ActorRef { actor_id: "agent-1".into() }).await);
    assert_eq!(r.closed_on_this_node, 1);
    assert_eq!(closes_within(&mut a0, since).await, (4001, "token_revoked".into()));
    assert_eq!(closes_within(&mut a1, since).await, (4001, "token_revoked".into()));
    let mut back = c.node(1).auth("dev-token-agent").await;
    back.subscribe("demo/general/tasks").await;
}

#[tokio::test]
async fn a_lowered_connection_limit_closes_the_newest_with_4002_and_refuses_new_auths() {
    let (c, mut control) = cluster().await;
    let mut first = c.node(1).auth("dev-token-alice").await;
    let mut second = c.node(1).auth("dev-token-bob").await;
    let since = Instant::now();
    ok(control
        .update_project(pb::UpdateProjectRequest {
            project_id: "demo-project".into(),
            limits: Some(pb::ProjectLimits { max_connections: Some(1), ..Default::default() }),
            ..Default::default()
        })
        .await);
    assert_eq!(closes_within(&mut second, since).await, (4002, "connection_limit_reached".into()));
    first.assert_nothing_pending().await;
    let mut third = c.node(1).connect().await;
    let d = Deadline::new("auth is refused at the limit", WITHIN);
    loop {
        let f = third.auth("dev-token-carol", Some(2)).await;
        if f.str("error") == "connection_limit_reached" {
            break;
        }
        assert!(f.get("success") == &rmpv::Value::Boolean(true), "{f:?}");
        third = c.node(1).connect().await;
        d.tick().await;
    }
}

#[tokio::test]
async fn a_project_past_its_monthly_quota_gets_42920_on_every_node() {
    let (c, mut control) = cluster().await;
    let mut bob = c.node(0).auth("dev-token-bob").await;
    let mut carol = c.node(1).auth("dev-token-carol").await;
    ok(control
        .update_project(pb::UpdateProjectRequest {
            project_id: "demo-project".into(),
            limits: Some(pb::ProjectLimits { monthly_message_quota: Some(3), ..Default::default() }),
            ..Default::default()
        })
        .await);
    // The limit reaches node 0 with the write; publishes count from there.
    for _ in 0..3 {
        bob.publish_acked("demo/general/messages", "x".into()).await;
    }
    bob.send(frame! {"type" => "publish", "topic" => "demo/general/messages", "data" => "y", "msgRef" => "r4"}).await;
    let f = bob.expect_error("monthly_quota_exceeded").await;
    assert_eq!((f.int("code"), f.str("topic"), f.str("msgRef")), (42920, "demo/general/messages", "r4"));
    // Node 1 learns the cluster-wide count from the store.
    let d = Deadline::new("node 1 refuses publishes past the quota", WITHIN);
    loop {
        carol
            .send(frame! {"type" => "publish", "topic" => "demo/general/messages", "data" => "z", "msgRef" => "q"})
            .await;
        let f = carol.next().await;
        if f.ty() == "error" && f.str("error") == "monthly_quota_exceeded" {
            break;
        }
        d.tick().await;
    }
    let got = ok(control.get_project(pb::GetProjectRequest { project_id: "demo-project".into() }).await);
    assert!(got.messages_this_month >= 3, "{got:?}");
}

#[tokio::test]
async fn lobby_room_changes_reach_lobby_subscribers() {
    let (c, mut control) = cluster().await;
    let mut viewer = c.node(1).auth("dev-token-viewer").await;
    viewer.send(frame! {"type" => "lobbySubscribe", "lobbyId" => "online"}).await;
    let snap = viewer.expect("lobbySubscribed").await;
    assert_eq!(snap.get("presence").as_map().map(Vec::len), Some(2));
    ok(control
        .set_lobby_rooms(pb::SetLobbyRoomsRequest {
            slug: "online".into(),
            rooms: vec!["general".into()],
            ..Default::default()
        })
        .await);
    let d = Deadline::new("the lobby covers one room on node 1", WITHIN);
    loop {
        viewer.send(frame! {"type" => "getLobbyPresence", "lobbyId" => "online"}).await;
        let f = viewer.expect("lobbyPresenceList").await;
        if f.get("presence").as_map().map(Vec::len) == Some(1) {
            break;
        }
        d.tick().await;
    }
    // Presence in the dropped room no longer reaches the lobby subscriber.
    let mut bob = c.node(1).auth("dev-token-bob").await;
    bob.send(frame! {"type" => "presence", "roomId" => "random", "data" => frame! {"s" => 1}}).await;
    bob.send(frame! {"type" => "presence", "roomId" => "general", "data" => frame! {"s" => 2}}).await;
    let ev = viewer.next_of("lobbyPresence").await;
    assert_eq!((ev.str("event"), ev.str("roomId")), ("join", "general"), "{ev:?}");
    ok(control.delete_lobby(pb::DeleteLobbyRequest { slug: "online".into(), ..Default::default() }).await);
    let f = viewer.next_of("error").await;
    assert_eq!((f.str("error"), f.str("lobbyId")), ("not_authorized", "online"));
}

#[tokio::test]
async fn periodic_revalidation_ends_subscriptions_whose_grant_expired() {
    let builder = TestServer::builder().grpc().settings(|s| s.edge.revalidate_interval = Some("200ms".into()));
    let s = builder.spawn().await;
    let mut control = s.control().await;
    // Far enough ahead that a loaded machine still subscribes before it.
    let expires_at = skua_testkit::now_s() + 5;
    ok(control
        .create_grant(pb::CreateGrantRequest {
            app: "demo".into(),
            room: "ops".into(),
            actor_id: "bob".into(),
            permission: "subscribe".into(),
            expires_at,
            ..Default::default()
        })
        .await);
    let mut bob = s.auth("dev-token-bob").await;
    bob.subscribe("demo/ops/messages").await;
    // No registry change happens: the timer notices the expiry.
    let f = match bob.next_event_within(Duration::from_secs(10)).await {
        Some(Event::Frame(f)) => f,
        other => panic!("expected the revocation error, got {other:?}"),
    };
    assert_eq!((f.str("error"), f.str("topic")), ("unknown_topic", "demo/ops/messages"));
    assert!(skua_testkit::now_s() >= expires_at);
}

#[tokio::test]
async fn two_nodes_on_postgres_see_every_change_within_the_bound() {
    let Some(db) = TestDatabase::migrated().await else { return };
    let builder = TestServer::builder().grpc().settings(|s| s.node.store = Some(db.url.clone()));
    let embedded = skua_server::node::Embedded::default();
    let n0 = builder.spawn_with(&embedded).await;
    let n1 = builder.spawn_with(&embedded).await;
    let mut control = n0.control().await;
    let mut far = n1.auth("dev-token-bob").await;
    ok(control
        .create_room(pb::CreateRoomRequest { app: "demo".into(), slug: "pg-room".into(), ..Default::default() })
        .await);
    let took = subscribe_within(&mut far, "demo/pg-room/messages", WITHIN).await;
    eprintln!("Postgres: room visible on the other node after {took:?}");
    let since = Instant::now();
    ok(control.deactivate_actor(pb::ActorRef { actor_id: "bob".into() }).await);
    assert_eq!(closes_within(&mut far, since).await, (4001, "token_revoked".into()));
    // The second node reads the same registry: it serves the room after a restart too.
    drop(n1);
    let n2 = builder.spawn_with(&embedded).await;
    let mut carol = n2.auth("dev-token-carol").await;
    carol.subscribe("demo/pg-room/messages").await;
}

#[tokio::test]
async fn a_node_whose_store_is_unreachable_keeps_serving_and_catches_up_when_it_returns() {
    let Some(db) = TestDatabase::migrated().await else { return };
    let proxy = skua_testkit::proxy::TcpProxy::start(db.server_addr()).await;
    let embedded = skua_server::node::Embedded::default();
    let via_proxy = db.url_via(proxy.addr);
    let cut_off =
        TestServer::builder().grpc().settings(move |s| s.node.store = Some(via_proxy)).spawn_with(&embedded).await;
    let direct = db.url.clone();
    let healthy =
        TestServer::builder().grpc().settings(move |s| s.node.store = Some(direct)).spawn_with(&embedded).await;
    let mut alice = cut_off.auth("dev-token-alice").await;
    alice.subscribe("demo/general/messages").await;

    proxy.cut();
    // The cut-off node refuses writes with UNAVAILABLE, once its pool notices.
    let mut control = cut_off.control().await;
    let d = Deadline::new("writes through the cut-off node fail", Duration::from_secs(10));
    for attempt in 0.. {
        let slug = format!("never-{attempt}");
        let r = control.create_room(pb::CreateRoomRequest { app: "demo".into(), slug, ..Default::default() }).await;
        match r {
            Err(s) if s.code() == tonic::Code::Unavailable => break,
            Err(s) => panic!("{:?}: {}", s.code(), s.message()),
            Ok(_) => {}
        }
        d.tick().await;
    }
    // It keeps serving with the registry it has: auth, subscribe, publish, deliver.
    let mut bob = cut_off.auth("dev-token-bob").await;
    bob.publish_acked("demo/general/messages", "still here".into()).await;
    assert_eq!(alice.expect("message").await.str("from"), "bob");

    // Meanwhile the healthy node changes the registry.
    let mut healthy_control = healthy.control().await;
    ok(healthy_control
        .create_room(pb::CreateRoomRequest { app: "demo".into(), slug: "after-outage".into(), ..Default::default() })
        .await);
    proxy.restore();
    let took = subscribe_within(&mut alice, "demo/after-outage/messages", Duration::from_secs(10)).await;
    eprintln!("caught up {took:?} after the store came back");
}

#[tokio::test]
async fn connections_of_every_node_are_listed_on_a_shared_store() {
    let Some(db) = TestDatabase::migrated().await else { return };
    let url = db.url.clone();
    let builder = TestServer::builder().grpc().settings(move |s| s.node.store = Some(url));
    let embedded = skua_server::node::Embedded::default();
    let n0 = builder.clone().settings(|s| s.node.node_id = Some("pg-node-0".into())).spawn_with(&embedded).await;
    let n1 = builder.settings(|s| s.node.node_id = Some("pg-node-1".into())).spawn_with(&embedded).await;
    let mut control = n0.control().await;
    let _bob = n0.auth("dev-token-bob").await;
    let mut alice = n1.auth("dev-token-alice").await;
    alice.subscribe("demo/general/messages").await;
    let list = |c: &mut Control, actor: &str| {
        let r = pb::ListConnectionsRequest { actor_id: actor.into(), ..Default::default() };
        let mut c = c.clone();
        async move { ok(c.list_connections(r).await).connections }
    };
    let d = Deadline::new("node 1's connection is listed on node 0", WITHIN);
    let listed = loop {
        let all = list(&mut control, "").await;
        if all.len() == 2 {
            break all;
        }
        d.tick().await;
    };
    let nodes: Vec<(&str, &str)> = listed.iter().map(|c| (c.node_id.as_str(), c.actor_id.as_str())).collect();
    assert!(nodes.contains(&("pg-node-0", "bob")) && nodes.contains(&("pg-node-1", "alice")), "{nodes:?}");
    let d = Deadline::new("the subscription count follows", WITHIN);
    while list(&mut control, "alice").await.first().map(|c| c.subscriptions) != Some(1) {
        d.tick().await;
    }
    alice.close().await;
    let d = Deadline::new("a closed connection leaves the list", WITHIN);
    while !list(&mut control, "alice").await.is_empty() {
        d.tick().await;
    }
    let _carol = n1.auth("dev-token-carol").await;
    let d = Deadline::new("carol is listed", WITHIN);
    while list(&mut control, "carol").await.is_empty() {
        d.tick().await;
    }
    assert!(n1.shutdown().await);
    assert!(list(&mut control, "carol").await.is_empty(), "a stopped node's connections are gone at once");
}

#[tokio::test]
async fn revalidation_checks_the_credential_of_the_last_reauth() {
    let s = TestServer::builder().grpc().spawn().await;
    let mut control = s.control().await;
    let mut alice = s.auth("dev-token-alice").await;
    let mut bob = s.auth("dev-token-bob").await;
    let jwt = skua_testkit::dev_jwt("alice", skua_testkit::now_s() + 3600);
    alice.send(frame! {"type" => "reauth", "token" => jwt.as_str()}).await;
    alice.expect("reauth").await;
    ok(control.rotate_actor_token(pb::ActorRef { actor_id: "alice".into() }).await);
    ok(control.rotate_actor_token(pb::ActorRef { actor_id: "bob".into() }).await);
    assert_eq!(bob.expect_close().await, (4001, "token_revoked".into()), "bob still used his old token");
    alice.assert_nothing_pending().await;
}

/// Issue 23, item 9: after a point-in-time restore the stored registry version is below the
/// one the nodes serve. They install the stored registry (a later room is gone again), and
/// admin writes work at once instead of conflicting until a restart.
#[tokio::test]
async fn a_restored_registry_with_a_lower_version_is_installed_and_writes_work_again() {
    use sqlx::Connection as _;
    let Some(db) = TestDatabase::migrated().await else { return };
    let builder = TestServer::builder().grpc().settings(|s| s.node.store = Some(db.url.clone()));
    let embedded = skua_server::node::Embedded::default();
    let n0 = builder.spawn_with(&embedded).await;
    let n1 = builder.spawn_with(&embedded).await;
    let mut control = n0.control().await;
    let room = |slug: &str| pb::CreateRoomRequest { app: "demo".into(), slug: slug.into(), ..Default::default() };
    ok(control.create_room(room("before-backup")).await);

    // The backup: the registry as it is now.
    let mut conn = sqlx::PgConnection::connect(&db.url).await.expect("connect");
    let backup_version: i64 = sqlx::query_scalar("SELECT version FROM registry_version WHERE id = 1")
        .fetch_one(&mut conn)
        .await
        .expect("version");
    let backup: Vec<(String, String, String, String)> =
        sqlx::query_as("SELECT kind, key, project, spec FROM registry_objects")
            .fetch_all(&mut conn)
            .await
            .expect("rows");

    // Changes after the backup, seen by both nodes.
    for slug in ["after-backup-1", "after-backup-2", "after-backup-3"] {
        ok(control.create_room(room(slug)).await);
    }
    let mut far = n1.auth("dev-token-bob").await;
    subscribe_within(&mut far, "demo/after-backup-1/messages", WITHIN).await;

    // The restore, as a point-in-time recovery leaves it.
    let mut tx = conn.begin().await.expect("begin");
    sqlx::query("DELETE FROM registry_objects").execute(&mut *tx).await.expect("delete");
    for (kind, key, project, spec) in &backup {
        sqlx::query("INSERT INTO registry_objects (kind, key, project, spec) VALUES ($1, $2, $3, $4)")
            .bind(kind)
            .bind(key)
            .bind(project)
            .bind(spec)
            .execute(&mut *tx)
            .await
            .expect("insert");
    }
    sqlx::query("UPDATE registry_version SET version = $1 WHERE id = 1")
        .bind(backup_version)
        .execute(&mut *tx)
        .await
        .expect("version");
    tx.commit().await.expect("commit");
    let _ = conn.close().await;

    // Both nodes serve the restored registry: the later room is unknown again.
    for node in [&n0, &n1] {
        let mut c = node.auth("dev-token-carol").await;
        let d = Deadline::new("the restored registry is installed", WITHIN);
        loop {
            c.send(frame! {"type" => "subscribe", "topic" => "demo/after-backup-2/messages"}).await;
            let f = c.next().await;
            if f.ty() == "error" {
                assert_eq!(f.str("error"), "unknown_topic", "{f:?}");
                break;
            }
            assert_eq!(f.ty(), "subscribed", "{f:?}");
            d.tick().await;
        }
        node.auth("dev-token-alice").await.subscribe("demo/before-backup/messages").await;
    }
    // Admin writes work at once, through either node, and reach the other one.
    ok(control.create_room(room("after-restore")).await);
    let mut other = n1.control().await;
    ok(other.create_room(room("after-restore-2")).await);
    let mut carol = n0.auth("dev-token-carol").await;
    subscribe_within(&mut carol, "demo/after-restore-2/messages", WITHIN).await;
    let m = skua_testkit::http::Scrape::of(n1.addr).await;
    assert!(m.value("skua_registry_resets_total", &[]) >= 1.0, "{}", m.text);
}

/// Publishes `topic` with a `msgRef` and returns the answer: `published` or an `error`.
async fn publish_answer(client: &mut WsClient, topic: &str) -> skua_testkit::Frame {
    client.send(frame! {"type" => "publish", "topic" => topic, "data" => "x", "msgRef" => "r"}).await;
    let f = client.next().await;
    assert!(matches!(f.ty(), "published" | "error"), "unexpected {f:?}");
    f
}

#[tokio::test]
async fn a_revoked_grant_refuses_the_next_publish_on_a_topic_the_connection_published_to() {
    // Retried every 10 ms: the publish rate limit must not answer first.
    let s = TestServer::builder().grpc().settings(|s| s.edge.rate_limit = Some(100_000)).spawn().await;
    let mut control = s.control().await;
    let mut alice = s.auth("dev-token-alice").await;
    // Twice: the second publish is served by the connection's topic cache.
    alice.publish_acked("demo/ops/messages", "one".into()).await;
    alice.publish_acked("demo/ops/messages", "two".into()).await;
    skua_testkit::control::revoke_alices_ops_grant(&mut control).await;
    let d = Deadline::new("a refused publish after the revocation", WITHIN);
    loop {
        let f = publish_answer(&mut alice, "demo/ops/messages").await;
        if f.ty() == "error" {
            assert_eq!((f.str("error"), f.str("topic"), f.str("msgRef")), ("unknown_topic", "demo/ops/messages", "r"));
            break;
        }
        d.tick().await;
    }
    // And it stays refused.
    let f = publish_answer(&mut alice, "demo/ops/messages").await;
    assert_eq!(f.str("error"), "unknown_topic", "{f:?}");
    alice.publish_acked("demo/general/messages", "still fine".into()).await;
}

#[tokio::test]
async fn an_expired_grant_refuses_publishes_without_any_registry_change() {
    // Retried every 10 ms: the publish rate limit must not answer first.
    let s = TestServer::builder().grpc().settings(|s| s.edge.rate_limit = Some(100_000)).spawn().await;
    let mut control = s.control().await;
    // Far enough ahead that a loaded machine still publishes before it.
    let expires_at = skua_testkit::now_s() + 3;
    ok(control
        .create_grant(pb::CreateGrantRequest {
            app: "demo".into(),
            room: "ops".into(),
            actor_id: "bob".into(),
            permission: "pubSub".into(),
            expires_at,
            ..Default::default()
        })
        .await);
    let mut bob = s.auth("dev-token-bob").await;
    // Cached from the first publish on; no registry change happens after it, so only the
    // grant's expiry can end the cached answer.
    bob.publish_acked("demo/ops/messages", "before".into()).await;
    let d = Deadline::new("a refused publish after the grant expired", Duration::from_secs(10));
    loop {
        let sent_at = skua_testkit::now_s();
        let f = publish_answer(&mut bob, "demo/ops/messages").await;
        if f.ty() == "error" {
            assert_eq!(f.str("error"), "unknown_topic", "{f:?}");
            assert!(skua_testkit::now_s() >= expires_at, "refused before the grant expired");
            break;
        }
        assert!(sent_at < expires_at, "published at {sent_at}, the grant expired at {expires_at}");
        d.tick().await;
    }
}
