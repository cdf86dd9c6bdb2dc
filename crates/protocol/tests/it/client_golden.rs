//! Client frames as the NoLag Python SDK sends them (`msgpack.packb`, default options), written
//! by `tests/fixtures/gen_client_fixtures.py`, decoded into exactly the expected typed value.
//! Publish and presence payloads must come out byte-identical to `msgpack.packb(data)`, which the
//! script stores next to the frame as `<name>.data.hex` (N2).

use std::collections::BTreeSet;

use bytes::Bytes;
use rmpv::Value;
use skua_protocol::{AuthFrame, ClientFrame, ClientIdField, FilterSpec, PublishFrame, SubscribeFrame};

use crate::fixtures::{self, CLIENT};
use crate::shape::{arr, check_keys, decode_exact, field, pack, s};

const TOPIC: &str = "demo/general/messages";
const TOKEN: &str = "at_live_k3y1d.s3cr3t";
const MSG_ID: &str = "0190a5f2-7c1e-7d3a-9b2f-4c8e1a2b3c4d";

/// `msgpack.packb(frame["data"])` as the script stored it.
fn data(name: &str) -> Bytes {
    Bytes::from(fixtures::read(CLIENT, &format!("{name}.data")))
}

fn packed(v: &Value) -> Option<Bytes> {
    Some(Bytes::from(pack(v)))
}

fn auth(protocol_version: u32, reconnect: bool, client_id: ClientIdField) -> ClientFrame {
    ClientFrame::Auth(AuthFrame { token: TOKEN.into(), protocol_version, reconnect, client_id })
}

fn publish(name: &str) -> PublishFrame {
    PublishFrame {
        topic: TOPIC.into(),
        data: data(name),
        qos: 1,
        retain: false,
        filter: Ok(None),
        msg_ref: None,
        idempotency_key: None,
    }
}

fn or(v: &str) -> FilterSpec {
    FilterSpec::Or(v.into())
}

fn and(key: &str) -> FilterSpec {
    FilterSpec::And(key.into())
}

/// Every client fixture and the frame it must decode to.
#[allow(clippy::too_many_lines)] // one flat table of cases
pub fn cases() -> Vec<(&'static str, ClientFrame)> {
    let plain_sub = SubscribeFrame {
        topic: TOPIC.into(),
        qos: 1,
        filters: Ok(vec![]),
        raw_filters: None,
        load_balance: false,
        load_balance_group: None,
        since: None,
    };
    vec![
        ("auth_v2_reconnect", auth(2, true, ClientIdField::Given("worker-1".into()))),
        ("auth_v2_fresh", auth(2, false, ClientIdField::Absent)),
        ("auth_v2_client_id_none", auth(2, false, ClientIdField::Absent)),
        ("auth_v1", auth(1, false, ClientIdField::Absent)),
        ("reauth", ClientFrame::Reauth { token: "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhY3Rvcl8xMjMifQ.c2ln".into() }),
        ("subscribe_plain", ClientFrame::Subscribe(plain_sub.clone())),
        (
            "subscribe_sdk_defaults",
            ClientFrame::Subscribe(SubscribeFrame { raw_filters: packed(&arr([])), ..plain_sub.clone() }),
        ),
        (
            "subscribe_qos_filters",
            ClientFrame::Subscribe(SubscribeFrame {
                qos: 2,
                // OR strings verbatim, the AND group lowercased and sorted (N12).
                filters: Ok(vec![or("VIP"), and("region:eu|tier:gold"), or("lang:en")]),
                raw_filters: packed(&arr([s("VIP"), arr([s("Region:EU"), s("tier:gold")]), s("lang:en")])),
                ..plain_sub.clone()
            }),
        ),
        (
            "subscribe_load_balanced",
            ClientFrame::Subscribe(SubscribeFrame {
                topic: "demo/jobs/tasks".into(),
                qos: 0,
                load_balance: true,
                load_balance_group: Some("task-workers".into()),
                ..plain_sub
            }),
        ),
        ("unsubscribe", ClientFrame::Unsubscribe { topic: TOPIC.into() }),
        (
            "set_filters",
            ClientFrame::SetFilters {
                topic: TOPIC.into(),
                filters: Ok(vec![or("lang:en"), and("a|b")]),
                raw_filters: packed(&arr([s("lang:en"), arr([s("a"), s("B")])])),
            },
        ),
        (
            "set_filters_empty",
            ClientFrame::SetFilters { topic: TOPIC.into(), filters: Ok(vec![]), raw_filters: packed(&arr([])) },
        ),
        ("publish_dict", ClientFrame::Publish(publish("publish_dict"))),
        ("publish_bytes", ClientFrame::Publish(publish("publish_bytes"))),
        ("publish_unicode_str", ClientFrame::Publish(publish("publish_unicode_str"))),
        ("publish_float", ClientFrame::Publish(publish("publish_float"))),
        ("publish_nested_map", ClientFrame::Publish(publish("publish_nested_map"))),
        ("publish_wide", ClientFrame::Publish(publish("publish_wide"))),
        ("publish_list", ClientFrame::Publish(publish("publish_list"))),
        ("publish_null", ClientFrame::Publish(publish("publish_null"))),
        (
            "publish_with_filter",
            // A single `filter` is used verbatim (N12).
            ClientFrame::Publish(PublishFrame {
                filter: Ok(Some("Region:US".into())),
                ..publish("publish_with_filter")
            }),
        ),
        (
            "publish_with_filters",
            ClientFrame::Publish(PublishFrame {
                filter: Ok(Some("region:eu|tier:gold".into())),
                ..publish("publish_with_filters")
            }),
        ),
        (
            "publish_retain_msgref_echo",
            // `echo` is accepted and ignored (N16).
            ClientFrame::Publish(PublishFrame {
                qos: 2,
                retain: true,
                msg_ref: Some("1-k3j9x".into()),
                ..publish("publish_retain_msgref_echo")
            }),
        ),
        ("presence_map", ClientFrame::Presence { room_id: Some("general".into()), data: Some(data("presence_map")) }),
        ("presence_null", ClientFrame::Presence { room_id: Some("general".into()), data: None }),
        ("presence_without_room", ClientFrame::Presence { room_id: None, data: Some(data("presence_without_room")) }),
        ("get_presence", ClientFrame::GetPresence { room_id: Some("general".into()) }),
        ("get_presence_without_room", ClientFrame::GetPresence { room_id: None }),
        ("ack", ClientFrame::Ack { msg_id: MSG_ID.into() }),
        ("batch_ack", ClientFrame::BatchAck { msg_ids: vec![MSG_ID.into(), "id2".into(), "id3".into()] }),
        ("lobby_subscribe", ClientFrame::LobbySubscribe { lobby_id: "active-trips".into() }),
        ("lobby_unsubscribe", ClientFrame::LobbyUnsubscribe { lobby_id: "active-trips".into() }),
        ("get_lobby_presence", ClientFrame::GetLobbyPresence { lobby_id: "active-trips".into() }),
    ]
}

