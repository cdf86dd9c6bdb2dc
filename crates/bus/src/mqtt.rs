//! [`MqttBus`]: the cluster bus, one node's [`Bus`] over an MQTT v5 broker (rumqttc).
//!
//! Each node keeps **one** MQTT connection (client id `<prefix>-<node>`, clean start, no
//! session) however many WebSocket clients it serves, and one MQTT subscription per
//! [`BusSubscription`]. The topic layout and the envelope format are in docs/cluster.md (the
//! private modules `topics` and `codec` here; [`encode_envelope`] and [`decode_envelope`] are
//! public for tools and tests).
//!
//! Three pieces share one `Link` (module `link`: plain data, no I/O) behind a
//! `std::sync::Mutex` (short sections, never held across an `.await`):
//! - the **poll task** drives rumqttc's `EventLoop` and nothing else: it never awaits a
//!   publish or subscribe, it routes inbound publishes and awaits the node's bounded delivery
//!   channel, and it reconnects with exponential backoff;
//! - the **pump task** hands queued requests to rumqttc's bounded request channel with
//!   `try_*` calls (waiting for room when it is full): subscription changes first, then
//!   publications in order, and only publications once the link is available;
//! - the [`Bus`] methods queue work and wait for acknowledgements.
//!
//! How it keeps the [`Bus`] contract:
//! 1. **Delivery**: `subscribe` returns once the broker's SUBACK arrived (or after
//!    [`MqttBusConfig::ack_timeout`] with `Unavailable`, the subscription dropped). While
//!    disconnected it records the subscription and returns `Ok` at once: it is made on
//!    reconnect, and what was published meanwhile is not delivered (no session).
//! 2. **One plain copy**: every SUBSCRIBE carries a subscription identifier; an inbound
//!    PUBLISH names the identifiers it matched, and Mosquitto sends one copy per matching
//!    subscription. Plain copies are deduplicated by envelope id over the last
//!    [`MqttBusConfig::dedupe_window`] envelopes.
//! 3. **Groups** are MQTT v5 shared subscriptions `$share/<ns>_<project>_<app>_<group>/…`; the
//!    broker picks one member per publication. Retained messages that reach a shared
//!    subscription (Mosquitto 2.0 sends them) are dropped.
//! 4. **Order**: one connection, publications handed to rumqttc in publish order, all at MQTT
//!    QoS 1 (the envelope's own `qos` travels inside it): Mosquitto releases a QoS 2 message
//!    only on its PUBREL, so QoS 0/1 messages sent after it overtake it, and QoS 0 bypasses the
//!    in-flight queue of a slow subscriber; one QoS on the hop keeps one order. After a
//!    reconnect every unacknowledged publication is sent again, still in order (receivers drop
//!    the copies they already had).
//! 5. **Retain**: the broker keeps retained messages per MQTT topic, i.e. per (topic, filter
//!    key), and replays them on SUBSCRIBE with the retain flag set, which is how
//!    `retained_replay` is told (retain-as-published stays off). Resubscribing after a
//!    reconnect replays them again; the hub drops replays it already delivered.
//! 6. **Idempotence**: the node's subscription table decides; the broker sees one SUBSCRIBE.
//! 7. **Backpressure**: the poll task awaits the delivery channel, so a full receiver stops
//!    reading from the broker (TCP backpressure). A receiver stalled for longer than 1.5 ×
//!    [`MqttBusConfig::keep_alive`] gets the connection dropped by the broker and reconnected.
//!    `publish` waits while the publish buffer is full and the link is up, and fails with
//!    `Unavailable` when it is full and the link is down.
//!
//! Inbound packets that do not decode are logged and counted ([`MqttBusStats`]), never fatal.

