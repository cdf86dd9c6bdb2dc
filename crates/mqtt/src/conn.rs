//! One device connection: its `CONNECT`, the reader loop that turns packets into the session's
//! frames, and the writer that turns the session's queued NoLag frames into packets.
//!
//! Correlation: every device publish carries a msgRef `mqtt:N` (N counts per connection), so
//! its `published` receipt or `error` refusal, which the session queues in order with
//! everything else, names the `PUBACK`/`PUBREC` it becomes. `SUBACK` and `UNSUBACK` are decided
//! by the reader once the session handled each subscription (the session state says whether
//! it holds it) and queued behind the frames that handling produced; the packets the reader
//! writes itself are queued on the same [`ConnHandle`] as raw MQTT bytes, which the writer
//! tells from NoLag frames by their first byte (a NoLag frame is always a MessagePack map).
//!
//! Sessions (docs/protocol.md N54): a client id with clean session off (3.1.1) or a session
//! expiry (5.0) makes a persistent session, which the session keeps in the store as an SDK
//! `clientId` session's: its subscriptions and MQTT filters in the restore record, a durable
//! consumer per QoS 1/2 subscription to a logged topic. Deliveries at QoS 1/2 are tracked by
//! packet id until the device's `PUBACK` (QoS 2: `PUBREC`, then `PUBCOMP`), which acks the
//! stored message; at most `mqtt_max_inflight` (or the device's receive maximum) are in flight,
//! and the writer waits for an acknowledgement beyond that. A client id takes the session over
//! from an older connection on any node (the session's clientId takeover).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use skua_edge::EdgeState;
use skua_edge::clock::{FAR_FUTURE, deadline_of, next_change};
use skua_edge::door::{DoorAdmission, DoorAuth, DoorRestored, DoorSession, push_raw};
use skua_edge::outbound::{CloseRequest, ConnHandle, Outbox, Take};
use skua_edge::revalidate::ConnProtocol;
use skua_protocol::codes::{auth as auth_err, close, error};
use skua_protocol::{ClientFrame, PublishFrame, SubscribeFrame};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::Notify;
use tokio::time::{Instant, sleep_until, timeout_at};

use crate::MqttMetrics;
use crate::codec::{self, Connect, Fault, Level, Packet};
use crate::frames::{self, Frame};
use crate::settings::MqttLimits;

/// Highest QoS deliveries to devices are sent at.
const MAX_DELIVERY_QOS: u8 = 2;
/// Bytes the writer gathers before writing them to the socket.
const WRITE_CHUNK: usize = 64 * 1024;

/// The reading half of a device's transport (TCP, TLS, WebSocket: `crate::listener`).
pub(crate) type Reader = Box<dyn AsyncRead + Send + Unpin>;
/// The writing half of a device's transport; every write is flushed (TLS, WebSocket).
pub(crate) type Writer = Box<dyn AsyncWrite + Send + Unpin>;

/// The close of a connection whose `CONNECT` was refused.
const AUTH_REFUSED: CloseRequest = CloseRequest { code: close::POLICY_VIOLATION, reason: "mqtt_connect_refused" };
/// The close after a client's `DISCONNECT` (nothing more is sent).
const CLIENT_DISCONNECT: CloseRequest = CloseRequest::GONE;

/// What reader and writer of one connection share.
struct Shared {
    level: Level,
    /// The largest packet the device accepts (5.0 `CONNECT`), else no bound of its own.
    device_max: usize,
    /// The largest packet the server accepts, told in the 5.0 `CONNACK`.
    server_max: usize,
    /// 5.0: the session expiry `CONNACK` tells, when it is not the one the client asked for.
    session_expiry: Option<u32>,
    /// Most QoS 1/2 deliveries awaiting the device's acknowledgement.
    max_inflight: usize,
    /// Wakes the writer: an acknowledgement freed a delivery slot, or an urgent packet waits.
    wake: Notify,
    /// The door's protocol bounds (`mqtt_*` settings).
    limits: MqttLimits,
    metrics: Arc<MqttMetrics>,
    // std Mutex: short map updates, never held across an await.
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Concrete topic subscribed → QoS its deliveries are sent at.
    subs: HashMap<String, u8>,
    /// Publishes waiting for their receipt: msgRef number → (QoS, packet id).
    pending: HashMap<u64, (u8, u16)>,
    /// QoS 2 publishes received and not yet released: packet id → its `PUBREC` reason once
    /// answered (`None` while the publish is in flight).
    qos2: HashMap<u16, Option<u8>>,
    /// The packet id of the next QoS 1/2 delivery.
    next_pkid: u16,
    /// QoS 1/2 deliveries awaiting the device's acknowledgement, by packet id.
    outgoing: HashMap<u16, Outgoing>,
    /// Packets written before any queued frame, even while the writer waits for a delivery
    /// slot: `PUBREL`s (a QoS 2 delivery's slot frees only at its `PUBCOMP`) and `PINGRESP`.
    /// At most one per delivery in flight plus one `PINGRESP`.
    urgent: Vec<Bytes>,
    /// `CONNACK`'s session present flag.
    present: bool,
    /// What the session resumed at auth, for the reader to rebuild its filters from.
    restored: Option<DoorRestored>,
}

/// A QoS 1/2 delivery awaiting its acknowledgement.
#[derive(Debug)]
struct Outgoing {
    /// The stored message's id (a durable delivery), acked at `PUBACK` / `PUBREC`.
    msg_id: Option<String>,
    qos: u8,
    /// QoS 2: `PUBREC` came and `PUBREL` was sent; `PUBCOMP` frees the slot.
    released: bool,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queues a packet ahead of the queued frames and wakes the writer.
    fn urgent(&self, packet: Bytes) {
        let mut inner = self.lock();
        // Bounded: one PINGRESP at a time, and one PUBREL per delivery in flight.
        if inner.urgent.len() <= self.max_inflight {
            inner.urgent.push(packet);
        }
        drop(inner);
        self.wake.notify_one();
    }
}

