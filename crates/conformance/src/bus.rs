//! The [`Bus`] suite: every guarantee of the trait's contract, as test bodies.
//!
//! A harness connects nodes to one bus; for the in-process bus they share one broker, for an
//! external bus each node is its own connection under a namespace unique to the harness (so
//! retained messages of earlier runs never show up). Topic addresses are fixed per case.
//!
//! The suite never lets more than 8 deliveries queue up at one node without draining it
//! concurrently, so harnesses may give nodes small receivers to exercise backpressure.
//!
//! A sentinel on another channel than the one it guards (another topic or room) relies on a
//! single publisher's envelopes staying in order across channels. The contract does not promise
//! that, but a correct backend never delivers the guarded envelope at all, so such a sentinel can
//! only weaken a check, never fail a correct implementation.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use skua_core::{
    ActorId, AppId, Bus, BusDelivery, BusSubscription, ClientId, ConnId, ConsumerId, Control, ControlMessage, Envelope,
    EnvelopeId, GroupKey, NodeId, PresenceChange, PresenceEvent, ProjectId, Publication, RoomKey, Route, SessionKey,
    TopicAddress,
};
use tokio::sync::mpsc::Receiver;

use super::within;

/// Connects nodes to the bus under test.
pub trait BusHarness {
    /// Connects a new node: its [`Bus`] handle and its delivery receiver. `name` is a valid
    /// [`NodeId`] and unique within one harness; every node of a harness is on the same bus.
    fn node(&self, name: &str) -> impl Future<Output = (Arc<dyn Bus>, Receiver<BusDelivery>)>;
}

/// Generates one `#[tokio::test]` per case of the [`Bus`] suite.
///
/// `bus_conformance!(harness_expr)` evaluates `harness_expr` (a [`BusHarness`]) once per test;
/// `bus_conformance!(setup = future)` awaits `future: impl Future<Output = Option<H>>` once per
/// test and skips the test on `None`.
#[macro_export]
macro_rules! bus_conformance {
    (setup = $setup:expr $(,)?) => {
        $crate::bus_conformance!(@cases setup, $setup);
    };
    (@cases $how:ident, $harness:expr) => {
        $crate::__conformance_tests!(bus, $how, $harness;
            publish_reaches_other_node,
            publish_reaches_publishing_node_too,
            subscription_matches_only_its_topic,
            topic_subscription_gets_every_filter_key,
            topic_key_subscription_gets_only_its_key,
            one_plain_copy_for_overlapping_subscriptions,
            unsubscribe_stops_delivery,
            order_is_kept_per_publisher,
            order_is_kept_across_qos_and_retain,
            group_delivers_each_publication_to_exactly_one_member,
            different_groups_each_get_every_publication,
            groups_are_scoped_by_topic,
            plain_and_group_subscriptions_both_deliver,
            retained_is_replayed_on_subscribe,
            retained_is_not_replayed_to_groups,
            presence_events_reach_subscribers_of_that_room_only,
            subscribe_is_idempotent,
            subscribing_twice_replays_retained_once,
            unsubscribe_of_absent_subscription_is_ok,
            payloads_and_fields_arrive_intact,
            names_with_special_characters_stay_apart,
            group_member_that_unsubscribed_gets_no_more,
            control_reaches_the_control_subscribers_of_its_project_only,
            control_is_never_retained,
            control_unsubscribe_stops_delivery,
        );
    };
    ($harness:expr $(,)?) => {
        $crate::bus_conformance!(@cases make, $harness);
    };
}

// ----------------------------------------------------------------------------------------------
// Cases.

/// Contract 1: a publication reaches a subscribed node, unchanged, as a live plain delivery.
pub async fn publish_reaches_other_node<H: BusHarness>(h: H) {
    let a = node(&h, "a").await;
    let mut b = node(&h, "b").await;
    let t = topic("room-1", "chat");
    b.subscribe(&BusSubscription::Topic(t.clone())).await;

    let sent = a.message(&t, None, "hello");
    a.publish(&sent).await;
    b.expect(&sent, Route::Plain, false).await;
}

/// Contract 1: "from any node" includes the subscribing node itself.
pub async fn publish_reaches_publishing_node_too<H: BusHarness>(h: H) {
    let mut a = node(&h, "a").await;
    let t = topic("room-1", "chat");
    a.subscribe(&BusSubscription::Topic(t.clone())).await;

    let sent = a.message(&t, None, "echo");
    a.publish(&sent).await;
    a.expect(&sent, Route::Plain, false).await;
}

/// Contract 1: a `Topic` subscription matches its own topic address only: not the same topic
/// name in another room, not another topic of the room, not the room's presence events.
pub async fn subscription_matches_only_its_topic<H: BusHarness>(h: H) {
    let a = node(&h, "a").await;
    let mut b = node(&h, "b").await;
    let t = topic("room-1", "chat");
    b.subscribe(&BusSubscription::Topic(t.clone())).await;

    a.publish(&a.message(&topic("room-1", "other"), None, "other-topic")).await;
    a.publish(&a.message(&topic("room-2", "chat"), None, "other-room")).await;
    a.publish(&a.presence(&t.room, PresenceChange::Join)).await;
    let sentinel = a.message(&t, None, "sentinel");
    a.publish(&sentinel).await;
    b.expect(&sentinel, Route::Plain, false).await;
}

