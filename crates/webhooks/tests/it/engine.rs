use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use skua_conformance::{ReceiverMode, WebhookReceiver, refusing_url};
use skua_core::webhook::{WebhookCall, WebhookKind, WebhookSecret, WebhookTarget};
use skua_webhooks::{DeliveryError, RetrySchedule, WebhookConfig, WebhookRequest, WebhookSender};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

fn call(kind: WebhookKind, url: &str, timeout_ms: Option<u32>) -> WebhookCall {
    WebhookCall {
        kind,
        target: Arc::new(WebhookTarget {
            url: url.into(),
            headers: vec![("X-Tenant".into(), "acme".into())],
            timeout_ms,
        }),
        secret: Some(WebhookSecret("whsec_test".into())),
        app_slug: "demo".into(),
        room_name: "General".into(),
    }
}

/// The engine's defaults with hydration allowed on loopback (the receivers here are local).
fn loopback_allowed() -> WebhookConfig {
    WebhookConfig { allow_loopback: true, ..WebhookConfig::default() }
}

fn sender(config: WebhookConfig) -> (WebhookSender, CancellationToken) {
    let stop = CancellationToken::new();
    let s = WebhookSender::new(config, &TaskTracker::new(), stop.clone()).expect("client builds");
    (s, stop)
}

fn fast_retries() -> RetrySchedule {
    RetrySchedule { delays: vec![Duration::from_millis(20), Duration::from_millis(20)] }
}

fn payload() -> serde_json::Map<String, serde_json::Value> {
    json!({"topicName": "messages"}).as_object().cloned().unwrap()
}

#[tokio::test]
async fn request_is_signed_posted_with_headers_and_answer_returned() {
    let rx = WebhookReceiver::start(ReceiverMode::Ok(json!({"items": [1, 2]}))).await;
    let (s, _stop) = sender(loopback_allowed());
    let req = WebhookRequest::new(call(WebhookKind::Hydration, &rx.url("/h"), None), payload());
    let r = s.call(&req, &RetrySchedule::hydration(), Duration::from_secs(5)).await.expect("delivered");
    assert_eq!(r.status, 200);
    assert!(r.json_content_type);
    assert_eq!(serde_json::from_slice::<serde_json::Value>(&r.body).unwrap(), json!({"items": [1, 2]}));
    let got = rx.wait_for(1).await;
    let g = &got[0];
    assert_eq!(g.method, "POST");
    assert_eq!(g.path, "/h");
    assert_eq!(g.header("content-type"), Some("application/json"));
    assert_eq!(g.header("x-tenant"), Some("acme"));
    assert!(g.signature_valid("whsec_test"), "{:?}", g.header("x-nolag-signature"));
    // The timestamped signature: `t=<unix s>,v1=<hex HMAC of "t.body">`, t within a minute.
    let v2 = g.header("x-nolag-signature-v2").expect("X-NoLag-Signature-V2");
    let (t, _) = v2.strip_prefix("t=").and_then(|r| r.split_once(",v1=")).expect("t=…,v1=…");
    let t: u64 = t.parse().unwrap();
    assert_eq!(v2, skua_webhooks::sign_v2(b"whsec_test", t, &g.body));
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    assert!(now.abs_diff(t) < 60, "{t} vs {now}");
    assert!(!g.signature_valid("other"));
    let body = g.json();
    assert_eq!(body["deliveryId"], req.delivery_id.to_string());
    assert!(body["timestamp"].is_u64());
    assert_eq!(body["topicName"], "messages");
    assert_eq!(s.metrics().deliveries(WebhookKind::Hydration, skua_webhooks::metrics::Outcome::Ok), 1);
}

#[tokio::test]
async fn server_errors_are_retried_with_the_same_delivery_id_then_fail() {
    let rx = WebhookReceiver::start(ReceiverMode::Status(503)).await;
    let (s, _stop) = sender(loopback_allowed());
    let req = WebhookRequest::new(call(WebhookKind::Hydration, &rx.url("/h"), None), payload());
    let e = s.call(&req, &fast_retries(), Duration::from_secs(5)).await.unwrap_err();
    assert!(matches!(e, DeliveryError::Status { status: 503 }), "{e:?}");
    let got = rx.wait_for(3).await;
    assert_eq!(got.len(), 3, "three attempts");
    assert!(got.iter().all(|g| g.body == got[0].body), "the same body (and deliveryId) on every attempt");
    assert_eq!(s.metrics().attempts(WebhookKind::Hydration), 3);
}

