//! The MQTT device door (issue 37) in process: a device on raw TCP, over TLS and over
//! WebSocket, and a WebSocket client in the same room. The full matrix (paho-mqtt, both levels,
//! QoS, wills...) is interop/test_mqtt.py.

use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use rmpv::Value;
use skua_testkit::{TestServer, frame};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

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
    connect_as(level, token, "dev-1")
}

fn connect_as(level: u8, token: &str, client_id: &str) -> Vec<u8> {
    let mut body = string(b"MQTT");
    body.extend_from_slice(&[level, 0xC2, 0, 30]);
    if level == 5 {
        body.push(0);
    }
    body.extend(string(client_id.as_bytes()));
    body.extend(string(b"device"));
    body.extend(string(token.as_bytes()));
    packet(0x10, &body)
}

/// Reads one packet (remaining length below 128, enough here).
async fn read_packet<S: AsyncRead + Unpin>(s: &mut S) -> Vec<u8> {
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

fn subscribe_packet(pkid: u8, topic: &str) -> Vec<u8> {
    let mut sub = vec![0, pkid];
    sub.extend(string(topic.as_bytes()));
    sub.push(1);
    packet(0x82, &sub)
}

/// A QoS 0 publish of `payload` (3.1.1 layout: no properties).
fn publish_packet(topic: &str, payload: &[u8]) -> Vec<u8> {
    let mut body = string(topic.as_bytes());
    body.extend_from_slice(payload);
    packet(0x30, &body)
}

/// A node with the MQTT listener and the MQTT-over-TLS one, with a fresh self-signed
/// certificate (for `localhost`); the certificate file is returned for clients to trust.
async fn tls_server() -> (TestServer, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("skua-it-mqtts-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let (files, _) = skua_server::tls::self_signed(&dir).unwrap();
    let server = TestServer::builder()
        .settings(|s| {
            s.node.mqtt_listen = Some("127.0.0.1:0".into());
            s.mqtt.mqtt_tls_listen = Some("127.0.0.1:0".into());
            s.node.tls_cert = Some(files.cert.display().to_string());
            s.node.tls_key = Some(files.key.display().to_string());
        })
        .spawn()
        .await;
    (server, files.cert)
}

/// A device over TLS (mqtts) trusting `ca`, its `CONNECT` accepted.
async fn tls_device(
    server: &TestServer,
    ca: &std::path::Path,
    token: &str,
) -> tokio_rustls::client::TlsStream<TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    for c in skua_server::tls::read_certs(ca).unwrap() {
        roots.add(c).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = TcpStream::connect(server.mqtt_tls_addr.expect("mqtts listener")).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut s = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await.expect("TLS handshake");
    s.write_all(&connect_as(4, token, "secure-1")).await.unwrap();
    let ack = read_packet(&mut s).await;
    assert_eq!((ack[0], ack[3]), (0x20, 0), "CONNACK accepted over TLS: {ack:x?}");
    s
}

/// mqtts: a device over TLS and one on the plain listener exchange messages (one door, two
/// transports); a plaintext CONNECT on the TLS port gets nothing back.
#[tokio::test]
async fn a_device_over_tls_and_a_plain_device_exchange_messages() {
    let (server, ca) = tls_server().await;
    let mut secure = tls_device(&server, &ca, "dev-token-carol").await;
    secure.write_all(&subscribe_packet(1, TOPIC)).await.unwrap();
    assert_eq!(read_packet(&mut secure).await, [0x90, 3, 0, 1, 1], "SUBACK over TLS");
    let mut plain = device(&server, 4, "dev-token-alice").await;
    plain.write_all(&publish_packet(TOPIC, b"over tls")).await.unwrap();
    let p = read_packet(&mut secure).await;
    assert_eq!(p[0] & 0xF0, 0x30, "a PUBLISH over TLS: {p:x?}");
    assert!(p.ends_with(b"over tls"), "{p:x?}");

    let mut raw = TcpStream::connect(server.mqtt_tls_addr.unwrap()).await.unwrap();
    raw.write_all(&connect(4, "dev-token-carol")).await.unwrap();
    let mut rest = Vec::new();
    let n = tokio::time::timeout(Duration::from_secs(5), raw.read_to_end(&mut rest)).await.expect("closed");
    assert!(n.is_err() || rest.first() != Some(&0x20), "no CONNACK in plaintext: {rest:x?}");
}

/// `mqtt_tls_listen` without the client listener's certificate does not start.
#[tokio::test]
async fn mqtts_without_a_certificate_does_not_start() {
    let mut settings = skua_server::Settings::default();
    settings.node.listen = Some("127.0.0.1:0".into());
    settings.node.store = Some("memory".into());
    settings.mqtt.mqtt_tls_listen = Some("127.0.0.1:0".into());
    let config = skua_server::ServerConfig::from_layers(&[&settings]).unwrap();
    let embedded = skua_server::node::Embedded::default();
    let listener = tokio::net::TcpListener::bind(config.listen).await.unwrap();
    let backends = skua_server::node::backends(&config, &embedded).await.unwrap();
    let registry = skua_server::node::registry_store(&config, &embedded).await.unwrap();
    let e =
        skua_server::RunningNode::launch(&config, backends, registry, None, listener, None).await.expect_err("refused");
    assert!(format!("{e:#}").contains("mqtt_tls_listen"), "{e:#}");
}

type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<TcpStream>>;

/// A device speaking MQTT over WebSocket at `/mqtt` (browser clients: mqtt.js, paho's
/// websockets transport), reading packets across binary messages.
struct WsDevice {
    ws: Ws,
    buf: Vec<u8>,
}

impl WsDevice {
    async fn open(server: &TestServer, protocol: Option<&str>) -> Result<Self, tokio_tungstenite::tungstenite::Error> {
        let mut req = format!("ws://{}/mqtt", server.addr).into_client_request().unwrap();
        if let Some(p) = protocol {
            req.headers_mut().insert("sec-websocket-protocol", p.parse().unwrap());
        }
        let (ws, resp) = tokio_tungstenite::connect_async(req).await?;
        if protocol.is_some() {
            assert_eq!(resp.headers()["sec-websocket-protocol"], "mqtt", "the 101 names the subprotocol");
        }
        Ok(Self { ws, buf: Vec::new() })
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.ws.send(Message::Binary(bytes.to_vec().into())).await.unwrap();
    }

    async fn read_packet(&mut self) -> Vec<u8> {
        loop {
            if self.buf.len() >= 2 && self.buf.len() >= 2 + usize::from(self.buf[1]) {
                assert!(self.buf[1] < 128, "a short packet");
                let n = 2 + usize::from(self.buf[1]);
                return self.buf.drain(..n).collect();
            }
            let m = tokio::time::timeout(Duration::from_secs(5), self.ws.next())
                .await
                .expect("a message in time")
                .expect("open")
                .expect("read");
            match m {
                Message::Binary(b) => self.buf.extend_from_slice(&b),
                Message::Ping(_) | Message::Pong(_) => {}
                other => panic!("binary messages only: {other:?}"),
            }
        }
    }
}

async fn mqtt_ws_server() -> TestServer {
    TestServer::builder().settings(|s| s.node.mqtt_listen = Some("127.0.0.1:0".into())).spawn().await
}

/// MQTT over WebSocket: packets split across binary messages and several in one, both
/// directions with a NoLag client; the connection lists (the node's table, gRPC
/// `ListConnections`) say how each connection came: `ws`, `mqtt`, `mqtt-ws`.
#[tokio::test]
async fn a_device_over_websocket_exchanges_messages_with_a_nolag_client() {
    let server =
        TestServer::builder().grpc().settings(|s| s.node.mqtt_listen = Some("127.0.0.1:0".into())).spawn().await;
    let mut alice = server.auth("dev-token-alice").await;
    alice.subscribe(TOPIC).await;
    let mut carol = WsDevice::open(&server, Some("mqtt")).await.expect("upgrade");
    // CONNECT in two messages, then SUBSCRIBE and a PUBLISH in one: no alignment (MQTT §6).
    let connect = connect(4, "dev-token-carol");
    carol.send(&connect[..5]).await;
    carol.send(&connect[5..]).await;
    let ack = carol.read_packet().await;
    assert_eq!((ack[0], ack[3]), (0x20, 0), "CONNACK accepted: {ack:x?}");
    let mut two = subscribe_packet(1, TOPIC);
    two.extend(publish_packet(TOPIC, &[0x81, 0xa1, b'n', 0x07]));
    carol.send(&two).await;
    assert_eq!(carol.read_packet().await, [0x90, 3, 0, 1, 1], "SUBACK");
    let m = alice.expect("message").await;
    assert_eq!((m.str("from"), m.get("data")["n"].as_i64()), ("carol", Some(7)));

    alice.send(frame! {"type" => "publish", "topic" => TOPIC, "data" => Value::from("hi")}).await;
    let p = carol.read_packet().await;
    assert_eq!(p[0], 0x32, "PUBLISH QoS 1: {p:x?}");
    assert!(p.ends_with(&[0xa2, b'h', b'i']), "the packed string: {p:x?}");

    let mut tcp = TcpStream::connect(server.mqtt_addr.unwrap()).await.unwrap();
    tcp.write_all(&connect_as(4, "dev-token-bob", "tcp-1")).await.unwrap();
    assert_eq!(read_packet(&mut tcp).await[..4], [0x20, 2, 0, 0], "CONNACK");
    let mut protocols: Vec<&str> = server.state.connections.all().iter().map(|(_, e)| e.protocol.as_str()).collect();
    protocols.sort_unstable();
    assert_eq!(protocols, ["mqtt", "mqtt-ws", "ws"], "the node's table says how each came");
    let mut control = server.control().await;
    let listed = control
        .list_connections(skua_control::pb::ListConnectionsRequest::default())
        .await
        .expect("ListConnections")
        .into_inner()
        .connections;
    let mut by_actor: Vec<(String, String)> = listed.into_iter().map(|c| (c.actor_id, c.protocol)).collect();
    by_actor.sort();
    let expected = [("alice", "ws"), ("bob", "mqtt"), ("carol", "mqtt-ws")].map(|(a, p)| (a.to_owned(), p.to_owned()));
    assert_eq!(by_actor, expected, "ListConnections says how each came");

    // PINGREQ → PINGRESP, then DISCONNECT: the WebSocket closes.
    carol.send(&[0xC0, 0]).await;
    assert_eq!(carol.read_packet().await, [0xD0, 0]);
    carol.send(&[0xE0, 0]).await;
    let end = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match carol.ws.next().await {
                None | Some(Err(_) | Ok(Message::Close(_))) => return,
                Some(Ok(_)) => {}
            }
        }
    })
    .await;
    assert!(end.is_ok(), "closed after DISCONNECT");
}

