use proptest::prelude::*;

use super::*;

fn golden_publication() -> Envelope {
    Envelope::Publication(Publication {
        history: None,
        id: EnvelopeId(0x0102_0304_0506_0708_090a_0b0c_0d0e_0f10),
        topic: TopicAddress {
            room: RoomKey {
                project: ProjectId::parse("p").unwrap(),
                app: AppId::parse("a").unwrap(),
                room: "r".into(),
            },
            topic: "t".into(),
        },
        filter: Some("k|x".to_owned()),
        publisher: ActorId::parse("al").unwrap(),
        publisher_conn: ConnId(7),
        node: NodeId::parse("n1").unwrap(),
        timestamp_ms: 1_700_000_000_000,
        msg_id: None,
        retain: true,
        qos: 1,
        data: Bytes::from_static(b"\x81\xa1k\x01"),
    })
}

#[rustfmt::skip]
const GOLDEN_PUBLICATION: &[u8] = &[
    0xdc, 0x00, 0x10,                   // array16 of 16 elements
    0x01,                               // v = 1
    0x00,                               // kind = publication
    0xc4, 0x10,                         // id: bin8 of 16 bytes, big-endian u128
    0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,
    0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10,
    0xa1, b'p',                         // project
    0xa1, b'a',                         // app
    0xa1, b'r',                         // room
    0xa1, b't',                         // topic
    0xa3, b'k', b'|', b'x',             // filter key
    0xa2, b'a', b'l',                   // publisher
    0x07,                               // publisher_conn
    0xa2, b'n', b'1',                   // node
    0xcf, 0x00, 0x00, 0x01, 0x8b, 0xcf, 0xe5, 0x68, 0x00, // timestamp_ms (uint64)
    0xc0,                               // msg_id: nil
    0xc3,                               // retain: true
    0x01,                               // qos
    0xc4, 0x04, 0x81, 0xa1, b'k', 0x01, // data: bin8 holding the packed bytes untouched
];

#[rustfmt::skip]
const GOLDEN_PRESENCE: &[u8] = &[
    0x99,                               // fixarray of 9 elements
    0x01, 0x01,                         // v = 1, kind = presence
    0xa1, b'p', 0xa1, b'a', 0xa1, b'r', // project, app, room
    0xa2, b'a', b'l',                   // actor
    0x02,                               // change = leave
    0xa2, b'n', b'1',                   // node
    0xc4, 0x00,                         // data: empty bin8
];

fn golden_presence() -> Envelope {
    Envelope::Presence(PresenceEvent {
        room: RoomKey { project: ProjectId::parse("p").unwrap(), app: AppId::parse("a").unwrap(), room: "r".into() },
        actor: ActorId::parse("al").unwrap(),
        change: PresenceChange::Leave,
        data: Bytes::new(),
        node: NodeId::parse("n1").unwrap(),
        persistent: None,
    })
}

#[rustfmt::skip]
const GOLDEN_TAKEOVER: &[u8] = &[
    0x98,                               // fixarray of 8 elements
    0x01, 0x02,                         // v = 1, kind = takeover
    0xc4, 0x10,                         // id: bin8 of 16 bytes
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2a,
    0xa2, b'n', b'1',                   // sending node
    0xa1, b'p',                         // project
    0xa1, b'w',                         // actor
    0xa2, b'c', b'1',                   // clientId
    0x07,                               // claiming connection
];

fn golden_takeover() -> Envelope {
    Envelope::Control(Control {
        id: EnvelopeId(42),
        node: NodeId::parse("n1").unwrap(),
        message: ControlMessage::Takeover {
            session: SessionKey {
                project: ProjectId::parse("p").unwrap(),
                actor: ActorId::parse("w").unwrap(),
                client_id: Some(ClientId::parse("c1").unwrap()),
            },
            conn: ConnId(7),
        },
    })
}

