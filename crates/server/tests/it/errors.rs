//! Error frames: bad input (N3, N31), auth state (N7, N8), versions (N6, N7), access (N21, N29,
//! N35), filters (N12, N14, N32, N34), acks (N24), presence without a room (N39).
//!
//! Every error string is written here as the reference documents spell it, never imported, so
//! a changed constant fails these tests.

use rmpv::Value;
use skua_testkit::{Frame, TestServer, WsClient, encode, frame};

const TOPIC: &str = "demo/general/messages";
/// The documented hint of an unknown room (nolag-wire-protocol.md, "error").
const HINT_UNKNOWN_ROOM: &str = "room is not configured. Provision it via the control-plane rooms API before use.";
const INVALID_FILTER: &str = "invalid_filter_chars (/, #, +, | not allowed)";
const TOO_MANY_FILTERS: &str = "too_many_filters (max 100)";

/// The frame's keys, sorted, for exact shape comparisons.
fn keys(f: &Frame) -> Vec<String> {
    let mut k = f.keys();
    k.sort();
    k
}

fn sorted(k: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = k.iter().map(|s| (*s).to_owned()).collect();
    v.sort();
    v
}

/// Proves the connection still serves requests: a subscribe is answered with `subscribed`.
async fn assert_usable(c: &mut WsClient) {
    c.subscribe("demo/random/status").await;
}

/// A v1 client (no `protocolVersion` in `auth`).
async fn auth_v1(server: &TestServer, token: &str) -> WsClient {
    let mut c = server.connect().await;
    let reply = c.auth(token, None).await;
    assert_eq!(reply.get("success"), &Value::Boolean(true), "{reply:?}");
    assert_eq!(reply.int("protocolVersion"), 1);
    c
}

fn strs(v: &[&str]) -> Value {
    Value::Array(v.iter().map(|s| Value::from(*s)).collect())
}

fn many_filters(n: usize) -> Value {
    Value::Array((0..n).map(|i| Value::from(format!("f{i}"))).collect())
}

/// Subscription filter lists that N12 calls invalid, with a label for failure messages.
fn invalid_subscription_filters() -> Vec<(&'static str, Value)> {
    vec![
        ("empty string", strs(&[""])),
        ("slash", strs(&["/"])),
        ("slash inside", strs(&["a/b"])),
        ("hash", strs(&["#"])),
        ("plus", strs(&["+"])),
        ("pipe", strs(&["|"])),
        ("non-string member", Value::Array(vec![Value::from(5)])),
        ("one-member AND group", Value::Array(vec![strs(&["solo"])])),
        ("reserved char in an AND group", Value::Array(vec![strs(&["a", "b#"])])),
        ("non-string in an AND group", Value::Array(vec![Value::Array(vec![Value::from("a"), Value::from(true)])])),
        ("filters is a string", Value::from("abc")),
        ("filters is a map", Value::Map(vec![(Value::from("a"), Value::from(1))])),
        ("filters is a number", Value::from(7)),
    ]
}

// ---------------------------------------------------------------------------------------------
// Before auth (N3, N8)

#[tokio::test]
async fn every_frame_before_auth_is_not_authenticated_and_auth_still_works() {
    let server = TestServer::start().await;
    let mut c = server.connect().await;
    let frames = [
        frame! {"type" => "reauth", "token" => "dev-token-alice"},
        frame! {"type" => "subscribe", "topic" => TOPIC},
        frame! {"type" => "unsubscribe", "topic" => TOPIC},
        frame! {"type" => "publish", "topic" => TOPIC, "data" => 1, "msgRef" => "m1"},
        frame! {"type" => "setFilters", "topic" => TOPIC, "filters" => strs(&["a"])},
        frame! {"type" => "presence", "roomId" => "general", "data" => frame! {"s" => "on"}},
        frame! {"type" => "getPresence", "roomId" => "general"},
        frame! {"type" => "ack", "msgId" => "id-1"},
        frame! {"type" => "batchAck", "msgIds" => strs(&["id-1", "id-2"])},
        frame! {"type" => "lobbySubscribe", "lobbyId" => "online"},
        frame! {"type" => "lobbyUnsubscribe", "lobbyId" => "online"},
        frame! {"type" => "getLobbyPresence", "lobbyId" => "online"},
    ];
    for f in frames {
        let ty = f["type"].as_str().unwrap_or_default().to_owned();
        c.send(f).await;
        let e = c.expect_error("not_authenticated").await;
        assert_eq!(keys(&e), sorted(&["type", "error"]), "{ty}: the documented frame is {{type, error}}: {e:?}");
    }
    c.assert_nothing_pending().await;
    let ok = c.auth_ok("dev-token-alice", 2).await;
    assert_eq!(ok.str("actorTokenId"), "alice");
    assert_usable(&mut c).await;
}

