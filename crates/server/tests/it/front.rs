//! The front door (issue 12, items 4, 5, 8, 9): the header timeout and connection slots from
//! accept, TLS, per-address limits with trusted proxies and the PROXY protocol, the `Origin`
//! allowlist, and the `/metrics` token and listener.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use rmpv::Value;
use skua_testkit::http::{Scrape, get};
use skua_testkit::{TestServer, encode, frame};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// The header timeout where a test only waits for it to pass: a lower bound, which load cannot
/// break.
const HEADER_TIMEOUT: Duration = Duration::from_secs(1);
/// The header timeout where a test must do something while sockets are still held (connect,
/// upgrade, probe, scrape): 1 s was too short for that on a loaded 2-core machine (issue 35), so
/// it has slack; [`assert_held`] says so when even this was too short.
const HOLD_TIMEOUT: Duration = Duration::from_secs(3);
const HOLD_TIMEOUT_SETTING: &str = "3s";
/// Longest a test waits for an event it expects.
const WAIT: Duration = Duration::from_secs(5);

/// A complete WebSocket upgrade request head for `/ws`, with `extra` header lines.
fn upgrade_head(extra: &str) -> String {
    format!(
        "GET /ws HTTP/1.1\r\nHost: skua\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n{extra}\r\n"
    )
}