/// The packed frame of a client fixture.
pub fn frame(name: &str) -> Bytes {
    Bytes::from(fixtures::read(CLIENT, name))
}

#[test]
fn python_sdk_frames_decode_to_the_expected_values() {
    let mut failures = Vec::new();
    for (name, want) in cases() {
        match ClientFrame::decode(&frame(name)) {
            Ok(got) if got == want => {}
            got => failures.push(format!("{name}:\n  got:  {got:?}\n  want: {want:?}")),
        }
    }
    assert!(failures.is_empty(), "{} mismatch(es):\n{}", failures.len(), failures.join("\n"));
}

/// N2: the decoder hands out the publisher's `data` bytes, as a slice of the frame (no copy,
/// no re-encoding), for every payload shape the SDK can send.
#[test]
fn payload_bytes_are_the_publishers_bytes_sliced_from_the_frame() {
    for (name, _) in cases() {
        let f = frame(name);
        let payload = match ClientFrame::decode(&f) {
            Ok(ClientFrame::Publish(p)) => p.data,
            Ok(ClientFrame::Presence { data: Some(d), .. }) => d,
            _ => continue,
        };
        assert_eq!(payload, data(name), "{name}: data differs from msgpack.packb(data)");
        let range = f.as_ptr_range();
        assert!(range.contains(&payload.as_ptr()), "{name}: data was copied out of the frame");
    }
}

/// The fixtures themselves are what the SDK sends: one map, `str` keys, a `str` type.
#[test]
fn client_fixtures_are_single_maps_with_str_keys() {
    for (name, want) in cases() {
        let v = decode_exact(&frame(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        check_keys(&v, "$").unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(field(&v, "type").and_then(Value::as_str), Some(want.type_str()), "{name}");
    }
}

#[test]
fn every_client_fixture_file_is_checked() {
    let mut expected = BTreeSet::new();
    for (name, frame) in cases() {
        expected.insert(name.to_owned());
        if matches!(frame, ClientFrame::Publish(_) | ClientFrame::Presence { .. }) {
            expected.insert(format!("{name}.data"));
        }
    }
    let on_disk = fixtures::names_on_disk(CLIENT);
    assert_eq!(
        on_disk.symmetric_difference(&expected).collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "client fixtures and cases differ; rerun gen_client_fixtures.py or update cases()"
    );
    assert_eq!(data("presence_null").as_ref(), [0xc0], "clear_presence sends data: nil");
    assert_eq!(data("publish_null").as_ref(), [0xc0]);
}
