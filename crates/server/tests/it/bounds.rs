//! Issue 12, defect 3: no outbound frame ever exceeds 1 MiB (N4), whatever a client puts in the
//! fields the server echoes or forwards. Every frame type is sent with its fields at their
//! largest accepted size (and one byte over), and the largest frame any client receives is
//! measured on raw sockets.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use rmpv::Value;
use skua_testkit::{TestServer, encode, frame};
use tokio_tungstenite::tungstenite::Message;

const MIB: usize = 1024 * 1024;
const TOPIC: &str = "demo/general/messages";

type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A raw client that remembers the largest frame it received.
struct Raw {
    ws: Ws,
    largest: usize,
}

impl Raw {
    async fn auth(server: &TestServer, token: &str) -> Self {
        let (ws, _) = tokio_tungstenite::connect_async(server.url()).await.expect("connect");
        let mut c = Self { ws, largest: 0 };
        c.send(&frame! {"type" => "auth", "token" => token, "protocolVersion" => 2}).await;
        assert_eq!(c.next().await["success"], Value::Boolean(true));
        c
    }

    async fn send(&mut self, v: &Value) {
        let bytes = encode(v);
        assert!(bytes.len() <= MIB, "test frame of {} bytes is over the inbound cap", bytes.len());
        self.ws.send(Message::Binary(bytes.into())).await.expect("send");
    }

    async fn next(&mut self) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let msg = tokio::time::timeout_at(deadline, self.ws.next()).await.expect("no frame within 10 s");
            match msg {
                Some(Ok(Message::Binary(b))) if !b.is_empty() => {
                    self.largest = self.largest.max(b.len());
                    assert!(b.len() <= MIB, "received a {}-byte frame, over the 1 MiB cap (N4)", b.len());
                    return rmpv::decode::read_value(&mut &b[..]).expect("msgpack");
                }
                Some(Ok(Message::Binary(_) | Message::Ping(_) | Message::Pong(_))) => {}
                other => panic!("expected a binary frame, got {other:?}"),
            }
        }
    }

    /// The next frame of type `ty`, skipping others.
    async fn next_of(&mut self, ty: &str) -> Value {
        loop {
            let f = self.next().await;
            if f["type"].as_str() == Some(ty) {
                return f;
            }
        }
    }
}

/// A `bin` value whose packed size is exactly `packed` bytes (bin32 header: 5 bytes).
fn bin_packed(packed: usize) -> Value {
    Value::Binary(vec![0x5a; packed - 5])
}

fn s(n: usize, c: char) -> String {
    std::iter::repeat_n(c, n).collect()
}

