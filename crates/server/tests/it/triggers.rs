//! Trigger webhooks (issue 14, N44, N45) against a real recording HTTP receiver: one signed
//! trigger per accepted publish, none for refused ones, exactly one per publish in a cluster,
//! and retries → dead letter → operator retry with the same `deliveryId`. (The `kill -9` cases
//! run real processes: `tests/faults.rs`.)

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rmpv::Value;
use skua_control::pb;
use skua_testkit::control::Deadline;
use skua_testkit::postgres::TestDatabase;
use skua_testkit::server::TestServerBuilder;
use skua_testkit::webhook::{Mode, RecordedRequest, WebhookReceiver};
use skua_testkit::{TestCluster, TestServer, frame};

const SECRET: &str = "hooks-secret-1";

/// A project `hooks` whose app `h` posts every publish's trigger to `url` (app level), except
/// topic `other`, whose own `onPublish` goes to `other_url`. `jobs` is logged.
pub fn fixtures(url: &str, other_url: &str) -> String {
    format!(
        r#"
[[projects]]
id = "hooks"
max_message_size = 1024

[[projects.apps]]
id = "hooks-app"
slug = "h"
topics = ["events", "jobs", "other"]
logged_topics = ["jobs"]
webhook_secret = "{SECRET}"
trigger_webhook = {{ url = "{url}", headers = {{ "X-Test" = "yes" }} }}

[projects.apps.topic_configs.other.webhooks]
on_publish = {{ url = "{other_url}" }}

[[projects.apps.rooms]]
slug = "r"

[[actors]]
id = "pub"
project = "hooks"
type = "device"
tokens = ["hooks-token-pub"]
"#
    )
}

fn builder(receiver: &WebhookReceiver) -> TestServerBuilder {
    TestServer::builder().fixtures(&fixtures(&receiver.url("/t"), &receiver.url("/other")))
}

fn json(r: &RecordedRequest) -> serde_json::Value {
    assert!(r.signature_valid(SECRET), "signature of {:?}", String::from_utf8_lossy(&r.body));
    r.json()
}

async fn delivered_reaches(server: &TestServer, n: u64) {
    let t = server.state.triggers.as_ref().expect("the node posts triggers");
    let d = Deadline::new("the delivered counter", Duration::from_secs(10));
    while t.metrics.delivered.load(Ordering::Relaxed) < n {
        d.tick().await;
    }
}

