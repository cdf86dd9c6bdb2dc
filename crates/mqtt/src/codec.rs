//! MQTT packets in and out, with our bounds around rumqttc's packet codecs (`mqttbytes::v4`
//! for 3.1.1, `v5::mqttbytes::v5` for 5.0).
//!
//! Reading: the fixed header is parsed here first, so a packet larger than the largest packet
//! accepted (the WebSocket frame limit, `max_frame_size`) is refused before its body is
//! buffered; then rumqttc decodes exactly that packet's bytes. What rumqttc leaves unchecked is
//! checked here: the fixed-header flags of each type, packet types a client may not send,
//! topic and filter lengths, filter and property counts (the [`MqttLimits`] configured). Anything wrong is a [`Fault`], which
//! closes the connection (5.0: `DISCONNECT` with [`Fault::reason`] first).
//!
//! Writing: the few packets the server sends are small and written here byte by byte (the
//! `PUBLISH` of a delivery copies its payload once, into the writer's buffer).

use bytes::{Buf, BufMut, Bytes, BytesMut};
use rumqttc::mqttbytes::v4;
use rumqttc::v5::mqttbytes::v5;

use crate::settings::MqttLimits;

/// The protocol level a connection speaks, fixed by its `CONNECT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// MQTT 3.1.1 (protocol level 4).
    V4,
    /// MQTT 5.0 (protocol level 5).
    V5,
}

/// Why a connection's input is refused: each closes the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Not a well-formed packet (5.0 reason 0x81).
    Malformed(&'static str),
    /// A well-formed packet the protocol does not allow here (0x82).
    Protocol(&'static str),
    /// Larger than the largest packet accepted (0x95).
    TooLarge,
    /// A topic alias, which this server does not offer (0x94).
    TopicAlias,
    /// A `CONNECT` of another protocol level than 4 or 5 (3.1.1 `CONNACK` 1, 5.0 0x84).
    Version(u8),
}

impl Fault {
    /// The 5.0 reason code of the `DISCONNECT` (or `CONNACK`) that reports it.
    pub fn reason(self) -> u8 {
        match self {
            Self::Malformed(_) => 0x81,
            Self::Protocol(_) => 0x82,
            Self::TooLarge => 0x95,
            Self::TopicAlias => 0x94,
            Self::Version(_) => 0x84,
        }
    }

    /// A label for metrics and logs.
    pub fn label(self) -> &'static str {
        match self {
            Self::Malformed(_) => "malformed",
            Self::Protocol(_) => "protocol_error",
            Self::TooLarge => "packet_too_large",
            Self::TopicAlias => "topic_alias",
            Self::Version(_) => "unsupported_version",
        }
    }
}

/// A will message from `CONNECT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Will {
    /// Its topic name.
    pub topic: String,
    /// Its payload.
    pub payload: Bytes,
    /// Its QoS.
    pub qos: u8,
    /// Its retain flag.
    pub retain: bool,
}

/// A `CONNECT`, of either level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connect {
    /// The protocol level.
    pub level: Level,
    /// Keep-alive in seconds (0: none).
    pub keep_alive: u16,
    /// The client identifier (may be empty).
    pub client_id: String,
    /// Clean session (3.1.1) / clean start (5.0).
    pub clean: bool,
    /// The will message, if any.
    pub will: Option<Will>,
    /// The user name, if any.
    pub username: Option<String>,
    /// The password, if any.
    pub password: Option<String>,
    /// 5.0: session expiry interval in seconds (0 when absent).
    pub session_expiry: u32,
    /// 5.0: the largest packet the client accepts.
    pub max_packet: Option<u32>,
    /// 5.0: most QoS 1/2 deliveries the client takes unacknowledged (its receive maximum).
    pub receive_max: Option<u16>,
    /// 5.0: an authentication method was named (enhanced auth, not offered).
    pub auth_method: bool,
    /// 5.0: its user properties, in order (at most `mqtt_max_user_properties`); a `presence`
    /// one announces room presence (docs/mqtt.md, "Presence").
    pub user_properties: Vec<(String, String)>,
}