#[tokio::test]
async fn client_errors_are_not_retried() {
    let rx = WebhookReceiver::start(ReceiverMode::Status(404)).await;
    let (s, _stop) = sender(loopback_allowed());
    let req = WebhookRequest::new(call(WebhookKind::Hydration, &rx.url("/h"), None), payload());
    let e = s.call(&req, &fast_retries(), Duration::from_secs(5)).await.unwrap_err();
    assert!(matches!(e, DeliveryError::Status { status: 404 }), "{e:?}");
    assert_eq!(rx.requests().len(), 1);
}

#[tokio::test]
async fn refused_connections_are_transport_errors() {
    let url = refusing_url("/h").await;
    let (s, _stop) = sender(loopback_allowed());
    let req = WebhookRequest::new(call(WebhookKind::Hydration, &url, None), payload());
    let e = s.call(&req, &fast_retries(), Duration::from_secs(5)).await.unwrap_err();
    assert!(matches!(e, DeliveryError::Transport(_)), "{e:?}");
    assert_eq!(s.metrics().attempts(WebhookKind::Hydration), 3);
}

#[tokio::test]
async fn a_huge_answer_is_cut_at_the_cap() {
    let rx = WebhookReceiver::start(ReceiverMode::Huge(10 << 20)).await;
    let (s, _stop) = sender(WebhookConfig { max_response_bytes: 64 * 1024, ..loopback_allowed() });
    let req = WebhookRequest::new(call(WebhookKind::Hydration, &rx.url("/h"), None), payload());
    let e = s.call(&req, &fast_retries(), Duration::from_secs(5)).await.unwrap_err();
    assert!(matches!(e, DeliveryError::TooLarge { limit: 65536 }), "{e:?}");
    assert_eq!(rx.requests().len(), 1, "too large is not retried");
}

#[tokio::test]
async fn a_hanging_receiver_times_out_within_the_budget() {
    let rx = WebhookReceiver::start(ReceiverMode::Hang).await;
    let (s, _stop) = sender(loopback_allowed());
    let req = WebhookRequest::new(call(WebhookKind::Hydration, &rx.url("/h"), Some(300)), payload());
    let e = s.call(&req, &RetrySchedule::hydration(), Duration::from_millis(300)).await.unwrap_err();
    assert!(matches!(e, DeliveryError::Timeout { .. }), "{e:?}");
}

#[tokio::test]
async fn link_local_addresses_are_refused_at_send_time() {
    let (s, _stop) = sender(loopback_allowed());
    for url in ["http://169.254.169.254/latest", "http://[fe80::1]/x", "http://[::ffff:169.254.169.254]/"] {
        let req = WebhookRequest::new(call(WebhookKind::Trigger, url, Some(500)), payload());
        let e = s.call(&req, &fast_retries(), Duration::from_secs(1)).await.unwrap_err();
        assert!(matches!(e, DeliveryError::Refused { .. }), "{url}: {e:?}");
    }
    let (s, _stop) = sender(WebhookConfig { allowed_hosts: vec!["hooks.example.com".into()], ..loopback_allowed() });
    let rx = WebhookReceiver::start(ReceiverMode::Status(200)).await;
    let req = WebhookRequest::new(call(WebhookKind::Trigger, &rx.url("/t"), None), payload());
    let e = s.call(&req, &fast_retries(), Duration::from_secs(1)).await.unwrap_err();
    assert!(matches!(e, DeliveryError::Refused { .. }), "{e:?}");
    assert!(rx.requests().is_empty());
}