#[tokio::test]
async fn every_accepted_publish_triggers_once_signed_and_refused_publishes_trigger_nothing() {
    let receiver = WebhookReceiver::start(Mode::Ok(serde_json::json!({}))).await;
    let server = builder(&receiver).spawn().await;
    let mut c = server.auth("hooks-token-pub").await;

    // Refused: an unknown topic, then data beyond the project's max_message_size.
    c.send(frame! {"type" => "publish", "topic" => "h/r/nope", "data" => "x", "msgRef" => "r1"}).await;
    c.expect("error").await;
    c.send(frame! {"type" => "publish", "topic" => "h/r/events", "data" => "x".repeat(2000), "msgRef" => "r2"}).await;
    c.expect("error").await;

    let data = Value::Map(vec![
        (Value::from("n"), Value::from(7)),
        (Value::from("bin"), Value::Binary(vec![1, 2, 3])),
        (Value::from("s"), Value::from("hé")),
    ]);
    c.publish_acked("h/r/events", data).await;
    c.send(frame! {"type" => "publish", "topic" => "h/r/events", "data" => 2, "filter" => "eu", "msgRef" => "f"}).await;
    c.expect("published").await;
    c.publish_acked("h/r/jobs", "logged".into()).await;
    c.publish_acked("h/r/other", "own".into()).await;
    let got = receiver.wait_for(4).await;
    delivered_reaches(&server, 4).await;
    let got_after = receiver.requests();
    assert_eq!(got_after.len(), 4, "one request per accepted publish, none for refused ones: {got_after:?}");

    let by_path = |p: &str| got.iter().filter(|r| r.path == p).collect::<Vec<_>>();
    let main = by_path("/t");
    assert_eq!(main.len(), 3);
    assert_eq!(by_path("/other").len(), 1, "the topic's own onPublish wins over the app's");
    for r in &got {
        assert_eq!(r.method, "POST");
        assert_eq!(r.header("content-type"), Some("application/json"));
    }
    assert_eq!(main[0].header("x-test"), Some("yes"), "the configured headers");

    let first = json(main[0]);
    assert_eq!(first["projectId"], "hooks");
    assert_eq!(first["app"], "h");
    assert_eq!(first["room"], "r");
    assert_eq!(first["roomName"], "r");
    assert_eq!(first["topicName"], "events");
    assert_eq!(first["topic"], "h/r/events");
    assert_eq!(first["actorId"], "pub");
    assert_eq!(first["actorType"], "device");
    assert_eq!(first["data"], serde_json::json!({"n": 7, "bin": {"$base64": "AQID"}, "s": "hé"}));
    assert_eq!(first["scope"], serde_json::Value::Null);
    assert!(first.get("msgId").is_none() && first.get("filter").is_none(), "{first}");
    assert!(first["timestamp"].as_u64().is_some_and(|t| t > 1_700_000_000_000));
    assert!(uuid::Uuid::parse_str(first["deliveryId"].as_str().unwrap()).is_ok());

    let filtered = json(main[1]);
    assert_eq!((filtered["data"].as_u64(), filtered["filter"].as_str()), (Some(2), Some("eu")));
    let logged = json(main[2]);
    assert_eq!(logged["data"], "logged");
    assert_eq!(logged["msgId"], logged["deliveryId"], "a logged trigger's deliveryId is its msgId");
    let ids: BTreeSet<String> = got.iter().map(|r| json(r)["deliveryId"].as_str().unwrap().to_owned()).collect();
    assert_eq!(ids.len(), 4, "distinct deliveryIds");
}

