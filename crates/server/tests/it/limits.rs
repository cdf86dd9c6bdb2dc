//! Limits: the publish rate limit (N18), the check order of a publish (N17), the payload size
//! limit and the 1 MiB frame caps in both directions (N4, N30).

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use rmpv::Value;
use skua_testkit::{TestServer, WsClient, encode, frame};
use tokio_tungstenite::tungstenite::Message;

const TOPIC: &str = "demo/general/messages";
const MIB: usize = 1024 * 1024;

fn publish(topic: &str, data: Value, msg_ref: &str) -> Value {
    frame! {"type" => "publish", "topic" => topic, "data" => data, "msgRef" => msg_ref}
}

/// A `bin` value whose packed size (header included) is exactly `packed` bytes.
fn bin_packed(packed: usize) -> Value {
    let header = match packed {
        0..=257 => 2,
        258..=65_538 => 3,
        _ => 5,
    };
    let v = Value::Binary(vec![0x5a; packed - header]);
    assert_eq!(encode(&v).len(), packed, "bin header arithmetic");
    v
}

/// A publish frame whose encoded size is exactly `total` bytes (data is a bin32 value).
fn publish_frame_of_size(total: usize) -> Vec<u8> {
    let probe = encode(&publish(TOPIC, Value::Binary(vec![0; 100_000]), "big"));
    let len = 100_000 + total - probe.len();
    let f = encode(&publish(TOPIC, Value::Binary(vec![0; len]), "big"));
    assert_eq!(f.len(), total);
    f
}

fn settings_rate(rate: u32, window: &'static str) -> impl FnOnce(&mut skua_server::Settings) {
    move |s| {
        s.edge.rate_limit = Some(rate);
        s.edge.rate_limit_window = Some(window.into());
    }
}

async fn assert_usable(c: &mut WsClient) {
    c.subscribe("demo/random/status").await;
}

// ---------------------------------------------------------------------------------------------
// Rate limit (N18) and check order (N17)

#[tokio::test]
async fn eighty_back_to_back_publishes_give_fifty_published_and_thirty_rate_errors() {
    // A 1 h window: no refill while the 80 frames are in flight, so the count is exact.
    let server = TestServer::builder().settings(|s| s.edge.rate_limit_window = Some("1h".into())).spawn().await;
    let mut alice = server.auth("dev-token-alice").await;
    for i in 0..80 {
        alice.send(publish(TOPIC, Value::from(i), &format!("r{i}"))).await;
    }
    let (mut ok, mut refused) = (0, 0);
    for i in 0..80 {
        let f = alice.next().await;
        let msg_ref = format!("r{i}");
        if i < 50 {
            assert_eq!(f.ty(), "published", "publish {i}: {f:?}");
            assert_eq!(f.str("msgRef"), msg_ref);
            ok += 1;
        } else {
            assert_eq!(f.ty(), "error", "publish {i}: {f:?}");
            assert_eq!(f.str("error"), "rate_limit_exceeded");
            assert_eq!(f.int("code"), 42910);
            assert_eq!((f.str("topic"), f.str("msgRef")), (TOPIC, msg_ref.as_str()));
            refused += 1;
        }
    }
    assert_eq!((ok, refused), (50, 30));
    alice.assert_nothing_pending().await;
}

#[tokio::test]
async fn rate_limit_counts_per_connection() {
    let server = TestServer::builder().settings(settings_rate(2, "1h")).spawn().await;
    let mut a1 = server.auth("dev-token-alice").await;
    let mut a2 = server.auth("dev-token-alice").await;
    for c in [&mut a1, &mut a2] {
        c.publish_acked(TOPIC, Value::from(1)).await;
        c.publish_acked(TOPIC, Value::from(2)).await;
        c.send(publish(TOPIC, Value::from(3), "third")).await;
        let e = c.expect_error("rate_limit_exceeded").await;
        assert_eq!((e.int("code"), e.str("msgRef")), (42910, "third"));
    }
}

