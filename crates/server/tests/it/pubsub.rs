//! Publish/subscribe: delivery, payload fidelity, echo rule, qos/retain, load balancing.

use rmpv::Value;
use skua_testkit::{TestServer, frame};

const TOPIC: &str = "demo/general/messages";

#[tokio::test]
async fn subscriber_receives_publish_with_metadata_and_exact_payload_bytes() {
    let server = TestServer::start().await;
    let mut alice = server.auth("dev-token-alice").await;
    let mut bob = server.auth("dev-token-bob").await;
    alice.send(frame! {"type" => "subscribe", "topic" => TOPIC, "qos" => 2}).await;
    let sub = alice.expect("subscribed").await;
    assert_eq!(sub.str("topic"), TOPIC);
    assert_eq!(sub.get("loadBalance"), &Value::Boolean(false));
    // uint16-encoded 5 and a bin value: the encoding must survive byte for byte (N2).
    let data = [0x82, 0xa1, b'n', 0xcd, 0x00, 0x05, 0xa1, b'b', 0xc4, 0x02, 0xff, 0x00];
    let mut publish = skua_testkit::encode(&frame! {"type" => "publish", "topic" => TOPIC, "msgRef" => "r-1"});
    publish[0] += 1; // one more map entry
    publish.extend_from_slice(&[0xa4, b'd', b'a', b't', b'a']);
    publish.extend_from_slice(&data);
    let before = skua_testkit::now_s() * 1000;
    bob.send_bytes(publish).await;
    let ack = bob.expect("published").await;
    assert_eq!((ack.str("topic"), ack.str("msgRef")), (TOPIC, "r-1"));
    let m = alice.expect("message").await;
    assert_eq!(m.str("topic"), TOPIC);
    assert_eq!(m.str("from"), "bob");
    let ts = u64::try_from(m.int("timestamp")).unwrap();
    assert!(ts >= before && ts <= before + 60_000, "timestamp {ts} is unix ms (N19)");
    assert!(!m.has("filter") && !m.has("msgId") && !m.has("requiresAck") && !m.has("isReplay"));
    assert_eq!(m.get("data"), &rmpv::decode::read_value(&mut &data[..]).unwrap());
    assert_eq!(m.get("data")["b"], Value::Binary(vec![0xff, 0x00]), "bin stays bin");
}

#[tokio::test]
async fn payload_integer_width_is_forwarded_untouched() {
    let server = TestServer::start().await;
    let mut alice = server.auth("dev-token-alice").await;
    let mut bob = server.auth("dev-token-bob").await;
    alice.subscribe(TOPIC).await;
    // data = uint32 7 (0xce 00 00 00 07): not the shortest form.
    let mut publish = skua_testkit::encode(&frame! {"type" => "publish", "topic" => TOPIC});
    publish[0] += 1;
    publish.extend_from_slice(&[0xa4, b'd', b'a', b't', b'a', 0xce, 0, 0, 0, 7]);
    bob.send_bytes(publish).await;
    let raw = alice.next_raw().await;
    assert!(
        raw.windows(10).any(|w| w == [0xa4, b'd', b'a', b't', b'a', 0xce, 0, 0, 0, 7]),
        "data bytes changed: {raw:x?}"
    );
}

#[tokio::test]
async fn publisher_never_receives_its_own_message_on_any_connection() {
    let server = TestServer::start().await;
    let mut alice1 = server.auth("dev-token-alice").await;
    let mut alice2 = server.auth("dev-token-alice").await;
    let mut bob = server.auth("dev-token-bob").await;
    for c in [&mut alice1, &mut alice2, &mut bob] {
        c.subscribe(TOPIC).await;
    }
    alice1
        .send(frame! {"type" => "publish", "topic" => TOPIC, "data" => "mine", "echo" => true, "msgRef" => "1"})
        .await;
    alice1.expect("published").await;
    assert_eq!(bob.expect("message").await.get("data").as_str(), Some("mine"));
    // bob got it, so the fan-out is done: alice's connections have nothing queued (N16).
    alice1.assert_nothing_pending().await;
    alice2.assert_nothing_pending().await;
}