/// Opens a WebSocket to `/ws` of `addr` with extra request headers: `Ok` once upgraded, else the
/// HTTP status of the refusal.
async fn try_ws(
    addr: SocketAddr,
    headers: &[(&'static str, &str)],
) -> Result<WebSocketStream<MaybeTlsStream<TcpStream>>, u16> {
    let mut req = format!("ws://{addr}/ws").into_client_request().expect("request");
    for (k, v) in headers {
        req.headers_mut().insert(*k, v.parse().expect("header value"));
    }
    match tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(req)).await.expect("upgrade answered within 5 s")
    {
        Ok((ws, _)) => Ok(ws),
        Err(WsError::Http(resp)) => Err(resp.status().as_u16()),
        Err(e) => panic!("upgrade failed without an HTTP answer: {e}"),
    }
}

/// Retries [`try_ws`] until it upgrades (the server frees slots when it sees a close).
async fn ws_eventually(
    addr: SocketAddr,
    headers: &[(&'static str, &str)],
) -> WebSocketStream<MaybeTlsStream<TcpStream>> {
    let deadline = Instant::now() + WAIT;
    loop {
        match try_ws(addr, headers).await {
            Ok(ws) => return ws,
            Err(status) => assert!(Instant::now() < deadline, "still refused {status} after 5 s"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Reads until the peer closes; what was read and when it ended. Fails after 5 s.
async fn read_to_close<S: AsyncRead + Unpin>(s: &mut S) -> (Vec<u8>, Instant) {
    let mut buf = Vec::new();
    let r = tokio::time::timeout(WAIT, s.read_to_end(&mut buf)).await.expect("the server closes the socket within 5 s");
    // A reset after unread data is a close too.
    let _ = r;
    (buf, Instant::now())
}

/// Asserts that an upgrade tried `started` + less than [`HOLD_TIMEOUT`] was refused 503 (the
/// slots are held), telling a machine too loaded to try it in time from a broken limit.
fn assert_held(refusal: Option<u16>, started: Instant, what: &str) {
    let after = started.elapsed();
    if refusal != Some(503) && after >= HOLD_TIMEOUT {
        panic!(
            "{what}: the upgrade was tried {after:?} after the sockets, past the header timeout (machine too loaded)"
        );
    }
    assert_eq!(refusal, Some(503), "{what}");
}

async fn auth<S: AsyncRead + AsyncWrite + Unpin>(ws: &mut WebSocketStream<S>, token: &str) {
    let f = frame! {"type" => "auth", "token" => token, "protocolVersion" => 2};
    ws.send(Message::Binary(encode(&f).into())).await.expect("send auth");
    let reply = loop {
        match tokio::time::timeout(WAIT, ws.next()).await.expect("auth reply within 5 s") {
            Some(Ok(Message::Binary(b))) if !b.is_empty() => {
                break rmpv::decode::read_value(&mut &b[..]).expect("msgpack");
            }
            Some(Ok(_)) => {}
            other => panic!("socket ended before the auth reply: {other:?}"),
        }
    };
    assert_eq!(reply["type"].as_str(), Some("auth"), "{reply:?}");
    assert_eq!(reply["success"], Value::Boolean(true), "{reply:?}");
}

fn refusals(scrape: &Scrape, reason: &str) -> f64 {
    scrape.value_or_zero("skua_front_refusals_total", &[("reason", reason)])
}

/// A server with its metrics on a separate listener (so scraping takes no slot and counts
/// against no address) and `f` applied to its settings.
async fn spawn_server(f: impl FnOnce(&mut skua_server::Settings)) -> TestServer {
    TestServer::builder()
        .settings(|s| {
            s.node.metrics_listen = Some("127.0.0.1:0".into());
            f(s);
        })
        .spawn()
        .await
}

fn metrics_addr(server: &TestServer) -> SocketAddr {
    server.metrics_addr.expect("metrics listener")
}

// ---------------------------------------------------------------------------------------------
// Header timeout and connection slots (item 4)

#[tokio::test]
async fn slowloris_sockets_hold_connection_slots_and_are_closed_after_the_header_timeout() {
    let server = spawn_server(|s| {
        s.edge.max_connections = Some(2);
        s.edge.http_header_timeout = Some(HOLD_TIMEOUT_SETTING.into());
    })
    .await;
    // Two sockets that never finish their upgrade request take both slots.
    let started = Instant::now();
    let mut slow = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(server.addr).await.expect("connect");
        s.write_all(b"GET /ws HTTP/1.1\r\nHost: skua\r\nUpgrade: websocket\r\n").await.expect("write");
        slow.push(s);
    }
    assert_held(try_ws(server.addr, &[]).await.err(), started, "pending sockets count toward max_connections");
    // A full node still answers its probes, and stays ready (issue 32, item 1: it refuses the
    // upgrades instead, so a balancer never resets its connections for being full).
    assert_eq!(get(server.addr, "/healthz").await.0, 200);
    assert_eq!(get(server.addr, "/readyz").await, (200, "ready".into()), "a full node");
    assert_eq!(Scrape::of(metrics_addr(&server)).await.value("skua_ready", &[]), 1.0);
    assert!(
        started.elapsed() < HOLD_TIMEOUT,
        "the checks above ran past the header timeout: the machine is too loaded"
    );
    for s in &mut slow {
        let (bytes, closed_at) = read_to_close(s).await;
        let after = closed_at - started;
        assert!(after >= HOLD_TIMEOUT - Duration::from_millis(50), "closed after {after:?}, before the timeout");
        assert!(!String::from_utf8_lossy(&bytes).contains("101"), "never upgraded");
    }
    // Their slots are free again.
    let mut ws = ws_eventually(server.addr, &[]).await;
    auth(&mut ws, "dev-token-alice").await;
    assert_eq!(get(server.addr, "/readyz").await.0, 200, "one slot left: ready");
    let scrape = Scrape::of(metrics_addr(&server)).await;
    assert_eq!(scrape.value("skua_ready", &[]), 1.0);
    assert!(refusals(&scrape, "header_timeout") >= 2.0, "{}", scrape.text);
    assert!(refusals(&scrape, "max_connections") >= 1.0, "{}", scrape.text);
    assert_eq!(scrape.value("skua_connection_slots_used", &[]), 1.0, "the WebSocket holds its slot");
}

/// Issue 32, item 1: a node at `max_connections` refuses new upgrades with 503, `Retry-After`
/// and `Connection: close`, while `/readyz` stays 200 and `skua_ready` 1 (a readiness that
/// failed at the cap made load balancers reset every connection of a busy edge). The
/// WebSockets already open keep working, and a freed slot takes the next upgrade.
#[tokio::test]
async fn a_full_edge_refuses_upgrades_503_with_retry_after_and_readyz_stays_200() {
    let server = spawn_server(|s| s.edge.max_connections = Some(2)).await;
    let mut alice = ws_eventually(server.addr, &[]).await;
    auth(&mut alice, "dev-token-alice").await;
    let mut bob = ws_eventually(server.addr, &[]).await;
    auth(&mut bob, "dev-token-bob").await;

    let mut raw = TcpStream::connect(server.addr).await.expect("connect");
    raw.write_all(upgrade_head("").as_bytes()).await.expect("write");
    let (bytes, _) = read_to_close(&mut raw).await;
    let answer = String::from_utf8_lossy(&bytes).to_ascii_lowercase();
    assert!(answer.starts_with("http/1.1 503"), "{answer}");
    assert!(answer.contains("retry-after: 5"), "{answer}");
    assert!(answer.contains("connection: close"), "{answer}");
    assert!(answer.contains("node is at its connection limit"), "{answer}");

    assert_eq!(get(server.addr, "/readyz").await, (200, "ready".into()), "a full edge stays ready");
    let scrape = Scrape::of(metrics_addr(&server)).await;
    assert_eq!(scrape.value("skua_ready", &[]), 1.0, "{}", scrape.text);
    assert_eq!(scrape.value("skua_connection_slots_used", &[]), 2.0, "{}", scrape.text);
    assert!(refusals(&scrape, "max_connections") >= 1.0, "{}", scrape.text);

    assert_eq!(scrape.value("skua_connections_open", &[]), 2.0, "the open WebSockets are untouched");

    // A freed slot takes the next upgrade.
    alice.close(None).await.expect("close");
    let mut carol = ws_eventually(server.addr, &[]).await;
    auth(&mut carol, "dev-token-carol").await;
    drop(bob);
}

#[tokio::test]
async fn idle_keep_alive_sockets_are_closed_after_the_header_timeout() {
    let server = spawn_server(|s| s.edge.http_header_timeout = Some("1s".into())).await;
    let mut s = TcpStream::connect(server.addr).await.expect("connect");
    // The idle time is counted from before the request: the server's clock starts after its
    // answer, so this is a lower bound however late this test reads the answer (issue 35).
    let asked = Instant::now();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: skua\r\n\r\n").await.expect("write");
    let mut first = [0u8; 12];
    s.read_exact(&mut first).await.expect("response");
    assert_eq!(&first, b"HTTP/1.1 200");
    let (rest, closed_at) = read_to_close(&mut s).await;
    assert!(String::from_utf8_lossy(&rest).ends_with("ok"), "{rest:?}");
    let idle = closed_at - asked;
    assert!(idle >= HEADER_TIMEOUT - Duration::from_millis(50), "closed after {idle:?} idle");
}

// ---------------------------------------------------------------------------------------------
// TLS (item 4's interface for item 7)

struct Tls {
    acceptor: tokio_rustls::TlsAcceptor,
    connector: tokio_rustls::TlsConnector,
}

fn tls_pair() -> Tls {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("self-signed certificate");
    let cert = ck.cert.der().clone();
    let key = rustls::pki_types::PrivateKeyDer::try_from(ck.signing_key.serialize_der()).expect("key");
    let server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)
        .expect("server config");
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).expect("root");
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    Tls {
        acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(server)),
        connector: tokio_rustls::TlsConnector::from(Arc::new(client)),
    }
}

/// A second, TLS, listener on the test server's node.
async fn serve_tls(server: &TestServer, acceptor: tokio_rustls::TlsAcceptor) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let state = server.state.clone();
    server.state.tracker.spawn(async move { skua_edge::serve(listener, state, Some(acceptor)).await });
    addr
}

#[tokio::test]
async fn websocket_auth_works_over_tls() {
    let server = spawn_server(|_| {}).await;
    let tls = tls_pair();
    let addr = serve_tls(&server, tls.acceptor).await;
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
    let stream = tls.connector.connect(name, tcp).await.expect("TLS handshake");
    let (mut ws, resp) = tokio_tungstenite::client_async("wss://localhost/ws", stream).await.expect("upgrade over TLS");
    assert_eq!(resp.status().as_u16(), 101);
    auth(&mut ws, "dev-token-alice").await;

    // Plain HTTP on the TLS listener is not served.
    let mut plain = TcpStream::connect(addr).await.expect("connect");
    plain.write_all(upgrade_head("").as_bytes()).await.expect("write");
    let (bytes, _) = read_to_close(&mut plain).await;
    assert!(!String::from_utf8_lossy(&bytes).contains("101"));
}

#[tokio::test]
async fn a_tls_handshake_that_never_finishes_is_closed_after_the_header_timeout() {
    let server = spawn_server(|s| {
        s.edge.http_header_timeout = Some(HOLD_TIMEOUT_SETTING.into());
        s.edge.max_connections = Some(1);
    })
    .await;
    let tls = tls_pair();
    let addr = serve_tls(&server, tls.acceptor).await;
    let started = Instant::now();
    // The first bytes of a ClientHello, and then nothing.
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01]).await.expect("write");
    // Meanwhile it holds the only slot.
    assert_held(try_ws(server.addr, &[]).await.err(), started, "the handshake holds the only slot");
    let (_, closed_at) = read_to_close(&mut s).await;
    assert!(closed_at - started >= HOLD_TIMEOUT - Duration::from_millis(50), "closed too early");
    let _ws = ws_eventually(server.addr, &[]).await;
    let scrape = Scrape::of(metrics_addr(&server)).await;
    assert_eq!(refusals(&scrape, "tls_handshake"), 1.0, "{}", scrape.text);
}