#[rustfmt::skip]
const GOLDEN_KICK: &[u8] = &[
    0x9b,                               // fixarray of 11 elements
    0x01, 0x03,                         // v = 1, kind = kick
    0xc4, 0x10,                         // id: bin8 of 16 bytes
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2b,
    0xa2, b'n', b'1',                   // sending node
    0xa1, b'p', 0xa1, b'a', 0xa1, b'r', // project, app, room
    0xa1, b't',                         // topic
    0x01,                               // consumer = group
    0xa1, b'g',                         // group name
    0xc0,                               // clientId: nil
];

fn golden_kick() -> Envelope {
    let topic = TopicAddress {
        room: RoomKey { project: ProjectId::parse("p").unwrap(), app: AppId::parse("a").unwrap(), room: "r".into() },
        topic: "t".into(),
    };
    Envelope::Control(Control {
        id: EnvelopeId(43),
        node: NodeId::parse("n1").unwrap(),
        message: ControlMessage::Kick { consumer: ConsumerId::group(&GroupKey { topic, group: "g".into() }) },
    })
}

#[test]
fn encoding_is_pinned() {
    assert_eq!(encode(&golden_publication()), GOLDEN_PUBLICATION);
    assert_eq!(encode(&golden_presence()), GOLDEN_PRESENCE);
    assert_eq!(encode(&golden_takeover()), GOLDEN_TAKEOVER);
    assert_eq!(encode(&golden_kick()), GOLDEN_KICK);
    assert_eq!(decode(&Bytes::from_static(GOLDEN_PUBLICATION)), Ok(golden_publication()));
    assert_eq!(decode(&Bytes::from_static(GOLDEN_PRESENCE)), Ok(golden_presence()));
    assert_eq!(decode(&Bytes::from_static(GOLDEN_TAKEOVER)), Ok(golden_takeover()));
    assert_eq!(decode(&Bytes::from_static(GOLDEN_KICK)), Ok(golden_kick()));
}

#[test]
fn a_kick_names_the_consumer_the_store_knows() {
    let Ok(Envelope::Control(c)) = decode(&Bytes::from_static(GOLDEN_KICK)) else { panic!("decodes") };
    let ControlMessage::Kick { consumer } = c.message else { panic!("a kick") };
    assert_eq!(consumer.as_str(), "g/p/a/r/t/g");
}

#[test]
fn a_trace_context_is_appended_and_read_back() {
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let traced = encode_traced(&golden_publication(), Some(tp));
    assert_eq!(traced[..3], [0xdc, 0x00, 17], "one element more than version 1's 16");
    assert_eq!(decode_traced(&Bytes::from(traced.clone())), Ok((golden_publication(), Some(tp.to_owned()))));
    assert_eq!(decode(&Bytes::from(traced)), Ok(golden_publication()), "plain decoders skip it");
    assert_eq!(decode_traced(&Bytes::from_static(GOLDEN_PUBLICATION)), Ok((golden_publication(), None)));
    assert_eq!(encode_traced(&golden_presence(), Some(tp)), GOLDEN_PRESENCE, "presence events carry none");
}

#[test]
fn data_is_a_slice_of_the_packet() {
    let payload = Bytes::from_static(GOLDEN_PUBLICATION);
    let Ok(Envelope::Publication(p)) = decode(&payload) else { panic!("decodes") };
    let offset = p.data.as_ptr() as usize - payload.as_ptr() as usize;
    assert_eq!(offset, GOLDEN_PUBLICATION.len() - 4);
}

#[test]
fn large_data_uses_wider_bin_headers() {
    for n in [255, 256, 65_535, 65_536, 921_600] {
        let Envelope::Publication(mut p) = golden_publication() else { unreachable!() };
        p.data = Bytes::from(vec![0xc1; n]);
        let envelope = Envelope::Publication(p);
        assert_eq!(decode(&Bytes::from(encode(&envelope))), Ok(envelope), "{n} bytes");
    }
}

