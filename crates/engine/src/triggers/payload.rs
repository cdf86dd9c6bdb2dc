//! The trigger request body (N44): `{deliveryId, timestamp, projectId, app, room, roomName,
//! topicName, topic, actorId, actorType, data, filter?, msgId?, scope}`, with the publish's
//! MessagePack `data` as JSON.

use std::borrow::Cow;

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
///
/// Written straight into one buffer, keys in sorted order (the order a JSON object map writes
/// them, so the bytes are those of the `serde_json` map this replaced), `data` straight from the
/// MessagePack ([`write_data`]): no value tree, no intermediate strings.
pub fn body(registry: &Registry, f: &TriggerFacts<'_>) -> Vec<u8> {
    body_with(registry, f, usize::MAX, |out| write_data_bounded(out, f.data, usize::MAX)).unwrap_or_default()
}

/// The body of a trigger whose JSON would exceed `max` bytes (`trigger_max_body_bytes`):
/// [`body`] with every field but `data`, which is replaced by
/// `{"$omitted":"trigger_max_body_bytes","size":<its MessagePack length>}`.
pub fn omitted_body(registry: &Registry, f: &TriggerFacts<'_>) -> Vec<u8> {
    body_with(registry, f, usize::MAX, |out| {
        out.extend_from_slice(b"{\"$omitted\":\"trigger_max_body_bytes\",\"size\":");
        json_value(out, &f.data.len());
        out.push(b'}');
        Ok(())
    })
    .unwrap_or_default()
}

/// The JSON of a trigger would exceed its bound (`trigger_max_body_bytes`); conversion stopped
/// as soon as it was known, without writing the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLarge;

/// [`body`], unless it would be longer than `max` bytes: the MessagePack `data` is converted
/// only until the output passes `max` (a small MessagePack value can expand a lot: an array of
/// `nil`s five times), so a too large body is never held whole.
///
/// # Errors
/// [`TooLarge`] when the body would exceed `max`.
pub fn body_bounded(registry: &Registry, f: &TriggerFacts<'_>, max: usize) -> Result<Vec<u8>, TooLarge> {
    body_with(registry, f, max, |out| write_data_bounded(out, f.data, max))
}

/// The body with `data` written by `data`, at most `max` bytes.
fn body_with(
    registry: &Registry,
    f: &TriggerFacts<'_>,
    max: usize,
    data: impl FnOnce(&mut Vec<u8>) -> Result<(), TooLarge>,
) -> Result<Vec<u8>, TooLarge> {
    let room = &f.topic.room;
    let slug = room.slug();
    let app_rec = app_of(registry, room);
    let app = app_rec.map_or_else(|| room.app.as_str(), |a| a.slug.as_str());
    let room_name = app_rec.and_then(|a| a.rooms.get(slug)).map_or(slug, |r| &*r.name);
    let actor_type = registry.actor(f.publisher).map_or("server", |a| a.actor_type.as_str());
    let mut out = Vec::with_capacity((320 + f.data.len().saturating_mul(2)).min(max.saturating_add(1)));
    out.extend_from_slice(b"{\"actorId\":");
    json_str(&mut out, f.publisher);
    out.extend_from_slice(b",\"actorType\":");
    json_str(&mut out, actor_type);
    out.extend_from_slice(b",\"app\":");
    json_str(&mut out, app);
    out.extend_from_slice(b",\"data\":");
    data(&mut out)?;
    out.extend_from_slice(b",\"deliveryId\":");
    json_str(&mut out, f.delivery_id);
    if let Some(filter) = f.filter {
        out.extend_from_slice(b",\"filter\":");
        json_str(&mut out, filter);
    }
    if let Some(id) = f.msg_id {
        out.extend_from_slice(b",\"msgId\":");
        json_str(&mut out, id);
    }
    out.extend_from_slice(b",\"projectId\":");
    json_str(&mut out, room.project.as_str());
    out.extend_from_slice(b",\"room\":");
    json_str(&mut out, slug);
    out.extend_from_slice(b",\"roomName\":");
    json_str(&mut out, room_name);
    out.extend_from_slice(b",\"scope\":");
    match registry.room_scope(room) {
        None => out.extend_from_slice(b"null"),
        // Rare (scoped rooms): a small map, serialized as before.
        scope => json_value(&mut out, &ScopeInfo::payload(scope)),
    }
    out.extend_from_slice(b",\"timestamp\":");
    json_value(&mut out, &f.timestamp_ms);
    out.extend_from_slice(b",\"topic\":\"");
    json_str_contents(&mut out, app);
    out.push(b'/');
    json_str_contents(&mut out, slug);
    out.push(b'/');
    json_str_contents(&mut out, &f.topic.topic);
    out.extend_from_slice(b"\",\"topicName\":");
    json_str(&mut out, &f.topic.topic);
    out.push(b'}');
    if out.len() > max {
        return Err(TooLarge);
    }
    Ok(out)
}

