//! Server-initiated closes (N28, N30): idle timeout, heartbeats and pings as activity (N5),
//! slow consumers, the shutdown drain, and RFC 6455 violations (1002, 1007).

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use rmpv::Value;
use skua_testkit::http::Scrape;
use skua_testkit::{Event, TestServer, encode, frame};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;

const TOPIC: &str = "demo/general/messages";
/// The idle timeout of these tests, and the gap between a client's keep-alives: a loaded
/// machine delaying a keep-alive by up to 1.7 s does not close the socket (issue 35: 1 s and
/// 200 ms left 800 ms), while a server that ignores keep-alives still closes it within the 4.5 s
/// the 16-tick loops last.
const IDLE: Duration = Duration::from_secs(2);
const KEEP_ALIVE_EVERY: Duration = Duration::from_millis(300);

async fn idle_server() -> TestServer {
    TestServer::builder().settings(|s| s.edge.idle_timeout = Some("2s".into())).spawn().await
}

fn binary(v: &Value) -> Message {
    Message::Binary(encode(v).into())
}

fn decode(b: &[u8]) -> Value {
    rmpv::decode::read_value(&mut &b[..]).expect("server frames are msgpack")
}

/// The next message of a raw socket, failing after 5 s.
async fn raw_next<S>(ws: &mut WebSocketStream<S>) -> Message
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    match tokio::time::timeout(Duration::from_secs(5), ws.next()).await {
        Ok(Some(Ok(m))) => m,
        Ok(other) => panic!("socket ended: {other:?}"),
        Err(_) => panic!("nothing from the server within 5 s"),
    }
}

/// The next decoded frame of a raw socket, skipping pings, pongs and heartbeat echoes.
async fn raw_frame<S>(ws: &mut WebSocketStream<S>) -> Value
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    loop {
        match raw_next(ws).await {
            Message::Binary(b) if !b.is_empty() => return decode(&b),
            Message::Binary(_) | Message::Ping(_) | Message::Pong(_) => {}
            other => panic!("expected a frame, got {other:?}"),
        }
    }
}

async fn raw_auth<S>(ws: &mut WebSocketStream<S>, token: &str)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    ws.send(binary(&frame! {"type" => "auth", "token" => token, "protocolVersion" => 2})).await.expect("send auth");
    let reply = raw_frame(ws).await;
    assert_eq!(reply["type"].as_str(), Some("auth"));
    assert_eq!(reply["success"], Value::Boolean(true), "{reply:?}");
}

fn assert_close(msg: Option<CloseFrame>, code: u16, reason: &str) {
    let f = msg.unwrap_or_else(|| panic!("close frame without code; expected {code}"));
    assert_eq!((u16::from(f.code), f.reason.as_str()), (code, reason));
}

// ---------------------------------------------------------------------------------------------
// Idle timeout (N28, N30) and activity (N5)

#[tokio::test]
async fn idle_unauthenticated_socket_is_closed_4000_idle_timeout() {
    let server = idle_server().await;
    let start = Instant::now();
    let mut c = server.connect().await;
    assert_eq!(c.expect_close().await, (4000, "idle_timeout".to_owned()));
    assert!(
        start.elapsed() >= IDLE - Duration::from_millis(50),
        "closed after {:?}, before the timeout",
        start.elapsed()
    );
}

#[tokio::test]
async fn idle_authenticated_socket_is_closed_4000_idle_timeout() {
    let server = idle_server().await;
    let mut c = server.auth("dev-token-alice").await;
    c.subscribe(TOPIC).await;
    let last_frame = Instant::now();
    assert_eq!(c.expect_close().await, (4000, "idle_timeout".to_owned()));
    assert!(last_frame.elapsed() >= IDLE - Duration::from_millis(50), "closed after {:?}", last_frame.elapsed());
}

#[tokio::test]
async fn heartbeats_keep_the_socket_open_and_are_echoed_before_and_after_auth() {
    let server = idle_server().await;
    let mut c = server.connect().await;
    let start = Instant::now();
    let mut tick = tokio::time::interval(KEEP_ALIVE_EVERY);
    for i in 0..16 {
        tick.tick().await;
        if i == 8 {
            c.auth_ok("dev-token-alice", 2).await;
        }
        c.heartbeat().await;
        assert_eq!(c.next_event().await, Event::Heartbeat, "heartbeat {i} is echoed with an empty binary frame");
    }
    // 4.5 s of heartbeats, two idle timeouts, and the socket is still there.
    assert!(start.elapsed() >= IDLE * 2);
    let stopped = Instant::now();
    assert_eq!(c.expect_close().await, (4000, "idle_timeout".to_owned()));
    assert!(stopped.elapsed() >= IDLE - Duration::from_millis(50));
}