/// `BusSubscription::Topic`: unfiltered publications and those of every filter key.
pub async fn topic_subscription_gets_every_filter_key<H: BusHarness>(h: H) {
    let a = node(&h, "a").await;
    let mut b = node(&h, "b").await;
    let t = topic("room-1", "chat");
    b.subscribe(&BusSubscription::Topic(t.clone())).await;

    let sent = [a.message(&t, None, "plain"), a.message(&t, Some("x"), "x"), a.message(&t, Some("y"), "y")];
    for envelope in &sent {
        a.publish(envelope).await;
    }
    for envelope in &sent {
        b.expect(envelope, Route::Plain, false).await;
    }
}

/// `BusSubscription::TopicKey`: publications on that filter key only.
pub async fn topic_key_subscription_gets_only_its_key<H: BusHarness>(h: H) {
    let a = node(&h, "a").await;
    let mut b = node(&h, "b").await;
    let t = topic("room-1", "chat");
    b.subscribe(&BusSubscription::TopicKey(t.clone(), "k".to_owned())).await;

    a.publish(&a.message(&t, None, "unfiltered")).await;
    a.publish(&a.message(&t, Some("j"), "other-key")).await;
    a.publish(&a.message(&topic("room-1", "other"), Some("k"), "same-key-other-topic")).await;
    let first = a.message(&t, Some("k"), "mine-1");
    let second = a.message(&t, Some("k"), "mine-2");
    a.publish(&first).await;
    a.publish(&second).await;
    b.expect(&first, Route::Plain, false).await;
    b.expect(&second, Route::Plain, false).await;
}

/// Contract 2: a `Topic` and an overlapping `TopicKey` subscription give one plain copy.
pub async fn one_plain_copy_for_overlapping_subscriptions<H: BusHarness>(h: H) {
    let a = node(&h, "a").await;
    let mut b = node(&h, "b").await;
    let t = topic("room-1", "chat");
    b.subscribe(&BusSubscription::Topic(t.clone())).await;
    b.subscribe(&BusSubscription::TopicKey(t.clone(), "k".to_owned())).await;

    let keyed = a.message(&t, Some("k"), "keyed");
    let sentinel = a.message(&t, None, "sentinel");
    a.publish(&keyed).await;
    a.publish(&sentinel).await;
    b.expect(&keyed, Route::Plain, false).await;
    b.expect(&sentinel, Route::Plain, false).await;
}

/// Contract 1, other side: once `unsubscribe` returned, publications stop; the node's other
/// subscriptions on the topic stay.
pub async fn unsubscribe_stops_delivery<H: BusHarness>(h: H) {
    let a = node(&h, "a").await;
    let mut b = node(&h, "b").await;
    let t = topic("room-1", "chat");
    let whole = BusSubscription::Topic(t.clone());
    b.subscribe(&whole).await;
    b.subscribe(&BusSubscription::TopicKey(t.clone(), "sentinel".to_owned())).await;

    let before = a.message(&t, None, "before");
    a.publish(&before).await;
    b.expect(&before, Route::Plain, false).await;

    b.unsubscribe(&whole).await;
    a.publish(&a.message(&t, None, "after")).await;
    a.publish(&a.message(&t, Some("other"), "after-keyed")).await;
    let sentinel = a.message(&t, Some("sentinel"), "sentinel");
    a.publish(&sentinel).await;
    b.expect(&sentinel, Route::Plain, false).await;
}

/// Contract 4 (and 7): two nodes publishing 200 envelopes each at once; two subscribers that
/// drain while they publish see each publisher's envelopes in publish order, and all of them.
pub async fn order_is_kept_per_publisher<H: BusHarness>(h: H) {
    const N: usize = 200;
    let a = node(&h, "a").await;
    let c = node(&h, "c").await;
    let mut b = node(&h, "b").await;
    let mut d = node(&h, "d").await;
    let t = topic("room-1", "chat");
    b.subscribe(&BusSubscription::Topic(t.clone())).await;
    d.subscribe(&BusSubscription::Topic(t.clone())).await;

    let (_, _, from_b, from_d) =
        tokio::join!(a.publish_numbered(&t, "a", N), c.publish_numbered(&t, "c", N), b.labels(2 * N), d.labels(2 * N));

    let expected = |prefix: &str| (0..N).map(|i| format!("{prefix}-{i}")).collect::<Vec<_>>();
    for (receiver, got) in [("b", from_b), ("d", from_d)] {
        for prefix in ["a", "c"] {
            let seen: Vec<String> = got.iter().filter(|l| l.starts_with(&format!("{prefix}-"))).cloned().collect();
            assert_eq!(seen, expected(prefix), "node {receiver}: envelopes from node {prefix} out of order or missing");
        }
    }
}

/// Contract 4: order does not depend on what the publications ask for: QoS 0, 1 and 2 and
/// retained and live ones interleaved on one topic arrive in publish order (an MQTT broker may
/// release QoS 2 messages later than QoS 0/1 ones sent after them).
pub async fn order_is_kept_across_qos_and_retain<H: BusHarness>(h: H) {
    const N: usize = 60;
    let a = node(&h, "a").await;
    let mut b = node(&h, "b").await;
    let t = topic("room-1", "mixed");
    b.subscribe(&BusSubscription::Topic(t.clone())).await;

    let sent: Vec<_> = (0..N)
        .map(|i| {
            let data = Bytes::from(format!("m-{i}"));
            a.custom(&t, (i % 4 == 3).then_some("k"), data, (i % 3) as u8, None, i % 5 == 0)
        })
        .collect();
    let publish_all = async {
        for envelope in &sent {
            a.publish(envelope).await;
        }
    };
    let (_, got) = tokio::join!(publish_all, b.labels(N));
    let expected: Vec<String> = (0..N).map(|i| format!("m-{i}")).collect();
    assert_eq!(got, expected, "node b: publications out of order");
}

