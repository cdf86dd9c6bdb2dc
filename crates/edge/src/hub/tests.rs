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
    let limits = crate::retained::RetainedLimits { keys_per_topic: 8, bytes_per_topic: 1 << 20, bytes: 1 << 20 };
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