/// `/mqtt` needs the `mqtt` subprotocol (MQTT-6.0.0-3), and exists only with the MQTT door.
#[tokio::test]
async fn the_mqtt_websocket_route_needs_the_subprotocol_and_the_door() {
    let server = mqtt_ws_server().await;
    let status = |e: tokio_tungstenite::tungstenite::Error| match e {
        tokio_tungstenite::tungstenite::Error::Http(r) => r.status().as_u16(),
        other => panic!("an HTTP refusal: {other:?}"),
    };
    let refused = WsDevice::open(&server, None).await.err().expect("refused without the subprotocol");
    assert_eq!(status(refused), 400);
    let refused = WsDevice::open(&server, Some("mqttv3.1")).await.err().expect("refused: MQTT 3.1");
    assert_eq!(status(refused), 400);
    let without = TestServer::builder().spawn().await;
    let refused = WsDevice::open(&without, Some("mqtt")).await.err().expect("no door, no route");
    assert_eq!(status(refused), 404);
}

/// A text message is not MQTT (MQTT-6.0.0-1): the connection closes.
#[tokio::test]
async fn a_text_message_closes_an_mqtt_websocket() {
    let server = mqtt_ws_server().await;
    let mut carol = WsDevice::open(&server, Some("mqtt")).await.expect("upgrade");
    carol.send(&connect(4, "dev-token-carol")).await;
    assert_eq!(carol.read_packet().await[0], 0x20);
    carol.ws.send(Message::Text("hello".into())).await.unwrap();
    let end = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match carol.ws.next().await {
                None | Some(Err(_) | Ok(Message::Close(_))) => return,
                Some(Ok(_)) => {}
            }
        }
    })
    .await;
    assert!(end.is_ok(), "closed after a text message");
}

