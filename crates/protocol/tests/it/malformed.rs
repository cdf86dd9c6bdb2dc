//! Input the decoder must refuse with `invalid_frame` and a hint (N3, N31), with `topic` and
//! `msgRef` filled when they could be read; plus the lenient cases that are *not* errors.

use bytes::Bytes;
use rmpv::Value;
use skua_protocol::msgpack::MAX_DEPTH;
use skua_protocol::{ClientFrame, DecodeError, FilterError, client::MAX_FRAME_KEYS};

use crate::client_golden;
use crate::shape::{arr, b, map, nil, pack, s, u};

const TOPIC: &str = "demo/general/messages";
const UNDECODABLE: &str = "undecodable msgpack";

fn decode(bytes: &[u8]) -> Result<ClientFrame, DecodeError> {
    ClientFrame::decode(&Bytes::copy_from_slice(bytes))
}

fn refused(bytes: &[u8]) -> DecodeError {
    match decode(bytes) {
        Ok(f) => panic!("accepted {f:?} from {bytes:02x?}"),
        Err(e) => e,
    }
}

fn err(hint: &'static str, topic: Option<&str>, msg_ref: Option<&str>) -> DecodeError {
    DecodeError { hint, topic: topic.map(str::to_owned), msg_ref: msg_ref.map(str::to_owned) }
}

/// A map frame from keys and already-encoded values, so values can be malformed.
fn raw_map(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = match u16::try_from(entries.len()) {
        Ok(n @ 0..=15) => vec![0x80 | n as u8],
        Ok(n) => [&[0xde][..], &n.to_be_bytes()].concat(),
        Err(_) => unreachable!("test frames are small"),
    };
    for (k, v) in entries {
        out.extend(pack(&s(k)));
        out.extend_from_slice(v);
    }
    out
}