/// Contract 3: with two members of one group, each of 100 publications reaches exactly one of
/// them (with `Route::Group`), and both get some.
pub async fn group_delivers_each_publication_to_exactly_one_member<H: BusHarness>(h: H) {
    const N: usize = 100;
    let a = node(&h, "a").await;
    let mut b = node(&h, "b").await;
    let mut c = node(&h, "c").await;
    let t = topic("room-1", "jobs");
    let group = group(&t, "workers");
    for member in [&b, &c] {
        member.subscribe(&BusSubscription::Group(group.clone())).await;
        // The sentinel arrives on this plain subscription at both members; the group also
        // carries it, to one of them.
        member.subscribe(&BusSubscription::TopicKey(t.clone(), "end".to_owned())).await;
    }

    let publish_all = async {
        a.publish_numbered(&t, "job", N).await;
        a.publish(&a.message(&t, Some("end"), "end")).await;
    };
    let (_, from_b, from_c) = tokio::join!(publish_all, b.group_share(&group), c.group_share(&group));

    assert!(
        from_b.is_disjoint(&from_c),
        "a publication reached both members: {:?}",
        from_b.intersection(&from_c).collect::<Vec<_>>()
    );
    let union: BTreeSet<String> = from_b.union(&from_c).cloned().collect();
    let all: BTreeSet<String> = (0..N).map(|i| format!("job-{i}")).collect();
    assert_eq!(union, all, "some publications reached no member");
    assert!(
        !from_b.is_empty() && !from_c.is_empty(),
        "one member got everything: b {}, c {}",
        from_b.len(),
        from_c.len()
    );
}

/// Contract 3: "per group subscribed anywhere": two groups on one topic each get every
/// publication, with their own group key.
pub async fn different_groups_each_get_every_publication<H: BusHarness>(h: H) {
    let a = node(&h, "a").await;
    let mut b = node(&h, "b").await;
    let mut c = node(&h, "c").await;
    let t = topic("room-1", "jobs");
    let (g1, g2) = (group(&t, "g1"), group(&t, "g2"));
    b.subscribe(&BusSubscription::Group(g1.clone())).await;
    c.subscribe(&BusSubscription::Group(g2.clone())).await;

    let sent: Vec<_> = (0..6).map(|i| a.message(&t, None, &format!("job-{i}"))).collect();
    for envelope in &sent {
        a.publish(envelope).await;
    }
    for envelope in &sent {
        b.expect(envelope, Route::Group(g1.clone()), false).await;
        c.expect(envelope, Route::Group(g2.clone()), false).await;
    }
    let sentinel = a.message(&t, None, "sentinel");
    a.publish(&sentinel).await;
    b.expect(&sentinel, Route::Group(g1), false).await;
    c.expect(&sentinel, Route::Group(g2), false).await;
}

/// Contract 3: a group is identified by topic and name: groups of one name on two topics are
/// two groups, each consuming its own topic only.
pub async fn groups_are_scoped_by_topic<H: BusHarness>(h: H) {
    let a = node(&h, "a").await;
    let mut b = node(&h, "b").await;
    let mut c = node(&h, "c").await;
    let (t1, t2) = (topic("room-1", "jobs"), topic("room-1", "other-jobs"));
    let (g1, g2) = (group(&t1, "workers"), group(&t2, "workers"));
    b.subscribe(&BusSubscription::Group(g1.clone())).await;
    c.subscribe(&BusSubscription::Group(g2.clone())).await;

    let (one, two) = (a.message(&t1, None, "one"), a.message(&t2, None, "two"));
    a.publish(&one).await;
    a.publish(&two).await;
    let (one_again, two_again) = (a.message(&t1, None, "one-again"), a.message(&t2, None, "two-again"));
    a.publish(&one_again).await;
    a.publish(&two_again).await;
    b.expect(&one, Route::Group(g1.clone()), false).await;
    b.expect(&one_again, Route::Group(g1), false).await;
    c.expect(&two, Route::Group(g2.clone()), false).await;
    c.expect(&two_again, Route::Group(g2), false).await;
}

/// Contracts 2 and 3 together: a node with a `Topic` and a `Group` subscription on one topic
/// gets each publication twice, once per route.
pub async fn plain_and_group_subscriptions_both_deliver<H: BusHarness>(h: H) {
    let a = node(&h, "a").await;
    let mut b = node(&h, "b").await;
    let t = topic("room-1", "jobs");
    let g = group(&t, "workers");
    b.subscribe(&BusSubscription::Topic(t.clone())).await;
    b.subscribe(&BusSubscription::Group(g.clone())).await;

    for label in ["x", "y", "end"] {
        a.publish(&a.message(&t, None, label)).await;
    }
    let got = b.routes_until_both(&g, "end").await;
    let expected: BTreeMap<(String, String), usize> = ["x", "y", "end"]
        .into_iter()
        .flat_map(|l| [((l.to_owned(), "plain".to_owned()), 1), ((l.to_owned(), "group".to_owned()), 1)])
        .collect();
    assert_eq!(got, expected, "each publication once per route");
}