/// `max_connections_per_ip` counts every door together: with 2, a WebSocket and one device
/// leave no room for a second device (closed at accept) nor a second WebSocket (429).
#[tokio::test]
async fn per_address_limits_are_shared_by_websockets_and_devices() {
    let server = TestServer::builder()
        .settings(|s| {
            s.node.mqtt_listen = Some("127.0.0.1:0".into());
            s.edge.max_connections_per_ip = Some(2);
        })
        .spawn()
        .await;
    let _alice = server.auth("dev-token-alice").await;
    let _carol = device(&server, 4, "dev-token-carol").await;
    let mut third = TcpStream::connect(server.mqtt_addr.unwrap()).await.unwrap();
    let _ = third.write_all(&connect(4, "dev-token-bob")).await;
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), third.read_to_end(&mut rest)).await.expect("closed");
    assert!(read.is_err() || rest.is_empty(), "closed at accept, no CONNACK: {rest:x?}");
    let ws = tokio_tungstenite::connect_async(format!("ws://{}/ws", server.addr)).await;
    match ws {
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => assert_eq!(r.status().as_u16(), 429),
        other => panic!("a 429: {:?}", other.map(|_| ())),
    }
}

/// A 5.0 `CONNECT` of `token` with `properties` as user properties.
fn connect_with_properties(token: &str, properties: &[(&str, &str)]) -> Vec<u8> {
    let mut props = Vec::new();
    for (k, v) in properties {
        props.push(0x26);
        props.extend(string(k.as_bytes()));
        props.extend(string(v.as_bytes()));
    }
    let mut body = string(b"MQTT");
    body.extend_from_slice(&[5, 0xC2, 0, 30]);
    body.push(u8::try_from(props.len()).unwrap());
    body.extend(props);
    body.extend(string(b"sensor-1"));
    body.extend(string(b"device"));
    body.extend(string(token.as_bytes()));
    packet(0x10, &body)
}

/// Presence (docs/mqtt.md): a `presence` user property in a 5.0 `CONNECT` announces the device
/// in that room, its other user properties as the presence data (it leaves with its connection,
/// in the session's cleanup, as a WebSocket does).
#[tokio::test]
async fn a_connect_user_property_announces_room_presence() {
    let server = server().await;
    let mut alice = server.auth("dev-token-alice").await;
    let mut carol = TcpStream::connect(server.mqtt_addr.unwrap()).await.unwrap();
    carol
        .write_all(&connect_with_properties("dev-token-carol", &[("presence", "general"), ("model", "x1")]))
        .await
        .unwrap();
    let ack = read_packet(&mut carol).await;
    assert_eq!((ack[0], ack[3]), (0x20, 0), "CONNACK accepted: {ack:x?}");
    // PINGRESP: the CONNECT, presence included, has been handled.
    carol.write_all(&[0xC0, 0]).await.unwrap();
    assert_eq!(read_packet(&mut carol).await, [0xD0, 0]);
    alice.send(frame! {"type" => "getPresence", "roomId" => "general"}).await;
    let list = alice.expect("presenceList").await;
    let entries = list.get("data").as_array().unwrap().clone();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0]["actorTokenId"].as_str(), Some("carol"));
    assert_eq!(entries[0]["presence"]["model"].as_str(), Some("x1"));
}

// Sessions and QoS of deliveries (docs/protocol.md N52, N54).

const TASKS: &str = "demo/general/tasks";

/// A `CONNECT` with client id `client_id`: `clean` session (3.1.1) or clean start (5.0), and
/// for 5.0 a session expiry interval when `expiry` > 0.
fn connect_session(level: u8, token: &str, client_id: &str, clean: bool, expiry: u32) -> Vec<u8> {
    let mut body = string(b"MQTT");
    body.extend_from_slice(&[level, 0xC0 | if clean { 0x02 } else { 0 }, 0, 30]);
    if level == 5 {
        if expiry > 0 {
            body.extend_from_slice(&[5, 0x11]);
            body.extend_from_slice(&expiry.to_be_bytes());
        } else {
            body.push(0);
        }
    }
    body.extend(string(client_id.as_bytes()));
    body.extend(string(b"device"));
    body.extend(string(token.as_bytes()));
    packet(0x10, &body)
}