/// A `PUBLISH` from a client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publish {
    /// The topic name.
    pub topic: String,
    /// The payload.
    pub payload: Bytes,
    /// 0, 1 or 2.
    pub qos: u8,
    /// The retain flag.
    pub retain: bool,
    /// The duplicate flag.
    pub dup: bool,
    /// The packet identifier (0 for QoS 0).
    pub pkid: u16,
}

/// A packet a client sent, after `CONNECT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Packet {
    /// `PUBLISH`.
    Publish(Publish),
    /// `PUBACK` of a delivery.
    PubAck(u16),
    /// `PUBREC` of a delivery.
    PubRec(u16),
    /// `PUBREL` of a QoS 2 publish.
    PubRel(u16),
    /// `PUBCOMP` of a delivery.
    PubComp(u16),
    /// `SUBSCRIBE`: packet id and (filter, requested QoS) pairs.
    Subscribe {
        /// Packet identifier.
        pkid: u16,
        /// Filters with their requested QoS.
        filters: Vec<(String, u8)>,
    },
    /// `UNSUBSCRIBE`.
    Unsubscribe {
        /// Packet identifier.
        pkid: u16,
        /// The filters.
        filters: Vec<String>,
    },
    /// `PINGREQ`.
    PingReq,
    /// `DISCONNECT` with its 5.0 reason code (0 for 3.1.1).
    Disconnect {
        /// The reason code (0x04: publish the will anyway).
        reason: u8,
        /// 5.0: the session expiry interval the client sets at its end, in seconds.
        session_expiry: Option<u32>,
    },
}

/// The fixed header at the start of `buf`: (first byte, header length, remaining length), or
/// `None` when more bytes are needed.
fn fixed_header(buf: &[u8], max_packet: usize) -> Result<Option<(u8, usize, usize)>, Fault> {
    let Some(&first) = buf.first() else { return Ok(None) };
    let mut len: usize = 0;
    for i in 0..4 {
        let Some(&b) = buf.get(1 + i) else { return Ok(None) };
        len |= usize::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            let header = 2 + i;
            if header + len > max_packet {
                return Err(Fault::TooLarge);
            }
            return Ok(Some((first, header, len)));
        }
    }
    Err(Fault::Malformed("remaining length longer than 4 bytes"))
}

/// Runs a rumqttc decode, turning a panic in it into a malformed packet: client input never
/// panics a connection, whatever the codec's own checks miss.
fn guarded<T>(f: impl FnOnce() -> Result<T, Fault>) -> Result<T, Fault> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .unwrap_or(Err(Fault::Malformed("packet the decoder could not read")))
}

fn check_topic(t: &str, limits: &MqttLimits) -> Result<(), Fault> {
    if t.len() > limits.max_topic_bytes {
        return Err(Fault::Malformed("topic longer than the limit"));
    }
    if t.contains('\0') {
        return Err(Fault::Malformed("topic with a NUL character"));
    }
    Ok(())
}

fn check_props(n: usize, limits: &MqttLimits) -> Result<(), Fault> {
    if n > limits.max_user_properties { Err(Fault::Malformed("too many user properties")) } else { Ok(()) }
}

