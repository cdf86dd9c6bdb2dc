//! Operations (issue 7): `/metrics` during a scripted session, and the drain delay of a rolling
//! restart (readiness fails and upgrades are refused before the sockets close 1012).

use std::time::Duration;

use skua_testkit::http::{Scrape, get, wait_for_status};
use skua_testkit::{TestServer, dev_jwt, frame, now_s};

const TOPIC: &str = "demo/general/messages";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_counters_move_for_a_scripted_session() {
    let server = TestServer::start().await;
    let before = Scrape::of(server.addr).await;
    assert_eq!(before.value("skua_ready", &[]), 1.0);
    assert_eq!(before.value("skua_connections_open", &[]), 0.0);
    // The capacity an HPA on connections per pod divides by (issue 32, item 2).
    assert_eq!(before.value("skua_max_connections", &[]), 100_000.0, "the default max_connections");

    let mut bob = server.auth("dev-token-bob").await;
    bob.subscribe(TOPIC).await;
    let mut alice = server.auth("dev-token-alice").await;
    alice.send(frame! {"type" => "presence", "roomId" => "general", "data" => frame! {"s" => "on"}}).await;
    alice.expect("presence").await;
    alice.publish_acked(TOPIC, "hello".into()).await;
    assert_eq!(bob.expect("message").await.str("data"), "hello");
    alice.send(frame! {"type" => "publish", "topic" => "demo/general/nope", "data" => 1, "msgRef" => "r1"}).await;
    alice.expect_error("unknown_topic").await;
    alice.heartbeat().await;
    let mut stranger = server.connect().await;
    let r = stranger.auth("not-a-token", Some(2)).await;
    assert_eq!(r.str("error"), "access_denied");
    let mid = Scrape::of(server.addr).await;
    assert_eq!(mid.value("skua_connections", &[("project", "demo-project")]), 2.0, "bob and alice");
    assert_eq!(mid.value("skua_connections_open", &[]), 3.0, "bob, alice and the stranger");
    // A client token expiring closes 4003; the close is counted before the close frame goes out.
    let mut expiring = server.auth(&dev_jwt("carol", now_s() + 3)).await;
    assert_eq!(expiring.expect_close().await.0, 4003);

    let m = Scrape::of(server.addr).await;
    assert_eq!(m.value("skua_auths_total", &[("result", "ok")]), 3.0);
    assert_eq!(m.value("skua_auths_total", &[("result", "access_denied")]), 1.0);
    assert_eq!(m.value("skua_connections_opened_total", &[]), 4.0);
    assert_eq!(m.value("skua_frames_in_total", &[("type", "publish")]), 2.0);
    assert_eq!(m.value("skua_frames_in_total", &[("type", "subscribe")]), 1.0);
    assert_eq!(m.value("skua_frames_in_total", &[("type", "auth")]), 4.0);
    assert_eq!(m.value("skua_frames_in_total", &[("type", "heartbeat")]), 1.0);
    assert_eq!(m.value("skua_frames_out_total", &[("type", "message")]), 1.0);
    assert_eq!(m.value("skua_frames_out_total", &[("type", "published")]), 1.0);
    assert_eq!(m.value("skua_frames_out_total", &[("type", "subscribed")]), 1.0);
    assert_eq!(m.value("skua_frames_out_total", &[("type", "error")]), 1.0);
    assert_eq!(m.value("skua_frames_out_total", &[("type", "heartbeat")]), 1.0);
    assert_eq!(m.value("skua_publishes_total", &[("result", "ok")]), 1.0);
    assert_eq!(m.value("skua_publishes_total", &[("result", "unknown_topic")]), 1.0);
    assert_eq!(m.value("skua_deliveries_total", &[]), 1.0);
    assert_eq!(m.value("skua_closes_total", &[("reason", "token_expired")]), 1.0);
    let bus_publishes = m.value("skua_backend_operation_duration_seconds_count", &[("slot", "bus"), ("op", "publish")]);
    assert!(bus_publishes >= 2.0, "the publish and the presence join went through the bus: {bus_publishes}");
    let inf = m
        .value("skua_backend_operation_duration_seconds_bucket", &[("slot", "bus"), ("op", "publish"), ("le", "+Inf")]);
    assert_eq!(inf, bus_publishes, "+Inf bucket holds every observation");
    assert!(
        m.value("skua_backend_operation_duration_seconds_count", &[("slot", "store"), ("op", "save_restore")]) >= 1.0
    );
    assert!(
        m.value("skua_backend_operation_duration_seconds_count", &[("slot", "presence"), ("op", "announce")]) >= 1.0
    );
    assert!(m.text.contains("# TYPE skua_backend_operation_duration_seconds histogram"));
    // No topic, room, actor or connection id ever appears as a label value.
    for v in m.label_values() {
        for banned in ["alice", "bob", "carol", "general", "messages", "demo/"] {
            assert!(!v.contains(banned), "label value {v:?} names {banned}");
        }
    }
}