#[tokio::test]
async fn a_failing_receiver_gets_retries_then_a_dead_letter_that_an_operator_retry_delivers_with_the_same_id() {
    let receiver = WebhookReceiver::start(Mode::Status(500)).await;
    let server = builder(&receiver)
        .grpc()
        .settings(|s| {
            s.webhooks.webhook_trigger_attempts = Some(3);
            s.webhooks.webhook_trigger_first_retry = Some("50ms".into());
        })
        .spawn()
        .await;
    let mut c = server.auth("hooks-token-pub").await;
    c.publish_acked("h/r/jobs", "will fail".into()).await;
    c.publish_acked("h/r/events", "will fail too".into()).await;
    let tries = receiver.wait_for(6).await;
    let ids: BTreeSet<String> = tries.iter().map(|r| json(r)["deliveryId"].as_str().unwrap().to_owned()).collect();
    assert_eq!(ids.len(), 2, "every attempt of one trigger carries the same deliveryId");

    let mut control = server.control().await;
    let list = || pb::ListWebhookFailuresRequest { project_id: "hooks".into(), ..Default::default() };
    let d = Deadline::new("two dead letters", Duration::from_secs(10));
    let failures = loop {
        let f = control.list_webhook_failures(list()).await.unwrap().into_inner().failures;
        if f.len() == 2 {
            break f;
        }
        d.tick().await;
    };
    for f in &failures {
        assert_eq!((f.kind.as_str(), f.attempts, f.project_id.as_str()), ("trigger", 3, "hooks"));
        assert!(f.last_error.contains("500"), "{}", f.last_error);
        assert_eq!(f.target, receiver.url("/t"));
        assert!(ids.contains(&f.delivery_id));
        assert!(f.topic == "h/r/jobs" || f.topic == "h/r/events", "{}", f.topic);
    }
    assert_eq!(receiver.requests().len(), 6, "no attempt after the last one");

    // Still failing: the record stays, with one more attempt.
    let retry = |ids: Vec<String>| pb::RetryWebhookFailuresRequest {
        project_id: "hooks".into(),
        delivery_ids: ids,
        all: false,
    };
    let one = failures[0].delivery_id.clone();
    let r = control.retry_webhook_failures(retry(vec![one.clone()])).await.unwrap().into_inner().results;
    assert_eq!(r.len(), 1);
    assert!(!r[0].delivered && r[0].error.contains("500"), "{r:?}");
    let f = control.list_webhook_failures(list()).await.unwrap().into_inner().failures;
    assert_eq!(f.iter().find(|x| x.delivery_id == one).map(|x| x.attempts), Some(4));

    // The receiver is back: a retry of all delivers both, with their original bodies.
    receiver.set_mode(Mode::Ok(serde_json::json!({})));
    let all = pb::RetryWebhookFailuresRequest { project_id: "hooks".into(), delivery_ids: Vec::new(), all: true };
    let r = control.retry_webhook_failures(all).await.unwrap().into_inner().results;
    assert_eq!(r.iter().filter(|x| x.delivered).count(), 2, "{r:?}");
    let got = receiver.requests();
    let replayed = &got[got.len() - 2..];
    for r in replayed {
        let original = tries.iter().find(|t| json(t)["deliveryId"] == json(r)["deliveryId"]).expect("same deliveryId");
        assert_eq!(r.body, original.body, "the retry posts the stored body byte for byte");
    }
    assert!(control.list_webhook_failures(list()).await.unwrap().into_inner().failures.is_empty());

    // Purge: a new failure, purged by id; asking for nothing is an error.
    receiver.set_mode(Mode::Status(404));
    c.publish_acked("h/r/events", "not found".into()).await;
    let d = Deadline::new("a dead letter after a 404 (not retried)", Duration::from_secs(10));
    let f = loop {
        let f = control.list_webhook_failures(list()).await.unwrap().into_inner().failures;
        if let Some(x) = f.into_iter().next() {
            break x;
        }
        d.tick().await;
    };
    assert_eq!(f.attempts, 1, "a 4xx answer is not retried");
    let none = pb::PurgeWebhookFailuresRequest { project_id: "hooks".into(), ..Default::default() };
    assert_eq!(control.purge_webhook_failures(none).await.unwrap_err().code(), tonic::Code::InvalidArgument);
    let purge = pb::PurgeWebhookFailuresRequest {
        project_id: "hooks".into(),
        delivery_ids: vec![f.delivery_id.clone()],
        all: false,
    };
    assert_eq!(control.purge_webhook_failures(purge).await.unwrap().into_inner().purged, 1);
    assert!(control.list_webhook_failures(list()).await.unwrap().into_inner().failures.is_empty());
}

#[tokio::test]
async fn a_two_node_cluster_on_mqtt_and_postgres_fires_exactly_once_per_publish() {
    let Some(db) = TestDatabase::migrated().await else { return };
    let receiver = WebhookReceiver::start(Mode::Ok(serde_json::json!({}))).await;
    let url = db.url.clone();
    let b = builder(&receiver).settings(move |s| s.node.store = Some(url));
    let Some(cluster) = TestCluster::external(2, b).await else { return };
    let (n0, n1) = (cluster.node(0), cluster.node(1));
    // A subscriber on each node, so each node's hub sees every publication.
    let mut s0 = n0.auth("hooks-token-pub").await;
    let mut s1 = n1.auth("hooks-token-pub").await;
    let mut p0 = n0.auth("hooks-token-pub").await;
    let mut p1 = n1.auth("hooks-token-pub").await;
    for s in [&mut s0, &mut s1] {
        s.subscribe("h/r/events").await;
        s.subscribe("h/r/jobs").await;
    }
    for i in 0..5u64 {
        p0.publish_acked("h/r/events", Value::from(i)).await;
        p1.publish_acked("h/r/jobs", Value::from(100 + i)).await;
    }
    let got = receiver.wait_for(10).await;
    delivered_reaches(n0, 5).await;
    delivered_reaches(n1, 5).await;
    let data: Vec<u64> = got.iter().map(|r| json(r)["data"].as_u64().unwrap()).collect();
    let unique: BTreeSet<u64> = data.iter().copied().collect();
    assert_eq!(unique, (0..5).chain(100..105).collect(), "every publish once: {data:?}");
    // A duplicate would come after its original: one marker through each node, sent after
    // everything above, and only then the count (issue 35: a late duplicate is seen too).
    p0.publish_acked("h/r/events", Value::from(900u64)).await;
    p1.publish_acked("h/r/jobs", Value::from(901u64)).await;
    let got = receiver.wait_for(12).await;
    let data: Vec<u64> = got.iter().map(|r| json(r)["data"].as_u64().unwrap()).collect();
    assert_eq!(receiver.requests().len(), 12, "no duplicate before the markers: {data:?}");
    for (node, from) in [(n0, "events"), (n1, "jobs")] {
        let t = node.state.triggers.as_ref().unwrap();
        assert_eq!(t.metrics.queued.load(Ordering::Relaxed), 6, "the accepting node sends its own ({from})");
    }
}

