//! The MQTT decoder under hostile input (issue 37): random bytes, and valid packets mutated
//! and cut, fed to both protocol levels. Every input either waits for more bytes, yields
//! packets, or is refused with a defined [`Fault`] (the connection's close reason); nothing
//! panics, not even inside rumqttc (a panic hook counts what `catch_unwind` would hide), and
//! nothing larger than the packet bound is ever waited for.

use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::{BufMut, BytesMut};
use proptest::prelude::*;
use skua_mqtt::MqttLimits;
use skua_mqtt::codec::{self, Fault, Level};

/// The largest packet accepted in these tests.
const MAX: usize = 4096;

static PANICS: AtomicUsize = AtomicUsize::new(0);

fn count_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            previous(info);
        }));
    });
}

fn defined(f: Fault) -> bool {
    matches!(f.reason(), 0x81 | 0x82 | 0x84 | 0x94 | 0x95)
}

/// Feeds `input` as a connection would: the CONNECT first, then packets, in chunks of `chunk`,
/// within the default limits.
fn feed(input: &[u8], chunk: usize) -> Result<usize, Fault> {
    feed_within(input, chunk, &MqttLimits::default())
}

/// [`feed`] within `limits`.
fn feed_within(input: &[u8], chunk: usize, limits: &MqttLimits) -> Result<usize, Fault> {
    let mut buf = BytesMut::new();
    let mut level = None;
    let mut packets = 0;
    for part in input.chunks(chunk.max(1)) {
        buf.put_slice(part);
        loop {
            let before = buf.len();
            match level {
                None => match codec::read_connect(&mut buf, MAX, limits)? {
                    Some(c) => {
                        level = Some(c.level);
                        packets += 1;
                    }
                    None => break,
                },
                Some(l) => match codec::read(&mut buf, l, MAX, limits)? {
                    Some(_) => packets += 1,
                    None => break,
                },
            }
            assert!(buf.len() < before, "a packet was read without consuming input");
        }
        // Waiting for more: never for more than one packet's bound plus its header.
        assert!(buf.len() <= MAX + 5, "{} bytes buffered", buf.len());
    }
    Ok(packets)
}

fn varint(mut n: usize, out: &mut Vec<u8>) {
    loop {
        let b = (n % 128) as u8;
        n /= 128;
        out.push(if n > 0 { b | 0x80 } else { b });
        if n == 0 {
            break;
        }
    }
}

fn packet(first: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![first];
    varint(body.len(), &mut out);
    out.extend_from_slice(body);
    out
}

fn string(s: &[u8]) -> Vec<u8> {
    let mut out = u16::try_from(s.len()).unwrap().to_be_bytes().to_vec();
    out.extend_from_slice(s);
    out
}

/// A valid session: CONNECT, SUBSCRIBE, PUBLISH (QoS 0-2), PUBREL, UNSUBSCRIBE, PINGREQ,
/// DISCONNECT, at `level`.
fn session(level: u8) -> Vec<u8> {
    let v5 = level == 5;
    let props: &[u8] = if v5 { &[0] } else { &[] };
    let mut connect = string(b"MQTT");
    connect.extend_from_slice(&[level, 0xC2, 0, 30]);
    connect.extend_from_slice(props);
    connect.extend(string(b"dev"));
    connect.extend(string(b"device"));
    connect.extend(string(b"dev-token-carol"));
    let mut out = packet(0x10, &connect);
    let mut sub = vec![0, 1];
    sub.extend_from_slice(props);
    sub.extend(string(b"demo/general/+"));
    sub.push(1);
    out.extend(packet(0x82, &sub));
    for qos in 0..3u8 {
        let mut p = string(b"demo/general/messages");
        if qos > 0 {
            p.extend_from_slice(&[0, 2 + qos]);
        }
        p.extend_from_slice(props);
        p.extend_from_slice(&[0x81, 0xa1, b'a', 0x01]);
        out.extend(packet(0x30 | (qos << 1), &p));
    }
    out.extend(packet(0x62, &[0, 4]));
    let mut unsub = vec![0, 5];
    unsub.extend_from_slice(props);
    unsub.extend(string(b"demo/general/+"));
    out.extend(packet(0xA2, &unsub));
    out.extend(packet(0xC0, &[]));
    out.extend(packet(0xE0, &[]));
    out
}