/// Connects carol's device with a session; its socket and `CONNACK`'s session present flag.
async fn session(node: &TestServer, level: u8, client_id: &str, clean: bool, expiry: u32) -> (TcpStream, bool) {
    let mut s = TcpStream::connect(node.mqtt_addr.expect("mqtt listener")).await.expect("connect");
    s.write_all(&connect_session(level, "dev-token-carol", client_id, clean, expiry)).await.expect("write");
    let ack = read_packet(&mut s).await;
    assert_eq!((ack[0], ack[3]), (0x20, 0), "CONNACK accepted: {ack:x?}");
    (s, ack[2] & 1 == 1)
}

fn subscribe(pkid: u8, filter: &str, qos: u8) -> Vec<u8> {
    let mut body = vec![0, pkid];
    body.extend(string(filter.as_bytes()));
    body.push(qos);
    packet(0x82, &body)
}

/// A 3.1.1 `PUBLISH` read apart: (first byte, topic, packet id, payload).
fn delivery(p: &[u8]) -> (u8, String, u16, Vec<u8>) {
    assert_eq!(p[0] & 0xF0, 0x30, "a PUBLISH: {p:x?}");
    let qos = (p[0] >> 1) & 3;
    let len = usize::from(u16::from_be_bytes([p[2], p[3]]));
    let topic = String::from_utf8(p[4..4 + len].to_vec()).expect("utf-8 topic");
    let mut at = 4 + len;
    let pkid = if qos > 0 {
        at += 2;
        u16::from_be_bytes([p[at - 2], p[at - 1]])
    } else {
        0
    };
    (p[0], topic, pkid, p[at..].to_vec())
}

fn ack(first: u8, pkid: u16) -> Vec<u8> {
    let [hi, lo] = pkid.to_be_bytes();
    vec![first, 2, hi, lo]
}

/// Closes `d` (dropped: an abnormal close) and waits until the node finished the connection's
/// cleanup, so that a reconnect of the same session finds what it released (as WebSocket tests
/// do with `close_settled`).
async fn drop_settled(server: &TestServer, d: TcpStream) {
    let closed = server.state.metrics.connections_closed.load(std::sync::atomic::Ordering::Acquire);
    drop(d);
    settled(server, closed).await;
}

/// Waits until more than `closed` connections of the node finished their cleanup.
async fn settled(server: &TestServer, closed: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    // The counter is bumped after the connection's cleanup; nothing else signals it.
    while server.state.metrics.connections_closed.load(std::sync::atomic::Ordering::Acquire) <= closed {
        assert!(tokio::time::Instant::now() < deadline, "the node did not finish closing the connection");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The whole N54 life of a persistent session on a store: a QoS 1 subscription to a logged
/// topic keeps collecting while the device is away; what it had not acked comes again with DUP;
/// `PUBACK` acks the stored message; a clean session discards it all.
async fn a_persistent_session_keeps_what_was_published_while_away(server: &TestServer) {
    let mut alice = server.auth("dev-token-alice").await;
    let (mut d, present) = session(server, 4, "sensor-1", false, 0).await;
    assert!(!present, "no session stored yet");
    d.write_all(&subscribe(1, TASKS, 1)).await.unwrap();
    assert_eq!(read_packet(&mut d).await, [0x90, 3, 0, 1, 1], "SUBACK granted QoS 1");
    alice.publish_acked(TASKS, Value::from(1)).await;
    let (first, topic, _, payload) = delivery(&read_packet(&mut d).await);
    assert_eq!((first, topic.as_str(), &payload[..]), (0x32, TASKS, &[1u8][..]), "QoS 1, not acked");
    drop_settled(server, d).await;

    // Away: stored for the session.
    alice.publish_acked(TASKS, Value::from(2)).await;
    let (mut d, present) = session(server, 4, "sensor-1", false, 0).await;
    assert!(present, "the session was resumed");
    let (first, _, p1, payload) = delivery(&read_packet(&mut d).await);
    assert_eq!((first, &payload[..]), (0x3A, &[1u8][..]), "the unacked one again, with DUP");
    let (first, _, p2, payload) = delivery(&read_packet(&mut d).await);
    assert_eq!((first & 0xF6, &payload[..]), (0x32, &[2u8][..]), "the one published while away");
    d.write_all(&ack(0x40, p1)).await.unwrap();
    d.write_all(&ack(0x40, p2)).await.unwrap();
    let closed = server.state.metrics.connections_closed.load(std::sync::atomic::Ordering::Acquire);
    d.write_all(&[0xE0, 0]).await.unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), d.read_to_end(&mut rest)).await.expect("closed").unwrap();
    settled(server, closed).await;

    // Acked: nothing comes again; the subscription is still the session's.
    let (mut d, present) = session(server, 4, "sensor-1", false, 0).await;
    assert!(present);
    alice.publish_acked(TASKS, Value::from(3)).await;
    let (first, _, p3, payload) = delivery(&read_packet(&mut d).await);
    assert_eq!((first, &payload[..]), (0x32, &[3u8][..]), "acked ones are not redelivered");
    d.write_all(&ack(0x40, p3)).await.unwrap();
    drop_settled(server, d).await;

    // A clean session drops what was kept (message 4) and the subscription.
    alice.publish_acked(TASKS, Value::from(4)).await;
    let (mut d, present) = session(server, 4, "sensor-1", true, 0).await;
    assert!(!present, "a clean session starts empty");
    d.write_all(&subscribe(2, TOPIC, 0)).await.unwrap();
    assert_eq!(read_packet(&mut d).await, [0x90, 3, 0, 2, 0]);
    alice.publish_acked(TASKS, Value::from(5)).await;
    alice.publish_acked(TOPIC, Value::from(6)).await;
    let (_, topic, _, payload) = delivery(&read_packet(&mut d).await);
    assert_eq!((topic.as_str(), &payload[..]), (TOPIC, &[6u8][..]), "nothing of the discarded session");
    let closed = server.state.metrics.connections_closed.load(std::sync::atomic::Ordering::Acquire);
    d.write_all(&[0xE0, 0]).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), d.read_to_end(&mut rest)).await.expect("closed").unwrap();
    settled(server, closed).await;
    let (_, present) = session(server, 4, "sensor-1", false, 0).await;
    assert!(!present, "the clean session kept nothing");
}