/// Issue 23, item 10: the series the alert rules and dashboard use are exported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_process_bus_registry_and_backend_series_are_exported() {
    let server = TestServer::start().await;
    let m = Scrape::of(server.addr).await;
    let build = format!("skua_build_info{{version=\"{}\",git_sha=\"", env!("CARGO_PKG_VERSION"));
    assert!(m.text.contains(&build), "{}", m.text);
    assert_eq!(m.value("skua_build_info", &[("version", env!("CARGO_PKG_VERSION"))]), 1.0);
    #[cfg(target_os = "linux")]
    assert!(m.value("process_resident_memory_bytes", &[]) > 1e6, "{}", m.text);
    for series in [
        "skua_bus_reconnects_total",
        "skua_bus_buffered_messages",
        "skua_bus_decode_errors_total",
        "skua_registry_lag_seconds",
        "skua_registry_version",
    ] {
        assert!(m.text.contains(&format!("\n{series} ")), "{series} missing: {}", m.text);
    }
    assert_eq!(m.value("skua_bus_reconnects_total", &[]), 0.0);
    // The registry is read every 250 ms: the lag stays far below a few seconds.
    let lag = m.value("skua_registry_lag_seconds", &[]);
    assert!((0.0..5.0).contains(&lag), "lag {lag}");
    for backend in ["bus", "presence", "store"] {
        assert_eq!(m.value("skua_backend_up", &[("backend", backend)]), 1.0, "{backend}");
    }
    assert!(m.text.contains("# TYPE skua_slow_consumer_disconnects_total counter"));
    assert_eq!(get(server.addr, "/healthz/backends").await, (200, "bus: up\npresence: up\nstore: up\n".to_owned()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_delay_fails_readiness_and_refuses_upgrades_before_sockets_close() {
    let delay = Duration::from_millis(1500);
    let server = TestServer::builder()
        .settings(|s| {
            s.edge.drain_delay = Some("1500ms".into());
            s.edge.shutdown_grace = Some("5s".into());
        })
        .spawn()
        .await;
    let addr = server.addr;
    let url = server.url();
    let mut alice = server.auth("dev-token-alice").await;
    alice.subscribe(TOPIC).await;
    let mut bob = server.auth("dev-token-bob").await;
    assert_eq!(get(addr, "/readyz").await.0, 200);

    let started = tokio::time::Instant::now();
    let shutdown = tokio::spawn(server.shutdown());
    let body = wait_for_status(addr, "/readyz", 503, Duration::from_secs(5)).await;
    assert_eq!(body, "draining");
    // During the delay: new upgrades are refused with 503, open sockets still carry traffic.
    match tokio_tungstenite::connect_async(url.as_str()).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => assert_eq!(r.status().as_u16(), 503),
        other => panic!("an upgrade during the drain delay must get 503: {other:?}"),
    }
    bob.publish_acked(TOPIC, "during the delay".into()).await;
    assert_eq!(alice.expect("message").await.str("data"), "during the delay");
    let m = Scrape::of(addr).await;
    assert_eq!((m.value("skua_draining", &[]), m.value("skua_ready", &[])), (1.0, 0.0));

    // Then every socket closes 1012, not before the delay is over.
    assert_eq!(alice.expect_close().await, (1012, "server_restart".to_owned()));
    assert_eq!(bob.expect_close().await.0, 1012);
    assert!(started.elapsed() >= delay, "closed after {:?}, before the {delay:?} delay", started.elapsed());
    assert!(shutdown.await.expect("shutdown task"), "drained within the grace");
}

/// Issue 32, item 4: `skua_drain_seconds` counts from the start of the drain, on the separate
/// metrics listener, which keeps serving while the client listener refuses upgrades (the
/// `SkuaDrainStuck` alert reads it; deploy/monitoring/skua-alerts.test.yaml).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_seconds_count_from_the_start_of_the_drain_on_the_metrics_listener() {
    let server = TestServer::builder()
        .settings(|s| {
            s.node.metrics_listen = Some("127.0.0.1:0".into());
            s.edge.drain_delay = Some("1500ms".into());
            s.edge.shutdown_grace = Some("5s".into());
        })
        .spawn()
        .await;
    let (addr, metrics) = (server.addr, server.metrics_addr.expect("metrics listener"));
    let before = Scrape::of(metrics).await;
    assert_eq!((before.value("skua_draining", &[]), before.value("skua_drain_seconds", &[])), (0.0, 0.0));
    let mut alice = server.auth("dev-token-alice").await;
    let shutdown = tokio::spawn(server.shutdown());
    wait_for_status(addr, "/readyz", 503, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let m = Scrape::of(metrics).await;
    assert_eq!(m.value("skua_draining", &[]), 1.0, "{}", m.text);
    let secs = m.value("skua_drain_seconds", &[]);
    assert!((0.2..1.5).contains(&secs), "skua_drain_seconds {secs} during the 1.5 s delay, 0.2 s in");
    assert_eq!(alice.expect_close().await.0, 1012);
    assert!(shutdown.await.expect("shutdown task"), "drained within the grace");
}

/// `clients` sessions of alice on `server`, then its shutdown: when each got its close (1012
/// `server_restart`), counted from the shutdown's start and sorted, and whether the node
/// drained within its grace.
async fn drain_close_times(server: TestServer, clients: u32) -> (Vec<Duration>, bool) {
    let mut waiting = Vec::new();
    for _ in 0..clients {
        let mut c = server.auth("dev-token-alice").await;
        waiting.push(tokio::spawn(async move {
            let close = c.expect_close().await;
            (close, tokio::time::Instant::now())
        }));
    }
    let started = tokio::time::Instant::now();
    let shutdown = tokio::spawn(server.shutdown());
    let mut at = Vec::new();
    for w in waiting {
        let ((code, reason), when) = w.await.expect("client task");
        assert_eq!((code, reason.as_str()), (1012, "server_restart"));
        at.push(when - started);
    }
    at.sort_unstable();
    (at, shutdown.await.expect("shutdown task"))
}

/// Issue 32, item 2: `drain_rate` holds a drain to that many closes a second, stretching the
/// window when `drain_spread` (here none) would close faster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_rate_stretches_the_window_of_a_large_drain() {
    // 5 sockets at 2 closes a second: the i-th at i × 0.5 s.
    let server = TestServer::builder()
        .settings(|s| {
            s.edge.drain_rate = Some(2);
            s.edge.shutdown_grace = Some("10s".into());
        })
        .spawn()
        .await;
    let (at, drained) = drain_close_times(server, 5).await;
    // The last close is due 4 × 0.5 s after the first; timers never fire early.
    let (first, last) = (at[0], at[at.len() - 1]);
    assert!(last - first >= Duration::from_millis(1900), "closes not held to 2 a second: {at:?}");
    assert!(drained, "drained within the grace");
}

/// Issue 23, item 4: with `drain_spread`, the 1012 closes of a draining node are spread over
/// the window instead of all landing in the same instant. The bounds come from the settings
/// (n connections closed at i/n of the window), with half the window as slack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_spread_spaces_the_1012_closes_over_the_window() {
    const CLIENTS: u32 = 6;
    let spread = Duration::from_secs(2);
    let server = TestServer::builder()
        .settings(|s| {
            s.edge.drain_spread = Some("2s".into());
            s.edge.shutdown_grace = Some("10s".into());
        })
        .spawn()
        .await;
    let (at, drained) = drain_close_times(server, CLIENTS).await;
    let (first, last) = (at[0], at[at.len() - 1]);
    // The last of n closes is due at (n-1)/n of the window: 5/6 × 2 s ≈ 1.67 s after the first.
    let due = spread * (CLIENTS - 1) / CLIENTS;
    assert!(last - first >= due / 2, "closes {at:?} not spread over {spread:?}");
    let early = at.iter().filter(|t| **t < first + spread / 4).count();
    assert!(early < at.len(), "every close in the first quarter of the window: {at:?}");
    assert!(drained, "drained within the grace");
}