#[test]
fn valid_sessions_decode_whole_at_every_chunk_size() {
    for level in [4, 5] {
        let s = session(level);
        for chunk in [1, 2, 3, 7, 64, s.len()] {
            assert_eq!(feed(&s, chunk), Ok(9), "level {level}, chunk {chunk}");
        }
    }
}

#[test]
fn bounds_are_enforced_from_the_header() {
    // A PUBLISH announcing more than the bound is refused before its body arrives.
    let mut s = session(4);
    let mut big = vec![0x30];
    varint(MAX + 1, &mut big);
    s.extend_from_slice(&big);
    assert_eq!(feed(&s, 5), Err(Fault::TooLarge));
    // Five length bytes: malformed.
    let mut s = session(5);
    s.extend_from_slice(&[0x30, 0xff, 0xff, 0xff, 0xff, 0x7f]);
    assert!(matches!(feed(&s, 64), Err(Fault::Malformed(_))));
    let limits = MqttLimits::default();
    // A topic over the default mqtt_max_topic_bytes.
    let mut s = session(4);
    let mut p = string(&vec![b'a'; limits.max_topic_bytes + 1]);
    p.push(1);
    s.extend(packet(0x30, &p));
    assert!(matches!(feed(&s, 4096), Err(Fault::Malformed(_))));
    // More filters than the default mqtt_max_filters.
    let mut s = session(4);
    let mut sub = vec![0, 9];
    for _ in 0..=limits.max_filters {
        sub.extend(string(b"a/b/c"));
        sub.push(0);
    }
    s.extend(packet(0x82, &sub));
    assert!(matches!(feed(&s, 4096), Err(Fault::Malformed(_))));
    // Another protocol level.
    let mut connect = string(b"MQTT");
    connect.extend_from_slice(&[3, 2, 0, 0]);
    connect.extend(string(b""));
    assert_eq!(feed(&packet(0x10, &connect), 64), Err(Fault::Version(3)));
}

/// A CONNECT of `level` with client identifier `id` and, at 5.0, `props` user properties.
fn connect_with(level: u8, id: &[u8], props: usize) -> Vec<u8> {
    let mut connect = string(b"MQTT");
    connect.extend_from_slice(&[level, 0xC2, 0, 30]);
    if level == 5 {
        connect.extend(user_properties(props));
    }
    connect.extend(string(id));
    connect.extend(string(b"device"));
    connect.extend(string(b"dev-token-carol"));
    packet(0x10, &connect)
}

/// A 5.0 property block of `n` user properties.
fn user_properties(n: usize) -> Vec<u8> {
    let mut props = Vec::new();
    for _ in 0..n {
        props.push(0x26);
        props.extend(string(b"k"));
        props.extend(string(b"v"));
    }
    let mut out = Vec::new();
    varint(props.len(), &mut out);
    out.extend(props);
    out
}

/// A QoS 0 `PUBLISH` of `topic` at `level`.
fn publish(level: u8, topic: &[u8]) -> Vec<u8> {
    let mut p = string(topic);
    if level == 5 {
        p.push(0);
    }
    p.push(1);
    packet(0x30, &p)
}

/// A `SUBSCRIBE` of `n` filters at `level`.
fn subscribe(level: u8, n: usize) -> Vec<u8> {
    let mut sub = vec![0, 9];
    if level == 5 {
        sub.push(0);
    }
    for _ in 0..n {
        sub.extend(string(b"a/b/c"));
        sub.push(0);
    }
    packet(0x82, &sub)
}