async fn mqtt_on_store(store: &str) -> TestServer {
    let store = store.to_owned();
    TestServer::builder()
        .settings(move |s| {
            s.node.mqtt_listen = Some("127.0.0.1:0".into());
            s.node.store = Some(store.clone());
        })
        .spawn()
        .await
}

#[tokio::test]
async fn sqlite_keeps_a_persistent_device_session() {
    let path = std::env::temp_dir().join(format!("skua-mqtt-session-{}.db", uuid::Uuid::new_v4().simple()));
    let server = mqtt_on_store(&format!("sqlite://{}", path.display())).await;
    a_persistent_session_keeps_what_was_published_while_away(&server).await;
    drop(server);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}

#[tokio::test]
async fn postgres_keeps_a_persistent_device_session() {
    let Some(db) = skua_testkit::postgres::TestDatabase::migrated().await else { return };
    let server = mqtt_on_store(&db.url).await;
    a_persistent_session_keeps_what_was_published_while_away(&server).await;
}

/// A 5.0 session expiry makes the session persistent; `CONNACK` says how long it is kept when
/// that is shorter than asked (`restore_ttl`).
#[tokio::test]
async fn a_five_session_expiry_is_a_persistent_session() {
    let server = server().await;
    let mut alice = server.auth("dev-token-alice").await;
    let mut s = TcpStream::connect(server.mqtt_addr.expect("mqtt listener")).await.expect("connect");
    s.write_all(&connect_session(5, "dev-token-carol", "gw-7", true, u32::MAX)).await.unwrap();
    let ack = read_packet(&mut s).await;
    assert_eq!((ack[2], ack[3]), (0, 0), "accepted, no session yet: {ack:x?}");
    let ttl = 24u32 * 3600;
    assert!(ack.windows(5).any(|w| w == [&[0x11][..], &ttl.to_be_bytes()[..]].concat()), "expiry told: {ack:x?}");
    let mut sub = vec![0, 1, 0];
    sub.extend(string(TASKS.as_bytes()));
    sub.push(1);
    s.write_all(&packet(0x82, &sub)).await.unwrap();
    assert_eq!(read_packet(&mut s).await, [0x90, 4, 0, 1, 0, 1]);
    drop_settled(&server, s).await;
    alice.publish_acked(TASKS, Value::from(7)).await;
    let (mut s, present) = session(&server, 5, "gw-7", false, 60).await;
    assert!(present);
    let p = read_packet(&mut s).await;
    assert_eq!(p[0], 0x32, "QoS 1: {p:x?}");
    assert!(p.ends_with(&[0, 7]), "no properties, then the payload: {p:x?}");
}

/// QoS 2 to a device: `PUBREC`, `PUBREL`, `PUBCOMP`; with `mqtt_max_inflight` 1 the next
/// delivery waits for the slot, while `PINGRESP` and `PUBREL` still go out.
#[tokio::test]
async fn qos_two_deliveries_complete_their_exchange_within_the_inflight_bound() {
    let server = TestServer::builder()
        .settings(|s| {
            s.node.mqtt_listen = Some("127.0.0.1:0".into());
            s.mqtt.mqtt_max_inflight = Some(1);
        })
        .spawn()
        .await;
    let mut alice = server.auth("dev-token-alice").await;
    let mut bob = server.auth("dev-token-bob").await;
    bob.subscribe(TOPIC).await;
    let mut d = device(&server, 4, "dev-token-carol").await;
    d.write_all(&subscribe(1, TOPIC, 2)).await.unwrap();
    assert_eq!(read_packet(&mut d).await, [0x90, 3, 0, 1, 2], "SUBACK granted QoS 2");
    alice.publish_acked(TOPIC, Value::from(1)).await;
    alice.publish_acked(TOPIC, Value::from(2)).await;
    for _ in 0..2 {
        bob.expect("message").await;
    }
    let (first, _, pkid, payload) = delivery(&read_packet(&mut d).await);
    assert_eq!((first, &payload[..]), (0x34, &[1u8][..]), "QoS 2");
    // The second waits for the only slot; a ping is answered meanwhile.
    d.write_all(&[0xC0, 0]).await.unwrap();
    assert_eq!(read_packet(&mut d).await, [0xD0, 0], "PINGRESP before the second delivery");
    d.write_all(&ack(0x50, pkid)).await.unwrap();
    assert_eq!(read_packet(&mut d).await, ack(0x62, pkid), "PUBREL");
    d.write_all(&[0xC0, 0]).await.unwrap();
    assert_eq!(read_packet(&mut d).await, [0xD0, 0], "the slot is held until PUBCOMP");
    d.write_all(&ack(0x70, pkid)).await.unwrap();
    let (first, _, pkid2, payload) = delivery(&read_packet(&mut d).await);
    assert_eq!((first, &payload[..]), (0x34, &[2u8][..]), "then the second");
    assert_ne!(pkid2, 0);
}