// ---------------------------------------------------------------------------------------------
// Per-address limits (item 5)

#[tokio::test]
async fn connections_per_address_over_the_limit_get_429() {
    let server = spawn_server(|s| s.edge.max_connections_per_ip = Some(2)).await;
    let mut a = try_ws(server.addr, &[]).await.expect("first");
    let _b = try_ws(server.addr, &[]).await.expect("second");
    assert_eq!(try_ws(server.addr, &[]).await.err(), Some(429));
    // Plain requests from the address are refused too while it is at its limit.
    assert_eq!(get(server.addr, "/healthz").await.0, 429);
    a.close(None).await.expect("close");
    drop(a);
    let _c = ws_eventually(server.addr, &[]).await;
    let scrape = Scrape::of(metrics_addr(&server)).await;
    assert!(refusals(&scrape, "ip_connections") >= 2.0, "{}", scrape.text);
}

#[tokio::test]
async fn new_connections_per_address_over_the_rate_get_429() {
    let server = spawn_server(|s| s.edge.max_new_connections_per_ip_per_second = Some(2)).await;
    // All ten at once: however slow the machine, they arrive well within the first second's
    // refill, so some must be refused (issue 35: sequential requests could take longer than the
    // refill on a loaded machine and all pass).
    let started = Instant::now();
    let statuses: Vec<u16> =
        futures_util::future::join_all((0..10).map(|_| async { get(server.addr, "/healthz").await.0 })).await;
    let elapsed = started.elapsed().as_secs_f64();
    let ok = statuses.iter().filter(|s| **s == 200).count();
    let refused = statuses.iter().filter(|s| **s == 429).count();
    assert_eq!(ok + refused, 10, "{statuses:?}");
    // A burst of 2, then 2 per second.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let allowed = 2 + (elapsed * 2.0).ceil() as usize;
    assert!(ok >= 2 && ok <= allowed, "{ok} accepted in {elapsed:.2} s: {statuses:?}");
    assert!(refused >= 1, "{elapsed:.2} s for 10 connections: too slow to tell");
    let scrape = Scrape::of(metrics_addr(&server)).await;
    assert_eq!(refusals(&scrape, "ip_rate"), refused as f64);
}