#[tokio::test]
async fn unsubscribe_stops_delivery_and_is_idempotent() {
    let server = TestServer::start().await;
    let mut alice = server.auth("dev-token-alice").await;
    let mut bob = server.auth("dev-token-bob").await;
    alice.subscribe(TOPIC).await;
    alice.subscribe("demo/general/status").await;
    alice.send(frame! {"type" => "unsubscribe", "topic" => TOPIC}).await;
    assert_eq!(alice.expect("unsubscribed").await.str("topic"), TOPIC);
    alice.send(frame! {"type" => "unsubscribe", "topic" => TOPIC}).await;
    alice.expect("unsubscribed").await;
    bob.publish_acked(TOPIC, Value::from("gone")).await;
    bob.publish_acked("demo/general/status", Value::from("sentinel")).await;
    let m = alice.expect("message").await;
    assert_eq!(m.get("data").as_str(), Some("sentinel"), "the unsubscribed topic delivered nothing");
}

#[tokio::test]
async fn messages_from_one_publisher_arrive_in_order() {
    let server = TestServer::builder().settings(|s| s.edge.rate_limit = Some(1000)).spawn().await;
    let mut alice = server.auth("dev-token-alice").await;
    let mut bob = server.auth("dev-token-bob").await;
    alice.subscribe(TOPIC).await;
    for i in 0..500u32 {
        bob.send(frame! {"type" => "publish", "topic" => TOPIC, "data" => i}).await;
    }
    for i in 0..500u64 {
        assert_eq!(alice.expect("message").await.get("data").as_u64(), Some(i));
    }
}

#[tokio::test]
async fn qos_values_are_accepted_and_anything_else_is_treated_as_one() {
    let server = TestServer::start().await;
    let mut alice = server.auth("dev-token-alice").await;
    let mut bob = server.auth("dev-token-bob").await;
    alice.subscribe(TOPIC).await;
    for (i, q) in
        [Value::from(0), Value::from(1), Value::from(2), Value::from(7), Value::from("x")].into_iter().enumerate()
    {
        bob.send(frame! {"type" => "publish", "topic" => TOPIC, "data" => i as u64, "qos" => q, "msgRef" => "q"}).await;
        bob.expect("published").await;
        assert_eq!(alice.expect("message").await.get("data").as_u64(), Some(i as u64));
    }
}

#[tokio::test]
async fn retained_message_reaches_later_subscribers_right_after_subscribed() {
    let server = TestServer::start().await;
    let mut bob = server.auth("dev-token-bob").await;
    bob.send(frame! {"type" => "publish", "topic" => TOPIC, "data" => "old", "retain" => true, "msgRef" => "1"}).await;
    bob.expect("published").await;
    bob.send(frame! {"type" => "publish", "topic" => TOPIC, "data" => "latest", "retain" => true, "msgRef" => "2"})
        .await;
    bob.expect("published").await;
    bob.send(frame! {"type" => "publish", "topic" => TOPIC, "data" => "eu", "retain" => true, "filter" => "eu", "msgRef" => "3"}).await;
    bob.expect("published").await;
    // A first subscriber (cold topic on this node) and a second one (warm) both get them.
    for token in ["dev-token-alice", "dev-token-carol"] {
        let mut c = server.auth(token).await;
        c.subscribe(TOPIC).await;
        let mut got = vec![];
        for _ in 0..2 {
            let m = c.expect("message").await;
            got.push((m.get("data").as_str().unwrap().to_owned(), m.get("filter").as_str().map(str::to_owned)));
        }
        got.sort();
        assert_eq!(got, vec![("eu".into(), Some("eu".into())), ("latest".into(), None)], "N33: base + every key");
        c.assert_nothing_pending().await;
        // A filtered subscriber only gets its own key's retained message (N33).
        c.send(
            frame! {"type" => "subscribe", "topic" => "demo/general/messages", "filters" => vec![Value::from("eu")]},
        )
        .await;
        c.expect("subscribed").await;
        assert_eq!(c.expect("message").await.get("data").as_str(), Some("eu"));
        c.assert_nothing_pending().await;
    }
    // The publisher never gets its own retained message (N33).
    bob.subscribe(TOPIC).await;
    bob.assert_nothing_pending().await;
}

