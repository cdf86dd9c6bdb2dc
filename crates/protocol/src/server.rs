//! Encoding of server frames. Every key and string is msgpack `str` (N1); payloads are written
//! from the raw bytes the publisher sent (N2). Each frame is encoded once and the resulting
//! [`Bytes`] are shared by all of its recipients.

use bytes::Bytes;

use crate::msgpack::Writer;

/// A presence event kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PresenceEventKind {
    /// First announce of an actor in a room.
    Join,
    /// Later announce.
    Update,
    /// The actor's last connection left the room (or a persistent member was removed).
    Leave,
    /// A persistent member is being woken (N47).
    Waking,
}

impl PresenceEventKind {
    /// The `event` string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Join => "join",
            Self::Update => "update",
            Self::Leave => "leave",
            Self::Waking => "waking",
        }
    }
}

/// One presence entry as snapshots show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PresenceEntryRef<'a> {
    /// The actor.
    pub actor_token_id: &'a str,
    /// Packed presence data (a map).
    pub presence: &'a [u8],
    /// Unix seconds of the actor's first announce.
    pub joined_at: u64,
    /// A persistent member's status and advertisement version (N46); `None` for the others.
    pub persistent: Option<PersistentRef<'a>>,
}

/// What a persistent member's presence events and list entries carry besides its data (N46).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PersistentRef<'a> {
    /// `online`, `offline` or `waking`.
    pub status: &'a str,
    /// `advertisementVersion`.
    pub advertisement_version: u64,
}

/// One room of a lobby snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LobbyRoomSnapshot<'a> {
    /// Room slug.
    pub room_id: &'a str,
    /// The room's entries; empty rooms appear as `{}` (N22).
    pub entries: &'a [PresenceEntryRef<'a>],
}

/// One entry of `restoredSubscriptions` (N23, N36).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestoredSubscription<'a> {
    /// The client's address (`app/room/topic`).
    pub pattern: &'a str,
    /// The internal topic.
    pub topic: &'a str,
    /// Whether the subscription is load balanced.
    pub load_balance: bool,
    /// The group in the client's form.
    pub load_balance_group: Option<&'a str>,
    /// The filter list as the client last sent it (packed), `None` for `[]`.
    pub filters: Option<&'a [u8]>,
}

/// A `message` frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MessageFrame<'a> {
    /// The subscriber's address string (N11).
    pub topic: &'a str,
    /// Packed payload.
    pub data: &'a [u8],
    /// The publish's filter key, when it had one.
    pub filter: Option<&'a str>,
    /// The publisher's actorTokenId (N19).
    pub from: &'a str,
    /// Unix milliseconds set by the accepting edge.
    pub timestamp: u64,
    /// Stored messages only (N24).
    pub msg_id: Option<&'a str>,
    /// Redelivered or replayed (N25, N26; recovery, issue 19).
    pub is_replay: bool,
    /// `(offset, epoch)` of a message of a topic with history (issue 19).
    pub history: Option<(u64, &'a str)>,
}

/// One message of a `history` reply (issue 19).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HistoryItem<'a> {
    /// Its offset.
    pub offset: u64,
    /// Packed payload.
    pub data: &'a [u8],
    /// The publisher's actorTokenId.
    pub from: &'a str,
    /// Unix ms.
    pub timestamp: u64,
    /// Its filter key.
    pub filter: Option<&'a str>,
}

/// An `error` frame. Absent fields are omitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ErrorFrame<'a> {
    /// The error string.
    pub error: &'a str,
    /// The numeric code (429x0 errors).
    pub code: Option<u32>,
    /// The topic the request referred to.
    pub topic: Option<&'a str>,
    /// Human-readable help (v2 only for 42940; always for `invalid_frame`).
    pub hint: Option<&'a str>,
    /// The publish's msgRef (v2).
    pub msg_ref: Option<&'a str>,
    /// With `message_too_large`.
    pub max_size_bytes: Option<u64>,
    /// With presence access errors (N21).
    pub room_id: Option<&'a str>,
    /// With lobby access errors (N35).
    pub lobby_id: Option<&'a str>,
    /// With `wake_failed` (N47): the member whose wake failed.
    pub actor_token_id: Option<&'a str>,
}