#[tokio::test]
async fn undecodable_frame_before_auth_is_invalid_frame_and_auth_still_works() {
    let server = TestServer::start().await;
    let mut c = server.connect().await;
    c.send_bytes(vec![0xc1]).await;
    let e = c.expect_error("invalid_frame").await;
    assert!(!e.str("hint").is_empty());
    c.send_text("{\"type\":\"auth\",\"token\":\"dev-token-alice\"}").await;
    let e = c.expect_error("invalid_frame").await;
    assert!(!e.str("hint").is_empty());
    // auth without a token is a malformed auth, not an auth failure
    c.send(frame! {"type" => "auth", "protocolVersion" => 2}).await;
    let e = c.expect_error("invalid_frame").await;
    assert!(!e.str("hint").is_empty());
    c.auth_ok("dev-token-alice", 2).await;
    assert_usable(&mut c).await;
}

// ---------------------------------------------------------------------------------------------
// Malformed frames (N3, N31)

/// (what, the frame, `topic` expected in the error, `msgRef` expected in the error)
type Case<F> = (&'static str, F, Option<&'static str>, Option<&'static str>);

#[tokio::test]
async fn malformed_frames_are_invalid_frame_with_hint_and_the_connection_stays_open() {
    let server = TestServer::start().await;
    let mut c = server.auth("dev-token-alice").await;
    let cases: Vec<Case<Vec<u8>>> = vec![
        ("reserved marker", vec![0xc1], None, None),
        ("truncated map", vec![0x82, 0xa4, b't', b'y', b'p', b'e'], None, None),
        ("truncated str", vec![0x81, 0xa4, b't', b'y'], None, None),
        ("trailing bytes", [encode(&frame! {"type" => "getPresence"}), vec![0x01]].concat(), None, None),
        ("array", encode(&Value::Array(vec![Value::from("publish"), Value::from(TOPIC)])), None, None),
        ("integer", encode(&Value::from(42)), None, None),
        ("string", encode(&Value::from("publish")), None, None),
        ("nil", vec![0xc0], None, None),
        ("bin", encode(&Value::Binary(vec![1, 2, 3])), None, None),
        (
            "map without type",
            encode(&frame! {"topic" => TOPIC, "msgRef" => "r-0", "data" => 1}),
            Some(TOPIC),
            Some("r-0"),
        ),
        ("empty map", vec![0x80], None, None),
        ("integer type", encode(&frame! {"type" => 3, "topic" => TOPIC}), Some(TOPIC), None),
        ("nil type", encode(&frame! {"type" => Value::Nil}), None, None),
        ("bin type", encode(&frame! {"type" => Value::Binary(b"publish".to_vec())}), None, None),
        (
            "unknown type",
            encode(&frame! {"type" => "nope", "topic" => TOPIC, "msgRef" => "r-1"}),
            Some(TOPIC),
            Some("r-1"),
        ),
        (
            "type with other case",
            encode(&frame! {"type" => "Publish", "topic" => TOPIC, "data" => 1}),
            Some(TOPIC),
            None,
        ),
    ];
    for (what, bytes, topic, msg_ref) in cases {
        c.send_bytes(bytes).await;
        let e = c.expect_error("invalid_frame").await;
        assert!(!e.str("hint").is_empty(), "{what}: hint must say what is wrong: {e:?}");
        assert_eq!(e.get("topic").as_str(), topic, "{what}: {e:?}");
        assert_eq!(e.get("msgRef").as_str(), msg_ref, "{what}: {e:?}");
        assert!(!e.has("code"), "{what}: invalid_frame has no code: {e:?}");
        assert_usable(&mut c).await;
    }
    c.send_text("hello").await;
    let e = c.expect_error("invalid_frame").await;
    assert!(!e.str("hint").is_empty());
    assert_usable(&mut c).await;
}

#[tokio::test]
async fn known_types_missing_a_required_field_are_invalid_frame_with_hint() {
    let server = TestServer::start().await;
    let mut c = server.auth("dev-token-alice").await;
    let cases: Vec<Case<Value>> = vec![
        ("publish without topic", frame! {"type" => "publish", "data" => 1, "msgRef" => "r-1"}, None, Some("r-1")),
        (
            "publish without data",
            frame! {"type" => "publish", "topic" => TOPIC, "msgRef" => "r-2"},
            Some(TOPIC),
            Some("r-2"),
        ),
        ("publish with integer topic", frame! {"type" => "publish", "topic" => 5, "data" => 1}, None, None),
        ("subscribe without topic", frame! {"type" => "subscribe", "filters" => strs(&["a"])}, None, None),
        ("subscribe with nil topic", frame! {"type" => "subscribe", "topic" => Value::Nil}, None, None),
        ("unsubscribe without topic", frame! {"type" => "unsubscribe"}, None, None),
        ("setFilters without topic", frame! {"type" => "setFilters", "filters" => strs(&["a"])}, None, None),
        ("ack without msgId", frame! {"type" => "ack"}, None, None),
        ("ack with integer msgId", frame! {"type" => "ack", "msgId" => 12}, None, None),
        ("batchAck without msgIds", frame! {"type" => "batchAck"}, None, None),
        ("batchAck with a string msgIds", frame! {"type" => "batchAck", "msgIds" => "id-1"}, None, None),
        ("reauth without token", frame! {"type" => "reauth"}, None, None),
        ("lobbySubscribe without lobbyId", frame! {"type" => "lobbySubscribe"}, None, None),
        ("lobbyUnsubscribe without lobbyId", frame! {"type" => "lobbyUnsubscribe"}, None, None),
        ("getLobbyPresence without lobbyId", frame! {"type" => "getLobbyPresence"}, None, None),
    ];
    for (what, f, topic, msg_ref) in cases {
        c.send(f).await;
        let e = c.expect_error("invalid_frame").await;
        assert!(!e.str("hint").is_empty(), "{what}: hint must say what is wrong: {e:?}");
        assert_eq!(e.get("topic").as_str(), topic, "{what}: {e:?}");
        assert_eq!(e.get("msgRef").as_str(), msg_ref, "{what}: {e:?}");
        assert_usable(&mut c).await;
    }
}

#[tokio::test]
async fn publish_with_null_data_is_a_valid_payload() {
    let server = TestServer::start().await;
    let mut alice = server.auth("dev-token-alice").await;
    let mut bob = server.auth("dev-token-bob").await;
    bob.subscribe(TOPIC).await;
    alice.send(frame! {"type" => "publish", "topic" => TOPIC, "data" => Value::Nil, "msgRef" => "nil-1"}).await;
    let ack = alice.expect("published").await;
    assert_eq!(ack.str("msgRef"), "nil-1");
    let m = bob.expect("message").await;
    assert!(m.has("data"), "data: null is forwarded as nil: {m:?}");
    assert_eq!(m.get("data"), &Value::Nil);
}

// ---------------------------------------------------------------------------------------------
// Auth state (N8) and versions (N6, N7)

#[tokio::test]
async fn second_auth_is_already_authenticated_and_never_a_second_auth_reply() {
    let server = TestServer::start().await;
    let mut c = server.auth("dev-token-alice").await;
    for token in ["dev-token-alice", "dev-token-bob", "not-a-token"] {
        c.send(frame! {"type" => "auth", "token" => token, "protocolVersion" => 2}).await;
        let e = c.expect_error("already_authenticated").await;
        assert_eq!(keys(&e), sorted(&["type", "error"]), "{e:?}");
        c.assert_nothing_pending().await;
    }
    // still alice, still usable
    let mut bob = server.auth("dev-token-bob").await;
    bob.subscribe(TOPIC).await;
    c.publish_acked(TOPIC, Value::from("still alice")).await;
    assert_eq!(bob.expect("message").await.str("from"), "alice");
}

#[tokio::test]
async fn failed_auth_leaves_the_socket_open_and_a_retry_succeeds() {
    let server = TestServer::start().await;
    let mut c = server.connect().await;
    let f = c.auth("dev-token-nobody", Some(2)).await;
    assert_eq!(f.get("success"), &Value::Boolean(false));
    assert_eq!(f.str("error"), "access_denied");
    // still unauthenticated
    c.send(frame! {"type" => "subscribe", "topic" => TOPIC}).await;
    c.expect_error("not_authenticated").await;
    let f = c.auth("", Some(2)).await;
    assert_eq!(f.get("success"), &Value::Boolean(false));
    assert_eq!(f.str("error"), "access_denied");
    let ok = c.auth_ok("dev-token-bob", 2).await;
    assert_eq!(ok.str("actorTokenId"), "bob");
    assert_usable(&mut c).await;
}

#[tokio::test]
async fn reply_carries_the_negotiated_protocol_version() {
    let server = TestServer::start().await;
    let cases: Vec<(&str, Option<Value>, i64)> = vec![
        ("absent", None, 1),
        ("1", Some(Value::from(1)), 1),
        ("2", Some(Value::from(2)), 2),
        ("3", Some(Value::from(3)), 2),
        ("200", Some(Value::from(200)), 2),
        ("string \"2\"", Some(Value::from("2")), 1),
        ("float 2.0", Some(Value::F64(2.0)), 1),
        ("nil", Some(Value::Nil), 1),
    ];
    for (what, version, expected) in cases {
        let mut c = server.connect().await;
        let mut f =
            vec![(Value::from("type"), Value::from("auth")), (Value::from("token"), Value::from("dev-token-bob"))];
        if let Some(v) = version {
            f.push((Value::from("protocolVersion"), v));
        }
        c.send(Value::Map(f)).await;
        let reply = c.expect("auth").await;
        assert_eq!(reply.get("success"), &Value::Boolean(true), "{what}: {reply:?}");
        assert_eq!(reply.int("protocolVersion"), expected, "{what}: {reply:?}");
        // The negotiated version is the one the connection speaks.
        c.send(frame! {"type" => "subscribe", "topic" => "demo/nope/messages"}).await;
        let e = c.next().await;
        let want = if expected == 2 { "unknown_topic" } else { "not_authorized" };
        assert_eq!(e.get("error").as_str(), Some(want), "{what}: {e:?}");
    }
}

#[tokio::test]
async fn unknown_room_is_not_authorized_for_v1_and_unknown_topic_for_v2() {
    let server = TestServer::start().await;
    let mut v1 = auth_v1(&server, "dev-token-bob").await;
    let mut v2 = server.auth("dev-token-bob").await;
    let topic = "demo/nope/messages";

    v1.send(frame! {"type" => "subscribe", "topic" => topic}).await;
    let e = v1.expect_error("not_authorized").await;
    assert_eq!(keys(&e), sorted(&["type", "error", "topic"]), "v1 gets a bare not_authorized: {e:?}");
    assert_eq!(e.str("topic"), topic);

    v2.send(frame! {"type" => "subscribe", "topic" => topic}).await;
    let e = v2.expect_error("unknown_topic").await;
    assert_eq!(e.int("code"), 42940);
    assert_eq!(e.str("topic"), topic);
    assert_eq!(e.str("hint"), HINT_UNKNOWN_ROOM);
    assert!(!e.has("msgRef"));

    // unknown app and unknown topic name are unknown too
    for t in ["nope/general/messages", "demo/general/nope"] {
        v2.send(frame! {"type" => "subscribe", "topic" => t}).await;
        let e = v2.expect_error("unknown_topic").await;
        assert_eq!((e.int("code"), e.str("topic")), (42940, t));
        assert!(!e.str("hint").is_empty());
        v1.send(frame! {"type" => "subscribe", "topic" => t}).await;
        let e = v1.expect_error("not_authorized").await;
        assert_eq!(keys(&e), sorted(&["type", "error", "topic"]), "{e:?}");
    }
    assert_usable(&mut v1).await;
    assert_usable(&mut v2).await;
}

#[tokio::test]
async fn v2_publish_errors_carry_msg_ref_and_v1_publish_errors_do_not() {
    let server = TestServer::start().await;
    let mut v1 = auth_v1(&server, "dev-token-bob").await;
    let mut v2 = server.auth("dev-token-bob").await;
    let topic = "demo/nope/messages";

    v2.send(frame! {"type" => "publish", "topic" => topic, "data" => 1, "msgRef" => "p-1"}).await;
    let e = v2.expect_error("unknown_topic").await;
    assert_eq!((e.int("code"), e.str("topic"), e.str("msgRef")), (42940, topic, "p-1"));
    assert_eq!(e.str("hint"), HINT_UNKNOWN_ROOM);

    v1.send(frame! {"type" => "publish", "topic" => topic, "data" => 1, "msgRef" => "p-1"}).await;
    let e = v1.expect_error("not_authorized").await;
    assert_eq!(keys(&e), sorted(&["type", "error", "topic"]), "{e:?}");

    // a filter error of a v1 publish: topic, no msgRef
    v1.send(frame! {"type" => "publish", "topic" => TOPIC, "data" => 1, "filter" => "a/b", "msgRef" => "p-2"}).await;
    let e = v1.expect_error(INVALID_FILTER).await;
    assert_eq!(e.str("topic"), TOPIC);
    assert!(!e.has("msgRef"), "{e:?}");
    // a malformed v1 publish: topic, no msgRef
    v1.send(frame! {"type" => "publish", "topic" => TOPIC, "msgRef" => "p-3"}).await;
    let e = v1.expect_error("invalid_frame").await;
    assert_eq!(e.str("topic"), TOPIC);
    assert!(!e.has("msgRef"), "{e:?}");
}

#[tokio::test]
async fn v1_publish_with_msg_ref_is_delivered_without_a_published_ack() {
    let server = TestServer::start().await;
    let mut v1 = auth_v1(&server, "dev-token-bob").await;
    let mut carol = server.auth("dev-token-carol").await;
    carol.subscribe(TOPIC).await;
    v1.send(frame! {"type" => "publish", "topic" => TOPIC, "data" => "from v1", "msgRef" => "v1-ref"}).await;
    let m = carol.expect("message").await;
    assert_eq!((m.str("from"), m.get("data").as_str()), ("bob", Some("from v1")));
    // carol has it, so bob's publish was handled: nothing was queued for bob (N7).
    v1.assert_nothing_pending().await;
}

// ---------------------------------------------------------------------------------------------
// Access (N15, N29)

#[tokio::test]
async fn observer_publish_is_refused_as_unknown_topic_but_it_may_subscribe() {
    let server = TestServer::start().await;
    let mut alice = server.auth("dev-token-alice").await;
    alice.subscribe(TOPIC).await;
    let mut viewer = server.auth("dev-token-viewer").await;
    viewer.subscribe(TOPIC).await;
    viewer.send(frame! {"type" => "publish", "topic" => TOPIC, "data" => "refused", "msgRef" => "obs-1"}).await;
    let e = viewer.expect_error("unknown_topic").await;
    assert_eq!((e.int("code"), e.str("topic"), e.str("msgRef")), (42940, TOPIC, "obs-1"));
    assert!(!e.str("hint").is_empty());

    let mut v1 = auth_v1(&server, "dev-token-viewer").await;
    v1.send(frame! {"type" => "publish", "topic" => TOPIC, "data" => "refused", "msgRef" => "obs-2"}).await;
    let e = v1.expect_error("not_authorized").await;
    assert_eq!(keys(&e), sorted(&["type", "error", "topic"]), "{e:?}");
    // Nothing was published: alice's first message is bob's, sent after the refused ones; and
    // the viewer's subscription does receive it.
    let mut bob = server.auth("dev-token-bob").await;
    bob.publish_acked(TOPIC, Value::from("marker")).await;
    assert_eq!(alice.expect("message").await.get("data").as_str(), Some("marker"));
    assert_eq!(viewer.expect("message").await.get("data").as_str(), Some("marker"));
}

#[tokio::test]
async fn private_room_is_unknown_topic_for_an_actor_without_a_grant() {
    let server = TestServer::start().await;
    let ops = "demo/ops/messages";
    let mut alice = server.auth("dev-token-alice").await;
    alice.subscribe(ops).await;
    let mut bob = server.auth("dev-token-bob").await;
    bob.send(frame! {"type" => "subscribe", "topic" => ops}).await;
    let e = bob.expect_error("unknown_topic").await;
    assert_eq!((e.int("code"), e.str("topic")), (42940, ops));
    assert!(!e.str("hint").is_empty());
    bob.send(frame! {"type" => "publish", "topic" => ops, "data" => "x", "msgRef" => "ops-1"}).await;
    let e = bob.expect_error("unknown_topic").await;
    assert_eq!((e.int("code"), e.str("topic"), e.str("msgRef")), (42940, ops, "ops-1"));
    // bob's refused publish reached nobody: alice's next message is bob's later one elsewhere
    alice.subscribe(TOPIC).await;
    bob.publish_acked(TOPIC, Value::from("after")).await;
    let m = alice.expect("message").await;
    assert_eq!((m.str("topic"), m.get("data").as_str()), (TOPIC, Some("after")));
}

// ---------------------------------------------------------------------------------------------
// Filters (N12, N14, N32, N34)

#[tokio::test]
async fn set_filters_on_an_unsubscribed_topic_is_not_subscribed() {
    let server = TestServer::start().await;
    let mut c = server.auth("dev-token-alice").await;
    c.send(frame! {"type" => "setFilters", "topic" => TOPIC, "filters" => strs(&["a"])}).await;
    let e = c.expect_error("not_subscribed").await;
    assert_eq!(e.str("topic"), TOPIC);
    assert!(!e.has("code"));
    // and on an unknown topic as well
    c.send(frame! {"type" => "setFilters", "topic" => "demo/nope/messages", "filters" => strs(&["a"])}).await;
    let e = c.expect_error("not_subscribed").await;
    assert_eq!(e.str("topic"), "demo/nope/messages");
    assert_usable(&mut c).await;
}

#[tokio::test]
async fn more_than_100_filters_are_too_many_filters_on_subscribe_set_filters_and_publish() {
    let server = TestServer::start().await;
    let mut c = server.auth("dev-token-alice").await;
    c.send(frame! {"type" => "subscribe", "topic" => TOPIC, "filters" => many_filters(101)}).await;
    let e = c.expect_error(TOO_MANY_FILTERS).await;
    assert_eq!(e.str("topic"), TOPIC);

    c.send(frame! {"type" => "subscribe", "topic" => TOPIC, "filters" => many_filters(100)}).await;
    assert_eq!(c.expect("subscribed").await.str("topic"), TOPIC, "100 filters are allowed");

    c.send(frame! {"type" => "setFilters", "topic" => TOPIC, "filters" => many_filters(101)}).await;
    let e = c.expect_error(TOO_MANY_FILTERS).await;
    assert_eq!(e.str("topic"), TOPIC);
    c.send(frame! {"type" => "setFilters", "topic" => TOPIC, "filters" => many_filters(100)}).await;
    assert_eq!(c.expect("filtersUpdated").await.str("topic"), TOPIC);

    c.send(
        frame! {"type" => "publish", "topic" => TOPIC, "data" => 1, "filters" => many_filters(101), "msgRef" => "tm"},
    )
    .await;
    let e = c.expect_error(TOO_MANY_FILTERS).await;
    assert_eq!((e.str("topic"), e.str("msgRef")), (TOPIC, "tm"));
    c.send(
        frame! {"type" => "publish", "topic" => TOPIC, "data" => 1, "filters" => many_filters(100), "msgRef" => "ok"},
    )
    .await;
    assert_eq!(c.expect("published").await.str("msgRef"), "ok");
}

#[tokio::test]
async fn invalid_filters_on_subscribe_are_invalid_filter_chars_with_topic() {
    let server = TestServer::start().await;
    let mut c = server.auth("dev-token-alice").await;
    for (what, filters) in invalid_subscription_filters() {
        c.send(frame! {"type" => "subscribe", "topic" => TOPIC, "filters" => filters}).await;
        let e = c.expect_error(INVALID_FILTER).await;
        assert_eq!(e.str("topic"), TOPIC, "{what}: {e:?}");
        assert!(!e.has("code"), "{what}: {e:?}");
    }
    // none of them created a subscription: setFilters still finds nothing
    c.send(frame! {"type" => "setFilters", "topic" => TOPIC, "filters" => strs(&["a"])}).await;
    c.expect_error("not_subscribed").await;
    // valid shapes for contrast: OR strings, an AND group, [] and nil (N32)
    for filters in [Value::Array(vec![Value::from("a"), strs(&["b", "c"])]), Value::Array(vec![]), Value::Nil] {
        c.send(frame! {"type" => "subscribe", "topic" => TOPIC, "filters" => filters}).await;
        c.expect("subscribed").await;
    }
}

#[tokio::test]
async fn invalid_filters_on_set_filters_are_invalid_filter_chars_with_topic() {
    let server = TestServer::start().await;
    let mut c = server.auth("dev-token-alice").await;
    c.subscribe(TOPIC).await;
    for (what, filters) in invalid_subscription_filters() {
        c.send(frame! {"type" => "setFilters", "topic" => TOPIC, "filters" => filters}).await;
        let e = c.expect_error(INVALID_FILTER).await;
        assert_eq!(e.str("topic"), TOPIC, "{what}: {e:?}");
    }
    c.send(frame! {"type" => "setFilters", "topic" => TOPIC, "filters" => strs(&["ok"])}).await;
    let f = c.expect("filtersUpdated").await;
    assert_eq!(f.get("filters"), &strs(&["ok"]));
}

#[tokio::test]
async fn invalid_publish_filters_are_invalid_filter_chars_with_topic_and_msg_ref() {
    let server = TestServer::start().await;
    let mut alice = server.auth("dev-token-alice").await;
    let mut bob = server.auth("dev-token-bob").await;
    bob.subscribe(TOPIC).await;
    let cases: Vec<(&str, &str, Value)> = vec![
        ("filter empty", "filter", Value::from("")),
        ("filter slash", "filter", Value::from("a/b")),
        ("filter hash", "filter", Value::from("#")),
        ("filter plus", "filter", Value::from("x+")),
        ("filter pipe", "filter", Value::from("a|b")),
        ("filter not a string", "filter", Value::from(3)),
        ("filters with empty member", "filters", strs(&["a", ""])),
        ("filters with reserved member", "filters", strs(&["a", "b/c"])),
        ("filters with non-string member", "filters", Value::Array(vec![Value::from("a"), Value::from(1)])),
        ("filters with nested list", "filters", Value::Array(vec![strs(&["a", "b"])])),
        ("filters not a list", "filters", Value::from("a")),
    ];
    for (i, (what, key, value)) in cases.into_iter().enumerate() {
        let msg_ref = format!("bad-{i}");
        alice
            .send(Value::Map(vec![
                (Value::from("type"), Value::from("publish")),
                (Value::from("topic"), Value::from(TOPIC)),
                (Value::from("data"), Value::from(format!("d{i}"))),
                (Value::from(key), value),
                (Value::from("msgRef"), Value::from(msg_ref.as_str())),
            ]))
            .await;
        let e = alice.expect_error(INVALID_FILTER).await;
        assert_eq!((e.str("topic"), e.str("msgRef")), (TOPIC, msg_ref.as_str()), "{what}: {e:?}");
    }
    // valid for a publish (N32): a one-member filters array
    alice
        .send(frame! {"type" => "publish", "topic" => TOPIC, "data" => "solo", "filters" => strs(&["Solo"]), "msgRef" => "ok"})
        .await;
    alice.expect("published").await;
    // none of the refused publishes reached bob: his first message is the valid one
    let m = bob.expect("message").await;
    assert_eq!((m.get("data").as_str(), m.get("filter").as_str()), (Some("solo"), Some("solo")));
}

/// Publishes `data` from `c` with filter key `filter` (or unfiltered) and waits for the ack.
async fn publish_filtered(c: &mut WsClient, filter: Option<&str>, data: &str) {
    let mut f = vec![
        (Value::from("type"), Value::from("publish")),
        (Value::from("topic"), Value::from(TOPIC)),
        (Value::from("data"), Value::from(data)),
        (Value::from("msgRef"), Value::from(data)),
    ];
    if let Some(k) = filter {
        f.push((Value::from("filter"), Value::from(k)));
    }
    c.send(Value::Map(f)).await;
    assert_eq!(c.expect("published").await.str("msgRef"), data);
}

#[tokio::test]
async fn invalid_resubscribe_keeps_the_old_subscription() {
    let server = TestServer::start().await;
    let mut alice = server.auth("dev-token-alice").await;
    let mut bob = server.auth("dev-token-bob").await;
    bob.send(frame! {"type" => "subscribe", "topic" => TOPIC, "filters" => strs(&["red"])}).await;
    bob.expect("subscribed").await;
    bob.send(frame! {"type" => "subscribe", "topic" => TOPIC, "filters" => strs(&["a/b"])}).await;
    bob.expect_error(INVALID_FILTER).await;
    bob.send(frame! {"type" => "subscribe", "topic" => TOPIC, "filters" => many_filters(101)}).await;
    bob.expect_error(TOO_MANY_FILTERS).await;

    // Still subscribed, still filtered on "red": not removed, not widened to a wildcard.
    publish_filtered(&mut alice, Some("blue"), "blue-1").await;
    publish_filtered(&mut alice, None, "plain-2").await;
    publish_filtered(&mut alice, Some("red"), "red-3").await;
    let m = bob.expect("message").await;
    assert_eq!((m.get("data").as_str(), m.get("filter").as_str()), (Some("red-3"), Some("red")));
    bob.assert_nothing_pending().await;
}

#[tokio::test]
async fn invalid_set_filters_keeps_the_previous_filters() {
    let server = TestServer::start().await;
    let mut alice = server.auth("dev-token-alice").await;
    let mut bob = server.auth("dev-token-bob").await;
    bob.send(frame! {"type" => "subscribe", "topic" => TOPIC, "filters" => strs(&["red"])}).await;
    bob.expect("subscribed").await;
    bob.send(frame! {"type" => "setFilters", "topic" => TOPIC, "filters" => strs(&["blue"])}).await;
    assert_eq!(bob.expect("filtersUpdated").await.get("filters"), &strs(&["blue"]));
    bob.send(frame! {"type" => "setFilters", "topic" => TOPIC, "filters" => strs(&["a#"])}).await;
    bob.expect_error(INVALID_FILTER).await;
    bob.send(frame! {"type" => "setFilters", "topic" => TOPIC, "filters" => many_filters(101)}).await;
    bob.expect_error(TOO_MANY_FILTERS).await;
    bob.send(frame! {"type" => "setFilters", "topic" => TOPIC, "filters" => Value::from("blue")}).await;
    bob.expect_error(INVALID_FILTER).await;

    publish_filtered(&mut alice, Some("red"), "red-1").await;
    publish_filtered(&mut alice, None, "plain-2").await;
    publish_filtered(&mut alice, Some("a"), "a-3").await;
    publish_filtered(&mut alice, Some("blue"), "blue-4").await;
    let m = bob.expect("message").await;
    assert_eq!((m.get("data").as_str(), m.get("filter").as_str()), (Some("blue-4"), Some("blue")));
    bob.assert_nothing_pending().await;
}

// ---------------------------------------------------------------------------------------------
// Lobbies (N35) and presence (N21, N39)

#[tokio::test]
async fn unknown_lobby_is_not_authorized_with_lobby_id_and_no_code() {
    let server = TestServer::start().await;
    let mut v2 = server.auth("dev-token-bob").await;
    let mut v1 = auth_v1(&server, "dev-token-bob").await;
    for c in [&mut v2, &mut v1] {
        c.send(frame! {"type" => "lobbySubscribe", "lobbyId" => "nope"}).await;
        let e = c.expect_error("not_authorized").await;
        assert_eq!(e.str("lobbyId"), "nope");
        assert!(!e.has("code") && !e.has("topic"), "{e:?}");
        c.send(frame! {"type" => "getLobbyPresence", "lobbyId" => "nope"}).await;
        let e = c.expect_error("not_authorized").await;
        assert_eq!(e.str("lobbyId"), "nope");
        assert!(!e.has("code"), "{e:?}");
        // the known lobby works on the same connection
        c.send(frame! {"type" => "lobbySubscribe", "lobbyId" => "online"}).await;
        assert_eq!(c.expect("lobbySubscribed").await.str("lobbyId"), "online");
    }
}

#[tokio::test]
async fn presence_in_an_inaccessible_room_is_unknown_topic_for_v2_and_not_authorized_for_v1() {
    let server = TestServer::start().await;
    let mut alice = server.auth("dev-token-alice").await;
    let mut bob = server.auth("dev-token-bob").await;
    let mut bob_v1 = auth_v1(&server, "dev-token-bob").await;
    let announce = |room: &str| frame! {"type" => "presence", "roomId" => room, "data" => frame! {"s" => "on"}};
    let get = |room: &str| frame! {"type" => "getPresence", "roomId" => room};

    for (who, room) in [("alice", "nope"), ("bob", "nope"), ("bob", "ops")] {
        let c = if who == "alice" { &mut alice } else { &mut bob };
        for f in [announce(room), get(room)] {
            c.send(f).await;
            let e = c.expect_error("unknown_topic").await;
            assert_eq!((e.int("code"), e.str("roomId")), (42940, room), "{who}: {e:?}");
            assert!(!e.str("hint").is_empty());
        }
    }
    for room in ["nope", "ops"] {
        for f in [announce(room), get(room)] {
            bob_v1.send(f).await;
            let e = bob_v1.expect_error("not_authorized").await;
            assert_eq!(keys(&e), sorted(&["type", "error", "roomId"]), "{e:?}");
            assert_eq!(e.str("roomId"), room);
        }
    }
    // alice has the grant for ops
    alice.send(get("ops")).await;
    let l = alice.expect("presenceList").await;
    assert_eq!(l.str("roomId"), "ops");
}

#[tokio::test]
async fn get_presence_without_room_id_is_an_empty_presence_list() {
    let server = TestServer::start().await;
    let mut alice = server.auth("dev-token-alice").await;
    let mut bob = server.auth("dev-token-bob").await;
    // someone is present in a room, so an empty answer is not just an empty server
    bob.send(frame! {"type" => "presence", "roomId" => "general", "data" => frame! {"s" => "on"}}).await;
    bob.expect("presence").await;
    alice.send(frame! {"type" => "getPresence"}).await;
    let l = alice.expect("presenceList").await;
    assert_eq!(l.get("data"), &Value::Array(vec![]), "{l:?}");
    alice.send(frame! {"type" => "getPresence", "roomId" => Value::Nil}).await;
    let l = alice.expect("presenceList").await;
    assert_eq!(l.get("data"), &Value::Array(vec![]), "{l:?}");
}

#[tokio::test]
async fn ack_and_batch_ack_get_no_reply() {
    let server = TestServer::start().await;
    let mut c = server.auth("dev-token-agent").await;
    c.send(frame! {"type" => "ack", "msgId" => "0190a5b0-0000-7000-8000-000000000000"}).await;
    c.send(frame! {"type" => "ack", "msgId" => "not-a-uuid"}).await;
    c.send(frame! {"type" => "batchAck", "msgIds" => strs(&["a", "b", "c"])}).await;
    c.send(frame! {"type" => "batchAck", "msgIds" => Value::Array(vec![])}).await;
    c.assert_nothing_pending().await;
    assert_usable(&mut c).await;
}