#[tokio::test]
async fn forwarded_for_names_the_client_only_behind_a_trusted_proxy() {
    let xff = |ip: &'static str| [("x-forwarded-for", ip)];
    // Untrusted peer: the header is ignored, every socket is 127.0.0.1's.
    let direct = spawn_server(|s| s.edge.max_connections_per_ip = Some(1)).await;
    let _a = try_ws(direct.addr, &xff("203.0.113.1")).await.expect("first");
    assert_eq!(
        try_ws(direct.addr, &xff("203.0.113.2")).await.err(),
        Some(429),
        "X-Forwarded-For from anyone is ignored"
    );

    // Trusted peer: the rightmost untrusted entry is the client.
    let proxied = spawn_server(|s| {
        s.edge.max_connections_per_ip = Some(1);
        s.edge.trusted_proxies = Some(vec!["127.0.0.0/8".into()]);
    })
    .await;
    let _a = try_ws(proxied.addr, &xff("203.0.113.1")).await.expect("client 1");
    let _b = try_ws(proxied.addr, &xff("198.51.100.7, 203.0.113.2")).await.expect("client 2");
    assert_eq!(try_ws(proxied.addr, &xff("203.0.113.1")).await.err(), Some(429), "client 1 again");
    assert_eq!(
        try_ws(proxied.addr, &xff("203.0.113.2, 203.0.113.1")).await.err(),
        Some(429),
        "a forged entry left of the proxy's does not help"
    );
    // The proxy's own sockets are not limited by its address.
    let _c = try_ws(proxied.addr, &xff("203.0.113.3")).await.expect("client 3");
}