mod codec;
mod config;
mod link;
mod tasks;
mod tls;
mod topics;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use rumqttc::NetworkOptions;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::{AsyncClient, MqttOptions};
use skua_core::{Bus, BusDelivery, BusError, BusSubscription, Envelope, NodeId};
use tokio::sync::{Notify, mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

pub use codec::{DecodeError, VERSION as ENVELOPE_VERSION, decode as decode_envelope, encode as encode_envelope};
pub use config::{DEFAULT_MAX_PACKET_SIZE, MqttBusConfig, MqttConfigError, MqttTls, MqttTlsReload, redact_url};

use link::{Link, Phase, Step};
use topics::Layout;

/// Why an MQTT bus operation failed; the `#[source]` of [`BusError::Backend`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MqttError {
    /// The configuration was refused.
    #[error("invalid MQTT bus configuration")]
    Config(#[source] MqttConfigError),
    /// The envelope's packet exceeds [`MqttBusConfig::max_packet_size`] or the broker's limit.
    #[error("publication of {size} bytes exceeds the MQTT packet limit of {max} bytes")]
    TooLarge {
        /// The MQTT packet size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// The broker refused a subscription in its SUBACK.
    #[error("broker refused subscription {filter}: {reason}")]
    SubscribeRefused {
        /// The MQTT filter.
        filter: String,
        /// The SUBACK reason code.
        reason: String,
    },
    /// The `mqtts://` certificates could not be used.
    #[error("MQTT TLS: {0}")]
    Tls(String),
}

impl From<MqttError> for BusError {
    fn from(e: MqttError) -> Self {
        BusError::Backend(Box::new(e))
    }
}

/// Counters of one node's MQTT bus, from [`MqttBus::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MqttBusStats {
    /// Successful connections (CONNACKs), the first included.
    pub connects: u64,
    /// Connections lost (or attempts that failed).
    pub connection_failures: u64,
    /// Publications the broker took (PUBACK/PUBREC, or written for QoS 0).
    pub published: u64,
    /// Publications the broker refused in its acknowledgement (dropped, logged).
    pub rejected: u64,
    /// `publish` calls refused with `Unavailable` (buffer full while disconnected).
    pub refused: u64,
    /// Deliveries handed to the node's receiver.
    pub delivered: u64,
    /// Inbound packets that were not a valid envelope.
    pub decode_errors: u64,
    /// Times [`MqttBusConfig::tls_reload`] found changed certificates before a reconnection
    /// attempt, which then used them.
    pub tls_reloads: u64,
    /// Second copies of an envelope dropped (overlapping subscriptions, resends).
    pub duplicates: u64,
    /// Retained messages the broker sent to a shared subscription, dropped.
    pub retained_to_group: u64,
    /// Inbound packets for subscriptions this node no longer has.
    pub unrouted: u64,
    /// Publications held right now (waiting, or sent and not yet acknowledged).
    pub held: usize,
    /// Subscriptions recorded right now.
    pub subscriptions: usize,
}

/// A node's MQTT bus. See the [module docs](self).
///
/// Dropping the last handle stops its tasks and closes the connection without waiting;
/// [`MqttBus::close`] flushes first.
pub struct MqttBus {
    shared: Arc<Shared>,
    tracker: TaskTracker,
}

impl MqttBus {
    /// Connects `node` to the broker of `config` and returns its [`Bus`] handle and its
    /// delivery receiver, which holds at most `capacity` (at least 1) undelivered envelopes.
    ///
    /// # Errors
    /// [`BusError::Backend`] with [`MqttError::Config`] for an invalid config;
    /// [`BusError::Unavailable`] when no connection was made within
    /// [`MqttBusConfig::connect_timeout`] (later outages are ridden out instead).
    pub async fn connect(
        config: MqttBusConfig,
        node: NodeId,
        capacity: usize,
    ) -> Result<(Arc<dyn Bus>, mpsc::Receiver<BusDelivery>), BusError> {
        let (bus, rx) = Self::open(config, node, capacity).await?;
        Ok((bus, rx))
    }

    /// [`MqttBus::connect`], returning the concrete type (for [`MqttBus::availability`],
    /// [`MqttBus::stats`] and [`MqttBus::close`]).
    ///
    /// # Errors
    /// As [`MqttBus::connect`].
    pub async fn open(
        config: MqttBusConfig,
        node: NodeId,
        capacity: usize,
    ) -> Result<(Arc<MqttBus>, mpsc::Receiver<BusDelivery>), BusError> {
        let addr = config.validate().map_err(MqttError::Config)?;
        let client_id = format!("{}-{node}", config.client_id_prefix);
        let transport = if addr.tls {
            let tls = tls::client_config(config.tls.as_ref()).map_err(MqttError::Tls)?;
            Some(rumqttc::Transport::Tls(rumqttc::TlsConfiguration::Rustls(Arc::new(tls))))
        } else {
            None
        };
        let mut options = MqttOptions::new(client_id.clone(), addr.host, addr.port);
        if let Some(transport) = transport {
            options.set_transport(transport);
        }
        if let Some((user, password)) = addr.login {
            options.set_credentials(user, password);
        }
        // `validate` checked keep_alive >= 5 s, below which rumqttc panics.
        options
            .set_keep_alive(config.keep_alive)
            .set_clean_start(true)
            .set_max_packet_size(Some(config.max_packet_size))
            .set_outgoing_inflight_upper_limit(config.max_inflight)
            .set_connection_timeout(config.connect_timeout.as_secs().max(1));
        let mut network = NetworkOptions::new();
        network.set_tcp_nodelay(true);
        options.set_network_options(network);
        let (client, eventloop) = AsyncClient::new(options, config.request_channel_capacity);

        let (tx, rx) = mpsc::channel(capacity.max(1));
        let (available, mut availability) = watch::channel(false);
        let connect_timeout = config.connect_timeout;
        let shared = Arc::new(Shared {
            layout: Layout::new(&config.namespace),
            link: Mutex::new({
                let mut link = Link::new(config.dedupe_window);
                link.set_flush_hold(config.flush_hold);
                link
            }),
            config,
            node,
            client_id,
            client,
            pump: Notify::new(),
            space: Notify::new(),
            available,
            stats: Counters::default(),
            closing: AtomicBool::new(false),
            cancel: CancellationToken::new(),
        });
        let tracker = TaskTracker::new();
        tracker.spawn(tasks::poll(shared.clone(), eventloop, tx, shared.config.tls.clone().unwrap_or_default()));
        tracker.spawn(tasks::pump(shared.clone()));
        tracker.close();
        let bus = Arc::new(MqttBus { shared, tracker });

        match tokio::time::timeout(connect_timeout, availability.wait_for(|up| *up)).await {
            Ok(Ok(_)) => Ok((bus, rx)),
            _ => {
                warn!(node = %bus.shared.node, url = %redact_url(&bus.shared.config.url), "No MQTT connection within the connect timeout.");
                bus.shared.cancel.cancel();
                Err(BusError::Unavailable)
            }
        }
    }

    /// Follows [`Bus::is_available`]: `true` while connected with every subscription re-made.
    pub fn availability(&self) -> watch::Receiver<bool> {
        self.shared.available.subscribe()
    }

    /// The node's counters.
    pub fn stats(&self) -> MqttBusStats {
        let (held, subscriptions) = {
            let link = self.shared.lock();
            (link.held(), link.subscriptions())
        };
        self.shared.stats.snapshot(held, subscriptions)
    }

    /// The MQTT client id, `<client_id_prefix>-<node>`.
    pub fn client_id(&self) -> &str {
        &self.shared.client_id
    }

    /// Waits up to `grace` for every held publication to be acknowledged, disconnects cleanly
    /// and stops the tasks. Later calls on the bus fail with [`BusError::Closed`].
    pub async fn close(&self, grace: Duration) {
        let s = &self.shared;
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            let space = s.space.notified();
            tokio::pin!(space);
            space.as_mut().enable();
            let held = s.lock().held();
            if held == 0 || s.cancel.is_cancelled() {
                break;
            }
            if tokio::time::timeout_at(deadline, space).await.is_err() {
                warn!(node = %s.node, held, "Closing the MQTT bus with unacknowledged publications.");
                break;
            }
        }
        s.closing.store(true, Ordering::Relaxed);
        if s.client.try_disconnect().is_ok() {
            // The poll task cancels everything once the DISCONNECT is written.
            let _ = tokio::time::timeout(Duration::from_secs(1), s.cancel.cancelled()).await;
        }
        s.cancel.cancel();
        self.tracker.wait().await;
    }
}

