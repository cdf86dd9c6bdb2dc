//! Decoding of client frames (N1, N3, N31).
//!
//! The top-level map is walked once; each value is recorded as a byte span of the original
//! frame, so `data` (N2) and filter lists (echoed by `filtersUpdated`, N14) are kept exactly as
//! the client encoded them, as zero-copy [`Bytes`] slices.

use bytes::Bytes;

use crate::codes::client_type as t;
use crate::filters::{FilterError, FilterSpec, parse_publish_filter, parse_subscription_filters};
use crate::msgpack::{Kind, Reader};

/// Most top-level keys a frame may have; more is `invalid_frame` (protects the span table).
pub const MAX_FRAME_KEYS: usize = 32;

/// A frame the server could not accept as it is: answered with `invalid_frame` and `hint`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    /// What was wrong, for the `hint` field.
    pub hint: &'static str,
    /// The frame's `topic`, when it could be read.
    pub topic: Option<String>,
    /// The frame's `msgRef`, when it could be read.
    pub msg_ref: Option<String>,
}

/// The `clientId` field of `auth` (N9).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientIdField {
    /// Absent or `nil`.
    Absent,
    /// A string, not yet validated.
    Given(String),
    /// Present but not a string: fails auth with `invalid_client_id`.
    NotAString,
}

/// `auth`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthFrame {
    /// Access token or client token (JWT).
    pub token: String,
    /// Requested version: absent or not an integer means 1 (N6).
    pub protocol_version: u32,
    /// Restore the session's subscriptions (N23).
    pub reconnect: bool,
    /// The client instance (N9).
    pub client_id: ClientIdField,
}

/// `subscribe`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscribeFrame {
    /// The address as the client wrote it (`app/room/topic`).
    pub topic: String,
    /// 0, 1 or 2; anything else becomes 1.
    pub qos: u8,
    /// The parsed filter list, or why it is invalid (reported after access checks).
    pub filters: Result<Vec<FilterSpec>, FilterError>,
    /// The `filters` value exactly as sent (`None` when absent).
    pub raw_filters: Option<Bytes>,
    /// `loadBalance: true`.
    pub load_balance: bool,
    /// `loadBalanceGroup`, when a string.
    pub load_balance_group: Option<String>,
    /// `since: {offset, epoch}`: recover what came after (issue 19); `Err` when malformed.
    pub since: Option<Result<Since, &'static str>>,
}

/// A position in a topic's history, as a client sends it (issue 19).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Since {
    /// The last offset the client has.
    pub offset: u64,
    /// Its epoch.
    pub epoch: String,
}

/// Why a `since` value is refused.
const BAD_SINCE: &str = "since must be {offset: non-negative integer, epoch: string}";

/// Parses `{offset, epoch}`.
fn parse_since(raw: &[u8]) -> Result<Since, &'static str> {
    let mut r = Reader::new(raw);
    let n = r.read_map_len().map_err(|_| BAD_SINCE)?;
    let (mut offset, mut epoch) = (None, None);
    for _ in 0..n {
        match r.read_str().map_err(|_| BAD_SINCE)? {
            "offset" => offset = Some(u64::try_from(r.read_int().map_err(|_| BAD_SINCE)?).map_err(|_| BAD_SINCE)?),
            "epoch" => epoch = Some(r.read_str().map_err(|_| BAD_SINCE)?.to_owned()),
            _ => {
                r.skip_value().map_err(|_| BAD_SINCE)?;
            }
        }
    }
    match (offset, epoch) {
        (Some(offset), Some(epoch)) if epoch.len() <= 64 => Ok(Since { offset, epoch }),
        _ => Err(BAD_SINCE),
    }
}

/// `publish`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishFrame {
    /// The address as the client wrote it.
    pub topic: String,
    /// The packed `data` value, forwarded untouched (N2). `nil` is valid.
    pub data: Bytes,
    /// 0, 1 or 2; anything else becomes 1.
    pub qos: u8,
    /// `retain: true`.
    pub retain: bool,
    /// The delivery key from `filter`/`filters`, or why they are invalid (checked last, N17).
    pub filter: Result<Option<String>, FilterError>,
    /// Client correlation string.
    pub msg_ref: Option<String>,
    /// Skua addition (issue 19): a repeat of this key within the idempotency window is
    /// acknowledged as a duplicate and not delivered again. Its length is checked by the edge.
    pub idempotency_key: Option<String>,
}