#[test]
fn foreign_payloads_are_refused() {
    let decode = |b: &[u8]| decode(&Bytes::copy_from_slice(b));
    assert_eq!(decode(&[0x92, 0x02, 0x00]), Err(DecodeError::Version(2)));
    assert_eq!(decode(&[0x92, 0x01, 0x05]), Err(DecodeError::Kind(5)));
    assert_eq!(decode(&[0x92, 0x01, 0x02]), Err(DecodeError::Short { got: 2, need: 8 }));
    assert_eq!(decode(&[0x92, 0x01, 0x03]), Err(DecodeError::Short { got: 2, need: 11 }));
    let mut bad_consumer = GOLDEN_KICK.to_vec();
    let at = bad_consumer.len() - 4;
    bad_consumer[at] = 0x02;
    assert_eq!(decode(&bad_consumer), Err(DecodeError::Field("consumer")));
    let mut group_with_client = GOLDEN_KICK.to_vec();
    group_with_client.pop();
    group_with_client.extend_from_slice(&[0xa1, b'c']);
    assert_eq!(decode(&group_with_client), Err(DecodeError::Field("group clientId")));
    assert_eq!(decode(&[0x92, 0x01, 0x00]), Err(DecodeError::Short { got: 2, need: 16 }));
    assert_eq!(decode(&[]), Err(DecodeError::Msgpack(ReadError::Truncated)));
    assert_eq!(decode(b"{\"json\":1}"), Err(DecodeError::Msgpack(ReadError::Type)));
    let mut bad_qos = GOLDEN_PUBLICATION.to_vec();
    let at = bad_qos.len() - 7;
    bad_qos[at] = 0x03;
    assert_eq!(decode(&bad_qos), Err(DecodeError::Field("qos")));
    assert!(matches!(decode(&GOLDEN_PUBLICATION[..GOLDEN_PUBLICATION.len() - 1]), Err(DecodeError::Msgpack(_))));
}

#[test]
fn extra_trailing_elements_are_skipped() {
    // Elements 9 and 10 of a presence event are a persistent member's status and version (N46);
    // what follows them is skipped.
    let mut longer = GOLDEN_PRESENCE.to_vec();
    longer[0] = 0x9d; // 13 elements
    longer.extend_from_slice(&[0x01, 0x05, 0xa1, b'x', 0x81, 0x01, 0x02]);
    let mut expected = golden_presence();
    if let Envelope::Presence(e) = &mut expected {
        e.persistent =
            Some(skua_core::Persistence { status: skua_core::MemberStatus::Offline, advertisement_version: 5 });
    }
    assert_eq!(decode(&Bytes::from(longer)), Ok(expected));
    let mut longer = GOLDEN_TAKEOVER.to_vec();
    longer[0] = 0x99; // 9 elements
    longer.push(0xc0);
    assert_eq!(decode(&Bytes::from(longer)), Ok(golden_takeover()));
}

fn slug() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_-]{1,64}"
}

fn room_key() -> impl Strategy<Value = RoomKey> {
    (slug(), slug(), "\\PC{1,40}").prop_map(|(p, a, r)| RoomKey {
        project: ProjectId::parse(&p).unwrap(),
        app: AppId::parse(&a).unwrap(),
        room: r.into(),
    })
}

fn publication_strategy() -> impl Strategy<Value = Envelope> {
    publication_with_data(70_000)
}

fn publication_with_data(max: usize) -> impl Strategy<Value = Envelope> {
    (
        (any::<u128>(), room_key(), "\\PC{1,40}", proptest::option::of("\\PC{0,40}"), slug()),
        (any::<u64>(), slug(), any::<u64>(), proptest::option::of("\\PC{0,40}"), any::<bool>(), 0u8..=2),
        proptest::collection::vec(any::<u8>(), 0..max),
    )
        .prop_map(|((id, room, topic, filter, publisher), (conn, node, ts, msg_id, retain, qos), data)| {
            Envelope::Publication(Publication {
                history: None,
                id: EnvelopeId(id),
                topic: TopicAddress { room, topic: topic.into() },
                filter,
                publisher: ActorId::parse(&publisher).unwrap(),
                publisher_conn: ConnId(conn),
                node: NodeId::parse(&node).unwrap(),
                timestamp_ms: ts,
                msg_id,
                retain,
                qos,
                data: data.into(),
            })
        })
}