/// Connects to `addr` and sends `header` (a PROXY protocol header) first.
async fn proxied_tcp(addr: SocketAddr, header: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(header).await.expect("PROXY header");
    s
}

async fn ws_over(s: TcpStream) -> Result<WebSocketStream<TcpStream>, u16> {
    match tokio_tungstenite::client_async("ws://skua/ws", s).await {
        Ok((ws, _)) => Ok(ws),
        Err(WsError::Http(resp)) => Err(resp.status().as_u16()),
        Err(e) => panic!("upgrade failed without an HTTP answer: {e}"),
    }
}

#[tokio::test]
async fn proxy_protocol_headers_name_the_client() {
    let server = spawn_server(|s| {
        s.edge.max_connections_per_ip = Some(1);
        s.edge.proxy_protocol = Some(true);
        s.edge.trusted_proxies = Some(vec!["127.0.0.1".into()]);
        s.edge.http_header_timeout = Some("1s".into());
    })
    .await;
    let v1 = |ip: &str| format!("PROXY TCP4 {ip} 127.0.0.1 40000 8080\r\n").into_bytes();
    let mut a = ws_over(proxied_tcp(server.addr, &v1("203.0.113.1")).await).await.expect("client 1");
    auth(&mut a, "dev-token-alice").await;
    let mut v2 = b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x0c".to_vec();
    v2.extend_from_slice(&[203, 0, 113, 2, 127, 0, 0, 1, 0x9c, 0x40, 0x1f, 0x90]);
    let _b = ws_over(proxied_tcp(server.addr, &v2).await).await.expect("client 2 (v2)");
    assert_eq!(ws_over(proxied_tcp(server.addr, &v1("203.0.113.1")).await).await.err(), Some(429));

    // Without a header the socket is closed unanswered.
    let mut bare = TcpStream::connect(server.addr).await.expect("connect");
    bare.write_all(upgrade_head("").as_bytes()).await.expect("write");
    let (bytes, _) = read_to_close(&mut bare).await;
    assert!(bytes.is_empty(), "{:?}", String::from_utf8_lossy(&bytes));
    // Nor does a socket that sends nothing stay.
    let mut silent = TcpStream::connect(server.addr).await.expect("connect");
    let (bytes, _) = read_to_close(&mut silent).await;
    assert!(bytes.is_empty());
    let scrape = Scrape::of(metrics_addr(&server)).await;
    assert_eq!(refusals(&scrape, "proxy_header"), 2.0, "{}", scrape.text);
    assert_eq!(refusals(&scrape, "ip_connections"), 1.0, "{}", scrape.text);
}

