//! The byte form of a [`RestoreRecord`] in a durable store's `record` column.
//!
//! MessagePack maps with one-letter keys, so a record stays small and stays readable with any
//! MessagePack tool:
//!
//! ```text
//! record = { "t": [topic, …], "l": [lobby slug (str), …],
//!            "d": [[door filter (str), qos (uint)], …] (absent when empty) }
//! topic  = { "p": pattern (str), "q": qos (uint), "b": load_balance (bool),
//!            "g": load_balance_group (str, absent for none), "f": raw_filters (bin, absent for none),
//!            "o": last history offset delivered (uint), "e": its epoch (str; both absent for none) }
//! ```
//!
//! Rules that keep the format forward-compatible, so nodes of two releases can share one Postgres
//! during a rolling upgrade: the decoder ignores keys it does not know and takes a missing
//! optional key as its default (`t`/`l` empty, `q` 0, `b` false, `g`/`f` none); a new field gets
//! a new key and is optional; a key never changes meaning and a retired key is never reused.
//! `raw_filters` is stored as `bin`, byte for byte as the client sent it.

use bytes::Bytes;
use rmpv::Value;
use skua_core::{RestoreRecord, RestoredTopic};

const TOPICS: &str = "t";
const LOBBIES: &str = "l";
const PATTERN: &str = "p";
const QOS: &str = "q";
const LOAD_BALANCE: &str = "b";
const GROUP: &str = "g";
const FILTERS: &str = "f";
const OFFSET: &str = "o";
const EPOCH: &str = "e";
const DOOR_FILTERS: &str = "d";

/// rmpv's recursion limit. It counts about two steps per nesting level, and a record nests 4
/// deep (record map, topic array, topic map, string); this leaves room for fields to come while
/// still refusing a hostile blob before it exhausts the stack.
const MAX_DEPTH: usize = 32;

