//! `presence`, `getPresence` and the lobby frames (N21, N22, N35, N39).

use std::sync::Arc;

use bytes::Bytes;
use skua_core::{Envelope, PresenceChange, PresenceEntry, PresenceEvent, RoomKey};
use skua_protocol::codes::{code, error};
use skua_protocol::{
    ErrorFrame, LobbyRoomSnapshot, MAX_OUTBOUND_FRAME_BYTES, PersistentRef, PresenceEntryRef, ServerFrame,
    ServerFrameKind,
};

use super::Session;
use crate::clock::now_unix_s;

impl Session {
    fn room_error(&self, room_id: &str, hint: &'static str) {
        if self.v2() {
            self.error(ErrorFrame {
                error: error::UNKNOWN_TOPIC,
                code: Some(code::UNKNOWN_TOPIC),
                hint: Some(hint),
                room_id: Some(room_id),
                ..ErrorFrame::default()
            });
        } else {
            self.error(ErrorFrame { error: error::NOT_AUTHORIZED, room_id: Some(room_id), ..ErrorFrame::default() });
        }
    }

    fn presence_unavailable(&self, room_id: Option<&str>, lobby_id: Option<&str>) {
        self.error(ErrorFrame {
            error: error::BROKER_UNAVAILABLE,
            hint: Some("presence is temporarily unavailable; retry shortly"),
            room_id,
            lobby_id,
            ..ErrorFrame::default()
        });
    }

    async fn publish_presence(
        &self,
        room: &RoomKey,
        change: PresenceChange,
        data: Bytes,
        persistent: Option<skua_core::Persistence>,
    ) {
        let Some(actor) = self.actor_id() else { return };
        let ev = Envelope::Presence(PresenceEvent {
            room: room.clone(),
            actor: actor.clone(),
            change,
            data,
            node: self.st.node.clone(),
            persistent,
        });
        if let Err(e) = self.st.hub.bus().publish(Arc::new(ev)).await {
            tracing::warn!(error = %e, ?room, ?change, "Presence event could not be published.");
        }
    }