/// Triggers start in batches: none leaves before the window the first one opened has passed,
/// and every one is posted exactly once (one request per publish, N44).
#[tokio::test]
async fn triggers_wait_for_the_batch_window_and_each_is_posted_once() {
    const WINDOW: Duration = Duration::from_millis(800);
    let receiver = WebhookReceiver::start(Mode::Ok(serde_json::json!({}))).await;
    let server = builder(&receiver).settings(|s| s.triggers.trigger_batch_window = Some("800ms".into())).spawn().await;
    let mut c = server.auth("hooks-token-pub").await;
    let t0 = std::time::Instant::now();
    for i in 0..5u64 {
        c.publish_acked("h/r/events", Value::from(i)).await;
    }
    let got = receiver.wait_for(5).await;
    assert!(t0.elapsed() >= WINDOW, "the triggers left after {:?}, before the window ended", t0.elapsed());
    delivered_reaches(&server, 5).await;
    let all = receiver.requests();
    let ids: BTreeSet<String> = all.iter().map(|r| json(r)["deliveryId"].to_string()).collect();
    assert_eq!((got.len(), all.len(), ids.len()), (5, 5, 5), "one request per publish");
}

#[tokio::test]
async fn a_hanging_receiver_blocks_no_publish_and_a_full_queue_dead_letters_only_non_logged_triggers() {
    let receiver = WebhookReceiver::start(Mode::Hang).await;
    let server = builder(&receiver)
        .settings(|s| {
            s.webhooks.webhook_queue = Some(1);
            s.webhooks.webhook_max_pending = Some(1);
        })
        .spawn()
        .await;
    let mut c = server.auth("hooks-token-pub").await;
    // At most two fit: one taken by the pump (in its batch, then in flight, hanging), one queued.
    for i in 0..10u64 {
        c.publish_acked("h/r/events", Value::from(i)).await;
    }
    c.publish_acked("h/r/jobs", "logged".into()).await;
    let t = server.state.triggers.as_ref().unwrap();
    let overflowed = t.metrics.overflowed.load(Ordering::Relaxed);
    assert!(overflowed >= 8, "overflowed {overflowed}");
    assert_eq!(t.metrics.deferred.load(Ordering::Relaxed), 1, "the logged one waits in the outbox");
    let d = Deadline::new("the overflows' dead letters", Duration::from_secs(10));
    let letters = loop {
        let all = skua_core::DeadLetterFilter::default();
        let l = server.state.store.list_dead_letters(all, 0, 100).await.unwrap();
        if l.len() as u64 >= overflowed {
            break l;
        }
        d.tick().await;
    };
    assert_eq!(letters.len() as u64, overflowed);
    for l in &letters {
        assert_eq!((l.topic.as_str(), l.attempts), ("hooks/hooks-app/r/events", 0));
        assert!(l.last_error.contains("queue was full"), "{}", l.last_error);
        let body: serde_json::Value = serde_json::from_slice(&l.body).unwrap();
        assert_eq!(body["deliveryId"], l.delivery_id.as_str());
    }
    assert_eq!(t.metrics.dead_lettered.load(Ordering::Relaxed), overflowed);
}