#[tokio::test]
async fn rate_is_checked_before_size_size_before_access_and_access_before_filters() {
    let server = TestServer::builder()
        .settings(|s| {
            s.edge.rate_limit = Some(3);
            s.edge.rate_limit_window = Some("1h".into());
            s.edge.max_message_size = Some(1000);
        })
        .spawn()
        .await;
    let mut c = server.auth("dev-token-bob").await;
    let unknown = "demo/nope/messages";

    // access before filters: an unknown topic with an invalid filter is 42940
    c.send(frame! {"type" => "publish", "topic" => unknown, "data" => 1, "filter" => "a/b", "msgRef" => "af"}).await;
    let e = c.expect_error("unknown_topic").await;
    assert_eq!((e.int("code"), e.str("topic"), e.str("msgRef")), (42940, unknown, "af"));

    // size before access: too large and to an unknown topic is 42930
    c.send(publish(unknown, bin_packed(1001), "sa")).await;
    let e = c.expect_error("message_too_large").await;
    assert_eq!((e.int("code"), e.str("topic"), e.str("msgRef")), (42930, unknown, "sa"));
    assert_eq!(e.int("maxSizeBytes"), 1000);

    // the third token goes to a valid publish
    c.publish_acked(TOPIC, Value::from("ok")).await;

    // rate before size: over the rate and too large is 42910, whatever else is wrong with it
    c.send(publish(TOPIC, bin_packed(1001), "rs")).await;
    let e = c.expect_error("rate_limit_exceeded").await;
    assert_eq!((e.int("code"), e.str("topic"), e.str("msgRef")), (42910, TOPIC, "rs"));
    assert!(!e.has("maxSizeBytes"));
    c.send(
        frame! {"type" => "publish", "topic" => unknown, "data" => bin_packed(1001), "filter" => "#", "msgRef" => "ra"},
    )
    .await;
    let e = c.expect_error("rate_limit_exceeded").await;
    assert_eq!((e.int("code"), e.str("topic"), e.str("msgRef")), (42910, unknown, "ra"));
}

#[tokio::test]
async fn subscribe_checks_access_before_filters() {
    let server = TestServer::start().await;
    let mut c = server.auth("dev-token-bob").await;
    c.send(frame! {"type" => "subscribe", "topic" => "demo/ops/messages", "filters" => Value::from("not a list")})
        .await;
    let e = c.expect_error("unknown_topic").await;
    assert_eq!((e.int("code"), e.str("topic")), (42940, "demo/ops/messages"));
}

#[tokio::test]
async fn publishes_refused_after_the_rate_check_use_their_token() {
    let server = TestServer::builder()
        .settings(|s| {
            s.edge.rate_limit = Some(3);
            s.edge.rate_limit_window = Some("1h".into());
            s.edge.max_message_size = Some(1000);
        })
        .spawn()
        .await;
    let mut c = server.auth("dev-token-alice").await;
    // token 1: refused for size
    c.send(publish(TOPIC, bin_packed(1001), "big")).await;
    assert_eq!(c.expect_error("message_too_large").await.int("code"), 42930);
    // token 2: refused for access
    c.send(publish("demo/nope/messages", Value::from(1), "unknown")).await;
    assert_eq!(c.expect_error("unknown_topic").await.int("code"), 42940);
    // token 3: accepted
    c.publish_acked(TOPIC, Value::from("ok")).await;
    // no token left
    c.send(publish(TOPIC, Value::from("late"), "late")).await;
    let e = c.expect_error("rate_limit_exceeded").await;
    assert_eq!((e.int("code"), e.str("msgRef")), (42910, "late"));
}