/// The first packet of a connection, which must be `CONNECT`; `Ok(None)` when `buf` does not
/// hold all of it yet. Consumes it from `buf`.
///
/// # Errors
/// A [`Fault`] when it is not a `CONNECT`, too large, malformed or of another level.
pub fn read_connect(buf: &mut BytesMut, max_packet: usize, limits: &MqttLimits) -> Result<Option<Connect>, Fault> {
    let Some((first, header, len)) = fixed_header(buf, max_packet)? else { return Ok(None) };
    if first != 0x10 {
        return Err(Fault::Protocol("the first packet must be CONNECT"));
    }
    if buf.len() < header + len {
        return Ok(None);
    }
    // Protocol name (2-byte length + "MQTT") then the level byte.
    let body = &buf[header..header + len];
    if body.len() < 7 {
        return Err(Fault::Malformed("CONNECT too short"));
    }
    let name_len = usize::from(u16::from_be_bytes([body[0], body[1]]));
    let Some(&level) = body.get(2 + name_len) else { return Err(Fault::Malformed("CONNECT too short")) };
    if &body[2..2 + name_len] != b"MQTT" {
        return Err(if &body[2..2 + name_len] == b"MQIsdp" {
            Fault::Version(level)
        } else {
            Fault::Protocol("not an MQTT CONNECT")
        });
    }
    // Connect flags: bit 0 is reserved and must be 0.
    if body.get(3 + name_len).is_some_and(|f| f & 1 != 0) {
        return Err(Fault::Malformed("reserved CONNECT flag set"));
    }
    let connect = match level {
        4 => guarded(|| {
            let v4::Packet::Connect(c) = v4::Packet::read(buf, max_packet).map_err(v4_fault)? else {
                return Err(Fault::Protocol("the first packet must be CONNECT"));
            };
            Ok(Connect {
                level: Level::V4,
                keep_alive: c.keep_alive,
                client_id: c.client_id,
                clean: c.clean_session,
                will: c.last_will.map(|w| Will {
                    topic: w.topic,
                    payload: w.message,
                    qos: w.qos as u8,
                    retain: w.retain,
                }),
                username: c.login.as_ref().map(|l| l.username.clone()).filter(|u| !u.is_empty()),
                password: c.login.map(|l| l.password).filter(|p| !p.is_empty()),
                session_expiry: 0,
                max_packet: None,
                receive_max: None,
                auth_method: false,
                user_properties: Vec::new(),
            })
        })?,
        5 => guarded(|| {
            let v5::Packet::Connect(c, will, login) =
                v5::Packet::read(buf, Some(max_u32(max_packet))).map_err(v5_fault)?
            else {
                return Err(Fault::Protocol("the first packet must be CONNECT"));
            };
            let props = c.properties.unwrap_or_default();
            check_props(props.user_properties.len(), limits)?;
            let will = match will {
                None => None,
                Some(w) => {
                    check_props(w.properties.as_ref().map_or(0, |p| p.user_properties.len()), limits)?;
                    let topic =
                        String::from_utf8(w.topic.to_vec()).map_err(|_| Fault::Malformed("will topic is not UTF-8"))?;
                    Some(Will { topic, payload: w.message, qos: w.qos as u8, retain: w.retain })
                }
            };
            Ok(Connect {
                level: Level::V5,
                keep_alive: c.keep_alive,
                client_id: c.client_id,
                clean: c.clean_start,
                will,
                username: login.as_ref().map(|l| l.username.clone()).filter(|u| !u.is_empty()),
                password: login.map(|l| l.password).filter(|p| !p.is_empty()),
                session_expiry: props.session_expiry_interval.unwrap_or(0),
                max_packet: props.max_packet_size,
                receive_max: props.receive_maximum,
                auth_method: props.authentication_method.is_some(),
                user_properties: props.user_properties,
            })
        })?,
        other => return Err(Fault::Version(other)),
    };
    if connect.client_id.len() > limits.max_client_id_bytes {
        return Err(Fault::Malformed("client identifier longer than the limit"));
    }
    if let Some(w) = &connect.will {
        check_topic(&w.topic, limits)?;
        if w.topic.is_empty() || w.topic.contains(['+', '#']) {
            return Err(Fault::Malformed("will topic is not a topic name"));
        }
    }
    Ok(Some(connect))
}

fn max_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn v4_fault(e: rumqttc::mqttbytes::Error) -> Fault {
    use rumqttc::mqttbytes::Error as E;
    match e {
        E::PayloadSizeLimitExceeded(_) => Fault::TooLarge,
        E::InvalidProtocolLevel(l) => Fault::Version(l),
        _ => Fault::Malformed("malformed packet"),
    }
}

fn v5_fault(e: rumqttc::v5::mqttbytes::Error) -> Fault {
    use rumqttc::v5::mqttbytes::Error as E;
    match e {
        E::PayloadSizeLimitExceeded { .. } => Fault::TooLarge,
        E::InvalidProtocolLevel(l) => Fault::Version(l),
        _ => Fault::Malformed("malformed packet"),
    }
}

/// The fixed-header flags each packet type must carry (3.1.1 §2.2.2, 5.0 §2.1.3); `None`
/// for `PUBLISH`, whose flags are its own.
fn required_flags(kind: u8) -> Option<u8> {
    match kind {
        3 => None,
        6 | 8 | 10 => Some(0b0010),
        _ => Some(0),
    }
}