#[tokio::test]
async fn the_worst_case_of_every_frame_type_stays_within_one_mib() {
    let server = TestServer::start().await;
    let mut bob = Raw::auth(&server, "dev-token-bob").await;
    let mut alice = Raw::auth(&server, "dev-token-alice").await;
    let max_data = skua_protocol::DEFAULT_MAX_PAYLOAD_BYTES;
    let long_filter = s(skua_protocol::filters::MAX_FILTER_BYTES, 'f');
    let long_ref = s(skua_protocol::MAX_NAME_BYTES, 'r');

    // subscribe: 100 AND groups of long values fill the 32 KiB list cap; the echo is bounded.
    let group = |i: usize| Value::Array(vec![Value::from(format!("{i:03}{}", s(120, 'a'))), Value::from(s(120, 'b'))]);
    let filters: Vec<Value> = (0..100).map(group).collect();
    bob.send(&frame! {"type" => "subscribe", "topic" => TOPIC, "filters" => Value::Array(filters.clone())}).await;
    assert_eq!(bob.next_of("subscribed").await["topic"].as_str(), Some(TOPIC));
    bob.send(&frame! {"type" => "setFilters", "topic" => TOPIC, "filters" => Value::Array(filters)}).await;
    bob.next_of("filtersUpdated").await;
    bob.send(&frame! {"type" => "setFilters", "topic" => TOPIC, "filters" => Value::Array(vec![])}).await;
    bob.next_of("filtersUpdated").await;

    // publish: largest data, longest filter and msgRef. Bob gets the message under 1 MiB.
    alice
        .send(&frame! {"type" => "publish", "topic" => TOPIC, "data" => bin_packed(max_data),
        "filter" => long_filter.as_str(), "msgRef" => long_ref.as_str()})
        .await;
    assert_eq!(alice.next_of("published").await["msgRef"].as_str(), Some(long_ref.as_str()));
    let m = bob.next_of("message").await;
    assert_eq!(m["filter"].as_str(), Some(long_filter.as_str()));

    // The same with a 100-member AND filter (the longest key a publish can forward).
    let members: Vec<Value> = (0..100).map(|i| Value::from(format!("{i:03}{}", s(250, 'k')))).collect();
    alice
        .send(&frame! {"type" => "publish", "topic" => TOPIC, "data" => bin_packed(max_data - 30_000),
        "filters" => Value::Array(members), "msgRef" => long_ref.as_str()})
        .await;
    alice.next_of("published").await;
    bob.next_of("message").await;

    // One byte over each bound: refused, and the over-long field is not echoed.
    alice
        .send(&frame! {"type" => "publish", "topic" => TOPIC, "data" => 1, "filter" => s(257, 'f'), "msgRef" => "r"})
        .await;
    let e = alice.next_of("error").await;
    assert_eq!(e["error"].as_str(), Some(skua_protocol::codes::error::FILTER_TOO_LONG));
    alice.send(&frame! {"type" => "publish", "topic" => TOPIC, "data" => 1, "msgRef" => s(1025, 'r')}).await;
    let e = alice.next_of("error").await;
    assert_eq!(e["error"].as_str(), Some("invalid_frame"));
    assert_eq!(e["hint"].as_str(), Some("msgRef is longer than 1024 bytes"));
    assert!(e["msgRef"].is_nil(), "an over-long msgRef is not echoed");

    // Unknown topics, at the longest accepted topic and msgRef, with the largest data.
    let long_topic = format!("demo/general/{}", s(skua_protocol::MAX_NAME_BYTES - 13, 't'));
    alice
        .send(&frame! {"type" => "publish", "topic" => long_topic.as_str(), "data" => bin_packed(max_data),
        "msgRef" => long_ref.as_str()})
        .await;
    let e = alice.next_of("error").await;
    assert_eq!(e["error"].as_str(), Some("unknown_topic"));
    assert_eq!(e["msgRef"].as_str(), Some(long_ref.as_str()));
    let over_topic = format!("{long_topic}x");
    alice
        .send(&frame! {"type" => "publish", "topic" => over_topic.as_str(), "data" => bin_packed(max_data),
        "msgRef" => long_ref.as_str()})
        .await;
    let e = alice.next_of("error").await;
    assert_eq!(e["hint"].as_str(), Some("topic is longer than 1024 bytes"));
    assert!(e["topic"].is_nil());
    for ty in ["subscribe", "unsubscribe", "setFilters"] {
        alice.send(&frame! {"type" => ty, "topic" => over_topic.as_str()}).await;
        assert_eq!(alice.next_of("error").await["hint"].as_str(), Some("topic is longer than 1024 bytes"));
    }
    for (ty, key) in [("lobbySubscribe", "lobbyId"), ("getLobbyPresence", "lobbyId"), ("getPresence", "roomId")] {
        alice.send(&frame! {"type" => ty, key => s(1025, 'l')}).await;
        assert_eq!(alice.next_of("error").await["error"].as_str(), Some("invalid_frame"), "{ty}");
    }
    // An unknown frame type padded to the inbound cap: the error is small.
    let mut pad = frame! {"type" => "nope", "topic" => long_topic.as_str(), "msgRef" => long_ref.as_str(),
    "pad" => Value::Binary(vec![])};
    let overhead = encode(&pad).len() + 5;
    pad = frame! {"type" => "nope", "topic" => long_topic.as_str(), "msgRef" => long_ref.as_str(),
    "pad" => Value::Binary(vec![0; MIB - overhead])};
    alice.send(&pad).await;
    assert_eq!(alice.next_of("error").await["error"].as_str(), Some("invalid_frame"));

    // presence: the largest accepted data reaches others; one byte more is refused.
    bob.send(&frame! {"type" => "presence", "roomId" => "general", "data" => frame! {"k" => 1}}).await;
    bob.next_of("presence").await;
    let max_presence = skua_edge::EdgeConfig::default().max_presence_size;
    let blob = |packed_map: usize| frame! {"b" => Value::Binary(vec![1; packed_map - 1 - 2 - 3])};
    assert_eq!(encode(&blob(max_presence)).len(), max_presence);
    alice.send(&frame! {"type" => "presence", "roomId" => "general", "data" => blob(max_presence)}).await;
    let ev = bob.next_of("presence").await;
    assert_eq!(ev["data"]["actor_token_id"].as_str(), Some("alice"));
    alice.send(&frame! {"type" => "presence", "roomId" => "general", "data" => blob(max_presence + 1)}).await;
    let e = alice.next_of("error").await;
    assert_eq!(e["error"].as_str(), Some("message_too_large"));
    assert_eq!(e["maxSizeBytes"].as_u64(), Some(max_presence as u64));
    alice.send(&frame! {"type" => "getPresence", "roomId" => "general"}).await;
    alice.next_of("presenceList").await;

    // auth/reauth with an over-long token: a clear error, nothing echoed.
    alice.send(&frame! {"type" => "reauth", "token" => s(16 * 1024 + 1, 'x')}).await;
    assert_eq!(alice.next_of("error").await["hint"].as_str(), Some("token is longer than 16384 bytes"));

    // Both connections are still usable, and nothing they got was over the cap.
    alice.send(&frame! {"type" => "publish", "topic" => TOPIC, "data" => 1, "msgRef" => "last"}).await;
    assert_eq!(alice.next_of("published").await["msgRef"].as_str(), Some("last"));
    bob.next_of("message").await;
    assert!(bob.largest > max_data && bob.largest <= MIB, "largest frame to bob: {}", bob.largest);
    assert!(alice.largest <= MIB, "largest frame to alice: {}", alice.largest);
}

#[tokio::test]
async fn a_project_limit_above_the_ceiling_is_clamped_so_messages_stay_within_one_mib() {
    // A stored project limit from before the ceiling existed (fixtures skip the RPC check).
    let fixtures = r#"
[[projects]]
id = "big"
max_message_size = 1040000

[[projects.apps]]
id = "big-app"
slug = "big"
topics = ["t"]

[[projects.apps.rooms]]
slug = "r"

[[actors]]
id = "big-a"
project = "big"
type = "user"
tokens = ["big-token-a"]
"#;
    let server = TestServer::builder().fixtures(fixtures).spawn().await;
    let mut a = Raw::auth(&server, "big-token-a").await;
    a.send(&frame! {"type" => "publish", "topic" => "big/r/t", "data" => bin_packed(1_000_000), "msgRef" => "x"}).await;
    let e = a.next_of("error").await;
    assert_eq!(e["error"].as_str(), Some("message_too_large"));
    assert_eq!(e["maxSizeBytes"].as_u64(), Some(skua_protocol::MAX_PAYLOAD_CEILING_BYTES as u64));
}