#[tokio::test]
async fn load_balanced_group_delivers_each_message_to_exactly_one_member() {
    let server = TestServer::builder().settings(|s| s.edge.rate_limit = Some(1000)).spawn().await;
    let mut members = Vec::new();
    for token in ["dev-token-alice", "dev-token-carol", "dev-token-agent"] {
        let mut c = server.auth(token).await;
        c.send(
            frame! {"type" => "subscribe", "topic" => TOPIC, "loadBalance" => true, "loadBalanceGroup" => "workers"},
        )
        .await;
        assert_eq!(c.expect("subscribed").await.get("loadBalance"), &Value::Boolean(true));
        members.push(c);
    }
    let mut plain = server.auth("dev-token-viewer").await;
    plain.subscribe(TOPIC).await;
    let mut bob = server.auth("dev-token-bob").await;
    for i in 0..60u64 {
        bob.send(frame! {"type" => "publish", "topic" => TOPIC, "data" => i}).await;
    }
    // The plain subscriber sees all 60, proving the fan-out finished.
    for i in 0..60u64 {
        assert_eq!(plain.expect("message").await.get("data").as_u64(), Some(i));
    }
    let mut seen = Vec::new();
    for m in &mut members {
        let got: Vec<u64> = m.drain_frames().await.iter().map(|f| f.get("data").as_u64().unwrap()).collect();
        assert!(!got.is_empty(), "every member gets a share");
        seen.extend(got);
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..60).collect::<Vec<_>>(), "each message reached exactly one member");
}

#[tokio::test]
async fn load_balance_group_defaults_to_the_actor_id_and_groups_are_independent() {
    let server = TestServer::start().await;
    let mut a1 = server.auth("dev-token-alice").await;
    let mut a2 = server.auth("dev-token-alice").await;
    let mut other = server.auth("dev-token-carol").await;
    for c in [&mut a1, &mut a2] {
        c.send(frame! {"type" => "subscribe", "topic" => TOPIC, "loadBalance" => true}).await;
        c.expect("subscribed").await;
    }
    other
        .send(frame! {"type" => "subscribe", "topic" => TOPIC, "loadBalance" => true, "loadBalanceGroup" => "g2"})
        .await;
    other.expect("subscribed").await;
    let mut bob = server.auth("dev-token-bob").await;
    for i in 0..10u64 {
        bob.send(frame! {"type" => "publish", "topic" => TOPIC, "data" => i}).await;
    }
    for i in 0..10u64 {
        assert_eq!(other.expect("message").await.get("data").as_u64(), Some(i), "g2 alone gets all");
    }
    let n = a1.drain_frames().await.len() + a2.drain_frames().await.len();
    assert_eq!(n, 10, "alice's default group (her actor id) got each message once");
}

/// A topic's fan-out runs in place on the publisher's task while it has few local subscribers
/// and through the dispatcher task past `skua_edge::hub::INLINE_FANOUT`; crossing that size
/// both ways while publishes are in flight must not reorder or lose anything. (Without the
/// guard that keeps in-place delivery off while the dispatcher has work, this fails.)
#[tokio::test]
async fn order_holds_while_a_topic_crosses_the_in_place_fan_out_size() {
    // Fresh servers: the first crossings on a node are the likeliest to overtake.
    for _ in 0..6 {
        crossing_rounds().await;
    }
}