/// The session client id of an MQTT client identifier: itself when it is a slug (1–64 of
/// letters, digits, `-`, `_`), else `mqtt-` and 32 hex digits of its SHA-256, so any MQTT
/// client identifier names one session, the same on every node.
pub(crate) fn session_client_id(id: &str) -> Option<String> {
    use sha2::Digest;
    if id.is_empty() {
        return None;
    }
    if skua_core::ids::is_slug(id) {
        return Some(id.to_owned());
    }
    let digest = sha2::Sha256::digest(id.as_bytes());
    let mut out = String::from("mqtt-");
    for b in &digest[..16] {
        use std::fmt::Write;
        let _ = write!(out, "{b:02x}");
    }
    Some(out)
}

/// Serves one accepted connection to its end: `rd` and `wr` are its transport's halves,
/// `deadline` when its `CONNECT` must have arrived (`http_header_timeout` from the accept, a TLS
/// handshake included), `protocol` the door it came through (for the connection lists).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn serve_socket(
    mut rd: Reader,
    mut wr: Writer,
    deadline: Instant,
    protocol: ConnProtocol,
    admitted: DoorAdmission,
    st: Arc<EdgeState>,
    metrics: Arc<MqttMetrics>,
    limits: MqttLimits,
) {
    let max_packet = st.config.max_frame_size;
    let mut buf = BytesMut::with_capacity(1024);
    // The CONNECT, within the header deadline (as a WebSocket upgrade's request head).
    let connect = loop {
        match codec::read_connect(&mut buf, max_packet, &limits) {
            Ok(Some(c)) => break c,
            Ok(None) => {}
            Err(fault) => {
                metrics.faults.inc(fault.label());
                if let Fault::Version(level) = fault {
                    // 3.1.1 CONNACK 1 "unacceptable protocol version" (what a 3.1 client reads too).
                    let answer = if level == 5 {
                        codec::connack(Level::V5, 0x84, 0, 0, false, None)
                    } else {
                        codec::connack(Level::V4, 1, 0, 0, false, None)
                    };
                    let _ = timeout_at(deadline, write_flushed(&mut wr, &answer)).await;
                }
                return;
            }
        }
        buf.reserve(1024);
        match timeout_at(deadline, rd.read_buf(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => {}
            Ok(_) => return,
            Err(_) => {
                metrics.connects.inc("timeout");
                return;
            }
        }
    };
    let level = connect.level;
    let refuse = |v4: u8, v5: u8| codec::connack(level, if level == Level::V4 { v4 } else { v5 }, 0, 0, false, None);
    let early = if connect.auth_method {
        Some(("bad_auth_method", refuse(4, 0x8C)))
    } else if level == Level::V4 && connect.client_id.is_empty() && !connect.clean {
        Some(("client_id_rejected", refuse(2, 0x85)))
    } else if connect.password.is_none() && connect.username.is_none() {
        Some(("malformed_credential", refuse(4, 0x86)))
    } else {
        None
    };
    if let Some((outcome, answer)) = early {
        metrics.connects.inc(outcome);
        let _ = timeout_at(deadline, write_flushed(&mut wr, &answer)).await;
        return;
    }
    run(rd, wr, buf, connect, protocol, admitted, st, metrics, limits).await;
}

/// Writes `bytes` and flushes them (a no-op on TCP; TLS and WebSocket hold writes until then).
async fn write_flushed(wr: &mut Writer, bytes: &[u8]) -> std::io::Result<()> {
    wr.write_all(bytes).await?;
    wr.flush().await
}

/// Runs an accepted `CONNECT`'s connection: session, writer, reader, cleanup.
#[allow(clippy::too_many_arguments)]
async fn run(
    rd: Reader,
    wr: Writer,
    buf: BytesMut,
    connect: Connect,
    protocol: ConnProtocol,
    admitted: DoorAdmission,
    st: Arc<EdgeState>,
    metrics: Arc<MqttMetrics>,
    limits: MqttLimits,
) {
    st.metrics.connections_opened.fetch_add(1, Ordering::Relaxed);
    let id = st.next_conn_id();
    let (handle, outbox) =
        ConnHandle::new(id, st.config.outbound_queue_messages, st.config.outbound_queue_bytes, st.metrics.clone());
    let handle = Arc::new(handle);
    let client_id = session_client_id(&connect.client_id);
    // N54: 3.1.1 clean session off, 5.0 a session expiry, each with a client id.
    let persistent = client_id.is_some()
        && match connect.level {
            Level::V4 => !connect.clean,
            Level::V5 => connect.session_expiry > 0,
        };
    // The session is kept `restore_ttl` after the connection ends (as an SDK session's).
    let ttl = u32::try_from(st.config.restore_ttl.as_secs()).unwrap_or(u32::MAX);
    let session_expiry = match connect.level {
        Level::V5 if connect.session_expiry > 0 && !persistent => Some(0),
        Level::V5 if persistent && connect.session_expiry > ttl => Some(ttl),
        _ => None,
    };
    let max_inflight = usize::from(connect.receive_max.unwrap_or(u16::MAX).min(limits.max_inflight).max(1));
    let shared = Arc::new(Shared {
        level: connect.level,
        device_max: connect.max_packet.map_or(usize::MAX, |m| usize::try_from(m).unwrap_or(usize::MAX)),
        server_max: st.config.max_frame_size,
        session_expiry,
        max_inflight,
        wake: Notify::new(),
        limits,
        metrics: metrics.clone(),
        inner: Mutex::new(Inner { next_pkid: 1, ..Inner::default() }),
    });
    let writer = {
        let (handle, shared, close_timeout) = (handle.clone(), shared.clone(), st.config.close_timeout);
        let write = write_loop(wr, outbox, handle.clone(), shared, close_timeout);
        let st2 = st.clone();
        st.tracker.spawn(async move {
            if skua_edge::door::contained(write, &st2, "mqtt writer").await.is_none() {
                handle.request_close(CloseRequest::INTERNAL_ERROR);
            }
        })
    };
    let mut device = Device {
        session: DoorSession::new(st.clone(), handle.clone(), admitted.client_ip).with_protocol(protocol),
        st: st.clone(),
        handle: handle.clone(),
        shared,
        level: connect.level,
        will: connect.will.clone(),
        connect_expiry: connect.session_expiry,
        filters: HashMap::new(),
        topic_refs: HashMap::new(),
        next_ref: 0,
    };
    let auth = DoorAuth {
        token: connect.password.clone().or_else(|| connect.username.clone()).unwrap_or_default(),
        client_id,
        persistent,
        clean: connect.clean,
        // 5.0: kept as long as the device asked, at most `restore_ttl` (N54).
        expiry_s: (connect.level == Level::V5 && persistent).then_some(connect.session_expiry),
    };
    let ended = skua_edge::door::contained(Box::pin(device.main(rd, buf, &connect, auth)), &st, "mqtt reader").await;
    let ended = ended.unwrap_or_else(|| {
        handle.request_close(CloseRequest::INTERNAL_ERROR);
        Ended::Abnormal
    });
    if ended == Ended::Abnormal {
        let _ = skua_edge::door::contained(Box::pin(device.publish_will()), &st, "mqtt will").await;
    }
    let _ = skua_edge::door::contained(Box::pin(device.session.cleanup()), &st, "mqtt cleanup").await;
    handle.mark_released();
    handle.request_close(CloseRequest::GONE);
    let _ = writer.await;
    drop(admitted);
    st.metrics.connections_closed.fetch_add(1, Ordering::Relaxed);
}

/// How a connection's reader ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// The device sent `DISCONNECT` (no will).
    Clean,
    /// Anything else: the will is published (N53).
    Abnormal,
    /// Closed by the server for the credential (expiry, revocation) or a refused `CONNECT`:
    /// no will (the actor's authority is what ended).
    Unauthorized,
}