/// Sustained overload on SQLite: every non-logged trigger is queued, kept as a dead letter
/// (written in batches) or dropped and counted; none goes missing from the counters.
#[tokio::test]
async fn under_overload_every_trigger_is_queued_dead_lettered_or_counted_as_lost() {
    const PUBLISHES: u64 = 3000;
    let receiver = WebhookReceiver::start(Mode::Hang).await;
    let server = builder(&receiver)
        .settings(|s| {
            s.node.store = Some("sqlite::memory:".into());
            s.webhooks.webhook_queue = Some(1);
            s.webhooks.webhook_max_pending = Some(1);
            s.edge.rate_limit = Some(100_000);
        })
        .spawn()
        .await;
    let mut c = server.auth("hooks-token-pub").await;
    // Pipelined: the overflow writer may fall behind, then triggers are dropped (counted).
    for i in 0..PUBLISHES - 1 {
        c.send(frame! {"type" => "publish", "topic" => "h/r/events", "data" => i}).await;
    }
    c.publish_acked("h/r/events", "last".into()).await;
    let t = server.state.triggers.as_ref().unwrap();
    let m = &t.metrics;
    let (queued, overflowed) = (m.queued.load(Ordering::Relaxed), m.overflowed.load(Ordering::Relaxed));
    assert_eq!(queued + overflowed, PUBLISHES, "queued {queued}, overflowed {overflowed}");
    assert!(queued <= 2, "one taken by the pump (hanging), one queued: {queued}");
    let d = Deadline::new("every overflow dead-lettered or counted lost", Duration::from_secs(20));
    while m.dead_lettered.load(Ordering::Relaxed) + m.lost.load(Ordering::Relaxed) < overflowed {
        d.tick().await;
    }
    let (dead, lost) = (m.dead_lettered.load(Ordering::Relaxed), m.lost.load(Ordering::Relaxed));
    assert_eq!(queued + dead + lost + m.delivered.load(Ordering::Relaxed), PUBLISHES, "dead {dead}, lost {lost}");
    let all = skua_core::DeadLetterFilter::default();
    let letters = server.state.store.list_dead_letters(all, 0, u32::MAX).await.unwrap();
    assert_eq!(letters.len() as u64 + m.dead_letters_dropped.load(Ordering::Relaxed), dead);
    let ids: BTreeSet<&str> = letters.iter().map(|l| l.delivery_id.as_str()).collect();
    assert_eq!(ids.len(), letters.len(), "one dead letter per trigger");
}

#[tokio::test]
async fn a_control_plane_publish_triggers_too() {
    let receiver = WebhookReceiver::start(Mode::Ok(serde_json::json!({}))).await;
    let server = builder(&receiver).grpc().spawn().await;
    let mut control = server.control().await;
    let data = skua_testkit::encode(&Value::from("from the backend"));
    let r = pb::PublishRequest { project_id: "hooks".into(), topic: "h/r/jobs".into(), data, ..Default::default() };
    control.publish(r).await.unwrap();
    let got = receiver.wait_for(1).await;
    let body = json(&got[0]);
    assert_eq!((body["actorId"].as_str(), body["actorType"].as_str()), (Some("server"), Some("server")));
    assert_eq!(body["data"], "from the backend");
    assert_eq!(body["msgId"], body["deliveryId"]);
}

// ---------------------------------------------------------------------------------------------
// Byte budgets (issue 33, item 1): a trigger body is bounded before it is queued, the queues are
// bounded in bytes (for the node and per project), dead letters in bytes per project.

