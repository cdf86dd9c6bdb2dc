//! Webhooks (issue 14, N41–N43): configuration through the control plane, its checks and
//! propagation, and hydration on subscribe against a real recording HTTP receiver.

use std::time::Duration;

use serde_json::json;
use skua_control::pb;
use skua_core::address::{RoomKey, TopicAddress};
use skua_core::webhook::WebhookKind;
use skua_core::{AppId, ProjectId};
use skua_testkit::control::Deadline;
use skua_testkit::{ReceiverMode, TestCluster, TestServer, WebhookReceiver, frame, refusing_url};
use tonic::Code;

fn ok<T>(r: Result<tonic::Response<T>, tonic::Status>) -> T {
    r.unwrap_or_else(|s| panic!("{:?}: {}", s.code(), s.message())).into_inner()
}

fn target(url: &str) -> pb::WebhookTarget {
    pb::WebhookTarget { url: url.into(), ..Default::default() }
}

fn address(topic: &str) -> TopicAddress {
    TopicAddress {
        room: RoomKey {
            project: ProjectId::parse("demo-project").unwrap(),
            app: AppId::parse("demo-app").unwrap(),
            room: "general".into(),
        },
        topic: topic.into(),
    }
}

#[tokio::test]
async fn a_link_local_or_metadata_url_is_refused_at_configuration_with_a_clear_error() {
    let s = TestServer::builder().grpc().spawn().await;
    let mut c = s.control().await;
    for url in ["http://169.254.169.254/latest/meta-data", "http://[fe80::1]/h", "http://[::ffff:169.254.169.254]/"] {
        let e = c
            .update_app(pb::UpdateAppRequest {
                app: "demo".into(),
                hydration_webhook: Some(target(url)),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{url}");
        assert!(e.message().starts_with("hydration_webhook.url: "), "{}", e.message());
        assert!(e.message().contains("link-local or cloud metadata"), "{}", e.message());
    }
    let e = c
        .update_app(pb::UpdateAppRequest {
            app: "demo".into(),
            trigger_webhook: Some(target("ftp://x.example/")),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("not an http(s) URL"), "{}", e.message());
    let mut timeout = target("http://127.0.0.1:9/h");
    timeout.timeout_ms = 30_001;
    let e = c
        .update_app(pb::UpdateAppRequest { app: "demo".into(), hydration_webhook: Some(timeout), ..Default::default() })
        .await
        .unwrap_err();
    assert!(e.message().starts_with("hydration_webhook.timeout_ms"), "{}", e.message());
    let app = ok(c.get_app(pb::GetAppRequest { app: "demo".into(), ..Default::default() }).await);
    assert!(app.hydration_webhook.is_none() && app.trigger_webhook.is_none(), "nothing was stored");
}

#[tokio::test]
async fn an_operator_may_allow_link_local_and_restrict_hosts() {
    let s = TestServer::builder()
        .grpc()
        .settings(|s| {
            s.webhooks.webhook_allow_link_local = Some(true);
            s.webhooks.webhook_allowed_hosts = Some(vec!["169.254.169.254".into(), "*.example.com".into()]);
        })
        .spawn()
        .await;
    let mut c = s.control().await;
    ok(c.update_app(pb::UpdateAppRequest {
        app: "demo".into(),
        hydration_webhook: Some(target("http://169.254.169.254/h")),
        trigger_webhook: Some(target("https://hooks.example.com/t")),
        ..Default::default()
    })
    .await);
    let e = c
        .update_app(pb::UpdateAppRequest {
            app: "demo".into(),
            trigger_webhook: Some(target("https://example.org/t")),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(e.message().contains("webhook_allowed_hosts"), "{}", e.message());
}

#[tokio::test]
async fn the_secret_is_shown_once_and_rotates_and_webhooks_reach_every_node() {
    let cluster = TestCluster::embedded(2, TestServer::builder().grpc()).await;
    let mut c = cluster.node(0).control().await;
    let created = ok(c
        .create_app(pb::CreateAppRequest {
            slug: "hooks".into(),
            topics: vec![pb::Topic { name: "t".into(), ..Default::default() }],
            hydration_webhook: Some(target("http://127.0.0.1:9/h")),
            ..Default::default()
        })
        .await);
    assert!(created.webhook_secret.starts_with("whsec_"), "shown on creation");
    assert!(created.has_webhook_secret);
    let got = ok(c.get_app(pb::GetAppRequest { app: "hooks".into(), ..Default::default() }).await);
    assert!(got.webhook_secret.is_empty() && got.has_webhook_secret, "never shown again");
    let listed = ok(c.list_apps(pb::ListAppsRequest::default()).await);
    assert!(listed.apps.iter().all(|a| a.webhook_secret.is_empty()));
    let rotated =
        ok(c.rotate_webhook_secret(pb::RotateWebhookSecretRequest { app: "hooks".into(), ..Default::default() }).await);
    assert!(rotated.webhook_secret.starts_with("whsec_"));
    assert_ne!(rotated.webhook_secret, created.webhook_secret);

    // App-level hydration, then a topic's own onSubscribe wins; both reach node 1's registry.
    let mut headers = std::collections::HashMap::new();
    headers.insert("Authorization".to_owned(), "Bearer x".to_owned());
    let topic_hook = pb::WebhookTarget { url: "http://127.0.0.1:9/topic".into(), headers, timeout_ms: 2000 };
    let topics = ["messages", "status", "events", "results", "tasks"]
        .iter()
        .map(|t| pb::Topic {
            name: (*t).into(),
            logged: *t == "tasks",
            webhooks: (*t == "status")
                .then(|| pb::TopicWebhooks { on_subscribe: Some(topic_hook.clone()), on_publish: None }),
            ..Default::default()
        })
        .collect();
    ok(c.update_app(pb::UpdateAppRequest {
        app: "demo".into(),
        hydration_webhook: Some(target("http://127.0.0.1:9/app")),
        topics: Some(pb::TopicList { topics }),
        ..Default::default()
    })
    .await);
    let d = Deadline::new("the webhooks reaching node 1", Duration::from_secs(3));
    let registry = cluster.node(1).registry.clone();
    loop {
        let r = registry.load();
        if let (Some(app), Some(topic)) = (
            r.webhook(&address("messages"), WebhookKind::Hydration),
            r.webhook(&address("status"), WebhookKind::Hydration),
        ) {
            assert_eq!(app.target.url, "http://127.0.0.1:9/app");
            assert_eq!(topic.target.url, "http://127.0.0.1:9/topic", "the topic's own entry wins");
            assert_eq!(topic.target.timeout_ms, Some(2000));
            assert_eq!(topic.target.headers, vec![("Authorization".to_owned(), "Bearer x".to_owned())]);
            assert!(r.webhook(&address("messages"), WebhookKind::Trigger).is_none());
            assert!(!format!("{topic:?}").contains("Bearer x"), "header values stay out of Debug output");
            break;
        }
        d.tick().await;
    }
    // Removing the app-level one (empty url) leaves the topic's.
    ok(c.update_app(pb::UpdateAppRequest {
        app: "demo".into(),
        hydration_webhook: Some(target("")),
        ..Default::default()
    })
    .await);
    let app = ok(c.get_app(pb::GetAppRequest { app: "demo".into(), ..Default::default() }).await);
    assert!(app.hydration_webhook.is_none());
    assert!(app.topics.iter().any(|t| t.webhooks.as_ref().is_some_and(|w| w.on_subscribe.is_some())));
}

// ---- hydration (N43) ----

const MESSAGES: &str = "demo/general/messages";
const STATUS: &str = "demo/general/status";

/// A node with the control plane; the demo app's webhooks set as given; its new secret.
async fn hydrating_server(
    app_level: Option<pb::WebhookTarget>,
    status_topic: Option<pb::WebhookTarget>,
) -> (TestServer, String) {
    let s = TestServer::builder().grpc().spawn().await;
    let mut c = s.control().await;
    let topics = ["messages", "status", "events", "results", "tasks"]
        .iter()
        .map(|t| pb::Topic {
            name: (*t).into(),
            logged: *t == "tasks",
            webhooks: (*t == "status" && status_topic.is_some())
                .then(|| pb::TopicWebhooks { on_subscribe: status_topic.clone(), on_publish: None }),
            ..Default::default()
        })
        .collect();
    ok(c.update_app(pb::UpdateAppRequest {
        app: "demo".into(),
        hydration_webhook: app_level,
        topics: Some(pb::TopicList { topics }),
        ..Default::default()
    })
    .await);
    let secret =
        ok(c.rotate_webhook_secret(pb::RotateWebhookSecretRequest { app: "demo".into(), ..Default::default() }).await)
            .webhook_secret;
    (s, secret)
}

fn with_timeout(url: &str, timeout_ms: u32) -> pb::WebhookTarget {
    pb::WebhookTarget { url: url.into(), timeout_ms, ..Default::default() }
}

#[tokio::test]
async fn hydration_comes_after_subscribed_and_before_anything_published_after_it_signed() {
    let rx = WebhookReceiver::start(ReceiverMode::Slow(Duration::from_millis(400), json!({"recent": [1, 2]}))).await;
    let (s, secret) = hydrating_server(Some(target(&rx.url("/hydrate"))), None).await;
    let mut alice = s.auth("dev-token-alice").await;
    let mut bob = s.auth("dev-token-bob").await;
    alice.send(frame! {"type" => "subscribe", "topic" => MESSAGES}).await;
    assert_eq!(alice.next().await.ty(), "subscribed");
    // Published while the webhook is still answering: held until the hydration frame is out.
    bob.publish_acked(MESSAGES, "live".into()).await;
    let h = alice.next().await;
    assert_eq!(h.ty(), "hydration", "{h:?}");
    assert_eq!(h.str("topic"), "messages", "the bare topic name");
    assert_eq!(h.get("data")["recent"][1].as_u64(), Some(2));
    let m = alice.next().await;
    assert_eq!((m.ty(), m.get("data").as_str()), ("message", Some("live")));

    let got = rx.wait_for(1).await;
    let r = &got[0];
    assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/hydrate"));
    assert!(r.signature_valid(&secret), "X-NoLag-Signature is the HMAC-SHA256 of the body");
    let body = r.json();
    for (k, v) in [
        ("projectId", "demo-project"),
        ("app", "demo"),
        ("room", "general"),
        ("roomName", "general"),
        ("topicName", "messages"),
        ("actorId", "alice"),
        ("actorType", "user"),
    ] {
        assert_eq!(body[k], v, "{k} in {body}");
    }
    assert!(body["scope"].is_null() && body["timestamp"].is_u64());
    assert!(uuid::Uuid::parse_str(body["deliveryId"].as_str().unwrap()).is_ok());
    assert_eq!(s.state.metrics.hydrations.get("ok"), 1);
    let m = skua_testkit::http::Scrape::of(s.addr).await;
    assert_eq!(m.value("skua_hydrations_total", &[("result", "ok")]), 1.0);
    assert_eq!(m.value("skua_webhook_deliveries_total", &[("kind", "hydration"), ("outcome", "ok")]), 1.0);
    assert_eq!(m.value("skua_webhook_attempts_total", &[("kind", "hydration")]), 1.0);
}

#[tokio::test]
async fn the_topic_s_own_webhook_wins_over_the_app_s() {
    let rx = WebhookReceiver::start(ReceiverMode::Ok(json!({"from": "app"}))).await;
    rx.set_path_mode("/topic", ReceiverMode::Ok(json!({"from": "topic"})));
    let (s, _) = hydrating_server(Some(target(&rx.url("/app"))), Some(target(&rx.url("/topic")))).await;
    let mut alice = s.auth("dev-token-alice").await;
    alice.subscribe(STATUS).await;
    let h = alice.expect("hydration").await;
    assert_eq!((h.str("topic"), h.get("data")["from"].as_str()), ("status", Some("topic")));
    alice.subscribe(MESSAGES).await;
    let h = alice.expect("hydration").await;
    assert_eq!((h.str("topic"), h.get("data")["from"].as_str()), ("messages", Some("app")));
    let paths: Vec<String> = rx.wait_for(2).await.into_iter().map(|r| r.path).collect();
    assert_eq!(paths, ["/topic", "/app"]);
}

#[tokio::test]
async fn a_failing_webhook_sends_no_frame_and_the_subscription_keeps_working() {
    let rx = WebhookReceiver::start(ReceiverMode::Status(500)).await;
    rx.set_path_mode("/text", ReceiverMode::NonJson);
    rx.set_path_mode("/huge", ReceiverMode::Huge(10 << 20));
    for (path, reason, attempts) in [("/500", "status", 2), ("/text", "not_json", 1), ("/huge", "too_large", 1)] {
        // 1.5 s: the 1 s retry fits, the 2 s one does not.
        let (s, _) = hydrating_server(Some(with_timeout(&rx.url(path), 1500)), None).await;
        let before = rx.requests().len();
        let mut alice = s.auth("dev-token-alice").await;
        let mut bob = s.auth("dev-token-bob").await;
        alice.subscribe(MESSAGES).await;
        bob.publish_acked(MESSAGES, "after".into()).await;
        let m = alice.next().await;
        assert_eq!((m.ty(), m.get("data").as_str()), ("message", Some("after")), "{path}: no hydration frame");
        assert_eq!(s.state.metrics.hydrations.get(reason), 1, "{path}");
        assert_eq!(rx.requests().len() - before, attempts, "{path}: attempts");
        bob.publish_acked(MESSAGES, "again".into()).await;
        assert_eq!(alice.expect("message").await.get("data").as_str(), Some("again"));
    }
    let refused = refusing_url("/h").await;
    let (s, _) = hydrating_server(Some(with_timeout(&refused, 1500)), None).await;
    let mut alice = s.auth("dev-token-alice").await;
    let mut bob = s.auth("dev-token-bob").await;
    alice.subscribe(MESSAGES).await;
    bob.publish_acked(MESSAGES, "after".into()).await;
    assert_eq!(alice.next().await.get("data").as_str(), Some("after"));
    assert_eq!(s.state.metrics.hydrations.get("transport"), 1);
}

#[tokio::test]
async fn a_hanging_webhook_blocks_neither_publishing_nor_other_subscriptions() {
    let rx = WebhookReceiver::start(ReceiverMode::Hang).await;
    rx.set_path_mode("/ok", ReceiverMode::Ok(json!({"ok": true})));
    let (s, _) = hydrating_server(Some(with_timeout(&rx.url("/hang"), 2000)), Some(target(&rx.url("/ok")))).await;
    let mut alice = s.auth("dev-token-alice").await;
    let mut bob = s.auth("dev-token-bob").await;
    alice.subscribe(MESSAGES).await;
    alice.subscribe(STATUS).await;
    // Status is hydrated and live while messages still waits for its webhook.
    assert_eq!(alice.expect("hydration").await.str("topic"), "status");
    bob.publish_acked(MESSAGES, "held".into()).await;
    bob.publish_acked(STATUS, "live".into()).await;
    let m = alice.next().await;
    assert_eq!((m.str("topic"), m.get("data").as_str()), (STATUS, Some("live")));
    // After the timeout: no hydration frame for messages, and its held message follows.
    let m = alice.next_of_within("message", Duration::from_secs(5)).await;
    assert_eq!((m.str("topic"), m.get("data").as_str()), (MESSAGES, Some("held")));
    assert_eq!(s.state.metrics.hydrations.get("timeout"), 1);
}

#[tokio::test]
async fn a_restored_subscription_is_hydrated() {
    let rx = WebhookReceiver::start(ReceiverMode::Ok(json!({"n": 1}))).await;
    let (s, _) = hydrating_server(Some(target(&rx.url("/h"))), None).await;
    let mut alice = s.connect().await;
    alice.auth_session("dev-token-alice", None, false).await;
    alice.subscribe(MESSAGES).await;
    alice.expect("hydration").await;
    s.close_settled(alice).await;
    let mut back = s.connect().await;
    let reply = back.auth_session("dev-token-alice", None, true).await;
    assert_eq!(reply.get("restoredSubscriptions").as_array().map(Vec::len), Some(1));
    let h = back.expect("hydration").await;
    assert_eq!(h.str("topic"), "messages");
    assert_eq!(rx.wait_for(2).await.len(), 2);
}

#[tokio::test]
async fn a_webhook_set_through_one_node_hydrates_subscribers_of_another() {
    let rx = WebhookReceiver::start(ReceiverMode::Ok(json!({"node": 1}))).await;
    let cluster = TestCluster::embedded(2, TestServer::builder().grpc()).await;
    let mut c = cluster.node(0).control().await;
    ok(c.update_app(pb::UpdateAppRequest {
        app: "demo".into(),
        hydration_webhook: Some(target(&rx.url("/h"))),
        ..Default::default()
    })
    .await);
    let d = Deadline::new("the webhook reaching node 1", Duration::from_secs(3));
    while cluster.node(1).registry.load().webhook(&address("messages"), WebhookKind::Hydration).is_none() {
        d.tick().await;
    }
    let mut alice = cluster.node(1).auth("dev-token-alice").await;
    alice.subscribe(MESSAGES).await;
    let h = alice.expect("hydration").await;
    assert_eq!(h.get("data")["node"].as_u64(), Some(1));
}

#[tokio::test]
async fn a_durable_subscription_s_logged_messages_wait_for_its_hydration_too() {
    let rx = WebhookReceiver::start(ReceiverMode::Slow(Duration::from_millis(400), json!({"jobs": 0}))).await;
    let (s, _) = hydrating_server(Some(target(&rx.url("/h"))), None).await;
    // An agent with a clientId: a persistent session, so `tasks` (logged) is delivered durably.
    let mut agent = s.connect().await;
    agent.auth_session("dev-token-agent", Some("worker-1"), false).await;
    agent.send(frame! {"type" => "subscribe", "topic" => "demo/general/tasks"}).await;
    assert_eq!(agent.next().await.ty(), "subscribed");
    let mut bob = s.auth("dev-token-bob").await;
    bob.publish_acked("demo/general/tasks", "job-1".into()).await;
    let h = agent.next().await;
    assert_eq!((h.ty(), h.str("topic")), ("hydration", "tasks"), "{h:?}");
    let m = agent.next().await;
    assert_eq!((m.ty(), m.get("data").as_str()), ("message", Some("job-1")));
    assert!(m.has("msgId"), "delivered durably: {m:?}");
}