/// One MQTT filter of a device.
#[derive(Debug)]
struct Filter {
    /// Its granted QoS.
    qos: u8,
    /// The concrete topics it subscribed.
    topics: Vec<String>,
    /// Topics of a wildcard filter the session refused (not readable, limits): tried again only
    /// when a registry change names their app or room, not at every re-check. At most the
    /// topics of one app.
    refused: Vec<String>,
}

/// The reader side of one device connection.
struct Device {
    session: DoorSession,
    st: Arc<EdgeState>,
    handle: Arc<ConnHandle>,
    shared: Arc<Shared>,
    level: Level,
    will: Option<codec::Will>,
    /// The 5.0 `CONNECT`'s session expiry interval (0: none, or 3.1.1).
    connect_expiry: u32,
    /// MQTT filter as sent → what it holds.
    filters: HashMap<String, Filter>,
    /// Concrete topic → how many filters hold it.
    topic_refs: HashMap<String, usize>,
    next_ref: u64,
}

impl Device {
    fn push(&self, packet: Bytes) {
        push_raw(&self.handle, packet);
    }

    /// Closes for bad input: 5.0 gets a `DISCONNECT` with the fault's reason first.
    fn fault(&self, fault: Fault) -> Ended {
        tracing::debug!(?fault, "MQTT input refused; closing.");
        self.shared.metrics.faults.inc(fault.label());
        if self.level == Level::V5 {
            self.push(codec::disconnect(fault.reason()));
        }
        self.handle.request_close(CloseRequest { code: close::PROTOCOL_ERROR, reason: fault.label() });
        Ended::Abnormal
    }

    /// Authenticates, then reads packets until the connection ends.
    async fn main(&mut self, mut rd: Reader, mut buf: BytesMut, connect: &Connect, auth: DoorAuth) -> Ended {
        // What the session resumes is known before its auth reply (the CONNACK) is queued, so
        // before any resumed delivery reaches the writer.
        let shared = self.shared.clone();
        self.session
            .authenticate(auth, move |r| {
                let mut inner = shared.lock();
                for (topic, qos) in &r.topics {
                    inner.subs.insert(topic.clone(), (*qos).min(MAX_DELIVERY_QOS));
                }
                inner.present = r.present;
                inner.restored = Some(r);
            })
            .await;
        if !self.session.is_authed() {
            // Its CONNACK (from the session's `auth` reply) goes out before the close.
            self.shared.metrics.connects.inc("refused");
            self.handle.request_close(AUTH_REFUSED);
            return Ended::Unauthorized;
        }
        self.shared.metrics.connects.inc("ok");
        let restored = self.shared.lock().restored.take();
        if let Some(r) = restored {
            self.resume(r).await;
        }
        // 5.0: a `presence` user property announces room presence, as the SDK's `presence`
        // frame (docs/mqtt.md, "Presence"); a refusal is the session's (nothing reaches a device).
        if let Some((room, data)) = crate::payload::presence_of(&connect.user_properties) {
            self.session.handle(ClientFrame::Presence { room_id: Some(room), data: Some(data) }).await;
        }
        let st = self.st.clone();
        let max_packet = st.config.max_frame_size;
        let limits = self.shared.limits;
        // 1.5 × keep-alive without a packet closes the connection (N54); 0: no keep-alive.
        let keep_alive = (connect.keep_alive > 0).then(|| Duration::from_millis(u64::from(connect.keep_alive) * 1500));
        let mut last = Instant::now();
        let mut expiry = self.session.expires_at();
        let mut expiry_deadline = deadline_of(expiry);
        let idle = keep_alive.unwrap_or(FAR_FUTURE);
        let timer = sleep_until((last + idle).min(expiry_deadline));
        tokio::pin!(timer);
        let shutdown = st.shutdown.cancelled();
        tokio::pin!(shutdown);
        let handle = self.handle.clone();
        let closed = std::future::poll_fn(|cx| handle.poll_closed_reader(cx));
        tokio::pin!(closed);
        let mut changes = st.connections.watch();
        let mut seen = *changes.borrow_and_update();
        let mut change = tokio_util::sync::ReusableBoxFuture::new(next_change(changes));
        loop {
            // Every complete packet already buffered is handled before reading more.
            loop {
                if self.session.pipeline_full() {
                    break;
                }
                match codec::read(&mut buf, self.level, max_packet, &limits) {
                    Ok(None) => break,
                    Ok(Some(p)) => {
                        last = Instant::now();
                        if let Some(end) = self.on_packet(p).await {
                            return end;
                        }
                    }
                    Err(f) => return self.fault(f),
                }
            }
            if self.session.expires_at() != expiry {
                expiry = self.session.expires_at();
                expiry_deadline = deadline_of(expiry);
            }
            timer.as_mut().reset((last + idle).min(expiry_deadline));
            buf.reserve(4096);
            tokio::select! {
                biased;
                () = &mut shutdown => {
                    self.handle.request_close(CloseRequest::SERVER_RESTART);
                    return Ended::Abnormal;
                }
                () = &mut closed => {
                    let unauthorized = self.handle.close_requested().is_some_and(|r| {
                        r.code == close::TOKEN_EXPIRED || r.code == close::REVALIDATION_FAILED
                    });
                    return if unauthorized { Ended::Unauthorized } else { Ended::Abnormal };
                }
                () = &mut timer => {
                    let now = Instant::now();
                    if expiry_deadline <= now {
                        self.handle.send(&skua_protocol::ServerFrame::Disconnect {
                            reason: skua_protocol::codes::reason::TOKEN_EXPIRED,
                        });
                        self.handle.request_close(CloseRequest::TOKEN_EXPIRED);
                        return Ended::Unauthorized;
                    }
                    if keep_alive.is_some_and(|k| last + k <= now) {
                        self.shared.metrics.faults.inc("keep_alive_timeout");
                        self.handle.request_close(CloseRequest::IDLE_TIMEOUT);
                        return Ended::Abnormal;
                    }
                }
                (r, mut rx) = change.get_pin() => {
                    if r.is_err() {
                        change.set(std::future::pending());
                        continue;
                    }
                    let now = *rx.borrow_and_update();
                    change.set(next_change(rx));
                    let delta = st.connections.delta_since(seen, now);
                    seen = now;
                    self.session.revalidate(&delta).await;
                    if self.session.is_authed() && !self.handle.is_closing() {
                        self.refresh_wildcards(Some(&delta)).await;
                    }
                }
                outcome = self.session.next_publish(), if self.session.publishing() => {
                    self.session.finish_publish(outcome).await;
                }
                read = rd.read_buf(&mut buf), if !self.session.pipeline_full() => {
                    match read {
                        Ok(n) if n > 0 => {}
                        // The device went away without DISCONNECT: abnormal (its will goes out).
                        _ => return Ended::Abnormal,
                    }
                }
            }
        }
    }