fn presence_strategy() -> impl Strategy<Value = Envelope> {
    (
        room_key(),
        slug(),
        0u8..4,
        slug(),
        proptest::collection::vec(any::<u8>(), 0..300),
        proptest::option::of((0u8..3, any::<u64>())),
    )
        .prop_map(|(room, actor, change, node, data, persistent)| {
            Envelope::Presence(PresenceEvent {
                room,
                actor: ActorId::parse(&actor).unwrap(),
                change: [PresenceChange::Join, PresenceChange::Update, PresenceChange::Leave, PresenceChange::Waking]
                    [usize::from(change)],
                data: data.into(),
                node: NodeId::parse(&node).unwrap(),
                persistent: persistent.map(|(status, advertisement_version)| skua_core::Persistence {
                    status: [
                        skua_core::MemberStatus::Online,
                        skua_core::MemberStatus::Offline,
                        skua_core::MemberStatus::Waking,
                    ][usize::from(status)],
                    advertisement_version,
                }),
            })
        })
}

fn session_key() -> impl Strategy<Value = SessionKey> {
    (slug(), slug(), proptest::option::of(slug())).prop_map(|(p, a, c)| SessionKey {
        project: ProjectId::parse(&p).unwrap(),
        actor: ActorId::parse(&a).unwrap(),
        client_id: c.map(|c| ClientId::parse(&c).unwrap()),
    })
}

fn topic_address() -> impl Strategy<Value = TopicAddress> {
    (room_key(), "\\PC{1,40}").prop_map(|(room, t): (RoomKey, String)| TopicAddress { room, topic: t.into() })
}

fn control_strategy() -> impl Strategy<Value = Envelope> {
    let message = prop_oneof![
        (session_key(), any::<u64>())
            .prop_map(|(session, conn)| ControlMessage::Takeover { session, conn: ConnId(conn) }),
        (topic_address(), session_key())
            .prop_map(|(t, s)| ControlMessage::Kick { consumer: ConsumerId::session(&t, &s) }),
        (topic_address(), "\\PC{1,40}").prop_map(|(topic, g): (TopicAddress, String)| ControlMessage::Kick {
            consumer: ConsumerId::group(&GroupKey { topic, group: g.into() })
        }),
    ];
    (any::<u128>(), slug(), message).prop_map(|(id, node, message): (u128, String, ControlMessage)| {
        Envelope::Control(Control { id: EnvelopeId(id), node: NodeId::parse(&node).unwrap(), message })
    })
}

/// A property's number of cases: `PROPTEST_CASES` when set (a longer fuzz pass,
/// docs/security.md), otherwise `default`, chosen to keep CI fast.
fn config(default: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}

/// A small envelope to mutate, with or without a trace context.
fn small_envelope() -> impl Strategy<Value = (Envelope, Option<String>)> {
    (
        prop_oneof![publication_with_data(64), presence_strategy(), control_strategy()],
        proptest::option::of("[0-9a-f-]{0,60}"),
    )
}

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn envelopes_round_trip(envelope in prop_oneof![publication_strategy(), presence_strategy(), control_strategy()]) {
        prop_assert_eq!(decode(&Bytes::from(encode(&envelope))), Ok(envelope));
    }
}