// ---------------------------------------------------------------------------------------------
// Origin allowlist (item 8)

#[tokio::test]
async fn upgrades_from_origins_not_allowed_get_403() {
    let server = spawn_server(|s| {
        s.edge.allowed_origins = Some(vec!["https://app.example.com".into(), "https://*.example.org".into()]);
    })
    .await;
    let mut ws = try_ws(server.addr, &[("origin", "https://app.example.com")]).await.expect("listed origin");
    auth(&mut ws, "dev-token-alice").await;
    try_ws(server.addr, &[("origin", "https://eu.example.org")]).await.expect("wildcard origin");
    assert_eq!(try_ws(server.addr, &[("origin", "https://evil.example.net")]).await.err(), Some(403));
    assert_eq!(try_ws(server.addr, &[("origin", "http://app.example.com")]).await.err(), Some(403), "scheme counts");
    try_ws(server.addr, &[]).await.expect("no Origin: not a browser, allowed");
    let scrape = Scrape::of(metrics_addr(&server)).await;
    assert_eq!(refusals(&scrape, "origin"), 2.0, "{}", scrape.text);

    // Without a list every origin passes.
    let open = spawn_server(|_| {}).await;
    try_ws(open.addr, &[("origin", "https://evil.example.net")]).await.expect("allowed by default");
}

// ---------------------------------------------------------------------------------------------
// /metrics (item 9)