#[tokio::test]
async fn publishes_refused_for_rate_take_no_token() {
    // One token per 4 s. Refusals for rate at the start and in the middle of the window must
    // neither take tokens nor hold back the refill: a window after the accepted publish the
    // next one is accepted again. The window is long enough that a loaded machine still sends
    // the mid-window publish well inside it (3 s of slack).
    let window = Duration::from_secs(4);
    let server = TestServer::builder().settings(settings_rate(1, "4s")).spawn().await;
    let mut c = server.auth("dev-token-alice").await;
    c.publish_acked(TOPIC, Value::from("first")).await;
    let accepted_at = tokio::time::Instant::now();
    for i in 0..20 {
        c.send(publish(TOPIC, Value::from(i), &format!("early-{i}"))).await;
    }
    for i in 0..20 {
        let e = c.expect_error("rate_limit_exceeded").await;
        assert_eq!(e.str("msgRef"), format!("early-{i}"));
    }
    tokio::time::sleep_until(accepted_at + window / 4).await;
    c.send(publish(TOPIC, Value::from("mid"), "mid")).await;
    let e = c.expect_error("rate_limit_exceeded").await;
    assert_eq!(e.str("msgRef"), "mid");
    assert!(accepted_at.elapsed() < window, "the mid-window publish came too late to prove anything");
    // Waiting for the refill is the behaviour under test, not synchronisation.
    tokio::time::sleep_until(accepted_at + window + window / 4).await;
    c.publish_acked(TOPIC, Value::from("refilled")).await;
}

// ---------------------------------------------------------------------------------------------
// Payload size (N4)

#[tokio::test]
async fn data_of_exactly_the_max_size_is_accepted_and_one_byte_more_is_message_too_large() {
    let server = TestServer::builder().settings(|s| s.edge.max_message_size = Some(1000)).spawn().await;
    let mut alice = server.auth("dev-token-alice").await;
    let mut bob = server.auth("dev-token-bob").await;
    bob.subscribe(TOPIC).await;

    let at_max = bin_packed(1000);
    alice.send(publish(TOPIC, at_max.clone(), "max")).await;
    assert_eq!(alice.expect("published").await.str("msgRef"), "max");
    assert_eq!(bob.expect("message").await.get("data"), &at_max);

    alice.send(publish(TOPIC, bin_packed(1001), "over")).await;
    let e = alice.expect_error("message_too_large").await;
    assert_eq!(e.int("code"), 42930);
    assert_eq!(e.int("maxSizeBytes"), 1000);
    assert_eq!((e.str("topic"), e.str("msgRef")), (TOPIC, "over"));
    assert!(!e.str("hint").is_empty());

    // The packed size counts, whatever the type: a str of 997 bytes packs to 1000 (str16).
    let s997 = Value::from("x".repeat(997));
    assert_eq!(encode(&s997).len(), 1000);
    alice.send(publish(TOPIC, s997.clone(), "str-max")).await;
    alice.expect("published").await;
    assert_eq!(bob.expect("message").await.get("data"), &s997);
    alice.send(publish(TOPIC, Value::from("x".repeat(998)), "str-over")).await;
    assert_eq!(alice.expect_error("message_too_large").await.str("msgRef"), "str-over");
    // a map's keys and headers count too
    let map = Value::Map(vec![(Value::from("k"), Value::from("y".repeat(995)))]);
    assert_eq!(encode(&map).len(), 1001);
    alice.send(publish(TOPIC, map, "map-over")).await;
    assert_eq!(alice.expect_error("message_too_large").await.str("msgRef"), "map-over");

    // nothing refused reached bob
    alice.publish_acked(TOPIC, Value::from("marker")).await;
    assert_eq!(bob.expect("message").await.get("data").as_str(), Some("marker"));
}

#[tokio::test]
async fn v1_size_error_carries_code_and_max_size_but_no_msg_ref_or_hint() {
    let server = TestServer::builder().settings(|s| s.edge.max_message_size = Some(1000)).spawn().await;
    let mut c = server.connect().await;
    assert_eq!(c.auth("dev-token-alice", Some(1)).await.int("protocolVersion"), 1);
    c.send(publish(TOPIC, bin_packed(1001), "v1")).await;
    let e = c.expect_error("message_too_large").await;
    assert_eq!((e.int("code"), e.int("maxSizeBytes"), e.str("topic")), (42930, 1000, TOPIC));
    assert!(!e.has("msgRef") && !e.has("hint"), "{e:?}");
}