    /// Handles one packet; `Some` when the connection ends with it.
    async fn on_packet(&mut self, p: Packet) -> Option<Ended> {
        match p {
            Packet::Publish(p) => return self.on_publish(p).await,
            Packet::PubRel(pkid) => {
                let known = self.shared.lock().qos2.remove(&pkid).is_some();
                // 5.0 0x92 "packet identifier not found" for a release of nothing.
                self.push(codec::ack(0x70, self.level, pkid, if known { 0 } else { 0x92 }));
            }
            Packet::PubAck(pkid) => self.on_delivery_ack(pkid, 1).await,
            Packet::PubRec(pkid) => self.on_delivery_ack(pkid, 2).await,
            Packet::PubComp(pkid) => {
                let mut inner = self.shared.lock();
                if inner.outgoing.get(&pkid).is_some_and(|o| o.released) {
                    inner.outgoing.remove(&pkid);
                    drop(inner);
                    self.shared.wake.notify_one();
                }
            }
            Packet::Subscribe { pkid, filters } => {
                let mut codes = Vec::with_capacity(filters.len());
                for (filter, qos) in filters {
                    codes.push(self.subscribe(filter, qos).await);
                }
                self.save_filters().await;
                self.push(codec::sub_ack(0x90, self.level, pkid, &codes));
            }
            Packet::Unsubscribe { pkid, filters } => {
                let mut codes = Vec::with_capacity(filters.len());
                for filter in filters {
                    codes.push(self.unsubscribe(&filter).await);
                }
                self.save_filters().await;
                self.push(codec::sub_ack(0xB0, self.level, pkid, &codes));
            }
            // Ahead of queued deliveries: answered even while the writer waits for a slot.
            Packet::PingReq => self.shared.urgent(codec::pingresp()),
            Packet::Disconnect { reason, session_expiry } => {
                if let Some(expiry) = session_expiry {
                    // MQTT-3.14.2-2: a session that was to end with the connection stays so.
                    if self.connect_expiry == 0 && expiry > 0 {
                        return Some(self.fault(Fault::Protocol("session expiry set at DISCONNECT")));
                    }
                    self.session.set_expiry(expiry);
                }
                self.handle.request_close(CLIENT_DISCONNECT);
                // 0x04: "disconnect with will message".
                return Some(if reason == 0x04 { Ended::Abnormal } else { Ended::Clean });
            }
        }
        None
    }

    async fn on_publish(&mut self, p: codec::Publish) -> Option<Ended> {
        if p.topic.is_empty() || p.topic.contains(['+', '#']) {
            // Not a topic name: refused like a denied publish (5.0 0x90).
            self.shared.metrics.publishes_refused.inc("topic_name_invalid");
            match p.qos {
                1 => self.push(codec::ack(0x40, self.level, p.pkid, 0x90)),
                2 if self.level == Level::V5 => self.push(codec::ack(0x50, self.level, p.pkid, 0x90)),
                2 => {
                    self.shared.lock().qos2.insert(p.pkid, Some(0));
                    self.push(codec::ack(0x50, self.level, p.pkid, 0));
                }
                _ => {}
            }
            return None;
        }
        if p.qos == 2 {
            let mut inner = self.shared.lock();
            match inner.qos2.get(&p.pkid) {
                // A repeat inside the session: never published twice (N52).
                Some(Some(code)) => {
                    let code = *code;
                    drop(inner);
                    self.push(codec::ack(0x50, self.level, p.pkid, code));
                    return None;
                }
                Some(None) => return None,
                None if inner.qos2.len() >= usize::from(self.shared.limits.receive_maximum) => {
                    drop(inner);
                    return Some(self.fault(Fault::Protocol("receive maximum exceeded")));
                }
                None => {
                    inner.qos2.insert(p.pkid, None);
                }
            }
        }
        self.next_ref += 1;
        let n = self.next_ref;
        self.shared.lock().pending.insert(n, (p.qos, p.pkid));
        let frame = PublishFrame {
            topic: p.topic,
            data: crate::payload::to_nolag(p.payload),
            qos: p.qos,
            retain: p.retain,
            filter: Ok(None),
            msg_ref: Some(format!("mqtt:{n}")),
            idempotency_key: None,
        };
        self.session.handle(ClientFrame::Publish(frame)).await;
        None
    }