/// A decoded client frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientFrame {
    /// `auth`.
    Auth(AuthFrame),
    /// `reauth` with a fresh client token.
    Reauth {
        /// The new token.
        token: String,
    },
    /// `subscribe`.
    Subscribe(SubscribeFrame),
    /// `unsubscribe`.
    Unsubscribe {
        /// The address as sent.
        topic: String,
    },
    /// `publish`.
    Publish(PublishFrame),
    /// `setFilters`.
    SetFilters {
        /// The address as sent.
        topic: String,
        /// Parsed list or why it is invalid.
        filters: Result<Vec<FilterSpec>, FilterError>,
        /// The list exactly as sent, echoed in `filtersUpdated`.
        raw_filters: Option<Bytes>,
    },
    /// `presence`.
    Presence {
        /// Room slug; absent is the deprecated connection-only form.
        room_id: Option<String>,
        /// Packed presence data; `None` for `nil` (leave, N21).
        data: Option<Bytes>,
    },
    /// `getPresence`.
    GetPresence {
        /// Room slug.
        room_id: Option<String>,
    },
    /// `ack`.
    Ack {
        /// The acknowledged message.
        msg_id: String,
    },
    /// `batchAck`.
    BatchAck {
        /// The acknowledged messages.
        msg_ids: Vec<String>,
    },
    /// `lobbySubscribe`.
    LobbySubscribe {
        /// Lobby slug.
        lobby_id: String,
    },
    /// `lobbyUnsubscribe`.
    LobbyUnsubscribe {
        /// Lobby slug.
        lobby_id: String,
    },
    /// `getLobbyPresence`.
    GetLobbyPresence {
        /// Lobby slug.
        lobby_id: String,
    },
    /// `history` (issue 19): a page of a topic's history.
    History {
        /// The address as sent.
        topic: String,
        /// After this position; `None`: the latest messages. `Err` when malformed.
        since: Option<Result<Since, &'static str>>,
        /// Most messages wanted (saturates at the server's page cap); `None` when absent.
        limit: Option<u64>,
    },
}