impl Drop for MqttBus {
    fn drop(&mut self) {
        self.shared.cancel.cancel();
    }
}

impl std::fmt::Debug for MqttBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MqttBus")
            .field("client_id", &self.shared.client_id)
            .field("available", &*self.shared.available.borrow())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Bus for MqttBus {
    /// Queues the envelope; see the module docs for what happens when the buffer is full.
    ///
    /// # Errors
    /// [`BusError::Unavailable`] when the buffer is full while disconnected;
    /// [`BusError::Backend`] ([`MqttError::TooLarge`]) when the packet would exceed the limit;
    /// [`BusError::Closed`] after [`MqttBus::close`].
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped call either queued the envelope completely or not at all.
    async fn publish(&self, envelope: Arc<Envelope>) -> Result<(), BusError> {
        let s = &self.shared;
        if s.cancel.is_cancelled() {
            return Err(BusError::Closed);
        }
        let retain = match &*envelope {
            Envelope::Publication(p) => p.retain,
            // Presence events are never retained: a later subscriber reads the room's state
            // from the presence slot.
            Envelope::Presence(_) => false,
            // Control messages concern the sessions connected right now: never kept.
            Envelope::Control(_) => false,
        };
        let qos = HOP_QOS;
        let topic = s.layout.topic_of(&envelope);
        let payload = Bytes::from(codec::encode_traced(&envelope, skua_core::trace::capture().as_deref()));
        let size = publish_packet_size(topic.len(), payload.len(), qos);
        let max = s.packet_limit();
        if size > max {
            return Err(MqttError::TooLarge { size, max }.into());
        }
        loop {
            let space = s.space.notified();
            tokio::pin!(space);
            space.as_mut().enable();
            {
                let mut link = s.lock();
                if link.held() < s.config.publish_buffer {
                    link.push_publication(topic, qos, retain, payload);
                    drop(link);
                    s.pump.notify_one();
                    return Ok(());
                }
                if link.phase != Phase::Available {
                    drop(link);
                    s.stats.refused.fetch_add(1, Ordering::Relaxed);
                    return Err(BusError::Unavailable);
                }
            }
            // Full while connected: wait for the broker to acknowledge (or the link to drop).
            tokio::select! {
                () = &mut space => {}
                () = s.cancel.cancelled() => return Err(BusError::Closed),
            }
        }
    }

    /// Records the subscription and, while connected, waits for the broker's SUBACK.
    ///
    /// # Errors
    /// [`BusError::Unavailable`] when no SUBACK came within the ack timeout (the subscription
    /// is dropped); [`BusError::Backend`] ([`MqttError::SubscribeRefused`]) when the broker
    /// refused it; [`BusError::Closed`] after [`MqttBus::close`].
    ///
    /// # Cancel safety
    /// A dropped call leaves the subscription recorded (and made), as if it had returned.
    async fn subscribe(&self, sub: &BusSubscription) -> Result<(), BusError> {
        let s = &self.shared;
        if s.cancel.is_cancelled() {
            return Err(BusError::Closed);
        }
        let step = s.update(|link| link.subscribe(sub, || s.layout.filter_of(sub)));
        let Step::Wait(ack, id) = step else {
            return Ok(());
        };
        s.pump.notify_one();
        match tokio::time::timeout(s.config.ack_timeout, ack).await {
            Ok(Ok(result)) => result,
            // The link dropped before the SUBACK (the subscription stays recorded and is made on
            // reconnect), or the subscription was removed meanwhile.
            Ok(Err(_)) => Ok(()),
            Err(_) => {
                if s.update(|link| link.abandon(sub, id)) {
                    s.pump.notify_one();
                }
                warn!(node = %s.node, ?sub, timeout = ?s.config.ack_timeout, "No SUBACK in time; subscription dropped.");
                Err(BusError::Unavailable)
            }
        }
    }

    /// Removes the subscription and, while connected, waits for the broker's UNSUBACK: what
    /// the broker sent through it before is still delivered (a group's share included), nothing
    /// after. `Ok` when it did not exist; while disconnected it is removed at once.
    ///
    /// # Errors
    /// [`BusError::Unavailable`] when no UNSUBACK came within the ack timeout (the subscription
    /// is removed locally all the same); [`BusError::Closed`] after [`MqttBus::close`].
    ///
    /// # Cancel safety
    /// A dropped call leaves the subscription removed.
    async fn unsubscribe(&self, sub: &BusSubscription) -> Result<(), BusError> {
        let s = &self.shared;
        if s.cancel.is_cancelled() {
            return Err(BusError::Closed);
        }
        let Step::Wait(ack, id) = s.update(|link| link.unsubscribe(sub)) else {
            return Ok(());
        };
        s.pump.notify_one();
        match tokio::time::timeout(s.config.ack_timeout, ack).await {
            // `Err`: the link dropped, and with it the broker's subscription.
            Ok(_) => {
                debug!(node = %s.node, ?sub, "Unsubscribed.");
                Ok(())
            }
            Err(_) => {
                s.update(|link| link.forget_route(id));
                warn!(node = %s.node, ?sub, timeout = ?s.config.ack_timeout, "No UNSUBACK in time; subscription removed locally.");
                Err(BusError::Unavailable)
            }
        }
    }

    fn is_available(&self) -> bool {
        *self.shared.available.borrow()
    }

    async fn close(&self, grace: Duration) {
        MqttBus::close(self, grace).await;
    }
}