/// What every decoded payload must satisfy (issue 35: more than "no panic"): its `data` is a
/// slice of the packet, never a copy, and it re-encodes to bytes that decode to it again.
fn accepted_is_stable(bytes: &Bytes) -> Result<(), TestCaseError> {
    if let Ok((got, tp)) = decode_traced(bytes) {
        let data = match &got {
            Envelope::Publication(p) => p.data.clone(),
            Envelope::Presence(e) => e.data.clone(),
            Envelope::Control(_) => Bytes::new(),
        };
        let start = data.as_ptr() as usize;
        let base = bytes.as_ptr() as usize;
        prop_assert!(data.is_empty() || (start >= base && start + data.len() <= base + bytes.len()), "data copied");
        let again = Bytes::from(encode_traced(&got, tp.as_deref()));
        prop_assert_eq!(decode_traced(&again), Ok((got, tp)));
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(1024))]

    /// Arbitrary bytes: what is not a MessagePack array is refused, `decode` agrees with
    /// `decode_traced`, and whatever is accepted is stable.
    #[test]
    fn arbitrary_bytes_are_refused_unless_an_array_and_stable_when_accepted(
        bytes in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        let array = bytes.first().is_some_and(|b| matches!(b, 0x90..=0x9f | 0xdc | 0xdd));
        let bytes = Bytes::from(bytes);
        let got = decode_traced(&bytes);
        if !array {
            prop_assert!(got.is_err(), "accepted what is not an array: {got:?}");
        }
        prop_assert_eq!(decode(&bytes), got.map(|(e, _)| e));
        accepted_is_stable(&bytes)?;
    }

    /// The golden publication with one byte replaced: the same byte gives the same envelope;
    /// any other is refused or decodes to a stable envelope.
    #[test]
    fn a_damaged_envelope_is_refused_or_stable(at in 0usize..60, byte in any::<u8>()) {
        let mut bytes = GOLDEN_PUBLICATION.to_vec();
        let at = at % bytes.len();
        let unchanged = bytes[at] == byte;
        bytes[at] = byte;
        let bytes = Bytes::from(bytes);
        if unchanged {
            prop_assert_eq!(decode(&bytes), Ok(golden_publication()));
        }
        accepted_is_stable(&bytes)?;
    }

    /// Random elements after a valid envelope header get past the version and kind checks: an
    /// unknown kind and an array shorter than its kind's fields are refused as such, and
    /// whatever is accepted is stable.
    #[test]
    fn random_fields_after_a_valid_header_are_refused_or_stable(
        len in prop_oneof![Just(8u16), Just(9), Just(11), Just(16), Just(17), any::<u16>()],
        kind in 0u8..5,
        tail in proptest::collection::vec(any::<u8>(), 0..160),
    ) {
        let [hi, lo] = len.to_be_bytes();
        let bytes = Bytes::from([&[0xdc, hi, lo, 0x01, kind][..], &tail].concat());
        let got = decode_traced(&bytes);
        let need = match u64::from(kind) {
            KIND_PUBLICATION => Some(PUBLICATION_LEN),
            KIND_PRESENCE => Some(PRESENCE_LEN),
            KIND_TAKEOVER => Some(TAKEOVER_LEN),
            KIND_KICK => Some(KICK_LEN),
            _ => None,
        };
        match need {
            None => prop_assert!(matches!(got, Err(DecodeError::Kind(k)) if k == i128::from(kind)), "{got:?}"),
            Some(need) if usize::from(len) < need => {
                prop_assert!(matches!(got, Err(DecodeError::Short { got: g, need: n }) if g == usize::from(len) && n == need), "{got:?}");
            }
            Some(_) => accepted_is_stable(&bytes)?,
        }
    }

    #[test]
    fn traced_publications_round_trip((envelope, tp) in small_envelope()) {
        let got = decode_traced(&Bytes::from(encode_traced(&envelope, tp.as_deref())));
        let tp = tp.filter(|_| matches!(envelope, Envelope::Publication(_)));
        prop_assert_eq!(got, Ok((envelope, tp)));
    }

    /// A mutated envelope (bytes edited, cut or duplicated; a length field inflated up to
    /// `u32::MAX` or deflated) is refused, or decodes to an envelope that re-encodes to
    /// itself and whose `data` is a slice of the packet.
    #[test]
    fn mutated_envelopes_decode_or_are_refused(
        (envelope, tp) in small_envelope(),
        edits in proptest::collection::vec(mutate::edit(), 1..=4),
    ) {
        let bytes = Bytes::from(mutate::apply(&encode_traced(&envelope, tp.as_deref()), &edits));
        accepted_is_stable(&bytes)?;
    }
}

/// Structure-aware mutations (a copy of crates/protocol/tests/it/properties/mutate.rs, which
/// this crate's unit tests cannot reach): byte edits and rewritten length headers.
mod mutate {
    use proptest::prelude::*;
    use proptest::sample::Index;
    use skua_protocol::msgpack::{Kind, Reader};