/// The next packet after `CONNECT` in `buf`, consumed; `Ok(None)` when it is not complete yet.
///
/// # Errors
/// A [`Fault`] for a malformed, too large or not allowed packet.
pub fn read(buf: &mut BytesMut, level: Level, max_packet: usize, limits: &MqttLimits) -> Result<Option<Packet>, Fault> {
    let Some((first, header, len)) = fixed_header(buf, max_packet)? else { return Ok(None) };
    if buf.len() < header + len {
        return Ok(None);
    }
    let kind = first >> 4;
    if let Some(flags) = required_flags(kind)
        && first & 0x0f != flags
    {
        buf.advance(header + len);
        return Err(Fault::Malformed("wrong fixed-header flags"));
    }
    match kind {
        1 => return Err(Fault::Protocol("a second CONNECT")),
        2 | 9 | 11 | 13 => return Err(Fault::Protocol("a packet only a server sends")),
        15 => return Err(Fault::Protocol("AUTH is not offered")),
        0 => return Err(Fault::Malformed("packet type 0")),
        _ => {}
    }
    // A 5.0 DISCONNECT without a reason code (rumqttc wants one) is a normal disconnection.
    if kind == 14 && len == 0 {
        buf.advance(header);
        return Ok(Some(Packet::Disconnect { reason: 0, session_expiry: None }));
    }
    let packet = match level {
        Level::V4 => guarded(|| v4_packet(v4::Packet::read(buf, max_packet).map_err(v4_fault)?))?,
        Level::V5 => {
            guarded(|| v5_packet(v5::Packet::read(buf, Some(max_u32(max_packet))).map_err(v5_fault)?, limits))?
        }
    };
    match &packet {
        Packet::Publish(p) => {
            check_topic(&p.topic, limits)?;
        }
        Packet::Subscribe { filters, .. } => {
            if filters.is_empty() {
                return Err(Fault::Protocol("SUBSCRIBE without a filter"));
            }
            if filters.len() > limits.max_filters {
                return Err(Fault::Malformed("too many filters"));
            }
            for (f, _) in filters {
                check_topic(f, limits)?;
            }
        }
        Packet::Unsubscribe { filters, .. } => {
            if filters.is_empty() {
                return Err(Fault::Protocol("UNSUBSCRIBE without a filter"));
            }
            if filters.len() > limits.max_filters {
                return Err(Fault::Malformed("too many filters"));
            }
            for f in filters {
                check_topic(f, limits)?;
            }
        }
        _ => {}
    }
    Ok(Some(packet))
}

fn pkid_needed(qos: u8, pkid: u16) -> Result<(), Fault> {
    if qos > 0 && pkid == 0 { Err(Fault::Malformed("packet identifier 0")) } else { Ok(()) }
}

fn v4_packet(p: v4::Packet) -> Result<Packet, Fault> {
    Ok(match p {
        v4::Packet::Publish(p) => {
            pkid_needed(p.qos as u8, p.pkid)?;
            Packet::Publish(Publish {
                topic: p.topic,
                payload: p.payload,
                qos: p.qos as u8,
                retain: p.retain,
                dup: p.dup,
                pkid: p.pkid,
            })
        }
        v4::Packet::PubAck(a) => Packet::PubAck(a.pkid),
        v4::Packet::PubRec(a) => Packet::PubRec(a.pkid),
        v4::Packet::PubRel(a) => Packet::PubRel(a.pkid),
        v4::Packet::PubComp(a) => Packet::PubComp(a.pkid),
        v4::Packet::Subscribe(s) => {
            pkid_needed(1, s.pkid)?;
            Packet::Subscribe { pkid: s.pkid, filters: s.filters.into_iter().map(|f| (f.path, f.qos as u8)).collect() }
        }
        v4::Packet::Unsubscribe(u) => {
            pkid_needed(1, u.pkid)?;
            Packet::Unsubscribe { pkid: u.pkid, filters: u.topics }
        }
        v4::Packet::PingReq => Packet::PingReq,
        v4::Packet::Disconnect => Packet::Disconnect { reason: 0, session_expiry: None },
        _ => return Err(Fault::Protocol("a packet only a server sends")),
    })
}