#[tokio::test]
async fn metrics_require_the_bearer_token_when_one_is_set() {
    let token = "metrics-token-0123456789";
    let server = TestServer::builder().settings(|s| s.edge.metrics_token = Some(token.into())).spawn().await;
    let addr = server.addr;
    let scrape_with = |auth: Option<String>| async move {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        let auth = auth.map(|a| format!("Authorization: {a}\r\n")).unwrap_or_default();
        let req = format!("GET /metrics HTTP/1.1\r\nHost: skua\r\n{auth}Connection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.expect("write");
        skua_testkit::http::read_response(s).await
    };
    assert_eq!(scrape_with(None).await.0, 401);
    assert_eq!(scrape_with(Some("Bearer wrong-token-0123456789".into())).await.0, 401);
    assert_eq!(scrape_with(Some(format!("Basic {token}"))).await.0, 401);
    let (status, body) = scrape_with(Some(format!("Bearer {token}"))).await;
    assert_eq!(status, 200);
    let scrape = Scrape::parse(body);
    assert_eq!(refusals(&scrape, "metrics_unauthorized"), 3.0, "{}", scrape.text);
    assert_eq!(get(server.addr, "/healthz").await.0, 200, "only /metrics needs it");
}

#[tokio::test]
async fn metrics_move_to_their_own_listener() {
    let server = spawn_server(|_| {}).await;
    assert_eq!(get(server.addr, "/metrics").await.0, 404, "not on the client listener");
    let scrape = Scrape::of(metrics_addr(&server)).await;
    assert!(scrape.text.contains("skua_connections_open"));
    assert_eq!(get(metrics_addr(&server), "/ws").await.0, 404, "nothing else there");
}

// ---------------------------------------------------------------------------------------------
// The open-file limit (issue 23, item 2)

/// A real `skua serve` whose soft and hard `RLIMIT_NOFILE` are 128, `fd_reserve` 64: the 65th
/// WebSocket is refused 503 (`fd_limit`, `Retry-After`) rather than failing at accept, the
/// WebSockets open keep working, one closing makes room again, and `/metrics` shows the limit.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrades_are_refused_503_before_the_open_file_limit() {
    use skua_testkit::process::SkuaProcess;
    const LIMIT: u32 = 128;
    const RESERVE: usize = 64;
    let node = SkuaProcess::spawn_with_open_file_limit(
        env!("CARGO_BIN_EXE_skua"),
        LIMIT,
        &["--dev", "--store", "memory", "--grpc-listen", "127.0.0.1:0", "--fd-reserve", &RESERVE.to_string()],
    );
    let addr = node.addr;
    let mut open = Vec::new();
    let refused = loop {
        match try_ws(addr, &[]).await {
            Ok(ws) => open.push(ws),
            Err(status) => break status,
        }
        assert!(open.len() <= LIMIT as usize, "no refusal below the open-file limit");
    };
    assert_eq!(refused, 503);
    assert_eq!(open.len(), LIMIT as usize - RESERVE, "every slot the limit less the reserve leaves is usable");

    // The refusal names its cause, says when to come back and closes the socket.
    let mut raw = TcpStream::connect(addr).await.expect("connect");
    raw.write_all(upgrade_head("").as_bytes()).await.expect("write");
    let (bytes, _) = read_to_close(&mut raw).await;
    let answer = String::from_utf8_lossy(&bytes).to_ascii_lowercase();
    assert!(answer.starts_with("http/1.1 503"), "{answer}");
    assert!(answer.contains("retry-after: 5"), "{answer}");
    assert!(answer.contains("node is at its open-file limit"), "{answer}");

    // The WebSockets already open still work.
    auth(&mut open[0], "dev-token-alice").await;
    let last = open.len() - 1;
    auth(&mut open[last], "dev-token-bob").await;

    let (status, text) = get(addr, "/metrics").await;
    assert_eq!(status, 200, "{text}");
    let scrape = Scrape::parse(text);
    assert_eq!(refusals(&scrape, "fd_limit"), 2.0, "{}", scrape.text);
    assert_eq!(refusals(&scrape, "max_connections"), 0.0, "{}", scrape.text);
    assert_eq!(scrape.value("process_max_fds", &[]), f64::from(LIMIT), "{}", scrape.text);
    let fds = scrape.value("process_open_fds", &[]);
    assert!((open.len() as f64..=f64::from(LIMIT)).contains(&fds), "process_open_fds {fds}: {}", scrape.text);
    assert_eq!(scrape.value("skua_fd_budget", &[]), (LIMIT as usize - RESERVE) as f64, "{}", scrape.text);
    // At the limit the node stays ready (issue 32, item 1): it refuses upgrades, 503 with
    // Retry-After, instead of leaving the load balancer.
    assert_eq!(scrape.value("skua_ready", &[]), 1.0, "{}", scrape.text);
    assert_eq!(get(addr, "/readyz").await, (200, "ready".into()), "ready at the limit");
    assert_eq!(get(addr, "/healthz").await.0, 200, "and alive");

    // A WebSocket closing makes room for another: the next upgrade succeeds (retried: the
    // server frees the slot when it sees the close).
    let mut gone = open.pop().expect("a WebSocket");
    gone.close(None).await.expect("close");
    let mut again = ws_eventually(addr, &[]).await;
    auth(&mut again, "dev-token-carol").await;
    assert_eq!(try_ws(addr, &[]).await.err(), Some(503), "at the limit again");
    assert_eq!(get(addr, "/readyz").await.0, 200, "and still ready");
}

// ---------------------------------------------------------------------------------------------
// Issue 33: body timeout (item 6) and Retry-After on 429 (item 11)

/// A request whose body never arrives (here `POST /admin/login` with a Content-Length and no
/// body) is answered 408 after `http_body_timeout` and its socket closed, freeing its slot.
#[tokio::test]
async fn a_body_that_never_arrives_is_answered_408_after_the_body_timeout() {
    let server = spawn_server(|s| {
        s.edge.max_connections = Some(1);
        s.edge.http_body_timeout = Some("1s".into());
    })
    .await;
    let mut s = TcpStream::connect(server.addr).await.expect("connect");
    let started = Instant::now();
    s.write_all(b"POST /admin/login HTTP/1.1\r\nHost: skua\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\nadmin_key=")
        .await
        .expect("write");
    let (bytes, closed_at) = read_to_close(&mut s).await;
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(closed_at - started >= Duration::from_millis(950), "answered after {:?}", closed_at - started);
    // The slot is free again: the one connection the node allows is taken by a WebSocket.
    let mut ws = ws_eventually(server.addr, &[]).await;
    auth(&mut ws, "dev-token-alice").await;
    let scrape = Scrape::of(metrics_addr(&server)).await;
    assert_eq!(refusals(&scrape, "body_timeout"), 1.0, "{}", scrape.text);
}