/// The parsed URL is reused between requests, the address rules are not: every request to a
/// link-local address or a host outside the allowlist is refused, even right after a request
/// to the same URL was sent (current-thread runtime: one thread, one URL cache).
#[tokio::test(flavor = "current_thread")]
async fn address_rules_apply_to_every_request_to_the_same_url() {
    let rx = WebhookReceiver::start(ReceiverMode::Ok(json!({}))).await;
    let url = rx.url("/h");
    let once = RetrySchedule { delays: Vec::new() };
    let (open, _s1) = sender(loopback_allowed());
    let req = WebhookRequest::new(call(WebhookKind::Trigger, &url, None), payload());
    open.call(&req, &once, Duration::from_secs(5)).await.expect("delivered");
    let config = WebhookConfig { allowed_hosts: vec!["example.com".into()], ..loopback_allowed() };
    let (closed, _s2) = sender(config);
    for _ in 0..2 {
        let e = closed.call(&req, &once, Duration::from_secs(5)).await.unwrap_err();
        assert!(matches!(e, DeliveryError::Refused { .. }), "{e:?}");
    }
    let meta = WebhookRequest::new(call(WebhookKind::Trigger, "http://169.254.169.254/latest", None), payload());
    for _ in 0..2 {
        let e = open.call(&meta, &once, Duration::from_secs(5)).await.unwrap_err();
        assert!(matches!(e, DeliveryError::Refused { .. }), "{e:?}");
    }
    assert_eq!(rx.wait_for(1).await.len(), 1, "only the allowed request arrived");
}

/// How [`counting_receiver`] ends a connection.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Close {
    /// Never (keep-alive).
    Never,
    /// After each answer, which says `Connection: close`.
    Announced,
    /// After each answer, which says nothing of it (as a server closing an idle connection).
    Silently,
}

/// A plain HTTP/1.1 receiver on a real socket that counts the connections it accepted and
/// answers every request `200` with an empty body, closing connections as `close` says
/// (`closed` is notified at each close).
async fn counting_receiver(close: Close) -> (String, Counter, Counter, Arc<tokio::sync::Notify>) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/t", listener.local_addr().unwrap());
    let conns = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let answered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let closed = Arc::new(tokio::sync::Notify::new());
    let (c, a, n) = (conns.clone(), answered.clone(), closed.clone());
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let (a, n) = (a.clone(), n.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    // One whole request: headers, then Content-Length bytes of body.
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        match sock.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                    let len: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    if buf.len() < end + 4 + len {
                        match sock.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                        continue;
                    }
                    buf.drain(..end + 4 + len);
                    let answer: &[u8] = if close == Close::Announced {
                        b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                    } else {
                        b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"
                    };
                    if sock.write_all(answer).await.is_err() {
                        return;
                    }
                    if close != Close::Never {
                        a.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let _ = sock.shutdown().await;
                        drop(sock);
                        n.notify_one();
                        return;
                    }
                    a.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            });
        }
    });
    (url, conns, answered, closed)
}

type Counter = Arc<std::sync::atomic::AtomicUsize>;

#[tokio::test]
async fn requests_to_one_target_reuse_a_kept_connection() {
    let (url, conns, answered, _) = counting_receiver(Close::Never).await;
    let (s, _stop) = sender(loopback_allowed());
    let once = RetrySchedule { delays: Vec::new() };
    for _ in 0..5 {
        let req = WebhookRequest::new(call(WebhookKind::Trigger, &url, None), payload());
        s.call(&req, &once, Duration::from_secs(5)).await.expect("delivered");
    }
    assert_eq!(answered.load(std::sync::atomic::Ordering::SeqCst), 5);
    assert_eq!(conns.load(std::sync::atomic::Ordering::SeqCst), 1, "one keep-alive connection for all five");
}

#[tokio::test]
async fn a_connection_the_receiver_closes_is_not_kept_and_costs_no_failed_attempt() {
    let (url, conns, answered, _) = counting_receiver(Close::Announced).await;
    let (s, _stop) = sender(loopback_allowed());
    // No retries: each request must succeed at its one attempt, although the receiver closes
    // every connection after its answer.
    let once = RetrySchedule { delays: Vec::new() };
    for _ in 0..3 {
        let req = WebhookRequest::new(call(WebhookKind::Trigger, &url, None), payload());
        s.call(&req, &once, Duration::from_secs(5)).await.expect("delivered");
    }
    assert_eq!(answered.load(std::sync::atomic::Ordering::SeqCst), 3);
    assert_eq!(conns.load(std::sync::atomic::Ordering::SeqCst), 3, "a new connection each time");
    assert_eq!(s.metrics().attempts(WebhookKind::Trigger), 3);
}

