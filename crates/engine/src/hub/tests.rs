use std::sync::Arc;

use bytes::Bytes;
use skua_core::{ActorId, AppId, ClientId, ControlMessage, NodeId, ProjectId, Publication, RoomKey, SessionKey};

use super::*;

/// A bus that accepts everything and delivers nothing: these tests call `dispatch` directly.
struct NullBus;

#[async_trait::async_trait]
impl Bus for NullBus {
    async fn publish(&self, _: Arc<Envelope>) -> Result<(), BusError> {
        Ok(())
    }
    async fn subscribe(&self, _: &BusSubscription) -> Result<(), BusError> {
        Ok(())
    }
    async fn unsubscribe(&self, _: &BusSubscription) -> Result<(), BusError> {
        Ok(())
    }
}

fn delivery(envelope: Envelope) -> BusDelivery {
    BusDelivery { envelope: Arc::new(envelope), route: Route::Plain, retained_replay: false, trace_parent: None }
}

#[test]
fn control_messages_go_to_the_control_queue_and_never_to_a_connection() {
    let metrics = Arc::new(Metrics::default());
    let limits = crate::retained::RetainedLimits {
        keys_per_topic: 8,
        bytes_per_topic: 1 << 20,
        bytes: 1 << 20,
        bytes_per_project: 1 << 20,
    };
    let hub = Hub::new(Arc::new(NullBus), metrics.clone(), limits);
    let (tx, mut rx) = mpsc::channel(4);
    hub.set_control(tx);
    let project = ProjectId::parse("p").unwrap();
    let topic = TopicAddress {
        room: RoomKey { project: project.clone(), app: AppId::parse("a").unwrap(), room: Arc::from("r") },
        topic: Arc::from("t"),
    };
    let (conn, _outbox) = ConnHandle::new(ConnId(1), 16, 1 << 20, metrics);
    let conn = Arc::new(conn);
    let sub = LocalSub::new(conn.clone(), ActorId::parse("bob").unwrap(), Arc::from("a/r/t"), Arc::from([]), None);
    let _ = hub.insert(&topic, sub, None, false);

    let control = Control {
        id: EnvelopeId(1),
        node: NodeId::parse("n2").unwrap(),
        message: ControlMessage::Takeover {
            session: SessionKey {
                project,
                actor: ActorId::parse("bob").unwrap(),
                client_id: Some(ClientId::parse("c1").unwrap()),
            },
            conn: ConnId(9),
        },
    };
    hub.dispatch(&delivery(Envelope::Control(control.clone())));
    assert_eq!(rx.try_recv().ok(), Some(control), "the control handler gets it");
    assert_eq!(conn.queued_frames(), 0, "no connection gets a frame");

    let publication = Publication {
        history: None,
        id: EnvelopeId(2),
        topic,
        filter: None,
        publisher: ActorId::parse("alice").unwrap(),
        publisher_conn: ConnId(3),
        node: NodeId::parse("n2").unwrap(),
        timestamp_ms: 0,
        msg_id: None,
        retain: false,
        qos: 0,
        data: Bytes::from_static(b"\x01"),
    };
    hub.dispatch(&delivery(Envelope::Publication(publication)));
    assert_eq!(conn.queued_frames(), 1, "the subscription itself works");
    assert!(rx.try_recv().is_err(), "publications never reach the control handler");
}

/// The sequence number a `seq_delivery` carries, found in an encoded `message` frame.
fn seq_of(frame: &[u8]) -> u64 {
    let at = frame.windows(4).position(|w| w == b"SEQ!").expect("a sequence-numbered frame") + 4;
    u64::from_be_bytes(frame[at..at + 8].try_into().unwrap())
}

fn seq_delivery(topic: &TopicAddress, i: u64) -> BusDelivery {
    let mut data = vec![0xc4, 12];
    data.extend_from_slice(b"SEQ!");
    data.extend_from_slice(&i.to_be_bytes());
    delivery(Envelope::Publication(Publication {
        history: None,
        id: EnvelopeId(u128::from(i)),
        topic: topic.clone(),
        filter: None,
        publisher: ActorId::parse("alice").unwrap(),
        publisher_conn: ConnId(0),
        node: NodeId::parse("n1").unwrap(),
        timestamp_ms: 0,
        msg_id: None,
        retain: false,
        qos: 0,
        data: Bytes::from(data),
    }))
}