/// The front door's 429 tells the client when to come back.
#[tokio::test]
async fn the_per_address_429_carries_retry_after() {
    let server = spawn_server(|s| s.edge.max_connections_per_ip = Some(1)).await;
    let _held = try_ws(server.addr, &[]).await.expect("first");
    let mut s = TcpStream::connect(server.addr).await.expect("connect");
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: skua\r\nConnection: close\r\n\r\n").await.expect("write");
    let (bytes, _) = read_to_close(&mut s).await;
    let text = String::from_utf8_lossy(&bytes).to_ascii_lowercase();
    assert!(text.starts_with("http/1.1 429"), "{text}");
    assert!(text.contains("\r\nretry-after: 5\r\n"), "{text}");
}

/// Whether the node closed `s` without answering: a read ends (or fails) with nothing read.
async fn closed_unanswered(mut s: TcpStream) -> bool {
    let req = b"GET /healthz HTTP/1.1\r\nHost: skua\r\nConnection: close\r\n\r\n";
    if s.write_all(req).await.is_err() {
        return true;
    }
    let mut buf = Vec::new();
    match tokio::time::timeout(WAIT, s.read_to_end(&mut buf)).await.expect("the socket ends within 5 s") {
        Ok(_) => buf.is_empty(),
        Err(_) => true,
    }
}

/// docs/security.md (`max_connections`): on a full node 256 more sockets are served from an
/// overflow pool (its health probe answers); with the pool taken too, a socket is closed at
/// accept, counted in `skua_front_refusals_total{reason="max_connections"}`; a socket leaving
/// the pool makes room again.
#[tokio::test]
async fn past_max_connections_256_overflow_sockets_are_served_and_the_next_is_closed_at_accept() {
    let server = spawn_server(|s| {
        s.edge.max_connections = Some(1);
        s.edge.max_connections_per_ip = Some(100_000);
        s.edge.max_new_connections_per_ip_per_second = Some(100_000);
        s.edge.http_header_timeout = Some("30s".into());
    })
    .await;
    let mut ws = ws_eventually(server.addr, &[]).await;
    auth(&mut ws, "dev-token-alice").await;
    // 256 sockets with an unfinished request head hold the whole pool (taken at accept, in
    // order: the next socket is accepted after them).
    let mut held = Vec::new();
    for _ in 0..256 {
        let mut s = TcpStream::connect(server.addr).await.expect("connect");
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: skua\r\n").await.expect("write");
        held.push(s);
    }
    let before = refusals(&Scrape::of(metrics_addr(&server)).await, "max_connections");
    let next = TcpStream::connect(server.addr).await.expect("the kernel accepts it");
    assert!(closed_unanswered(next).await, "the 257th socket past max_connections is closed at accept");
    let after = refusals(&Scrape::of(metrics_addr(&server)).await, "max_connections");
    assert!(after > before, "counted: {before} -> {after}");

    // Every one of the 256 is served.
    for mut s in held {
        s.write_all(b"Connection: close\r\n\r\n").await.expect("finish the request");
        assert_eq!(skua_testkit::http::read_response(s).await.0, 200, "an overflow socket's health probe");
    }
    // Their sockets closed, the pool serves again.
    skua_testkit::http::wait_for_status(server.addr, "/healthz", 200, WAIT).await;
    assert!(ws.send(Message::Ping(Vec::new().into())).await.is_ok(), "the WebSocket kept its slot");
}