/// Triggers' path: one attempt on the caller's task, signed, with the target's headers, counted
/// like a call, on one kept connection.
#[tokio::test]
async fn post_once_signs_counts_and_reuses_the_connection() {
    let rx = WebhookReceiver::start(ReceiverMode::Ok(json!({}))).await;
    let (s, _stop) = sender(loopback_allowed());
    let c = call(WebhookKind::Trigger, &rx.url("/t"), None);
    for i in 0..3 {
        let body = bytes::Bytes::from(format!("{{\"deliveryId\":\"d{i}\"}}"));
        let r = s
            .post_once(WebhookKind::Trigger, &c.target, c.secret.as_ref(), &format!("d{i}"), body, false)
            .await
            .expect("delivered");
        assert_eq!(r.status, 200);
    }
    let got = rx.wait_for(3).await;
    for (i, g) in got.iter().enumerate() {
        assert_eq!((g.method.as_str(), g.path.as_str()), ("POST", "/t"));
        assert_eq!(g.header("x-tenant"), Some("acme"));
        assert_eq!(g.header("content-type"), Some("application/json"));
        assert!(g.signature_valid("whsec_test"), "{:?}", g.header("x-nolag-signature"));
        // The timestamped signature: `t=<unix s>,v1=<hex HMAC of "t.body">`, t within a minute.
        let v2 = g.header("x-nolag-signature-v2").expect("X-NoLag-Signature-V2");
        let (t, _) = v2.strip_prefix("t=").and_then(|r| r.split_once(",v1=")).expect("t=…,v1=…");
        let t: u64 = t.parse().unwrap();
        assert_eq!(v2, skua_webhooks::sign_v2(b"whsec_test", t, &g.body));
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        assert!(now.abs_diff(t) < 60, "{t} vs {now}");
        assert_eq!(g.json()["deliveryId"], format!("d{i}"));
    }
    assert_eq!(s.metrics().attempts(WebhookKind::Trigger), 3);
    assert_eq!(s.metrics().deliveries(WebhookKind::Trigger, skua_webhooks::metrics::Outcome::Ok), 3);

    // Without a secret: no signature header.
    let r = s.post_once(WebhookKind::Trigger, &c.target, None, "d3", bytes::Bytes::from_static(b"{}"), false).await;
    assert!(r.is_ok());
    assert_eq!(rx.wait_for(4).await[3].header("x-nolag-signature"), None);

    let (url, conns, answered, _) = counting_receiver(Close::Never).await;
    let c = call(WebhookKind::Trigger, &url, None);
    for i in 0..5 {
        let body = bytes::Bytes::from_static(b"{}");
        s.post_once(WebhookKind::Trigger, &c.target, None, &i.to_string(), body, false).await.expect("delivered");
    }
    assert_eq!(answered.load(std::sync::atomic::Ordering::SeqCst), 5);
    assert_eq!(conns.load(std::sync::atomic::Ordering::SeqCst), 1, "one keep-alive connection for all five");
}

/// A kept connection is not polled while idle (the request that takes it drives it): one the
/// receiver closed meanwhile, without saying so in its answer, is noticed when taken and
/// replaced, and the request still succeeds at its one attempt.
#[tokio::test]
async fn a_kept_connection_closed_while_idle_is_replaced() {
    let (url, conns, answered, closed) = counting_receiver(Close::Silently).await;
    let (s, _stop) = sender(loopback_allowed());
    let c = call(WebhookKind::Trigger, &url, None);
    for i in 0..3 {
        let body = bytes::Bytes::from_static(b"{}");
        s.post_once(WebhookKind::Trigger, &c.target, None, &i.to_string(), body, false).await.expect("delivered");
        // The next request starts once the receiver has closed this one's connection.
        closed.notified().await;
        assert_eq!(answered.load(std::sync::atomic::Ordering::SeqCst), i + 1);
    }
    assert_eq!(conns.load(std::sync::atomic::Ordering::SeqCst), 3, "a new connection each time");
    assert_eq!(s.metrics().attempts(WebhookKind::Trigger), 3, "no failed attempt");
}