/// A server frame's `type`, without its fields: what metrics count frames by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ServerFrameKind {
    /// `message` (first: the most frequent).
    Message,
    /// `auth` (both auth replies).
    Auth,
    /// `reauth` (both reauth replies).
    Reauth,
    /// `subscribed`.
    Subscribed,
    /// `unsubscribed`.
    Unsubscribed,
    /// `published`.
    Published,
    /// `filtersUpdated`.
    FiltersUpdated,
    /// `presence`.
    Presence,
    /// `presenceList`.
    PresenceList,
    /// `lobbySubscribed`.
    LobbySubscribed,
    /// `lobbyPresenceList`.
    LobbyPresenceList,
    /// `lobbyUnsubscribed`.
    LobbyUnsubscribed,
    /// `lobbyPresence`.
    LobbyPresence,
    /// `replayStart`.
    ReplayStart,
    /// `replayEnd`.
    ReplayEnd,
    /// `error`.
    Error,
    /// `disconnect`.
    Disconnect,
    /// `hydration` (N43).
    Hydration,
    /// `recovery` (issue 19).
    Recovery,
    /// `history` (issue 19).
    History,
}

impl ServerFrameKind {
    /// Every kind, in declaration order: `ALL[k.index()] == k`.
    pub const ALL: [Self; 20] = [
        Self::Message,
        Self::Auth,
        Self::Reauth,
        Self::Subscribed,
        Self::Unsubscribed,
        Self::Published,
        Self::FiltersUpdated,
        Self::Presence,
        Self::PresenceList,
        Self::LobbySubscribed,
        Self::LobbyPresenceList,
        Self::LobbyUnsubscribed,
        Self::LobbyPresence,
        Self::ReplayStart,
        Self::ReplayEnd,
        Self::Error,
        Self::Disconnect,
        Self::Hydration,
        Self::Recovery,
        Self::History,
    ];

    /// The `type` string on the wire.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Message => "message",
            Self::Auth => "auth",
            Self::Reauth => "reauth",
            Self::Subscribed => "subscribed",
            Self::Unsubscribed => "unsubscribed",
            Self::Published => "published",
            Self::FiltersUpdated => "filtersUpdated",
            Self::Presence => "presence",
            Self::PresenceList => "presenceList",
            Self::LobbySubscribed => "lobbySubscribed",
            Self::LobbyPresenceList => "lobbyPresenceList",
            Self::LobbyUnsubscribed => "lobbyUnsubscribed",
            Self::LobbyPresence => "lobbyPresence",
            Self::ReplayStart => "replayStart",
            Self::ReplayEnd => "replayEnd",
            Self::Error => "error",
            Self::Disconnect => "disconnect",
            Self::Hydration => "hydration",
            Self::Recovery => "recovery",
            Self::History => "history",
        }
    }

    /// The kind's position in [`Self::ALL`], for arrays of counters.
    pub const fn index(self) -> usize {
        self as usize
    }
}

// Each entry of `ALL` sits at its own discriminant, so `index` can address arrays sized by
// `ALL`; that `ALL` covers every frame's kind is checked by `tests/it/shape.rs` over every
// `ServerFrame` variant.
const _: () = {
    let mut i = 0;
    while i < ServerFrameKind::ALL.len() {
        assert!(ServerFrameKind::ALL[i].index() == i);
        i += 1;
    }
};

