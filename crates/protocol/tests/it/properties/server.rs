//! (d) Any encoded `ServerFrame`, with random strings, numbers, payloads and list sizes (across
//! the fix/16-bit header boundaries), decodes with rmpv as one map whose keys are all `str`,
//! and equals the shape the reference documents give that frame.

use std::collections::BTreeMap;

use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use rmpv::Value;
use skua_protocol::{
    ErrorFrame, LobbyRoomSnapshot, MessageFrame, PresenceEntryRef, PresenceEventKind, RestoredSubscription, ServerFrame,
};

use super::values::{str_key_map, str_key_tree, text};
use crate::shape::{arr, b, check_keys, decode_exact, diff, field, map, map_of, nil, s, u};

/// A payload: its packed bytes and its tree.
#[derive(Debug, Clone)]
struct Payload(Vec<u8>, Value);

fn payload(tree: BoxedStrategy<Value>) -> impl Strategy<Value = Payload> {
    tree.prop_map(|v| Payload(crate::shape::pack(&v), v))
}

#[derive(Debug, Clone)]
struct Entry {
    presence: Payload,
    joined_at: u64,
}

#[derive(Debug, Clone)]
struct Restored {
    pattern: String,
    topic: String,
    load_balance: bool,
    group: Option<String>,
    filters: Option<Payload>,
}

/// An owned description of one server frame.
#[derive(Debug, Clone)]
enum Spec {
    AuthOk {
        actor: String,
        project: String,
        actor_type: String,
        version: u32,
        restored: Vec<Restored>,
    },
    AuthFailed(String),
    ReauthOk(Option<u64>),
    ReauthFailed(String),
    Subscribed(String, bool),
    Unsubscribed(String),
    Published(String, String),
    FiltersUpdated(String, Option<Payload>),
    Message {
        topic: String,
        data: Payload,
        filter: Option<String>,
        from: String,
        ts: u64,
        msg_id: Option<String>,
        replay: bool,
    },
    Presence(PresenceEventKind, String, Option<Payload>),
    PresenceList(Option<String>, Vec<(String, Entry)>),
    Lobby {
        list: bool,
        lobby: String,
        rooms: BTreeMap<String, BTreeMap<String, Entry>>,
    },
    LobbyUnsubscribed(String),
    LobbyPresence {
        event: PresenceEventKind,
        lobby: String,
        room: String,
        actor: String,
        data: Option<Payload>,
    },
    ReplayStart(u64),
    ReplayEnd(u64),
    Error(ErrorSpec),
    Disconnect(String),
}

#[derive(Debug, Clone)]
struct ErrorSpec {
    error: String,
    code: Option<u32>,
    topic: Option<String>,
    hint: Option<String>,
    msg_ref: Option<String>,
    max_size: Option<u64>,
    room: Option<String>,
    lobby: Option<String>,
}

fn event() -> impl Strategy<Value = PresenceEventKind> {
    prop_oneof![Just(PresenceEventKind::Join), Just(PresenceEventKind::Update), Just(PresenceEventKind::Leave)]
}

fn entry() -> impl Strategy<Value = Entry> {
    (payload(str_key_map()), any::<u64>()).prop_map(|(presence, joined_at)| Entry { presence, joined_at })
}

fn filters() -> impl Strategy<Value = Payload> {
    payload(
        vec(
            prop_oneof![text().prop_map(Value::from), vec(text().prop_map(Value::from), 2..4).prop_map(Value::Array)],
            0..20,
        )
        .prop_map(Value::Array)
        .boxed(),
    )
}

fn opt<T: std::fmt::Debug + Clone>(st: impl Strategy<Value = T>) -> impl Strategy<Value = Option<T>> {
    prop::option::of(st)
}

