//! Behaviour of [`InProcessBus`] beyond the conformance suite: backpressure, dropped
//! receivers and handles, the retained bound, and cleanup of the routing table.

use std::time::Duration;

use bytes::Bytes;
use skua_core::{ActorId, AppId, ConnId, EnvelopeId, ProjectId, Publication};
use tokio::time::timeout;

use super::*;

fn topic(name: &str) -> TopicAddress {
    let room =
        RoomKey { project: ProjectId::parse("p").unwrap(), app: AppId::parse("a").unwrap(), room: Arc::from("r") };
    TopicAddress { room, topic: Arc::from(name) }
}

fn publication(topic: &TopicAddress, filter: Option<&str>, n: u64, retain: bool) -> Arc<Envelope> {
    Arc::new(Envelope::Publication(Publication {
        history: None,
        id: EnvelopeId(u128::from(n)),
        topic: topic.clone(),
        filter: filter.map(str::to_owned),
        publisher: ActorId::parse("alice").unwrap(),
        publisher_conn: ConnId(1),
        node: NodeId::parse("n1").unwrap(),
        timestamp_ms: 0,
        msg_id: None,
        retain,
        qos: 0,
        data: Bytes::from(n.to_string()),
    }))
}

fn data(d: &BusDelivery) -> String {
    match &*d.envelope {
        Envelope::Publication(p) => String::from_utf8_lossy(&p.data).into_owned(),
        Envelope::Presence(_) | Envelope::Control(_) => "presence or control".to_owned(),
    }
}

fn node(name: &str) -> NodeId {
    NodeId::parse(name).unwrap()
}

#[tokio::test]
async fn publish_waits_for_a_full_receiver_and_drops_nothing() {
    let bus = InProcessBus::new();
    let (a, _a_rx) = bus.connect(node("a"), 1);
    let (b, mut b_rx) = bus.connect(node("b"), 1);
    let t = topic("t");
    b.subscribe(&BusSubscription::Topic(t.clone())).await.unwrap();
    a.publish(publication(&t, None, 1, false)).await.unwrap();
    let second = a.publish(publication(&t, None, 2, false));
    tokio::pin!(second);
    assert!(timeout(Duration::from_millis(50), &mut second).await.is_err(), "publish must wait while full");
    assert_eq!(data(&b_rx.recv().await.unwrap()), "1");
    timeout(Duration::from_secs(5), second).await.expect("publish resumes once there is room").unwrap();
    assert_eq!(data(&b_rx.recv().await.unwrap()), "2");
}

#[tokio::test]
async fn dropped_receiver_is_skipped_and_removed() {
    let bus = InProcessBus::new();
    let (a, _a_rx) = bus.connect(node("a"), 4);
    let (b, b_rx) = bus.connect(node("b"), 1);
    let (c, mut c_rx) = bus.connect(node("c"), 4);
    let t = topic("t");
    b.subscribe(&BusSubscription::Topic(t.clone())).await.unwrap();
    c.subscribe(&BusSubscription::Topic(t.clone())).await.unwrap();
    drop(b_rx);
    for n in 0..3 {
        a.publish(publication(&t, None, n, false)).await.unwrap();
    }
    for n in 0..3 {
        assert_eq!(data(&c_rx.recv().await.unwrap()), n.to_string());
    }
    assert!(matches!(b.subscribe(&BusSubscription::Topic(topic("u"))).await, Err(BusError::Closed)));
    assert_eq!(bus.shared.lock().nodes.len(), 2);
}

#[tokio::test]
async fn dropping_a_handle_removes_its_subscriptions_and_closes_its_receiver() {
    let bus = InProcessBus::new();
    let (a, mut a_rx) = bus.connect(node("a"), 4);
    a.subscribe(&BusSubscription::Topic(topic("t"))).await.unwrap();
    a.subscribe(&BusSubscription::Presence(topic("t").room)).await.unwrap();
    drop(a);
    assert!(a_rx.recv().await.is_none());
    let state = bus.shared.lock();
    assert!(state.nodes.is_empty() && state.topics.is_empty() && state.rooms.is_empty());
}

#[tokio::test]
async fn group_passes_over_a_member_whose_receiver_is_gone() {
    let bus = InProcessBus::new();
    let (a, _a_rx) = bus.connect(node("a"), 4);
    let (b, b_rx) = bus.connect(node("b"), 4);
    let (c, mut c_rx) = bus.connect(node("c"), 8);
    let t = topic("t");
    let group = BusSubscription::Group(GroupKey { topic: t.clone(), group: Arc::from("g") });
    b.subscribe(&group).await.unwrap();
    c.subscribe(&group).await.unwrap();
    drop(b_rx);
    for n in 0..4 {
        a.publish(publication(&t, None, n, false)).await.unwrap();
    }
    for n in 0..4 {
        assert_eq!(data(&c_rx.recv().await.unwrap()), n.to_string());
    }
}