/// Dead letters of the node's store, once there are at least `n`.
async fn dead_letters_reach(server: &TestServer, n: usize) -> Vec<skua_core::DeadLetter> {
    let d = Deadline::new("the dead letters", Duration::from_secs(10));
    loop {
        let all = skua_core::DeadLetterFilter::default();
        let l = server.state.store.list_dead_letters(all, 0, 1000).await.unwrap();
        if l.len() >= n {
            return l;
        }
        d.tick().await;
    }
}

/// 1 000 `nil`s: 1 003 bytes of MessagePack (within the project's 1 024), 5 001 of JSON.
fn nils() -> Value {
    Value::Array(vec![Value::Nil; 1000])
}

#[tokio::test]
async fn a_trigger_whose_json_would_pass_the_bound_is_dead_lettered_with_data_omitted_never_queued_whole() {
    let receiver = WebhookReceiver::start(Mode::Ok(serde_json::json!({}))).await;
    let server = builder(&receiver).settings(|s| s.triggers.trigger_max_body_bytes = Some(4096)).spawn().await;
    let mut c = server.auth("hooks-token-pub").await;
    // The publishes themselves succeed, logged or not.
    c.publish_acked("h/r/events", nils()).await;
    c.publish_acked("h/r/jobs", nils()).await;
    c.publish_acked("h/r/events", "small".into()).await;
    let letters = dead_letters_reach(&server, 2).await;
    let got = receiver.wait_for(1).await;
    delivered_reaches(&server, 1).await;
    assert_eq!(json(&got[0])["data"], "small");
    let t = server.state.triggers.as_ref().unwrap();
    assert_eq!(t.metrics.too_large.load(Ordering::Relaxed), 2);
    assert_eq!(t.metrics.queued.load(Ordering::Relaxed), 1, "only the small one was queued");
    assert_eq!(letters.len(), 2);
    let mut topics = BTreeSet::new();
    for l in &letters {
        topics.insert(l.topic.clone());
        assert!(l.last_error.contains("trigger_max_body_bytes"), "{}", l.last_error);
        assert!(l.body.len() < 1024, "the dead letter keeps no expanded data: {} bytes", l.body.len());
        let body: serde_json::Value = serde_json::from_slice(&l.body).unwrap();
        assert_eq!(body["data"], serde_json::json!({"$omitted": "trigger_max_body_bytes", "size": 1003}));
        assert_eq!(body["deliveryId"], l.delivery_id.as_str());
        assert_eq!(l.attempts, 0, "never sent");
    }
    assert_eq!(topics, BTreeSet::from(["hooks/hooks-app/r/events".to_owned(), "hooks/hooks-app/r/jobs".to_owned()]));
    // The logged one left the outbox with its dead letter: no scan sends it later.
    let far = u64::MAX / 4;
    assert!(server.state.store.claim_outbox("someone", far, far + 1, 10).await.unwrap().is_empty());
    assert_eq!(receiver.requests().len(), 1, "nothing else was posted");
    let m = skua_testkit::http::Scrape::of(server.addr).await;
    assert_eq!(m.value("skua_triggers_total", &[("outcome", "too_large")]), 2.0);
}

#[tokio::test]
async fn a_trigger_queue_full_in_bytes_refuses_more_and_counts_them() {
    const BUDGET: usize = 8 * 1024;
    let receiver = WebhookReceiver::start(Mode::Hang).await;
    let server = builder(&receiver)
        .settings(|s| {
            // Room for 10 000 entries, but only 8 KiB of bodies.
            s.webhooks.webhook_max_pending = Some(1);
            s.triggers.trigger_queue_bytes = Some(BUDGET);
            s.triggers.trigger_max_body_bytes = Some(4096);
        })
        .spawn()
        .await;
    let mut c = server.auth("hooks-token-pub").await;
    // Bodies of about 1.3 KB each: six fit.
    for i in 0..20u64 {
        c.publish_acked("h/r/events", Value::from(format!("{i:04}{}", "x".repeat(900)))).await;
    }
    let t = server.state.triggers.as_ref().unwrap();
    let (queued, overflowed) = (t.metrics.queued.load(Ordering::Relaxed), t.metrics.overflowed.load(Ordering::Relaxed));
    assert_eq!(queued + overflowed, 20);
    assert!((4..=7).contains(&queued), "about 8 KiB of 1.3 KB bodies queued: {queued}");
    assert!(t.queued_bytes().0 <= BUDGET, "{} bytes held", t.queued_bytes().0);
    assert_eq!(t.metrics.over_queue_bytes.load(Ordering::Relaxed), overflowed, "each refusal counted");
    let m = skua_testkit::http::Scrape::of(server.addr).await;
    assert_eq!(m.value("skua_trigger_budget_refusals_total", &[("budget", "queue")]), overflowed as f64);
    assert!(m.value("skua_trigger_queue_bytes", &[]) <= BUDGET as f64);
    // The refused ones became dead letters, as with a queue full in entries.
    let letters = dead_letters_reach(&server, overflowed as usize).await;
    assert!(letters.iter().all(|l| l.last_error.contains("queue was full")));
}