fn spec() -> impl Strategy<Value = Spec> {
    let restored = (text(), text(), any::<bool>(), opt(text()), opt(filters())).prop_map(
        |(pattern, topic, load_balance, group, filters)| Restored { pattern, topic, load_balance, group, filters },
    );
    let error =
        (text(), opt(any::<u32>()), opt(text()), opt(text()), opt(text()), opt(any::<u64>()), opt(text()), opt(text()))
            .prop_map(|(error, code, topic, hint, msg_ref, max_size, room, lobby)| ErrorSpec {
                error,
                code,
                topic,
                hint,
                msg_ref,
                max_size,
                room,
                lobby,
            });
    prop_oneof![
        (text(), text(), text(), any::<u32>(), vec(restored, 0..18)).prop_map(
            |(actor, project, actor_type, version, restored)| {
                Spec::AuthOk { actor, project, actor_type, version, restored }
            }
        ),
        text().prop_map(Spec::AuthFailed),
        opt(any::<u64>()).prop_map(Spec::ReauthOk),
        text().prop_map(Spec::ReauthFailed),
        (text(), any::<bool>()).prop_map(|(t, lb)| Spec::Subscribed(t, lb)),
        text().prop_map(Spec::Unsubscribed),
        (text(), text()).prop_map(|(t, r)| Spec::Published(t, r)),
        (text(), opt(filters())).prop_map(|(t, f)| Spec::FiltersUpdated(t, f)),
        (text(), payload(str_key_tree()), opt(text()), text(), any::<u64>(), opt(text()), any::<bool>()).prop_map(
            |(topic, data, filter, from, ts, msg_id, replay)| Spec::Message {
                topic,
                data,
                filter,
                from,
                ts,
                msg_id,
                replay
            }
        ),
        (event(), text(), opt(payload(str_key_map()))).prop_map(|(e, a, p)| Spec::Presence(e, a, p)),
        (opt(text()), vec((text(), entry()), 0..20)).prop_map(|(r, e)| Spec::PresenceList(r, e)),
        (any::<bool>(), text(), btree_map(text(), btree_map(text(), entry(), 0..4), 0..18))
            .prop_map(|(list, lobby, rooms)| Spec::Lobby { list, lobby, rooms }),
        text().prop_map(Spec::LobbyUnsubscribed),
        (event(), text(), text(), text(), opt(payload(str_key_map())))
            .prop_map(|(event, lobby, room, actor, data)| Spec::LobbyPresence { event, lobby, room, actor, data }),
        any::<u64>().prop_map(Spec::ReplayStart),
        any::<u64>().prop_map(Spec::ReplayEnd),
        error.prop_map(Spec::Error),
        text().prop_map(Spec::Disconnect),
    ]
}

fn entry_ref<'a>(actor: &'a str, e: &'a Entry) -> PresenceEntryRef<'a> {
    PresenceEntryRef { actor_token_id: actor, presence: &e.presence.0, joined_at: e.joined_at, persistent: None }
}

fn entry_value(actor: &str, e: &Entry) -> Value {
    map([("actorTokenId", s(actor)), ("presence", e.presence.1.clone()), ("joinedAt", u(e.joined_at))])
}

fn opt_fields(fields: Vec<(&str, Option<Value>)>) -> impl Iterator<Item = (String, Value)> + '_ {
    fields.into_iter().filter_map(|(k, v)| v.map(|v| (k.to_owned(), v)))
}