/// State shared by the handle and the tasks.
struct Shared {
    config: MqttBusConfig,
    node: NodeId,
    client_id: String,
    layout: Layout,
    client: AsyncClient,
    /// `std::sync::Mutex`: every section is short and never awaits.
    link: Mutex<Link>,
    /// Wakes the pump: work was queued, rumqttc took a request, or the phase changed. Only the
    /// pump waits on it, so `notify_one` (which keeps one permit) never loses a wake-up.
    pump: Notify,
    /// Wakes publishers waiting for buffer space (and `close`): space was freed or the phase
    /// changed. Waiters `enable` before checking, and it is signalled with `notify_waiters`.
    space: Notify,
    available: watch::Sender<bool>,
    stats: Counters,
    /// Set by [`MqttBus::close`]: the next DISCONNECT written ends the tasks.
    closing: AtomicBool,
    cancel: CancellationToken,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Link> {
        // No code panics while holding the lock, so a poisoned link is still consistent.
        self.link.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the link, then announces a phase change.
    fn update<R>(&self, f: impl FnOnce(&mut Link) -> R) -> R {
        let (result, before, after) = {
            let mut link = self.lock();
            let before = link.phase;
            let result = f(&mut link);
            (result, before, link.phase)
        };
        if before != after {
            self.available.send_replace(after == Phase::Available);
            self.pump.notify_one();
            self.space.notify_waiters();
        }
        result
    }

    /// The largest packet this node may send now.
    fn packet_limit(&self) -> usize {
        let broker = self.lock().broker_max_packet;
        let ours = self.config.max_packet_size;
        broker.map_or(ours, |b| b.min(ours)) as usize
    }
}

#[derive(Debug, Default)]
struct Counters {
    connects: AtomicU64,
    connection_failures: AtomicU64,
    published: AtomicU64,
    rejected: AtomicU64,
    refused: AtomicU64,
    delivered: AtomicU64,
    decode_errors: AtomicU64,
    tls_reloads: AtomicU64,
    duplicates: AtomicU64,
    retained_to_group: AtomicU64,
    unrouted: AtomicU64,
}

impl Counters {
    fn snapshot(&self, held: usize, subscriptions: usize) -> MqttBusStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        MqttBusStats {
            connects: get(&self.connects),
            connection_failures: get(&self.connection_failures),
            published: get(&self.published),
            rejected: get(&self.rejected),
            refused: get(&self.refused),
            delivered: get(&self.delivered),
            decode_errors: get(&self.decode_errors),
            tls_reloads: get(&self.tls_reloads),
            duplicates: get(&self.duplicates),
            retained_to_group: get(&self.retained_to_group),
            unrouted: get(&self.unrouted),
            held,
            subscriptions,
        }
    }
}

