//! The MQTT device door (issue 37) in process: a device on raw TCP and a WebSocket client in
//! the same room. The full matrix (paho-mqtt, both levels, QoS, wills...) is interop/test_mqtt.py.

use std::time::Duration;

use rmpv::Value;
use skua_testkit::{TestServer, frame};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const TOPIC: &str = "demo/general/messages";

fn string(s: &[u8]) -> Vec<u8> {
    let mut out = u16::try_from(s.len()).unwrap().to_be_bytes().to_vec();
    out.extend_from_slice(s);
    out
}

fn packet(first: u8, body: &[u8]) -> Vec<u8> {
    assert!(body.len() < 128);
    let mut out = vec![first, u8::try_from(body.len()).unwrap()];
    out.extend_from_slice(body);
    out
}

fn connect(level: u8, token: &str) -> Vec<u8> {
    let mut body = string(b"MQTT");
    body.extend_from_slice(&[level, 0xC2, 0, 30]);
    if level == 5 {
        body.push(0);
    }
    body.extend(string(b"dev-1"));
    body.extend(string(b"device"));
    body.extend(string(token.as_bytes()));
    packet(0x10, &body)
}

/// Reads one packet (remaining length below 128, enough here).
async fn read_packet(s: &mut TcpStream) -> Vec<u8> {
    let mut head = [0u8; 2];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut head))
        .await
        .expect("a packet in time")
        .expect("read");
    assert!(head[1] < 128, "a short packet");
    let mut body = vec![0; usize::from(head[1])];
    s.read_exact(&mut body).await.expect("read");
    [head.to_vec(), body].concat()
}

async fn device(server: &TestServer, level: u8, token: &str) -> TcpStream {
    let mut s = TcpStream::connect(server.mqtt_addr.expect("mqtt listener")).await.expect("connect");
    s.write_all(&connect(level, token)).await.expect("write");
    let ack = read_packet(&mut s).await;
    assert_eq!((ack[0], ack[3]), (0x20, 0), "CONNACK accepted: {ack:x?}");
    s
}

async fn server() -> TestServer {
    TestServer::builder().settings(|s| s.node.mqtt_listen = Some("127.0.0.1:0".into())).spawn().await
}

/// Reads packets until the 5.0 `DISCONNECT`, then asserts the socket closes after it.
async fn disconnected(s: &mut TcpStream) -> Vec<u8> {
    loop {
        let p = read_packet(s).await;
        if p[0] == 0xE0 {
            let mut rest = Vec::new();
            let n = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut rest))
                .await
                .expect("closed")
                .unwrap_or(0);
            assert_eq!(n, 0, "nothing after the DISCONNECT");
            return p;
        }
    }
}

#[tokio::test]
async fn a_device_and_a_websocket_client_exchange_messages() {
    let server = server().await;
    let mut alice = server.auth("dev-token-alice").await;
    alice.subscribe(TOPIC).await;
    let mut carol = device(&server, 4, "dev-token-carol").await;
    let mut sub = vec![0, 1];
    sub.extend(string(TOPIC.as_bytes()));
    sub.push(1);
    carol.write_all(&packet(0x82, &sub)).await.unwrap();
    assert_eq!(read_packet(&mut carol).await, [0x90, 3, 0, 1, 1], "SUBACK granted QoS 1");

    // Device → WebSocket: one MessagePack value arrives as that value, QoS 1 acked.
    let mut publish = string(TOPIC.as_bytes());
    publish.extend_from_slice(&[0, 9, 0x81, 0xa1, b'n', 0x05]);
    carol.write_all(&packet(0x32, &publish)).await.unwrap();
    assert_eq!(read_packet(&mut carol).await, [0x40, 2, 0, 9], "PUBACK");
    let m = alice.expect("message").await;
    assert_eq!((m.str("from"), m.get("data")["n"].as_i64()), ("carol", Some(5)));

    // WebSocket → device: `data` packed, at the granted QoS 1.
    alice.send(frame! {"type" => "publish", "topic" => TOPIC, "data" => Value::from("hi")}).await;
    let p = read_packet(&mut carol).await;
    assert_eq!(p[0], 0x32, "PUBLISH QoS 1: {p:x?}");
    assert!(p.ends_with(&[0xa2, b'h', b'i']), "the packed string: {p:x?}");
}

#[tokio::test]
async fn a_malformed_packet_closes_with_its_reason() {
    let server = server().await;
    let mut carol = device(&server, 5, "dev-token-carol").await;
    // SUBSCRIBE with flags 0 instead of 0b0010: malformed (MQTT-3.8.1-1).
    carol.write_all(&[0x80, 6, 0, 1, 0, 0, 1, b'a']).await.unwrap();
    assert_eq!(read_packet(&mut carol).await, [0xE0, 1, 0x81], "DISCONNECT malformed packet");
    let mut rest = Vec::new();
    let n =
        tokio::time::timeout(Duration::from_secs(5), carol.read_to_end(&mut rest)).await.expect("closed").unwrap_or(0);
    assert_eq!(n, 0, "nothing after the DISCONNECT");
}

/// `mqtt_max_topic_bytes` lowered to 16: a 21-byte topic, fine by default, closes the
/// connection as malformed, as a topic over the default 1024 bytes does.
#[tokio::test]
async fn a_lowered_topic_limit_is_enforced() {
    let server = TestServer::builder()
        .settings(|s| {
            s.node.mqtt_listen = Some("127.0.0.1:0".into());
            s.mqtt.mqtt_max_topic_bytes = Some(16);
        })
        .spawn()
        .await;
    assert!(TOPIC.len() > 16);
    let mut carol = device(&server, 5, "dev-token-carol").await;
    let mut publish = string(TOPIC.as_bytes());
    publish.extend_from_slice(&[0, 0x81, 0xa1, b'n', 0x05]);
    carol.write_all(&packet(0x30, &publish)).await.unwrap();
    assert_eq!(disconnected(&mut carol).await, [0xE0, 1, 0x81], "DISCONNECT malformed packet");
}

/// `mqtt_receive_maximum` lowered to 1: told in the 5.0 `CONNACK`, and a second QoS 2
/// publish awaiting its `PUBREL` closes the connection (0x82).
#[tokio::test]
async fn a_lowered_receive_maximum_is_told_and_enforced() {
    let server = TestServer::builder()
        .settings(|s| {
            s.node.mqtt_listen = Some("127.0.0.1:0".into());
            s.mqtt.mqtt_receive_maximum = Some(1);
        })
        .spawn()
        .await;
    let mut carol = TcpStream::connect(server.mqtt_addr.expect("mqtt listener")).await.expect("connect");
    carol.write_all(&connect(5, "dev-token-carol")).await.unwrap();
    let ack = read_packet(&mut carol).await;
    assert_eq!((ack[0], ack[3]), (0x20, 0), "CONNACK accepted: {ack:x?}");
    // Properties: maximum packet size (0x27, 4 bytes), then receive maximum (0x21, 2 bytes).
    assert_eq!((ack[5], ack[10], &ack[11..13]), (0x27, 0x21, &[0, 1][..]), "receive maximum 1: {ack:x?}");
    for pkid in [1u8, 2] {
        let mut publish = string(TOPIC.as_bytes());
        publish.extend_from_slice(&[0, pkid, 0, 0x81, 0xa1, b'n', 0x05]);
        carol.write_all(&packet(0x34, &publish)).await.unwrap();
    }
    assert_eq!(disconnected(&mut carol).await, [0xE0, 1, 0x82], "DISCONNECT protocol error");
}