/// Contract 5: the last retained publication per (topic, filter key) is delivered live, then
/// replayed, flagged, to a node whose matching subscription is created later: latest wins per
/// key, filter keys are kept apart, a `TopicKey` subscription gets its key's only, and nodes
/// that were already subscribed get no second copy.
pub async fn retained_is_replayed_on_subscribe<H: BusHarness>(h: H) {
    let a = node(&h, "a").await;
    let mut witness = node(&h, "w").await;
    let mut b = node(&h, "b").await;
    let mut c = node(&h, "c").await;
    let t = topic("room-1", "status");
    witness.subscribe(&BusSubscription::Topic(t.clone())).await;

    let retained = [
        a.retained(&t, None, "plain-1"),
        a.retained(&t, None, "plain-2"),
        a.retained(&t, Some("ka"), "ka-1"),
        a.retained(&t, Some("ka"), "ka-2"),
        a.retained(&t, Some("kb"), "kb-1"),
        a.message(&t, None, "not-retained"),
    ];
    for envelope in &retained {
        a.publish(envelope).await;
    }
    // Delivered live like any other; seeing them also shows the bus has taken them in.
    for envelope in &retained {
        witness.expect(envelope, Route::Plain, false).await;
    }

    b.subscribe(&BusSubscription::Topic(t.clone())).await;
    c.subscribe(&BusSubscription::TopicKey(t.clone(), "ka".to_owned())).await;
    let mut replayed = BTreeMap::new();
    for _ in 0..3 {
        let got = b.next("a retained replay").await;
        assert!(got.retained_replay, "replay not flagged retained_replay: {}", describe(&got));
        assert_eq!(got.route, Route::Plain, "replay on the wrong route: {}", describe(&got));
        replayed.insert(label(&got), got.envelope);
    }
    let latest = [&retained[1], &retained[3], &retained[4]];
    let expected: BTreeMap<String, Arc<Envelope>> = latest.iter().map(|e| (label_of(e), Arc::clone(e))).collect();
    assert_eq!(replayed, expected, "replay must hold the latest retained publication of each filter key");
    c.expect(&retained[3], Route::Plain, true).await;

    let after = a.message(&t, None, "after");
    let after_ka = a.message(&t, Some("ka"), "after-ka");
    a.publish(&after).await;
    a.publish(&after_ka).await;
    b.expect(&after, Route::Plain, false).await;
    b.expect(&after_ka, Route::Plain, false).await;
    c.expect(&after_ka, Route::Plain, false).await;
    witness.expect(&after, Route::Plain, false).await;
}

/// Contract 3 over 5: retained publications are not replayed to `Group` subscriptions (a
/// replay would give the group a second copy; MQTT v5 §4.8.2 shared subscriptions get none).
pub async fn retained_is_not_replayed_to_groups<H: BusHarness>(h: H) {
    let a = node(&h, "a").await;
    let mut witness = node(&h, "w").await;
    let mut b = node(&h, "b").await;
    let t = topic("room-1", "status");
    let g = group(&t, "workers");
    witness.subscribe(&BusSubscription::Topic(t.clone())).await;
    let kept = a.retained(&t, None, "kept");
    a.publish(&kept).await;
    witness.expect(&kept, Route::Plain, false).await;

    b.subscribe(&BusSubscription::Group(g.clone())).await;
    let live = a.message(&t, None, "live");
    a.publish(&live).await;
    b.expect(&live, Route::Group(g), false).await;

    // The retained publication was kept: a plain subscription does get it.
    b.subscribe(&BusSubscription::Topic(t.clone())).await;
    b.expect(&kept, Route::Plain, true).await;
}

/// `BusSubscription::Presence`: presence events of that room, to its subscribers only, with
/// one publisher's events in order; topic subscriptions do not get them.
pub async fn presence_events_reach_subscribers_of_that_room_only<H: BusHarness>(h: H) {
    let a = node(&h, "a").await;
    let mut b = node(&h, "b").await;
    let mut c = node(&h, "c").await;
    let mut d = node(&h, "d").await;
    let (r1, r2) = (room("room-1"), room("room-2"));
    let chat = topic("room-1", "chat");
    b.subscribe(&BusSubscription::Presence(r1.clone())).await;
    c.subscribe(&BusSubscription::Presence(r2.clone())).await;
    d.subscribe(&BusSubscription::Topic(chat.clone())).await;

    let join1 = a.presence(&r1, PresenceChange::Join);
    let join2 = a.presence(&r2, PresenceChange::Join);
    let message = a.message(&chat, None, "message");
    let leave1 = a.presence(&r1, PresenceChange::Leave);
    let leave2 = a.presence(&r2, PresenceChange::Leave);
    for envelope in [&join1, &join2, &message, &leave1, &leave2] {
        a.publish(envelope).await;
    }
    b.expect(&join1, Route::Plain, false).await;
    b.expect(&leave1, Route::Plain, false).await;
    c.expect(&join2, Route::Plain, false).await;
    c.expect(&leave2, Route::Plain, false).await;
    d.expect(&message, Route::Plain, false).await;

    let sentinel = a.message(&chat, None, "sentinel");
    a.publish(&sentinel).await;
    d.expect(&sentinel, Route::Plain, false).await;
}

