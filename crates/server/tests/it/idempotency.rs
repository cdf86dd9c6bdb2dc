//! Idempotent publish (issue 19, item 4; docs/protocol.md "Idempotent publish"): a repeated key
//! is acknowledged `duplicate: true` and goes no further; keys are per project; a publish the
//! store refused releases its key.

use std::sync::Arc;
use std::time::Duration;

use rmpv::Value;
use skua_testkit::control::Deadline;
use skua_testkit::http::Scrape;
use skua_testkit::postgres::TestDatabase;
use skua_testkit::proxy::TcpProxy;
use skua_testkit::{Frame, TestServer, WsClient, frame};

const TASKS: &str = "demo/general/tasks";

/// Counts the publishes the pipeline accepted (what stores, triggers and wakes follow).
#[derive(Debug, Default)]
struct Accepted(std::sync::atomic::AtomicU64);

impl skua_edge::publish::PublishObserver for Accepted {
    fn accepted(&self, _: &skua_edge::publish::PublishEvent<'_>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Publishes `data` to `topic` with `key` and returns the reply (`published` or `error`).
async fn publish(c: &mut WsClient, topic: &str, data: Value, key: &str) -> Frame {
    c.send(frame! {"type" => "publish", "topic" => topic, "data" => data, "msgRef" => "k", "idempotencyKey" => key})
        .await;
    c.next_of_within_any(&["published", "error"], Duration::from_secs(20)).await
}

fn duplicate(f: &Frame) -> bool {
    f.get("duplicate") == &Value::Boolean(true)
}

#[tokio::test]
async fn a_repeated_key_on_a_logged_topic_is_acked_as_a_duplicate_and_accepted_once() {
    let accepted = Arc::new(Accepted::default());
    let server = TestServer::builder().publish_observer(accepted.clone()).spawn().await;
    let mut bob = server.auth("dev-token-bob").await;
    bob.subscribe(TASKS).await;
    let mut alice = server.auth("dev-token-alice").await;
    let first = publish(&mut alice, TASKS, "job".into(), "order-1").await;
    assert!(first.ty() == "published" && !duplicate(&first), "{first:?}");
    let again = publish(&mut alice, TASKS, "job".into(), "order-1").await;
    assert!(again.ty() == "published" && duplicate(&again), "{again:?}");
    // Only the first reached the subscriber (and the store: it carries a msgId) ...
    let m = bob.next_of("message").await;
    assert_eq!(m.str("data"), "job");
    assert!(!m.str("msgId").is_empty());
    alice.publish_acked(TASKS, "marker".into()).await;
    assert_eq!(bob.next_of("message").await.str("data"), "marker", "the duplicate was delivered");
    // ... and only the first went past the pipeline (observers see what triggers and wakes see).
    assert_eq!(accepted.0.load(std::sync::atomic::Ordering::Relaxed), 2, "first and marker only");
    let scrape = Scrape::of(server.addr).await;
    assert_eq!(scrape.value("skua_publishes_total", &[("result", "duplicate")]), 1.0, "{}", scrape.text);
    assert_eq!(scrape.value("skua_idempotency_evictions_total", &[]), 0.0);
}

#[tokio::test]
async fn keys_are_per_project_and_limited_in_length() {
    let project = |p: &str| {
        format!(
            "[[projects]]\nid = \"{p}\"\n[[projects.apps]]\nid = \"{p}-app\"\nslug = \"app\"\ntopics = [\"t\"]\n\
             [[projects.apps.rooms]]\nslug = \"r\"\n[[actors]]\nid = \"{p}-a\"\nproject = \"{p}\"\ntype = \"user\"\n\
             tokens = [\"{p}-token\"]\n"
        )
    };
    let fixtures = format!("{}{}", project("one"), project("two"));
    let server = TestServer::builder()
        .fixtures(&fixtures)
        .settings(|s| s.edge.idempotency_max_key_length = Some(8))
        .spawn()
        .await;
    let mut one = server.auth("one-token").await;
    let mut two = server.auth("two-token").await;
    assert!(!duplicate(&publish(&mut one, "app/r/t", 1.into(), "same").await));
    assert!(!duplicate(&publish(&mut two, "app/r/t", 1.into(), "same").await), "another project's key");
    assert!(duplicate(&publish(&mut two, "app/r/t", 1.into(), "same").await));
    let e = publish(&mut one, "app/r/t", 1.into(), "123456789").await;
    assert_eq!(
        (e.str("error"), e.str("hint"), e.str("msgRef"), e.str("topic")),
        ("invalid_idempotency_key", "idempotencyKey must be 1 to 8 bytes", "k", "app/r/t"),
        "{e:?}"
    );
    assert!(!duplicate(&publish(&mut one, "app/r/t", 1.into(), "12345678").await), "8 bytes is fine");
}

/// The first publish of a key fails at the store (Postgres cut off): its key is released, and
/// the retry with the same key, once the store is back, is published and delivered.
#[tokio::test]
async fn a_publish_the_store_refused_does_not_block_its_retry() {
    let Some(db) = TestDatabase::migrated().await else { return };
    let proxy = TcpProxy::start(db.server_addr()).await;
    let url = db.url_via(proxy.addr);
    let server = TestServer::builder().settings(move |s| s.node.store = Some(url)).spawn().await;
    let mut bob = server.auth("dev-token-bob").await;
    bob.subscribe(TASKS).await;
    let mut alice = server.auth("dev-token-alice").await;
    proxy.cut();
    let d = Deadline::new("a logged publish gets store_unavailable", Duration::from_secs(30));
    let mut n = 0;
    loop {
        // A fresh key each time until one fails: a success must not leave its key behind.
        n += 1;
        let f = publish(&mut alice, TASKS, "down".into(), &format!("down-{n}")).await;
        if f.ty() == "error" {
            assert_eq!(f.str("error"), "store_unavailable", "{f:?}");
            break;
        }
        d.tick().await;
    }
    let failed_key = format!("down-{n}");
    proxy.restore();
    let d = Deadline::new("the retry is published", Duration::from_secs(30));
    loop {
        let f = publish(&mut alice, TASKS, "retried".into(), &failed_key).await;
        if f.ty() == "published" {
            assert!(!duplicate(&f), "the failed publish kept its key: {f:?}");
            break;
        }
        assert_eq!(f.str("error"), "store_unavailable", "{f:?}");
        d.tick().await;
    }
    let d = Deadline::new("bob gets the retried message", Duration::from_secs(20));
    loop {
        if bob.next_of("message").await.str("data") == "retried" {
            break;
        }
        d.tick().await;
    }
}

/// Issue 33, item 7: an actor of the red access scope publishing key `k` first neither turns a
/// blue-scope actor's publish with `k` into a duplicate that reaches nobody nor learns whether
/// blue used it; within one scope the key still holds.
#[tokio::test]
async fn keys_do_not_cross_access_scopes() {
    let server = TestServer::builder().grpc().spawn().await;
    let mut c = server.control().await;
    scope(&mut c, "red").await;
    scope(&mut c, "blue").await;
    let mut red = server.auth(&scoped_token(&mut c, "red").await).await;
    let mut blue_sub = server.auth(&scoped_token(&mut c, "blue").await).await;
    blue_sub.subscribe(TASKS).await;
    let mut blue = server.auth(&scoped_token(&mut c, "blue").await).await;
    let first = publish(&mut red, TASKS, "red".into(), "order-1").await;
    assert!(first.ty() == "published" && !duplicate(&first), "{first:?}");
    let f = publish(&mut blue, TASKS, "blue".into(), "order-1").await;
    assert!(f.ty() == "published" && !duplicate(&f), "red's key answered blue's publish: {f:?}");
    assert_eq!(blue_sub.next_of("message").await.str("data"), "blue");
    // Red learns nothing of blue's keys: a key blue used is fresh for red.
    let f = publish(&mut blue, TASKS, "blue".into(), "order-2").await;
    assert!(!duplicate(&f), "{f:?}");
    assert!(!duplicate(&publish(&mut red, TASKS, "red".into(), "order-2").await), "red saw blue's key");
    // Within a scope the key still holds.
    assert!(duplicate(&publish(&mut blue, TASKS, "blue".into(), "order-1").await));
}

/// A new access scope `scope` of the demo project.
async fn scope(c: &mut skua_testkit::control::Control, scope: &str) {
    use skua_control::pb;
    let r = c
        .create_scope(pb::CreateScopeRequest {
            project_id: "demo-project".into(),
            slug: scope.into(),
            ..Default::default()
        })
        .await;
    r.unwrap_or_else(|s| panic!("{:?}: {}", s.code(), s.message()));
}

/// A new user actor of the demo project in the access scope `scope`: its access token.
async fn scoped_token(c: &mut skua_testkit::control::Control, scope: &str) -> String {
    use skua_control::pb;
    fn ok<T>(r: Result<tonic::Response<T>, tonic::Status>) -> T {
        r.unwrap_or_else(|s| panic!("{:?}: {}", s.code(), s.message())).into_inner()
    }
    let made = ok(c
        .create_actor(pb::CreateActorRequest {
            project_id: "demo-project".into(),
            actor_type: "user".into(),
            ..Default::default()
        })
        .await);
    let id = made.actor.expect("an actor").id;
    ok(c.set_actor_scope(pb::SetActorScopeRequest { actor_id: id, scope: scope.into() }).await);
    made.access_token
}