impl ClientFrame {
    /// The frame's `type` string.
    pub fn type_str(&self) -> &'static str {
        match self {
            Self::Auth(_) => t::AUTH,
            Self::Reauth { .. } => t::REAUTH,
            Self::Subscribe(_) => t::SUBSCRIBE,
            Self::Unsubscribe { .. } => t::UNSUBSCRIBE,
            Self::Publish(_) => t::PUBLISH,
            Self::SetFilters { .. } => t::SET_FILTERS,
            Self::Presence { .. } => t::PRESENCE,
            Self::GetPresence { .. } => t::GET_PRESENCE,
            Self::Ack { .. } => t::ACK,
            Self::BatchAck { .. } => t::BATCH_ACK,
            Self::LobbySubscribe { .. } => t::LOBBY_SUBSCRIBE,
            Self::LobbyUnsubscribe { .. } => t::LOBBY_UNSUBSCRIBE,
            Self::GetLobbyPresence { .. } => t::GET_LOBBY_PRESENCE,
            Self::History { .. } => t::HISTORY,
        }
    }

    /// Decodes one binary WebSocket frame. An empty frame is a heartbeat and is not passed here.
    ///
    /// # Errors
    /// [`DecodeError`] for anything N3/N31 call `invalid_frame`.
    pub fn decode(frame: &Bytes) -> Result<Self, DecodeError> {
        let fields = Fields::parse(frame)?;
        fields.check_lengths()?;
        let ty = match fields.get("type") {
            None => return Err(fields.error("frame has no type")),
            Some(raw) => Reader::new(raw).read_str().map_err(|_| fields.error("type must be a string"))?,
        };
        let f = &fields;
        Ok(match ty {
            t::AUTH => Self::Auth(AuthFrame {
                token: f.req_str("token", "auth requires a string token")?,
                protocol_version: f
                    .int("protocolVersion")
                    .map_or(1, |v| u32::try_from(v.clamp(0, i128::from(u32::MAX))).unwrap_or(1)),
                reconnect: f.bool("reconnect"),
                client_id: match f.get("clientId") {
                    None => ClientIdField::Absent,
                    Some(raw) => {
                        let mut r = Reader::new(raw);
                        match r.read_str() {
                            Ok(s) => ClientIdField::Given(s.to_owned()),
                            Err(_) if r.read_nil().unwrap_or(false) => ClientIdField::Absent,
                            Err(_) => ClientIdField::NotAString,
                        }
                    }
                },
            }),
            t::REAUTH => Self::Reauth { token: f.req_str("token", "reauth requires a string token")? },
            t::SUBSCRIBE => {
                let topic = f.req_str("topic", "subscribe requires a string topic")?;
                let raw_filters = f.bytes(frame, "filters");
                Self::Subscribe(SubscribeFrame {
                    qos: f.qos(),
                    filters: raw_filters.as_deref().map_or(Ok(Vec::new()), parse_subscription_filters),
                    raw_filters,
                    load_balance: f.bool("loadBalance"),
                    load_balance_group: f.opt_str("loadBalanceGroup").map_err(|()| DecodeError {
                        hint: "loadBalanceGroup must be a string",
                        topic: Some(topic.clone()),
                        msg_ref: None,
                    })?,
                    since: f.get("since").map(parse_since),
                    topic,
                })
            }
            t::HISTORY => {
                let topic = f.req_str("topic", "history requires a string topic")?;
                let limit = match f.get("limit") {
                    None => None,
                    Some(raw) => match Reader::new(raw).read_int() {
                        Ok(n) => Some(u64::try_from(n.clamp(0, i128::from(u64::MAX))).unwrap_or(0)),
                        Err(_) => {
                            return Err(DecodeError {
                                hint: "limit must be an integer",
                                topic: Some(topic),
                                msg_ref: None,
                            });
                        }
                    },
                };
                Self::History { since: f.get("since").map(parse_since), limit, topic }
            }
            t::UNSUBSCRIBE => Self::Unsubscribe { topic: f.req_str("topic", "unsubscribe requires a string topic")? },
            t::PUBLISH => {
                let topic = f.req_str("topic", "publish requires a string topic")?;
                let msg_ref = f.opt_str("msgRef").map_err(|()| DecodeError {
                    hint: "msgRef must be a string",
                    topic: Some(topic.clone()),
                    msg_ref: None,
                })?;
                let Some(data) = f.bytes(frame, "data") else {
                    return Err(DecodeError { hint: "publish requires data", topic: Some(topic), msg_ref });
                };
                let idempotency_key = f.opt_str("idempotencyKey").map_err(|()| DecodeError {
                    hint: "idempotencyKey must be a string",
                    topic: Some(topic.clone()),
                    msg_ref: msg_ref.clone(),
                })?;
                Self::Publish(PublishFrame {
                    data,
                    qos: f.qos(),
                    retain: f.bool("retain"),
                    filter: parse_publish_filter(f.get("filter"), f.get("filters")),
                    msg_ref,
                    idempotency_key,
                    topic,
                })
            }
            t::SET_FILTERS => {
                let topic = f.req_str("topic", "setFilters requires a string topic")?;
                let raw_filters = f.bytes(frame, "filters");
                Self::SetFilters {
                    filters: raw_filters.as_deref().map_or(Ok(Vec::new()), parse_subscription_filters),
                    raw_filters,
                    topic,
                }
            }
            t::PRESENCE => {
                let room_id = f.opt_str("roomId").map_err(|()| f.error("roomId must be a string"))?;
                let data = match f.bytes(frame, "data") {
                    None => return Err(f.error("presence requires data (nil to leave)")),
                    Some(b) if b.as_ref() == [0xc0] => None,
                    Some(b) => {
                        if Reader::new(&b).peek_kind() != Ok(Kind::Map) {
                            return Err(f.error("presence data must be a map or nil"));
                        }
                        Some(b)
                    }
                };
                Self::Presence { room_id, data }
            }
            t::GET_PRESENCE => {
                Self::GetPresence { room_id: f.opt_str("roomId").map_err(|()| f.error("roomId must be a string"))? }
            }
            t::ACK => Self::Ack { msg_id: f.req_str("msgId", "ack requires a string msgId")? },
            t::BATCH_ACK => {
                Self::BatchAck { msg_ids: f.str_list("msgIds", "batchAck requires msgIds, a list of strings")? }
            }
            t::LOBBY_SUBSCRIBE => {
                Self::LobbySubscribe { lobby_id: f.req_str("lobbyId", "lobbySubscribe requires a string lobbyId")? }
            }
            t::LOBBY_UNSUBSCRIBE => {
                Self::LobbyUnsubscribe { lobby_id: f.req_str("lobbyId", "lobbyUnsubscribe requires a string lobbyId")? }
            }
            t::GET_LOBBY_PRESENCE => {
                Self::GetLobbyPresence { lobby_id: f.req_str("lobbyId", "getLobbyPresence requires a string lobbyId")? }
            }
            _ => return Err(f.error("unknown frame type")),
        })
    }
}

