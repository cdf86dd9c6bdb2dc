//! The decoder on hostile and random input: never panics, refuses what is not one msgpack map,
//! and on msgpack maps (random, or hostile bytes that happen to be one) it agrees with a small
//! model of the documented rules (which field each type needs, N3/N31).

use bytes::Bytes;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use rmpv::Value;
use skua_protocol::filters::{parse_publish_filter, parse_subscription_filters};
use skua_protocol::{AuthFrame, ClientFrame, ClientIdField, DecodeError, PublishFrame, SubscribeFrame};

use super::config;
use super::values::{raw_value, text, tree};
use crate::client_golden;
use crate::shape::{decode_exact, pack, s};

/// Every client frame `type`.
const TYPES: [&str; 13] = [
    "auth",
    "reauth",
    "subscribe",
    "unsubscribe",
    "publish",
    "setFilters",
    "presence",
    "getPresence",
    "ack",
    "batchAck",
    "lobbySubscribe",
    "lobbyUnsubscribe",
    "getLobbyPresence",
];

/// Every field a client frame may carry.
const KEYS: [&str; 19] = [
    "token",
    "protocolVersion",
    "reconnect",
    "clientId",
    "projectId",
    "topic",
    "qos",
    "filters",
    "filter",
    "loadBalance",
    "loadBalanceGroup",
    "data",
    "retain",
    "echo",
    "msgRef",
    "roomId",
    "msgId",
    "msgIds",
    "lobbyId",
];

/// A value of the type the documents give `key`.
fn well_typed(key: &'static str) -> BoxedStrategy<Value> {
    match key {
        "protocolVersion" | "qos" => {
            prop_oneof![(0u64..4).prop_map(Value::from), any::<i64>().prop_map(Value::from)].boxed()
        }
        "reconnect" | "loadBalance" | "retain" | "echo" => any::<bool>().prop_map(Value::from).boxed(),
        "filters" => vec(
            prop_oneof![
                "[a-zA-Z:_]{0,8}".prop_map(Value::from),
                vec("[a-zA-Z:_|]{1,8}".prop_map(Value::from), 0..4).prop_map(Value::Array)
            ],
            0..5,
        )
        .prop_map(Value::Array)
        .boxed(),
        "msgIds" => vec(text().prop_map(Value::from), 0..5).prop_map(Value::Array).boxed(),
        "data" => tree(),
        _ => text().prop_map(Value::from).boxed(),
    }
}

/// A random frame: a `type` (real, junk or not a string; sometimes absent), each documented
/// field with probability one half (usually well typed), junk fields and non-`str` keys.
pub(super) fn frame() -> impl Strategy<Value = Vec<(Value, Value)>> {
    let ty = prop::option::weighted(
        0.95,
        prop_oneof![
            8 => select(&TYPES[..]).prop_map(Value::from),
            1 => "[a-zA-Z]{0,10}".prop_map(Value::from),
            1 => tree(),
        ],
    );
    let known: Vec<_> = KEYS
        .iter()
        .map(|&k| prop::option::of(prop_oneof![3 => well_typed(k), 1 => tree()].prop_map(move |v| (s(k), v))))
        .collect();
    let junk = vec(("[a-z]{1,6}".prop_map(|k| s(&format!("x_{k}"))), tree()), 0..3);
    let odd_keys =
        vec((prop_oneof![any::<i64>().prop_map(Value::from), Just(Value::Binary(b"topic".to_vec()))], tree()), 0..2);
    (ty, known, junk, odd_keys).prop_flat_map(|(ty, known, junk, odd)| {
        let mut entries: Vec<(Value, Value)> = ty.map(|t| (s("type"), t)).into_iter().collect();
        entries.extend(known.into_iter().flatten());
        entries.extend(junk);
        entries.extend(odd);
        Just(entries).prop_shuffle()
    })
}

/// What the documents (N3, N6, N31, qos rules) say the decoder returns for `entries`.
pub(super) struct Model<'a>(pub(super) &'a [(Value, Value)]);