    /// Subscribes one filter; its `SUBACK` return code.
    async fn subscribe(&mut self, filter: String, qos: u8) -> u8 {
        let v5 = self.level == Level::V5;
        let fail = |v5_code: u8| if v5 { v5_code } else { 0x80 };
        let granted = qos.min(MAX_DELIVERY_QOS);
        let topics = match self.expand(&filter) {
            Ok(t) => t,
            Err(code) => return fail(code),
        };
        let got = self.subscribe_topics(topics.clone(), granted, true).await;
        if got.is_empty() {
            let at_limit = self.topic_refs.len() >= self.st.config.max_subscriptions_per_connection;
            return fail(if at_limit { 0x97 } else { 0x87 });
        }
        let refused = topics.into_iter().filter(|t| !got.contains(t)).collect();
        let held = Filter { qos: granted, topics: got.clone(), refused };
        let old = self.filters.insert(filter, held).map(|f| f.topics).unwrap_or_default();
        for t in got {
            *self.topic_refs.entry(t).or_insert(0) += 1;
        }
        for t in old {
            self.release_topic(&t).await;
        }
        granted
    }

    /// Subscribes each of `topics` at `qos` (at least the QoS it is held at already) as the
    /// session allows; the ones it holds afterwards. `again`: a topic held already is
    /// subscribed once more (a repeated `SUBSCRIBE` replays retained messages); otherwise it
    /// is taken as it is.
    async fn subscribe_topics(&mut self, topics: Vec<String>, qos: u8, again: bool) -> Vec<String> {
        let max = self.st.config.max_subscriptions_per_connection;
        let mut got = Vec::new();
        for topic in topics {
            let held = self.topic_refs.contains_key(&topic);
            if held && !again {
                got.push(topic);
                continue;
            }
            if !held && self.topic_refs.len() + got.len() >= max {
                continue;
            }
            // The session's `subscribed` frame and retained messages queue before the SUBACK
            // (MQTT allows deliveries before it); the delivery QoS must be known first. A topic
            // two filters cover is delivered (and kept, N54) at the higher of their QoS.
            let previous = self.shared.lock().subs.get(&topic).copied();
            let qos = previous.map_or(qos, |q| q.max(qos));
            self.shared.lock().subs.insert(topic.clone(), qos);
            let frame = SubscribeFrame {
                topic: topic.clone(),
                qos,
                filters: Ok(Vec::new()),
                raw_filters: None,
                load_balance: false,
                load_balance_group: None,
                since: None,
            };
            self.session.handle(ClientFrame::Subscribe(frame)).await;
            if self.session.is_subscribed(&topic) {
                got.push(topic);
            } else {
                let mut inner = self.shared.lock();
                match previous {
                    Some(q) => inner.subs.insert(topic, q),
                    None => inner.subs.remove(&topic),
                };
            }
        }
        got
    }

    /// Saves the filters with a persistent session (N54), sorted so an unchanged set is not
    /// written again.
    async fn save_filters(&mut self) {
        let mut filters: Vec<(String, u8)> = self.filters.iter().map(|(f, h)| (f.clone(), h.qos)).collect();
        filters.sort();
        self.session.set_filters(filters).await;
    }

    /// Rebuilds the filters of a resumed session from what the session restored, then picks up
    /// topics created while the device was away.
    async fn resume(&mut self, r: DoorRestored) {
        for (filter, qos) in r.filters {
            let topics: Vec<String> =
                r.topics.iter().filter(|(t, _)| covers(&filter, t)).map(|(t, _)| t.clone()).collect();
            if topics.is_empty() && !is_wildcard(&filter) {
                // Its topic is gone, or no longer readable.
                continue;
            }
            for t in &topics {
                *self.topic_refs.entry(t.clone()).or_insert(0) += 1;
            }
            self.filters.insert(filter, Filter { qos, topics, refused: Vec::new() });
        }
        // A subscription no filter covers (not expected) stands for itself.
        for (t, q) in r.topics {
            if !self.topic_refs.contains_key(&t) {
                self.topic_refs.insert(t.clone(), 1);
                self.filters.insert(t.clone(), Filter { qos: q, topics: vec![t], refused: Vec::new() });
            }
        }
        self.refresh_wildcards(None).await;
    }

    /// Subscribes the topics a wildcard filter (`app/room/+`, `app/room/#`) covers now and did
    /// not when it was subscribed: topics added to the app since (a registry change names the
    /// app), or that became readable (it names the room). `delta`: the registry change, `None`
    /// after a resume (every filter). Topics the session refused before are tried again only
    /// when the change names their app or room, not at the periodic re-check (`delta.all`).
    /// Bounded by the topics of the filters' apps and `max_subscriptions_per_connection`; each
    /// subscription counts against `subscribe_rate_limit` as the device's own would.
    async fn refresh_wildcards(&mut self, delta: Option<&skua_core::RegistryDelta>) {
        let wild: Vec<(String, u8)> =
            self.filters.iter().filter(|(f, _)| is_wildcard(f)).map(|(f, h)| (f.clone(), h.qos)).collect();
        for (filter, qos) in wild {
            let named = match delta {
                None => true,
                Some(d) => self.delta_names(d, &filter),
            };
            if delta.is_some_and(|d| !d.all) && !named {
                continue;
            }
            let Ok(topics) = self.expand(&filter) else { continue };
            let Some(held) = self.filters.get_mut(&filter) else { continue };
            // A topic the session dropped (removed from the app, access lost) is no longer held.
            let session = &self.session;
            let mut dropped = Vec::new();
            held.topics.retain(|t| {
                let keep = session.is_subscribed(t);
                if !keep {
                    dropped.push(t.clone());
                }
                keep
            });
            let (new, still): (Vec<String>, Vec<String>) = topics
                .into_iter()
                .filter(|t| !held.topics.contains(t))
                .partition(|t| named || !held.refused.contains(t));
            held.refused = still;
            for t in dropped {
                self.forget_topic(&t);
            }
            if new.is_empty() {
                continue;
            }
            let got = self.subscribe_topics(new.clone(), qos, false).await;
            for t in &got {
                *self.topic_refs.entry(t.clone()).or_insert(0) += 1;
            }
            if let Some(held) = self.filters.get_mut(&filter) {
                held.refused.extend(new.into_iter().filter(|t| !got.contains(t)));
                held.topics.extend(got);
            }
        }
    }