/// Contract 6: subscribing twice is one subscription: no duplicate deliveries, and one
/// `unsubscribe` ends it.
pub async fn subscribe_is_idempotent<H: BusHarness>(h: H) {
    let a = node(&h, "a").await;
    let mut b = node(&h, "b").await;
    let t = topic("room-1", "chat");
    let g = group(&t, "workers");
    let subs = [
        BusSubscription::Topic(t.clone()),
        BusSubscription::TopicKey(t.clone(), "k".to_owned()),
        BusSubscription::Group(g.clone()),
        BusSubscription::Presence(t.room.clone()),
    ];
    for sub in subs.iter().chain(&subs) {
        b.subscribe(sub).await;
    }

    let keyed = a.message(&t, Some("k"), "keyed");
    let event = a.presence(&t.room, PresenceChange::Join);
    a.publish(&keyed).await;
    a.publish(&event).await;
    a.publish(&a.message(&t, None, "end")).await;
    let got = b.routes_until_both(&g, "end").await;
    let expected: BTreeMap<(String, String), usize> = [
        (("keyed".to_owned(), "plain".to_owned()), 1),
        (("keyed".to_owned(), "group".to_owned()), 1),
        (("presence".to_owned(), "plain".to_owned()), 1),
        (("end".to_owned(), "plain".to_owned()), 1),
        (("end".to_owned(), "group".to_owned()), 1),
    ]
    .into();
    assert_eq!(got, expected, "a subscription made twice must deliver once");

    for sub in &subs {
        b.unsubscribe(sub).await;
    }
    let other = topic("room-2", "sentinel");
    b.subscribe(&BusSubscription::Topic(other.clone())).await;
    a.publish(&a.message(&t, Some("k"), "gone")).await;
    a.publish(&a.presence(&t.room, PresenceChange::Leave)).await;
    let sentinel = a.message(&other, None, "sentinel");
    a.publish(&sentinel).await;
    b.expect(&sentinel, Route::Plain, false).await;
}

/// Contracts 5 and 6: subscribing again to what a node already subscribes creates nothing, so
/// replays nothing.
pub async fn subscribing_twice_replays_retained_once<H: BusHarness>(h: H) {
    let a = node(&h, "a").await;
    let mut witness = node(&h, "w").await;
    let mut b = node(&h, "b").await;
    let t = topic("room-1", "status");
    witness.subscribe(&BusSubscription::Topic(t.clone())).await;
    let kept = a.retained(&t, None, "kept");
    a.publish(&kept).await;
    witness.expect(&kept, Route::Plain, false).await;

    let sub = BusSubscription::Topic(t.clone());
    b.subscribe(&sub).await;
    b.expect(&kept, Route::Plain, true).await;
    b.subscribe(&sub).await;
    let sentinel = a.message(&t, None, "sentinel");
    a.publish(&sentinel).await;
    b.expect(&sentinel, Route::Plain, false).await;
}

/// Contract 6: unsubscribing what a node never subscribed (or already unsubscribed) is `Ok`,
/// and the node still works afterwards.
pub async fn unsubscribe_of_absent_subscription_is_ok<H: BusHarness>(h: H) {
    let a = node(&h, "a").await;
    let mut b = node(&h, "b").await;
    let t = topic("room-1", "chat");
    let subs = [
        BusSubscription::Topic(t.clone()),
        BusSubscription::TopicKey(t.clone(), "k".to_owned()),
        BusSubscription::Group(group(&t, "workers")),
        BusSubscription::Presence(t.room.clone()),
    ];
    for sub in &subs {
        b.unsubscribe(sub).await;
    }
    b.subscribe(&subs[0]).await;
    b.unsubscribe(&subs[0]).await;
    b.unsubscribe(&subs[0]).await;

    b.subscribe(&subs[0]).await;
    let sent = a.message(&t, None, "works");
    a.publish(&sent).await;
    b.expect(&sent, Route::Plain, false).await;
}

/// Contract 1, "reaches … unchanged": whatever an envelope carries arrives byte for byte:
/// `data` that is empty, not MessagePack, every byte value, or as large as the edge accepts
/// (921 600 bytes); filter keys with `|`; QoS 0, 1 and 2; a `msgId` or none; presence data.
pub async fn payloads_and_fields_arrive_intact<H: BusHarness>(h: H) {
    let a = node(&h, "a").await;
    let mut b = node(&h, "b").await;
    let t = topic("room-1", "files");
    b.subscribe(&BusSubscription::Topic(t.clone())).await;
    b.subscribe(&BusSubscription::Presence(t.room.clone())).await;

    let every_byte: Vec<u8> = (0..=255).collect();
    let largest: Vec<u8> = (0..921_600u32).map(|i| (i % 253) as u8).collect();
    let sent = [
        a.custom(&t, None, Bytes::new(), 0, None, false),
        a.custom(&t, Some("red|big"), Bytes::from(every_byte), 2, Some("msg-1"), false),
        a.custom(&t, Some("k"), Bytes::from(largest), 1, None, false),
        a.custom(&t, None, Bytes::from_static(b"\xc1 not msgpack"), 1, Some(""), false),
        Arc::new(Envelope::Presence(PresenceEvent {
            room: t.room.clone(),
            actor: actor("alice"),
            change: PresenceChange::Update,
            data: Bytes::from_static(b"\x82\xa4mood\xa3ok\xa1n\x01"),
            node: a.id.clone(),
            persistent: None,
        })),
    ];
    for envelope in &sent {
        a.publish(envelope).await;
    }
    for (i, envelope) in sent.iter().enumerate() {
        let got = b.next(&format!("envelope {i}")).await;
        assert_eq!((&got.route, got.retained_replay), (&Route::Plain, false), "node b: envelope {i}");
        assert!(*got.envelope == **envelope, "node b: envelope {i} arrived altered or out of order");
    }
}