/// A frame the server sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerFrame<'a> {
    /// Successful `auth` reply.
    AuthOk {
        /// The actor.
        actor_token_id: &'a str,
        /// The actor's project.
        project_id: &'a str,
        /// The actor type string.
        actor_type: &'a str,
        /// Negotiated version (N6).
        protocol_version: u32,
        /// Restored subscriptions (empty unless `reconnect:true`).
        restored: &'a [RestoredSubscription<'a>],
    },
    /// Failed `auth` reply.
    AuthFailed {
        /// One of the auth failure strings.
        error: &'a str,
    },
    /// Successful `reauth` reply.
    ReauthOk {
        /// Unix seconds, when the new token expires.
        auth_expires_at: Option<u64>,
    },
    /// Failed `reauth` reply.
    ReauthFailed {
        /// `actor_mismatch`, `token_expired` or an auth failure string.
        error: &'a str,
    },
    /// `subscribed`.
    Subscribed {
        /// Address as sent.
        topic: &'a str,
        /// Whether load balanced.
        load_balance: bool,
    },
    /// `unsubscribed`.
    Unsubscribed {
        /// Address as sent.
        topic: &'a str,
    },
    /// `published` (v2, publishes with msgRef).
    Published {
        /// Address as sent.
        topic: &'a str,
        /// The publish's msgRef.
        msg_ref: &'a str,
        /// Skua addition (issue 19): a repeated `idempotencyKey` within its window, answered
        /// and not delivered again; `duplicate: true` is sent only then.
        duplicate: bool,
    },
    /// `filtersUpdated`.
    FiltersUpdated {
        /// Address as sent.
        topic: &'a str,
        /// The list as sent (packed); `None` encodes `[]`.
        filters: Option<&'a [u8]>,
    },
    /// `message`.
    Message(MessageFrame<'a>),
    /// A room presence event.
    Presence {
        /// join/update/leave.
        event: PresenceEventKind,
        /// The actor (snake_case key on the wire).
        actor_token_id: &'a str,
        /// Packed presence map; omitted on leave.
        presence: Option<&'a [u8]>,
        /// A persistent member's status and advertisement version (N46), beside `presence`.
        persistent: Option<PersistentRef<'a>>,
    },
    /// `presenceList`.
    PresenceList {
        /// Room slug (omitted for the deprecated room-less form).
        room_id: Option<&'a str>,
        /// Entries.
        entries: &'a [PresenceEntryRef<'a>],
    },
    /// `lobbySubscribed`.
    LobbySubscribed {
        /// Slug as the client used it.
        lobby_id: &'a str,
        /// Every covered room.
        rooms: &'a [LobbyRoomSnapshot<'a>],
    },
    /// `lobbyPresenceList`.
    LobbyPresenceList {
        /// Slug as the client used it.
        lobby_id: &'a str,
        /// Every covered room.
        rooms: &'a [LobbyRoomSnapshot<'a>],
    },
    /// `lobbyUnsubscribed`.
    LobbyUnsubscribed {
        /// Slug as the client used it.
        lobby_id: &'a str,
    },
    /// `lobbyPresence`.
    LobbyPresence {
        /// join/update/leave.
        event: PresenceEventKind,
        /// Slug as the client used it.
        lobby_id: &'a str,
        /// Room slug.
        room_id: &'a str,
        /// The actor.
        actor_id: &'a str,
        /// Packed presence map; `None` encodes `{}` (leave, N35).
        data: Option<&'a [u8]>,
    },
    /// `replayStart`.
    ReplayStart {
        /// Messages that follow.
        count: u64,
    },
    /// `replayEnd`.
    ReplayEnd {
        /// Messages replayed.
        replayed: u64,
    },
    /// `error`.
    Error(ErrorFrame<'a>),
    /// `disconnect`, sent before close 4003.
    Disconnect {
        /// The reason (`token_expired`).
        reason: &'a str,
    },
    /// `hydration`: a new subscription's state from the app's hydration webhook (N43).
    Hydration {
        /// The bare topic name (not `app/room/topic`).
        topic: &'a str,
        /// The webhook's JSON answer, already encoded as one MessagePack value.
        data: &'a [u8],
    },
    /// `recovery`: what a recovering subscription got (issue 19); `recovered: false` says
    /// messages were missed that history no longer holds.
    Recovery {
        /// The subscription's address string.
        topic: &'a str,
        /// Whether nothing was missed.
        recovered: bool,
        /// The topic's current epoch.
        epoch: &'a str,
        /// The latest offset of the topic.
        offset: u64,
    },
    /// `history`: the reply to a `history` request (issue 19).
    History {
        /// The address string as requested.
        topic: &'a str,
        /// The topic's current epoch.
        epoch: &'a str,
        /// The latest offset of the topic.
        offset: u64,
        /// Whether the messages reach back to the `since` asked (always true without one).
        complete: bool,
        /// Oldest first.
        messages: &'a [HistoryItem<'a>],
    },
}