/// A second `CONNECT` with the client id, on another node, closes the first (5.0 0x8E).
#[tokio::test]
async fn a_client_id_takes_its_session_over_from_another_node() {
    let builder = TestServer::builder().settings(|s| s.node.mqtt_listen = Some("127.0.0.1:0".into()));
    let c = skua_testkit::TestCluster::embedded(2, builder).await;
    let (mut first, _) = session(c.node(0), 5, "gw-takeover", true, 0).await;
    let (mut second, _) = session(c.node(1), 5, "gw-takeover", true, 0).await;
    assert_eq!(disconnected(&mut first).await, [0xE0, 1, 0x8E], "DISCONNECT session taken over");
    second.write_all(&[0xC0, 0]).await.unwrap();
    assert_eq!(read_packet(&mut second).await, [0xD0, 0], "the newer connection stays");
}

/// `demo/general/+` receives a topic added to the app after the `SUBSCRIBE` (a registry change
/// names the app; the filter is expanded again).
#[tokio::test]
async fn a_wildcard_filter_receives_a_topic_created_after_it() {
    use skua_control::pb;
    let server =
        TestServer::builder().settings(|s| s.node.mqtt_listen = Some("127.0.0.1:0".into())).grpc().spawn().await;
    let mut control = server.control().await;
    let mut d = device(&server, 4, "dev-token-carol").await;
    d.write_all(&subscribe(1, "demo/general/+", 0)).await.unwrap();
    assert_eq!(read_packet(&mut d).await, [0x90, 3, 0, 1, 0]);
    let names = ["messages", "status", "events", "results", "tasks", "feed", "alerts"];
    let topics = names.iter().map(|t| pb::Topic { name: (*t).into(), logged: *t == "tasks", ..Default::default() });
    control
        .update_app(pb::UpdateAppRequest {
            app: "demo".into(),
            topics: Some(pb::TopicList { topics: topics.collect() }),
            ..Default::default()
        })
        .await
        .expect("add a topic");
    let mut alice = server.auth("dev-token-alice").await;
    // The device's subscription follows the registry change; publish until it is in place.
    let d2 = skua_testkit::control::Deadline::new("the new topic reaches the wildcard filter", Duration::from_secs(10));
    loop {
        alice.send(frame! {"type" => "publish", "topic" => "demo/general/alerts", "data" => Value::from(9)}).await;
        if let Ok(p) = tokio::time::timeout(Duration::from_millis(200), read_packet(&mut d)).await {
            let (_, topic, _, payload) = delivery(&p);
            assert_eq!((topic.as_str(), &payload[..]), ("demo/general/alerts", &[9u8][..]));
            break;
        }
        d2.tick().await;
    }
}

/// A backlog far larger than every queue on its way, to a device that acknowledges one delivery
/// at a time (`mqtt_max_inflight` 1): the durable task waits for room in the outbound queue, the
/// writer waits for each `PUBACK`, and the acks must still reach the store without waiting on
/// that task (its queue full), or the three would wait on each other for ever.
#[tokio::test]
async fn a_large_backlog_drains_to_a_device_that_acks_one_at_a_time() {
    const BACKLOG: u8 = 100;
    let path = std::env::temp_dir().join(format!("skua-mqtt-backlog-{}.db", uuid::Uuid::new_v4().simple()));
    let store = format!("sqlite://{}", path.display());
    let server = TestServer::builder()
        .settings(move |s| {
            s.node.mqtt_listen = Some("127.0.0.1:0".into());
            s.node.store = Some(store.clone());
            s.mqtt.mqtt_max_inflight = Some(1);
            s.edge.durable_queue = Some(2);
            s.edge.outbound_queue_messages = Some(8);
            s.edge.rate_limit = Some(10_000);
        })
        .spawn()
        .await;
    let mut alice = server.auth("dev-token-alice").await;
    let (mut d, _) = session(&server, 4, "sensor-backlog", false, 0).await;
    d.write_all(&subscribe(1, TASKS, 1)).await.unwrap();
    assert_eq!(read_packet(&mut d).await, [0x90, 3, 0, 1, 1]);
    d.write_all(&[0xE0, 0]).await.unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), d.read_to_end(&mut rest)).await.expect("closed").unwrap();
    for n in 0..BACKLOG {
        alice.publish_acked(TASKS, Value::from(n)).await;
    }
    let (mut d, present) = session(&server, 4, "sensor-backlog", false, 0).await;
    assert!(present);
    for n in 0..BACKLOG {
        let (_, _, pkid, payload) = delivery(&read_packet(&mut d).await);
        assert_eq!(payload, [n], "in order, each once");
        d.write_all(&ack(0x40, pkid)).await.unwrap();
    }
    drop(server);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}

/// A device that drops its socket and reconnects at once, before the node finished the old
/// connection's cleanup (or even noticed it: `keep` leaves the old socket open, a half-open
/// connection the new one takes over), still gets what the old connection held (unacked) before
/// what was published while it was away, on the new connection: the old one's release must
/// reach it. `away` and `back` are the nodes of the two connections.
async fn a_fast_reconnect_gets_the_unacked_message_first(away: &TestServer, back: &TestServer, id: &str, keep: bool) {
    let mut alice = away.auth("dev-token-alice").await;
    let (mut d, _) = session(away, 4, id, false, 0).await;
    d.write_all(&subscribe(1, TASKS, 1)).await.unwrap();
    assert_eq!(read_packet(&mut d).await, [0x90, 3, 0, 1, 1]);
    alice.publish_acked(TASKS, Value::from(1)).await;
    let (_, _, _, payload) = delivery(&read_packet(&mut d).await);
    assert_eq!(payload, [1], "delivered, not acked");
    // Gone, and back at once (no waiting for the node to notice).
    let old = keep.then_some(d);
    alice.publish_acked(TASKS, Value::from(2)).await;
    let (mut d, present) = session(back, 4, id, false, 0).await;
    assert!(present, "the session was resumed");
    let (first, _, p1, payload) = delivery(&read_packet(&mut d).await);
    assert_eq!((first, &payload[..]), (0x3A, &[1u8][..]), "the unacked one first, with DUP");
    let (_, _, p2, payload) = delivery(&read_packet(&mut d).await);
    assert_eq!(payload, [2], "then the one published while away");
    d.write_all(&ack(0x40, p1)).await.unwrap();
    d.write_all(&ack(0x40, p2)).await.unwrap();
    drop(old);
}