#[test]
fn configured_limits_are_the_ones_enforced() {
    // Each limit lowered (as `mqtt_*` settings would): at the limit passes, one more is refused.
    let limits = MqttLimits {
        max_topic_bytes: 16,
        max_filters: 2,
        max_user_properties: 1,
        max_client_id_bytes: 23,
        receive_maximum: 1,
        max_inflight: 1,
    };
    for level in [4u8, 5] {
        let at = |tail: Vec<u8>| [connect_with(level, b"dev", 0), tail].concat();
        assert_eq!(feed_within(&at(publish(level, &[b'a'; 16])), 7, &limits), Ok(2), "level {level}");
        assert_eq!(
            feed_within(&at(publish(level, &[b'a'; 17])), 7, &limits),
            Err(Fault::Malformed("topic longer than the limit")),
            "level {level}"
        );
        // The default limits take the same 17 bytes.
        assert_eq!(feed(&at(publish(level, &[b'a'; 17])), 7), Ok(2), "level {level}");
        assert_eq!(feed_within(&at(subscribe(level, 2)), 7, &limits), Ok(2), "level {level}");
        assert_eq!(
            feed_within(&at(subscribe(level, 3)), 7, &limits),
            Err(Fault::Malformed("too many filters")),
            "level {level}"
        );
        assert_eq!(feed_within(&connect_with(level, &[b'd'; 23], 0), 7, &limits), Ok(1), "level {level}");
        assert_eq!(
            feed_within(&connect_with(level, &[b'd'; 24], 0), 7, &limits),
            Err(Fault::Malformed("client identifier longer than the limit")),
            "level {level}"
        );
        assert_eq!(feed(&connect_with(level, &[b'd'; 24], 0), 7), Ok(1), "level {level}");
    }
    assert_eq!(feed_within(&connect_with(5, b"dev", 1), 7, &limits), Ok(1));
    assert_eq!(feed_within(&connect_with(5, b"dev", 2), 7, &limits), Err(Fault::Malformed("too many user properties")));
    assert_eq!(feed(&connect_with(5, b"dev", 2), 7), Ok(1));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(input in proptest::collection::vec(any::<u8>(), 0..600), chunk in 1usize..64) {
        count_panics();
        let before = PANICS.load(Ordering::SeqCst);
        if let Err(f) = feed(&input, chunk) {
            prop_assert!(defined(f), "{f:?}");
        }
        prop_assert_eq!(PANICS.load(Ordering::SeqCst), before, "the decoder panicked on {:?}", input);
    }

    #[test]
    fn random_bytes_after_a_connect_never_panic(
        level in prop_oneof![Just(4u8), Just(5u8)],
        tail in proptest::collection::vec(any::<u8>(), 0..600),
        chunk in 1usize..64,
    ) {
        count_panics();
        let before = PANICS.load(Ordering::SeqCst);
        let s = session(level);
        // The CONNECT alone (its length is the second byte: it is short), then noise.
        let mut input = s[..2 + usize::from(s[1])].to_vec();
        input.extend_from_slice(&tail);
        if let Err(f) = feed(&input, chunk) {
            prop_assert!(defined(f), "{f:?}");
        }
        prop_assert_eq!(PANICS.load(Ordering::SeqCst), before, "the decoder panicked on {:?}", input);
    }

    #[test]
    fn mutated_sessions_never_panic(
        level in prop_oneof![Just(4u8), Just(5u8)],
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
        cut in any::<usize>(),
        chunk in 1usize..64,
    ) {
        count_panics();
        let before = PANICS.load(Ordering::SeqCst);
        let mut s = session(level);
        for (at, byte) in edits {
            let i = at % s.len();
            s[i] = byte;
        }
        s.truncate(cut % (s.len() + 1));
        if let Err(f) = feed(&s, chunk) {
            prop_assert!(defined(f), "{f:?}");
        }
        prop_assert_eq!(PANICS.load(Ordering::SeqCst), before, "the decoder panicked on {:?}", s);
    }
}

#[test]
fn a_level_is_fixed_by_connect() {
    // The same PUBLISH bytes mean different things at each level (5.0 has a property length).
    let bytes = [0x30u8, 0x06, 0, 1, b'a', 0, b'x', b'y'];
    let four = codec::read(&mut BytesMut::from(&bytes[..]), Level::V4, MAX, &MqttLimits::default()).unwrap().unwrap();
    let five = codec::read(&mut BytesMut::from(&bytes[..]), Level::V5, MAX, &MqttLimits::default()).unwrap().unwrap();
    assert_ne!(four, five);
}
