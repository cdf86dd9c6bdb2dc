//! Promises of docs/ that had no test (issue 22, item 3), each seen failing against a build that
//! breaks it.

use skua_testkit::{TestServer, frame};

/// `max_subscriptions_per_connection`: a subscribe past the limit gets `too_many_subscriptions`
/// naming the topic; re-subscribing a held topic does not count; an unsubscribe frees a slot.
#[tokio::test]
async fn a_subscribe_past_the_per_connection_limit_is_refused_with_too_many_subscriptions() {
    let server = TestServer::builder().settings(|s| s.max_subscriptions_per_connection = Some(2)).spawn().await;
    let mut c = server.auth("dev-token-alice").await;
    c.subscribe("demo/general/messages").await;
    c.subscribe("demo/general/events").await;
    c.send(frame! {"type" => "subscribe", "topic" => "demo/general/status"}).await;
    let e = c.expect_error("too_many_subscriptions").await;
    assert_eq!(e.str("topic"), "demo/general/status", "{e:?}");
    c.subscribe("demo/general/messages").await;
    c.send(frame! {"type" => "unsubscribe", "topic" => "demo/general/events"}).await;
    c.expect("unsubscribed").await;
    c.subscribe("demo/general/status").await;
    c.assert_nothing_pending().await;
}