/// The top-level keys of a frame and the byte spans of their values (last duplicate wins).
struct Fields<'a> {
    base: &'a [u8],
    entries: Vec<(&'a str, &'a [u8])>,
}

impl<'a> Fields<'a> {
    fn parse(frame: &'a [u8]) -> Result<Self, DecodeError> {
        let bare = |hint| DecodeError { hint, topic: None, msg_ref: None };
        let mut r = Reader::new(frame);
        let n = match r.peek_kind() {
            Ok(Kind::Map) => r.read_map_len().map_err(|_| bare("undecodable msgpack"))?,
            Ok(_) => return Err(bare("frame must be a msgpack map")),
            Err(_) => return Err(bare("undecodable msgpack")),
        };
        if n > MAX_FRAME_KEYS {
            return Err(bare("frame has too many keys"));
        }
        let mut entries = Vec::with_capacity(n);
        for _ in 0..n {
            let key = match r.peek_kind() {
                Ok(Kind::Str) => Some(r.read_str().map_err(|_| bare("undecodable msgpack"))?),
                Ok(_) => {
                    r.skip_value().map_err(|_| bare("undecodable msgpack"))?;
                    None
                }
                Err(_) => return Err(bare("undecodable msgpack")),
            };
            let value = r.skip_value().map_err(|_| bare("undecodable msgpack"))?;
            if let Some(key) = key {
                entries.push((key, value));
            }
        }
        if !r.is_empty() {
            return Err(bare("trailing bytes after the frame's map"));
        }
        let fields = Self { base: frame, entries };
        Ok(fields)
    }

    /// Refuses string fields longer than they may be (issue 12: every echoed or forwarded
    /// field is bounded, so no outbound frame exceeds 1 MiB). Nothing too long is echoed.
    fn check_lengths(&self) -> Result<(), DecodeError> {
        const NAMES: [(&str, &str); 7] = [
            ("topic", "topic is longer than 1024 bytes"),
            ("msgRef", "msgRef is longer than 1024 bytes"),
            ("roomId", "roomId is longer than 1024 bytes"),
            ("lobbyId", "lobbyId is longer than 1024 bytes"),
            ("loadBalanceGroup", "loadBalanceGroup is longer than 1024 bytes"),
            ("msgId", "msgId is longer than 1024 bytes"),
            ("clientId", "clientId is longer than 1024 bytes"),
        ];
        let too_long = |key: &str, max: usize| {
            self.get(key).is_some_and(|raw| Reader::new(raw).read_str().is_ok_and(|s| s.len() > max))
        };
        for (key, hint) in NAMES {
            if too_long(key, crate::MAX_NAME_BYTES) {
                return Err(self.error(hint));
            }
        }
        if too_long("token", crate::MAX_TOKEN_BYTES) {
            return Err(self.error("token is longer than 16384 bytes"));
        }
        Ok(())
    }