impl Model<'_> {
    fn get(&self, key: &str) -> Option<&Value> {
        self.0.iter().rev().find(|(k, _)| k.as_str() == Some(key)).map(|(_, v)| v)
    }
    fn raw(&self, key: &str) -> Option<Bytes> {
        self.get(key).map(|v| Bytes::from(pack(v)))
    }
    /// Absent and `nil` are `None`; a `str` is `Some`; anything else is `Err`.
    fn opt_str(&self, key: &str) -> Result<Option<String>, ()> {
        match self.get(key) {
            None | Some(Value::Nil) => Ok(None),
            Some(Value::String(x)) => x.as_str().map(|x| Some(x.to_owned())).ok_or(()),
            Some(_) => Err(()),
        }
    }
    fn int(&self, key: &str) -> Option<i128> {
        match self.get(key) {
            Some(Value::Integer(i)) => i.as_i64().map(i128::from).or(i.as_u64().map(i128::from)),
            _ => None,
        }
    }
    fn flag(&self, key: &str) -> bool {
        matches!(self.get(key), Some(Value::Boolean(true)))
    }
    fn qos(&self) -> u8 {
        self.int("qos").filter(|q| (0..=2).contains(q)).map_or(1, |q| q as u8)
    }
    fn err(&self, hint: &'static str) -> DecodeError {
        DecodeError {
            hint,
            topic: self.opt_str("topic").ok().flatten(),
            msg_ref: self.opt_str("msgRef").ok().flatten(),
        }
    }
    fn req(&self, key: &str, hint: &'static str) -> Result<String, DecodeError> {
        self.opt_str(key).ok().flatten().ok_or_else(|| self.err(hint))
    }
    fn opt(&self, key: &str, hint: &'static str) -> Result<Option<String>, DecodeError> {
        self.opt_str(key).map_err(|()| self.err(hint))
    }

    pub(super) fn expect(&self) -> Result<ClientFrame, DecodeError> {
        let ty = match self.get("type") {
            None => return Err(self.err("frame has no type")),
            Some(Value::String(t)) if t.is_str() => t.as_str().unwrap_or_default(),
            Some(_) => return Err(self.err("type must be a string")),
        };
        let sub_filters = |raw: &Option<Bytes>| raw.as_deref().map_or(Ok(vec![]), parse_subscription_filters);
        Ok(match ty {
            "auth" => ClientFrame::Auth(AuthFrame {
                token: self.req("token", "auth requires a string token")?,
                protocol_version: self.int("protocolVersion").map_or(1, |v| v.clamp(0, i128::from(u32::MAX)) as u32),
                reconnect: self.flag("reconnect"),
                client_id: match self.get("clientId") {
                    None | Some(Value::Nil) => ClientIdField::Absent,
                    Some(Value::String(x)) if x.is_str() => ClientIdField::Given(x.as_str().unwrap_or_default().into()),
                    Some(_) => ClientIdField::NotAString,
                },
            }),
            "reauth" => ClientFrame::Reauth { token: self.req("token", "reauth requires a string token")? },
            "subscribe" => {
                let topic = self.req("topic", "subscribe requires a string topic")?;
                let group = self.opt_str("loadBalanceGroup").map_err(|()| DecodeError {
                    hint: "loadBalanceGroup must be a string",
                    topic: Some(topic.clone()),
                    msg_ref: None,
                })?;
                let raw_filters = self.raw("filters");
                ClientFrame::Subscribe(SubscribeFrame {
                    topic,
                    qos: self.qos(),
                    filters: sub_filters(&raw_filters),
                    raw_filters,
                    load_balance: self.flag("loadBalance"),
                    load_balance_group: group,
                    since: None,
                })
            }
            "unsubscribe" => {
                ClientFrame::Unsubscribe { topic: self.req("topic", "unsubscribe requires a string topic")? }
            }
            "publish" => {
                let topic = self.req("topic", "publish requires a string topic")?;
                let msg_ref = self.opt_str("msgRef").map_err(|()| DecodeError {
                    hint: "msgRef must be a string",
                    topic: Some(topic.clone()),
                    msg_ref: None,
                })?;
                let idempotency_key = self.opt_str("idempotencyKey").map_err(|()| DecodeError {
                    hint: "idempotencyKey must be a string",
                    topic: Some(topic.clone()),
                    msg_ref: msg_ref.clone(),
                })?;
                let data = self.raw("data").ok_or_else(|| self.err("publish requires data"))?;
                ClientFrame::Publish(PublishFrame {
                    topic,
                    data,
                    qos: self.qos(),
                    retain: self.flag("retain"),
                    filter: parse_publish_filter(self.raw("filter").as_deref(), self.raw("filters").as_deref()),
                    msg_ref,
                    idempotency_key,
                })
            }
            "setFilters" => {
                let topic = self.req("topic", "setFilters requires a string topic")?;
                let raw_filters = self.raw("filters");
                ClientFrame::SetFilters { topic, filters: sub_filters(&raw_filters), raw_filters }
            }
            "presence" => {
                let room_id = self.opt("roomId", "roomId must be a string")?;
                let data = match self.get("data") {
                    None => return Err(self.err("presence requires data (nil to leave)")),
                    Some(Value::Nil) => None,
                    Some(v @ Value::Map(_)) => Some(Bytes::from(pack(v))),
                    Some(_) => return Err(self.err("presence data must be a map or nil")),
                };
                ClientFrame::Presence { room_id, data }
            }
            "getPresence" => ClientFrame::GetPresence { room_id: self.opt("roomId", "roomId must be a string")? },
            "ack" => ClientFrame::Ack { msg_id: self.req("msgId", "ack requires a string msgId")? },
            "batchAck" => {
                let hint = "batchAck requires msgIds, a list of strings";
                let Some(Value::Array(items)) = self.get("msgIds") else {
                    return Err(self.err(hint));
                };
                let ids: Option<Vec<String>> = items.iter().map(|v| v.as_str().map(str::to_owned)).collect();
                ClientFrame::BatchAck { msg_ids: ids.ok_or_else(|| self.err(hint))? }
            }
            "lobbySubscribe" => ClientFrame::LobbySubscribe {
                lobby_id: self.req("lobbyId", "lobbySubscribe requires a string lobbyId")?,
            },
            "lobbyUnsubscribe" => ClientFrame::LobbyUnsubscribe {
                lobby_id: self.req("lobbyId", "lobbyUnsubscribe requires a string lobbyId")?,
            },
            "getLobbyPresence" => ClientFrame::GetLobbyPresence {
                lobby_id: self.req("lobbyId", "getLobbyPresence requires a string lobbyId")?,
            },
            _ => return Err(self.err("unknown frame type")),
        })
    }
}