/// A topic crosses [`SPLIT_FANOUT`] while many of its deliveries are queued on its home shard.
/// On this current-thread runtime the shards run only when the test waits, and each yields after
/// its cooperative budget, so a split that started while the home shard still had whole
/// deliveries queued would let the other shards' subscribers get later messages first; the
/// split waits until the topic has nothing in flight, and every subscriber gets every message in
/// order.
#[tokio::test]
async fn a_topic_keeps_its_order_while_it_crosses_the_split_size_with_deliveries_queued() {
    const N: u64 = 2_000;
    let metrics = Arc::new(Metrics::default());
    let limits = crate::retained::RetainedLimits {
        keys_per_topic: 8,
        bytes_per_topic: 1 << 20,
        bytes: 1 << 20,
        bytes_per_project: 1 << 20,
    };
    let hub = Arc::new(Hub::new(Arc::new(NullBus), metrics.clone(), limits));
    let topic = TopicAddress {
        room: RoomKey {
            project: ProjectId::parse("p").unwrap(),
            app: AppId::parse("a").unwrap(),
            room: Arc::from("r"),
        },
        topic: Arc::from("t"),
    };
    let echo: Arc<str> = Arc::from("a/r/t");
    let mut conns = Vec::new();
    let mut add = |id: u64| {
        let (conn, outbox) = ConnHandle::new(ConnId(id), 1 << 20, 1 << 30, metrics.clone());
        let conn = Arc::new(conn);
        let sub = LocalSub::new(conn.clone(), ActorId::parse("bob").unwrap(), echo.clone(), Arc::from([]), None);
        let _ = hub.insert(&topic, sub, None, false);
        conns.push((conn, outbox));
    };
    for id in 1..=SPLIT_FANOUT as u64 {
        add(id);
    }
    let (tx, rx) = mpsc::channel(4 * N as usize);
    let tracker = tokio_util::task::TaskTracker::new();
    hub.start_dispatch(rx, CancellationToken::new(), 3, 4 * N as usize, &tracker);
    for i in 0..N {
        tx.try_send(seq_delivery(&topic, i)).unwrap();
    }
    // Past the split size, with the first N still queued (nothing has run yet).
    for id in 0..4 {
        add(1_000 + id);
    }
    for i in N..2 * N {
        tx.try_send(seq_delivery(&topic, i)).unwrap();
    }
    drop(tx);
    tracker.close();
    tracker.wait().await;
    for (conn, outbox) in &mut conns[..SPLIT_FANOUT] {
        let got: Vec<u64> = std::iter::from_fn(|| outbox.try_recv(conn)).map(|f| seq_of(&f)).collect();
        assert_eq!(got, (0..2 * N).collect::<Vec<_>>(), "connection {}: every message, in order", conn.id);
    }
    // Once nothing is in flight the topic splits: later deliveries still reach everyone once.
    let (tx, rx) = mpsc::channel(16);
    let tracker = tokio_util::task::TaskTracker::new();
    hub.start_dispatch(rx, CancellationToken::new(), 3, 16, &tracker);
    tx.send(seq_delivery(&topic, 2 * N)).await.unwrap();
    drop(tx);
    tracker.close();
    tracker.wait().await;
    assert!(read(&hub.topics)[&topic].flow.split.load(Ordering::Relaxed), "split past the size");
    for (conn, outbox) in &mut conns {
        let got: Vec<u64> = std::iter::from_fn(|| outbox.try_recv(conn)).map(|f| seq_of(&f)).collect();
        assert_eq!(got.last(), Some(&(2 * N)), "connection {} got the split delivery", conn.id);
    }
    // The guard itself: the split changes only while nothing of the topic is in flight.
    let (split, flow) = hub.plan(&topic, 3);
    assert!(split, "past the size, nothing in flight: split");
    for (conn, _) in &conns[..10] {
        hub.remove(&topic, conn.id);
    }
    assert!(hub.plan(&topic, 3).0, "below the size again, but 3 jobs in flight: still split");
    let flow = flow.expect("counted");
    assert_eq!(flow.inflight.load(Ordering::Relaxed), 6);
    flow.inflight.store(0, Ordering::Relaxed);
    assert!(!hub.plan(&topic, 3).0, "nothing in flight: whole again");
}