    #[derive(Debug, Clone)]
    pub enum Edit {
        Set(Index, u8),
        Insert(Index, u8),
        Remove(Index),
        Truncate(Index),
        /// Rewrite one length header (32-bit form) to declare this many bytes or elements.
        SetLen(Index, u32),
    }

    pub fn edit() -> impl Strategy<Value = Edit> {
        let len = prop_oneof![0u32..300, Just(0xffff), Just(0x7fff_ffff), Just(u32::MAX)];
        prop_oneof![
            3 => (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Edit::Set(i, b)),
            1 => (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Edit::Insert(i, b)),
            1 => any::<Index>().prop_map(Edit::Remove),
            1 => any::<Index>().prop_map(Edit::Truncate),
            3 => (any::<Index>(), len).prop_map(|(i, n)| Edit::SetLen(i, n)),
        ]
    }

    /// (offset, header size, marker of the 32-bit form) of every length header, in order.
    fn headers(bytes: &[u8]) -> Vec<(usize, usize, u8)> {
        fn header(m: u8) -> Option<(usize, u8)> {
            Some(match m {
                0x80..=0x8f => (1, 0xdf),
                0x90..=0x9f => (1, 0xdd),
                0xa0..=0xbf => (1, 0xdb),
                0xd9 => (2, 0xdb),
                0xc4 => (2, 0xc6),
                0xc7 => (2, 0xc9),
                0xda => (3, 0xdb),
                0xc5 => (3, 0xc6),
                0xc8 => (3, 0xc9),
                0xdc => (3, 0xdd),
                0xde => (3, 0xdf),
                0xdb | 0xc6 | 0xc9 | 0xdd | 0xdf => (5, m),
                _ => return None,
            })
        }
        fn walk(r: &mut Reader<'_>, bytes: &[u8], out: &mut Vec<(usize, usize, u8)>, depth: usize) -> Option<()> {
            let at = r.position();
            let kind = r.peek_kind().ok()?;
            // A header cut short by the end of the input is not rewritten.
            if let Some((size, wide)) = header(bytes[at]).filter(|(size, _)| at + size <= bytes.len()) {
                out.push((at, size, wide));
            }
            let n = match kind {
                Kind::Map => r.read_map_len().ok()? * 2,
                Kind::Array => r.read_array_len().ok()?,
                _ => return r.skip_value().ok().map(|_| ()),
            };
            for _ in 0..n {
                if depth < 80 {
                    walk(r, bytes, out, depth + 1)?;
                }
            }
            Some(())
        }
        let mut out = Vec::new();
        let _ = walk(&mut Reader::new(bytes), bytes, &mut out, 0);
        out
    }

    pub fn apply(bytes: &[u8], edits: &[Edit]) -> Vec<u8> {
        let mut b = bytes.to_vec();
        for e in edits {
            match *e {
                Edit::Set(i, v) if !b.is_empty() => {
                    let i = i.index(b.len());
                    b[i] = v;
                }
                Edit::Insert(i, v) => {
                    let i = i.index(b.len() + 1);
                    b.insert(i, v);
                }
                Edit::Remove(i) if !b.is_empty() => {
                    let i = i.index(b.len());
                    b.remove(i);
                }
                Edit::Truncate(i) => {
                    let i = i.index(b.len() + 1);
                    b.truncate(i);
                }
                Edit::SetLen(i, n) => {
                    let hs = headers(&b);
                    if !hs.is_empty() {
                        let (at, size, wide) = hs[i.index(hs.len())];
                        b.splice(at..at + size, [&[wide][..], &n.to_be_bytes()].concat());
                    }
                }
                _ => {}
            }
        }
        b
    }

    #[test]
    fn headers_are_found() {
        // [1, "ab", bin8(1)]
        let bytes = [0x93, 0x01, 0xa2, b'a', b'b', 0xc4, 0x01, 0x00];
        assert_eq!(headers(&bytes), [(0, 1, 0xdd), (2, 1, 0xdb), (5, 2, 0xc6)]);
        // A bin16 header cut after its first length byte.
        assert_eq!(headers(&[0x91, 0xc5, 0x00]), [(0, 1, 0xdd)]);
    }
}