/// A map frame from keys and already-encoded values.
fn raw_frame(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = vec![0x80 | u8::try_from(entries.len()).expect("fixmap")];
    for (k, v) in entries {
        out.extend(pack(&s(k)));
        out.extend_from_slice(v);
    }
    out
}

/// Whether every `str` in the tree (keys included) is valid UTF-8.
fn all_utf8(v: &Value) -> bool {
    match v {
        Value::String(s) => s.is_str(),
        Value::Array(items) => items.iter().all(all_utf8),
        Value::Map(kv) => kv.iter().all(|(k, v)| all_utf8(k) && all_utf8(v)),
        _ => true,
    }
}

/// The decoder's answer to any bytes (issue 35: more than "no panic"): what is not one msgpack
/// map is refused; a canonically encoded map with valid strings decodes as the [`Model`] says;
/// every refusal is `invalid_frame` with a hint.
pub(super) fn decoded_as_the_model_says(bytes: &[u8]) -> Result<(), TestCaseError> {
    let got = ClientFrame::decode(&Bytes::from(bytes.to_vec()));
    match decode_exact(bytes) {
        Ok(Value::Map(entries))
            if all_utf8(&Value::Map(entries.clone())) && pack(&Value::Map(entries.clone())) == bytes =>
        {
            prop_assert_eq!(&got, &Model(&entries).expect());
        }
        // A valid map written in wider forms than needed, or with non-UTF-8 strings: the
        // model re-encodes values, so it cannot say; either outcome is a valid answer.
        Ok(Value::Map(_)) => {}
        other => prop_assert!(got.is_err(), "accepted what is not one msgpack map ({other:?}): {got:?}"),
    }
    if let Err(e) = &got {
        prop_assert!(!e.hint.is_empty(), "an invalid_frame error without a hint");
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(2048))]

    /// (a) Arbitrary bytes: refused unless one msgpack map to rmpv too, and then decoded as the
    /// model says.
    #[test]
    fn arbitrary_bytes_are_refused_or_decoded_as_the_model_says(bytes in vec(any::<u8>(), 0..256)) {
        decoded_as_the_model_says(&bytes)?;
    }

    /// (a) Bytes that start like a real frame and go on at random: refused, or decoded as the
    /// model says.
    #[test]
    fn frame_prefixes_with_random_tails_decode_as_the_model_says(
        n in 1u8..6,
        ty in select(&TYPES[..]),
        tail in vec(any::<u8>(), 0..200),
    ) {
        let mut bytes = vec![0x80 | n];
        bytes.extend(pack(&s("type")));
        bytes.extend(pack(&s(ty)));
        bytes.extend(tail);
        decoded_as_the_model_says(&bytes)?;
    }

    /// (a) Python SDK frames with bytes flipped, cut or inserted: refused, or decoded as the
    /// model says.
    #[test]
    fn mutated_sdk_frames_decode_as_the_model_says(
        which in any::<prop::sample::Index>(),
        edits in vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..6),
    ) {
        let cases = client_golden::cases();
        let mut bytes = client_golden::frame(cases[which.index(cases.len())].0).to_vec();
        for (at, byte, op) in edits {
            let i = at.index(bytes.len() + 1);
            match op {
                0 if i < bytes.len() => bytes[i] = byte,
                1 => bytes.insert(i, byte),
                _ => bytes.truncate(i),
            }
        }
        decoded_as_the_model_says(&bytes)?;
    }
}