    /// Whether a registry change names the app or room of `filter` (`app/room/…`).
    fn delta_names(&self, delta: &skua_core::RegistryDelta, filter: &str) -> bool {
        let mut levels = filter.splitn(3, '/');
        let (Some(app), Some(room)) = (levels.next(), levels.next()) else { return false };
        let Some(actor) = self.session.actor() else { return false };
        let registry = self.st.registry.load();
        let Some(project) = registry.project(&actor.project) else { return false };
        let Some(app) = project.apps.iter().find(|a| a.slug == app) else { return false };
        let key = skua_core::RoomKey { project: actor.project.clone(), app: app.id.clone(), room: Arc::from(room) };
        delta.touches_room(&key)
    }

    /// Forgets one filter's hold on a topic the session no longer holds.
    fn forget_topic(&mut self, topic: &str) {
        let Some(n) = self.topic_refs.get_mut(topic) else { return };
        *n -= 1;
        if *n == 0 {
            self.topic_refs.remove(topic);
            self.shared.lock().subs.remove(topic);
        }
    }

    /// Handles a device's acknowledgement of a delivery: `PUBACK` (`qos` 1) or `PUBREC` (2).
    /// The stored message is acked (N24) at the first of them; a `PUBREC` is answered with
    /// `PUBREL` (5.0 0x92 for an unknown packet id), ahead of queued deliveries.
    async fn on_delivery_ack(&mut self, pkid: u16, qos: u8) {
        let (known, msg_id) = {
            let mut inner = self.shared.lock();
            match inner.outgoing.get_mut(&pkid) {
                Some(o) if o.qos == 1 && qos == 1 => (true, inner.outgoing.remove(&pkid).and_then(|o| o.msg_id)),
                Some(o) if o.qos == 2 && qos == 2 => {
                    o.released = true;
                    (true, o.msg_id.take())
                }
                _ => (false, None),
            }
        };
        if qos == 2 {
            self.shared.urgent(codec::ack(0x62, self.level, pkid, if known { 0 } else { 0x92 }));
        } else if known {
            self.shared.wake.notify_one();
        }
        if let Some(id) = msg_id {
            self.session.ack(vec![id]).await;
        }
    }

    /// The concrete topics a filter names: itself, or for `app/room/+` and `app/room/#` every
    /// topic of the app (each is then subscribed as the actor may). `Err` with the 5.0 reason.
    fn expand(&self, filter: &str) -> Result<Vec<String>, u8> {
        if filter.starts_with("$share/") {
            return Err(0x9E);
        }
        let levels: Vec<&str> = filter.split('/').collect();
        let wild = |s: &str| s.contains(['+', '#']);
        let [app, room, topic] = levels[..] else {
            // Wildcards above the topic level, or not an `app/room/topic` address.
            return Err(if wild(filter) { 0x8F } else { 0x87 });
        };
        if app.is_empty() || room.is_empty() || wild(app) || wild(room) {
            return Err(if wild(app) || wild(room) { 0x8F } else { 0x87 });
        }
        if topic != "+" && topic != "#" {
            return if wild(topic) || topic.is_empty() { Err(0x8F) } else { Ok(vec![filter.to_owned()]) };
        }
        let Some(actor) = self.session.actor() else { return Err(0x87) };
        let registry = self.st.registry.load();
        let Some(project) = registry.project(&actor.project) else { return Err(0x87) };
        let Some(app) = project.apps.iter().find(|a| a.slug == app) else { return Err(0x87) };
        Ok(app.topics.keys().map(|t| format!("{}/{room}/{t}", app.slug)).collect())
    }

    /// Drops one filter's hold on a topic; the last one unsubscribes it.
    async fn release_topic(&mut self, topic: &str) {
        let Some(n) = self.topic_refs.get_mut(topic) else { return };
        *n -= 1;
        if *n > 0 {
            return;
        }
        self.topic_refs.remove(topic);
        self.session.handle(ClientFrame::Unsubscribe { topic: topic.to_owned() }).await;
        self.shared.lock().subs.remove(topic);
    }

    /// Unsubscribes one filter; its 5.0 `UNSUBACK` reason (0x11: there was none).
    async fn unsubscribe(&mut self, filter: &str) -> u8 {
        let Some(Filter { topics, .. }) = self.filters.remove(filter) else { return 0x11 };
        for t in topics {
            self.release_topic(&t).await;
        }
        0
    }

    /// Publishes the will message, as the actor, where it may publish (N53); then waits for
    /// every publish in flight.
    async fn publish_will(&mut self) {
        let Some(w) = self.will.take() else { return };
        if !self.session.is_authed() {
            return;
        }
        let frame = PublishFrame {
            topic: w.topic,
            data: crate::payload::to_nolag(w.payload),
            qos: w.qos,
            retain: w.retain,
            filter: Ok(None),
            msg_ref: None,
            idempotency_key: None,
        };
        self.session.handle(ClientFrame::Publish(frame)).await;
        self.session.drain_publishes_closing().await;
    }
}

/// Whether `filter` is a wildcard filter (`app/room/+`, `app/room/#`).
fn is_wildcard(filter: &str) -> bool {
    filter.ends_with("/+") || filter.ends_with("/#")
}

/// Whether `filter` covers the concrete topic `topic` (`app/room/topic`).
fn covers(filter: &str, topic: &str) -> bool {
    if !is_wildcard(filter) {
        return filter == topic;
    }
    let prefix = &filter[..filter.len() - 1];
    topic.strip_prefix(prefix).is_some_and(|rest| !rest.is_empty() && !rest.contains('/'))
}

/// The 5.0 reason a `CONNACK` refusal carries for an auth failure string, and the 3.1.1 code.
fn connack_refusal(e: &str) -> (u8, u8) {
    match e {
        auth_err::BROKER_UNAVAILABLE => (3, 0x88),
        auth_err::CONNECTION_LIMIT_REACHED => (3, 0x97),
        auth_err::INVALID_CLIENT_ID => (2, 0x85),
        _ => (5, 0x87),
    }
}

/// The 5.0 reason a refused publish's `PUBACK`/`PUBREC` carries (N52; only reasons MQTT 5.0
/// allows there), and a metric label.
fn publish_refusal(e: &str) -> (u8, &'static str) {
    match e {
        error::UNKNOWN_TOPIC | error::NOT_AUTHORIZED => (0x87, "not_authorized"),
        error::RATE_LIMIT_EXCEEDED => (0x97, "rate_limited"),
        error::MONTHLY_QUOTA_EXCEEDED => (0x97, "quota_exceeded"),
        error::RETAINED_LIMIT_EXCEEDED => (0x97, "retained_limit"),
        // Not 0x95 as N52 says: "packet too large" is no PUBACK/PUBREC reason (MQTT 5.0
        // §3.4.2.1), and clients that check (paho) drop the connection on it.
        error::MESSAGE_TOO_LARGE => (0x97, "too_large"),
        error::STORE_UNAVAILABLE => (0x80, "store_unavailable"),
        error::BROKER_UNAVAILABLE => (0x80, "broker_unavailable"),
        _ => (0x80, "other"),
    }
}

