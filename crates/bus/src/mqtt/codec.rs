//! The envelope wire format of the MQTT hop, version 1 (byte-level description in
//! docs/cluster.md).
//!
//! An envelope is one MessagePack array whose first two elements are the format version (`1`)
//! and the kind (`0` publication, `1` presence event, `2` takeover, `3` kick); the kind's
//! fields follow in a fixed order. Publications and presence events end with the payload as a `bin` holding the untouched `data` bytes. `data` is
//! never parsed or re-encoded (it need not even be valid MessagePack: a `leave` carries none),
//! and decoding hands it out as a zero-copy slice of the received packet.
//!
//! Decoders accept arrays longer than the kind needs and skip the extra elements, so a later
//! writer may append fields without a version bump; anything else unexpected is a
//! [`DecodeError`], never a panic. The one appended field so far: a publication may carry a
//! 17th element, the publisher's W3C `traceparent` string ([`encode_traced`]), when traces are
//! exported. A presence event of a persistent member (N46) carries two more: its status
//! (`0` online, `1` offline, `2` waking) and advertisement version; change `3` is `waking`.

use bytes::Bytes;
use skua_core::{
    ActorId, AppId, ClientId, ConnId, ConsumerId, ConsumerOf, Control, ControlMessage, Envelope, EnvelopeId, GroupKey,
    IdError, MemberStatus, NodeId, Persistence, PresenceChange, PresenceEvent, ProjectId, Publication, RoomKey,
    SessionKey, TopicAddress,
};
use skua_protocol::msgpack::{Kind, ReadError, Reader, Writer};

/// The format version written by [`encode`] and the only one [`decode`] accepts.
pub const VERSION: u64 = 1;
/// Kind tag of [`Envelope::Publication`].
const KIND_PUBLICATION: u64 = 0;
/// Kind tag of [`Envelope::Presence`].
const KIND_PRESENCE: u64 = 1;
/// Kind tag of [`Envelope::Control`] with [`ControlMessage::Takeover`].
const KIND_TAKEOVER: u64 = 2;
/// Kind tag of [`Envelope::Control`] with [`ControlMessage::Kick`].
const KIND_KICK: u64 = 3;
/// Elements of a version-1 publication: v, kind and 14 fields.
const PUBLICATION_LEN: usize = 16;
/// Elements of a version-1 presence event: v, kind and 7 fields.
const PRESENCE_LEN: usize = 9;
/// Elements of a version-1 takeover: v, kind and 6 fields.
const TAKEOVER_LEN: usize = 8;
/// Elements of a version-1 kick: v, kind and 9 fields.
const KICK_LEN: usize = 11;
/// Consumer tag of a kick: a session's own consumer.
const CONSUMER_SESSION: u64 = 0;
/// Consumer tag of a kick: a load-balanced group's consumer.
const CONSUMER_GROUP: u64 = 1;