proptest! {
    #![proptest_config(config(1024))]

    /// (b) Random msgpack maps never panic and decode exactly as the model says.
    #[test]
    fn random_maps_decode_as_the_model_says(entries in frame()) {
        let bytes = pack(&Value::Map(entries.clone()));
        let got = ClientFrame::decode(&Bytes::from(bytes));
        prop_assert_eq!(got, Model(&entries).expect());
    }

    /// (b) A publish with a valid topic forwards `data` byte for byte, in whatever widths the
    /// publisher chose (N2), whatever else the frame carries.
    #[test]
    fn publish_data_round_trips_byte_for_byte(
        topic in text(),
        data in raw_value(),
        qos in prop::option::of(0u64..5),
        msg_ref in prop::option::of(text()),
        junk in vec(("[a-z]{1,6}", raw_value()), 0..3),
        swaps in vec((any::<prop::sample::Index>(), any::<prop::sample::Index>()), 0..8),
    ) {
        prop_assert!(decode_exact(&data).is_ok(), "strategy made invalid msgpack");
        let (t, tp) = (pack(&s(&topic)), pack(&s("publish")));
        let q = qos.map(|q| pack(&Value::from(q)));
        let r = msg_ref.as_deref().map(|r| pack(&s(r)));
        let junk: Vec<(String, Vec<u8>)> = junk.into_iter().map(|(k, v)| (format!("x_{k}"), v)).collect();
        let mut fields: Vec<(&str, &[u8])> = vec![("type", &tp), ("topic", &t), ("data", &data)];
        fields.extend(q.as_deref().map(|q| ("qos", q)));
        fields.extend(r.as_deref().map(|r| ("msgRef", r)));
        fields.extend(junk.iter().map(|(k, v)| (k.as_str(), v.as_slice())));
        for (a, b) in swaps {
            let n = fields.len();
            fields.swap(a.index(n), b.index(n));
        }
        let frame = Bytes::from(raw_frame(&fields));
        match ClientFrame::decode(&frame) {
            Ok(ClientFrame::Publish(p)) => {
                prop_assert_eq!(p.data.as_ref(), data.as_slice());
                prop_assert_eq!(p.topic, topic);
                prop_assert_eq!(p.msg_ref, msg_ref);
                prop_assert_eq!(p.qos, qos.filter(|q| *q <= 2).map_or(1, |q| q as u8));
            }
            other => prop_assert!(false, "not a publish: {other:?}"),
        }
    }
}