/// The registered app of `room`, if it is still there.
pub fn app_of<'r>(registry: &'r Registry, room: &RoomKey) -> Option<&'r skua_core::registry::App> {
    registry.project(&room.project).and_then(|p| p.apps.iter().find(|a| a.id == room.app))
}

/// `app` of a webhook payload (N43, N44): the app's slug, its id when the app is gone.
pub fn app_slug(app: Option<&skua_core::registry::App>, room: &RoomKey) -> String {
    app.map_or_else(|| room.app.as_str().to_owned(), |a| a.slug.clone())
}

/// Appends `s` as a JSON string, escaped as `serde_json` escapes it.
fn json_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    json_str_contents(out, s);
    out.push(b'"');
}

/// Appends the escaped contents of a JSON string (no quotes): `"`, `\` and the control
/// characters, with the short escapes where JSON has one and `\u00XX` (lowercase hex)
/// otherwise, exactly as `serde_json` writes them.
fn json_str_contents(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0x00..=0x1f => {
                out.extend_from_slice(&bytes[start..i]);
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(b >> 4)]);
                out.push(HEX[usize::from(b & 0xf)]);
                start = i + 1;
                continue;
            }
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        out.extend_from_slice(esc);
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Appends a number or a small value through `serde_json` (writing to memory cannot fail).
fn json_value<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, v: &T) {
    let _ = serde_json::to_writer(&mut *out, v);
}

/// Appends the publish's `data` as JSON, written straight from the MessagePack: the same bytes
/// as serializing [`data_json`]'s value (map keys sorted, a repeated key's last value kept;
/// `bin` and extension values as `{"$base64": "…"}`; a map key that is not a string as its
/// JSON text; a `str` that is not UTF-8 as `null`), with the same fallback: bytes that are not
/// one whole MessagePack value, or nested past the decoder's cap, go as `{"$base64": …}` of
/// the whole.
pub fn write_data(out: &mut Vec<u8>, data: &[u8]) {
    let _ = write_data_bounded(out, data, usize::MAX);
}

/// [`write_data`], stopping as soon as `out` would grow past `max` bytes (then what was
/// written of `data` is truncated away).
///
/// # Errors
/// [`TooLarge`] when `out` would be longer than `max`.
pub fn write_data_bounded(out: &mut Vec<u8>, data: &[u8], max: usize) -> Result<(), TooLarge> {
    let start = out.len();
    let mut check = skua_protocol::msgpack::Reader::new(data);
    if check.skip_value().is_err() || !check.is_empty() {
        return base64_bounded(out, data, max);
    }
    let mut pos = 0;
    let mut w = Writer { out: &mut *out, max };
    match w.value(data, &mut pos, MAX_DEPTH) {
        Ok(()) if pos == data.len() => Ok(()),
        Err(Bad::TooLarge) => {
            out.truncate(start);
            Err(TooLarge)
        }
        _ => {
            out.truncate(start);
            base64_bounded(out, data, max)
        }
    }
}

/// `{"$base64": …}` of `data`, unless `out` would then be longer than `max`.
fn base64_bounded(out: &mut Vec<u8>, data: &[u8], max: usize) -> Result<(), TooLarge> {
    let b64 = base64::encoded_len(data.len(), true).unwrap_or(usize::MAX);
    if out.len().saturating_add(b64).saturating_add(16) > max {
        return Err(TooLarge);
    }
    base64_into(out, data);
    Ok(())
}

/// Why a value could not be written.
enum Bad {
    /// Not what the decoder takes (the caller falls back to base64).
    Invalid,
    /// The output would pass its bound.
    TooLarge,
}

/// The output and its bound.
struct Writer<'o> {
    out: &'o mut Vec<u8>,
    max: usize,
}

impl Writer<'_> {
    /// Fails when `more` bytes would take the output past its bound.
    fn room(&self, more: usize) -> Result<(), Bad> {
        if self.out.len().saturating_add(more) > self.max { Err(Bad::TooLarge) } else { Ok(()) }
    }

    fn value(&mut self, data: &[u8], pos: &mut usize, budget: usize) -> Result<(), Bad> {
        self.room(0)?;
        write_value(self, data, pos, budget)
    }
}