/// Why an inbound packet is not a version-1 envelope.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// Not the MessagePack the format prescribes.
    #[error("malformed envelope: {0}")]
    Msgpack(#[from] ReadError),
    /// Written by a newer (or foreign) encoder.
    #[error("unsupported envelope version {0}")]
    Version(i128),
    /// An unknown kind tag.
    #[error("unknown envelope kind {0}")]
    Kind(i128),
    /// Fewer elements than the kind needs.
    #[error("envelope has {got} elements, needs {need}")]
    Short {
        /// Elements present.
        got: usize,
        /// Elements the kind needs.
        need: usize,
    },
    /// A field is out of range (`qos` above 2, an id of the wrong length, an empty name…).
    #[error("envelope field {0} out of range")]
    Field(&'static str),
    /// An identifier that does not parse.
    #[error("envelope identifier refused")]
    Id(#[from] IdError),
}

/// Encodes an envelope; the result is the MQTT payload.
pub fn encode(envelope: &Envelope) -> Vec<u8> {
    encode_traced(envelope, None)
}

/// Encodes an envelope with the publisher's trace context appended (publications only).
pub fn encode_traced(envelope: &Envelope, trace_parent: Option<&str>) -> Vec<u8> {
    match envelope {
        Envelope::Publication(p) => {
            let extra = p.topic.room.room.len() + p.topic.topic.len() + p.filter.as_ref().map_or(0, String::len);
            let mut w = Writer::with_capacity(p.data.len() + extra + 128);
            // Optional tail: trace context, then the history position (issue 19), whose
            // presence makes the trace slot present too (nil when there is no context).
            let len = PUBLICATION_LEN + if p.history.is_some() { 3 } else { usize::from(trace_parent.is_some()) };
            w.array(len).uint(VERSION).uint(KIND_PUBLICATION);
            bin(&mut w, &p.id.0.to_be_bytes());
            w.str(p.topic.room.project.as_str())
                .str(p.topic.room.app.as_str())
                .str(&p.topic.room.room)
                .str(&p.topic.topic)
                .opt_str(p.filter.as_deref())
                .str(p.publisher.as_str())
                .uint(p.publisher_conn.0)
                .str(p.node.as_str())
                .uint(p.timestamp_ms)
                .opt_str(p.msg_id.as_deref())
                .bool(p.retain)
                .uint(u64::from(p.qos));
            bin(&mut w, &p.data);
            if let Some(h) = &p.history {
                w.opt_str(trace_parent).uint(h.offset).str(&h.epoch);
            } else if let Some(t) = trace_parent {
                w.str(t);
            }
            w.into_vec()
        }
        Envelope::Presence(e) => {
            let mut w = Writer::with_capacity(e.data.len() + e.room.room.len() + 96);
            w.array(if e.persistent.is_some() { PRESENCE_LEN + 2 } else { PRESENCE_LEN })
                .uint(VERSION)
                .uint(KIND_PRESENCE)
                .str(e.room.project.as_str())
                .str(e.room.app.as_str())
                .str(&e.room.room)
                .str(e.actor.as_str())
                .uint(change_tag(e.change))
                .str(e.node.as_str());
            bin(&mut w, &e.data);
            if let Some(p) = e.persistent {
                w.uint(status_tag(p.status)).uint(p.advertisement_version);
            }
            w.into_vec()
        }
        Envelope::Control(c) => encode_control(c),
    }
}

/// Takeover: `[1, 2, id, node, project, actor, clientId|nil, conn]`. Kick: `[1, 3, id, node,
/// project, app, room, topic, consumer tag, actor|group, clientId|nil]`.
fn encode_control(c: &Control) -> Vec<u8> {
    let mut w = Writer::with_capacity(160);
    match &c.message {
        ControlMessage::Takeover { session, conn } => {
            w.array(TAKEOVER_LEN).uint(VERSION).uint(KIND_TAKEOVER);
            bin(&mut w, &c.id.0.to_be_bytes());
            w.str(c.node.as_str())
                .str(session.project.as_str())
                .str(session.actor.as_str())
                .opt_str(session.client_id.as_ref().map(ClientId::as_str))
                .uint(conn.0);
        }
        ControlMessage::Kick { consumer } => {
            w.array(KICK_LEN).uint(VERSION).uint(KIND_KICK);
            bin(&mut w, &c.id.0.to_be_bytes());
            let (topic, tag, name, client) = match consumer.of() {
                ConsumerOf::Session { topic, actor, client_id } => {
                    (topic, CONSUMER_SESSION, actor.as_str(), client_id.as_ref().map(ClientId::as_str))
                }
                ConsumerOf::Group(g) => (&g.topic, CONSUMER_GROUP, &*g.group, None),
            };
            w.str(c.node.as_str())
                .str(topic.room.project.as_str())
                .str(topic.room.app.as_str())
                .str(&topic.room.room)
                .str(&topic.topic)
                .uint(tag)
                .str(name)
                .opt_str(client);
        }
    }
    w.into_vec()
}

/// Decodes a payload written by [`encode`]. `data` shares `payload`'s buffer.
///
/// # Errors
/// [`DecodeError`] when `payload` is not a version-1 envelope.
pub fn decode(payload: &Bytes) -> Result<Envelope, DecodeError> {
    decode_traced(payload).map(|(envelope, _)| envelope)
}

/// Decodes a payload, also returning the publisher's trace context when it carries one.
///
/// # Errors
/// As [`decode`].
pub fn decode_traced(payload: &Bytes) -> Result<(Envelope, Option<String>), DecodeError> {
    let mut r = Reader::new(payload);
    let len = r.read_array_len()?;
    let version = r.read_int()?;
    if version != i128::from(VERSION) {
        return Err(DecodeError::Version(version));
    }
    let kind = r.read_int()?;
    let (envelope, need) = match kind {
        k if k == i128::from(KIND_PUBLICATION) => {
            need(len, PUBLICATION_LEN)?;
            (Envelope::Publication(publication(&mut r, payload)?), PUBLICATION_LEN)
        }
        k if k == i128::from(KIND_PRESENCE) => {
            need(len, PRESENCE_LEN)?;
            let mut ev = presence(&mut r, payload)?;
            // Optional extension: a persistent member's status and advertisement version (N46).
            if len >= PRESENCE_LEN + 2 {
                let status = match uint(&mut r, "status")? {
                    0 => MemberStatus::Online,
                    1 => MemberStatus::Offline,
                    2 => MemberStatus::Waking,
                    _ => return Err(DecodeError::Field("status")),
                };
                let advertisement_version = uint(&mut r, "advertisement_version")?;
                ev.persistent = Some(Persistence { status, advertisement_version });
                (Envelope::Presence(ev), PRESENCE_LEN + 2)
            } else {
                (Envelope::Presence(ev), PRESENCE_LEN)
            }
        }
        k if k == i128::from(KIND_TAKEOVER) => {
            need(len, TAKEOVER_LEN)?;
            (Envelope::Control(takeover(&mut r)?), TAKEOVER_LEN)
        }
        k if k == i128::from(KIND_KICK) => {
            need(len, KICK_LEN)?;
            (Envelope::Control(kick(&mut r)?), KICK_LEN)
        }
        k => return Err(DecodeError::Kind(k)),
    };
    let mut trace_parent = None;
    let mut envelope = envelope;
    let mut offset = None;
    for i in need..len {
        if i == PUBLICATION_LEN && matches!(envelope, Envelope::Publication(_)) {
            trace_parent = opt_str(&mut r)?.map(str::to_owned);
        } else if i == PUBLICATION_LEN + 1 && matches!(envelope, Envelope::Publication(_)) {
            offset = Some(uint(&mut r, "history offset")?);
        } else if i == PUBLICATION_LEN + 2
            && let Envelope::Publication(p) = &mut envelope
            && let Some(offset) = offset
        {
            let epoch = r.read_str()?;
            p.history = Some(skua_core::history::HistoryPos { offset, epoch: epoch.into() });
        } else {
            r.skip_value()?;
        }
    }
    Ok((envelope, trace_parent))
}

fn need(got: usize, need: usize) -> Result<(), DecodeError> {
    if got < need { Err(DecodeError::Short { got, need }) } else { Ok(()) }
}

fn publication(r: &mut Reader<'_>, payload: &Bytes) -> Result<Publication, DecodeError> {
    let id: [u8; 16] = read_bin(r)?.try_into().map_err(|_| DecodeError::Field("id"))?;
    let room = room_key(r)?;
    let topic = name(r, "topic")?;
    let filter = opt_str(r)?.map(str::to_owned);
    let publisher = ActorId::parse(r.read_str()?)?;
    let publisher_conn = ConnId(uint(r, "publisher_conn")?);
    let node = NodeId::parse(r.read_str()?)?;
    let timestamp_ms = uint(r, "timestamp_ms")?;
    let msg_id = opt_str(r)?.map(str::to_owned);
    let retain = r.read_bool()?;
    let qos = match uint(r, "qos")? {
        q @ 0..=2 => q as u8,
        _ => return Err(DecodeError::Field("qos")),
    };
    let data = payload.slice_ref(read_bin(r)?);
    Ok(Publication {
        id: EnvelopeId(u128::from_be_bytes(id)),
        topic: TopicAddress { room, topic: topic.into() },
        filter,
        publisher,
        publisher_conn,
        node,
        timestamp_ms,
        msg_id,
        retain,
        qos,
        data,
        history: None,
    })
}

fn presence(r: &mut Reader<'_>, payload: &Bytes) -> Result<PresenceEvent, DecodeError> {
    let room = room_key(r)?;
    let actor = ActorId::parse(r.read_str()?)?;
    let change = match uint(r, "change")? {
        0 => PresenceChange::Join,
        1 => PresenceChange::Update,
        2 => PresenceChange::Leave,
        3 => PresenceChange::Waking,
        _ => return Err(DecodeError::Field("change")),
    };
    let node = NodeId::parse(r.read_str()?)?;
    let data = payload.slice_ref(read_bin(r)?);
    Ok(PresenceEvent { room, actor, change, data, node, persistent: None })
}

/// The id and sending node that open every control kind.
fn control_header(r: &mut Reader<'_>) -> Result<(EnvelopeId, NodeId), DecodeError> {
    let id: [u8; 16] = read_bin(r)?.try_into().map_err(|_| DecodeError::Field("id"))?;
    Ok((EnvelopeId(u128::from_be_bytes(id)), NodeId::parse(r.read_str()?)?))
}

fn takeover(r: &mut Reader<'_>) -> Result<Control, DecodeError> {
    let (id, node) = control_header(r)?;
    let project = ProjectId::parse(r.read_str()?)?;
    let actor = ActorId::parse(r.read_str()?)?;
    let client_id = opt_str(r)?.map(ClientId::parse).transpose()?;
    let conn = ConnId(uint(r, "conn")?);
    let session = SessionKey { project, actor, client_id };
    Ok(Control { id, node, message: ControlMessage::Takeover { session, conn } })
}

fn kick(r: &mut Reader<'_>) -> Result<Control, DecodeError> {
    let (id, node) = control_header(r)?;
    let room = room_key(r)?;
    let topic = TopicAddress { room, topic: name(r, "topic")?.into() };
    let consumer = match uint(r, "consumer")? {
        CONSUMER_SESSION => {
            let key = SessionKey {
                project: topic.room.project.clone(),
                actor: ActorId::parse(r.read_str()?)?,
                client_id: opt_str(r)?.map(ClientId::parse).transpose()?,
            };
            ConsumerId::session(&topic, &key)
        }
        CONSUMER_GROUP => {
            let group = name(r, "group")?.into();
            if opt_str(r)?.is_some() {
                return Err(DecodeError::Field("group clientId"));
            }
            ConsumerId::group(&GroupKey { topic, group })
        }
        _ => return Err(DecodeError::Field("consumer")),
    };
    Ok(Control { id, node, message: ControlMessage::Kick { consumer } })
}

fn room_key(r: &mut Reader<'_>) -> Result<RoomKey, DecodeError> {
    let project = ProjectId::parse(r.read_str()?)?;
    let app = AppId::parse(r.read_str()?)?;
    let room = name(r, "room")?;
    Ok(RoomKey { project, app, room: room.into() })
}

fn change_tag(change: PresenceChange) -> u64 {
    match change {
        PresenceChange::Join => 0,
        PresenceChange::Update => 1,
        PresenceChange::Leave => 2,
        PresenceChange::Waking => 3,
    }
}

fn status_tag(status: MemberStatus) -> u64 {
    match status {
        MemberStatus::Online => 0,
        MemberStatus::Offline => 1,
        MemberStatus::Waking => 2,
    }
}

/// A non-empty `str`.
fn name<'a>(r: &mut Reader<'a>, field: &'static str) -> Result<&'a str, DecodeError> {
    match r.read_str()? {
        "" => Err(DecodeError::Field(field)),
        s => Ok(s),
    }
}

fn opt_str<'a>(r: &mut Reader<'a>) -> Result<Option<&'a str>, DecodeError> {
    if r.read_nil()? { Ok(None) } else { Ok(Some(r.read_str()?)) }
}