#[tokio::test]
async fn default_max_size_is_921600_packed_bytes_including_the_bin_header() {
    let server = TestServer::start().await;
    let mut alice = server.auth("dev-token-alice").await;
    // bin32: 5 header bytes + 921595 bytes = 921600 packed
    alice.send(publish(TOPIC, bin_packed(921_600), "max")).await;
    assert_eq!(alice.expect("published").await.str("msgRef"), "max");
    alice.send(publish(TOPIC, bin_packed(921_601), "over")).await;
    let e = alice.expect_error("message_too_large").await;
    assert_eq!((e.int("code"), e.int("maxSizeBytes"), e.str("msgRef")), (42930, 921_600, "over"));
}

// ---------------------------------------------------------------------------------------------
// Inbound frame cap (N4, N30)

#[tokio::test]
async fn inbound_frame_of_exactly_one_mib_is_read_and_answered() {
    let server = TestServer::start().await;
    let mut alice = server.auth("dev-token-alice").await;
    alice.send_bytes(publish_frame_of_size(MIB)).await;
    // read and decoded: its payload is over the 921600 limit
    let e = alice.expect_error("message_too_large").await;
    assert_eq!(e.str("msgRef"), "big");
    alice.send_bytes(publish_frame_of_size(MIB - 100)).await;
    assert_eq!(alice.expect_error("message_too_large").await.str("msgRef"), "big");
    assert_usable(&mut alice).await;
}

#[tokio::test]
async fn inbound_frame_over_one_mib_closes_with_1009() {
    let server = TestServer::start().await;
    let mut alice = server.auth("dev-token-alice").await;
    alice.send_bytes(publish_frame_of_size(MIB + 1)).await;
    let (code, _) = alice.expect_close().await;
    assert_eq!(code, 1009);
}

#[tokio::test]
async fn inbound_frame_over_one_mib_closes_with_1009_before_auth() {
    let server = TestServer::start().await;
    let mut c = server.connect().await;
    c.send_bytes(vec![0x00; MIB + 1]).await;
    let (code, _) = c.expect_close().await;
    assert_eq!(code, 1009);
}

// ---------------------------------------------------------------------------------------------
// Outbound frame cap (N4)

#[tokio::test]
async fn presence_snapshot_over_one_mib_is_truncated_to_a_valid_frame_under_one_mib() {
    const ACTORS: usize = 20;
    const BLOB: usize = 60_000;
    let mut fixtures = String::new();
    for i in 0..ACTORS {
        fixtures.push_str(&format!(
            "[[actors]]\nid = \"big-{i}\"\nproject = \"demo-project\"\ntype = \"user\"\ntokens = [\"big-token-{i}\"]\n\n"
        ));
    }
    let server = TestServer::builder().fixtures(&fixtures).spawn().await;
    let mut present = Vec::new();
    for i in 0..ACTORS {
        let mut c = server.auth(&format!("big-token-{i}")).await;
        let fill = u8::try_from(i).expect("few actors");
        c.send(frame! {"type" => "presence", "roomId" => "general", "data" => frame! {"blob" => Value::Binary(vec![fill; BLOB])}})
            .await;
        // Its own join is the first event it gets: the announce is stored.
        let join = c.next_of("presence").await;
        assert_eq!(join.str("event"), "join");
        assert_eq!(join.get("data")["actor_token_id"].as_str(), Some(format!("big-{i}").as_str()));
        present.push(c);
    }

    // Raw socket, to see the frame's exact size.
    let (mut ws, _) = tokio_tungstenite::connect_async(server.url()).await.expect("connect");
    let auth = frame! {"type" => "auth", "token" => "dev-token-bob", "protocolVersion" => 2};
    ws.send(Message::Binary(encode(&auth).into())).await.expect("send auth");
    let reply = next_binary(&mut ws).await;
    assert_eq!(decode(&reply)["success"], Value::Boolean(true));
    ws.send(Message::Binary(encode(&frame! {"type" => "getPresence", "roomId" => "general"}).into()))
        .await
        .expect("send");
    let raw = next_binary(&mut ws).await;
    assert!(raw.len() <= MIB, "a {}-byte frame exceeds the 1 MiB client cap (N4)", raw.len());
    let list = decode(&raw);
    assert_eq!(list["type"].as_str(), Some("presenceList"));
    assert_eq!(list["roomId"].as_str(), Some("general"));
    let entries = list["data"].as_array().expect("data is a list");
    assert!(!entries.is_empty() && entries.len() < ACTORS, "{} of {ACTORS} entries", entries.len());
    let mut seen = std::collections::HashSet::new();
    for e in entries {
        let id = e["actorTokenId"].as_str().expect("actorTokenId");
        let i: usize =
            id.strip_prefix("big-").and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("unexpected actor {id}"));
        assert!(seen.insert(i), "{id} listed twice");
        let fill = u8::try_from(i).expect("few actors");
        assert_eq!(e["presence"]["blob"], Value::Binary(vec![fill; BLOB]), "{id}: presence intact");
        assert!(e["joinedAt"].as_u64().is_some(), "{id}: joinedAt");
    }
    drop(present);
}

