//! The two tasks of a node's MQTT bus: [`poll`] drives rumqttc's event loop, [`pump`] feeds
//! its request channel. See the [parent module](super) for how they share the link.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rumqttc::Outgoing;
use rumqttc::v5::mqttbytes::v5::{
    Filter, Packet, PubAckReason, PubRecReason, Publish, RetainForwardRule, SubscribeProperties, SubscribeReasonCode,
};
use rumqttc::v5::{ConnectionError, Event, EventLoop};
use skua_core::{BusDelivery, Envelope, Route};
use tokio::sync::mpsc;
use tracing::{debug, error, info, warn};

use super::link::{Phase, Work};
use super::{HOP_QOS, Shared, codec, publish_packet_size};

/// How often the pump checks a resubscription for progress.
const RESUB_CHECK: Duration = Duration::from_millis(500);

/// Drives the event loop until the bus is cancelled: forwards inbound publications to `tx`
/// (awaiting room: backpressure), tracks acknowledgements, and reconnects with backoff.
///
/// `EventLoop::poll` is never cancelled except at shutdown: dropping it halfway through a
/// write could lose part of a packet.
///
/// `tls` is the material the event loop's transport was built from; with
/// [`MqttBusConfig::tls_reload`](super::MqttBusConfig::tls_reload) it is read again before each
/// reconnection attempt and the transport rebuilt when it changed.
pub(super) async fn poll(
    shared: Arc<Shared>,
    mut eventloop: EventLoop,
    tx: mpsc::Sender<BusDelivery>,
    mut tls: super::MqttTls,
) {
    let cancel = shared.cancel.clone();
    let mut conn = ConnState { failures: 0, down_since: Instant::now(), ever_connected: false, receiver_open: true };
    loop {
        let event = tokio::select! {
            biased;
            () = cancel.cancelled() => break,
            event = eventloop.poll() => event,
        };
        match event {
            Ok(Event::Incoming(Packet::Publish(publish))) => {
                let deliveries = inbound(&shared, &publish);
                shared.pump.notify_one();
                for delivery in deliveries {
                    if !conn.receiver_open {
                        break;
                    }
                    tokio::select! {
                        biased;
                        () = cancel.cancelled() => break,
                        sent = tx.send(delivery) => match sent {
                            Ok(()) => {
                                shared.stats.delivered.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(_) => {
                                conn.receiver_open = false;
                                debug!(node = %shared.node, "Delivery receiver dropped; discarding deliveries.");
                            }
                        },
                    }
                }
                continue;
            }
            Ok(Event::Incoming(packet)) => incoming(&shared, packet, &mut conn),
            Ok(Event::Outgoing(Outgoing::Disconnect)) if shared.closing.load(Ordering::Relaxed) => {
                // `MqttBus::close` sent it: the bus is done.
                cancel.cancel();
                break;
            }
            Ok(Event::Outgoing(outgoing)) => self::outgoing(&shared, outgoing),
            Err(err) => {
                lost(&shared, &err, &mut conn);
                // Drain what is left in the request channel into rumqttc's pending list, which the
                // next CONNACK (clean start: no session) discards; the link requeued all of it.
                eventloop.clean();
                let delay = backoff(&shared, conn.failures);
                conn.failures = conn.failures.saturating_add(1);
                tokio::select! {
                    () = cancel.cancelled() => break,
                    () = tokio::time::sleep(delay) => {}
                }
                reload_tls(&shared, &mut eventloop, &mut tls);
            }
        }
        shared.pump.notify_one();
    }
    shared.update(|link| link.on_disconnect());
    debug!(node = %shared.node, "MQTT poll task stopped.");
}

/// Reads the certificate files again (`tls_reload`) and, when they changed, rebuilds the
/// transport the next connection attempt uses; a file that cannot be read or used keeps the
/// previous material (logged), and the next attempt reads again.
fn reload_tls(shared: &Shared, eventloop: &mut EventLoop, tls: &mut super::MqttTls) {
    let Some(reload) = &shared.config.tls_reload else { return };
    let fresh = match (reload.0)() {
        Ok(fresh) if fresh == *tls => return,
        Ok(fresh) => fresh,
        Err(e) => {
            warn!(node = %shared.node, error = %e, "Cannot read the MQTT certificate files again; reconnecting with the previous ones.");
            return;
        }
    };
    match super::tls::client_config(Some(&fresh)) {
        Ok(config) => {
            eventloop
                .options
                .set_transport(rumqttc::Transport::Tls(rumqttc::TlsConfiguration::Rustls(Arc::new(config))));
            *tls = fresh;
            shared.stats.tls_reloads.fetch_add(1, Ordering::Relaxed);
            info!(node = %shared.node, "The MQTT certificate files changed; reconnecting with the new ones.");
        }
        Err(e) => {
            warn!(node = %shared.node, error = %e, "The MQTT certificate files changed but are not usable; reconnecting with the previous ones.");
        }
    }
}

struct ConnState {
    /// Failed attempts since the last CONNACK.
    failures: u32,
    down_since: Instant,
    ever_connected: bool,
    receiver_open: bool,
}

fn incoming(shared: &Shared, packet: Packet, conn: &mut ConnState) {
    let s = shared;
    match packet {
        Packet::ConnAck(ack) => {
            let props = ack.properties.as_ref();
            let broker_max = props.and_then(|p| p.max_packet_size);
            if props.and_then(|p| p.subscription_identifiers_available) == Some(0) {
                warn!(node = %s.node, "The broker offers no subscription identifiers; routing inbound messages by topic.");
            }
            s.update(|link| link.on_connack(broker_max, Instant::now()));
            s.stats.connects.fetch_add(1, Ordering::Relaxed);
            if conn.ever_connected {
                info!(node = %s.node, down_for = ?conn.down_since.elapsed(), attempts = conn.failures, "Reconnected to the MQTT broker; resubscribing.");
            } else {
                info!(node = %s.node, client_id = %s.client_id, url = %super::redact_url(&s.config.url), "Connected to the MQTT broker.");
            }
            conn.ever_connected = true;
            conn.failures = 0;
        }
        // Everything below refers to requests of the current connection. Events still buffered
        // from a connection that failed come out before the next CONNACK, while the link is
        // disconnected, and are ignored: the link already requeued or forgot those requests.
        _ if s.lock().phase == Phase::Disconnected => {}
        Packet::SubAck(ack) => {
            let refused = match ack.return_codes.first() {
                Some(SubscribeReasonCode::Success(_)) => None,
                Some(code) => Some(format!("{code:?}")),
                None => Some("empty SUBACK".to_owned()),
            };
            if let Some(filter) = s.update(|link| link.on_suback(ack.pkid, refused.clone())) {
                error!(node = %s.node, %filter, reason = refused.as_deref().unwrap_or(""), "The broker refused a subscription; it is dropped.");
            }
        }
        Packet::UnsubAck(ack) => s.update(|link| link.on_unsuback(ack.pkid)),
        Packet::PubAck(ack) => acked(
            s,
            ack.pkid,
            matches!(ack.reason, PubAckReason::Success | PubAckReason::NoMatchingSubscribers),
            &ack.reason,
        ),
        Packet::PubRec(ack) => acked(
            s,
            ack.pkid,
            matches!(ack.reason, PubRecReason::Success | PubRecReason::NoMatchingSubscribers),
            &ack.reason,
        ),
        _ => {}
    }
}

fn acked(s: &Shared, pkid: u16, ok: bool, reason: &dyn std::fmt::Debug) {
    if !s.lock().on_publish_ack(pkid) {
        return;
    }
    if ok {
        s.stats.published.fetch_add(1, Ordering::Relaxed);
    } else {
        let n = s.stats.rejected.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_power_of_two() {
            warn!(node = %s.node, ?reason, rejected = n, "The broker refused a publication; it is dropped.");
        }
    }
    s.space.notify_waiters();
}

fn outgoing(s: &Shared, outgoing: Outgoing) {
    match outgoing {
        Outgoing::Publish(pkid) => {
            let freed = {
                let mut link = s.lock();
                link.phase != Phase::Disconnected && link.on_outgoing_publish(pkid)
            };
            if freed {
                s.stats.published.fetch_add(1, Ordering::Relaxed);
                s.space.notify_waiters();
            }
        }
        Outgoing::Subscribe(pkid) | Outgoing::Unsubscribe(pkid) => {
            let mut link = s.lock();
            if link.phase != Phase::Disconnected {
                link.on_outgoing_ctl(pkid);
            }
        }
        _ => {}
    }
}

/// Decodes and routes one inbound PUBLISH.
fn inbound(s: &Shared, publish: &Publish) -> Vec<BusDelivery> {
    let (envelope, trace) = match codec::decode_traced(&publish.payload) {
        Ok((envelope, trace)) => (Arc::new(envelope), trace.map(Arc::<str>::from)),
        Err(err) => {
            let n = s.stats.decode_errors.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_power_of_two() {
                warn!(node = %s.node, topic = %String::from_utf8_lossy(&publish.topic), error = %err, decode_errors = n, "Dropped an inbound MQTT message that is not an envelope.");
            }
            return Vec::new();
        }
    };
    let ids = publish.properties.as_ref().map_or(&[][..], |p| &p.subscription_identifiers[..]);
    let topic = std::str::from_utf8(&publish.topic).unwrap_or("");
    let envelope_id = match &*envelope {
        Envelope::Publication(p) => Some(p.id.0),
        Envelope::Control(c) => Some(c.id.0),
        Envelope::Presence(_) => None,
    };
    let routed = s.lock().route(ids, topic, publish.retain, envelope_id);
    let count = |flag: bool, c: &std::sync::atomic::AtomicU64| {
        if flag {
            c.fetch_add(1, Ordering::Relaxed);
        }
    };
    count(routed.duplicate, &s.stats.duplicates);
    count(routed.retained_to_group, &s.stats.retained_to_group);
    count(routed.unrouted, &s.stats.unrouted);
    let mut deliveries = Vec::with_capacity(usize::from(routed.plain) + routed.groups.len());
    if routed.plain {
        deliveries.push(BusDelivery {
            envelope: envelope.clone(),
            route: Route::Plain,
            retained_replay: publish.retain,
            trace_parent: trace.clone(),
        });
    }
    for group in routed.groups {
        deliveries.push(BusDelivery {
            envelope: envelope.clone(),
            route: Route::Group(group),
            retained_replay: false,
            trace_parent: trace.clone(),
        });
    }
    deliveries
}

fn lost(s: &Shared, err: &ConnectionError, conn: &mut ConnState) {
    s.stats.connection_failures.fetch_add(1, Ordering::Relaxed);
    let was_up = s.lock().phase != Phase::Disconnected;
    s.update(|link| link.on_disconnect());
    if was_up {
        conn.down_since = Instant::now();
        let held = s.lock().held();
        warn!(node = %s.node, error = %err, held, "Lost the MQTT broker connection; buffering publications and reconnecting.");
    } else if (conn.failures + 1).is_power_of_two() {
        warn!(node = %s.node, error = %err, attempts = conn.failures + 1, url = %super::redact_url(&s.config.url), "Cannot reach the MQTT broker; retrying.");
    } else {
        debug!(node = %s.node, error = %err, "MQTT connection attempt failed.");
    }
}

/// The delay before attempt `failures + 1`: min × 2^failures, capped at max, then 50–100 % of
/// that (jitter, so nodes that lost one broker do not all come back at the same instant).
fn backoff(s: &Shared, failures: u32) -> Duration {
    let (min, max) = (s.config.reconnect_backoff_min, s.config.reconnect_backoff_max);
    let step = min.saturating_mul(2u32.saturating_pow(failures.min(24))).min(max);
    let noise = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos()) % 1000;
    step.mul_f64(0.5 + f64::from(noise) / 2000.0)
}