/// The length of `s` as the contents of a JSON string.
fn escaped_len(s: &str) -> usize {
    s.bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
            0x00..=0x1f => 6,
            _ => 1,
        })
        .sum()
}

fn take<'a>(data: &'a [u8], pos: &mut usize, n: usize) -> Result<&'a [u8], Bad> {
    let end = pos.checked_add(n).ok_or(Bad::Invalid)?;
    let s = data.get(*pos..end).ok_or(Bad::Invalid)?;
    *pos = end;
    Ok(s)
}

fn be(data: &[u8], pos: &mut usize, n: usize) -> Result<u64, Bad> {
    Ok(take(data, pos, n)?.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b)))
}

fn len(data: &[u8], pos: &mut usize, n: usize) -> Result<usize, Bad> {
    usize::try_from(be(data, pos, n)?).map_err(|_| Bad::Invalid)
}

/// The length of the `str` whose marker `m` was just read.
fn str_len(m: u8, data: &[u8], pos: &mut usize) -> Result<usize, Bad> {
    match m {
        0xd9 => len(data, pos, 1),
        0xda => len(data, pos, 2),
        0xdb => len(data, pos, 4),
        _ => Ok(usize::from(m & 0x1f)),
    }
}

/// Writes the value at `pos` (advancing past it) within the depth `budget` of the decoder
/// [`data_json`] uses (`rmpv` with [`MAX_DEPTH`]): every value takes 1, a container 1 more
/// for its elements, a `str` or an extension 2 more and a `bin` 1 more; a value the budget
/// does not cover fails (and the whole goes as base64, as there). A `str`, `bin` or extension
/// that would take the output past its bound fails before it is written.
fn write_value(w: &mut Writer<'_>, data: &[u8], pos: &mut usize, budget: usize) -> Result<(), Bad> {
    let budget = budget.checked_sub(1).ok_or(Bad::Invalid)?;
    let m = take(data, pos, 1)?[0];
    let out = &mut *w.out;
    match m {
        0x00..=0x7f => json_value(out, &u64::from(m)),
        // Negative fixint.
        0xe0..=0xff => json_value(out, &i64::from(m as i8)),
        0xc0 => out.extend_from_slice(b"null"),
        0xc2 => out.extend_from_slice(b"false"),
        0xc3 => out.extend_from_slice(b"true"),
        0xcc => json_value(out, &be(data, pos, 1)?),
        0xcd => json_value(out, &be(data, pos, 2)?),
        0xce => json_value(out, &be(data, pos, 4)?),
        0xcf => json_value(out, &be(data, pos, 8)?),
        0xd0 => json_value(out, &i64::from(be(data, pos, 1)? as u8 as i8)),
        0xd1 => json_value(out, &i64::from(be(data, pos, 2)? as u16 as i16)),
        0xd2 => json_value(out, &i64::from(be(data, pos, 4)? as u32 as i32)),
        0xd3 => json_value(out, &(be(data, pos, 8)? as i64)),
        // serde_json writes a non-finite float `null`, as the value tree did.
        0xca => json_value(out, &f64::from(f32::from_bits(be(data, pos, 4)? as u32))),
        0xcb => json_value(out, &f64::from_bits(be(data, pos, 8)?)),
        0xa0..=0xbf | 0xd9..=0xdb => {
            let n = str_len(m, data, pos)?;
            if budget < 2 {
                return Err(Bad::Invalid);
            }
            match std::str::from_utf8(take(data, pos, n)?) {
                Ok(s) => {
                    // Escapes at most sextuple a string: count them only when that could matter.
                    if w.room(n.saturating_mul(6).saturating_add(2)).is_err() {
                        w.room(escaped_len(s).saturating_add(2))?;
                    }
                    json_str(w.out, s);
                }
                Err(_) => out.extend_from_slice(b"null"),
            }
        }
        0xc4..=0xc6 => {
            let n = len(data, pos, 1 << (m - 0xc4))?;
            if budget < 1 {
                return Err(Bad::Invalid);
            }
            let bytes = take(data, pos, n)?;
            w.room(base64::encoded_len(n, true).unwrap_or(usize::MAX).saturating_add(16))?;
            base64_into(w.out, bytes);
        }
        0xd4..=0xd8 | 0xc7..=0xc9 => {
            let n = match m {
                0xc7 => len(data, pos, 1)?,
                0xc8 => len(data, pos, 2)?,
                0xc9 => len(data, pos, 4)?,
                _ => 1 << (m - 0xd4),
            };
            if budget < 2 {
                return Err(Bad::Invalid);
            }
            take(data, pos, 1)?; // the extension type
            let bytes = take(data, pos, n)?;
            w.room(base64::encoded_len(n, true).unwrap_or(usize::MAX).saturating_add(16))?;
            base64_into(w.out, bytes);
        }
        0x90..=0x9f | 0xdc | 0xdd => {
            let n = match m {
                0xdc => len(data, pos, 2)?,
                0xdd => len(data, pos, 4)?,
                _ => usize::from(m & 0x0f),
            };
            let inner = budget.checked_sub(1).ok_or(Bad::Invalid)?;
            out.push(b'[');
            for i in 0..n {
                if i > 0 {
                    w.out.push(b',');
                }
                w.value(data, pos, inner)?;
            }
            w.out.push(b']');
        }
        0x80..=0x8f | 0xde | 0xdf => {
            let n = match m {
                0xde => len(data, pos, 2)?,
                0xdf => len(data, pos, 4)?,
                _ => usize::from(m & 0x0f),
            };
            let inner = budget.checked_sub(1).ok_or(Bad::Invalid)?;
            write_map(w, data, pos, n, inner)?;
        }
        // 0xc1, reserved (already refused by the check in `write_data`).
        _ => return Err(Bad::Invalid),
    }
    Ok(())
}

