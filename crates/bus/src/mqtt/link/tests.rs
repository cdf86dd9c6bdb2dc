use std::sync::Arc;

use skua_core::{AppId, ProjectId, RoomKey, TopicAddress};

use super::*;

fn topic(name: &str) -> TopicAddress {
    TopicAddress {
        room: RoomKey {
            project: ProjectId::parse("p").unwrap(),
            app: AppId::parse("a").unwrap(),
            room: Arc::from("r"),
        },
        topic: Arc::from(name),
    }
}

fn group(name: &str) -> GroupKey {
    GroupKey { topic: topic("t"), group: Arc::from(name) }
}

fn connected() -> Link {
    let mut link = Link::new(4);
    link.on_connack(None, Instant::now());
    assert_eq!(link.phase, Phase::Available);
    link
}

/// Hands the next work item and reports its packet id as rumqttc would.
fn send(link: &mut Link, pkid: u16) -> Work {
    let work = link.next_work().expect("work queued");
    let echo = match &work {
        Work::Subscribe { filter, id, group } => Work::Subscribe { filter: filter.clone(), id: *id, group: *group },
        Work::Unsubscribe { filter } => Work::Unsubscribe { filter: filter.clone() },
        Work::Publish(o) => Work::Publish(o.clone()),
    };
    link.handed(work);
    match &echo {
        Work::Publish(_) => {
            link.on_outgoing_publish(pkid);
        }
        _ => link.on_outgoing_ctl(pkid),
    }
    echo
}

fn publish(link: &mut Link, label: &str, qos: QoS) {
    link.push_publication(label.to_owned(), qos, false, Bytes::new());
}

fn topics_of_queue(link: &mut Link) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(Work::Publish(o)) = link.next_work() {
        out.push(o.topic);
    }
    out
}

#[test]
fn subscribe_waits_for_its_suback_and_is_idempotent() {
    let mut link = connected();
    let sub = BusSubscription::Topic(topic("t"));
    let Step::Wait(mut ack, id) = link.subscribe(&sub, || "f".into()) else { panic!("must wait") };
    // A second caller waits for the same SUBACK; no second SUBSCRIBE is queued.
    let Step::Wait(mut ack2, id2) = link.subscribe(&sub, || unreachable!()) else { panic!("must wait") };
    assert_eq!(id, id2);
    let Work::Subscribe { filter, id: sent_id, group } = send(&mut link, 7) else { panic!("a SUBSCRIBE") };
    assert_eq!((filter.as_str(), sent_id, group), ("f", id, false));
    assert!(link.next_work().is_none());
    assert!(ack.try_recv().is_err());
    assert_eq!(link.on_suback(7, None), None);
    assert!(matches!(ack.try_recv(), Ok(Ok(()))));
    assert!(matches!(ack2.try_recv(), Ok(Ok(()))));
    assert!(matches!(link.subscribe(&sub, || unreachable!()), Step::Done));
}

#[test]
fn a_refused_subscription_is_dropped_and_reported() {
    let mut link = connected();
    let sub = BusSubscription::Topic(topic("t"));
    let Step::Wait(mut ack, _) = link.subscribe(&sub, || "f".into()) else { panic!("must wait") };
    send(&mut link, 3);
    assert_eq!(link.on_suback(3, Some("NotAuthorized".into())), Some("f".to_owned()));
    assert!(matches!(ack.try_recv(), Ok(Err(BusError::Backend(_)))));
    assert_eq!(link.subscriptions(), 0);
}

#[test]
fn subscriptions_made_while_disconnected_are_made_on_connack_in_order() {
    let mut link = Link::new(4);
    let (a, b) = (BusSubscription::Topic(topic("a")), BusSubscription::Group(group("g")));
    assert!(matches!(link.subscribe(&a, || "fa".into()), Step::Done));
    assert!(matches!(link.subscribe(&b, || "fb".into()), Step::Done));
    assert!(link.next_work().is_none(), "nothing goes out while disconnected");
    publish(&mut link, "early", QoS::AtLeastOnce);

    link.on_connack(None, Instant::now());
    assert_eq!(link.phase, Phase::Resubscribing);
    let Work::Subscribe { filter, .. } = send(&mut link, 1) else { panic!() };
    assert_eq!(filter, "fa");
    let Work::Subscribe { filter, group, .. } = send(&mut link, 2) else { panic!() };
    assert_eq!((filter.as_str(), group), ("fb", true));
    assert!(link.next_work().is_none(), "publications wait for the resubscription");
    link.on_suback(2, None);
    assert_eq!(link.phase, Phase::Resubscribing);
    link.on_suback(1, None);
    assert_eq!(link.phase, Phase::Available);
    assert_eq!(topics_of_queue(&mut link), ["early"]);
}