/// Contract 1: room and topic names are opaque. Characters that structure other systems'
/// topics (`/`, `+`, `#`, `%`) neither widen a subscription nor merge two names; filter keys
/// may hold `|`.
pub async fn names_with_special_characters_stay_apart<H: BusHarness>(h: H) {
    let a = node(&h, "a").await;
    let mut b = node(&h, "b").await;
    let plain = topic("room-1", "x");
    let odd = topic("room/1", "a+b#");
    b.subscribe(&BusSubscription::Topic(plain.clone())).await;
    b.subscribe(&BusSubscription::TopicKey(odd.clone(), "k|j".to_owned())).await;

    for (t, filter, label) in [
        (topic("room-1", "x/y"), None, "slash-in-topic"),
        (topic("room-1", "+"), None, "plus-topic"),
        (topic("room-1", "#"), None, "hash-topic"),
        (topic("room-1", "%78"), None, "percent-escaped-x"),
        (topic("room", "1/x"), None, "slash-moved"),
        (odd.clone(), Some("k"), "other-key"),
        (odd.clone(), None, "unfiltered-odd"),
    ] {
        a.publish(&a.message(&t, filter, label)).await;
    }
    let keyed = a.message(&plain, Some("y|z"), "keyed");
    let odd_hit = a.message(&odd, Some("k|j"), "odd-hit");
    let sentinel = a.message(&plain, None, "sentinel");
    for envelope in [&keyed, &odd_hit, &sentinel] {
        a.publish(envelope).await;
    }
    b.expect(&keyed, Route::Plain, false).await;
    b.expect(&odd_hit, Route::Plain, false).await;
    b.expect(&sentinel, Route::Plain, false).await;
}

/// Contract 3 over 1: once a member's `unsubscribe` of its group returned, it gets none of the
/// group's publications, and the remaining member gets every one of them.
pub async fn group_member_that_unsubscribed_gets_no_more<H: BusHarness>(h: H) {
    const N: usize = 20;
    let a = node(&h, "a").await;
    let mut b = node(&h, "b").await;
    let mut c = node(&h, "c").await;
    let t = topic("room-1", "jobs");
    let group = group(&t, "workers");
    for member in [&b, &c] {
        member.subscribe(&BusSubscription::Group(group.clone())).await;
        member.subscribe(&BusSubscription::TopicKey(t.clone(), "end".to_owned())).await;
    }
    c.unsubscribe(&BusSubscription::Group(group.clone())).await;

    let publish_all = async {
        a.publish_numbered(&t, "job", N).await;
        a.publish(&a.message(&t, Some("end"), "end")).await;
    };
    let (_, from_b, from_c) = tokio::join!(publish_all, b.group_share(&group), c.group_share(&group));
    let all: BTreeSet<String> = (0..N).map(|i| format!("job-{i}")).collect();
    assert_eq!(from_b, all, "the remaining member must get every publication");
    assert!(from_c.is_empty(), "the member that left got {from_c:?}");
}

/// Contract 8: a control message reaches every `Control` subscriber of its project, the
/// sender included, in order and intact, and nobody else: not another project's control
/// subscribers, not the project's topic, presence or group subscribers.
pub async fn control_reaches_the_control_subscribers_of_its_project_only<H: BusHarness>(h: H) {
    let mut a = node(&h, "a").await;
    let mut b = node(&h, "b").await;
    let mut c = node(&h, "c").await;
    let mut d = node(&h, "d").await;
    let mut e = node(&h, "e").await;
    let t = topic("room-1", "chat");
    a.subscribe(&BusSubscription::Control(project("proj"))).await;
    b.subscribe(&BusSubscription::Control(project("proj"))).await;
    c.subscribe(&BusSubscription::Control(project("other"))).await;
    d.subscribe(&BusSubscription::Topic(t.clone())).await;
    d.subscribe(&BusSubscription::Presence(t.room.clone())).await;
    e.subscribe(&BusSubscription::Group(group(&t, "g"))).await;

    let takeover = a.takeover("proj", 1);
    let session_kick = a.kick(ConsumerId::session(&t, &session("proj", None)));
    let group_kick = a.kick(ConsumerId::group(&group(&t, "g")));
    let elsewhere = a.takeover("other", 2);
    for envelope in [&takeover, &session_kick, &group_kick, &elsewhere] {
        a.publish(envelope).await;
    }
    for n in [&mut a, &mut b] {
        n.expect(&takeover, Route::Plain, false).await;
        n.expect(&session_kick, Route::Plain, false).await;
        n.expect(&group_kick, Route::Plain, false).await;
    }
    c.expect(&elsewhere, Route::Plain, false).await;

    let sentinel = a.message(&t, None, "sentinel");
    a.publish(&sentinel).await;
    d.expect(&sentinel, Route::Plain, false).await;
    e.expect(&sentinel, Route::Group(group(&t, "g")), false).await;
}