#[tokio::test]
async fn full_retained_store_keeps_replacing_but_refuses_new_keys() {
    let bus = InProcessBus::with_max_retained(2);
    let (a, _a_rx) = bus.connect(node("a"), 4);
    let (b, mut b_rx) = bus.connect(node("b"), 8);
    let t = topic("t");
    a.publish(publication(&t, Some("k1"), 1, true)).await.unwrap();
    a.publish(publication(&t, Some("k2"), 2, true)).await.unwrap();
    a.publish(publication(&t, Some("k3"), 3, true)).await.unwrap();
    a.publish(publication(&t, Some("k1"), 4, true)).await.unwrap();
    assert_eq!((bus.retained_len(), bus.retained_refused()), (2, 1));
    b.subscribe(&BusSubscription::Topic(t.clone())).await.unwrap();
    let mut replayed = vec![data(&b_rx.recv().await.unwrap()), data(&b_rx.recv().await.unwrap())];
    replayed.sort();
    assert_eq!(replayed, ["2", "4"]);
    assert!(b_rx.try_recv().is_err());
}

#[tokio::test]
async fn forgotten_retained_publications_free_their_slots_and_are_not_replayed() {
    let bus = InProcessBus::with_max_retained(3);
    let (a, _a_rx) = bus.connect(node("a"), 4);
    let (b, mut b_rx) = bus.connect(node("b"), 8);
    let (t, u) = (topic("t"), topic("u"));
    a.publish(publication(&t, None, 1, true)).await.unwrap();
    a.publish(publication(&t, Some("k"), 2, true)).await.unwrap();
    a.publish(publication(&u, None, 3, true)).await.unwrap();
    a.forget_retained(std::slice::from_ref(&t));
    assert_eq!(bus.retained_len(), 1, "t's two are gone, u's stays");
    a.publish(publication(&t, Some("j"), 4, true)).await.unwrap();
    assert_eq!((bus.retained_len(), bus.retained_refused()), (2, 0), "their slots are free again");
    b.subscribe(&BusSubscription::Topic(t.clone())).await.unwrap();
    assert_eq!(data(&b_rx.recv().await.unwrap()), "4", "only what was retained after");
    assert!(b_rx.try_recv().is_err());
}

#[tokio::test]
async fn unused_channels_are_dropped() {
    let bus = InProcessBus::new();
    let (a, _a_rx) = bus.connect(node("a"), 4);
    let t = topic("t");
    let subs = [
        BusSubscription::Topic(t.clone()),
        BusSubscription::TopicKey(t.clone(), "k".to_owned()),
        BusSubscription::Group(GroupKey { topic: t.clone(), group: Arc::from("g") }),
        BusSubscription::Presence(t.room.clone()),
    ];
    for sub in &subs {
        a.subscribe(sub).await.unwrap();
    }
    for sub in &subs {
        a.unsubscribe(sub).await.unwrap();
    }
    let state = bus.shared.lock();
    assert!(state.topics.is_empty() && state.rooms.is_empty());
}

/// Takes the deliveries whose payload is an even number in place; hands back the others.
#[derive(Default)]
struct EvenSink(Mutex<Vec<String>>);

impl DeliverySink for EvenSink {
    fn try_deliver(&self, d: BusDelivery) -> Option<BusDelivery> {
        let n: u64 = data(&d).parse().unwrap_or(1);
        if n.is_multiple_of(2) {
            self.0.lock().unwrap().push(data(&d));
            None
        } else {
            Some(d)
        }
    }
}

#[tokio::test]
async fn a_sink_is_offered_every_delivery_and_what_it_hands_back_reaches_the_receiver() {
    let bus = InProcessBus::new();
    let (a, mut a_rx) = bus.connect(node("a"), 4);
    let sink = Arc::new(EvenSink::default());
    let weak: Weak<dyn DeliverySink> = Arc::downgrade(&(sink.clone() as Arc<dyn DeliverySink>));
    assert!(a.set_sink(weak));
    let t = topic("t");
    a.publish(publication(&t, None, 10, true)).await.unwrap();
    // The retained replay of a new subscription is offered too.
    a.subscribe(&BusSubscription::Topic(t.clone())).await.unwrap();
    for n in 1..=6 {
        a.publish(publication(&t, None, n, false)).await.unwrap();
    }
    assert_eq!(*sink.0.lock().unwrap(), ["10", "2", "4", "6"]);
    for want in ["1", "3", "5"] {
        let d = timeout(Duration::from_secs(5), a_rx.recv()).await.unwrap().unwrap();
        assert_eq!(data(&d), want);
    }
    assert!(a_rx.try_recv().is_err());
    // Once the sink is gone, everything goes through the receiver.
    drop(sink);
    a.publish(publication(&t, None, 8, false)).await.unwrap();
    assert_eq!(data(&a_rx.recv().await.unwrap()), "8");
}