#[tokio::test]
async fn a_fast_reconnect_gets_what_the_old_connection_held_in_order() {
    let path = std::env::temp_dir().join(format!("skua-mqtt-fast-{}.db", uuid::Uuid::new_v4().simple()));
    let server = mqtt_on_store(&format!("sqlite://{}", path.display())).await;
    for round in 0..10 {
        let id = format!("sensor-fast-{round}");
        a_fast_reconnect_gets_the_unacked_message_first(&server, &server, &id, round % 2 == 1).await;
    }
    drop(server);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}

#[tokio::test]
async fn a_fast_reconnect_to_another_node_gets_what_the_old_connection_held_in_order() {
    let builder = TestServer::builder().settings(|s| s.node.mqtt_listen = Some("127.0.0.1:0".into()));
    let c = skua_testkit::TestCluster::embedded(2, builder).await;
    for round in 0..6 {
        let id = format!("sensor-far-{round}");
        a_fast_reconnect_gets_the_unacked_message_first(c.node(0), c.node(1), &id, round % 2 == 1).await;
    }
}

/// A `SUBSCRIBE` to another logged topic while a backlog fills every delivery slot, the
/// outbound queue and the durable task's queue: the device's reader must not wait on that
/// task (it waits for room the writer frees only at the `PUBACK`s the reader is to read).
#[tokio::test]
async fn a_subscribe_during_a_stalled_backlog_never_blocks_the_reader() {
    const BACKLOG: u8 = 30;
    const LIVE: u8 = 6;
    let path = std::env::temp_dir().join(format!("skua-mqtt-stall-{}.db", uuid::Uuid::new_v4().simple()));
    let store = format!("sqlite://{}", path.display());
    let server = TestServer::builder()
        .settings(move |s| {
            s.node.mqtt_listen = Some("127.0.0.1:0".into());
            s.node.store = Some(store.clone());
            s.mqtt.mqtt_max_inflight = Some(1);
            s.edge.durable_queue = Some(2);
            s.edge.outbound_queue_messages = Some(8);
            s.edge.rate_limit = Some(10_000);
        })
        .spawn()
        .await;
    let mut alice = server.auth("dev-token-alice").await;
    let mut bob = server.auth("dev-token-bob").await;
    bob.subscribe(TASKS).await;
    let (mut d, _) = session(&server, 4, "sensor-stall", false, 0).await;
    d.write_all(&subscribe(1, TASKS, 1)).await.unwrap();
    assert_eq!(read_packet(&mut d).await, [0x90, 3, 0, 1, 1]);
    let closed = server.state.metrics.connections_closed.load(std::sync::atomic::Ordering::Acquire);
    d.write_all(&[0xE0, 0]).await.unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), d.read_to_end(&mut rest)).await.expect("closed").unwrap();
    settled(&server, closed).await;
    for n in 0..BACKLOG {
        alice.publish_acked(TASKS, Value::from(n)).await;
    }
    for _ in 0..BACKLOG {
        bob.expect("message").await;
    }
    let (mut d, present) = session(&server, 4, "sensor-stall", false, 0).await;
    assert!(present);
    // The first delivery holds the only slot; the backlog fills the outbound queue behind it.
    let (_, _, first, payload) = delivery(&read_packet(&mut d).await);
    assert_eq!(payload, [0]);
    // Live messages meanwhile fill the durable task's queue (bob got them: the node's fan-out
    // offered them to the device's task too).
    for n in BACKLOG..BACKLOG + LIVE {
        alice.publish_acked(TASKS, Value::from(n)).await;
        bob.expect("message").await;
    }
    // A durable subscription more, then every acknowledgement.
    d.write_all(&subscribe(2, "demo/random/tasks", 1)).await.unwrap();
    d.write_all(&ack(0x40, first)).await.unwrap();
    let (mut next, mut suback) = (1u8, false);
    while next < BACKLOG + LIVE || !suback {
        let p = read_packet(&mut d).await;
        if p[0] == 0x90 {
            assert_eq!(p, [0x90, 3, 0, 2, 1], "SUBACK");
            suback = true;
            continue;
        }
        let (_, _, pkid, payload) = delivery(&p);
        assert_eq!(payload, [next], "in order, each once");
        next += 1;
        d.write_all(&ack(0x40, pkid)).await.unwrap();
    }
    drop(server);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}

/// A 5.0 `SUBSCRIBE` of one filter (no properties).
fn subscribe5(pkid: u8, filter: &str, qos: u8) -> Vec<u8> {
    let mut body = vec![0, pkid, 0];
    body.extend(string(filter.as_bytes()));
    body.push(qos);
    packet(0x82, &body)
}

/// A 5.0 `DISCONNECT` carrying a session expiry interval (property 0x11).
fn disconnect_with_expiry(expiry: u32) -> Vec<u8> {
    let mut body = vec![0, 5, 0x11];
    body.extend_from_slice(&expiry.to_be_bytes());
    packet(0xE0, &body)
}

