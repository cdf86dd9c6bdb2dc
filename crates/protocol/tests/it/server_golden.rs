//! Golden bytes for every `ServerFrame` variant and optional-field shape (STYLE §3).
//!
//! Each case pins `encode_vec()` to `tests/fixtures/server/<name>.hex`, and separately decodes
//! the fixture file with rmpv and compares it with the map the reference documents describe
//! (`nolag-wire-protocol.md`, `nolag-websocket-api.md`, the clauses of docs/protocol.md), so a blessed fixture
//! cannot pin a wrong encoding. `SKUA_BLESS=1 cargo test -p skua-protocol` rewrites the files.

use rmpv::Value;
use skua_protocol::codes::{auth, code, error, reason};
use skua_protocol::{
    ErrorFrame, HistoryItem, LobbyRoomSnapshot, MessageFrame, PersistentRef, PresenceEntryRef, PresenceEventKind,
    RestoredSubscription, ServerFrame, ServerFrameKind,
};

use crate::fixtures::{self, SERVER};
use crate::shape::{arr, b, check_keys, decode_exact, diff, map, nil, pack, s, u};

const TOPIC: &str = "chat/general/messages";
const MSG_ID: &str = "0190a5f2-7c1e-7d3a-9b2f-4c8e1a2b3c4d";
const ACTOR: &str = "actor_123";
/// Unix milliseconds: above u32, so it pins the uint64 form.
const TS: u64 = 1_734_567_890_123;
const HINT_ROOM: &str = "room is not configured. Provision it via the control-plane rooms API before use.";

/// One golden case: a fixture name, what the encoder produced and what the documents say.
pub struct Golden {
    /// Fixture file stem.
    pub name: &'static str,
    /// The `ServerFrame` variant it covers.
    pub variant: &'static str,
    /// The frame's kind.
    pub kind: ServerFrameKind,
    /// `encode_vec()` output.
    pub encoded: Vec<u8>,
    /// The documented map.
    pub expected: Value,
}

fn golden(name: &'static str, frame: &ServerFrame<'_>, expected: Value) -> Golden {
    Golden { name, variant: variant(frame), kind: frame.kind(), encoded: frame.encode_vec(), expected }
}