async fn crossing_rounds() {
    const ROUNDS: u64 = 4;
    const PER_PHASE: u64 = 100;
    let server = TestServer::builder().settings(|s| s.edge.rate_limit = Some(100_000)).spawn().await;
    let mut alice = server.auth("dev-token-alice").await;
    let mut bob = server.auth("dev-token-bob").await;
    alice.subscribe(TOPIC).await;
    let reader = tokio::spawn(async move {
        for i in 0..ROUNDS * 2 * PER_PHASE {
            assert_eq!(alice.expect("message").await.get("data").as_u64(), Some(i), "message {i} out of order or lost");
        }
    });
    let mut next = 0u64;
    for _round in 0..ROUNDS {
        for _ in 0..PER_PHASE {
            bob.send(frame! {"type" => "publish", "topic" => TOPIC, "data" => next}).await;
            next += 1;
        }
        // Grow past the in-place size while those are still being delivered…
        let mut extras = Vec::new();
        for _ in 0..skua_edge::hub::INLINE_FANOUT + 2 {
            let mut c = server.auth("dev-token-carol").await;
            c.send(frame! {"type" => "subscribe", "topic" => TOPIC}).await;
            extras.push(c);
        }
        for _ in 0..PER_PHASE {
            bob.send(frame! {"type" => "publish", "topic" => TOPIC, "data" => next}).await;
            next += 1;
        }
        // …and shrink below it again (the connections close).
        for mut c in extras {
            c.send(frame! {"type" => "unsubscribe", "topic" => TOPIC}).await;
        }
    }
    reader.await.expect("every message in order");
}

/// The hub spreads fan-outs over dispatch shards (topics hashed over them; fan-outs past
/// `skua_edge::hub::SPLIT_FANOUT` split by connection). Two publishers publish concurrently on
/// several topics while one topic grows past the split size: every subscriber (on every shard's
/// share of the connections) gets each publisher's messages of each topic in order, none lost.
#[tokio::test]
async fn order_holds_per_topic_across_dispatch_shards_under_concurrent_publishers() {
    const TOPICS: usize = 4;
    const PER_PUBLISHER: u64 = 200;
    let early = skua_edge::hub::SPLIT_FANOUT - 4;
    let server = TestServer::builder()
        .settings(|s| {
            (s.edge.rate_limit, s.edge.dispatch_shards) = (Some(100_000), Some(3));
            (s.edge.outbound_queue_messages, s.edge.outbound_queue_bytes) = (Some(1 << 20), Some(1 << 30));
        })
        .spawn()
        .await;
    let topic =
        |t: usize| ["demo/general/messages", "demo/general/status", "demo/general/events", "demo/random/status"][t];
    // Readers checking each publisher's sequence: one per topic, and on topic 0 enough more to
    // be just below the split size (spread over every shard's share) before anything is published.
    let mut readers = Vec::new();
    for t in (0..TOPICS).chain(std::iter::repeat_n(0, early)) {
        let mut alice = server.auth("dev-token-alice").await;
        alice.subscribe(topic(t)).await;
        readers.push(tokio::spawn(async move {
            let mut next = [0u64; 2];
            for _ in 0..2 * PER_PUBLISHER {
                let m = alice.expect("message").await;
                let who = usize::from(m.str("from") == "carol");
                let i = m.get("data").as_u64().expect("an integer");
                assert_eq!(i, next[who], "topic {t}: {}'s message {i} out of order or lost", m.str("from"));
                next[who] += 1;
            }
        }));
    }
    let publish = |token: &'static str| {
        let server = &server;
        async move {
            let mut c = server.auth(token).await;
            for i in 0..PER_PUBLISHER {
                for t in 0..TOPICS {
                    c.send(frame! {"type" => "publish", "topic" => topic(t), "data" => i}).await;
                }
            }
            c
        }
    };
    // Topic 0 crosses the split size while publishes are in flight.
    let crossing = async {
        let mut late = Vec::new();
        for _ in 0..8 {
            let mut c = server.auth("dev-token-alice").await;
            c.send(frame! {"type" => "subscribe", "topic" => topic(0)}).await;
            late.push(c);
        }
        late
    };
    let (_bob, _carol, _late) = tokio::join!(publish("dev-token-bob"), publish("dev-token-carol"), crossing);
    for r in readers {
        r.await.expect("every message of every topic in order");
    }
}