fn check<W: std::fmt::Display>(cases: Vec<(W, Vec<u8>, DecodeError)>) {
    let mut failures = Vec::new();
    for (what, bytes, want) in cases {
        match decode(&bytes) {
            Err(got) if got == want => {}
            got => failures.push(format!("{what}:\n  got:  {got:?}\n  want: {want:?}")),
        }
    }
    assert!(failures.is_empty(), "{} case(s) wrong:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn non_map_values_are_invalid_frames() {
    let values = [
        arr([]),
        arr([map([("type", s("ack")), ("msgId", s("m"))])]),
        s("publish"),
        u(1),
        Value::from(-7),
        nil(),
        b(true),
        Value::F64(1.5),
        Value::Binary(pack(&map([("type", s("ack")), ("msgId", s("m"))]))),
        Value::Ext(1, vec![0; 4]),
    ];
    check(values.iter().map(|v| (v.to_string(), pack(v), err("frame must be a msgpack map", None, None))).collect());
}

#[test]
fn maps_without_a_string_type_are_invalid_frames() {
    let t = Some(TOPIC);
    let r = Some("1-r");
    check(vec![
        ("empty map", pack(&map([])), err("frame has no type", None, None)),
        (
            "topic and msgRef only",
            pack(&map([("topic", s(TOPIC)), ("msgRef", s("1-r"))])),
            err("frame has no type", t, r),
        ),
        (
            "Type is not type",
            pack(&map([("Type", s("publish")), ("topic", s(TOPIC))])),
            err("frame has no type", t, None),
        ),
        ("type int", pack(&map([("type", u(3)), ("topic", s(TOPIC))])), err("type must be a string", t, None)),
        ("type nil", pack(&map([("type", nil()), ("msgRef", s("1-r"))])), err("type must be a string", None, r)),
        ("type bool", pack(&map([("type", b(true))])), err("type must be a string", None, None)),
        // N1: strings are msgpack str; a bin that spells "publish" is not one.
        (
            "type bin",
            pack(&map([("type", Value::Binary(b"publish".to_vec())), ("topic", s(TOPIC))])),
            err("type must be a string", t, None),
        ),
        ("type array", pack(&map([("type", arr([s("publish")]))])), err("type must be a string", None, None)),
        ("type invalid utf-8", raw_map(&[("type", &[0xa2, 0xff, 0xfe])]), err("type must be a string", None, None)),
        // A topic that is not a string cannot be echoed.
        (
            "type int, topic int",
            pack(&map([("type", u(3)), ("topic", u(9))])),
            err("type must be a string", None, None),
        ),
    ]);
}

#[test]
fn unknown_types_are_invalid_frames_with_context() {
    let mut cases = Vec::new();
    for ty in ["publishh", "", "PUBLISH", "Publish", "message", "hydration", "subscribed", "auth "] {
        let frame = pack(&map([("type", s(ty)), ("topic", s(TOPIC)), ("msgRef", s("9-z")), ("data", nil())]));
        cases.push((ty, frame, err("unknown frame type", Some(TOPIC), Some("9-z"))));
    }
    check(cases);
}

#[test]
fn each_known_type_missing_or_mistyping_each_required_field() {
    let t = Some(TOPIC);
    let r = Some("1-r");
    let frame = |ty: &str, rest: Vec<(&str, Value)>| {
        let mut entries = vec![(s("type"), s(ty))];
        entries.extend(rest.into_iter().map(|(k, v)| (s(k), v)));
        pack(&Value::Map(entries))
    };
    let data = map([("k", s("v"))]);
    let mut cases = vec![
        (
            "auth no token",
            frame("auth", vec![("protocolVersion", u(2))]),
            err("auth requires a string token", None, None),
        ),
        ("auth token int", frame("auth", vec![("token", u(1))]), err("auth requires a string token", None, None)),
        ("auth token nil", frame("auth", vec![("token", nil())]), err("auth requires a string token", None, None)),
        (
            "auth token bin",
            frame("auth", vec![("token", Value::Binary(b"at_live_x".to_vec()))]),
            err("auth requires a string token", None, None),
        ),
        ("reauth no token", frame("reauth", vec![]), err("reauth requires a string token", None, None)),
        (
            "subscribe no topic",
            frame("subscribe", vec![("qos", u(1))]),
            err("subscribe requires a string topic", None, None),
        ),
        (
            "subscribe topic int",
            frame("subscribe", vec![("topic", u(1))]),
            err("subscribe requires a string topic", None, None),
        ),
        (
            "subscribe topic nil",
            frame("subscribe", vec![("topic", nil())]),
            err("subscribe requires a string topic", None, None),
        ),
        (
            "subscribe group int",
            frame("subscribe", vec![("topic", s(TOPIC)), ("loadBalance", b(true)), ("loadBalanceGroup", u(7))]),
            err("loadBalanceGroup must be a string", t, None),
        ),
        ("unsubscribe no topic", frame("unsubscribe", vec![]), err("unsubscribe requires a string topic", None, None)),
        (
            "publish no topic",
            frame("publish", vec![("data", data.clone()), ("msgRef", s("1-r"))]),
            err("publish requires a string topic", None, r),
        ),
        (
            "publish topic array",
            frame("publish", vec![("topic", arr([s(TOPIC)])), ("data", data.clone())]),
            err("publish requires a string topic", None, None),
        ),
        (
            "publish no data",
            frame("publish", vec![("topic", s(TOPIC)), ("msgRef", s("1-r")), ("qos", u(1))]),
            err("publish requires data", t, r),
        ),
        ("publish nothing", frame("publish", vec![]), err("publish requires a string topic", None, None)),
        (
            "publish msgRef int",
            frame("publish", vec![("topic", s(TOPIC)), ("data", data.clone()), ("msgRef", u(1))]),
            err("msgRef must be a string", t, None),
        ),
        (
            "setFilters no topic",
            frame("setFilters", vec![("filters", arr([]))]),
            err("setFilters requires a string topic", None, None),
        ),
        (
            "presence no data",
            frame("presence", vec![("roomId", s("general"))]),
            err("presence requires data (nil to leave)", None, None),
        ),
        (
            "presence data str",
            frame("presence", vec![("roomId", s("general")), ("data", s("online"))]),
            err("presence data must be a map or nil", None, None),
        ),
        (
            "presence data array",
            frame("presence", vec![("data", arr([s("online")]))]),
            err("presence data must be a map or nil", None, None),
        ),
        (
            "presence roomId int",
            frame("presence", vec![("roomId", u(1)), ("data", data.clone())]),
            err("roomId must be a string", None, None),
        ),
        (
            "getPresence roomId bool",
            frame("getPresence", vec![("roomId", b(true))]),
            err("roomId must be a string", None, None),
        ),
        ("ack no msgId", frame("ack", vec![]), err("ack requires a string msgId", None, None)),
        ("ack msgId int", frame("ack", vec![("msgId", u(5))]), err("ack requires a string msgId", None, None)),
        (
            "batchAck no msgIds",
            frame("batchAck", vec![]),
            err("batchAck requires msgIds, a list of strings", None, None),
        ),
        (
            "batchAck msgIds str",
            frame("batchAck", vec![("msgIds", s("id1"))]),
            err("batchAck requires msgIds, a list of strings", None, None),
        ),
        (
            "batchAck non-string member",
            frame("batchAck", vec![("msgIds", arr([s("id1"), nil()]))]),
            err("batchAck requires msgIds, a list of strings", None, None),
        ),
    ];
    for ty in ["lobbySubscribe", "lobbyUnsubscribe", "getLobbyPresence"] {
        let hint: &'static str = match ty {
            "lobbySubscribe" => "lobbySubscribe requires a string lobbyId",
            "lobbyUnsubscribe" => "lobbyUnsubscribe requires a string lobbyId",
            _ => "getLobbyPresence requires a string lobbyId",
        };
        cases.push((ty, frame(ty, vec![]), err(hint, None, None)));
        cases.push((ty, frame(ty, vec![("lobbyId", u(1))]), err(hint, None, None)));
        // Context travels with the generic errors too.
        cases.push((ty, frame(ty, vec![("topic", s(TOPIC))]), err(hint, t, None)));
    }
    check(cases);
}