fn v5_packet(p: v5::Packet, limits: &MqttLimits) -> Result<Packet, Fault> {
    Ok(match p {
        v5::Packet::Publish(p) => {
            pkid_needed(p.qos as u8, p.pkid)?;
            if let Some(props) = &p.properties {
                check_props(props.user_properties.len(), limits)?;
                if props.topic_alias.is_some() {
                    return Err(Fault::TopicAlias);
                }
            }
            let topic = String::from_utf8(p.topic.to_vec()).map_err(|_| Fault::Malformed("topic is not UTF-8"))?;
            Packet::Publish(Publish {
                topic,
                payload: p.payload,
                qos: p.qos as u8,
                retain: p.retain,
                dup: p.dup,
                pkid: p.pkid,
            })
        }
        v5::Packet::PubAck(a) => Packet::PubAck(a.pkid),
        v5::Packet::PubRec(a) => Packet::PubRec(a.pkid),
        v5::Packet::PubRel(a) => Packet::PubRel(a.pkid),
        v5::Packet::PubComp(a) => Packet::PubComp(a.pkid),
        v5::Packet::Subscribe(s) => {
            pkid_needed(1, s.pkid)?;
            check_props(s.properties.as_ref().map_or(0, |p| p.user_properties.len()), limits)?;
            Packet::Subscribe { pkid: s.pkid, filters: s.filters.into_iter().map(|f| (f.path, f.qos as u8)).collect() }
        }
        v5::Packet::Unsubscribe(u) => {
            pkid_needed(1, u.pkid)?;
            check_props(u.properties.as_ref().map_or(0, |p| p.user_properties.len()), limits)?;
            Packet::Unsubscribe { pkid: u.pkid, filters: u.filters }
        }
        v5::Packet::PingReq(_) => Packet::PingReq,
        v5::Packet::Disconnect(d) => Packet::Disconnect {
            reason: d.reason_code as u8,
            session_expiry: d.properties.and_then(|p| p.session_expiry_interval),
        },
        _ => return Err(Fault::Protocol("a packet only a server sends")),
    })
}

// ---- writing ----

/// Appends an MQTT variable-length remaining length.
fn put_len(out: &mut BytesMut, mut len: usize) {
    loop {
        let mut b = (len % 128) as u8;
        len /= 128;
        if len > 0 {
            b |= 0x80;
        }
        out.put_u8(b);
        if len == 0 {
            break;
        }
    }
}

/// The bytes of a remaining length.
fn len_len(len: usize) -> usize {
    match len {
        0..=127 => 1,
        128..=16_383 => 2,
        16_384..=2_097_151 => 3,
        _ => 4,
    }
}

/// `CONNACK`; `present`: the session present flag (a stored session was resumed). 5.0 carries
/// what the server offers: its largest packet, receive maximum, no topic aliases, no shared
/// subscriptions, no subscription identifiers, QoS 2 at most; and `session_expiry` when the
/// server keeps the session for another time than the client asked (0: not kept).
pub fn connack(
    level: Level,
    code: u8,
    max_packet: usize,
    receive_max: u16,
    present: bool,
    session_expiry: Option<u32>,
) -> Bytes {
    let mut out = BytesMut::with_capacity(32);
    let flags = u8::from(present && code == 0);
    match level {
        Level::V4 => {
            out.put_slice(&[0x20, 2, flags, code]);
        }
        Level::V5 => {
            let mut props = BytesMut::new();
            if code == 0 {
                props.put_u8(0x27); // maximum packet size
                props.put_u32(max_u32(max_packet));
                props.put_u8(0x21); // receive maximum
                props.put_u16(receive_max);
                props.put_u8(0x2A); // shared subscriptions available: no
                props.put_u8(0);
                props.put_u8(0x29); // subscription identifiers available: no
                props.put_u8(0);
                if let Some(expiry) = session_expiry {
                    props.put_u8(0x11); // session expiry interval the server keeps the session for
                    props.put_u32(expiry);
                }
            }
            let body = 2 + len_len(props.len()) + props.len();
            out.put_u8(0x20);
            put_len(&mut out, body);
            out.put_u8(flags);
            out.put_u8(code);
            put_len(&mut out, props.len());
            out.put_slice(&props);
        }
    }
    out.freeze()
}