/// Two projects posting triggers to `url`: `hooks` (as [`fixtures`]) and `quiet`.
fn two_projects(url: &str) -> String {
    format!(
        r#"{}
[[projects]]
id = "quiet"

[[projects.apps]]
id = "quiet-app"
slug = "q"
topics = ["events"]
webhook_secret = "{SECRET}"
trigger_webhook = {{ url = "{url}" }}

[[projects.apps.rooms]]
slug = "r"

[[actors]]
id = "quiet-pub"
project = "quiet"
type = "device"
tokens = ["quiet-token-pub"]
"#,
        fixtures(url, url)
    )
}

#[tokio::test]
async fn one_project_cannot_take_the_whole_trigger_queue() {
    const SHARE: usize = 4 * 1024;
    let receiver = WebhookReceiver::start(Mode::Hang).await;
    let server = TestServer::builder()
        .fixtures(&two_projects(&receiver.url("/t")))
        .settings(|s| {
            s.webhooks.webhook_max_pending = Some(1);
            s.triggers.trigger_queue_bytes = Some(64 * 1024);
            s.triggers.trigger_queue_bytes_per_project = Some(SHARE);
            s.triggers.trigger_max_body_bytes = Some(2048);
        })
        .spawn()
        .await;
    let mut noisy = server.auth("hooks-token-pub").await;
    for i in 0..20u64 {
        noisy.publish_acked("h/r/events", Value::from(format!("{i:04}{}", "x".repeat(900)))).await;
    }
    let t = server.state.triggers.as_ref().unwrap();
    let hooks = skua_core::ProjectId::parse("hooks").unwrap();
    assert!(t.queued_bytes_of(&hooks) <= SHARE, "{}", t.queued_bytes_of(&hooks));
    let refused = t.metrics.over_project_bytes.load(Ordering::Relaxed);
    assert!(refused >= 14, "refused by the project's share: {refused}");
    assert_eq!(t.metrics.over_queue_bytes.load(Ordering::Relaxed), 0, "the node had room");
    // The other project's triggers are still queued.
    let before = t.metrics.queued.load(Ordering::Relaxed);
    let mut quiet = server.auth("quiet-token-pub").await;
    for _ in 0..3 {
        quiet.publish_acked("q/r/events", Value::from("x".repeat(900))).await;
    }
    assert_eq!(t.metrics.queued.load(Ordering::Relaxed), before + 3);
    assert_eq!(t.metrics.over_project_bytes.load(Ordering::Relaxed), refused);
    assert!(t.queued_bytes_of(&skua_core::ProjectId::parse("quiet").unwrap()) > 0);
}

