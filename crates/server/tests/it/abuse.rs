//! Issue 12, items 6 and 11: auth throttling (failures per connection, backoff per source
//! address, the optional auth deadline) and client-token `nbf`/`aud`.

use rmpv::Value;
use skua_testkit::{TestServer, frame, now_s};

/// A dev-secret JWT for `sub` with extra claims.
fn jwt(sub: &str, extra: serde_json::Value) -> String {
    let mut claims = serde_json::json!({"sub": sub, "exp": now_s() + 600});
    if let (Some(c), Some(e)) = (claims.as_object_mut(), extra.as_object()) {
        c.extend(e.clone());
    }
    let key =
        jsonwebtoken::EncodingKey::from_secret(skua_server::fixtures::DEV_JWT_SECRET.as_bytes()).expect("hmac key");
    jsonwebtoken::encode(&jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256), &claims, &key).expect("sign")
}

#[tokio::test]
async fn a_connection_making_too_many_failed_auths_is_closed_1008() {
    let server = TestServer::builder()
        .settings(|s| {
            s.edge.max_auth_failures = Some(3);
            s.edge.auth_backoff_after = Some(100);
        })
        .spawn()
        .await;
    let mut c = server.connect().await;
    for _ in 0..3 {
        let r = c.auth("wrong", Some(2)).await;
        assert_eq!(r.str("error"), "access_denied");
    }
    assert_eq!(c.expect_close().await, (1008, "too_many_auth_failures".to_owned()));
    // Failed reauths count too.
    let mut a = server.auth("dev-token-alice").await;
    for _ in 0..3 {
        a.send(frame! {"type" => "reauth", "token" => "wrong"}).await;
        assert_eq!(a.expect("reauth").await.get("success"), &Value::Boolean(false));
    }
    assert_eq!(a.expect_close().await, (1008, "too_many_auth_failures".to_owned()));
    // Other connections are not affected.
    server.auth("dev-token-bob").await.assert_nothing_pending().await;
}

#[tokio::test]
async fn an_address_that_keeps_failing_is_slowed_down_across_connections() {
    let server = TestServer::builder()
        .settings(|s| {
            s.edge.auth_backoff_after = Some(2);
            s.edge.auth_backoff_max = Some("300ms".into());
        })
        .spawn()
        .await;
    let mut c = server.connect().await;
    for _ in 0..2 {
        assert_eq!(c.auth("wrong", Some(2)).await.str("error"), "access_denied");
    }
    let m = skua_testkit::http::Scrape::of(server.addr).await;
    assert_eq!(m.value("skua_auths_throttled_total", &[]), 0.0);
    // A new connection from the same address: its wrong auth is answered late.
    let mut d = server.connect().await;
    let started = std::time::Instant::now();
    assert_eq!(d.auth("wrong", Some(2)).await.str("error"), "access_denied");
    assert!(started.elapsed() >= std::time::Duration::from_millis(250), "the failure was delayed");
    let m = skua_testkit::http::Scrape::of(server.addr).await;
    assert_eq!(m.value("skua_auths_throttled_total", &[]), 1.0);
}

/// Issue 33, item 10: a client behind the same address (a NAT) as one that keeps failing is not
/// held up: a valid credential is answered at once, however long the address's back-off.
#[tokio::test]
async fn a_valid_auth_is_never_delayed_by_its_address_back_off() {
    let server = TestServer::builder()
        .settings(|s| {
            s.edge.auth_backoff_after = Some(1);
            s.edge.auth_backoff_max = Some("30s".into());
        })
        .spawn()
        .await;
    let mut attacker = server.connect().await;
    assert_eq!(attacker.auth("wrong", Some(2)).await.str("error"), "access_denied");
    // The address is in back-off now: another wrong auth would wait (and be counted throttled).
    let started = std::time::Instant::now();
    let mut valid = server.connect().await;
    valid.auth_ok("dev-token-alice", 2).await;
    let m = skua_testkit::http::Scrape::of(server.addr).await;
    assert_eq!(m.value("skua_auths_throttled_total", &[]), 0.0, "the valid auth waited");
    eprintln!("valid auth in back-off answered after {:?}", started.elapsed());
    // The back-off still holds for failures.
    let mut again = server.connect().await;
    assert_eq!(again.auth("wrong", Some(2)).await.str("error"), "access_denied");
    let m = skua_testkit::http::Scrape::of(server.addr).await;
    assert_eq!(m.value("skua_auths_throttled_total", &[]), 1.0);
}

#[tokio::test]
async fn auth_timeout_closes_sockets_that_only_send_heartbeats() {
    let server = TestServer::builder().settings(|s| s.edge.auth_timeout = Some("2s".into())).spawn().await;
    let mut idle = server.connect().await;
    idle.assert_nothing_pending().await;
    assert_eq!(idle.expect_close().await, (1008, "auth_timeout".to_owned()));
    // Authenticated in time: the deadline no longer applies.
    let mut c = server.connect().await;
    c.auth_ok("dev-token-alice", 2).await;
    // A witness connected after `c` authenticated: its deadline is later than `c`'s, so once it
    // is closed `c`'s deadline has passed too (an event to await, not a sleep).
    let mut witness = server.connect().await;
    assert_eq!(witness.expect_close().await, (1008, "auth_timeout".to_owned()));
    c.assert_nothing_pending().await;
}

/// Issue 33, item 12: sockets that never authenticate are closed after 10 s by default (NATS
/// 2 s, EMQX 15 s); `--dev` turns it off (crates/server/tests/cli.rs).
#[tokio::test]
async fn auth_timeout_is_on_by_default() {
    let ten = Some(std::time::Duration::from_secs(10));
    assert_eq!(skua_edge::EdgeConfig::default().auth_timeout, ten);
    let c = skua_server::config::ServerConfig::from_layers(&[]).expect("defaults");
    assert_eq!(c.edge.auth_timeout, ten);
}

#[tokio::test]
async fn client_tokens_honour_nbf() {
    let server = TestServer::start().await;
    let mut c = server.connect().await;
    let r = c.auth(&jwt("alice", serde_json::json!({"nbf": now_s() + 600})), Some(2)).await;
    assert_eq!(r.str("error"), "access_denied", "not valid yet");
    c.auth_ok(&jwt("alice", serde_json::json!({"nbf": now_s() - 5})), 2).await;
}

#[tokio::test]
async fn client_token_audiences() {
    // None configured: a token naming an audience is refused; one without is accepted.
    let server = TestServer::start().await;
    let mut c = server.connect().await;
    assert_eq!(c.auth(&jwt("alice", serde_json::json!({"aud": "skua"})), Some(2)).await.str("error"), "access_denied");
    c.auth_ok(&jwt("alice", serde_json::json!({})), 2).await;

    let server = TestServer::builder()
        .settings(|s| s.edge.jwt_audiences = Some(vec!["skua".into(), "chat".into()]))
        .spawn()
        .await;
    let mut c = server.connect().await;
    assert_eq!(c.auth(&jwt("alice", serde_json::json!({"aud": "other"})), Some(2)).await.str("error"), "access_denied");
    c.auth_ok(&jwt("alice", serde_json::json!({"aud": ["other", "chat"]})), 2).await;
    let mut d = server.connect().await;
    d.auth_ok(&jwt("bob", serde_json::json!({"aud": "skua"})), 2).await;
    let mut e = server.connect().await;
    e.auth_ok(&jwt("bob", serde_json::json!({})), 2).await;
}
