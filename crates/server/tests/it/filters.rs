//! Filters: OR strings, AND groups, wildcard, setFilters (N12–N14, N32, N34).

use rmpv::Value;
use skua_testkit::{TestServer, WsClient, frame};

const TOPIC: &str = "demo/general/events";

fn strs(v: &[&str]) -> Value {
    Value::Array(v.iter().map(|s| Value::from(*s)).collect())
}

async fn publish(c: &mut WsClient, data: &str, filter: Option<Value>, filters: Option<Value>) {
    let mut f = frame! {"type" => "publish", "topic" => TOPIC, "data" => data, "msgRef" => data};
    if let Value::Map(m) = &mut f {
        if let Some(x) = filter {
            m.push(("filter".into(), x));
        }
        if let Some(x) = filters {
            m.push(("filters".into(), x));
        }
    }
    c.send(f).await;
    c.expect("published").await;
}

async fn received(c: &mut WsClient) -> Vec<(String, Option<String>)> {
    c.drain_frames()
        .await
        .into_iter()
        .map(|f| {
            assert_eq!(f.ty(), "message");
            (f.str("data").to_owned(), f.get("filter").as_str().map(str::to_owned))
        })
        .collect()
}

#[tokio::test]
async fn or_and_and_filters_route_by_key_and_wildcard_sees_everything() {
    let server = TestServer::start().await;
    let mut filtered = server.auth("dev-token-alice").await;
    let and_group = Value::Array(vec![strs(&["Region:EU", "tier:gold"])]);
    let mut filters = vec![Value::from("vip")];
    filters.extend(and_group.as_array().unwrap().iter().cloned());
    filtered.send(frame! {"type" => "subscribe", "topic" => TOPIC, "filters" => Value::Array(filters)}).await;
    filtered.expect("subscribed").await;
    let mut wildcard = server.auth("dev-token-carol").await;
    wildcard.send(frame! {"type" => "subscribe", "topic" => TOPIC, "filters" => Value::Array(vec![])}).await;
    wildcard.expect("subscribed").await;

    let mut bob = server.auth("dev-token-bob").await;
    publish(&mut bob, "plain", None, None).await;
    publish(&mut bob, "vip", Some("vip".into()), None).await;
    publish(&mut bob, "VIP-case", Some("VIP".into()), None).await; // OR strings are verbatim
    publish(&mut bob, "and", None, Some(strs(&["TIER:GOLD", "region:eu"]))).await; // normalised
    publish(&mut bob, "half", None, Some(strs(&["tier:gold"]))).await;
    publish(&mut bob, "filters-wins-not", Some("other".into()), Some(strs(&["vip"]))).await; // filter wins

    // A sentinel both subscriptions match: once it arrives, everything before it has too.
    publish(&mut bob, "end", Some("vip".into()), None).await;
    let mut got = Vec::new();
    loop {
        let m = filtered.expect("message").await;
        got.push(m.str("data").to_owned());
        if got.last().is_some_and(|d| d == "end") {
            break;
        }
    }
    assert_eq!(got, vec!["vip", "and", "end"], "a filtered subscription never gets unfiltered publishes (N13)");
    let mut all = Vec::new();
    loop {
        let m = wildcard.expect("message").await;
        all.push(m.str("data").to_owned());
        if all.last().is_some_and(|d| d == "end") {
            break;
        }
    }
    assert_eq!(all, vec!["plain", "vip", "VIP-case", "and", "half", "filters-wins-not", "end"]);
}

#[tokio::test]
async fn wildcard_subscriber_gets_filtered_messages_with_their_key() {
    let server = TestServer::start().await;
    let mut wildcard = server.auth("dev-token-carol").await;
    wildcard.subscribe(TOPIC).await;
    let mut bob = server.auth("dev-token-bob").await;
    publish(&mut bob, "plain", None, None).await;
    publish(&mut bob, "f", Some("Region:US".into()), None).await;
    publish(&mut bob, "and", None, Some(strs(&["b", "A"]))).await;
    let want = vec![
        ("plain".to_owned(), None),
        ("f".to_owned(), Some("Region:US".to_owned())),
        ("and".to_owned(), Some("a|b".to_owned())),
    ];
    let mut got = Vec::new();
    for _ in 0..3 {
        let m = wildcard.expect("message").await;
        got.push((m.str("data").to_owned(), m.get("filter").as_str().map(str::to_owned)));
    }
    assert_eq!(got, want);
}

#[tokio::test]
async fn set_filters_replaces_the_set_and_echoes_it_as_sent() {
    let server = TestServer::start().await;
    let mut alice = server.auth("dev-token-alice").await;
    alice.send(frame! {"type" => "subscribe", "topic" => TOPIC, "filters" => strs(&["a"])}).await;
    alice.expect("subscribed").await;
    let list = Value::Array(vec![Value::from("b"), strs(&["Y", "x"])]);
    alice.send(frame! {"type" => "setFilters", "topic" => TOPIC, "filters" => list.clone()}).await;
    let u = alice.expect("filtersUpdated").await;
    assert_eq!(u.str("topic"), TOPIC);
    assert_eq!(u.get("filters"), &list, "echoed as sent (N14)");

    let mut bob = server.auth("dev-token-bob").await;
    publish(&mut bob, "a", Some("a".into()), None).await;
    publish(&mut bob, "b", Some("b".into()), None).await;
    publish(&mut bob, "xy", None, Some(strs(&["x", "y"]))).await;
    let got: Vec<String> = received(&mut alice).await.into_iter().map(|(d, _)| d).collect();
    assert_eq!(got, vec!["b", "xy"]);

    // Empty list → wildcard.
    alice.send(frame! {"type" => "setFilters", "topic" => TOPIC, "filters" => Value::Array(vec![])}).await;
    assert_eq!(alice.expect("filtersUpdated").await.get("filters"), &Value::Array(vec![]));
    publish(&mut bob, "plain", None, None).await;
    publish(&mut bob, "a2", Some("a".into()), None).await;
    let got: Vec<String> = received(&mut alice).await.into_iter().map(|(d, _)| d).collect();
    assert_eq!(got, vec!["plain", "a2"]);
}

#[tokio::test]
async fn resubscribe_replaces_the_subscription_in_place() {
    let server = TestServer::start().await;
    let mut alice = server.auth("dev-token-alice").await;
    alice.send(frame! {"type" => "subscribe", "topic" => TOPIC, "filters" => strs(&["a"])}).await;
    alice.expect("subscribed").await;
    alice.send(frame! {"type" => "subscribe", "topic" => TOPIC, "filters" => strs(&["b"])}).await;
    alice.expect("subscribed").await;
    let mut bob = server.auth("dev-token-bob").await;
    publish(&mut bob, "a", Some("a".into()), None).await;
    publish(&mut bob, "b", Some("b".into()), None).await;
    let got: Vec<String> = received(&mut alice).await.into_iter().map(|(d, _)| d).collect();
    assert_eq!(got, vec!["b"], "one subscription, with the new filters (N14)");
}

#[tokio::test]
async fn exactly_one_hundred_filters_are_allowed() {
    let server = TestServer::start().await;
    let mut alice = server.auth("dev-token-alice").await;
    let many: Vec<Value> = (0..100).map(|i| Value::from(format!("f{i}"))).collect();
    alice.send(frame! {"type" => "subscribe", "topic" => TOPIC, "filters" => Value::Array(many)}).await;
    alice.expect("subscribed").await;
    let mut bob = server.auth("dev-token-bob").await;
    publish(&mut bob, "last", Some("f99".into()), None).await;
    assert_eq!(alice.expect("message").await.str("data"), "last");
}