/// A map of `n` entries at `pos`, each key and value within `budget`: keys sorted, a repeated
/// key's last value kept (as a JSON object map keeps them).
fn write_map(w: &mut Writer<'_>, data: &[u8], pos: &mut usize, n: usize, budget: usize) -> Result<(), Bad> {
    // `n` was checked against the input by `write_data`'s skip; bounded again all the same.
    let mut entries: Vec<(Cow<'_, str>, usize)> = Vec::with_capacity(n.min(data.len()));
    for _ in 0..n {
        let key = map_key(data, pos, budget, w.max)?;
        let at = *pos;
        let mut skip = skua_protocol::msgpack::Reader::new(&data[at..]);
        skip.skip_value().map_err(|_| Bad::Invalid)?;
        *pos = at + skip.position();
        entries.push((key, at));
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    w.out.push(b'{');
    let mut first = true;
    for (i, (key, at)) in entries.iter().enumerate() {
        if entries.get(i + 1).is_some_and(|next| next.0 == *key) {
            continue; // a later value of the same key wins
        }
        if !first {
            w.out.push(b',');
        }
        first = false;
        w.room(key.len())?;
        json_str(w.out, key);
        w.out.push(b':');
        let mut p = *at;
        w.value(data, &mut p, budget)?;
    }
    w.out.push(b'}');
    Ok(())
}

/// A map key: a `str` as itself (`""` when not UTF-8), anything else as its JSON text (at
/// most `max` bytes of it).
fn map_key<'a>(data: &'a [u8], pos: &mut usize, budget: usize, max: usize) -> Result<Cow<'a, str>, Bad> {
    let m = *data.get(*pos).ok_or(Bad::Invalid)?;
    if matches!(m, 0xa0..=0xbf | 0xd9..=0xdb) {
        let b = budget.checked_sub(1).ok_or(Bad::Invalid)?;
        *pos += 1;
        let n = str_len(m, data, pos)?;
        if b < 2 {
            return Err(Bad::Invalid);
        }
        return Ok(Cow::Borrowed(std::str::from_utf8(take(data, pos, n)?).unwrap_or_default()));
    }
    let mut text = Vec::new();
    Writer { out: &mut text, max }.value(data, pos, budget)?;
    String::from_utf8(text).map(Cow::Owned).map_err(|_| Bad::Invalid)
}

/// Appends `{"$base64":"…"}` of `bytes`.
fn base64_into(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(b"{\"$base64\":\"");
    let at = out.len();
    out.resize(at + base64::encoded_len(bytes.len(), true).unwrap_or(0), 0);
    let n = base64::engine::general_purpose::STANDARD.encode_slice(bytes, &mut out[at..]).unwrap_or(0);
    out.truncate(at + n);
    out.extend_from_slice(b"\"}");
}