#[test]
fn unsubscribing_during_resubscription_still_completes_it() {
    let mut link = Link::new(4);
    let a = BusSubscription::Topic(topic("a"));
    link.subscribe(&a, || "fa".into());
    link.on_connack(None, Instant::now());
    assert!(matches!(link.unsubscribe(&a), Step::Wait(..)));
    // The queued SUBSCRIBE is skipped; the UNSUBSCRIBE goes out; the link is available.
    let Work::Unsubscribe { filter } = send(&mut link, 1) else { panic!() };
    assert_eq!(filter, "fa");
    assert_eq!(link.phase, Phase::Available);
}

#[test]
fn unacknowledged_publications_are_requeued_in_order_after_a_disconnect() {
    let mut link = connected();
    for (label, qos) in [("q1-a", QoS::AtLeastOnce), ("q0-b", QoS::AtMostOnce), ("q2-c", QoS::ExactlyOnce)] {
        publish(&mut link, label, qos);
    }
    publish(&mut link, "d", QoS::AtLeastOnce);
    publish(&mut link, "e", QoS::AtLeastOnce);
    send(&mut link, 1); // a: in flight
    send(&mut link, 0); // b: QoS 0, written: gone
    send(&mut link, 2); // c: in flight
    let d = link.next_work().expect("d");
    link.handed(d); // d: handed, packet id unknown
    assert_eq!(link.held(), 4);
    assert!(link.on_publish_ack(1)); // a acknowledged
    assert!(!link.on_publish_ack(1));

    link.on_disconnect();
    assert_eq!(link.held(), 3);
    assert!(link.next_work().is_none());
    link.on_connack(None, Instant::now());
    assert_eq!(topics_of_queue(&mut link), ["q2-c", "d", "e"]);
}

#[test]
fn routes_follow_subscription_identifiers() {
    let mut link = connected();
    let (t, k, g) = (
        BusSubscription::Topic(topic("t")),
        BusSubscription::TopicKey(topic("t"), "k".into()),
        BusSubscription::Group(group("g")),
    );
    let mut ids = Vec::new();
    for (sub, filter) in [(&t, "ns/t/#"), (&k, "ns/t/k"), (&g, "$share/x/ns/t/#")] {
        let Step::Wait(_, id) = link.subscribe(sub, || filter.into()) else { panic!() };
        ids.push(id as usize);
    }
    // One packet naming both plain subscriptions: one plain copy.
    let r = link.route(&[ids[0], ids[1]], "ns/t/k", false, Some(1));
    assert_eq!((r.plain, r.groups.len(), r.duplicate), (true, 0, false));
    // Mosquitto's second copy (one per subscription) is a duplicate.
    let r = link.route(&[ids[1]], "ns/t/k", false, Some(1));
    assert_eq!((r.plain, r.duplicate), (false, true));
    // The shared subscription's copy is a group delivery, once.
    let r = link.route(&[ids[2]], "ns/t/k", false, Some(1));
    assert_eq!(r.groups, [group("g")]);
    assert!(link.route(&[ids[2]], "ns/t/k", false, Some(1)).groups.is_empty());
    // A retained message through the shared subscription only is dropped.
    let r = link.route(&[ids[2]], "ns/t", true, Some(2));
    assert_eq!((r.plain, r.groups.len(), r.retained_to_group), (false, 0, true));
    // Replays are never deduplicated.
    assert!(link.route(&[ids[0]], "ns/t", true, Some(1)).plain);
    // Once unsubscribed, its identifier still routes until the UNSUBACK, then nothing.
    for pkid in 10..13 {
        send(&mut link, pkid); // the SUBSCRIBEs of t, k and g, in order
        link.on_suback(pkid, None);
    }
    let Step::Wait(mut done, _) = link.unsubscribe(&g) else { panic!("must wait") };
    send(&mut link, 20);
    assert_eq!(link.route(&[ids[2]], "ns/t", false, Some(3)).groups, [group("g")]);
    assert!(done.try_recv().is_err());
    link.on_unsuback(20);
    assert!(matches!(done.try_recv(), Ok(Ok(()))));
    let r = link.route(&[ids[2]], "ns/t", false, Some(4));
    assert_eq!((r.groups.len(), r.unrouted), (0, true));
}