/// A stored record that does not decode: written by something else, or damaged.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RecordError {
    /// Not MessagePack.
    #[error("not MessagePack")]
    Decode(#[source] rmpv::decode::Error),
    /// MessagePack of another shape.
    #[error("unexpected shape: {0}")]
    Shape(&'static str),
}

/// Encodes `record` in the format of this module.
pub(crate) fn encode(record: &RestoreRecord) -> Vec<u8> {
    let topics = record.topics.iter().map(encode_topic).collect();
    let lobbies = record.lobbies.iter().map(|l| Value::from(l.as_str())).collect();
    let mut map = vec![(TOPICS.into(), Value::Array(topics)), (LOBBIES.into(), Value::Array(lobbies))];
    if !record.door_filters.is_empty() {
        let filters = record
            .door_filters
            .iter()
            .map(|(f, q)| Value::Array(vec![Value::from(f.as_str()), Value::from(*q)]))
            .collect();
        map.push((DOOR_FILTERS.into(), Value::Array(filters)));
    }
    let value = Value::Map(map);
    let mut buf = Vec::with_capacity(64);
    // Invariant: writing to a Vec never fails, so neither does encoding a `Value` into one.
    rmpv::encode::write_value(&mut buf, &value).expect("encoding into a Vec cannot fail");
    buf
}

fn encode_topic(topic: &RestoredTopic) -> Value {
    let mut map = vec![
        (PATTERN.into(), Value::from(topic.pattern.as_str())),
        (QOS.into(), Value::from(topic.qos)),
        (LOAD_BALANCE.into(), Value::from(topic.load_balance)),
    ];
    if let Some(group) = &topic.load_balance_group {
        map.push((GROUP.into(), Value::from(group.as_str())));
    }
    if let Some(filters) = &topic.raw_filters {
        map.push((FILTERS.into(), Value::Binary(filters.to_vec())));
    }
    if let Some((offset, epoch)) = &topic.history {
        map.push((OFFSET.into(), Value::from(*offset)));
        map.push((EPOCH.into(), Value::from(epoch.as_str())));
    }
    Value::Map(map)
}

/// Decodes a record written by [`encode`] (of this or a later release).
pub(crate) fn decode(mut bytes: &[u8]) -> Result<RestoreRecord, RecordError> {
    let value = rmpv::decode::read_value_with_max_depth(&mut bytes, MAX_DEPTH).map_err(RecordError::Decode)?;
    if !bytes.is_empty() {
        return Err(RecordError::Shape("bytes after the record"));
    }
    let mut record = RestoreRecord::default();
    for (key, value) in as_map(value, "record is not a map")? {
        match key.as_str() {
            Some(TOPICS) => {
                record.topics = as_array(value, "topics are not an array")?
                    .into_iter()
                    .map(decode_topic)
                    .collect::<Result<_, _>>()?;
            }
            Some(LOBBIES) => {
                record.lobbies = as_array(value, "lobbies are not an array")?
                    .into_iter()
                    .map(|l| as_string(l, "a lobby is not a string"))
                    .collect::<Result<_, _>>()?;
            }
            Some(DOOR_FILTERS) => {
                record.door_filters = as_array(value, "door filters are not an array")?
                    .into_iter()
                    .map(decode_door_filter)
                    .collect::<Result<_, _>>()?;
            }
            _ => {}
        }
    }
    Ok(record)
}

fn decode_door_filter(value: Value) -> Result<(String, u8), RecordError> {
    let mut pair = as_array(value, "a door filter is not an array")?.into_iter();
    let (Some(filter), Some(qos), None) = (pair.next(), pair.next(), pair.next()) else {
        return Err(RecordError::Shape("a door filter is not a pair"));
    };
    let qos = qos.as_u64().and_then(|q| u8::try_from(q).ok()).ok_or(RecordError::Shape("bad door filter qos"))?;
    Ok((as_string(filter, "a door filter is not a string")?, qos))
}

fn decode_topic(value: Value) -> Result<RestoredTopic, RecordError> {
    let mut pattern = None;
    let mut topic = RestoredTopic {
        pattern: String::new(),
        qos: 0,
        load_balance: false,
        load_balance_group: None,
        raw_filters: None,
        history: None,
    };
    let (mut offset, mut epoch) = (None, None);
    for (key, value) in as_map(value, "a topic is not a map")? {
        match key.as_str() {
            Some(PATTERN) => pattern = Some(as_string(value, "pattern is not a string")?),
            Some(QOS) => {
                topic.qos = value.as_u64().and_then(|q| u8::try_from(q).ok()).ok_or(RecordError::Shape("bad qos"))?;
            }
            Some(LOAD_BALANCE) => topic.load_balance = value.as_bool().ok_or(RecordError::Shape("bad load balance"))?,
            Some(GROUP) => topic.load_balance_group = Some(as_string(value, "group is not a string")?),
            Some(FILTERS) => match value {
                Value::Binary(raw) => topic.raw_filters = Some(Bytes::from(raw)),
                _ => return Err(RecordError::Shape("filters are not bin")),
            },
            Some(OFFSET) => offset = Some(value.as_u64().ok_or(RecordError::Shape("bad offset"))?),
            Some(EPOCH) => epoch = Some(as_string(value, "epoch is not a string")?),
            _ => {}
        }
    }
    topic.pattern = pattern.ok_or(RecordError::Shape("a topic has no pattern"))?;
    topic.history = offset.zip(epoch);
    Ok(topic)
}

fn as_map(value: Value, what: &'static str) -> Result<Vec<(Value, Value)>, RecordError> {
    match value {
        Value::Map(entries) => Ok(entries),
        _ => Err(RecordError::Shape(what)),
    }
}

fn as_array(value: Value, what: &'static str) -> Result<Vec<Value>, RecordError> {
    match value {
        Value::Array(items) => Ok(items),
        _ => Err(RecordError::Shape(what)),
    }
}

fn as_string(value: Value, what: &'static str) -> Result<String, RecordError> {
    match value {
        Value::String(s) => s.into_str().ok_or(RecordError::Shape(what)),
        _ => Err(RecordError::Shape(what)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(pattern: &str) -> RestoredTopic {
        RestoredTopic {
            pattern: pattern.to_owned(),
            qos: 0,
            load_balance: false,
            load_balance_group: None,
            raw_filters: None,
            history: None,
        }
    }

    #[test]
    fn every_field_round_trips() {
        let record = RestoreRecord {
            topics: vec![
                RestoredTopic {
                    qos: 2,
                    load_balance: true,
                    load_balance_group: Some("workers".to_owned()),
                    raw_filters: Some(Bytes::from_static(b"\x92\xa2eu\xa2us")),
                    history: Some((41, "3f2a9c01d4e5b6a7".to_owned())),
                    ..topic("app/room/jobs")
                },
                RestoredTopic { raw_filters: Some(Bytes::from_static(b"\x90")), ..topic("app/room/empty") },
                // Not msgpack at all: filters are opaque bytes to the store.
                RestoredTopic { raw_filters: Some(Bytes::from_static(b"\xc1\x00\xff")), ..topic("app/room/opaque") },
                topic("app/room/plain"),
            ],
            lobbies: vec!["b".to_owned(), "a".to_owned()],
            holder_last_seen_ms: None,
            door_filters: vec![("app/room/+".to_owned(), 1), ("app/room/jobs".to_owned(), 2)],
        };
        assert_eq!(decode(&encode(&record)).unwrap(), record);
        assert_eq!(decode(&encode(&RestoreRecord::default())).unwrap(), RestoreRecord::default());
    }

    #[test]
    fn encoding_is_pinned() {
        let record = RestoreRecord {
            topics: vec![RestoredTopic { raw_filters: Some(Bytes::from_static(b"\x90")), ..topic("a/r/t") }],
            lobbies: vec!["x".to_owned()],
            holder_last_seen_ms: None,
            door_filters: Vec::new(),
        };
        assert_eq!(
            encode(&record),
            b"\x82\xa1t\x91\x84\xa1p\xa5a/r/t\xa1q\x00\xa1b\xc2\xa1f\xc4\x01\x90\xa1l\x91\xa1x"
        );
    }

    #[test]
    fn unknown_keys_are_ignored_and_missing_keys_default() {
        // { "t": [{ "p": "a/r/t", "z": 1 }], "future": [] }
        let bytes = b"\x82\xa1t\x91\x82\xa1p\xa5a/r/t\xa1z\x01\xa6future\x90";
        assert_eq!(
            decode(bytes).unwrap(),
            RestoreRecord {
                topics: vec![topic("a/r/t")],
                lobbies: Vec::new(),
                holder_last_seen_ms: None,
                door_filters: Vec::new()
            }
        );
    }

    #[test]
    fn foreign_bytes_are_refused() {
        for bytes in [&b""[..], b"\x90", b"\x81\xa1t\x91\x80", b"\x81\xa1t\x91\x81\xa1q\x01", b"\x80\x80", b"\xc1"] {
            assert!(decode(bytes).is_err(), "{bytes:x?}");
        }
    }
}