    /// Leaves the room this connection announced presence in, sending `leave` when it was
    /// the actor's last connection there (N21).
    pub(super) async fn leave_presence_room(&mut self) {
        let Some(room) = self.presence_room.take() else { return };
        let Some(actor) = self.actor_id().cloned() else { return };
        // Stop listening first: the leaver does not get its own leave.
        self.st.hub.leave_room(&room, self.conn.id).await;
        let conn = skua_core::ConnRef { node: self.st.node.clone(), conn: self.conn.id };
        let persistent = std::mem::take(&mut self.presence_persistent);
        match self.st.presence.remove(&room, &actor, &conn).await {
            // A persistent member's last connection: `update` to offline, not `leave` (N46).
            Ok(true) if persistent && self.st.members.went_offline(&room, &actor, true).await => {}
            Ok(true) => self.publish_presence(&room, PresenceChange::Leave, Bytes::new(), None).await,
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(error = %e, ?room, "Presence removal failed; the liveness loop retries it.");
                self.st.defer_presence_removal(room, actor, conn);
            }
        }
    }

    pub(super) async fn on_presence(&mut self, room_id: Option<String>, data: Option<Bytes>) {
        let Some(a) = &self.auth else { return };
        // Presence data is forwarded in every event and kept while present: bounded (issue 12).
        let max = self.st.config.max_presence_size;
        if data.as_ref().is_some_and(|d| d.len() > max) {
            return self.error(ErrorFrame {
                error: error::MESSAGE_TOO_LARGE,
                code: Some(code::MESSAGE_TOO_LARGE),
                hint: Some("presence data exceeds max_presence_size"),
                room_id: room_id.as_deref(),
                max_size_bytes: Some(max as u64),
                ..ErrorFrame::default()
            });
        }
        let Some(room_id) = room_id else {
            // Deprecated room-less form: kept on the connection, never broadcast.
            self.connection_presence = data;
            return;
        };
        let registry = self.st.registry.load();
        let room = match registry.resolve_room(&a.actor, &room_id, now_unix_s()) {
            Ok(r) => r,
            Err(e) => return self.room_error(&room_id, e.hint),
        };
        let actor = a.actor.id.clone();
        let client_id = a.key.client_id.as_ref().map_or("", skua_core::ClientId::as_str).to_owned();
        let Some(data) = data else {
            // `data: null` leaves (the SDK's clear_presence) and removes a persistent member (N46).
            if self.presence_room.as_ref() == Some(&room) {
                if std::mem::take(&mut self.presence_persistent) {
                    self.st.members.remove(&room, &actor).await;
                }
                self.leave_presence_room().await;
            } else if self.presence_room.is_none() && self.st.members.remove(&room, &actor).await > 0 {
                // A sleeping member deregistered from a connection that never announced.
                self.publish_presence(&room, PresenceChange::Leave, Bytes::new(), None).await;
            }
            return;
        };
        let persistent = match self.st.members.parse(&data, a.actor.actor_type) {
            Ok(p) => p,
            Err(hint) => {
                return self.error(ErrorFrame {
                    error: error::INVALID_FRAME,
                    hint: Some(hint),
                    room_id: Some(&room_id),
                    ..ErrorFrame::default()
                });
            }
        };
        // Moving rooms: the old room's leave comes before the new room's join (N39).
        if self.presence_room.as_ref().is_some_and(|r| *r != room) {
            self.leave_presence_room().await;
        }
        if self.presence_room.is_none() {
            if self.st.hub.join_room(&room, &self.conn, &actor).await.is_err() {
                return self.presence_unavailable(Some(&room_id), None);
            }
            self.presence_room = Some(room.clone());
        }
        let (data, stored) = match persistent {
            None => {
                // No longer persistent: the member's records go (N46).
                if std::mem::take(&mut self.presence_persistent) {
                    self.st.members.remove(&room, &actor).await;
                }
                (data, None)
            }
            Some(p) => match self.st.members.announce(&room, &actor, &client_id, &p).await {
                Ok(None) => {
                    return self.error(ErrorFrame {
                        error: error::PRESENCE_LIMIT_EXCEEDED,
                        hint: Some(
                            "the project holds presence_max_members_per_project persistent members; remove some (data: null) or announce without persistent",
                        ),
                        room_id: Some(&room_id),
                        ..ErrorFrame::default()
                    });
                }
                Ok(Some(m)) => {
                    self.presence_persistent = true;
                    let status = skua_core::MemberStatus::Online;
                    (p.data, Some(skua_core::Persistence { status, advertisement_version: m.advertisement_version }))
                }
                Err(e) => {
                    tracing::warn!(error = %e, ?room, "Storing a persistent presence member failed.");
                    return self.presence_unavailable(Some(&room_id), None);
                }
            },
        };
        let conn = skua_core::ConnRef { node: self.st.node.clone(), conn: self.conn.id };
        match self.st.presence.announce(&room, &actor, &conn, data.clone(), now_unix_s()).await {
            Ok(change) => {
                self.st.hub.set_presence_data(&room, self.conn.id, data.clone());
                self.publish_presence(&room, change, data, stored).await;
            }
            Err(e) => {
                tracing::warn!(error = %e, ?room, "Presence announce failed.");
                self.presence_unavailable(Some(&room_id), None);
            }
        }
    }

    pub(super) async fn on_get_presence(&mut self, room_id: Option<&str>) {
        let Some(a) = &self.auth else { return };
        let Some(room_id) = room_id else {
            return self.push(&ServerFrame::PresenceList { room_id: None, entries: &[] });
        };
        let registry = self.st.registry.load();
        let room = match registry.resolve_room(&a.actor, room_id, now_unix_s()) {
            Ok(r) => r,
            Err(e) => return self.room_error(room_id, e.hint),
        };
        let entries = match self.st.presence.list(&room).await {
            Ok(e) => e,
            Err(_) => return self.presence_unavailable(Some(room_id), None),
        };
        // Persistent members (N46), at most `presence_list_limit` of them: a live one gets its
        // status and version, the others are listed offline or waking after the live ones.
        let stored = match self.st.members.list(&room).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, ?room, "Listing persistent members failed; live members only.");
                Vec::new()
            }
        };
        let refs = merge_members(&entries, &stored);
        let frame = capped("presence", refs.len(), |n| {
            ServerFrame::PresenceList { room_id: Some(room_id), entries: &refs[..n] }.encode()
        });
        self.conn.push(ServerFrameKind::PresenceList, frame);
    }

    fn lobby_error(&self, lobby_id: &str) {
        // Lobby access errors carry `lobbyId` and no code (N35).
        self.error(ErrorFrame { error: error::NOT_AUTHORIZED, lobby_id: Some(lobby_id), ..ErrorFrame::default() });
    }

    /// The presence of every room of a lobby, or `None` when presence is unreachable.
    async fn lobby_snapshot(&self, rooms: &[RoomKey]) -> Option<Vec<(RoomKey, Vec<PresenceEntry>)>> {
        let mut out = Vec::with_capacity(rooms.len());
        for r in rooms {
            out.push((r.clone(), self.st.presence.list(r).await.ok()?));
        }
        Some(out)
    }

    async fn send_lobby_snapshot(&self, lobby_id: &str, rooms: &[RoomKey], subscribed: bool) {
        let Some(snap) = self.lobby_snapshot(rooms).await else {
            return self.presence_unavailable(None, Some(lobby_id));
        };
        let refs: Vec<(&str, Vec<PresenceEntryRef<'_>>)> =
            snap.iter().map(|(r, es)| (r.slug(), es.iter().map(entry_ref).collect())).collect();
        let total: usize = refs.iter().map(|(_, e)| e.len()).sum();
        let frame = capped("presence", total, |n| {
            // Keep the first `n` entries in room order; every room still appears (N22).
            let mut left = n;
            let rooms: Vec<LobbyRoomSnapshot<'_>> = refs
                .iter()
                .map(|(room_id, es)| {
                    let k = left.min(es.len());
                    left -= k;
                    LobbyRoomSnapshot { room_id, entries: &es[..k] }
                })
                .collect();
            if subscribed {
                ServerFrame::LobbySubscribed { lobby_id, rooms: &rooms }.encode()
            } else {
                ServerFrame::LobbyPresenceList { lobby_id, rooms: &rooms }.encode()
            }
        });
        let kind = if subscribed { ServerFrameKind::LobbySubscribed } else { ServerFrameKind::LobbyPresenceList };
        self.conn.push(kind, frame);
    }

    pub(super) async fn on_lobby_subscribe(&mut self, lobby_id: &str) {
        let Some(a) = &self.auth else { return };
        let registry = self.st.registry.load();
        let Ok(lobby) = registry.resolve_lobby(&a.actor, lobby_id) else { return self.lobby_error(lobby_id) };
        if !self.lobbies.contains_key(lobby_id) {
            if self.at_subscription_limit() {
                return self.error(ErrorFrame {
                    error: error::TOO_MANY_SUBSCRIPTIONS,
                    lobby_id: Some(lobby_id),
                    hint: Some("this connection holds the most subscriptions allowed"),
                    ..ErrorFrame::default()
                });
            }
            if self.st.hub.lobby_subscribe(&lobby.rooms, &self.conn, &Arc::from(lobby_id)).await.is_err() {
                return self.presence_unavailable(None, Some(lobby_id));
            }
            self.lobbies.insert(lobby_id.to_owned(), lobby.rooms.clone());
            self.save_restore().await;
        }
        self.send_lobby_snapshot(lobby_id, &lobby.rooms, true).await;
    }

    pub(super) async fn on_lobby_unsubscribe(&mut self, lobby_id: &str) {
        if let Some(rooms) = self.lobbies.remove(lobby_id) {
            self.st.hub.lobby_unsubscribe(&rooms, self.conn.id, &Arc::from(lobby_id)).await;
            self.save_restore().await;
        }
        self.push(&ServerFrame::LobbyUnsubscribed { lobby_id });
    }

    pub(super) async fn on_get_lobby_presence(&mut self, lobby_id: &str) {
        let Some(a) = &self.auth else { return };
        let registry = self.st.registry.load();
        let Ok(lobby) = registry.resolve_lobby(&a.actor, lobby_id) else { return self.lobby_error(lobby_id) };
        self.send_lobby_snapshot(lobby_id, &lobby.rooms, false).await;
    }

    /// Re-subscribes the lobbies of a restore record, without snapshot frames (N22).
    pub(super) async fn restore_lobbies(&mut self) {
        let Some(a) = &self.auth else { return };
        let registry = self.st.registry.load();
        for lobby_id in std::mem::take(&mut self.pending_lobbies) {
            let Ok(lobby) = registry.resolve_lobby(&a.actor, &lobby_id) else { continue };
            if self.lobbies.contains_key(&lobby_id) {
                continue;
            }
            if self.st.hub.lobby_subscribe(&lobby.rooms, &self.conn, &Arc::from(lobby_id.as_str())).await.is_ok() {
                self.lobbies.insert(lobby_id, lobby.rooms);
            }
        }
    }
}