    fn get(&self, key: &str) -> Option<&'a [u8]> {
        self.entries.iter().rev().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }

    /// An `invalid_frame` error carrying whatever `topic`/`msgRef` could be read (and is
    /// short enough to echo).
    fn error(&self, hint: &'static str) -> DecodeError {
        let echo = |key| self.opt_str(key).ok().flatten().filter(|s| s.len() <= crate::MAX_NAME_BYTES);
        DecodeError { hint, topic: echo("topic"), msg_ref: echo("msgRef") }
    }

    fn opt_str(&self, key: &str) -> Result<Option<String>, ()> {
        let Some(raw) = self.get(key) else {
            return Ok(None);
        };
        let mut r = Reader::new(raw);
        if r.read_nil().map_err(|_| ())? {
            return Ok(None);
        }
        r.read_str().map(|s| Some(s.to_owned())).map_err(|_| ())
    }

    fn req_str(&self, key: &str, hint: &'static str) -> Result<String, DecodeError> {
        match self.opt_str(key) {
            Ok(Some(s)) => Ok(s),
            _ => Err(self.error(hint)),
        }
    }

    fn str_list(&self, key: &str, hint: &'static str) -> Result<Vec<String>, DecodeError> {
        let raw = self.get(key).ok_or_else(|| self.error(hint))?;
        let mut r = Reader::new(raw);
        let n = r.read_array_len().map_err(|_| self.error(hint))?;
        // The span was already skipped successfully, so n is bounded by the frame size.
        let mut out = Vec::with_capacity(n.min(raw.len()));
        for _ in 0..n {
            out.push(r.read_str().map_err(|_| self.error(hint))?.to_owned());
        }
        Ok(out)
    }

    fn int(&self, key: &str) -> Option<i128> {
        self.get(key).and_then(|raw| Reader::new(raw).read_int().ok())
    }

    fn bool(&self, key: &str) -> bool {
        self.get(key).is_some_and(|raw| Reader::new(raw).read_bool().unwrap_or(false))
    }

    /// `qos`: 0, 1 or 2; anything else (absent, other numbers, other types) becomes 1.
    fn qos(&self) -> u8 {
        match self.int("qos") {
            Some(q @ 0..=2) => q as u8,
            _ => 1,
        }
    }

    /// The value of `key` as a zero-copy slice of the frame.
    fn bytes(&self, frame: &Bytes, key: &str) -> Option<Bytes> {
        let span = self.get(key)?;
        debug_assert!(span.as_ptr() >= self.base.as_ptr());
        Some(frame.slice_ref(span))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msgpack::Writer;

    fn frame(build: impl FnOnce(&mut Writer)) -> Bytes {
        let mut w = Writer::default();
        build(&mut w);
        Bytes::from(w.into_vec())
    }

    #[test]
    fn subscribe_since_and_history_decode_and_bad_values_are_reported() {
        let f = frame(|w| {
            w.map(3).str("type").str("subscribe").str("topic").str("a/b/c").str("since");
            w.map(2).str("offset").uint(41).str("epoch").str("e1");
        });
        let ClientFrame::Subscribe(s) = ClientFrame::decode(&f).unwrap() else { panic!() };
        assert_eq!(s.since, Some(Ok(Since { offset: 41, epoch: "e1".into() })));
        let f = frame(|w| {
            w.map(3).str("type").str("subscribe").str("topic").str("a/b/c").str("since");
            w.map(1).str("offset").raw(&[0xff]);
        });
        let ClientFrame::Subscribe(s) = ClientFrame::decode(&f).unwrap() else { panic!() };
        assert_eq!(s.since, Some(Err(BAD_SINCE)));
        let f = frame(|w| {
            w.map(3).str("type").str("history").str("topic").str("a/b/c").str("limit").raw(&[0xfb]);
        });
        let h = ClientFrame::decode(&f).unwrap();
        assert_eq!(h, ClientFrame::History { topic: "a/b/c".into(), since: None, limit: Some(0) });
        assert_eq!(h.type_str(), "history");
        let f = frame(|w| {
            w.map(3).str("type").str("history").str("topic").str("a/b/c").str("limit").str("ten");
        });
        assert_eq!(ClientFrame::decode(&f).unwrap_err().hint, "limit must be an integer");
        let f = frame(|w| {
            w.map(1).str("type").str("history");
        });
        assert_eq!(ClientFrame::decode(&f).unwrap_err().hint, "history requires a string topic");
    }

    #[test]
    fn publish_keeps_data_bytes_exactly() {
        // data = {"n": uint16 5} — a non-shortest integer width must survive (N2)
        let f = frame(|w| {
            w.map(3).str("type").str("publish").str("topic").str("a/b/c").str("data");
            w.map(1).str("n").raw(&[0xcd, 0x00, 0x05]);
        });
        let ClientFrame::Publish(p) = ClientFrame::decode(&f).unwrap() else { panic!() };
        assert_eq!(p.data.as_ref(), &[0x81, 0xa1, b'n', 0xcd, 0x00, 0x05]);
        assert_eq!(p.qos, 1);
        assert_eq!(p.filter, Ok(None));
    }

    #[test]
    fn publish_carries_its_idempotency_key_and_refuses_one_that_is_not_a_string() {
        let f = frame(|w| {
            w.map(4).str("type").str("publish").str("topic").str("a/b/c").str("data").nil();
            w.str("idempotencyKey").str("order-17");
        });
        let ClientFrame::Publish(p) = ClientFrame::decode(&f).unwrap() else { panic!() };
        assert_eq!(p.idempotency_key.as_deref(), Some("order-17"));
        let f = frame(|w| {
            w.map(5).str("type").str("publish").str("topic").str("a/b/c").str("data").nil();
            w.str("msgRef").str("r1").str("idempotencyKey").uint(17);
        });
        let e = ClientFrame::decode(&f).unwrap_err();
        assert_eq!(e.hint, "idempotencyKey must be a string");
        assert_eq!((e.topic.as_deref(), e.msg_ref.as_deref()), (Some("a/b/c"), Some("r1")));
    }

    #[test]
    fn missing_fields_are_invalid_frames_with_context() {
        let f = frame(|w| {
            w.map(3).str("type").str("publish").str("topic").str("a/b/c").str("msgRef").str("r1");
        });
        let e = ClientFrame::decode(&f).unwrap_err();
        assert_eq!(e.hint, "publish requires data");
        assert_eq!(e.topic.as_deref(), Some("a/b/c"));
        assert_eq!(e.msg_ref.as_deref(), Some("r1"));
        assert_eq!(
            ClientFrame::decode(&frame(|w| {
                w.array(0);
            }))
            .unwrap_err()
            .hint,
            "frame must be a msgpack map"
        );
        assert_eq!(
            ClientFrame::decode(&frame(|w| {
                w.map(1).str("type").uint(3);
            }))
            .unwrap_err()
            .hint,
            "type must be a string"
        );
        assert_eq!(
            ClientFrame::decode(&frame(|w| {
                w.map(1).str("type").str("nope");
            }))
            .unwrap_err()
            .hint,
            "unknown frame type"
        );
        assert_eq!(ClientFrame::decode(&Bytes::from_static(&[0xc1])).unwrap_err().hint, "undecodable msgpack");
    }

    #[test]
    fn auth_version_and_client_id() {
        let f = frame(|w| {
            w.map(4)
                .str("type")
                .str("auth")
                .str("token")
                .str("t")
                .str("protocolVersion")
                .str("2")
                .str("clientId")
                .uint(5);
        });
        let ClientFrame::Auth(a) = ClientFrame::decode(&f).unwrap() else { panic!() };
        assert_eq!(a.protocol_version, 1);
        assert_eq!(a.client_id, ClientIdField::NotAString);
    }

    #[test]
    fn data_nil_is_a_valid_payload() {
        let f = frame(|w| {
            w.map(3).str("type").str("publish").str("topic").str("a/b/c").str("data").nil();
        });
        let ClientFrame::Publish(p) = ClientFrame::decode(&f).unwrap() else { panic!() };
        assert_eq!(p.data.as_ref(), &[0xc0]);
    }
}
