//! Credentials: access tokens, client tokens (JWT), expiry, reauth, clientId (N8, N9, N27, N38).

use rmpv::Value;
use skua_testkit::{TestServer, dev_jwt, frame, jwt_with_secret, now_s};

#[tokio::test]
async fn auth_reply_describes_the_actor() {
    let server = TestServer::start().await;
    let mut c = server.connect().await;
    let r = c.auth_ok("dev-token-agent", 2).await;
    assert_eq!(r.str("actorTokenId"), "agent-1");
    assert_eq!(r.str("projectId"), "demo-project");
    assert_eq!(r.str("actorType"), "agent");
    assert_eq!(r.int("protocolVersion"), 2);
    assert_eq!(r.get("restoredSubscriptions"), &Value::Array(vec![]));
}

#[tokio::test]
async fn auth_failures_use_the_documented_strings() {
    let server = TestServer::start().await;
    let mut c = server.connect().await;
    let exp = now_s() + 600;
    for (token, want) in [
        ("no-such-token".to_owned(), "access_denied"),
        (dev_jwt("alice", now_s() - 1), "token_expired"),
        (jwt_with_secret("alice", Some(exp), "wrong-secret"), "access_denied"),
        (dev_jwt("nobody", exp), "access_denied"),
        (jwt_with_secret("alice", None, skua_server::fixtures::DEV_JWT_SECRET), "access_denied"),
    ] {
        let r = c.auth(&token, Some(2)).await;
        assert_eq!(r.get("success"), &Value::Boolean(false));
        assert_eq!(r.str("error"), want, "token {token}");
    }
    for bad in [Value::from("has space"), Value::from("x".repeat(65)), Value::from(12)] {
        c.send(frame! {"type" => "auth", "token" => "dev-token-agent", "clientId" => bad.clone()}).await;
        let r = c.expect("auth").await;
        assert_eq!(r.str("error"), "invalid_client_id", "clientId {bad:?} (N9)");
    }
    // After failures the same socket still authenticates (N8).
    let r = c.auth(&dev_jwt("alice", exp), Some(2)).await;
    assert_eq!(r.str("actorTokenId"), "alice");
}

#[tokio::test]
async fn expired_client_token_gets_disconnect_then_4003() {
    let server = TestServer::start().await;
    let mut c = server.connect().await;
    c.auth_ok(&dev_jwt("bob", now_s() + 3), 2).await;
    // Idle on purpose: the timer, not a heartbeat, must catch it (N27).
    let d = c.expect("disconnect").await;
    assert_eq!(d.str("reason"), "token_expired");
    assert_eq!(c.expect_close().await, (4003, "token_expired".to_owned()));
}

#[tokio::test]
async fn reauth_renews_the_token_in_band() {
    let server = TestServer::start().await;
    let mut c = server.connect().await;
    c.auth_ok(&dev_jwt("alice", now_s() + 3), 2).await;
    c.subscribe("demo/general/messages").await;
    let exp = now_s() + 3600;
    c.send(frame! {"type" => "reauth", "token" => dev_jwt("bob", exp)}).await;
    let r = c.expect("reauth").await;
    assert_eq!((r.get("success"), r.str("error")), (&Value::Boolean(false), "actor_mismatch"));
    c.send(frame! {"type" => "reauth", "token" => dev_jwt("alice", now_s() - 5)}).await;
    assert_eq!(c.expect("reauth").await.str("error"), "token_expired");
    c.send(frame! {"type" => "reauth", "token" => "garbage"}).await;
    assert_eq!(c.expect("reauth").await.str("error"), "access_denied");
    c.send(frame! {"type" => "reauth", "token" => dev_jwt("alice", exp)}).await;
    let r = c.expect("reauth").await;
    assert_eq!(r.get("success"), &Value::Boolean(true));
    assert_eq!(r.get("authExpiresAt").as_u64(), Some(exp));
    // The old expiry (2 s) has passed and the connection is still open and subscribed.
    assert_eq!(c.next_event_within(std::time::Duration::from_secs(3)).await, None, "no disconnect after reauth");
    let mut bob = server.auth("dev-token-bob").await;
    bob.publish_acked("demo/general/messages", "still here".into()).await;
    assert_eq!(c.expect("message").await.str("data"), "still here");
    // An access token of the same actor also renews, with no expiry.
    c.send(frame! {"type" => "reauth", "token" => "dev-token-alice"}).await;
    let r = c.expect("reauth").await;
    assert_eq!(r.get("success"), &Value::Boolean(true));
    assert!(!r.has("authExpiresAt"));
}

#[tokio::test]
async fn a_project_at_its_connection_limit_refuses_auth_until_a_slot_frees() {
    let server = TestServer::builder()
        .fixtures(
            "[[projects]]\nid = \"small\"\nmax_connections = 1\n[[projects.apps]]\nid = \"s-app\"\nslug = \"s\"\ntopics = [\"t\"]\n\
             [[actors]]\nid = \"s-user\"\nproject = \"small\"\ntype = \"user\"\ntokens = [\"small-token\"]\n",
        )
        .spawn()
        .await;
    let first = server.auth("small-token").await;
    let mut second = server.connect().await;
    let r = second.auth("small-token", Some(2)).await;
    assert_eq!(r.str("error"), "connection_limit_reached");
    // Other projects are not affected.
    server.auth("dev-token-alice").await;
    first.close().await;
    // The slot frees when the first connection's session ends; retry until the server saw it.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let r = second.auth("small-token", Some(2)).await;
        if r.get("success") == &Value::Boolean(true) {
            break;
        }
        assert_eq!(r.str("error"), "connection_limit_reached");
        assert!(tokio::time::Instant::now() < deadline, "slot never freed");
        tokio::task::yield_now().await;
    }
}

/// Issue 12, defect 1: an `exp` near 2^64 used to overflow the expiry timer and panic the
/// connection's task right after the success reply, leaving a zombie whose subscriptions kept
/// delivering after the actor was deactivated.
#[tokio::test]
async fn an_expiry_near_u64_max_neither_kills_the_connection_nor_escapes_revocation() {
    let server = TestServer::builder().grpc().spawn().await;
    let mut control = server.control().await;
    let mut c = server.connect().await;
    c.auth_ok(&dev_jwt("alice", u64::MAX), 2).await;
    // Still served after the reply: the heartbeat is echoed, a subscribe answered.
    c.assert_nothing_pending().await;
    c.subscribe("demo/general/messages").await;
    // The same through reauth.
    c.send(frame! {"type" => "reauth", "token" => dev_jwt("alice", u64::MAX - 1)}).await;
    let r = c.expect("reauth").await;
    assert_eq!(r.get("success"), &Value::Boolean(true));
    c.assert_nothing_pending().await;
    // Deactivating the actor still closes it.
    let actor = skua_control::pb::ActorRef { actor_id: "alice".into() };
    control.deactivate_actor(actor).await.expect("deactivate");
    assert_eq!(c.expect_close().await, (4001, "token_revoked".to_owned()));
    let m = skua_testkit::http::Scrape::of(server.addr).await;
    assert_eq!(m.value("skua_connection_panics_total", &[]), 0.0);
}