fn uint(r: &mut Reader<'_>, field: &'static str) -> Result<u64, DecodeError> {
    u64::try_from(r.read_int()?).map_err(|_| DecodeError::Field(field))
}

/// Writes a `bin` (8, 16 or 32) holding `bytes` verbatim.
fn bin(w: &mut Writer, bytes: &[u8]) {
    let n = bytes.len();
    if let Ok(n) = u8::try_from(n) {
        w.raw(&[0xc4, n]);
    } else if let Ok(n) = u16::try_from(n) {
        let [hi, lo] = n.to_be_bytes();
        w.raw(&[0xc5, hi, lo]);
    } else {
        // Payloads are capped by the MQTT packet size (at most 256 MiB), far below 4 GiB.
        let [a, b, c, d] = u32::try_from(n).unwrap_or(u32::MAX).to_be_bytes();
        w.raw(&[0xc6, a, b, c, d]);
    }
    w.raw(bytes);
}

/// Reads a `bin` and returns its content.
fn read_bin<'a>(r: &mut Reader<'a>) -> Result<&'a [u8], DecodeError> {
    if r.peek_kind()? != Kind::Bin {
        return Err(ReadError::Type.into());
    }
    let whole = r.skip_value()?;
    let header = match whole.first() {
        Some(0xc4) => 2,
        Some(0xc5) => 3,
        _ => 5,
    };
    // `skip_value` checked that the header and its length are all there.
    Ok(&whole[header..])
}

#[cfg(test)]
mod tests;
