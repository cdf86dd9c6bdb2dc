//! The trigger request body (N44): `{deliveryId, timestamp, projectId, app, room, roomName,
//! topicName, topic, actorId, actorType, data, filter?, msgId?, scope}`, with the publish's
//! MessagePack `data` as JSON.

use base64::Engine as _;
use serde_json::{Map, Value, json};
use skua_core::{Registry, RoomKey, ScopeInfo, TopicAddress};

/// Nesting [`data_json`] decodes before it gives up and sends the bytes as `{"$base64": …}`
/// (the protocol reader's own cap).
const MAX_DEPTH: usize = skua_protocol::msgpack::MAX_DEPTH;

/// What a trigger body is built from: an accepted publication, or a stored message of the outbox.
#[derive(Debug, Clone, Copy)]
pub struct TriggerFacts<'a> {
    /// `deliveryId`.
    pub delivery_id: &'a str,
    /// The topic.
    pub topic: &'a TopicAddress,
    /// The publisher's actor id.
    pub publisher: &'a str,
    /// Publish time, unix ms (`timestamp`: the same in every attempt, so a retried body is
    /// byte for byte the first one).
    pub timestamp_ms: u64,
    /// The filter key.
    pub filter: Option<&'a str>,
    /// The logged message's id.
    pub msg_id: Option<&'a str>,
    /// The publish's `data` (packed MessagePack).
    pub data: &'a [u8],
}

/// The JSON body of a trigger. Names come from `registry`: `app` is the app's slug (its id when
/// the app is gone), `room` the room slug as clients address it (never the internal
/// `<scope>~<room>` of a scoped actor's room), `roomName` the room's display name (its slug when
/// gone), `scope` the room's access scope (`null` outside any), `actorType` the publisher's type
/// (`server` for a publisher that is not a registered actor: the control plane's).
pub fn body(registry: &Registry, f: &TriggerFacts<'_>) -> Vec<u8> {
    let room = &f.topic.room;
    let slug = room.slug();
    let app_rec = app_of(registry, room);
    let app = app_slug(app_rec, room);
    let room_name = app_rec.and_then(|a| a.rooms.get(slug)).map_or(slug, |r| &*r.name);
    let actor_type = registry.actor(f.publisher).map_or("server", |a| a.actor_type.as_str());
    let topic = format!("{app}/{slug}/{}", f.topic.topic);
    let b = Body {
        actor_id: f.publisher,
        actor_type,
        app: &app,
        data: data_json(f.data),
        delivery_id: f.delivery_id,
        filter: f.filter,
        msg_id: f.msg_id,
        project_id: room.project.as_str(),
        room: slug,
        room_name,
        scope: ScopeInfo::payload(registry.room_scope(room)),
        timestamp: f.timestamp_ms,
        topic: &topic,
        topic_name: &f.topic.topic,
    };
    // Serialising strings, numbers and `Value`s cannot fail.
    serde_json::to_vec(&b).unwrap_or_default()
}

/// The registered app of `room`, if it is still there.
pub fn app_of<'r>(registry: &'r Registry, room: &RoomKey) -> Option<&'r skua_core::registry::App> {
    registry.project(&room.project).and_then(|p| p.apps.iter().find(|a| a.id == room.app))
}

/// `app` of a webhook payload (N43, N44): the app's slug, its id when the app is gone.
pub fn app_slug(app: Option<&skua_core::registry::App>, room: &RoomKey) -> String {
    app.map_or_else(|| room.app.as_str().to_owned(), |a| a.slug.clone())
}

/// The body's fields, serialized straight (no map of values first), in the order a JSON object
/// map writes them (sorted keys), so the bytes are those of the map it replaced.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Body<'a> {
    actor_id: &'a str,
    actor_type: &'a str,
    app: &'a str,
    data: Value,
    delivery_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    filter: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    msg_id: Option<&'a str>,
    project_id: &'a str,
    room: &'a str,
    room_name: &'a str,
    scope: Value,
    timestamp: u64,
    topic: &'a str,
    topic_name: &'a str,
}