/// Hands queued work to rumqttc until the bus is cancelled.
pub(super) async fn pump(shared: Arc<Shared>) {
    let cancel = shared.cancel.clone();
    loop {
        pump_once(&shared);
        let resubscribing = check_resubscription(&shared);
        let hold = shared.lock().flush_after;
        tokio::select! {
            biased;
            () = cancel.cancelled() => break,
            () = shared.pump.notified() => {}
            () = tokio::time::sleep(RESUB_CHECK), if resubscribing => {}
            () = tokio::time::sleep_until(hold.unwrap_or_else(Instant::now).into()), if hold.is_some() => {}
        }
    }
}

/// Hands work to rumqttc's request channel until there is none or the channel is full.
fn pump_once(s: &Shared) {
    s.update(|link| {
        while let Some(work) = link.next_work() {
            let taken = match &work {
                Work::Subscribe { filter, id, group } => {
                    let filter = Filter {
                        path: filter.clone(),
                        qos: HOP_QOS,
                        nolocal: false,
                        preserve_retain: false,
                        // Shared subscriptions must not get retained messages (contract 3).
                        retain_forward_rule: if *group {
                            RetainForwardRule::Never
                        } else {
                            RetainForwardRule::OnEverySubscribe
                        },
                    };
                    let props = SubscribeProperties { id: Some(*id as usize), user_properties: Vec::new() };
                    s.client.try_subscribe_many_with_properties([filter], props).is_ok()
                }
                Work::Unsubscribe { filter } => s.client.try_unsubscribe(filter.clone()).is_ok(),
                Work::Publish(o) => {
                    let size = publish_packet_size(o.topic.len(), o.payload.len(), o.qos);
                    let max = link.broker_max_packet.map_or(s.config.max_packet_size, |b| b.min(s.config.max_packet_size));
                    if size > max as usize {
                        // Checked in `publish`; only a broker that lowered its limit since gets
                        // here. Sending it would make rumqttc drop the connection, again and again.
                        let n = s.stats.rejected.fetch_add(1, Ordering::Relaxed) + 1;
                        warn!(node = %s.node, size, max, rejected = n, "Publication exceeds the broker's packet limit; dropped.");
                        s.space.notify_waiters();
                        continue;
                    }
                    // Our topics never contain wildcards (levels are escaped), so a failure means
                    // the channel is full.
                    s.client.try_publish(o.topic.clone(), o.qos, o.retain, o.payload.clone()).is_ok()
                }
            };
            if taken {
                link.handed(work);
            } else {
                link.unhand(work);
                return;
            }
        }
    });
}

/// Forces a reconnect when a resubscription made no progress within the ack timeout; returns
/// whether a resubscription is running.
fn check_resubscription(s: &Shared) -> bool {
    let started = s.lock().resub_started;
    let Some(started) = started else {
        return false;
    };
    if started.elapsed() > s.config.ack_timeout {
        error!(node = %s.node, timeout = ?s.config.ack_timeout, "Resubscription stalled; reconnecting.");
        // The broker closes the connection on DISCONNECT and the poll task reconnects. Until
        // then, check again later.
        let _ = s.client.try_disconnect();
        s.lock().resub_started = Some(Instant::now());
    }
    true
}