impl Spec {
    /// Builds the borrowed frame and encodes it.
    fn encode(&self) -> Vec<u8> {
        match self {
            Self::AuthOk { actor, project, actor_type, version, restored } => {
                let r: Vec<RestoredSubscription<'_>> = restored
                    .iter()
                    .map(|x| RestoredSubscription {
                        pattern: &x.pattern,
                        topic: &x.topic,
                        load_balance: x.load_balance,
                        load_balance_group: x.group.as_deref(),
                        filters: x.filters.as_ref().map(|f| f.0.as_slice()),
                    })
                    .collect();
                ServerFrame::AuthOk {
                    actor_token_id: actor,
                    project_id: project,
                    actor_type,
                    protocol_version: *version,
                    restored: &r,
                }
                .encode_vec()
            }
            Self::AuthFailed(e) => ServerFrame::AuthFailed { error: e }.encode_vec(),
            Self::ReauthOk(at) => ServerFrame::ReauthOk { auth_expires_at: *at }.encode_vec(),
            Self::ReauthFailed(e) => ServerFrame::ReauthFailed { error: e }.encode_vec(),
            Self::Subscribed(t, lb) => ServerFrame::Subscribed { topic: t, load_balance: *lb }.encode_vec(),
            Self::Unsubscribed(t) => ServerFrame::Unsubscribed { topic: t }.encode_vec(),
            Self::Published(t, r) => ServerFrame::Published { topic: t, msg_ref: r, duplicate: false }.encode_vec(),
            Self::FiltersUpdated(t, f) => {
                ServerFrame::FiltersUpdated { topic: t, filters: f.as_ref().map(|f| f.0.as_slice()) }.encode_vec()
            }
            Self::Message { topic, data, filter, from, ts, msg_id, replay } => ServerFrame::Message(MessageFrame {
                topic,
                data: &data.0,
                filter: filter.as_deref(),
                from,
                timestamp: *ts,
                msg_id: msg_id.as_deref(),
                is_replay: *replay,
                history: None,
            })
            .encode_vec(),
            Self::Presence(event, actor, p) => ServerFrame::Presence {
                event: *event,
                actor_token_id: actor,
                presence: p.as_ref().map(|p| p.0.as_slice()),
                persistent: None,
            }
            .encode_vec(),
            Self::PresenceList(room, entries) => {
                let e: Vec<PresenceEntryRef<'_>> = entries.iter().map(|(a, e)| entry_ref(a, e)).collect();
                ServerFrame::PresenceList { room_id: room.as_deref(), entries: &e }.encode_vec()
            }
            Self::Lobby { list, lobby, rooms } => {
                let entries: Vec<Vec<PresenceEntryRef<'_>>> =
                    rooms.values().map(|r| r.iter().map(|(a, e)| entry_ref(a, e)).collect()).collect();
                let snap: Vec<LobbyRoomSnapshot<'_>> = rooms
                    .keys()
                    .zip(&entries)
                    .map(|(room_id, entries)| LobbyRoomSnapshot { room_id, entries })
                    .collect();
                if *list {
                    ServerFrame::LobbyPresenceList { lobby_id: lobby, rooms: &snap }.encode_vec()
                } else {
                    ServerFrame::LobbySubscribed { lobby_id: lobby, rooms: &snap }.encode_vec()
                }
            }
            Self::LobbyUnsubscribed(l) => ServerFrame::LobbyUnsubscribed { lobby_id: l }.encode_vec(),
            Self::LobbyPresence { event, lobby, room, actor, data } => ServerFrame::LobbyPresence {
                event: *event,
                lobby_id: lobby,
                room_id: room,
                actor_id: actor,
                data: data.as_ref().map(|d| d.0.as_slice()),
            }
            .encode_vec(),
            Self::ReplayStart(n) => ServerFrame::ReplayStart { count: *n }.encode_vec(),
            Self::ReplayEnd(n) => ServerFrame::ReplayEnd { replayed: *n }.encode_vec(),
            Self::Error(e) => ServerFrame::Error(ErrorFrame {
                error: &e.error,
                code: e.code,
                topic: e.topic.as_deref(),
                hint: e.hint.as_deref(),
                msg_ref: e.msg_ref.as_deref(),
                max_size_bytes: e.max_size,
                room_id: e.room.as_deref(),
                lobby_id: e.lobby.as_deref(),
                actor_token_id: None,
            })
            .encode_vec(),
            Self::Disconnect(r) => ServerFrame::Disconnect { reason: r }.encode_vec(),
        }
    }