/// Issue 33: hydration (whose answer reaches clients) is refused on loopback unless
/// `webhook_allow_loopback`; wake URLs (a client's) are refused on every internal address,
/// in every spelling the URL parser accepts, unless `wake_allowed_hosts` allows it; triggers
/// keep the operator's choice. Nothing reaches the receiver when refused.
#[tokio::test]
async fn loopback_hydration_and_internal_wake_urls_are_refused_unless_allowed() {
    let rx = WebhookReceiver::start(ReceiverMode::Ok(json!({}))).await;
    let port = rx.url("/").trim_start_matches("http://127.0.0.1:").trim_end_matches('/').to_owned();
    let (s, _stop) = sender(WebhookConfig::default());
    let budget = Duration::from_secs(2);
    let refused = |r: Result<skua_webhooks::WebhookResponse, DeliveryError>| match r {
        Err(DeliveryError::Refused { reason }) => reason,
        other => panic!("not refused: {other:?}"),
    };
    let req = WebhookRequest::new(call(WebhookKind::Hydration, &rx.url("/h"), None), payload());
    assert!(refused(s.call(&req, &RetrySchedule::hydration(), budget).await).contains("webhook_allow_loopback"));
    let req = WebhookRequest::new(call(WebhookKind::Hydration, &format!("http://localhost:{port}/h"), None), payload());
    refused(s.call(&req, &RetrySchedule::hydration(), budget).await);
    for url in [
        rx.url("/w"),
        format!("http://2130706433:{port}/w"),
        format!("http://0x7f000001:{port}/w"),
        format!("http://0177.0.0.1:{port}/w"),
        format!("http://[::ffff:127.0.0.1]:{port}/w"),
        format!("http://localhost:{port}/w"),
        "http://10.1.2.3/w".to_owned(),
        "http://100.64.0.1/w".to_owned(),
        "http://[fd00::1]/w".to_owned(),
    ] {
        let req = WebhookRequest::new(call(WebhookKind::Wake, &url, None), payload());
        let why = refused(s.call(&req, &RetrySchedule::hydration(), budget).await);
        assert!(why.contains("wake_allowed_hosts"), "{url}: {why}");
    }
    let req = WebhookRequest::new(call(WebhookKind::Trigger, &rx.url("/t"), None), payload());
    s.call(&req, &RetrySchedule::hydration(), budget).await.expect("triggers keep the operator's choice");
    assert_eq!(rx.wait_for(1).await.len(), 1);

    let allowed = WebhookConfig { wake_allowed_hosts: vec!["127.0.0.0/8".into()], ..loopback_allowed() };
    let (s, _stop) = sender(allowed);
    for url in [rx.url("/w"), format!("http://0x7f000001:{port}/w"), format!("http://[::ffff:127.0.0.1]:{port}/w")] {
        let req = WebhookRequest::new(call(WebhookKind::Wake, &url, None), payload());
        s.call(&req, &RetrySchedule::hydration(), budget).await.unwrap_or_else(|e| panic!("{url}: {e}"));
    }
    let req = WebhookRequest::new(call(WebhookKind::Hydration, &rx.url("/h"), None), payload());
    s.call(&req, &RetrySchedule::hydration(), budget).await.expect("webhook_allow_loopback");
    assert_eq!(rx.wait_for(5).await.len(), 5);
}

/// Reads one whole HTTP/1.1 request (headers, then `Content-Length` bytes of body) from
/// `sock`; false when the peer closed first.
async fn read_request(sock: &mut tokio::net::TcpStream) -> bool {
    use tokio::io::AsyncReadExt as _;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                return true;
            }
        }
        match sock.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// docs/webhooks.md: redirects are not followed; a 3xx answer is a failure (not retried), and
/// the URL it names is never requested.
#[tokio::test]
async fn a_redirect_is_a_failure_and_is_not_followed() {
    use tokio::io::AsyncWriteExt as _;
    let elsewhere = WebhookReceiver::start(ReceiverMode::Ok(json!({}))).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/h", listener.local_addr().unwrap());
    let answer = format!(
        "HTTP/1.1 307 Temporary Redirect\r\nlocation: {}\r\ncontent-length: 0\r\n\r\n",
        elsewhere.url("/moved")
    );
    let answered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let a = answered.clone();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            while read_request(&mut sock).await {
                a.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if sock.write_all(answer.as_bytes()).await.is_err() {
                    break;
                }
            }
        }
    });
    let (s, _stop) = sender(loopback_allowed());
    for kind in [WebhookKind::Hydration, WebhookKind::Trigger] {
        let req = WebhookRequest::new(call(kind, &url, None), payload());
        let e = s.call(&req, &fast_retries(), Duration::from_secs(5)).await.unwrap_err();
        assert!(matches!(e, DeliveryError::Status { status: 307 }), "{kind:?}: {e:?}");
    }
    assert_eq!(answered.load(std::sync::atomic::Ordering::SeqCst), 2, "one attempt each: a 3xx is not retried");
    assert!(elsewhere.requests().is_empty(), "the redirect's target was never requested");
}

