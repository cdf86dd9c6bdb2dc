//! Payload mapping between MQTT and NoLag (N51).
//!
//! A device payload that is exactly one MessagePack value reaches NoLag clients as that value
//! (`data` is the payload, untouched); any other payload (text, JSON, raw bytes, empty) arrives
//! as MessagePack `bin`. NoLag `data` reaches devices as its MessagePack encoding, and a `bin`
//! value as its raw bytes, so a device's binary payload round-trips unchanged.

use bytes::{BufMut, Bytes, BytesMut};
use skua_protocol::msgpack::{Kind, Reader};

/// Whether `payload` is exactly one well-formed MessagePack value.
pub fn is_one_value(payload: &[u8]) -> bool {
    if payload.is_empty() {
        return false;
    }
    let mut r = Reader::new(payload);
    r.skip_value().is_ok() && r.is_empty()
}

/// The NoLag `data` for a device payload.
pub fn to_nolag(payload: Bytes) -> Bytes {
    if is_one_value(&payload) {
        return payload;
    }
    let n = payload.len();
    let mut out = BytesMut::with_capacity(n + 5);
    // Invariant: payloads are bounded by the largest packet, far below 4 GiB.
    let n32 = u32::try_from(n).unwrap_or(u32::MAX);
    if let Ok(n8) = u8::try_from(n) {
        out.put_u8(0xc4);
        out.put_u8(n8);
    } else if let Ok(n16) = u16::try_from(n) {
        out.put_u8(0xc5);
        out.put_u16(n16);
    } else {
        out.put_u8(0xc6);
        out.put_u32(n32);
    }
    out.put_slice(&payload);
    out.freeze()
}

/// The device payload for NoLag `data` (one packed value): a `bin` value's bytes, else the
/// value as packed.
pub fn to_device(data: &[u8]) -> &[u8] {
    let header = match data.first() {
        Some(0xc4) => 2,
        Some(0xc5) => 3,
        Some(0xc6) => 5,
        _ => return data,
    };
    let r = Reader::new(data);
    match r.peek_kind() {
        Ok(Kind::Bin) if data.len() >= header => &data[header..],
        _ => data,
    }
}

/// The user property of a 5.0 `CONNECT` naming the room the device announces presence in
/// (docs/mqtt.md, "Presence").
pub const PRESENCE_PROPERTY: &str = "presence";

/// The room and presence data a 5.0 `CONNECT`'s user properties announce: the `presence`
/// property's value is the room slug (the last one, if repeated), the data a map of the other
/// properties (key → value, the last of a repeated key). `None` without a `presence` property.
pub fn presence_of(properties: &[(String, String)]) -> Option<(String, Bytes)> {
    let room = properties.iter().rev().find(|(k, _)| k == PRESENCE_PROPERTY)?.1.clone();
    let mut data: Vec<(&str, &str)> = Vec::new();
    for (k, v) in properties.iter().filter(|(k, _)| k != PRESENCE_PROPERTY) {
        match data.iter_mut().find(|(dk, _)| *dk == k.as_str()) {
            Some(entry) => entry.1 = v,
            None => data.push((k, v)),
        }
    }
    let mut w = skua_protocol::msgpack::Writer::with_capacity(64);
    w.map(data.len());
    for (k, v) in data {
        w.str(k).str(v);
    }
    Some((room, Bytes::from(w.into_vec())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_value_passes_anything_else_becomes_bin() {
        let map = Bytes::from_static(&[0x81, 0xa1, b'a', 0x01]);
        assert_eq!(to_nolag(map.clone()), map);
        let text = Bytes::from_static(b"hello");
        assert_eq!(&to_nolag(text)[..], &[0xc4, 5, b'h', b'e', b'l', b'l', b'o']);
        assert_eq!(&to_nolag(Bytes::new())[..], &[0xc4, 0]);
        // Two values, or a truncated one, are not one value.
        assert_eq!(to_nolag(Bytes::from_static(&[0x01, 0x02]))[0], 0xc4);
        assert_eq!(to_nolag(Bytes::from_static(&[0x92, 0x01]))[0], 0xc4);
        let big = Bytes::from(vec![b'x'; 300]);
        assert_eq!(&to_nolag(big)[..3], &[0xc5, 1, 44]);
    }

    #[test]
    fn bin_goes_to_devices_raw_other_values_packed() {
        assert_eq!(to_device(&[0xc4, 2, 9, 8]), &[9, 8]);
        assert_eq!(to_device(&[0x81, 0xa1, b'a', 0x01]), &[0x81, 0xa1, b'a', 0x01]);
        assert_eq!(to_device(&[0xa2, b'h', b'i']), &[0xa2, b'h', b'i']);
        let text = Bytes::from_static(b"round trip");
        assert_eq!(to_device(&to_nolag(text.clone())), &text[..]);
    }

    #[test]
    fn a_presence_property_names_the_room_and_the_others_are_its_data() {
        let props = |p: &[(&str, &str)]| p.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect::<Vec<_>>();
        assert_eq!(presence_of(&props(&[("model", "x1")])), None);
        let (room, data) = presence_of(&props(&[("model", "x1"), ("presence", "general"), ("model", "x2")])).unwrap();
        assert_eq!(room, "general");
        assert_eq!(&data[..], &[0x81, 0xa5, b'm', b'o', b'd', b'e', b'l', 0xa2, b'x', b'2']);
        let (_, empty) = presence_of(&props(&[("presence", "ops")])).unwrap();
        assert_eq!(&empty[..], &[0x80]);
    }
}