async fn next_binary(
    ws: &mut tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
) -> Vec<u8> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let msg = tokio::time::timeout_at(deadline, ws.next()).await.expect("no frame within 5 s");
        match msg {
            Some(Ok(Message::Binary(b))) if !b.is_empty() => return b.to_vec(),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
            other => panic!("expected a binary frame, got {other:?}"),
        }
    }
}

fn decode(b: &[u8]) -> Value {
    rmpv::decode::read_value(&mut &b[..]).expect("server frames are msgpack")
}

/// Asserts `f` is the 42910 refusal of a frame over its kind's rate limit.
fn rate_limited(f: &skua_testkit::Frame, hint: &str) {
    assert_eq!((f.ty(), f.str("error"), f.int("code")), ("error", "rate_limit_exceeded", 42910), "{f:?}");
    assert!(f.str("hint").contains(hint), "{f:?}");
}

/// Issue 33, item 5: presence updates, subscription changes and presence queries each have a
/// per-connection rate limit (here 3 per hour, so nothing refills during the test); the frame
/// over it gets 42910 `rate_limit_exceeded` naming its room or topic, does nothing, and the
/// connection goes on.
#[tokio::test]
async fn presence_subscription_and_query_frames_are_rate_limited_per_connection() {
    let server = TestServer::builder()
        .settings(|s| {
            s.edge.rate_limit_window = Some("1h".into());
            s.edge.presence_rate_limit = Some(3);
            s.edge.subscribe_rate_limit = Some(3);
            s.edge.query_rate_limit = Some(3);
        })
        .spawn()
        .await;
    let mut bob = server.auth("dev-token-bob").await;
    bob.send(frame! {"type" => "presence", "roomId" => "general", "data" => frame! {"n" => 0}}).await;
    bob.expect("presence").await;
    // Even an observer's presence costs a fan-out to every member.
    let mut viewer = server.auth("dev-token-viewer").await;
    for n in 1..=3 {
        viewer.send(frame! {"type" => "presence", "roomId" => "general", "data" => frame! {"n" => n}}).await;
        viewer.next_of("presence").await;
    }
    viewer.send(frame! {"type" => "presence", "roomId" => "general", "data" => frame! {"n" => 4}}).await;
    let f = viewer.next_of_within_any(&["error"], Duration::from_secs(5)).await;
    rate_limited(&f, "presence updates");
    assert_eq!(f.str("roomId"), "general");
    // Bob saw the viewer's join and two updates, never the fourth.
    let mut seen = Vec::new();
    for _ in 0..3 {
        let p = bob.expect("presence").await;
        seen.push(p.get("data")["presence"]["n"].as_i64());
    }
    assert_eq!(seen, [Some(1), Some(2), Some(3)]);
    bob.assert_nothing_pending().await;

    // Subscription changes: subscribe, unsubscribe, subscribe, then the fourth is refused.
    let mut c = server.auth("dev-token-alice").await;
    c.subscribe(TOPIC).await;
    c.send(frame! {"type" => "unsubscribe", "topic" => TOPIC}).await;
    c.expect("unsubscribed").await;
    c.subscribe("demo/general/status").await;
    c.send(frame! {"type" => "subscribe", "topic" => "demo/general/events"}).await;
    let f = c.next_of_within_any(&["error", "subscribed"], Duration::from_secs(5)).await;
    rate_limited(&f, "subscription changes");
    assert_eq!(f.str("topic"), "demo/general/events");

    // Queries.
    for _ in 0..3 {
        c.send(frame! {"type" => "getPresence", "roomId" => "general"}).await;
        c.next_of("presenceList").await;
    }
    c.send(frame! {"type" => "getPresence", "roomId" => "general"}).await;
    let f = c.next_of_within_any(&["error", "presenceList"], Duration::from_secs(5)).await;
    rate_limited(&f, "presence or history requests");
    assert_eq!(f.str("roomId"), "general");
    // The connection goes on: publishes have their own limit.
    c.publish_acked(TOPIC, "still here".into()).await;
    let scrape = skua_testkit::http::Scrape::of(server.addr).await;
    assert_eq!(scrape.value("skua_frames_rate_limited_total", &[]), 3.0, "{}", scrape.text);
}

