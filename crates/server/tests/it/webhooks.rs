//! Webhooks (issue 14, N41–N43): configuration through the control plane, its checks and
//! propagation, and hydration on subscribe against a real recording HTTP receiver.

use std::time::Duration;

use skua_control::pb;
use skua_core::address::{RoomKey, TopicAddress};
use skua_core::webhook::WebhookKind;
use skua_core::{AppId, ProjectId};
use skua_testkit::control::Deadline;
use skua_testkit::{TestCluster, TestServer};
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
            s.webhook_allow_link_local = Some(true);
            s.webhook_allowed_hosts = Some(vec!["169.254.169.254".into(), "*.example.com".into()]);
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