/// The 5.0 `DISCONNECT` reason for a close the server requested, if one is sent.
fn disconnect_reason(req: CloseRequest) -> Option<u8> {
    if req == CloseRequest::GONE || req == AUTH_REFUSED {
        return None;
    }
    Some(match req.code {
        close::SERVER_RESTART => 0x8B,
        close::IDLE_TIMEOUT => 0x8D,
        close::TOKEN_EXPIRED | close::REVALIDATION_FAILED => 0x87,
        close::SESSION_TAKEN_OVER => 0x8E,
        close::SLOW_CONSUMER => 0x97,
        close::MESSAGE_TOO_BIG => 0x95,
        close::CONNECTION_LIMIT => 0x98,
        close::PROTOCOL_ERROR => 0x82,
        _ => 0x80,
    })
}

/// Translates one queued frame into packets appended to `out`; false (nothing appended) when
/// it is a QoS 1/2 delivery and every delivery slot is in flight.
fn translate(frame: &Bytes, out: &mut BytesMut, shared: &Shared, disconnect_sent: &mut bool) -> bool {
    let level = shared.level;
    match frame.first() {
        None => return true,
        // A NoLag frame is a MessagePack map (fixmap, map 16, map 32); anything else is a packet
        // the reader queued as it is.
        Some(0x80..=0x8f | 0xde | 0xdf) => {}
        Some(first) => {
            *disconnect_sent |= *first == 0xE0;
            out.extend_from_slice(frame);
            return true;
        }
    }
    match frames::parse(frame) {
        Frame::Message { topic, data, msg_id, replay } => {
            let mut inner = shared.lock();
            let Some(&qos) = inner.subs.get(topic) else { return true };
            let payload = crate::payload::to_device(data);
            if codec::publish_size(level, topic, qos, payload.len()) > shared.device_max {
                shared.metrics.deliveries_too_large.fetch_add(1, Ordering::Relaxed);
                return true;
            }
            let pkid = if qos > 0 {
                if inner.outgoing.len() >= shared.max_inflight {
                    return false;
                }
                // A packet id not in flight: one is free, as at most 65535 are in flight.
                let next = |p: u16| if p == u16::MAX { 1 } else { p + 1 };
                let mut p = inner.next_pkid;
                while inner.outgoing.contains_key(&p) {
                    p = next(p);
                }
                inner.next_pkid = next(p);
                inner.outgoing.insert(p, Outgoing { msg_id: msg_id.map(str::to_owned), qos, released: false });
                p
            } else {
                0
            };
            drop(inner);
            // A redelivery of a stored message (unacked when the session's last connection
            // ended) goes out with DUP (N54).
            codec::put_publish(out, level, topic, payload, qos, pkid, false, replay);
        }
        Frame::AuthOk => {
            let present = shared.lock().present;
            let ack = codec::connack(
                level,
                0,
                shared.server_max,
                shared.limits.receive_maximum,
                present,
                shared.session_expiry,
            );
            out.extend_from_slice(&ack);
        }
        Frame::AuthFailed(e) => {
            let (v4, v5) = connack_refusal(e);
            out.extend_from_slice(&codec::connack(level, if level == Level::V4 { v4 } else { v5 }, 0, 0, false, None));
        }
        Frame::Published { msg_ref } => {
            let Some(n) = msg_ref.strip_prefix("mqtt:").and_then(|n| n.parse::<u64>().ok()) else { return true };
            let mut inner = shared.lock();
            let Some((qos, pkid)) = inner.pending.remove(&n) else { return true };
            match qos {
                1 => {
                    drop(inner);
                    out.extend_from_slice(&codec::ack(0x40, level, pkid, 0));
                }
                2 => {
                    inner.qos2.insert(pkid, Some(0));
                    drop(inner);
                    out.extend_from_slice(&codec::ack(0x50, level, pkid, 0));
                }
                _ => {}
            }
        }
        Frame::Error { error, msg_ref: Some(msg_ref) } => {
            let Some(n) = msg_ref.strip_prefix("mqtt:").and_then(|n| n.parse::<u64>().ok()) else { return true };
            let mut inner = shared.lock();
            // Not pending: a later error about an accepted publish (a failed wake, N47).
            let Some((qos, pkid)) = inner.pending.remove(&n) else { return true };
            let (reason, label) = publish_refusal(error);
            shared.metrics.publishes_refused.inc(label);
            // 3.1.1 cannot refuse: acked and dropped (N52).
            let reason = if level == Level::V5 { reason } else { 0 };
            match qos {
                1 => {
                    drop(inner);
                    out.extend_from_slice(&codec::ack(0x40, level, pkid, reason));
                }
                2 => {
                    // A 5.0 PUBREC >= 0x80 ends the exchange; otherwise PUBREL follows.
                    if reason >= 0x80 {
                        inner.qos2.remove(&pkid);
                    } else {
                        inner.qos2.insert(pkid, Some(reason));
                    }
                    drop(inner);
                    out.extend_from_slice(&codec::ack(0x50, level, pkid, reason));
                }
                _ => {}
            }
        }
        Frame::Disconnect(_) if level == Level::V5 => {
            *disconnect_sent = true;
            out.extend_from_slice(&codec::disconnect(0x87));
        }
        _ => {}
    }
    true
}