    /// The documented map (same shapes as `server_golden`, written independently of the encoder).
    fn expected(&self) -> Value {
        let opt_s = |v: &Option<String>| v.as_deref().map(s);
        match self {
            Self::AuthOk { actor, project, actor_type, version, restored } => map([
                ("type", s("auth")),
                ("success", b(true)),
                ("actorTokenId", s(actor)),
                ("projectId", s(project)),
                ("actorType", s(actor_type)),
                ("protocolVersion", u(u64::from(*version))),
                (
                    "restoredSubscriptions",
                    arr(restored.iter().map(|r| {
                        map([
                            ("pattern", s(&r.pattern)),
                            ("topic", s(&r.topic)),
                            ("load_balance", b(r.load_balance)),
                            ("load_balance_group", opt_s(&r.group).unwrap_or(nil())),
                            ("filters", r.filters.as_ref().map_or(arr([]), |f| f.1.clone())),
                        ])
                    })),
                ),
            ]),
            Self::AuthFailed(e) => map([("type", s("auth")), ("success", b(false)), ("error", s(e))]),
            Self::ReauthOk(at) => map_of(
                [("type".to_owned(), s("reauth")), ("success".to_owned(), b(true))]
                    .into_iter()
                    .chain(opt_fields(vec![("authExpiresAt", at.map(u))])),
            ),
            Self::ReauthFailed(e) => map([("type", s("reauth")), ("success", b(false)), ("error", s(e))]),
            Self::Subscribed(t, lb) => map([("type", s("subscribed")), ("topic", s(t)), ("loadBalance", b(*lb))]),
            Self::Unsubscribed(t) => map([("type", s("unsubscribed")), ("topic", s(t))]),
            Self::Published(t, r) => map([("type", s("published")), ("topic", s(t)), ("msgRef", s(r))]),
            Self::FiltersUpdated(t, f) => map([
                ("type", s("filtersUpdated")),
                ("topic", s(t)),
                ("filters", f.as_ref().map_or(arr([]), |f| f.1.clone())),
            ]),
            Self::Message { topic, data, filter, from, ts, msg_id, replay } => map_of(
                [
                    ("type".to_owned(), s("message")),
                    ("topic".to_owned(), s(topic)),
                    ("data".to_owned(), data.1.clone()),
                    ("from".to_owned(), s(from)),
                    ("timestamp".to_owned(), u(*ts)),
                ]
                .into_iter()
                .chain(opt_fields(vec![
                    ("filter", opt_s(filter)),
                    ("msgId", opt_s(msg_id)),
                    ("requiresAck", msg_id.as_ref().map(|_| b(true))),
                    ("isReplay", replay.then(|| b(true))),
                ])),
            ),
            Self::Presence(event, actor, p) => {
                let data = match p {
                    Some(p) if *event != PresenceEventKind::Leave => {
                        map([("actor_token_id", s(actor)), ("presence", p.1.clone())])
                    }
                    _ => map([("actor_token_id", s(actor))]),
                };
                map([("type", s("presence")), ("event", s(event.as_str())), ("data", data)])
            }
            Self::PresenceList(room, entries) => map_of(
                [("type".to_owned(), s("presenceList"))]
                    .into_iter()
                    .chain(opt_fields(vec![("roomId", opt_s(room))]))
                    .chain([("data".to_owned(), arr(entries.iter().map(|(a, e)| entry_value(a, e))))]),
            ),
            Self::Lobby { list, lobby, rooms } => map([
                ("type", s(if *list { "lobbyPresenceList" } else { "lobbySubscribed" })),
                ("lobbyId", s(lobby)),
                (
                    "presence",
                    map_of(rooms.iter().map(|(room, entries)| {
                        (room.clone(), map_of(entries.iter().map(|(a, e)| (a.clone(), entry_value(a, e)))))
                    })),
                ),
            ]),
            Self::LobbyUnsubscribed(l) => map([("type", s("lobbyUnsubscribed")), ("lobbyId", s(l))]),
            Self::LobbyPresence { event, lobby, room, actor, data } => map([
                ("type", s("lobbyPresence")),
                ("event", s(event.as_str())),
                ("lobbyId", s(lobby)),
                ("roomId", s(room)),
                ("actorId", s(actor)),
                (
                    "data",
                    match data {
                        Some(d) if *event != PresenceEventKind::Leave => d.1.clone(),
                        _ => map([]),
                    },
                ),
            ]),
            Self::ReplayStart(n) => map([("type", s("replayStart")), ("count", u(*n))]),
            Self::ReplayEnd(n) => map([("type", s("replayEnd")), ("replayed", u(*n))]),
            Self::Error(e) => {
                map_of([("type".to_owned(), s("error")), ("error".to_owned(), s(&e.error))].into_iter().chain(
                    opt_fields(vec![
                        ("code", e.code.map(|c| u(u64::from(c)))),
                        ("topic", opt_s(&e.topic)),
                        ("hint", opt_s(&e.hint)),
                        ("msgRef", opt_s(&e.msg_ref)),
                        ("maxSizeBytes", e.max_size.map(u)),
                        ("roomId", opt_s(&e.room)),
                        ("lobbyId", opt_s(&e.lobby)),
                    ]),
                ))
            }
            Self::Disconnect(r) => map([("type", s("disconnect")), ("reason", s(r))]),
        }
    }
}

proptest! {
    #![proptest_config(super::config(256))]

    #[test]
    fn encoded_server_frames_are_str_keyed_maps_of_the_documented_shape(spec in spec()) {
        let bytes = spec.encode();
        let v = decode_exact(&bytes).map_err(TestCaseError::fail)?;
        prop_assert!(v.is_map(), "not a map: {}", v);
        check_keys(&v, "$").map_err(TestCaseError::fail)?;
        prop_assert!(field(&v, "type").is_some_and(Value::is_str), "type is not a str");
        diff(&v, &spec.expected(), "$").map_err(TestCaseError::fail)?;
        prop_assert!(bytes.len() < skua_protocol::MAX_OUTBOUND_FRAME_BYTES);
    }
}