/// Every strict prefix of every SDK frame is undecodable (a frame is exactly one value).
#[test]
fn truncated_frames_are_undecodable() {
    for (name, _) in client_golden::cases() {
        let full = client_golden::frame(name);
        for cut in 0..full.len() {
            assert_eq!(refused(&full[..cut]), err(UNDECODABLE, None, None), "{name} cut at {cut}");
        }
    }
    for bytes in
        [&[0xde, 0x00][..], &[0xdf], &[0x81, 0xa4, b't', b'y'], &[0x81, 0xd9], &[0x81, 0xa4, b't', b'y', b'p', b'e']]
    {
        assert_eq!(refused(bytes), err(UNDECODABLE, None, None), "{bytes:02x?}");
    }
}

#[test]
fn reserved_marker_0xc1_is_undecodable_anywhere() {
    let ack = pack(&s("ack"));
    let topic = pack(&s(TOPIC));
    let cases: Vec<Vec<u8>> = vec![
        vec![0xc1],
        vec![0xc1, 0x80],
        vec![0x81, 0xc1, 0xc0],
        raw_map(&[("type", &[0xc1])]),
        raw_map(&[("type", &ack), ("msgId", &[0xc1])]),
        raw_map(&[("type", &pack(&s("publish"))), ("topic", &topic), ("data", &[0x92, 0x01, 0xc1])]),
        raw_map(&[("type", &pack(&s("publish"))), ("topic", &topic), ("data", &[0x81, 0xc1, 0x01])]),
    ];
    for bytes in cases {
        assert_eq!(refused(&bytes), err(UNDECODABLE, None, None), "{bytes:02x?}");
    }
}