/// The publish's `data` as JSON: MessagePack decoded, `bin` (and extension values) as
/// `{"$base64": "…"}`, map keys that are not strings as their JSON text. Bytes that are not
/// one whole MessagePack value are sent as `{"$base64": …}` of the whole.
pub fn data_json(data: &[u8]) -> Value {
    // The protocol's reader checks markers, lengths and depth without allocating first.
    let mut check = skua_protocol::msgpack::Reader::new(data);
    if check.skip_value().is_err() || !check.is_empty() {
        return base64_of(data);
    }
    let mut rd = data;
    match rmpv::decode::read_value_with_max_depth(&mut rd, MAX_DEPTH) {
        Ok(v) if rd.is_empty() => to_json(v),
        _ => base64_of(data),
    }
}

fn base64_of(bytes: &[u8]) -> Value {
    json!({ "$base64": base64::engine::general_purpose::STANDARD.encode(bytes) })
}

fn to_json(v: rmpv::Value) -> Value {
    use rmpv::Value as M;
    match v {
        M::Nil => Value::Null,
        M::Boolean(b) => b.into(),
        M::Integer(i) => i.as_i64().map(Value::from).or_else(|| i.as_u64().map(Value::from)).unwrap_or(Value::Null),
        M::F32(x) => serde_json::Number::from_f64(f64::from(x)).map_or(Value::Null, Value::Number),
        M::F64(x) => serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number),
        M::String(s) => match s.into_str() {
            Some(s) => Value::String(s),
            None => Value::Null,
        },
        M::Binary(b) => base64_of(&b),
        M::Ext(_, b) => base64_of(&b),
        M::Array(a) => Value::Array(a.into_iter().map(to_json).collect()),
        M::Map(m) => {
            let mut out = Map::with_capacity(m.len());
            for (k, v) in m {
                let key = match k {
                    M::String(s) => s.into_str().unwrap_or_default(),
                    other => to_json(other).to_string(),
                };
                out.insert(key, to_json(v));
            }
            Value::Object(out)
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `v` packed (MessagePack).
    pub(crate) fn pack(v: &rmpv::Value) -> Vec<u8> {
        let mut out = Vec::new();
        rmpv::encode::write_value(&mut out, v).unwrap();
        out
    }

    #[test]
    fn data_decodes_to_json_with_binary_as_base64() {
        use rmpv::Value as M;
        let v = M::Map(vec![
            (M::from("n"), M::from(-3)),
            (M::from("big"), M::from(u64::MAX)),
            (M::from("f"), M::F64(1.5)),
            (M::from("s"), M::from("hé")),
            (M::from("b"), M::Binary(vec![0, 1, 2])),
            (M::from(7), M::Array(vec![M::Nil, M::Boolean(true)])),
        ]);
        assert_eq!(
            data_json(&pack(&v)),
            json!({"n": -3, "big": u64::MAX, "f": 1.5, "s": "hé", "b": {"$base64": "AAEC"}, "7": [null, true]})
        );
    }

    #[test]
    fn the_body_is_a_json_object_with_sorted_keys_and_optional_fields_only_when_set() {
        let topic = crate::triggers::parse_topic_key("proj/app/room/t").unwrap();
        let data = pack(&rmpv::Value::from("x"));
        let mut f = TriggerFacts {
            delivery_id: "d",
            topic: &topic,
            publisher: "alice",
            timestamp_ms: 7,
            filter: None,
            msg_id: None,
            data: &data,
        };
        let registry = Registry::default();
        for with_optional in [false, true] {
            if with_optional {
                (f.filter, f.msg_id) = (Some("eu"), Some("m1"));
            }
            let bytes = body(&registry, &f);
            let v: Value = serde_json::from_slice(&bytes).unwrap();
            // A parsed object writes its keys sorted: the same bytes means the same order.
            assert_eq!(serde_json::to_vec(&v).unwrap(), bytes, "{}", String::from_utf8_lossy(&bytes));
            assert_eq!(v["topic"], "app/room/t");
            assert_eq!(
                (v["actorType"].as_str(), v["data"].as_str(), v["timestamp"].as_u64()),
                (Some("server"), Some("x"), Some(7))
            );
            assert_eq!(v.get("filter").is_some(), with_optional);
            assert_eq!(v.get("msgId").is_some(), with_optional);
        }
    }

    #[test]
    fn bytes_that_are_not_one_msgpack_value_go_as_base64() {
        assert_eq!(data_json(&[0xc1]), json!({"$base64": "wQ=="}));
        assert_eq!(data_json(&[0x01, 0x02]), json!({"$base64": "AQI="}), "trailing bytes");
        assert!(data_json(&[0x91; 200]).get("$base64").is_some(), "nested deeper than the cap");
    }
}