/// `webhook_concurrency_per_target`: at most that many requests are in flight to one target
/// at once, the others wait their turn (within their timeout) and are then delivered. The
/// receiver holds each request 300 ms, so without the limit all eight would be in flight
/// together.
#[tokio::test]
async fn no_more_than_concurrency_per_target_requests_are_in_flight_to_one_target() {
    use std::sync::atomic::Ordering::SeqCst;
    use tokio::io::AsyncWriteExt as _;
    const LIMIT: usize = 2;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/t", listener.local_addr().unwrap());
    let in_flight = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let most = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (now, max) = (in_flight.clone(), most.clone());
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let (now, max) = (now.clone(), max.clone());
            tokio::spawn(async move {
                while read_request(&mut sock).await {
                    let n = now.fetch_add(1, SeqCst) + 1;
                    max.fetch_max(n, SeqCst);
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    now.fetch_sub(1, SeqCst);
                    if sock.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let (s, _stop) = sender(WebhookConfig { concurrency_per_target: LIMIT, ..loopback_allowed() });
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let req = WebhookRequest::new(call(WebhookKind::Trigger, &url, Some(20_000)), payload());
        let s = s.clone();
        calls.spawn(async move { s.call(&req, &RetrySchedule { delays: Vec::new() }, Duration::from_secs(20)).await });
    }
    while let Some(r) = calls.join_next().await {
        assert_eq!(r.unwrap().expect("every request is delivered in its turn").status, 200);
    }
    assert_eq!(most.load(SeqCst), LIMIT, "at most (and, with eight waiting, exactly) {LIMIT} in flight");
}

/// `webhook_connect_timeout`: a target that never completes the TCP handshake (a listener whose
/// backlog is full drops the SYNs) fails after the connect timeout, well inside the request's
/// own 20 s timeout.
#[tokio::test]
async fn a_target_that_never_accepts_fails_within_the_connect_timeout() {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(1).unwrap();
    let addr = listener.local_addr().unwrap();
    // Fill the accept queue (never accepted) until a connection attempt hangs.
    let mut held = Vec::new();
    loop {
        assert!(held.len() < 64, "the listener's backlog never filled");
        match tokio::time::timeout(Duration::from_millis(300), tokio::net::TcpStream::connect(addr)).await {
            Ok(Ok(c)) => held.push(c),
            Ok(Err(e)) => panic!("connecting to the full listener: {e}"),
            Err(_) => break,
        }
    }
    let connect_timeout = Duration::from_millis(500);
    let (s, _stop) = sender(WebhookConfig { connect_timeout, ..loopback_allowed() });
    let once = RetrySchedule { delays: Vec::new() };
    let req = WebhookRequest::new(call(WebhookKind::Trigger, &format!("http://{addr}/t"), Some(20_000)), payload());
    let started = std::time::Instant::now();
    let e = s.call(&req, &once, Duration::from_secs(20)).await.unwrap_err();
    let took = started.elapsed();
    assert!(matches!(e, DeliveryError::Timeout { after } if after == connect_timeout), "{e:?}");
    assert!(took >= connect_timeout && took < Duration::from_secs(5), "failed after {took:?}");
    drop(listener);
}

/// Run by [`no_proxy_is_used_even_when_the_environment_names_one`] in a child process whose
/// environment names a proxy (`SKUA_TEST_PROXY_CHILD` set): the request goes straight to the
/// receiver. Without that variable it does nothing.
#[tokio::test]
async fn proxy_child() {
    if std::env::var_os("SKUA_TEST_PROXY_CHILD").is_none() {
        return;
    }
    let rx = WebhookReceiver::start(ReceiverMode::Ok(json!({}))).await;
    let (s, _stop) = sender(loopback_allowed());
    let once = RetrySchedule { delays: Vec::new() };
    for kind in [WebhookKind::Hydration, WebhookKind::Trigger] {
        let req = WebhookRequest::new(call(kind, &rx.url("/direct"), Some(3_000)), payload());
        let r = s.call(&req, &once, Duration::from_secs(3)).await.expect("delivered directly");
        assert_eq!(r.status, 200);
    }
    assert_eq!(rx.wait_for(2).await.len(), 2);
}

/// docs/webhooks.md: no HTTP proxy is used, whatever the environment says (the usual proxy
/// variables point at a listener; the requests still reach the receiver directly and the
/// "proxy" sees no connection). The environment is set on a child run of this test binary, as
/// a test process cannot change its own environment safely.
#[tokio::test]
async fn no_proxy_is_used_even_when_the_environment_names_one() {
    let proxy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    proxy.set_nonblocking(true).unwrap();
    let proxy_url = format!("http://{}", proxy.local_addr().unwrap());
    let mut child = std::process::Command::new(std::env::current_exe().unwrap());
    child.args(["engine::proxy_child", "--exact", "--nocapture", "--test-threads=1"]).env("SKUA_TEST_PROXY_CHILD", "1");
    for var in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"] {
        child.env(var, &proxy_url);
    }
    child.env_remove("NO_PROXY").env_remove("no_proxy");
    let out = tokio::task::spawn_blocking(move || child.output()).await.unwrap().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the child run failed: {text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("1 passed"), "the child ran the test: {text}");
    match proxy.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the proxy was connected to: {other:?}"),
    }
}