fn entry_ref(e: &PresenceEntry) -> PresenceEntryRef<'_> {
    PresenceEntryRef { actor_token_id: e.actor.as_str(), presence: &e.data, joined_at: e.joined_at, persistent: None }
}

/// The live entries, each with its stored member's status and version when it has one, then
/// one entry per stored actor that is not live (status `offline` or `waking`; a record still
/// `online` without a live entry belongs to a lost node and reads `offline`).
fn merge_members<'a>(live: &'a [PresenceEntry], stored: &'a [skua_core::StoredMember]) -> Vec<PresenceEntryRef<'a>> {
    use skua_core::MemberStatus;
    let mut out: Vec<PresenceEntryRef<'a>> = Vec::with_capacity(live.len() + stored.len());
    for e in live {
        let mut r = entry_ref(e);
        if let Some(m) = stored.iter().find(|m| m.actor == e.actor.as_str()) {
            r.persistent = Some(PersistentRef { status: "online", advertisement_version: m.advertisement_version });
        }
        out.push(r);
    }
    let live_actors: std::collections::HashSet<&str> = live.iter().map(|e| e.actor.as_str()).collect();
    let mut seen = std::collections::HashSet::new();
    for m in stored {
        if live_actors.contains(m.actor.as_str()) || !seen.insert(m.actor.as_str()) {
            continue;
        }
        let status = if m.status == MemberStatus::Waking { MemberStatus::Waking } else { MemberStatus::Offline };
        out.push(PresenceEntryRef {
            actor_token_id: &m.actor,
            presence: &m.data,
            joined_at: m.joined_at,
            persistent: Some(PersistentRef { status: status.as_str(), advertisement_version: m.advertisement_version }),
        });
    }
    out
}

/// Encodes with as many of `total` entries as fit in one client frame (N4): all of them when
/// they fit, else the largest prefix found by bisection.
pub(super) fn capped(what: &'static str, total: usize, encode: impl Fn(usize) -> Bytes) -> Bytes {
    let full = encode(total);
    if full.len() <= MAX_OUTBOUND_FRAME_BYTES {
        return full;
    }
    tracing::warn!(total, what, "A snapshot exceeds the 1 MiB frame cap; truncating.");
    let (mut lo, mut hi) = (0, total);
    while lo + 1 < hi {
        let mid = usize::midpoint(lo, hi);
        if encode(mid).len() <= MAX_OUTBOUND_FRAME_BYTES {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    encode(lo)
}