/// The `history` reply for `topic` after `since` (offset, epoch), if any.
async fn history(c: &mut WsClient, topic: &str, since: Option<(u64, &str)>) -> skua_testkit::Frame {
    let f = match since {
        Some((offset, epoch)) => {
            frame! {"type" => "history", "topic" => topic, "since" => frame! {"offset" => offset, "epoch" => epoch}}
        }
        None => frame! {"type" => "history", "topic" => topic},
    };
    c.send(f).await;
    c.next_of_within_any(&["history", "error"], Duration::from_secs(20)).await
}

/// The `data` of a history reply's messages (a bin payload as its length) and the last offset.
fn page(f: &skua_testkit::Frame) -> (Vec<String>, Option<u64>) {
    let msgs = f.get("messages").as_array().expect("messages");
    let data = msgs
        .iter()
        .map(|m| match &m["data"] {
            Value::Binary(b) => format!("{} bytes", b.len()),
            other => other.as_str().unwrap_or_default().to_owned(),
        })
        .collect();
    (data, msgs.last().and_then(|m| m["offset"].as_u64()))
}

/// Issue 33, item 9: a message too large to share a `history` reply with others is sent in a
/// reply of its own, so paging with `since` passes it instead of getting `messages: []`
/// forever.
#[tokio::test]
async fn history_pages_pass_a_message_too_large_to_share_a_reply() {
    let ceiling = skua_protocol::MAX_PAYLOAD_CEILING_BYTES;
    let server = TestServer::builder().settings(|s| s.edge.max_message_size = Some(ceiling)).spawn().await;
    let mut c = server.auth("dev-token-alice").await;
    let feed = "demo/general/feed";
    c.publish_acked(feed, "small".into()).await;
    c.publish_acked(feed, bin_packed(ceiling)).await;
    c.publish_acked(feed, "after".into()).await;
    let first = history(&mut c, feed, None).await;
    assert_eq!(first.ty(), "history", "{first:?}");
    let epoch = first.str("epoch").to_owned();
    let (data, mut last) = page(&first);
    let mut got = data;
    // Page on from the last offset received until the topic's head.
    for _ in 0..5 {
        let head = first.get("offset").as_u64();
        if last == head {
            break;
        }
        let f = history(&mut c, feed, Some((last.expect("an offset to page from"), &epoch))).await;
        let (data, l) = page(&f);
        assert!(!data.is_empty(), "a page with no message cannot be passed: {:?}", f.get("complete"));
        got.extend(data);
        last = l;
    }
    assert_eq!(got, ["small".to_owned(), format!("{} bytes", ceiling - 5), "after".to_owned()]);
}