/// The node's one webhook seam ([`skua_core::webhook::Poster`]): `Within` retries what may
/// succeed within its budget and counts one delivery; `Once` makes one attempt; the failure
/// carries the outcome label, the error and whether a retry may help; the deliveries show up
/// among the recent ones.
#[tokio::test]
async fn the_poster_seam_retries_within_its_budget_or_posts_once() {
    use skua_core::webhook::{Attempts, Post, Poster};
    let rx = WebhookReceiver::start(ReceiverMode::Status(503)).await;
    let (s, _stop) = sender(loopback_allowed());
    let poster: Arc<dyn Poster> = Arc::new(s.clone());
    let c = call(WebhookKind::Hydration, &rx.url("/h"), None);
    let body = skua_core::webhook::json_body(payload(), "d-1", 1);
    let delays = [Duration::from_millis(20), Duration::from_millis(20)];
    let post = Post { kind: c.kind, target: &c.target, secret: c.secret.as_ref(), delivery_id: "d-1", body };
    let e = poster
        .post(post.clone(), Attempts::Within { delays: &delays, budget: Duration::from_secs(5) })
        .await
        .unwrap_err();
    assert_eq!((e.outcome, e.retryable), ("status", true), "{e:?}");
    assert!(e.error.contains("503"), "{}", e.error);
    let got = rx.wait_for(3).await;
    assert_eq!(got.len(), 3, "three attempts within the budget");
    assert!(got.iter().all(|g| g.signature_valid("whsec_test") && g.json()["deliveryId"] == "d-1"));
    assert_eq!(s.metrics().attempts(WebhookKind::Hydration), 3);
    assert_eq!(s.metrics().deliveries(WebhookKind::Hydration, skua_webhooks::metrics::Outcome::Status), 1);

    let e = poster.post(post, Attempts::Once { retry: true }).await.unwrap_err();
    assert_eq!(e.outcome, "status");
    assert_eq!(rx.wait_for(4).await.len(), 4, "one more attempt");
    assert_eq!(s.metrics().deliveries(WebhookKind::Hydration, skua_webhooks::metrics::Outcome::Status), 2);

    let ok = WebhookReceiver::start(ReceiverMode::Ok(json!({"a": 1}))).await;
    let c = call(WebhookKind::Trigger, &ok.url("/t"), None);
    let post = Post {
        kind: c.kind,
        target: &c.target,
        secret: None,
        delivery_id: "d-2",
        body: bytes::Bytes::from_static(b"{}"),
    };
    let answer = poster.post(post, Attempts::Once { retry: false }).await.expect("delivered");
    assert_eq!(answer.status, 200);
    assert_eq!(serde_json::from_slice::<serde_json::Value>(&answer.body).unwrap(), json!({"a": 1}));
    let recent = poster.recent();
    assert_eq!(recent.len(), 3);
    assert_eq!((recent[0].kind, recent[0].outcome, recent[0].status), ("trigger", "ok", Some(200)));
    assert_eq!((recent[2].kind, recent[2].outcome, recent[2].status), ("hydration", "status", Some(503)));
}