#[test]
fn unsubscribing_while_disconnected_drops_the_route_at_once() {
    let mut link = Link::new(4);
    let t = BusSubscription::Topic(topic("t"));
    link.subscribe(&t, || "f".into());
    assert!(matches!(link.unsubscribe(&t), Step::Done));
    assert!(link.route(&[1], "f", false, Some(1)).unrouted);
    assert!(matches!(link.unsubscribe(&t), Step::Done), "absent: nothing to do");
}

#[test]
fn without_identifiers_topics_are_matched() {
    let mut link = connected();
    link.subscribe(&BusSubscription::Topic(topic("t")), || "ns/t/#".into());
    link.subscribe(&BusSubscription::Group(group("g")), || "$share/x/ns/t/#".into());
    let r = link.route(&[], "ns/t/k", false, Some(9));
    assert_eq!((r.plain, r.groups.len()), (true, 1));
    assert!(link.route(&[], "ns/u", false, Some(10)).unrouted);
}

#[test]
fn dedupe_forgets_the_oldest_beyond_its_window() {
    let mut d = Dedupe::new(2);
    assert!(d.first(1, 0));
    assert!(!d.first(1, 0));
    assert!(d.first(1, 5), "another route of the same envelope");
    assert!(d.first(2, 0));
    assert!(d.first(1, 0), "forgotten after two newer ones");
}

#[test]
fn abandoning_drops_only_the_unconfirmed_subscription_it_asked_for() {
    let mut link = connected();
    let sub = BusSubscription::Topic(topic("t"));
    let Step::Wait(_, id) = link.subscribe(&sub, || "f".into()) else { panic!() };
    assert!(!link.abandon(&sub, id + 1));
    assert!(link.abandon(&sub, id));
    assert_eq!(link.subscriptions(), 0);
    let Step::Wait(_, id) = link.subscribe(&sub, || "f".into()) else { panic!() };
    // The first SUBSCRIBE is skipped (its entry is gone), then the UNSUBSCRIBE, then the new one.
    assert!(matches!(send(&mut link, 1), Work::Unsubscribe { .. }));
    assert!(matches!(send(&mut link, 2), Work::Subscribe { id: i, .. } if i == id));
    link.on_suback(2, None);
    assert!(!link.abandon(&sub, id), "confirmed subscriptions stay");
}

#[test]
fn publications_held_in_an_outage_wait_for_the_flush_hold_after_a_reconnect() {
    let mut link = connected();
    link.set_flush_hold(std::time::Duration::from_secs(3600));
    link.on_disconnect();
    publish(&mut link, "held", QoS::AtLeastOnce);
    let t0 = Instant::now();
    link.on_connack(None, t0);
    assert_eq!(link.phase, Phase::Available);
    assert!(link.flush_after.is_some_and(|t| t > t0));
    assert!(link.next_work().is_none(), "held until the other nodes had time to resubscribe");
    link.flush_after = Some(t0);
    assert_eq!(topics_of_queue(&mut link), ["held"]);
    assert!(link.flush_after.is_none());
    // The first connection, or a reconnect with nothing held, never waits.
    let mut fresh = Link::new(4);
    fresh.set_flush_hold(std::time::Duration::from_secs(3600));
    publish(&mut fresh, "early", QoS::AtLeastOnce);
    fresh.on_connack(None, Instant::now());
    assert_eq!(topics_of_queue(&mut fresh), ["early"]);
}