/// Contract 8: control messages are never kept for later subscribers, nor replayed when a
/// node subscribes again.
pub async fn control_is_never_retained<H: BusHarness>(h: H) {
    let a = node(&h, "a").await;
    let mut witness = node(&h, "w").await;
    let mut b = node(&h, "b").await;
    let mut c = node(&h, "c").await;
    let sub = BusSubscription::Control(project("proj"));
    // `publish` returns once the bus has taken the message, not once the broker routed it: the
    // witness getting it proves it passed the broker before `b` subscribes.
    witness.subscribe(&sub).await;
    let unseen = a.takeover("proj", 1);
    a.publish(&unseen).await;
    witness.expect(&unseen, Route::Plain, false).await;
    b.subscribe(&sub).await;
    let seen = a.takeover("proj", 2);
    a.publish(&seen).await;
    b.expect(&seen, Route::Plain, false).await;

    c.subscribe(&sub).await;
    b.unsubscribe(&sub).await;
    b.subscribe(&sub).await;
    let sentinel = a.takeover("proj", 3);
    a.publish(&sentinel).await;
    b.expect(&sentinel, Route::Plain, false).await;
    c.expect(&sentinel, Route::Plain, false).await;
}

/// Contract 1 for control subscriptions: once `unsubscribe` returned, the project's control
/// messages stop; the node's other control subscriptions stay.
pub async fn control_unsubscribe_stops_delivery<H: BusHarness>(h: H) {
    let a = node(&h, "a").await;
    let mut b = node(&h, "b").await;
    let sub = BusSubscription::Control(project("proj"));
    b.subscribe(&sub).await;
    b.subscribe(&BusSubscription::Control(project("other"))).await;
    let before = a.takeover("proj", 1);
    a.publish(&before).await;
    b.expect(&before, Route::Plain, false).await;

    b.unsubscribe(&sub).await;
    a.publish(&a.takeover("proj", 2)).await;
    let sentinel = a.takeover("other", 3);
    a.publish(&sentinel).await;
    b.expect(&sentinel, Route::Plain, false).await;
}

// ----------------------------------------------------------------------------------------------
// Helpers.

/// One connected node of a case.
struct Node {
    id: NodeId,
    bus: Arc<dyn Bus>,
    rx: Receiver<BusDelivery>,
}

async fn node<H: BusHarness>(h: &H, name: &str) -> Node {
    let id = NodeId::parse(name).unwrap_or_else(|e| panic!("test node name: {e}"));
    let (bus, rx) = within(format_args!("node {name} to connect"), h.node(name)).await;
    Node { id, bus, rx }
}

impl Node {
    async fn subscribe(&self, sub: &BusSubscription) {
        within(format_args!("node {} to subscribe {sub:?}", self.id), self.bus.subscribe(sub))
            .await
            .unwrap_or_else(|e| panic!("node {} could not subscribe {sub:?}: {e}", self.id));
    }

    async fn unsubscribe(&self, sub: &BusSubscription) {
        within(format_args!("node {} to unsubscribe {sub:?}", self.id), self.bus.unsubscribe(sub))
            .await
            .unwrap_or_else(|e| panic!("node {} could not unsubscribe {sub:?}: {e}", self.id));
    }

    async fn publish(&self, envelope: &Arc<Envelope>) {
        within(format_args!("node {} to publish {}", self.id, label_of(envelope)), self.bus.publish(envelope.clone()))
            .await
            .unwrap_or_else(|e| panic!("node {} could not publish {}: {e}", self.id, label_of(envelope)));
    }

    async fn next(&mut self, what: &str) -> BusDelivery {
        let id = &self.id;
        match within(format_args!("node {id} to receive {what}"), self.rx.recv()).await {
            Some(delivery) => delivery,
            None => panic!("node {id}'s receiver closed while waiting for {what}"),
        }
    }

    /// Asserts that the next delivery is `envelope`, by `route`, flagged `replay` or not.
    async fn expect(&mut self, envelope: &Arc<Envelope>, route: Route, replay: bool) {
        let what = label_of(envelope);
        let got = self.next(&what).await;
        assert_eq!(
            (label(&got), &got.route, got.retained_replay),
            (what.clone(), &route, replay),
            "node {}: unexpected delivery",
            self.id
        );
        assert_eq!(*got.envelope, **envelope, "node {}: {what} arrived altered", self.id);
    }

    /// Publishes `n` unfiltered messages on `topic`, labelled `<prefix>-0` to `<prefix>-<n-1>`.
    async fn publish_numbered(&self, topic: &TopicAddress, prefix: &str, n: usize) {
        for i in 0..n {
            self.publish(&self.message(topic, None, &format!("{prefix}-{i}"))).await;
        }
    }