fn entry(w: &mut Writer, e: &PresenceEntryRef<'_>) {
    w.map(if e.persistent.is_some() { 5 } else { 3 });
    w.str("actorTokenId").str(e.actor_token_id).str("presence").raw(e.presence);
    w.str("joinedAt").uint(e.joined_at);
    if let Some(p) = e.persistent {
        w.str("status").str(p.status).str("advertisementVersion").uint(p.advertisement_version);
    }
}

fn lobby(w: &mut Writer, ty: &str, lobby_id: &str, rooms: &[LobbyRoomSnapshot<'_>]) {
    w.map(3).str("type").str(ty).str("lobbyId").str(lobby_id).str("presence").map(rooms.len());
    for room in rooms {
        w.str(room.room_id).map(room.entries.len());
        for e in room.entries {
            w.str(e.actor_token_id);
            entry(w, e);
        }
    }
}

impl ServerFrame<'_> {
    /// The frame's kind (`Auth` for both auth replies).
    pub const fn kind(&self) -> ServerFrameKind {
        match self {
            Self::AuthOk { .. } | Self::AuthFailed { .. } => ServerFrameKind::Auth,
            Self::ReauthOk { .. } | Self::ReauthFailed { .. } => ServerFrameKind::Reauth,
            Self::Subscribed { .. } => ServerFrameKind::Subscribed,
            Self::Unsubscribed { .. } => ServerFrameKind::Unsubscribed,
            Self::Published { .. } => ServerFrameKind::Published,
            Self::FiltersUpdated { .. } => ServerFrameKind::FiltersUpdated,
            Self::Message(_) => ServerFrameKind::Message,
            Self::Presence { .. } => ServerFrameKind::Presence,
            Self::PresenceList { .. } => ServerFrameKind::PresenceList,
            Self::LobbySubscribed { .. } => ServerFrameKind::LobbySubscribed,
            Self::LobbyPresenceList { .. } => ServerFrameKind::LobbyPresenceList,
            Self::LobbyUnsubscribed { .. } => ServerFrameKind::LobbyUnsubscribed,
            Self::LobbyPresence { .. } => ServerFrameKind::LobbyPresence,
            Self::ReplayStart { .. } => ServerFrameKind::ReplayStart,
            Self::ReplayEnd { .. } => ServerFrameKind::ReplayEnd,
            Self::Error(_) => ServerFrameKind::Error,
            Self::Disconnect { .. } => ServerFrameKind::Disconnect,
            Self::Hydration { .. } => ServerFrameKind::Hydration,
            Self::Recovery { .. } => ServerFrameKind::Recovery,
            Self::History { .. } => ServerFrameKind::History,
        }
    }

    /// The frame's `type` string (`auth` for both auth replies), for metrics and logs.
    pub fn type_str(&self) -> &'static str {
        self.kind().as_str()
    }

    /// Encodes the frame.
    pub fn encode(&self) -> Bytes {
        Bytes::from(self.encode_vec())
    }

    /// Encodes the frame into a fresh vector.
    pub fn encode_vec(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(self.size_hint());
        self.write(&mut w);
        w.into_vec()
    }

    fn size_hint(&self) -> usize {
        match self {
            Self::Message(m) => 96 + m.topic.len() + m.data.len() + m.from.len(),
            Self::Hydration { topic, data } => 48 + topic.len() + data.len(),
            Self::History { messages, .. } => {
                128 + messages.iter().map(|m| 64 + m.data.len() + m.from.len()).sum::<usize>()
            }
            _ => 128,
        }
    }

    fn write(&self, w: &mut Writer) {
        match *self {
            Self::AuthOk { actor_token_id, project_id, actor_type, protocol_version, restored } => {
                w.map(7).str("type").str("auth").str("success").bool(true);
                w.str("actorTokenId").str(actor_token_id).str("projectId").str(project_id);
                w.str("actorType").str(actor_type).str("protocolVersion").uint(u64::from(protocol_version));
                w.str("restoredSubscriptions").array(restored.len());
                for r in restored {
                    w.map(5).str("pattern").str(r.pattern).str("topic").str(r.topic);
                    w.str("load_balance").bool(r.load_balance);
                    w.str("load_balance_group").opt_str(r.load_balance_group);
                    w.str("filters");
                    match r.filters {
                        Some(f) => w.raw(f),
                        None => w.array(0),
                    };
                }
            }
            Self::AuthFailed { error } => {
                w.map(3).str("type").str("auth").str("success").bool(false).str("error").str(error);
            }
            Self::ReauthOk { auth_expires_at } => {
                w.map(if auth_expires_at.is_some() { 3 } else { 2 });
                w.str("type").str("reauth").str("success").bool(true);
                if let Some(at) = auth_expires_at {
                    w.str("authExpiresAt").uint(at);
                }
            }
            Self::ReauthFailed { error } => {
                w.map(3).str("type").str("reauth").str("success").bool(false).str("error").str(error);
            }
            Self::Subscribed { topic, load_balance } => {
                w.map(3).str("type").str("subscribed").str("topic").str(topic).str("loadBalance").bool(load_balance);
            }
            Self::Unsubscribed { topic } => {
                w.map(2).str("type").str("unsubscribed").str("topic").str(topic);
            }
            Self::Published { topic, msg_ref, duplicate } => {
                w.map(3 + usize::from(duplicate))
                    .str("type")
                    .str("published")
                    .str("topic")
                    .str(topic)
                    .str("msgRef")
                    .str(msg_ref);
                if duplicate {
                    w.str("duplicate").bool(true);
                }
            }
            Self::FiltersUpdated { topic, filters } => {
                w.map(3).str("type").str("filtersUpdated").str("topic").str(topic).str("filters");
                match filters {
                    Some(f) => w.raw(f),
                    None => w.array(0),
                };
            }
            Self::Message(m) => {
                let n = 5
                    + usize::from(m.filter.is_some())
                    + 2 * usize::from(m.msg_id.is_some())
                    + usize::from(m.is_replay)
                    + 2 * usize::from(m.history.is_some());
                w.map(n).str("type").str("message").str("topic").str(m.topic).str("data").raw(m.data);
                w.str("from").str(m.from).str("timestamp").uint(m.timestamp);
                if let Some(f) = m.filter {
                    w.str("filter").str(f);
                }
                if let Some(id) = m.msg_id {
                    w.str("msgId").str(id).str("requiresAck").bool(true);
                }
                if m.is_replay {
                    w.str("isReplay").bool(true);
                }
                if let Some((offset, epoch)) = m.history {
                    w.str("offset").uint(offset).str("epoch").str(epoch);
                }
            }
            Self::Presence { event, actor_token_id, presence, persistent } => {
                w.map(3).str("type").str("presence").str("event").str(event.as_str()).str("data");
                let presence = presence.filter(|_| event != PresenceEventKind::Leave);
                let extra = 2 * usize::from(persistent.is_some());
                w.map(1 + usize::from(presence.is_some()) + extra).str("actor_token_id").str(actor_token_id);
                if let Some(p) = presence {
                    w.str("presence").raw(p);
                }
                if let Some(p) = persistent {
                    w.str("status").str(p.status).str("advertisementVersion").uint(p.advertisement_version);
                }
            }
            Self::PresenceList { room_id, entries } => {
                w.map(if room_id.is_some() { 3 } else { 2 }).str("type").str("presenceList");
                if let Some(r) = room_id {
                    w.str("roomId").str(r);
                }
                w.str("data").array(entries.len());
                for e in entries {
                    entry(w, e);
                }
            }
            Self::LobbySubscribed { lobby_id, rooms } => lobby(w, "lobbySubscribed", lobby_id, rooms),
            Self::LobbyPresenceList { lobby_id, rooms } => lobby(w, "lobbyPresenceList", lobby_id, rooms),
            Self::LobbyUnsubscribed { lobby_id } => {
                w.map(2).str("type").str("lobbyUnsubscribed").str("lobbyId").str(lobby_id);
            }
            Self::LobbyPresence { event, lobby_id, room_id, actor_id, data } => {
                w.map(6).str("type").str("lobbyPresence").str("event").str(event.as_str());
                w.str("lobbyId").str(lobby_id).str("roomId").str(room_id).str("actorId").str(actor_id).str("data");
                match data {
                    Some(d) if event != PresenceEventKind::Leave => w.raw(d),
                    _ => w.map(0),
                };
            }
            Self::ReplayStart { count } => {
                w.map(2).str("type").str("replayStart").str("count").uint(count);
            }
            Self::ReplayEnd { replayed } => {
                w.map(2).str("type").str("replayEnd").str("replayed").uint(replayed);
            }
            Self::Error(e) => {
                let n = 2
                    + usize::from(e.code.is_some())
                    + usize::from(e.topic.is_some())
                    + usize::from(e.hint.is_some())
                    + usize::from(e.msg_ref.is_some())
                    + usize::from(e.max_size_bytes.is_some())
                    + usize::from(e.room_id.is_some())
                    + usize::from(e.lobby_id.is_some())
                    + usize::from(e.actor_token_id.is_some());
                w.map(n).str("type").str("error").str("error").str(e.error);
                if let Some(c) = e.code {
                    w.str("code").uint(u64::from(c));
                }
                if let Some(t) = e.topic {
                    w.str("topic").str(t);
                }
                if let Some(h) = e.hint {
                    w.str("hint").str(h);
                }
                if let Some(r) = e.msg_ref {
                    w.str("msgRef").str(r);
                }
                if let Some(m) = e.max_size_bytes {
                    w.str("maxSizeBytes").uint(m);
                }
                if let Some(r) = e.room_id {
                    w.str("roomId").str(r);
                }
                if let Some(l) = e.lobby_id {
                    w.str("lobbyId").str(l);
                }
                if let Some(a) = e.actor_token_id {
                    w.str("actorTokenId").str(a);
                }
            }
            Self::Disconnect { reason } => {
                w.map(2).str("type").str("disconnect").str("reason").str(reason);
            }
            Self::Hydration { topic, data } => {
                w.map(3).str("type").str("hydration").str("topic").str(topic).str("data").raw(data);
            }
            Self::Recovery { topic, recovered, epoch, offset } => {
                w.map(5).str("type").str("recovery").str("topic").str(topic).str("recovered").bool(recovered);
                w.str("epoch").str(epoch).str("offset").uint(offset);
            }
            Self::History { topic, epoch, offset, complete, messages } => {
                w.map(6).str("type").str("history").str("topic").str(topic).str("epoch").str(epoch);
                w.str("offset").uint(offset).str("complete").bool(complete).str("messages").array(messages.len());
                for m in messages {
                    w.map(4 + usize::from(m.filter.is_some())).str("offset").uint(m.offset).str("data").raw(m.data);
                    w.str("from").str(m.from).str("timestamp").uint(m.timestamp);
                    if let Some(f) = m.filter {
                        w.str("filter").str(f);
                    }
                }
            }
        }
    }
}