/// `PUBACK` (0x40), `PUBREC` (0x50), `PUBREL` (0x62) or `PUBCOMP` (0x70) of `pkid`; a 5.0
/// reason code other than 0 is written out.
pub fn ack(first: u8, level: Level, pkid: u16, reason: u8) -> Bytes {
    let mut out = BytesMut::with_capacity(5);
    out.put_u8(first);
    if level == Level::V5 && reason != 0 {
        out.put_u8(3);
        out.put_u16(pkid);
        out.put_u8(reason);
    } else {
        out.put_u8(2);
        out.put_u16(pkid);
    }
    out.freeze()
}

/// `SUBACK` (0x90) or `UNSUBACK` (0xB0) with one return/reason code per filter (3.1.1's
/// `UNSUBACK` has none).
pub fn sub_ack(first: u8, level: Level, pkid: u16, codes: &[u8]) -> Bytes {
    let codes: &[u8] = if first == 0xB0 && level == Level::V4 { &[] } else { codes };
    let props = usize::from(level == Level::V5);
    let mut out = BytesMut::with_capacity(8 + codes.len());
    out.put_u8(first);
    put_len(&mut out, 2 + props + codes.len());
    out.put_u16(pkid);
    if level == Level::V5 {
        out.put_u8(0);
    }
    out.put_slice(codes);
    out.freeze()
}

/// `PINGRESP`.
pub fn pingresp() -> Bytes {
    Bytes::from_static(&[0xD0, 0])
}

/// A 5.0 `DISCONNECT` with `reason`.
pub fn disconnect(reason: u8) -> Bytes {
    Bytes::copy_from_slice(&[0xE0, 1, reason])
}

/// The size of a `PUBLISH` of `topic` and `payload_len` bytes.
pub fn publish_size(level: Level, topic: &str, qos: u8, payload_len: usize) -> usize {
    let body = 2 + topic.len() + if qos > 0 { 2 } else { 0 } + usize::from(level == Level::V5) + payload_len;
    1 + len_len(body) + body
}