    /// The labels of the next `n` deliveries.
    async fn labels(&mut self, n: usize) -> Vec<String> {
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            out.push(label(&self.next(&format!("delivery {} of {n}", i + 1)).await));
        }
        out
    }

    /// As a group member that also subscribes the `end` filter key: the labels this node got
    /// through `group`, until `end` arrives on the plain route. `end`'s group copy is ignored.
    async fn group_share(&mut self, group: &GroupKey) -> BTreeSet<String> {
        let mut share = BTreeSet::new();
        loop {
            let got = self.next("the end sentinel").await;
            let l = label(&got);
            match (&got.route, l.as_str()) {
                (Route::Plain, "end") => return share,
                (Route::Group(_), "end") => {}
                (Route::Group(g), _) if g == group => {
                    assert!(share.insert(l.clone()), "node {}: {l} arrived twice", self.id);
                }
                _ => panic!("node {}: unexpected delivery {}", self.id, describe(&got)),
            }
        }
    }

    /// (label, route) counts of every delivery until `end` arrived by both routes.
    async fn routes_until_both(&mut self, group: &GroupKey, end: &str) -> BTreeMap<(String, String), usize> {
        let mut got = BTreeMap::new();
        let (mut plain_end, mut group_end) = (false, false);
        while !(plain_end && group_end) {
            let delivery = self.next(&format!("{end} by both routes")).await;
            assert!(!delivery.retained_replay, "node {}: unexpected replay {}", self.id, describe(&delivery));
            let route = match &delivery.route {
                Route::Plain => "plain",
                Route::Group(g) if g == group => "group",
                Route::Group(_) => panic!("node {}: delivery on a foreign group {}", self.id, describe(&delivery)),
            };
            let l = label(&delivery);
            plain_end |= l == end && route == "plain";
            group_end |= l == end && route == "group";
            *got.entry((l, route.to_owned())).or_default() += 1;
        }
        got
    }

    fn publication(&self, topic: &TopicAddress, filter: Option<&str>, label: &str, retain: bool) -> Arc<Envelope> {
        Arc::new(Envelope::Publication(Publication {
            history: None,
            id: next_id(),
            topic: topic.clone(),
            filter: filter.map(str::to_owned),
            publisher: actor("publisher"),
            publisher_conn: ConnId(7),
            node: self.id.clone(),
            timestamp_ms: 1_700_000_000_000,
            msg_id: Some(format!("msg-{label}")),
            retain,
            qos: 1,
            data: Bytes::from(label.to_owned()),
        }))
    }

    /// A publication with the given data, QoS, msgId and retain flag.
    fn custom(
        &self,
        topic: &TopicAddress,
        filter: Option<&str>,
        data: Bytes,
        qos: u8,
        msg_id: Option<&str>,
        retain: bool,
    ) -> Arc<Envelope> {
        Arc::new(Envelope::Publication(Publication {
            history: None,
            id: next_id(),
            topic: topic.clone(),
            filter: filter.map(str::to_owned),
            publisher: actor("publisher"),
            publisher_conn: ConnId(u64::MAX),
            node: self.id.clone(),
            timestamp_ms: u64::MAX,
            msg_id: msg_id.map(str::to_owned),
            retain,
            qos,
            data,
        }))
    }

    fn message(&self, topic: &TopicAddress, filter: Option<&str>, label: &str) -> Arc<Envelope> {
        self.publication(topic, filter, label, false)
    }

    fn retained(&self, topic: &TopicAddress, filter: Option<&str>, label: &str) -> Arc<Envelope> {
        self.publication(topic, filter, label, true)
    }

    /// A takeover of a session of `project_name` by connection `conn` of this node.
    fn takeover(&self, project_name: &str, conn: u64) -> Arc<Envelope> {
        let message = ControlMessage::Takeover { session: session(project_name, Some("c-1")), conn: ConnId(conn) };
        Arc::new(Envelope::Control(Control { id: next_id(), node: self.id.clone(), message }))
    }

    fn kick(&self, consumer: ConsumerId) -> Arc<Envelope> {
        let message = ControlMessage::Kick { consumer };
        Arc::new(Envelope::Control(Control { id: next_id(), node: self.id.clone(), message }))
    }

    fn presence(&self, room: &RoomKey, change: PresenceChange) -> Arc<Envelope> {
        let data =
            if change == PresenceChange::Leave { Bytes::new() } else { Bytes::from_static(b"\x81\xa4mood\xa3ok") };
        Arc::new(Envelope::Presence(PresenceEvent {
            room: room.clone(),
            actor: actor("alice"),
            change,
            data,
            node: self.id.clone(),
            persistent: None,
        }))
    }
}

/// Unique per process run, so an external bus can deduplicate by id without mixing up runs.
fn next_id() -> EnvelopeId {
    static RUN: OnceLock<u64> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let run = *RUN.get_or_init(|| SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64));
    EnvelopeId((u128::from(run) << 64) | u128::from(COUNTER.fetch_add(1, Ordering::Relaxed)))
}

fn label_of(envelope: &Envelope) -> String {
    match envelope {
        Envelope::Publication(p) => String::from_utf8_lossy(&p.data).into_owned(),
        Envelope::Presence(_) => "presence".to_owned(),
        Envelope::Control(c) => match &c.message {
            ControlMessage::Takeover { session, conn } => format!("takeover {} by {conn}", session.project),
            ControlMessage::Kick { consumer } => format!("kick {consumer}"),
        },
    }
}

fn label(delivery: &BusDelivery) -> String {
    label_of(&delivery.envelope)
}

fn describe(delivery: &BusDelivery) -> String {
    format!("{} via {:?} (replay: {})", label(delivery), delivery.route, delivery.retained_replay)
}

fn actor(name: &str) -> ActorId {
    ActorId::parse(name).unwrap_or_else(|e| panic!("test actor: {e}"))
}

fn project(name: &str) -> ProjectId {
    ProjectId::parse(name).unwrap_or_else(|e| panic!("test project: {e}"))
}

fn session(project_name: &str, client: Option<&str>) -> SessionKey {
    SessionKey {
        project: project(project_name),
        actor: actor("worker"),
        client_id: client.map(|c| ClientId::parse(c).unwrap_or_else(|e| panic!("test clientId: {e}"))),
    }
}

fn room(name: &str) -> RoomKey {
    RoomKey {
        project: project("proj"),
        app: AppId::parse("app").unwrap_or_else(|e| panic!("test app: {e}")),
        room: Arc::from(name),
    }
}

fn topic(room_name: &str, name: &str) -> TopicAddress {
    TopicAddress { room: room(room_name), topic: Arc::from(name) }
}

fn group(topic: &TopicAddress, name: &str) -> GroupKey {
    GroupKey { topic: topic.clone(), group: Arc::from(name) }
}