#[tokio::test]
async fn websocket_pings_are_answered_and_count_as_activity() {
    let server = idle_server().await;
    let (mut ws, _) = tokio_tungstenite::connect_async(server.url()).await.expect("connect");
    let start = Instant::now();
    let mut tick = tokio::time::interval(KEEP_ALIVE_EVERY);
    for i in 0u8..16 {
        tick.tick().await;
        if i == 8 {
            raw_auth(&mut ws, "dev-token-alice").await;
        }
        ws.send(Message::Ping(vec![i, 0xab].into())).await.expect("send ping");
        loop {
            match raw_next(&mut ws).await {
                Message::Pong(p) => {
                    assert_eq!(p.as_ref(), [i, 0xab], "pong echoes the ping's payload");
                    break;
                }
                Message::Close(f) => panic!("closed while pinging (ping {i}): {f:?}"),
                _ => {}
            }
        }
    }
    assert!(start.elapsed() >= IDLE * 2);
    loop {
        match raw_next(&mut ws).await {
            Message::Close(f) => return assert_close(f, 4000, "idle_timeout"),
            Message::Pong(_) | Message::Ping(_) => {}
            other => panic!("expected the idle close, got {other:?}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Slow consumers (N28)

#[tokio::test]
async fn slow_subscriber_is_closed_with_4008_and_the_others_get_every_message_in_order() {
    const MAX_MESSAGES: u64 = 600;
    let server = TestServer::builder()
        .settings(|s| {
            s.edge.rate_limit = Some(100_000);
            s.edge.outbound_queue_messages = Some(16);
        })
        .spawn()
        .await;
    // bob never reads after subscribing; a small receive buffer makes TCP fill up quickly.
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(8 * 1024).expect("SO_RCVBUF");
    let stream = socket.connect(server.addr).await.expect("connect");
    let (mut bob, _) = tokio_tungstenite::client_async(server.url(), stream).await.expect("handshake");
    raw_auth(&mut bob, "dev-token-bob").await;
    bob.send(binary(&frame! {"type" => "subscribe", "topic" => TOPIC})).await.expect("send");
    assert_eq!(raw_frame(&mut bob).await["type"].as_str(), Some("subscribed"));

    let mut carol = server.auth("dev-token-carol").await;
    carol.subscribe(TOPIC).await;
    let mut alice = server.auth("dev-token-alice").await;
    let closes = || server.state.metrics.slow_consumer_closes.load(Ordering::Relaxed);
    assert_eq!(closes(), 0);

    // Lock-step with carol, so only bob can fall behind: each message is read by carol
    // before the next is published.
    let pad = Value::Binary(vec![0x42; 64 * 1024]);
    let mut sent = 0;
    let mut after_close = None;
    while sent < MAX_MESSAGES && after_close.is_none_or(|n| n < 5) {
        alice
            .send(
                frame! {"type" => "publish", "topic" => TOPIC, "data" => frame! {"seq" => sent, "pad" => pad.clone()}},
            )
            .await;
        let m = carol.expect("message").await;
        assert_eq!(m.get("data")["seq"].as_u64(), Some(sent), "carol gets every message, in order");
        sent += 1;
        if closes() > 0 {
            after_close = Some(after_close.map_or(0, |n| n + 1));
        }
    }
    assert!(after_close.is_some(), "bob never overflowed his queue in {sent} messages of 64 KB");

    // Drain bob: what was written before the overflow, then the close frame.
    let mut got = Vec::new();
    let close = loop {
        match raw_next(&mut bob).await {
            Message::Binary(b) if !b.is_empty() => {
                let v = decode(&b);
                assert_eq!(v["type"].as_str(), Some("message"));
                got.push(v["data"]["seq"].as_u64().expect("seq"));
            }
            Message::Close(f) => break f,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_close(close, 4008, "slow_consumer");
    let expected: Vec<u64> = (0..u64::try_from(got.len()).expect("len")).collect();
    assert_eq!(got, expected, "bob got a gap-free prefix before the close");
    assert!(got.len() < usize::try_from(sent).expect("sent"), "bob cannot have had everything");
    assert_eq!(closes(), 1, "only bob was a slow consumer");
    // Issue 23, item 10: drops count messages (at least the full queue plus the one that did
    // not fit), disconnects count connections.
    let m = skua_testkit::http::Scrape::of(server.addr).await;
    assert_eq!(m.value("skua_slow_consumer_disconnects_total", &[]), 1.0);
    let drops = m.value("skua_drops_total", &[("reason", "slow_consumer")]);
    assert!((17.0..=sent as f64).contains(&drops), "dropped {drops} of {sent} messages, queue of 16");

    // carol and alice are unaffected
    alice.publish_acked(TOPIC, frame! {"seq" => sent}).await;
    assert_eq!(carol.expect("message").await.get("data")["seq"].as_u64(), Some(sent));
}

/// A subscriber of `topic` that never reads: a small receive buffer makes TCP fill up quickly,
/// and then its frames wait in the server's outbound queue.
async fn non_reading_subscriber(
    server: &TestServer,
    token: &str,
    topic: &str,
) -> tokio_tungstenite::WebSocketStream<tokio::net::TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(8 * 1024).expect("SO_RCVBUF");
    let stream = socket.connect(server.addr).await.expect("connect");
    let (mut ws, _) = tokio_tungstenite::client_async(server.url(), stream).await.expect("handshake");
    raw_auth(&mut ws, token).await;
    ws.send(binary(&frame! {"type" => "subscribe", "topic" => topic})).await.expect("send");
    assert_eq!(raw_frame(&mut ws).await["type"].as_str(), Some("subscribed"));
    ws
}

/// Reads a socket to its close frame: the number of `message` frames before it, and the close.
async fn read_to_close_frame<S>(ws: &mut WebSocketStream<S>) -> (usize, Option<CloseFrame>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut n = 0;
    loop {
        match raw_next(ws).await {
            Message::Binary(b) if !b.is_empty() => {
                assert_eq!(decode(&b)["type"].as_str(), Some("message"));
                n += 1;
            }
            Message::Close(f) => return (n, f),
            Message::Binary(_) | Message::Ping(_) | Message::Pong(_) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// Issue 32, item 3: the node-wide outbound budget. Each connection's own bound
/// (`outbound_queue_bytes`) is far above what is queued here; only the node's budget is
/// passed. Past it, the largest queue is closed 4008 `slow_consumer` first, then (once the
/// budget is passed again) the next largest; a smaller slow consumer below the budget and a
/// fast subscriber of every topic keep everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_consumers_past_the_node_outbound_budget_are_closed_4008_largest_first() {
    const BUDGET: f64 = 4.0 * 1024.0 * 1024.0;
    let server = TestServer::builder()
        .settings(|s| {
            s.edge.rate_limit = Some(100_000);
            s.edge.outbound_queue_messages = Some(100_000);
            s.edge.outbound_queue_bytes = Some(256 << 20);
            s.edge.outbound_budget_bytes = Some(4 << 20);
            // Scraped after every publish: on its own listener, which counts against no address.
            s.node.metrics_listen = Some("127.0.0.1:0".into());
        })
        .spawn()
        .await;
    let topics = ["demo/general/messages", "demo/general/status", "demo/general/events"];
    let mut big = non_reading_subscriber(&server, "dev-token-bob", topics[0]).await;
    let mut mid = non_reading_subscriber(&server, "dev-token-carol", topics[1]).await;
    let mut small = non_reading_subscriber(&server, "dev-token-agent", topics[2]).await;
    let mut fast = server.auth("dev-token-viewer").await;
    for t in topics {
        fast.subscribe(t).await;
    }
    let mut alice = server.auth("dev-token-alice").await;
    let pad = Value::Binary(vec![0x42; 64 * 1024]);
    let mut sent = [0_u64; 3];
    let metrics = server.metrics_addr.expect("metrics listener");

    // Publishes one 64 KiB message to topics[i], in lock-step with the fast subscriber (so only
    // the non-reading ones fall behind), and scrapes after it.
    macro_rules! publish {
        ($i:expr) => {{
            let i: usize = $i;
            let seq = sent[i];
            let data = frame! {"seq" => seq, "pad" => pad.clone()};
            alice.send(frame! {"type" => "publish", "topic" => topics[i], "data" => data}).await;
            let m = fast.expect("message").await;
            assert_eq!(m.get("data")["seq"].as_u64(), Some(seq), "the fast subscriber gets every message, in order");
            sent[i] += 1;
            Scrape::of(metrics).await
        }};
    }
    let queued = |m: &Scrape| m.value("skua_outbound_budget_queued_bytes", &[]);
    let closes = |m: &Scrape| m.value("skua_outbound_budget_closes_total", &[]);

    // 1. The first slow consumer's queue grows to well over half the budget, not past it.
    loop {
        let m = publish!(0);
        assert_eq!(closes(&m), 0.0, "closed below the budget: {}", m.text);
        if queued(&m) > 0.6 * BUDGET {
            break;
        }
        assert!(sent[0] < 200, "its queue never grew: {}", m.text);
    }
    // 2. The second one's queue grows until the node passes the budget: the first, the largest,
    //    is closed, and only it.
    loop {
        let m = publish!(1);
        if closes(&m) > 0.0 {
            assert_eq!(closes(&m), 1.0, "{}", m.text);
            break;
        }
        assert!(sent[1] < 200, "the budget was never enforced: {}", m.text);
    }
    let (got, close) = read_to_close_frame(&mut big).await;
    assert_close(close, 4008, "slow_consumer");
    assert!((got as u64) < sent[0], "the closed consumer cannot have had everything");
    // 3. The second's queue grows on past half the budget (the first's bytes no longer count),
    //    then the third's until the budget is passed again: the second, now the largest, goes.
    loop {
        let m = publish!(1);
        assert_eq!(closes(&m), 1.0, "{}", m.text);
        if queued(&m) > 0.6 * BUDGET {
            break;
        }
        assert!(sent[1] < 400, "{}", m.text);
    }
    let before_small = sent[2];
    loop {
        let m = publish!(2);
        if closes(&m) > 1.0 {
            assert_eq!(closes(&m), 2.0, "{}", m.text);
            break;
        }
        assert!(sent[2] < 200, "the budget was never enforced again: {}", m.text);
    }
    let (_, close) = read_to_close_frame(&mut mid).await;
    assert_close(close, 4008, "slow_consumer");
    let m = Scrape::of(metrics).await;
    assert_eq!(m.value("skua_slow_consumer_disconnects_total", &[]), 2.0, "{}", m.text);
    assert_eq!(m.value("skua_outbound_budget_bytes", &[]), BUDGET);
    assert!(sent[2] > before_small);

    // The smallest slow consumer was not closed: once it reads, it gets every message.
    for seq in 0..sent[2] {
        let v = raw_frame(&mut small).await;
        assert_eq!(v["data"]["seq"].as_u64(), Some(seq), "{v:?}");
    }
    // And the fast subscriber is untouched.
    alice.publish_acked(topics[2], frame! {"seq" => sent[2]}).await;
    assert_eq!(fast.expect("message").await.get("data")["seq"].as_u64(), Some(sent[2]));
}

// ---------------------------------------------------------------------------------------------
// Shutdown drain (N28)

/// Opens a connection and writes `request` (complete or not) on it.
async fn http_open(addr: SocketAddr, request: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(request.as_bytes()).await.expect("write request");
    s
}

/// Reads an HTTP response to the end and returns its status code and body.
async fn http_response(s: TcpStream) -> (u16, String) {
    skua_testkit::http::read_response(s).await
}

async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let s = http_open(addr, &format!("GET {path} HTTP/1.1\r\nHost: skua\r\nConnection: close\r\n\r\n")).await;
    http_response(s).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_every_socket_1012_fails_readiness_and_refuses_upgrades() {
    let server = TestServer::builder().settings(|s| s.edge.shutdown_grace = Some("5s".into())).spawn().await;
    let addr = server.addr;
    let url = server.url();
    assert_eq!(http_get(addr, "/healthz").await.0, 200);
    assert_eq!(http_get(addr, "/readyz").await.0, 200);

    let mut alice = server.auth("dev-token-alice").await;
    let mut bob = server.auth("dev-token-bob").await;
    let mut carol = server.auth("dev-token-carol").await;
    let mut stranger = server.connect().await;
    carol.subscribe(TOPIC).await;
    for c in [&mut alice, &mut bob] {
        c.send(frame! {"type" => "presence", "roomId" => "general", "data" => frame! {"s" => "on"}}).await;
        c.next_of("presence").await;
    }

    // Requests already accepted when the drain begins, held back by their last CRLF.
    let ready = http_open(addr, "GET /readyz HTTP/1.1\r\nHost: skua\r\nConnection: close\r\n").await;
    let upgrade = http_open(
        addr,
        "GET /ws HTTP/1.1\r\nHost: skua\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n",
    )
    .await;
    // A full request on a later connection: once it is answered, the two above were accepted.
    assert_eq!(http_get(addr, "/healthz").await.0, 200);

    let shutdown = tokio::spawn(server.shutdown());
    for (who, c) in [("alice", &mut alice), ("bob", &mut bob), ("carol", &mut carol), ("stranger", &mut stranger)] {
        assert_eq!(c.expect_close().await, (1012, "server_restart".to_owned()), "{who}");
    }

    // The drain has begun: readiness fails and upgrades are refused.
    let mut ready = ready;
    ready.write_all(b"\r\n").await.expect("finish request");
    let (status, body) = http_response(ready).await;
    assert_eq!(status, 503, "readyz while draining: {body:?}");
    let mut upgrade = upgrade;
    upgrade.write_all(b"\r\n").await.expect("finish request");
    assert_eq!(http_response(upgrade).await.0, 503, "no upgrade while draining");
    assert!(tokio_tungstenite::connect_async(url).await.is_err(), "a new WebSocket is refused while draining");

    assert!(shutdown.await.expect("shutdown task"), "every connection closed within the grace");
}

#[tokio::test]
async fn idle_timeout_is_per_connection() {
    let server = idle_server().await;
    let mut idle = server.auth("dev-token-bob").await;
    let mut active = server.auth("dev-token-alice").await;
    let mut tick = tokio::time::interval(KEEP_ALIVE_EVERY);
    for _ in 0..10 {
        tick.tick().await;
        active.heartbeat().await;
        assert_eq!(active.next_event().await, Event::Heartbeat);
    }
    assert_eq!(idle.expect_close().await, (4000, "idle_timeout".to_owned()));
    active.subscribe(TOPIC).await;
}

// ---------------------------------------------------------------------------------------------
// RFC 6455 violations (issue 12, item 10): hand-made frames written on the raw TCP stream after a
// normal handshake. Masked frames use the all-zero key, so their payload is written as is.

/// Writes `bytes` on a fresh connection's TCP stream and returns the server's close frame;
/// asserts the close was counted under `reason` in the closes metric.
async fn close_after_raw_frames(bytes: &[u8], reason: &'static str) -> Option<CloseFrame> {
    let server = TestServer::start().await;
    let stream = TcpStream::connect(server.addr).await.expect("connect");
    let (mut ws, _) = tokio_tungstenite::client_async(server.url(), stream).await.expect("handshake");
    ws.get_mut().write_all(bytes).await.expect("write raw frames");
    let close = loop {
        match raw_next(&mut ws).await {
            Message::Close(f) => break f,
            Message::Ping(_) | Message::Pong(_) => {}
            other => panic!("expected a close, got {other:?}"),
        }
    };
    // The writer counts the close before sending it.
    assert_eq!(server.state.metrics.closes.get(reason), 1, "closes counted under {reason}");
    close
}

/// A masked frame (zero key) with the given first header byte and a payload under 126 bytes.
fn masked(first: u8, payload: &[u8]) -> Vec<u8> {
    let len = u8::try_from(payload.len()).expect("short payload");
    assert!(len < 126);
    [&[first, 0x80 | len, 0, 0, 0, 0][..], payload].concat()
}

#[tokio::test]
async fn unmasked_client_frame_is_closed_1002_protocol_error() {
    // FIN + binary, mask bit clear.
    let close = close_after_raw_frames(&[0x82, 0x01, 0x00], "protocol_error").await;
    assert_close(close, 1002, "protocol_error");
}

#[tokio::test]
async fn reserved_bits_are_closed_1002_protocol_error() {
    for (first, what) in [(0xc2, "RSV1"), (0xa2, "RSV2"), (0x92, "RSV3")] {
        let close = close_after_raw_frames(&masked(first, &[0x80]), "protocol_error").await;
        let f = close.unwrap_or_else(|| panic!("{what}: close frame without code"));
        assert_eq!((u16::from(f.code), f.reason.as_str()), (1002, "protocol_error"), "{what}");
    }
}

#[tokio::test]
async fn reserved_opcodes_are_closed_1002_protocol_error() {
    for first in [0x83, 0x87, 0x8b, 0x8f] {
        let close = close_after_raw_frames(&masked(first, b""), "protocol_error").await;
        let f = close.unwrap_or_else(|| panic!("opcode {:#x}: close frame without code", first & 0x0f));
        assert_eq!((u16::from(f.code), f.reason.as_str()), (1002, "protocol_error"), "opcode {:#x}", first & 0x0f);
    }
}

#[tokio::test]
async fn fragmented_ping_is_closed_1002_protocol_error() {
    // Ping without FIN: control frames must not be fragmented.
    let close = close_after_raw_frames(&masked(0x09, b"hi"), "protocol_error").await;
    assert_close(close, 1002, "protocol_error");
}

#[tokio::test]
async fn continuation_with_nothing_to_continue_is_closed_1002_protocol_error() {
    let close = close_after_raw_frames(&masked(0x80, b"x"), "protocol_error").await;
    assert_close(close, 1002, "protocol_error");
}

#[tokio::test]
async fn text_frame_with_invalid_utf8_is_closed_1007_invalid_payload() {
    let close = close_after_raw_frames(&masked(0x81, &[b'o', b'k', 0xff, 0xfe]), "invalid_payload").await;
    assert_close(close, 1007, "invalid_payload");
}

#[tokio::test]
async fn fragmented_text_with_invalid_utf8_is_closed_1007_invalid_payload() {
    // A valid first fragment, then a continuation that breaks the UTF-8.
    let frames = [masked(0x01, b"fine "), masked(0x80, &[0xc3, 0x28])].concat();
    let close = close_after_raw_frames(&frames, "invalid_payload").await;
    assert_close(close, 1007, "invalid_payload");
}

#[tokio::test]
async fn close_reason_with_invalid_utf8_is_closed_1007_invalid_payload() {
    // Close 1000 with a reason that is not UTF-8.
    let close = close_after_raw_frames(&masked(0x88, &[0x03, 0xe8, 0xff, 0xfe]), "invalid_payload").await;
    assert_close(close, 1007, "invalid_payload");
}

/// The server's answer to a client close frame carrying `code` and the reason `bye`, written
/// raw on a fresh connection of `server` (the client library refuses to send a forbidden code).
async fn answer_to_close(server: &TestServer, code: u16) -> Option<CloseFrame> {
    let stream = TcpStream::connect(server.addr).await.expect("connect");
    let (mut ws, _) = tokio_tungstenite::client_async(server.url(), stream).await.expect("handshake");
    let payload = [&code.to_be_bytes()[..], b"bye"].concat();
    ws.get_mut().write_all(&masked(0x88, &payload)).await.expect("write the close frame");
    loop {
        match raw_next(&mut ws).await {
            Message::Close(f) => return f,
            Message::Ping(_) | Message::Pong(_) => {}
            other => panic!("close {code}: expected a close, got {other:?}"),
        }
    }
}

/// Issue 33, item 11: a close frame carrying a code an endpoint may not send (RFC 6455 7.4:
/// anything outside 1000-1003, 1007-1013 and 3000-4999) fails the connection like every other
/// framing violation: 1002 `protocol_error`, counted under `protocol_error`, not the WebSocket
/// library's own 1002 `Protocol violation`. Valid codes are echoed, reason included.
#[tokio::test]
async fn close_frames_with_forbidden_codes_are_answered_1002_protocol_error_and_valid_ones_echoed() {
    let server = TestServer::start().await;
    let bad = [0u16, 1, 999, 1004, 1005, 1006, 1014, 1015, 1016, 1100, 2000, 2999, 5000, 65535];
    for code in bad {
        let close = answer_to_close(&server, code).await;
        let f = close.unwrap_or_else(|| panic!("close {code}: answered without a code"));
        assert_eq!((u16::from(f.code), f.reason.as_str()), (1002, "protocol_error"), "close {code}");
    }
    assert_eq!(server.state.metrics.closes.get("protocol_error"), bad.len() as u64, "counted as violations");
    for code in [1000u16, 1001, 1003, 1007, 1011, 1012, 1013, 3000, 3999, 4000, 4999] {
        let close = answer_to_close(&server, code).await;
        let f = close.unwrap_or_else(|| panic!("close {code}: answered without a code"));
        assert_eq!((u16::from(f.code), f.reason.as_str()), (code, "bye"), "close {code} is echoed");
    }
    assert_eq!(server.state.metrics.closes.get("protocol_error"), bad.len() as u64, "valid closes are no violations");
}

/// Panics on the publisher's task when it sees a publish with the filter key `boom`: the only
/// way from outside the edge to make a connection task panic (a [`PublishObserver`] runs on
/// the publisher's task), standing in for a defect in frame handling.
///
/// [`PublishObserver`]: skua_edge::publish::PublishObserver
#[derive(Debug)]
struct PanicOnBoom;

impl skua_edge::publish::PublishObserver for PanicOnBoom {
    fn accepted(&self, e: &skua_edge::publish::PublishEvent<'_>) {
        if e.publication.filter.as_deref() == Some("boom") {
            panic!("the test's observer panics on purpose");
        }
    }
}

/// Issue 12, defect 1 (docs/operations.md, `skua_connection_panics_total`): a connection task
/// that panics closes its socket 1011 and releases what the session held: its connection
/// slot, its bus subscriptions and its presence (the room sees it leave).
#[tokio::test]
async fn a_connection_task_that_panics_closes_1011_and_releases_its_slot_subscriptions_and_presence() {
    use skua_testkit::control::Deadline;
    use skua_testkit::http::Scrape;
    let server = TestServer::builder().publish_observer(std::sync::Arc::new(PanicOnBoom)).spawn().await;
    let mut bob = server.auth("dev-token-bob").await;
    bob.send(frame! {"type" => "presence", "roomId" => "general", "data" => frame! {"s" => 1}}).await;
    bob.expect("presence").await;
    let bobs = server.state.hub.bus_subscriptions().await.len();
    let mut alice = server.auth("dev-token-alice").await;
    alice.subscribe(TOPIC).await;
    alice.send(frame! {"type" => "presence", "roomId" => "general", "data" => frame! {"s" => 1}}).await;
    alice.expect("presence").await;
    assert_eq!(bob.next_of("presence").await.str("event"), "join");
    assert!(server.state.hub.bus_subscriptions().await.len() > bobs, "alice's subscription holds one");
    let before = Scrape::of(server.addr).await;
    // Bob, alice and the scrape's own request.
    let slots = before.value("skua_connection_slots_used", &[]);
    assert_eq!(slots, 3.0);
    assert_eq!(before.value("skua_connection_panics_total", &[]), 0.0);

    alice.send(frame! {"type" => "publish", "topic" => TOPIC, "data" => 1, "filter" => "boom"}).await;
    assert_eq!(alice.expect_close().await.0, 1011, "a panicking connection task closes internal_error");

    // Presence: the room sees alice leave.
    let leave = bob.next_of("presence").await;
    assert_eq!(leave.str("event"), "leave", "{leave:?}");
    assert_eq!(leave.get("data")["actor_token_id"].as_str(), Some("alice"));
    // Subscriptions and the slot: released once the cleanup ran (asynchronously).
    let d = Deadline::new("alice's subscription and slot released after the panic", Duration::from_secs(5));
    loop {
        let m = Scrape::of(server.addr).await;
        let subs = server.state.hub.bus_subscriptions().await.len();
        let used = m.value("skua_connection_slots_used", &[]);
        let authed = m.value("skua_connections", &[("project", "demo-project")]);
        if subs == bobs && used == slots - 1.0 && authed == 1.0 {
            assert_eq!(m.value("skua_connection_panics_total", &[]), 1.0);
            break;
        }
        d.tick().await;
    }
    let local = server.state.hub.local_presence();
    assert_eq!(local.len(), 1, "only bob's presence is left on the node: {local:?}");
    bob.send(frame! {"type" => "getPresence", "roomId" => "general"}).await;
    let list = bob.expect("presenceList").await;
    assert!(format!("{list:?}").find("alice").is_none(), "alice is not listed: {list:?}");
}