/// Appends a `PUBLISH` to `out`; `dup` marks a QoS 1/2 redelivery.
#[allow(clippy::too_many_arguments)]
pub fn put_publish(
    out: &mut BytesMut,
    level: Level,
    topic: &str,
    payload: &[u8],
    qos: u8,
    pkid: u16,
    retain: bool,
    dup: bool,
) {
    let body = 2 + topic.len() + if qos > 0 { 2 } else { 0 } + usize::from(level == Level::V5) + payload.len();
    out.reserve(1 + len_len(body) + body);
    out.put_u8(0x30 | (u8::from(dup && qos > 0) << 3) | (qos << 1) | u8::from(retain));
    put_len(out, body);
    // Invariant: topics are addresses the session accepted, far below 64 KiB (and a configured
    // `mqtt_max_topic_bytes` is at most 65535).
    out.put_u16(u16::try_from(topic.len()).unwrap_or(u16::MAX));
    out.put_slice(topic.as_bytes());
    if qos > 0 {
        out.put_u16(pkid);
    }
    if level == Level::V5 {
        out.put_u8(0);
    }
    out.put_slice(payload);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connect_v4(password: &str) -> BytesMut {
        let mut c = v4::Connect::new("dev1");
        c.set_login("device", password);
        let mut b = BytesMut::new();
        c.write(&mut b).unwrap();
        b
    }

    #[test]
    fn a_connect_of_each_level_is_read() {
        let mut b = connect_v4("tok");
        let c = read_connect(&mut b, 1024, &MqttLimits::default()).unwrap().unwrap();
        assert_eq!((c.level, c.password.as_deref(), c.username.as_deref()), (Level::V4, Some("tok"), Some("device")));
        assert!(b.is_empty());
        let mut b = BytesMut::new();
        let c5 = v5::Connect { keep_alive: 30, client_id: "d".into(), clean_start: true, properties: None };
        let login = v5::Login { username: "u".into(), password: "p".into() };
        v5::Packet::Connect(c5, None, Some(login)).write(&mut b, None).unwrap();
        let c = read_connect(&mut b, 1024, &MqttLimits::default()).unwrap().unwrap();
        assert_eq!((c.level, c.keep_alive, c.password.as_deref()), (Level::V5, 30, Some("p")));
    }

    #[test]
    fn partial_packets_wait_and_large_ones_are_refused_from_their_header() {
        let full = connect_v4("tok");
        for cut in 0..full.len() {
            let mut b = BytesMut::from(&full[..cut]);
            assert_eq!(read_connect(&mut b, 1024, &MqttLimits::default()), Ok(None), "cut at {cut}");
        }
        let mut b = BytesMut::from(&full[..2]);
        assert_eq!(read_connect(&mut b, 8, &MqttLimits::default()), Err(Fault::TooLarge));
        let mut b = BytesMut::from(&[0x30u8, 0xff, 0xff, 0xff, 0xff, 0x01][..]);
        assert_eq!(
            read(&mut b, Level::V4, 1 << 30, &MqttLimits::default()),
            Err(Fault::Malformed("remaining length longer than 4 bytes"))
        );
    }

    #[test]
    fn wrong_flags_and_server_packets_are_faults() {
        let mut b = BytesMut::from(&[0x80u8, 5, 0, 1, 0, 1, b'a'][..]);
        assert!(matches!(read(&mut b, Level::V4, 1024, &MqttLimits::default()), Err(Fault::Malformed(_))));
        let mut b = BytesMut::from(&[0x20u8, 2, 0, 0][..]);
        assert!(matches!(read(&mut b, Level::V4, 1024, &MqttLimits::default()), Err(Fault::Protocol(_))));
        let mut b = BytesMut::from(&[0xE0u8, 0][..]);
        assert_eq!(
            read(&mut b, Level::V5, 1024, &MqttLimits::default()),
            Ok(Some(Packet::Disconnect { reason: 0, session_expiry: None }))
        );
    }

    #[test]
    fn written_packets_read_back_with_rumqttc() {
        let mut out = BytesMut::new();
        put_publish(&mut out, Level::V5, "a/b/c", b"xyz", 1, 7, false, false);
        assert_eq!(out.len(), publish_size(Level::V5, "a/b/c", 1, 3));
        let v5::Packet::Publish(p) = v5::Packet::read(&mut out, None).unwrap() else { panic!() };
        assert_eq!((&p.topic[..], &p.payload[..], p.pkid), (&b"a/b/c"[..], &b"xyz"[..], 7));
        let mut b = BytesMut::from(&sub_ack(0x90, Level::V5, 3, &[1, 0x87])[..]);
        let v5::Packet::SubAck(s) = v5::Packet::read(&mut b, None).unwrap() else { panic!() };
        assert_eq!(s.return_codes.len(), 2);
        let mut b = BytesMut::from(&connack(Level::V5, 0, 1 << 20, 64, false, Some(0))[..]);
        let v5::Packet::ConnAck(c) = v5::Packet::read(&mut b, None).unwrap() else { panic!() };
        let props = c.properties.unwrap();
        assert_eq!((props.max_packet_size, props.session_expiry_interval), (Some(1 << 20), Some(0)));
        assert!(!c.session_present);
        let mut b = BytesMut::from(&connack(Level::V5, 0, 1 << 20, 64, true, None)[..]);
        let v5::Packet::ConnAck(c) = v5::Packet::read(&mut b, None).unwrap() else { panic!() };
        assert!(c.session_present);
        assert_eq!(c.properties.unwrap().session_expiry_interval, None);
        let mut b = BytesMut::from(&connack(Level::V4, 0, 0, 0, true, None)[..]);
        let v4::Packet::ConnAck(c) = v4::Packet::read(&mut b, 1024).unwrap() else { panic!() };
        assert!(c.session_present);
        let mut out = BytesMut::new();
        put_publish(&mut out, Level::V4, "a/b/c", b"x", 2, 9, false, true);
        let v4::Packet::Publish(p) = v4::Packet::read(&mut out, 1024).unwrap() else { panic!() };
        assert!(p.dup);
        assert_eq!((p.qos as u8, p.pkid), (2, 9));
        let mut b = BytesMut::from(&ack(0x40, Level::V5, 9, 0x87)[..]);
        let v5::Packet::PubAck(a) = v5::Packet::read(&mut b, None).unwrap() else { panic!() };
        assert_eq!((a.pkid, a.reason), (9, v5::PubAckReason::NotAuthorized));
    }
}