async fn write_loop(
    mut wr: Writer,
    mut outbox: Outbox,
    handle: Arc<ConnHandle>,
    shared: Arc<Shared>,
    close_timeout: Duration,
) {
    let mut w = Writing { out: BytesMut::with_capacity(4096), disconnect_sent: false, torn: false, stash: None };
    loop {
        // A delivery waiting for a slot holds the queue back until an acknowledgement frees
        // one; urgent packets (PUBREL, PINGRESP) wake the writer meanwhile.
        let blocked = w.stash.is_some() && shared.lock().outgoing.len() >= shared.max_inflight;
        if blocked || outbox.is_empty() {
            let take = tokio::select! {
                biased;
                () = shared.wake.notified() => Take::Frames,
                () = handle.closed(), if blocked => Take::Closing,
                t = std::future::poll_fn(|cx| outbox.poll_take(&handle, cx)), if !blocked => t,
            };
            if take != Take::Frames {
                break;
            }
        }
        let written = tokio::select! {
            biased;
            () = handle.closed() => break,
            r = w.write_taken(&mut wr, &mut outbox, &handle, &shared) => r,
        };
        if written.is_err() {
            handle.request_close(CloseRequest::GONE);
            break;
        }
        outbox.shrink();
        if w.out.capacity() > WRITE_CHUNK * 2 {
            w.out = BytesMut::with_capacity(4096);
        }
    }
    let req = handle.close_requested().unwrap_or(CloseRequest::GONE);
    handle.count_close(req);
    let _ = tokio::time::timeout(close_timeout, async {
        if req != CloseRequest::GONE && !w.torn {
            // As the WebSocket writer: the close only once the session released its record.
            handle.released().await;
            if req != CloseRequest::SLOW_CONSUMER {
                let out = &mut w.out;
                out.clear();
                for p in std::mem::take(&mut shared.lock().urgent) {
                    out.extend_from_slice(&p);
                }
                // Deliveries without a slot are dropped here: a stored one stays pending (N54).
                if let Some(f) = w.stash.take() {
                    translate(&f, out, &shared, &mut w.disconnect_sent);
                }
                while let Some(f) = outbox.try_recv(&handle) {
                    translate(&f, out, &shared, &mut w.disconnect_sent);
                }
                if write_flushed(&mut wr, out).await.is_err() {
                    return;
                }
            }
            if shared.level == Level::V5
                && !w.disconnect_sent
                && let Some(reason) = disconnect_reason(req)
            {
                let _ = write_flushed(&mut wr, &codec::disconnect(reason)).await;
            }
        }
        let _ = wr.shutdown().await;
    })
    .await;
}

/// The writer's state across writes.
struct Writing {
    out: BytesMut,
    disconnect_sent: bool,
    /// A write cut short by a close may have left half a packet on the socket: nothing more
    /// can be written after it.
    torn: bool,
    /// A taken QoS 1/2 delivery waiting for a slot (counted as queued until written).
    stash: Option<Bytes>,
}

impl Writing {
    /// Writes urgent packets, the waiting delivery once it has a slot, then the taken frames
    /// and whatever is queued meanwhile, until the queue is empty or a delivery waits for a
    /// slot; `torn` stays true if it is dropped in the middle of a write.
    async fn write_taken(
        &mut self,
        wr: &mut Writer,
        outbox: &mut Outbox,
        handle: &ConnHandle,
        shared: &Shared,
    ) -> std::io::Result<()> {
        loop {
            let (mut frames, mut bytes) = (0, 0);
            self.out.clear();
            for p in std::mem::take(&mut shared.lock().urgent) {
                self.out.extend_from_slice(&p);
            }
            if let Some(f) = self.stash.take() {
                if translate(&f, &mut self.out, shared, &mut self.disconnect_sent) {
                    frames += 1;
                    bytes += f.len();
                } else {
                    self.stash = Some(f);
                }
            }
            while self.stash.is_none() && self.out.len() < WRITE_CHUNK {
                let Some(f) = outbox.pop() else { break };
                if translate(&f, &mut self.out, shared, &mut self.disconnect_sent) {
                    frames += 1;
                    bytes += f.len();
                } else {
                    self.stash = Some(f);
                }
            }
            // Left true when this future is dropped mid-write (a close cut it short).
            self.torn = true;
            write_flushed(wr, &self.out).await?;
            self.torn = false;
            handle.written(frames, bytes);
            if self.stash.is_some() || (outbox.is_empty() && !outbox.try_take(handle)) {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_map_to_their_reason_codes() {
        assert_eq!(connack_refusal(auth_err::ACCESS_DENIED), (5, 0x87));
        assert_eq!(connack_refusal(auth_err::TOKEN_EXPIRED), (5, 0x87));
        assert_eq!(connack_refusal(auth_err::BROKER_UNAVAILABLE), (3, 0x88));
        assert_eq!(publish_refusal(error::UNKNOWN_TOPIC).0, 0x87);
        assert_eq!(publish_refusal(error::MONTHLY_QUOTA_EXCEEDED).0, 0x97);
        assert_eq!(publish_refusal(error::MESSAGE_TOO_LARGE).0, 0x97);
        assert_eq!(disconnect_reason(CloseRequest::SERVER_RESTART), Some(0x8B));
        assert_eq!(disconnect_reason(CloseRequest::IDLE_TIMEOUT), Some(0x8D));
        assert_eq!(disconnect_reason(CloseRequest::TAKEN_OVER), Some(0x8E));
        assert_eq!(disconnect_reason(CloseRequest::GONE), None);
        assert_eq!(disconnect_reason(AUTH_REFUSED), None);
    }

    #[test]
    fn any_client_identifier_names_one_session() {
        assert_eq!(session_client_id(""), None);
        assert_eq!(session_client_id("sensor-1_A").as_deref(), Some("sensor-1_A"));
        let odd = session_client_id("plant/7 · line:3").unwrap();
        assert!(odd.starts_with("mqtt-") && odd.len() == 37 && skua_core::ids::is_slug(&odd), "{odd}");
        assert_eq!(session_client_id("plant/7 · line:3").unwrap(), odd, "the same on every node");
        assert_ne!(session_client_id("plant/7 · line:4").unwrap(), odd);
        assert!(session_client_id(&"a".repeat(65)).unwrap().starts_with("mqtt-"), "longer than a slug");
    }

    #[test]
    fn wildcard_filters_cover_the_topics_of_their_room() {
        assert!(covers("demo/general/+", "demo/general/tasks"));
        assert!(covers("demo/general/#", "demo/general/tasks"));
        assert!(!covers("demo/general/+", "demo/random/tasks"));
        assert!(!covers("demo/general/+", "demo/general/"));
        assert!(covers("demo/general/tasks", "demo/general/tasks"));
        assert!(!covers("demo/general/tasks", "demo/general/status"));
        assert!(!is_wildcard("demo/general/tasks"));
    }
}