/// The publish's `data` as a JSON value (the tree form of what [`write_data`] writes straight):
/// MessagePack decoded, `bin` (and extension values) as
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

    /// The body as it was built before it was written by hand: a struct serialized by
    /// `serde_json`, `data` through the value tree. The oracle of the tests below.
    fn body_via_serde(registry: &Registry, f: &TriggerFacts<'_>) -> Vec<u8> {
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
        let room = &f.topic.room;
        let slug = room.slug();
        let app_rec = registry.project(&room.project).and_then(|p| p.apps.iter().find(|a| a.id == room.app));
        let app = app_rec.map_or_else(|| room.app.as_str().to_owned(), |a| a.slug.clone());
        let room_name = app_rec.and_then(|a| a.rooms.get(slug)).map_or(slug, |r| &*r.name);
        let actor_type = registry.actor(f.publisher).map_or("server", |a| a.actor_type.as_str());
        let topic = format!("{app}/{slug}/{}", f.topic.topic);
        serde_json::to_vec(&Body {
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
        })
        .unwrap()
    }

    fn written(data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        write_data(&mut out, data);
        out
    }

    /// A small xorshift generator: the same cases on every run.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }

        fn text(&mut self) -> String {
            const PIECES: &[&str] = &[
                "a", "key", "\"", "\\", "\n", "\u{1}", "\u{1f}", "\u{7f}", "é", "☃", "😀", "/", "\t", "\u{8}", "\u{c}",
                "\r", "k",
            ];
            (0..self.below(6)).map(|_| PIECES[self.below(PIECES.len() as u64) as usize]).collect()
        }

        fn value(&mut self, depth: u32) -> rmpv::Value {
            use rmpv::Value as M;
            let pick = if depth == 0 { self.below(9) } else { self.below(11) };
            match pick {
                0 => M::Nil,
                1 => M::Boolean(self.below(2) == 1),
                2 => M::from(self.next() as i64 >> self.below(64)),
                3 => M::from(self.next() >> self.below(64)),
                4 => M::F32(f32::from_bits(self.next() as u32)),
                5 => M::F64(
                    [1.5, -0.0, 1e300, f64::NAN, f64::INFINITY, 0.1, f64::from_bits(self.next())]
                        [self.below(7) as usize],
                ),
                6 => M::from(self.text()),
                7 => M::Binary((0..self.below(40)).map(|_| self.next() as u8).collect()),
                8 => M::Ext(
                    self.next() as i8,
                    (0..[1, 2, 4, 8, 16, 3, 300][self.below(7) as usize]).map(|_| self.next() as u8).collect(),
                ),
                9 => M::Array((0..self.below(5)).map(|_| self.value(depth - 1)).collect()),
                _ => M::Map(
                    (0..self.below(6))
                        .map(|_| {
                            let k = if self.below(4) == 0 { self.value(depth - 1) } else { M::from(self.text()) };
                            (k, self.value(depth - 1))
                        })
                        .collect(),
                ),
            }
        }
    }

    #[test]
    fn data_is_written_as_the_value_tree_serializes() {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        for _ in 0..5000 {
            let packed = pack(&rng.value(4));
            let want = serde_json::to_vec(&data_json(&packed)).unwrap();
            assert_eq!(written(&packed), want, "{}", String::from_utf8_lossy(&want));
        }
        // Repeated keys (the last wins), a str that is not UTF-8 (null; as a key, ""), truncated
        // and trailing bytes, reserved markers, random bytes.
        let mut cases: Vec<Vec<u8>> = vec![
            vec![0x82, 0xa1, b'a', 0x01, 0xa1, b'a', 0x02],
            vec![0x83, 0xa1, b'b', 0x01, 0xa1, b'a', 0x02, 0xa1, b'b', 0x03],
            vec![0x92, 0xa2, 0xff, 0xfe, 0x01],
            vec![0x81, 0xa2, 0xff, 0xfe, 0x01],
            vec![0x92, 0x01],
            vec![0x01, 0x02],
            vec![0xc1],
            vec![0x91, 0xc1],
            vec![],
        ];
        for _ in 0..2000 {
            cases.push((0..rng.below(12)).map(|_| rng.next() as u8).collect());
        }
        for c in &cases {
            assert_eq!(written(c), serde_json::to_vec(&data_json(c)).unwrap(), "{c:02x?}");
        }
    }

    #[test]
    fn nesting_falls_back_to_base64_where_the_value_tree_did() {
        use rmpv::Value as M;
        for leaf in [M::from(1), M::from("s"), M::Binary(vec![1]), M::Ext(1, vec![2]), M::Array(vec![])] {
            for depth in 25..40 {
                for map in [false, true] {
                    let mut v = leaf.clone();
                    for _ in 0..depth {
                        v = if map { M::Map(vec![(M::from("k"), v)]) } else { M::Array(vec![v]) };
                    }
                    let packed = pack(&v);
                    let want = serde_json::to_vec(&data_json(&packed)).unwrap();
                    assert_eq!(written(&packed), want, "depth {depth}, map {map}, leaf {leaf:?}");
                }
            }
        }
    }

    #[test]
    fn the_written_body_is_the_serde_one() {
        let mut rng = Rng(7);
        let topic = crate::triggers::parse_topic_key("proj/app/ro\"om/t\\x\u{1}").unwrap();
        let registry = Registry::default();
        for i in 0..200 {
            let data = pack(&rng.value(3));
            let f = TriggerFacts {
                delivery_id: "0190a-\"d",
                topic: &topic,
                publisher: "ali\nce",
                timestamp_ms: rng.next(),
                filter: (i % 2 == 0).then_some("e\"u"),
                msg_id: (i % 3 == 0).then_some("m1"),
                data: &data,
            };
            assert_eq!(body(&registry, &f), body_via_serde(&registry, &f));
        }
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
    fn a_bounded_body_is_the_body_when_it_fits_and_stops_early_when_it_does_not() {
        use rmpv::Value as M;
        let topic = crate::triggers::parse_topic_key("proj/app/room/t").unwrap();
        let registry = Registry::default();
        let facts = |data: &'static [u8]| TriggerFacts {
            delivery_id: "d",
            topic: &topic,
            publisher: "alice",
            timestamp_ms: 7,
            filter: None,
            msg_id: None,
            data,
        };
        // 100 000 nils (about 100 KB packed) are 500 KB of JSON.
        let nils: &'static [u8] = Box::leak(pack(&M::Array(vec![M::Nil; 100_000])).into_boxed_slice());
        let full = body(&registry, &facts(nils));
        assert!(full.len() > 500_000);
        assert_eq!(body_bounded(&registry, &facts(nils), full.len()), Ok(full.clone()));
        assert_eq!(body_bounded(&registry, &facts(nils), full.len() - 1), Err(TooLarge));
        assert_eq!(body_bounded(&registry, &facts(nils), 64 * 1024), Err(TooLarge));
        // Strings full of escapes, bin, ext and non-string map keys stop too.
        let cases: Vec<M> = vec![
            M::from("\u{1}".repeat(50_000)),
            M::Binary(vec![7; 50_000]),
            M::Ext(3, vec![7; 50_000]),
            M::Map(vec![(M::Array(vec![M::Nil; 20_000]), M::from(1))]),
            M::Map(vec![(M::from("k".repeat(50_000)), M::from(1))]),
        ];
        for v in cases {
            let data: &'static [u8] = Box::leak(pack(&v).into_boxed_slice());
            let full = body(&registry, &facts(data));
            assert_eq!(body_bounded(&registry, &facts(data), full.len()), Ok(full.clone()));
            assert_eq!(body_bounded(&registry, &facts(data), full.len() - 1), Err(TooLarge), "{v:.40?}");
            let mut out = Vec::new();
            assert_eq!(write_data_bounded(&mut out, data, 1000), Err(TooLarge));
            assert!(out.is_empty(), "what was written is taken back");
        }
        // Not one MessagePack value: base64 of the whole, bounded as well.
        let junk: &'static [u8] = Box::leak(vec![0xc1; 30_000].into_boxed_slice());
        let full = body(&registry, &facts(junk));
        assert_eq!(body_bounded(&registry, &facts(junk), full.len()), Ok(full.clone()));
        assert_eq!(body_bounded(&registry, &facts(junk), 30_000), Err(TooLarge));
        // The omitted body is small and says what was left out.
        let omitted: Value = serde_json::from_slice(&omitted_body(&registry, &facts(nils))).unwrap();
        assert_eq!(omitted["data"], json!({"$omitted": "trigger_max_body_bytes", "size": nils.len()}));
        assert_eq!(omitted["deliveryId"], "d");
    }

    #[test]
    fn bytes_that_are_not_one_msgpack_value_go_as_base64() {
        assert_eq!(data_json(&[0xc1]), json!({"$base64": "wQ=="}));
        assert_eq!(data_json(&[0x01, 0x02]), json!({"$base64": "AQI="}), "trailing bytes");
        assert!(data_json(&[0x91; 200]).get("$base64").is_some(), "nested deeper than the cap");
    }
}