/// The variant's name; a new variant does not compile here until this module covers it.
fn variant(frame: &ServerFrame<'_>) -> &'static str {
    match frame {
        ServerFrame::AuthOk { .. } => "AuthOk",
        ServerFrame::AuthFailed { .. } => "AuthFailed",
        ServerFrame::ReauthOk { .. } => "ReauthOk",
        ServerFrame::ReauthFailed { .. } => "ReauthFailed",
        ServerFrame::Subscribed { .. } => "Subscribed",
        ServerFrame::Unsubscribed { .. } => "Unsubscribed",
        ServerFrame::Published { .. } => "Published",
        ServerFrame::FiltersUpdated { .. } => "FiltersUpdated",
        ServerFrame::Message(_) => "Message",
        ServerFrame::Presence { .. } => "Presence",
        ServerFrame::PresenceList { .. } => "PresenceList",
        ServerFrame::LobbySubscribed { .. } => "LobbySubscribed",
        ServerFrame::LobbyPresenceList { .. } => "LobbyPresenceList",
        ServerFrame::LobbyUnsubscribed { .. } => "LobbyUnsubscribed",
        ServerFrame::LobbyPresence { .. } => "LobbyPresence",
        ServerFrame::ReplayStart { .. } => "ReplayStart",
        ServerFrame::ReplayEnd { .. } => "ReplayEnd",
        ServerFrame::Error(_) => "Error",
        ServerFrame::Disconnect { .. } => "Disconnect",
        ServerFrame::Hydration { .. } => "Hydration",
        ServerFrame::Recovery { .. } => "Recovery",
        ServerFrame::History { .. } => "History",
    }
}

/// Every variant of `ServerFrame` as of this writing.
const VARIANTS: [&str; 22] = [
    "AuthOk",
    "AuthFailed",
    "ReauthOk",
    "ReauthFailed",
    "Subscribed",
    "Unsubscribed",
    "Published",
    "FiltersUpdated",
    "Message",
    "Presence",
    "PresenceList",
    "LobbySubscribed",
    "LobbyPresenceList",
    "LobbyUnsubscribed",
    "LobbyPresence",
    "ReplayStart",
    "ReplayEnd",
    "Error",
    "Disconnect",
    "Hydration",
    "Recovery",
    "History",
];

fn error_frame(name: &'static str, e: ErrorFrame<'_>, expected: Value) -> Golden {
    golden(name, &ServerFrame::Error(e), expected)
}

fn message(name: &'static str, m: MessageFrame<'_>, expected: Value) -> Golden {
    golden(name, &ServerFrame::Message(m), expected)
}

/// A presence entry as snapshots show it (`presenceList.data[]`, lobby snapshots; N22).
fn entry_value(actor: &str, presence: Value, joined_at: u64) -> Value {
    map([("actorTokenId", s(actor)), ("presence", presence), ("joinedAt", u(joined_at))])
}

#[allow(clippy::too_many_lines)] // one flat table of cases reads better than many helpers
pub fn cases() -> Vec<Golden> {
    let online = map([("status", s("online"))]);
    let online_bytes = pack(&online);
    let driving = map([("status", s("driving")), ("speed", u(88))]);
    let driving_bytes = pack(&driving);
    let text = map([("text", s("hello world")), ("sender", s("user_12"))]);
    let text_bytes = pack(&text);
    // A publisher's payload with a non-shortest integer (uint16 5), a bin and a float32: it must be
    // forwarded with those types and widths (N2).
    let odd_payload: &[u8] =
        &[0x83, 0xa1, b'n', 0xcd, 0x00, 0x05, 0xa4, b'b', b'l', b'o', b'b', 0xc4, 0x03, 1, 2, 3, 0xa1, b'f'];
    let odd_payload = [odd_payload, &[0xca, 0x3f, 0xc0, 0x00, 0x00]].concat();
    let odd_value = map([("n", u(5)), ("blob", Value::Binary(vec![1, 2, 3])), ("f", Value::F32(1.5))]);
    let filters_value = arr([s("vip"), arr([s("region:eu"), s("tier:gold")])]);
    let filters_bytes = pack(&filters_value);

    let restored = [
        RestoredSubscription {
            pattern: "chat/general/messages",
            topic: "p1.a1.r1.messages",
            load_balance: false,
            load_balance_group: None,
            filters: None,
        },
        RestoredSubscription {
            pattern: "jobs/queue/tasks",
            topic: "p1.a2.r9.tasks",
            load_balance: true,
            load_balance_group: Some("task-workers"),
            filters: Some(&filters_bytes),
        },
    ];
    let alice =
        PresenceEntryRef { actor_token_id: ACTOR, presence: &online_bytes, joined_at: 1_634_567_890, persistent: None };
    let bob = PresenceEntryRef {
        actor_token_id: "actor_456",
        presence: &driving_bytes,
        joined_at: 1_716_000_000,
        persistent: None,
    };
    let room_1 = [alice, bob];
    let room_2 = [bob];
    let sleeper = PresenceEntryRef {
        actor_token_id: "agent-1",
        presence: &online_bytes,
        joined_at: 1_716_000_000,
        persistent: Some(PersistentRef { status: "offline", advertisement_version: 3 }),
    };
    let with_sleeper = [alice, sleeper];
    let lobby_rooms = [
        LobbyRoomSnapshot { room_id: "room_1", entries: &room_1 },
        LobbyRoomSnapshot { room_id: "room_empty", entries: &[] },
    ];
    let lobby_one_room = [LobbyRoomSnapshot { room_id: "room_2", entries: &room_2 }];
    let room_1_value = || {
        map([
            (ACTOR, entry_value(ACTOR, online.clone(), 1_634_567_890)),
            ("actor_456", entry_value("actor_456", driving.clone(), 1_716_000_000)),
        ])
    };

    vec![
        // --- auth / reauth (wire-protocol "Authentication", "Re-authentication"; N23, N36) ---
        golden(
            "auth_ok_fresh",
            &ServerFrame::AuthOk {
                actor_token_id: ACTOR,
                project_id: "proj_123",
                actor_type: "user",
                protocol_version: 2,
                restored: &[],
            },
            map([
                ("type", s("auth")),
                ("success", b(true)),
                ("actorTokenId", s(ACTOR)),
                ("projectId", s("proj_123")),
                ("actorType", s("user")),
                ("protocolVersion", u(2)),
                ("restoredSubscriptions", arr([])),
            ]),
        ),
        golden(
            "auth_ok_v1",
            &ServerFrame::AuthOk {
                actor_token_id: ACTOR,
                project_id: "proj_123",
                actor_type: "device",
                protocol_version: 1,
                restored: &[],
            },
            map([
                ("type", s("auth")),
                ("success", b(true)),
                ("actorTokenId", s(ACTOR)),
                ("projectId", s("proj_123")),
                ("actorType", s("device")),
                ("protocolVersion", u(1)),
                ("restoredSubscriptions", arr([])),
            ]),
        ),
        golden(
            "auth_ok_restored",
            &ServerFrame::AuthOk {
                actor_token_id: "agent_7",
                project_id: "proj_123",
                actor_type: "agent",
                protocol_version: 2,
                restored: &restored,
            },
            map([
                ("type", s("auth")),
                ("success", b(true)),
                ("actorTokenId", s("agent_7")),
                ("projectId", s("proj_123")),
                ("actorType", s("agent")),
                ("protocolVersion", u(2)),
                (
                    "restoredSubscriptions",
                    arr([
                        // N36: a plain subscription still carries all five keys.
                        map([
                            ("pattern", s("chat/general/messages")),
                            ("topic", s("p1.a1.r1.messages")),
                            ("load_balance", b(false)),
                            ("load_balance_group", nil()),
                            ("filters", arr([])),
                        ]),
                        map([
                            ("pattern", s("jobs/queue/tasks")),
                            ("topic", s("p1.a2.r9.tasks")),
                            ("load_balance", b(true)),
                            ("load_balance_group", s("task-workers")),
                            ("filters", filters_value.clone()),
                        ]),
                    ]),
                ),
            ]),
        ),
        golden(
            "auth_failed",
            &ServerFrame::AuthFailed { error: auth::ACCESS_DENIED },
            map([("type", s("auth")), ("success", b(false)), ("error", s("access_denied"))]),
        ),
        golden(
            "reauth_ok_with_expiry",
            &ServerFrame::ReauthOk { auth_expires_at: Some(1_734_567_890) },
            map([("type", s("reauth")), ("success", b(true)), ("authExpiresAt", u(1_734_567_890))]),
        ),
        golden(
            "reauth_ok_without_expiry",
            &ServerFrame::ReauthOk { auth_expires_at: None },
            map([("type", s("reauth")), ("success", b(true))]),
        ),
        golden(
            "reauth_failed",
            &ServerFrame::ReauthFailed { error: auth::ACTOR_MISMATCH },
            map([("type", s("reauth")), ("success", b(false)), ("error", s("actor_mismatch"))]),
        ),
        // --- subscriptions ---
        golden(
            "subscribed",
            &ServerFrame::Subscribed { topic: TOPIC, load_balance: false },
            map([("type", s("subscribed")), ("topic", s(TOPIC)), ("loadBalance", b(false))]),
        ),
        golden(
            "subscribed_load_balanced",
            &ServerFrame::Subscribed { topic: "jobs/queue/tasks", load_balance: true },
            map([("type", s("subscribed")), ("topic", s("jobs/queue/tasks")), ("loadBalance", b(true))]),
        ),
        golden(
            "unsubscribed",
            &ServerFrame::Unsubscribed { topic: TOPIC },
            map([("type", s("unsubscribed")), ("topic", s(TOPIC))]),
        ),
        golden(
            "published",
            &ServerFrame::Published { topic: TOPIC, msg_ref: "1-k3j9x", duplicate: false },
            map([("type", s("published")), ("topic", s(TOPIC)), ("msgRef", s("1-k3j9x"))]),
        ),
        golden(
            "published_duplicate",
            &ServerFrame::Published { topic: TOPIC, msg_ref: "1-k3j9x", duplicate: true },
            map([("type", s("published")), ("topic", s(TOPIC)), ("msgRef", s("1-k3j9x")), ("duplicate", b(true))]),
        ),
        // N14: the list is echoed as sent, AND groups un-normalised.
        golden(
            "filters_updated",
            &ServerFrame::FiltersUpdated { topic: TOPIC, filters: Some(&filters_bytes) },
            map([("type", s("filtersUpdated")), ("topic", s(TOPIC)), ("filters", filters_value.clone())]),
        ),
        golden(
            "filters_updated_empty",
            &ServerFrame::FiltersUpdated { topic: TOPIC, filters: None },
            map([("type", s("filtersUpdated")), ("topic", s(TOPIC)), ("filters", arr([]))]),
        ),
        // --- message (wire-protocol "message"; N13, N19, N24-N26) ---
        message(
            "message_plain",
            MessageFrame { topic: TOPIC, data: &text_bytes, from: ACTOR, timestamp: TS, ..Default::default() },
            map([
                ("type", s("message")),
                ("topic", s(TOPIC)),
                ("data", text.clone()),
                ("from", s(ACTOR)),
                ("timestamp", u(TS)),
            ]),
        ),
        message(
            "message_with_filter",
            MessageFrame {
                topic: TOPIC,
                data: &text_bytes,
                filter: Some("region:eu|tier:gold"),
                from: ACTOR,
                timestamp: TS,
                ..Default::default()
            },
            map([
                ("type", s("message")),
                ("topic", s(TOPIC)),
                ("data", text.clone()),
                ("from", s(ACTOR)),
                ("timestamp", u(TS)),
                ("filter", s("region:eu|tier:gold")),
            ]),
        ),
        message(
            "message_stored",
            MessageFrame {
                topic: TOPIC,
                data: &text_bytes,
                from: ACTOR,
                timestamp: TS,
                msg_id: Some(MSG_ID),
                ..Default::default()
            },
            map([
                ("type", s("message")),
                ("topic", s(TOPIC)),
                ("data", text.clone()),
                ("from", s(ACTOR)),
                ("timestamp", u(TS)),
                ("msgId", s(MSG_ID)),
                ("requiresAck", b(true)),
            ]),
        ),
        message(
            "message_replay",
            MessageFrame {
                topic: "jobs/queue/tasks",
                data: &text_bytes,
                filter: Some("user_123"),
                from: ACTOR,
                timestamp: TS,
                msg_id: Some(MSG_ID),
                is_replay: true,
                history: None,
            },
            map([
                ("type", s("message")),
                ("topic", s("jobs/queue/tasks")),
                ("data", text.clone()),
                ("from", s(ACTOR)),
                ("timestamp", u(TS)),
                ("filter", s("user_123")),
                ("msgId", s(MSG_ID)),
                ("requiresAck", b(true)),
                ("isReplay", b(true)),
            ]),
        ),
        message(
            "message_raw_payload",
            MessageFrame { topic: TOPIC, data: &odd_payload, from: ACTOR, timestamp: 0, ..Default::default() },
            map([
                ("type", s("message")),
                ("topic", s(TOPIC)),
                ("data", odd_value),
                ("from", s(ACTOR)),
                ("timestamp", u(0)),
            ]),
        ),
        message(
            "message_null_data",
            MessageFrame { topic: TOPIC, data: &[0xc0], from: ACTOR, timestamp: TS, ..Default::default() },
            map([
                ("type", s("message")),
                ("topic", s(TOPIC)),
                ("data", nil()),
                ("from", s(ACTOR)),
                ("timestamp", u(TS)),
            ]),
        ),
        // --- presence (events use snake_case actor_token_id; N21) ---
        golden(
            "presence_join",
            &ServerFrame::Presence {
                event: PresenceEventKind::Join,
                actor_token_id: ACTOR,
                presence: Some(&online_bytes),
                persistent: None,
            },
            map([
                ("type", s("presence")),
                ("event", s("join")),
                ("data", map([("actor_token_id", s(ACTOR)), ("presence", online.clone())])),
            ]),
        ),
        golden(
            "presence_update",
            &ServerFrame::Presence {
                event: PresenceEventKind::Update,
                actor_token_id: ACTOR,
                presence: Some(&driving_bytes),
                persistent: None,
            },
            map([
                ("type", s("presence")),
                ("event", s("update")),
                ("data", map([("actor_token_id", s(ACTOR)), ("presence", driving.clone())])),
            ]),
        ),
        // "a `leave` event carries only `actor_token_id`".
        golden(
            "presence_leave",
            &ServerFrame::Presence {
                event: PresenceEventKind::Leave,
                actor_token_id: ACTOR,
                presence: None,
                persistent: None,
            },
            map([("type", s("presence")), ("event", s("leave")), ("data", map([("actor_token_id", s(ACTOR))]))]),
        ),
        golden(
            "presence_list",
            &ServerFrame::PresenceList { room_id: Some("general"), entries: &room_1 },
            map([
                ("type", s("presenceList")),
                ("roomId", s("general")),
                (
                    "data",
                    arr([
                        entry_value(ACTOR, online.clone(), 1_634_567_890),
                        entry_value("actor_456", driving.clone(), 1_716_000_000),
                    ]),
                ),
            ]),
        ),
        // N39: getPresence without roomId.
        golden(
            "presence_list_without_room",
            &ServerFrame::PresenceList { room_id: None, entries: &[] },
            map([("type", s("presenceList")), ("data", arr([]))]),
        ),
        // --- lobbies (room slug -> actorTokenId -> full entry, empty rooms as {}; N22, N35) ---
        golden(
            "lobby_subscribed",
            &ServerFrame::LobbySubscribed { lobby_id: "active-trips", rooms: &lobby_rooms },
            map([
                ("type", s("lobbySubscribed")),
                ("lobbyId", s("active-trips")),
                ("presence", map([("room_1", room_1_value()), ("room_empty", map([]))])),
            ]),
        ),
        golden(
            "lobby_subscribed_no_rooms",
            &ServerFrame::LobbySubscribed { lobby_id: "quiet", rooms: &[] },
            map([("type", s("lobbySubscribed")), ("lobbyId", s("quiet")), ("presence", map([]))]),
        ),
        golden(
            "lobby_presence_list",
            &ServerFrame::LobbyPresenceList { lobby_id: "active-trips", rooms: &lobby_one_room },
            map([
                ("type", s("lobbyPresenceList")),
                ("lobbyId", s("active-trips")),
                (
                    "presence",
                    map([("room_2", map([("actor_456", entry_value("actor_456", driving.clone(), 1_716_000_000))]))]),
                ),
            ]),
        ),
        golden(
            "lobby_unsubscribed",
            &ServerFrame::LobbyUnsubscribed { lobby_id: "active-trips" },
            map([("type", s("lobbyUnsubscribed")), ("lobbyId", s("active-trips"))]),
        ),
        golden(
            "lobby_presence_join",
            &ServerFrame::LobbyPresence {
                event: PresenceEventKind::Join,
                lobby_id: "active-trips",
                room_id: "room_1",
                actor_id: "actor_789",
                data: Some(&driving_bytes),
            },
            map([
                ("type", s("lobbyPresence")),
                ("event", s("join")),
                ("lobbyId", s("active-trips")),
                ("roomId", s("room_1")),
                ("actorId", s("actor_789")),
                ("data", driving.clone()),
            ]),
        ),
        golden(
            "lobby_presence_update",
            &ServerFrame::LobbyPresence {
                event: PresenceEventKind::Update,
                lobby_id: "active-trips",
                room_id: "room_1",
                actor_id: "actor_789",
                data: Some(&online_bytes),
            },
            map([
                ("type", s("lobbyPresence")),
                ("event", s("update")),
                ("lobbyId", s("active-trips")),
                ("roomId", s("room_1")),
                ("actorId", s("actor_789")),
                ("data", online.clone()),
            ]),
        ),
        golden(
            "lobby_presence_leave",
            &ServerFrame::LobbyPresence {
                event: PresenceEventKind::Leave,
                lobby_id: "active-trips",
                room_id: "room_1",
                actor_id: "actor_789",
                data: None,
            },
            map([
                ("type", s("lobbyPresence")),
                ("event", s("leave")),
                ("lobbyId", s("active-trips")),
                ("roomId", s("room_1")),
                ("actorId", s("actor_789")),
                ("data", map([])),
            ]),
        ),
        // --- replay ---
        golden(
            "replay_start",
            &ServerFrame::ReplayStart { count: 247 },
            map([("type", s("replayStart")), ("count", u(247))]),
        ),
        golden(
            "replay_end",
            &ServerFrame::ReplayEnd { replayed: 247 },
            map([("type", s("replayEnd")), ("replayed", u(247))]),
        ),
        // A persistent member (N46, N47): `status` and `advertisementVersion` beside `presence`.
        golden(
            "presence_waking_persistent",
            &ServerFrame::Presence {
                event: PresenceEventKind::Waking,
                actor_token_id: "agent-1",
                presence: Some(&online_bytes),
                persistent: Some(PersistentRef { status: "waking", advertisement_version: 3 }),
            },
            map([
                ("type", s("presence")),
                ("event", s("waking")),
                (
                    "data",
                    map([
                        ("actor_token_id", s("agent-1")),
                        ("presence", online.clone()),
                        ("status", s("waking")),
                        ("advertisementVersion", u(3)),
                    ]),
                ),
            ]),
        ),
        golden(
            "presence_list_persistent",
            &ServerFrame::PresenceList { room_id: Some("general"), entries: &with_sleeper },
            map([
                ("type", s("presenceList")),
                ("roomId", s("general")),
                (
                    "data",
                    arr([
                        map([("actorTokenId", s(ACTOR)), ("presence", online.clone()), ("joinedAt", u(1_634_567_890))]),
                        map([
                            ("actorTokenId", s("agent-1")),
                            ("presence", online.clone()),
                            ("joinedAt", u(1_716_000_000)),
                            ("status", s("offline")),
                            ("advertisementVersion", u(3)),
                        ]),
                    ]),
                ),
            ]),
        ),
        error_frame(
            "error_wake_failed",
            ErrorFrame {
                error: error::WAKE_FAILED,
                code: Some(code::WAKE_FAILED),
                topic: Some(TOPIC),
                msg_ref: Some("1-k3j9x"),
                actor_token_id: Some("agent-1"),
                ..Default::default()
            },
            map([
                ("type", s("error")),
                ("code", u(42950)),
                ("error", s("wake_failed")),
                ("topic", s(TOPIC)),
                ("msgRef", s("1-k3j9x")),
                ("actorTokenId", s("agent-1")),
            ]),
        ),
        // --- errors (wire-protocol "error" table; N3, N7, N12, N21, N35) ---
        error_frame(
            "error_unknown_topic",
            ErrorFrame {
                error: error::UNKNOWN_TOPIC,
                code: Some(code::UNKNOWN_TOPIC),
                topic: Some(TOPIC),
                hint: Some(HINT_ROOM),
                msg_ref: Some("1-k3j9x"),
                ..Default::default()
            },
            map([
                ("type", s("error")),
                ("code", u(42940)),
                ("error", s("unknown_topic")),
                ("topic", s(TOPIC)),
                ("hint", s(HINT_ROOM)),
                ("msgRef", s("1-k3j9x")),
            ]),
        ),
        error_frame(
            "error_message_too_large",
            ErrorFrame {
                error: error::MESSAGE_TOO_LARGE,
                code: Some(code::MESSAGE_TOO_LARGE),
                topic: Some(TOPIC),
                msg_ref: Some("7-big"),
                max_size_bytes: Some(921_600),
                ..Default::default()
            },
            map([
                ("type", s("error")),
                ("code", u(42930)),
                ("error", s("message_too_large")),
                ("topic", s(TOPIC)),
                ("msgRef", s("7-big")),
                ("maxSizeBytes", u(921_600)),
            ]),
        ),
        error_frame(
            "error_rate_limit_v1",
            ErrorFrame {
                error: error::RATE_LIMIT_EXCEEDED,
                code: Some(code::RATE_LIMIT_EXCEEDED),
                topic: Some(TOPIC),
                ..Default::default()
            },
            map([("type", s("error")), ("code", u(42910)), ("error", s("rate_limit_exceeded")), ("topic", s(TOPIC))]),
        ),
        error_frame(
            "error_unknown_topic_room",
            ErrorFrame {
                error: error::UNKNOWN_TOPIC,
                code: Some(code::UNKNOWN_TOPIC),
                hint: Some(HINT_ROOM),
                room_id: Some("vip-lounge"),
                ..Default::default()
            },
            map([
                ("type", s("error")),
                ("code", u(42940)),
                ("error", s("unknown_topic")),
                ("hint", s(HINT_ROOM)),
                ("roomId", s("vip-lounge")),
            ]),
        ),
        error_frame(
            "error_not_authorized_room",
            ErrorFrame { error: error::NOT_AUTHORIZED, room_id: Some("vip-lounge"), ..Default::default() },
            map([("type", s("error")), ("error", s("not_authorized")), ("roomId", s("vip-lounge"))]),
        ),
        error_frame(
            "error_not_authorized_lobby",
            ErrorFrame { error: error::NOT_AUTHORIZED, lobby_id: Some("active-trips"), ..Default::default() },
            map([("type", s("error")), ("error", s("not_authorized")), ("lobbyId", s("active-trips"))]),
        ),
        error_frame(
            "error_not_authenticated",
            ErrorFrame { error: error::NOT_AUTHENTICATED, ..Default::default() },
            map([("type", s("error")), ("error", s("not_authenticated"))]),
        ),
        error_frame(
            "error_invalid_frame",
            ErrorFrame {
                error: error::INVALID_FRAME,
                topic: Some(TOPIC),
                hint: Some("publish requires data"),
                msg_ref: Some("3-x"),
                ..Default::default()
            },
            map([
                ("type", s("error")),
                ("error", s("invalid_frame")),
                ("topic", s(TOPIC)),
                ("hint", s("publish requires data")),
                ("msgRef", s("3-x")),
            ]),
        ),
        error_frame(
            "error_invalid_filter_chars",
            ErrorFrame {
                error: error::INVALID_FILTER_CHARS,
                topic: Some(TOPIC),
                msg_ref: Some("4-f"),
                ..Default::default()
            },
            map([
                ("type", s("error")),
                ("error", s("invalid_filter_chars (/, #, +, | not allowed)")),
                ("topic", s(TOPIC)),
                ("msgRef", s("4-f")),
            ]),
        ),
        error_frame(
            "error_too_many_filters",
            ErrorFrame { error: error::TOO_MANY_FILTERS, topic: Some(TOPIC), ..Default::default() },
            map([("type", s("error")), ("error", s("too_many_filters (max 100)")), ("topic", s(TOPIC))]),
        ),
        error_frame(
            "error_already_authenticated",
            ErrorFrame { error: error::ALREADY_AUTHENTICATED, ..Default::default() },
            map([("type", s("error")), ("error", s("already_authenticated"))]),
        ),
        // --- disconnect (N27) ---
        golden(
            "disconnect_token_expired",
            &ServerFrame::Disconnect { reason: reason::TOKEN_EXPIRED },
            map([("type", s("disconnect")), ("reason", s("token_expired"))]),
        ),
        // --- hydration (N43): the webhook's JSON as MessagePack, the bare topic name ---
        golden(
            "hydration",
            &ServerFrame::Hydration { topic: "messages", data: &pack(&map([("recentMessages", arr([]))])) },
            map([("type", s("hydration")), ("topic", s("messages")), ("data", map([("recentMessages", arr([]))]))]),
        ),
        // --- topic history (issue 19): offsets on messages, recovery, history pages ---
        message(
            "message_history_replay",
            MessageFrame {
                topic: TOPIC,
                data: &text_bytes,
                from: ACTOR,
                timestamp: TS,
                is_replay: true,
                history: Some((42, "3f2a9c01d4e5b6a7")),
                ..Default::default()
            },
            map([
                ("type", s("message")),
                ("topic", s(TOPIC)),
                ("data", text.clone()),
                ("from", s(ACTOR)),
                ("timestamp", u(TS)),
                ("isReplay", b(true)),
                ("offset", u(42)),
                ("epoch", s("3f2a9c01d4e5b6a7")),
            ]),
        ),
        golden(
            "recovery_incomplete",
            &ServerFrame::Recovery { topic: TOPIC, recovered: false, epoch: "3f2a9c01d4e5b6a7", offset: 42 },
            map([
                ("type", s("recovery")),
                ("topic", s(TOPIC)),
                ("recovered", b(false)),
                ("epoch", s("3f2a9c01d4e5b6a7")),
                ("offset", u(42)),
            ]),
        ),
        golden(
            "history_page",
            &ServerFrame::History {
                topic: TOPIC,
                epoch: "3f2a9c01d4e5b6a7",
                offset: 43,
                complete: true,
                messages: &[
                    HistoryItem { offset: 42, data: &text_bytes, from: ACTOR, timestamp: TS, filter: None },
                    HistoryItem { offset: 43, data: &text_bytes, from: ACTOR, timestamp: TS, filter: Some("vip") },
                ],
            },
            map([
                ("type", s("history")),
                ("topic", s(TOPIC)),
                ("epoch", s("3f2a9c01d4e5b6a7")),
                ("offset", u(43)),
                ("complete", b(true)),
                (
                    "messages",
                    arr([
                        map([("offset", u(42)), ("data", text.clone()), ("from", s(ACTOR)), ("timestamp", u(TS))]),
                        map([
                            ("offset", u(43)),
                            ("data", text.clone()),
                            ("from", s(ACTOR)),
                            ("timestamp", u(TS)),
                            ("filter", s("vip")),
                        ]),
                    ]),
                ),
            ]),
        ),
    ]
}

/// Pins (or, with `SKUA_BLESS=1`, rewrites) every fixture, then checks each fixture file on
/// its own against the documented map. One test, so blessing and checking cannot race.
#[test]
fn server_frames_match_golden_fixtures_and_documented_maps() {
    let bless = fixtures::blessing();
    let mut failures = Vec::new();
    for case in cases() {
        if bless {
            fixtures::write(SERVER, case.name, &case.encoded);
        }
        let on_disk = match fixtures::try_read(SERVER, case.name) {
            Ok(bytes) => bytes,
            Err(e) => {
                failures.push(format!("{}: {e} (SKUA_BLESS=1 creates it)", case.name));
                continue;
            }
        };
        if on_disk != case.encoded {
            failures.push(format!(
                "{}: encode_vec() differs from the fixture\n  fixture: {}\n  encoded: {}",
                case.name,
                fixtures::to_hex(&on_disk).replace('\n', ""),
                fixtures::to_hex(&case.encoded).replace('\n', ""),
            ));
        }
        let checked = decode_exact(&on_disk)
            .and_then(|v| check_keys(&v, "$").map(|()| v))
            .and_then(|v| diff(&v, &case.expected, "$"));
        if let Err(e) = checked {
            failures.push(format!("{}: fixture is not the documented map: {e}", case.name));
        }
    }
    assert!(failures.is_empty(), "{} problem(s):\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn golden_cases_cover_every_variant_and_every_fixture_file() {
    let cases = cases();
    let covered: std::collections::BTreeSet<&str> = cases.iter().map(|c| c.variant).collect();
    let missing: Vec<&str> = VARIANTS.iter().copied().filter(|v| !covered.contains(v)).collect();
    assert!(missing.is_empty(), "ServerFrame variants without a golden fixture: {missing:?}");

    let names: std::collections::BTreeSet<String> = cases.iter().map(|c| c.name.to_owned()).collect();
    assert_eq!(names.len(), cases.len(), "duplicate fixture names");
    if !fixtures::blessing() {
        let on_disk = fixtures::names_on_disk(SERVER);
        let stale: Vec<&String> = on_disk.difference(&names).collect();
        assert!(stale.is_empty(), "fixture files no case checks (delete them): {stale:?}");
    }
}

/// The encoder's bytes for a golden case (not the file, which bless mode may be rewriting).
fn golden_bytes(name: &str) -> Vec<u8> {
    cases().into_iter().find(|c| c.name == name).map(|c| c.encoded).expect("known case")
}

/// Leave events drop the presence payload even when the caller passes one (wire-protocol
/// "a `leave` event carries only `actor_token_id`"; N35 for lobbies).
#[test]
fn leave_events_ignore_a_passed_payload() {
    let p = pack(&map([("status", s("online"))]));
    let with = ServerFrame::Presence {
        event: PresenceEventKind::Leave,
        actor_token_id: ACTOR,
        presence: Some(&p),
        persistent: None,
    };
    let without = ServerFrame::Presence {
        event: PresenceEventKind::Leave,
        actor_token_id: ACTOR,
        presence: None,
        persistent: None,
    };
    assert_eq!(with.encode_vec(), without.encode_vec());
    assert_eq!(with.encode_vec(), golden_bytes("presence_leave"));

    let lobby = |data| ServerFrame::LobbyPresence {
        event: PresenceEventKind::Leave,
        lobby_id: "active-trips",
        room_id: "room_1",
        actor_id: "actor_789",
        data,
    };
    assert_eq!(lobby(Some(p.as_slice())).encode_vec(), golden_bytes("lobby_presence_leave"));
}

/// `encode()` is `encode_vec()` in shared form.
#[test]
fn encode_and_encode_vec_agree() {
    for case in [ServerFrame::ReplayEnd { replayed: 3 }, ServerFrame::Unsubscribed { topic: TOPIC }] {
        assert_eq!(case.encode().as_ref(), case.encode_vec().as_slice());
    }
}

/// Every frame's kind is in `ServerFrameKind::ALL`, names the `type` it encodes, and every kind
/// in `ALL` is some frame's: metrics count by kind instead of reading the encoded bytes.
#[test]
fn frame_kinds_name_the_encoded_type_and_all_lists_every_kind() {
    let cases = cases();
    for case in &cases {
        let v = decode_exact(&case.encoded).expect("decodes");
        let ty = crate::shape::field(&v, "type").and_then(Value::as_str);
        assert_eq!(ty, Some(case.kind.as_str()), "{}: kind {:?}", case.name, case.kind);
        assert!(ServerFrameKind::ALL.contains(&case.kind), "{}: {:?} missing from ALL", case.name, case.kind);
    }
    for (i, k) in ServerFrameKind::ALL.iter().enumerate() {
        assert_eq!(k.index(), i, "{k:?}");
        assert!(cases.iter().any(|c| c.kind == *k), "{k:?}: no frame has this kind");
    }
}

/// The number of entries a top-level map header announces, and the number that follow it
/// (each key and value decoded independently by rmpv).
fn map_header_and_entries(bytes: &[u8]) -> (u64, u64) {
    let mut r = skua_protocol::msgpack::Reader::new(bytes);
    let n = r.read_map_len().expect("a map header") as u64;
    let mut rest = &bytes[r.position()..];
    let mut found = 0;
    while !rest.is_empty() {
        rmpv::decode::read_value(&mut rest).expect("a key");
        rmpv::decode::read_value(&mut rest).expect("a value");
        found += 1;
    }
    (n, found)
}

/// Every optional-field combination of the frames whose map size the encoder computes.
fn optional_field_shapes() -> Vec<(String, Vec<u8>)> {
    let data = pack(&map([("x", u(1))]));
    let mut out = Vec::new();
    for bits in 0..(1u32 << 7) {
        let on = |i: u32| bits & (1 << i) != 0;
        let e = ErrorFrame {
            error: error::INVALID_FRAME,
            code: on(0).then_some(code::UNKNOWN_TOPIC),
            topic: on(1).then_some(TOPIC),
            hint: on(2).then_some("h"),
            msg_ref: on(3).then_some("r"),
            max_size_bytes: on(4).then_some(7),
            room_id: on(5).then_some("room"),
            lobby_id: on(6).then_some("lobby"),
            actor_token_id: None,
        };
        out.push((format!("error {bits:07b}"), ServerFrame::Error(e).encode_vec()));
    }
    for bits in 0..(1u32 << 3) {
        let on = |i: u32| bits & (1 << i) != 0;
        let m = MessageFrame {
            topic: TOPIC,
            data: &data,
            filter: on(0).then_some("vip"),
            from: ACTOR,
            timestamp: TS,
            msg_id: on(1).then_some(MSG_ID),
            is_replay: on(2),
            history: None,
        };
        out.push((format!("message {bits:03b}"), ServerFrame::Message(m).encode_vec()));
    }
    for at in [None, Some(TS / 1000)] {
        out.push((format!("reauth {at:?}"), ServerFrame::ReauthOk { auth_expires_at: at }.encode_vec()));
    }
    for room_id in [None, Some("room")] {
        out.push((
            format!("presenceList {room_id:?}"),
            ServerFrame::PresenceList { room_id, entries: &[] }.encode_vec(),
        ));
    }
    out
}

/// The encoders count map sizes by hand: each header must announce exactly the entries that
/// follow, for every variant (the golden cases) and every optional-field combination.
#[test]
fn map_headers_announce_exactly_the_entries_that_follow() {
    let shapes = cases().into_iter().map(|c| (c.name.to_owned(), c.encoded)).chain(optional_field_shapes());
    for (name, bytes) in shapes {
        let (header, entries) = map_header_and_entries(&bytes);
        assert_eq!(header, entries, "{name}: the header says {header} entries, {entries} follow");
    }
}