#[tokio::test]
async fn dead_letters_are_capped_in_bytes_per_project_dropping_the_oldest() {
    const CAP: u64 = 5000;
    let receiver = WebhookReceiver::start(Mode::Status(404)).await;
    let server =
        builder(&receiver).settings(|s| s.triggers.webhook_dead_letter_bytes_per_project = Some(CAP)).spawn().await;
    let mut c = server.auth("hooks-token-pub").await;
    for i in 0..10u64 {
        c.publish_acked("h/r/events", Value::from(format!("{i:04}{}", "x".repeat(900)))).await;
    }
    let t = server.state.triggers.as_ref().unwrap();
    let d = Deadline::new("ten dead letters written", Duration::from_secs(10));
    while t.metrics.dead_lettered.load(Ordering::Relaxed) < 10 {
        d.tick().await;
    }
    let all = skua_core::DeadLetterFilter::default();
    let letters = server.state.store.list_dead_letters(all, 0, 100).await.unwrap();
    let bytes: usize = letters.iter().map(|l| l.body.len()).sum();
    assert!(bytes as u64 <= CAP, "{bytes} bytes kept");
    assert!((2..=4).contains(&letters.len()), "about 5000 bytes of 1.3 KB bodies: {}", letters.len());
    assert_eq!(letters.len() as u64 + t.metrics.dead_letters_dropped.load(Ordering::Relaxed), 10);
    let m = skua_testkit::http::Scrape::of(server.addr).await;
    assert_eq!(
        m.value("skua_webhook_dead_letters_dropped_total", &[]),
        (10 - letters.len()) as f64,
        "the drops are on /metrics"
    );
    // The newest are the ones kept.
    let last = letters.last().map(|l| serde_json::from_slice::<serde_json::Value>(&l.body).unwrap());
    assert!(last.is_some_and(|b| b["data"].as_str().is_some_and(|d| d.starts_with("0009"))));
}

/// docs/webhooks.md, Retries: a failing trigger's attempts are spaced by
/// `webhook_trigger_first_retry`, doubling after each failure (here 300 ms, 600 ms, 1.2 s).
/// Each gap is at least its delay (never early) and at most its delay plus 1 s of slack for a
/// loaded machine (a schedule that did not double would be 1.2 s short on the last gap).
#[tokio::test]
async fn a_failing_trigger_s_attempts_follow_the_documented_doubling_schedule() {
    let receiver = WebhookReceiver::start(Mode::Status(503)).await;
    let server = builder(&receiver)
        .settings(|s| {
            s.webhooks.webhook_trigger_attempts = Some(4);
            s.webhooks.webhook_trigger_first_retry = Some("300ms".into());
        })
        .spawn()
        .await;
    let mut c = server.auth("hooks-token-pub").await;
    c.publish_acked("h/r/events", "will fail".into()).await;
    let arrivals: Vec<_> = receiver.wait_for(4).await.iter().map(|r| r.at).collect();
    let nominal = [300u64, 600, 1200].map(Duration::from_millis);
    for (i, want) in nominal.iter().enumerate() {
        let gap = arrivals[i + 1] - arrivals[i];
        assert!(gap >= *want, "attempt {} came {gap:?} after the previous one, before its {want:?}", i + 2);
        assert!(
            gap < *want + Duration::from_secs(1),
            "attempt {} came {gap:?} after the previous one (want {want:?})",
            i + 2
        );
    }
    let ids: BTreeSet<String> =
        receiver.requests().iter().map(|r| json(r)["deliveryId"].as_str().unwrap().to_owned()).collect();
    assert_eq!(ids.len(), 1, "four attempts of one trigger");
    // On /metrics (docs/operations.md): four failed attempts, three of them retries.
    let d = Deadline::new("the failed attempts counted", Duration::from_secs(5));
    loop {
        let m = skua_testkit::http::Scrape::of(server.addr).await;
        let failed = m.value_or_zero("skua_trigger_attempts_failed_total", &[]);
        let attempts = m.value_or_zero("skua_webhook_attempts_total", &[("kind", "trigger")]);
        let retries = m.value_or_zero("skua_webhook_retries_total", &[("kind", "trigger")]);
        if (failed, attempts, retries) == (4.0, 4.0, 3.0) {
            break;
        }
        assert!(d.elapsed() < Duration::from_secs(4), "failed {failed}, attempts {attempts}, retries {retries}");
        d.tick().await;
    }
}