/// The QoS of every PUBLISH and SUBSCRIBE on the hop (see the module docs, item 4): one QoS
/// keeps the broker from reordering, and QoS 1 makes the broker acknowledge what it took, which
/// is when a publication leaves the buffer. Duplicates are dropped by the receivers.
pub(crate) const HOP_QOS: QoS = QoS::AtLeastOnce;

/// The size of the PUBLISH packet rumqttc writes (no properties).
fn publish_packet_size(topic: usize, payload: usize, qos: QoS) -> usize {
    let packet_id = if qos == QoS::AtMostOnce { 0 } else { 2 };
    let remaining = 2 + topic + packet_id + 1 + payload;
    let length_bytes = match remaining {
        0..=127 => 1,
        128..=16_383 => 2,
        16_384..=2_097_151 => 3,
        _ => 4,
    };
    1 + length_bytes + remaining
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packet_size_matches_rumqttc() {
        use rumqttc::v5::mqttbytes::v5::Publish;
        for (topic, payload, qos) in [
            (5, 0, QoS::AtMostOnce),
            (30, 100, QoS::AtLeastOnce),
            (60, 20_000, QoS::ExactlyOnce),
            (40, 921_800, QoS::AtLeastOnce),
        ] {
            let mut p = Publish::new("t".repeat(topic), qos, vec![0u8; payload], None);
            p.pkid = u16::from(qos != QoS::AtMostOnce);
            assert_eq!(publish_packet_size(topic, payload, qos), p.size(), "{topic} {payload} {qos:?}");
        }
    }
}