/// Sends `last` and waits until the node finished the connection's cleanup.
async fn end_settled(server: &TestServer, mut d: TcpStream, last: &[u8]) -> Vec<u8> {
    let closed = server.state.metrics.connections_closed.load(std::sync::atomic::Ordering::Acquire);
    d.write_all(last).await.unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), d.read_to_end(&mut rest)).await.expect("closed").unwrap_or(0);
    settled(server, closed).await;
    rest
}

/// A 5.0 session expiry shorter than `restore_ttl` is honoured: the session is gone after it.
#[tokio::test]
async fn a_short_five_session_expiry_ends_the_session() {
    let server = server().await;
    let mut s = TcpStream::connect(server.mqtt_addr.expect("mqtt listener")).await.expect("connect");
    s.write_all(&connect_session(5, "dev-token-carol", "gw-short", false, 1)).await.unwrap();
    let ack = read_packet(&mut s).await;
    assert_eq!((ack[2], ack[3]), (0, 0), "accepted: {ack:x?}");
    assert!(!ack.windows(1).any(|w| w == [0x11]), "the expiry asked is kept, not told: {ack:x?}");
    s.write_all(&subscribe5(1, TASKS, 1)).await.unwrap();
    assert_eq!(read_packet(&mut s).await, [0x90, 4, 0, 1, 0, 1]);
    drop_settled(&server, s).await;
    // Kept for a second (whole seconds in the store): gone two seconds later.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let (_, present) = session(&server, 5, "gw-short", false, 60).await;
    assert!(!present, "the session expired");
}

/// A 5.0 `DISCONNECT` with session expiry 0 ends a persistent session with its connection:
/// its subscriptions and what its consumer kept are gone; one that set a non-zero expiry where
/// the `CONNECT` had none is a protocol error.
#[tokio::test]
async fn a_five_disconnect_can_end_the_session() {
    let server = server().await;
    let mut alice = server.auth("dev-token-alice").await;
    let (mut d, _) = session(&server, 5, "gw-end", false, 60).await;
    d.write_all(&subscribe5(1, TASKS, 1)).await.unwrap();
    assert_eq!(read_packet(&mut d).await, [0x90, 4, 0, 1, 0, 1]);
    end_settled(&server, d, &disconnect_with_expiry(0)).await;
    alice.publish_acked(TASKS, Value::from(8)).await;
    let (mut d, present) = session(&server, 5, "gw-end", false, 60).await;
    assert!(!present, "nothing was kept");
    d.write_all(&subscribe5(2, TASKS, 1)).await.unwrap();
    assert_eq!(read_packet(&mut d).await, [0x90, 4, 0, 2, 0, 1]);
    d.write_all(&[0xC0, 0]).await.unwrap();
    assert_eq!(read_packet(&mut d).await, [0xD0, 0], "nothing kept for the old session is delivered");
    end_settled(&server, d, &[0xE0, 0]).await;

    let (d, _) = session(&server, 5, "gw-none", true, 0).await;
    let rest = end_settled(&server, d, &disconnect_with_expiry(30)).await;
    assert_eq!(rest, [0xE0, 1, 0x82], "DISCONNECT protocol error");
}

/// With `proxy_protocol`, the MQTT listener reads the load balancer's PROXY header: a device's
/// address is the one it names (here counted against `max_connections_per_ip` 1), and a socket
/// without the header is closed.
#[tokio::test]
async fn a_device_behind_a_proxy_protocol_balancer_has_the_address_of_its_header() {
    let server = TestServer::builder()
        .settings(|s| {
            s.node.mqtt_listen = Some("127.0.0.1:0".into());
            s.edge.proxy_protocol = Some(true);
            s.edge.trusted_proxies = Some(vec!["127.0.0.0/8".into()]);
            s.edge.max_connections_per_ip = Some(1);
        })
        .spawn()
        .await;
    let via = |source: &'static str, token: &'static str| {
        let addr = server.mqtt_addr.expect("mqtt listener");
        async move {
            let mut s = TcpStream::connect(addr).await.expect("connect");
            let header = format!("PROXY TCP4 {source} 127.0.0.1 40000 1883\r\n");
            s.write_all(&[header.as_bytes(), &connect(4, token)].concat()).await.expect("write");
            s
        }
    };
    let closed = |mut s: TcpStream| async move {
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut rest)).await.expect("closed");
        assert!(read.is_err() || rest.is_empty(), "closed without a CONNACK: {rest:x?}");
    };
    let mut first = via("203.0.113.7", "dev-token-carol").await;
    assert_eq!(read_packet(&mut first).await, [0x20, 2, 0, 0], "CONNACK: the header's address is admitted");
    // The same client address again: over its limit, whatever the balancer's address.
    closed(via("203.0.113.7", "dev-token-bob").await).await;
    let mut other = via("203.0.113.8", "dev-token-bob").await;
    assert_eq!(read_packet(&mut other).await, [0x20, 2, 0, 0], "another client address");
    // No PROXY header: refused.
    let mut bare = TcpStream::connect(server.mqtt_addr.unwrap()).await.unwrap();
    bare.write_all(&connect(4, "dev-token-alice")).await.unwrap();
    closed(bare).await;
}

#[tokio::test]
async fn postgres_fast_reconnect_gets_what_the_old_connection_held_in_order() {
    let Some(db) = skua_testkit::postgres::TestDatabase::migrated().await else { return };
    let server = mqtt_on_store(&db.url).await;
    for round in 0..10 {
        let id = format!("sensor-pg-{round}");
        a_fast_reconnect_gets_the_unacked_message_first(&server, &server, &id, round % 2 == 1).await;
    }
}