#[test]
fn absurd_lengths_are_refused_without_allocating() {
    let publish = pack(&s("publish"));
    let topic = pack(&s(TOPIC));
    let huge = [0xff, 0xff, 0xff, 0xff];
    let with = |marker: u8, tail: &[u8]| [&[marker][..], &huge, tail].concat();
    assert_eq!(refused(&with(0xdf, &[])), err("frame has too many keys", None, None), "map32 of 4G entries");
    assert_eq!(refused(&with(0xdd, &[])), err("frame must be a msgpack map", None, None), "array32");
    assert_eq!(refused(&with(0xdb, b"a")), err("frame must be a msgpack map", None, None), "str32");
    for (what, value) in [
        ("str32", with(0xdb, b"abc")),
        ("bin32", with(0xc6, b"abc")),
        ("array32", with(0xdd, &[0x01, 0x02])),
        ("map32", with(0xdf, &[0x01, 0x02])),
        ("ext32", with(0xc9, &[0x05, 0x00])),
        ("str8 past the end", vec![0xd9, 200, b'a', b'b']),
        ("array16 past the end", vec![0xdc, 0xff, 0xff, 0xc0]),
    ] {
        let frame = raw_map(&[("type", &publish), ("topic", &topic), ("data", &value)]);
        assert_eq!(refused(&frame), err(UNDECODABLE, None, None), "data {what}");
    }
    let ids = with(0xdd, &pack(&s("id1")));
    let frame = raw_map(&[("type", &pack(&s("batchAck"))), ("msgIds", &ids)]);
    assert_eq!(refused(&frame), err(UNDECODABLE, None, None), "msgIds array32");
    let frame = raw_map(&[("type", &pack(&s("subscribe"))), ("topic", &topic), ("filters", &with(0xdd, &[]))]);
    assert_eq!(refused(&frame), err(UNDECODABLE, None, None), "filters array32");
}

#[test]
fn key_count_is_capped() {
    let junk: Vec<String> = (0..MAX_FRAME_KEYS).map(|i| format!("x{i}")).collect();
    let frame_with = |extra: usize| {
        let mut entries = vec![("type", pack(&s("ack"))), ("msgId", pack(&s("m1")))];
        entries.extend(junk[..extra].iter().map(|k| (k.as_str(), pack(&nil()))));
        let refs: Vec<(&str, &[u8])> = entries.iter().map(|(k, v)| (*k, v.as_slice())).collect();
        raw_map(&refs)
    };
    let at_cap = frame_with(MAX_FRAME_KEYS - 2);
    assert_eq!(decode(&at_cap), Ok(ClientFrame::Ack { msg_id: "m1".into() }), "{MAX_FRAME_KEYS} keys are fine");
    assert_eq!(refused(&frame_with(MAX_FRAME_KEYS - 1)), err("frame has too many keys", None, None));
}

#[test]
fn nesting_is_capped() {
    let nested = |depth: usize| [vec![0x91; depth], vec![0xc0]].concat();
    let frame =
        |depth| raw_map(&[("type", &pack(&s("publish"))), ("topic", &pack(&s(TOPIC))), ("data", &nested(depth))]);
    let Ok(ClientFrame::Publish(p)) = decode(&frame(MAX_DEPTH - 2)) else {
        panic!("moderate nesting is a valid payload")
    };
    assert_eq!(p.data.as_ref(), nested(MAX_DEPTH - 2).as_slice());
    assert_eq!(refused(&frame(MAX_DEPTH + 1)), err(UNDECODABLE, None, None));
    // Far deeper than any stack could recurse: still an error, not a crash.
    assert_eq!(refused(&frame(1_000_000)), err(UNDECODABLE, None, None));
}

#[test]
fn trailing_bytes_and_invalid_utf8() {
    let ack = pack(&map([("type", s("ack")), ("msgId", s("m1"))]));
    let trailing = "trailing bytes after the frame's map";
    assert_eq!(refused(&[ack.as_slice(), &[0xc0]].concat()), err(trailing, None, None));
    assert_eq!(refused(&[ack.as_slice(), ack.as_slice()].concat()), err(trailing, None, None), "two frames in one");
    assert_eq!(refused(&[0x81, 0xa2, 0xff, 0xfe, 0xc0]), err(UNDECODABLE, None, None), "key not utf-8");
    let bad_topic = raw_map(&[("type", &pack(&s("publish"))), ("topic", &[0xa2, 0xc3, 0x28]), ("data", &[0xc0])]);
    assert_eq!(refused(&bad_topic), err("publish requires a string topic", None, None));
}

/// Unknown fields and non-`str` keys are ignored (STYLE §3); a repeated key's last value wins.
#[test]
fn lenient_inputs_are_not_errors() {
    let v = Value::Map(vec![
        (u(1), s("int key")),
        (s("type"), s("ack")),
        (s("extra"), map([("nested", arr([nil()]))])),
        (Value::Binary(b"msgId".to_vec()), s("bin key is not msgId")),
        (s("msgId"), s("first")),
        (s("msgId"), s("second")),
    ]);
    assert_eq!(decode(&pack(&v)), Ok(ClientFrame::Ack { msg_id: "second".into() }));
    let v = map([("type", s("getPresence")), ("roomId", nil())]);
    assert_eq!(decode(&pack(&v)), Ok(ClientFrame::GetPresence { room_id: None }));
}