/// Issue 35: `history_max_page` bounds one `history` reply (a larger `limit` saturates) and
/// `history_max_replay` bounds one recovery: a `since` further back than that gets the newest
/// messages up to the bound and `recovered: false` (docs/recovery.md, docs/protocol.md). Found
/// by this test: the oldest were replayed and the rest up to the head skipped.
#[tokio::test]
async fn history_max_page_and_history_max_replay_bound_replies_and_recoveries() {
    let server = TestServer::builder()
        .settings(|s| {
            s.edge.history_max_page = Some(2);
            s.edge.history_max_replay = Some(3);
        })
        .spawn()
        .await;
    let feed = "demo/general/feed";
    let mut alice = server.auth("dev-token-alice").await;
    let mut bob = server.auth("dev-token-bob").await;
    alice.publish_acked(feed, "m0".into()).await;
    let first = history(&mut bob, feed, None).await;
    let (epoch, start) = (first.str("epoch").to_owned(), first.get("offset").as_u64().expect("offset"));
    for i in 1..6 {
        alice.publish_acked(feed, format!("m{i}").into()).await;
    }
    // A page: the latest two, whatever the limit asked.
    bob.send(frame! {"type" => "history", "topic" => feed, "limit" => 50}).await;
    let reply = bob.next_of_within_any(&["history", "error"], Duration::from_secs(20)).await;
    assert_eq!(page(&reply).0, ["m4", "m5"], "{reply:?}");
    // Five messages after `start`: more than the three one recovery replays.
    let since = frame! {"offset" => start, "epoch" => epoch.as_str()};
    bob.send(frame! {"type" => "subscribe", "topic" => feed, "since" => since}).await;
    let mut replayed = Vec::new();
    let recovery = loop {
        let f = bob.next_of_within_any(&["message", "recovery", "error"], Duration::from_secs(20)).await;
        match f.ty() {
            "message" => replayed.push(f.str("data").to_owned()),
            _ => break f,
        }
    };
    assert_eq!(recovery.ty(), "recovery", "{recovery:?}");
    assert_eq!(recovery.get("recovered"), &Value::Boolean(false), "{recovery:?}");
    // The newest three, so the replay runs into the live messages without a gap.
    assert_eq!(replayed, ["m3", "m4", "m5"], "the newest history_max_replay messages");
}

/// A second project whose topic `t` keeps history, for the per-project history quota.
const TENANT_B_HISTORY: &str = r#"
[[projects]]
id = "tenant-b"

[[projects.apps]]
id = "tenant-b-app"
slug = "b"
topics = ["t"]
topic_configs.t.history = { size = 1000, ttl = "10m" }

[[projects.apps.rooms]]
slug = "r1"

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

/// Issue 33, item 4: `history_max_bytes_per_project` bounds what one project's histories keep.
/// A message past it is still delivered, with its offset, but not kept (nor its topic's older
/// entries), it is counted, and another project's history keeps everything.
#[tokio::test]
async fn one_project_filling_its_history_quota_leaves_the_others_history_alone() {
    let server = TestServer::builder()
        .fixtures(TENANT_B_HISTORY)
        .settings(|s| s.edge.history_max_bytes_per_project = Some(3000))
        .spawn()
        .await;
    let mut b = server.auth("b-token").await;
    for _ in 0..3 {
        b.publish_acked("b/r1/t", bin_packed(1000)).await;
    }
    let kept = history(&mut b, "b/r1/t", None).await;
    assert_eq!(page(&kept).0.len(), 3, "3000 payload bytes are kept: {kept:?}");
    // The fourth passes the quota: delivered with offset 4, not kept.
    let mut watcher = server.auth("b-sub-token").await;
    watcher.subscribe("b/r1/t").await;
    b.publish_acked("b/r1/t", bin_packed(1000)).await;
    let live = watcher.next_of("message").await;
    assert_eq!(live.get("offset").as_u64(), Some(4), "delivered with its offset");
    let after = history(&mut b, "b/r1/t", None).await;
    assert_eq!(after.get("offset").as_u64(), Some(4));
    assert!(page(&after).0.is_empty(), "neither it nor the older entries are kept: {after:?}");
    // The demo project's history is untouched by tenant-b's quota: it has its own 3000 bytes.
    let mut alice = server.auth("dev-token-alice").await;
    for _ in 0..3 {
        alice.publish_acked("demo/general/feed", bin_packed(1000)).await;
    }
    assert_eq!(page(&history(&mut alice, "demo/general/feed", None).await).0.len(), 3);
    let m = skua_testkit::http::Scrape::of(server.addr).await;
    assert_eq!(m.value("skua_history_not_kept_total", &[]), 1.0, "{}", m.text);
}