/// Invalid values in optional fields fall back to defaults (N6, qos "anything else becomes 1").
#[test]
fn junk_qos_and_protocol_version_fall_back() {
    for (qos, want) in
        [(u(0), 0), (u(2), 2), (u(3), 1), (Value::from(-1), 1), (s("2"), 1), (Value::F64(2.0), 1), (nil(), 1)]
    {
        let f = map([("type", s("publish")), ("topic", s(TOPIC)), ("data", nil()), ("qos", qos.clone())]);
        let Ok(ClientFrame::Publish(p)) = decode(&pack(&f)) else { panic!("qos {qos}") };
        assert_eq!(p.qos, want, "qos {qos}");
    }
    for (pv, want) in [(u(2), 2), (u(7), 7), (s("2"), 1), (Value::F64(2.0), 1), (nil(), 1), (b(true), 1)] {
        let f = map([("type", s("auth")), ("token", s("t")), ("protocolVersion", pv.clone())]);
        let Ok(ClientFrame::Auth(a)) = decode(&pack(&f)) else { panic!("protocolVersion {pv}") };
        assert_eq!(a.protocol_version, want, "protocolVersion {pv}");
    }
}

/// Filter problems are not decode errors: the frame decodes and carries the filter error, to be
/// reported after access checks with the exact N12 strings (N17).
#[test]
fn bad_filters_decode_and_carry_the_filter_error() {
    let sub = |filters: Value| map([("type", s("subscribe")), ("topic", s(TOPIC)), ("filters", filters)]);
    let many = arr((0..101).map(|i| s(&format!("f{i}"))));
    let hundred = arr((0..100).map(|i| s(&format!("f{i}"))));
    for (filters, want) in [
        (arr([s("a/b")]), Err(FilterError::InvalidChars)),
        (arr([s("ok"), s("")]), Err(FilterError::InvalidChars)),
        (arr([s("x|y")]), Err(FilterError::InvalidChars)),
        (arr([arr([s("solo")])]), Err(FilterError::InvalidChars)),
        (arr([u(1)]), Err(FilterError::InvalidChars)),
        (s("vip"), Err(FilterError::InvalidChars)),
        (many.clone(), Err(FilterError::TooMany)),
        (hundred, Ok(100)),
        (nil(), Ok(0)),
    ] {
        let Ok(ClientFrame::Subscribe(f)) = decode(&pack(&sub(filters.clone()))) else { panic!("{filters}") };
        assert_eq!(f.filters.map(|v| v.len()), want, "subscribe filters {filters}");
        assert_eq!(f.raw_filters.as_deref(), Some(pack(&filters).as_slice()), "raw filters kept");
    }
    let publish = |k: &str, v: Value| map([("type", s("publish")), ("topic", s(TOPIC)), ("data", nil()), (k, v)]);
    for (key, value, want) in [
        ("filter", s(""), Err(FilterError::InvalidChars)),
        ("filter", s("a#b"), Err(FilterError::InvalidChars)),
        ("filter", u(1), Err(FilterError::InvalidChars)),
        ("filters", arr([s("a"), u(1)]), Err(FilterError::InvalidChars)),
        ("filters", arr([s("Solo")]), Ok(Some("solo".to_owned()))),
        ("filters", arr([]), Ok(None)),
        ("filters", many, Err(FilterError::TooMany)),
    ] {
        let Ok(ClientFrame::Publish(p)) = decode(&pack(&publish(key, value.clone()))) else { panic!("{value}") };
        assert_eq!(p.filter, want, "publish {key} {value}");
    }
    assert_eq!(FilterError::InvalidChars.as_wire_str(), "invalid_filter_chars (/, #, +, | not allowed)");
    assert_eq!(FilterError::TooMany.as_wire_str(), "too_many_filters (max 100)");
}
