//! One client connection's protocol state machine: unauthenticated → authenticated, with its
//! subscriptions, lobby subscriptions and presence. Frame handlers live in the submodules.

mod auth;
mod pipeline;

pub(crate) use pipeline::Outcome;
mod presence;
mod revalidate;
mod topics;

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use skua_core::registry::{AccessError, Actor};
use skua_core::{
    ActorId, BusSubscription, RestoreKey, RestoreRecord, RestoredTopic, RoomKey, SessionKey, TopicAddress,
};
use skua_protocol::codes::{code, error};
use skua_protocol::{ClientFrame, DecodeError, ErrorFrame, ServerFrame};

use crate::clock::now_unix_s;
use crate::durable::{Cmd, DurableHandle};
use crate::hub::bus_subscription;
use crate::outbound::ConnHandle;
use crate::ratelimit::TokenBucket;
use crate::small_map::SmallMap;
use crate::state::{EdgeState, ProjectSlot};

/// A subscription as the session remembers it.
#[derive(Debug, Clone)]
pub(crate) struct SessionSub {
    address: TopicAddress,
    qos: u8,
    /// Internal group name (the client's, or the actor id by default).
    group: Option<Arc<str>>,
    /// The group as the client gave it (`None` when defaulted or not load balanced).
    group_as_sent: Option<String>,
    filters: Arc<[String]>,
    raw_filters: Option<Bytes>,
    /// The durable consumer, for a persistent session's subscription to a logged topic.
    consumer: Option<skua_core::ConsumerId>,
    /// For a topic with history: what it was delivered (issue 19).
    tracker: Option<Arc<crate::history::Tracker>>,
}

/// What an authenticated connection knows about itself.
pub(crate) struct Authed {
    actor: Arc<Actor>,
    version: u32,
    expires_at: Option<u64>,
    key: SessionKey,
    /// This connection's restore record (N23): the session's with a clientId, else its own.
    restore: RestoreKey,
    bucket: TokenBucket,
    /// The rate limits of the other frames that cost the node work (issue 33, item 5).
    frame_buckets: FrameBuckets,
    max_message_size: usize,
    _slot: ProjectSlot,
    /// This connection's entry in the node's table (control-plane effects, issue 5).
    registration: crate::revalidate::Registration,
    subscriptions: Arc<std::sync::atomic::AtomicU32>,
    /// Topics resolved for its publishes (dropped on registry and actor changes).
    topics: crate::publish::TopicCache,
}

/// The kinds of frame with a per-connection rate limit of their own besides `publish` (issue
/// 33, item 5): each costs the node work beyond the connection (fan-out to a room, a store
/// write, a bus subscription, a presence or history read).
#[derive(Debug, Clone, Copy)]
enum Limited {
    /// `presence` (`presence_rate_limit`).
    Presence,
    /// `subscribe`, `unsubscribe`, `setFilters`, `lobbySubscribe`, `lobbyUnsubscribe`
    /// (`subscribe_rate_limit`).
    Subscribe,
    /// `getPresence`, `getLobbyPresence`, `history` (`query_rate_limit`).
    Query,
}

impl Limited {
    /// The limit `frame` counts against, if any.
    fn of(frame: &ClientFrame) -> Option<Self> {
        match frame {
            ClientFrame::Presence { .. } => Some(Self::Presence),
            ClientFrame::Subscribe(_)
            | ClientFrame::Unsubscribe { .. }
            | ClientFrame::SetFilters { .. }
            | ClientFrame::LobbySubscribe { .. }
            | ClientFrame::LobbyUnsubscribe { .. } => Some(Self::Subscribe),
            ClientFrame::GetPresence { .. } | ClientFrame::GetLobbyPresence { .. } | ClientFrame::History { .. } => {
                Some(Self::Query)
            }
            _ => None,
        }
    }

    /// The hint of the refusal.
    fn hint(self) -> &'static str {
        match self {
            Self::Presence => "too many presence updates on this connection; slow down",
            Self::Subscribe => "too many subscription changes on this connection; slow down",
            Self::Query => "too many presence or history requests on this connection; slow down",
        }
    }
}

/// One token bucket per [`Limited`] kind, refilled over `rate_limit_window`.
#[derive(Debug)]
struct FrameBuckets {
    presence: TokenBucket,
    subscribe: TokenBucket,
    query: TokenBucket,
}

impl FrameBuckets {
    fn new(c: &crate::config::EdgeConfig) -> Self {
        let w = c.rate_limit_window;
        Self {
            presence: TokenBucket::new(c.presence_rate_limit, w),
            subscribe: TokenBucket::new(c.subscribe_rate_limit, w),
            query: TokenBucket::new(c.query_rate_limit, w),
        }
    }

    fn try_take(&mut self, kind: Limited) -> bool {
        match kind {
            Limited::Presence => self.presence.try_take(),
            Limited::Subscribe => self.subscribe.try_take(),
            Limited::Query => self.query.try_take(),
        }
    }
}

/// What a door's session resumed at auth, told before the auth reply is queued (so before any
/// restored delivery).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DoorRestored {
    /// The concrete subscriptions resumed: (topic as subscribed, QoS).
    pub topics: Vec<(String, u8)>,
    /// The door's filters saved with the session (`DoorSession::set_filters`).
    pub filters: Vec<(String, u8)>,
    /// Whether a stored session with subscriptions was found.
    pub present: bool,
}

/// What another door asked of its session (its `DoorAuth`), and what it restored.
pub(crate) struct DoorState {
    /// Kept while the client is away: subscriptions, and a durable consumer for each QoS 1/2
    /// subscription to a logged topic (docs/protocol.md N54).
    pub(crate) persistent: bool,
    /// What an earlier connection of the session kept is discarded at auth.
    pub(crate) clean: bool,
    /// Kept this many seconds after the connection ends when below `restore_ttl` (0: discarded
    /// at the end).
    pub(crate) expiry_s: Option<u32>,
    /// The door's filters as its client made them, saved with the restore record.
    pub(crate) filters: Vec<(String, u8)>,
    /// Whether the auth found a stored session with subscriptions.
    pub(crate) present: bool,
    /// Told what was restored, before the auth reply is queued.
    pub(crate) on_restored: Option<Box<dyn FnOnce(DoorRestored) + Send + Sync>>,
}

/// The state machine of one connection.
pub(crate) struct Session {
    st: Arc<EdgeState>,
    conn: Arc<ConnHandle>,
    auth: Option<Authed>,
    /// Keyed by the topic string as the client sent it (N11).
    subs: SmallMap<String, SessionSub>,
    /// Lobby slug as sent → the rooms it covers.
    lobbies: HashMap<String, Vec<RoomKey>>,
    /// The room this connection announced presence in.
    presence_room: Option<RoomKey>,
    /// Whether its last announce there was persistent (N46): only then does its end touch the store.
    presence_persistent: bool,
    /// Presence data of the deprecated room-less form: stored, never broadcast.
    connection_presence: Option<Bytes>,
    /// Lobby slugs of a restore record, subscribed once the auth reply is out.
    pending_lobbies: Vec<String>,
    /// Durable delivery of this connection, started with its first durable subscription.
    durable: Option<DurableHandle>,
    /// For a clientId session: its string and the control-topic subscription it holds.
    persistent: Option<(skua_core::SessionKey, Option<BusSubscription>)>,
    /// The client's address (after the PROXY header and trusted `X-Forwarded-For`).
    pub(crate) client_ip: std::net::IpAddr,
    /// Failed `auth`/`reauth` attempts on this connection (issue 12, item 6).
    auth_failures: u32,
    /// The connection record this connection's auth claimed, as stored: when the restore
    /// leaves it unchanged, the claim already made it this connection's and no save follows.
    claimed: Option<RestoreRecord>,
    /// Publishes in flight (issue 36): waiting for their commit, finished in order.
    pipeline: pipeline::Pipeline,
    /// How the connection reached the node (its door), for the connection lists.
    pub(crate) protocol: crate::revalidate::ConnProtocol,
    /// For a connection of another door (MQTT): how its session is kept.
    pub(crate) door: Option<DoorState>,
}

impl Session {
    pub(crate) fn new(st: Arc<EdgeState>, conn: Arc<ConnHandle>, client_ip: std::net::IpAddr) -> Self {
        Self {
            st,
            conn,
            auth: None,
            subs: SmallMap::new(),
            lobbies: HashMap::new(),
            presence_room: None,
            presence_persistent: false,
            connection_presence: None,
            pending_lobbies: Vec::new(),
            durable: None,
            persistent: None,
            client_ip,
            auth_failures: 0,
            claimed: None,
            pipeline: pipeline::Pipeline::default(),
            protocol: crate::revalidate::ConnProtocol::Ws,
            door: None,
        }
    }

    /// Whether the connection has authenticated.
    pub(crate) fn is_authed(&self) -> bool {
        self.auth.is_some()
    }

    /// When the client token expires (unix seconds), if it does.
    pub(crate) fn expires_at(&self) -> Option<u64> {
        self.auth.as_ref().and_then(|a| a.expires_at)
    }

    fn push(&self, frame: &ServerFrame<'_>) {
        self.conn.send(frame);
    }

    fn v2(&self) -> bool {
        self.auth.as_ref().is_none_or(|a| a.version >= 2)
    }

    /// Sends an error frame, stripping what v1 clients do not get (N7): `hint` and `msgRef`.
    fn error(&self, mut e: ErrorFrame<'_>) {
        if !self.v2() {
            e.hint = None;
            e.msg_ref = None;
        }
        self.push(&ServerFrame::Error(e));
    }

    /// The access error for `topic`: v2 `42940 unknown_topic` with hint, v1 `not_authorized`.
    fn access_error(&self, topic: &str, msg_ref: Option<&str>, e: AccessError) {
        if self.v2() {
            self.error(ErrorFrame {
                error: error::UNKNOWN_TOPIC,
                code: Some(code::UNKNOWN_TOPIC),
                topic: Some(topic),
                hint: Some(e.hint),
                msg_ref,
                ..ErrorFrame::default()
            });
        } else {
            self.error(ErrorFrame { error: error::NOT_AUTHORIZED, topic: Some(topic), ..ErrorFrame::default() });
        }
    }

    /// Answers a frame that could not be decoded (N3).
    pub(crate) fn invalid_frame(&self, e: &DecodeError) {
        self.error(ErrorFrame {
            error: error::INVALID_FRAME,
            hint: Some(e.hint),
            topic: e.topic.as_deref(),
            msg_ref: e.msg_ref.as_deref(),
            ..ErrorFrame::default()
        });
    }

    /// Handles one decoded frame.
    pub(crate) async fn handle(&mut self, frame: ClientFrame) {
        if self.auth.is_none() && !matches!(frame, ClientFrame::Auth(_)) {
            self.push(&ServerFrame::Error(ErrorFrame { error: error::NOT_AUTHENTICATED, ..ErrorFrame::default() }));
            return;
        }
        // Publishes in flight finish first: only publishes overtake nothing while they wait.
        if !matches!(frame, ClientFrame::Publish(_)) && self.publishing() {
            self.drain_publishes().await;
        }
        if let Some(kind) = Limited::of(&frame)
            && let Some(a) = &mut self.auth
            && !a.frame_buckets.try_take(kind)
        {
            self.frame_rate_limited(&frame, kind);
            return;
        }
        match frame {
            ClientFrame::Auth(a) => self.on_auth(a).await,
            ClientFrame::Reauth { token } => self.on_reauth(&token),
            ClientFrame::Subscribe(s) => self.on_subscribe(s).await,
            ClientFrame::Unsubscribe { topic } => self.on_unsubscribe(&topic).await,
            ClientFrame::Publish(p) => {
                if crate::trace::enabled() {
                    let span = crate::trace::publish_span(&self.st.node);
                    tracing::Instrument::instrument(self.on_publish(p), span).await;
                } else {
                    self.on_publish(p).await;
                }
            }
            ClientFrame::SetFilters { topic, filters, raw_filters } => {
                self.on_set_filters(&topic, filters, raw_filters).await
            }
            ClientFrame::Presence { room_id, data } => self.on_presence(room_id, data).await,
            ClientFrame::GetPresence { room_id } => self.on_get_presence(room_id.as_deref()).await,
            // Acks need no reply; unknown ids are ignored (N24). Only durable subscriptions
            // track deliveries, so without a durable task there is nothing to mark.
            ClientFrame::Ack { msg_id } => self.on_ack(vec![msg_id]).await,
            ClientFrame::BatchAck { msg_ids } => self.on_ack(msg_ids).await,
            ClientFrame::LobbySubscribe { lobby_id } => self.on_lobby_subscribe(&lobby_id).await,
            ClientFrame::LobbyUnsubscribe { lobby_id } => self.on_lobby_unsubscribe(&lobby_id).await,
            ClientFrame::GetLobbyPresence { lobby_id } => self.on_get_lobby_presence(&lobby_id).await,
            ClientFrame::History { topic, since, limit } => self.on_history(&topic, since, limit).await,
        }
    }

    /// Answers a frame over its kind's rate limit: 42910 `rate_limit_exceeded` naming what the
    /// frame named (topic, room or lobby); the frame does nothing.
    fn frame_rate_limited(&self, frame: &ClientFrame, kind: Limited) {
        let mut e = ErrorFrame {
            error: error::RATE_LIMIT_EXCEEDED,
            code: Some(code::RATE_LIMIT_EXCEEDED),
            hint: Some(kind.hint()),
            ..ErrorFrame::default()
        };
        match frame {
            ClientFrame::Subscribe(s) => e.topic = Some(&s.topic),
            ClientFrame::Unsubscribe { topic }
            | ClientFrame::SetFilters { topic, .. }
            | ClientFrame::History { topic, .. } => {
                e.topic = Some(topic);
            }
            ClientFrame::Presence { room_id, .. } | ClientFrame::GetPresence { room_id } => {
                e.room_id = room_id.as_deref()
            }
            ClientFrame::LobbySubscribe { lobby_id }
            | ClientFrame::LobbyUnsubscribe { lobby_id }
            | ClientFrame::GetLobbyPresence { lobby_id } => e.lobby_id = Some(lobby_id),
            _ => {}
        }
        self.st.metrics.frames_rate_limited.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.error(e);
    }

    /// The authenticated actor (for another door).
    pub(crate) fn actor(&self) -> Option<Arc<Actor>> {
        self.auth.as_ref().map(|a| a.actor.clone())
    }

    /// Whether the session holds a subscription to `topic` as sent (for another door).
    pub(crate) fn is_subscribed(&self, topic: &str) -> bool {
        self.subs.contains_key(topic)
    }

    fn actor_id(&self) -> Option<&ActorId> {
        self.auth.as_ref().map(|a| &a.actor.id)
    }

    /// The current restore record (N23).
    fn restore_record(&self) -> RestoreRecord {
        RestoreRecord {
            topics: self
                .subs
                .iter()
                .map(|(pattern, s)| RestoredTopic {
                    pattern: pattern.clone(),
                    qos: s.qos,
                    load_balance: s.group.is_some(),
                    load_balance_group: s.group_as_sent.clone(),
                    raw_filters: s.raw_filters.clone(),
                    history: s
                        .tracker
                        .as_ref()
                        .and_then(|t| t.position(self.conn.proven()))
                        .map(|(o, e)| (o, e.to_string())),
                })
                .collect(),
            lobbies: self.lobbies.keys().cloned().collect(),
            holder_last_seen_ms: None,
            door_filters: self.door.as_ref().map(|d| d.filters.clone()).unwrap_or_default(),
        }
    }

    /// Saves the restore record after a restore, unless it restored a claimed record as it was
    /// stored (issue 36: the claim already holds it for this node, so a reconnect costs the new
    /// node one commit, not two).
    async fn save_restore_after_restore(&mut self) {
        let claimed = self.claimed.take();
        if claimed.is_some_and(|c| same_record(c, self.restore_record())) {
            return;
        }
        self.save_restore().await;
    }

    /// Saves the record after a door's filters changed.
    pub(crate) async fn save_door_filters(&self) {
        self.save_restore().await;
    }

    /// Saves the restore record after a subscription change.
    async fn save_restore(&self) {
        let Some(a) = &self.auth else { return };
        // A door's clean session keeps nothing (N54).
        if self.door.as_ref().is_some_and(|d| !d.persistent) {
            return;
        }
        if let Err(e) = self.st.store.save_restore(&a.restore, &self.st.node, &self.restore_record()).await {
            tracing::warn!(error = %e, "Saving the restore record failed; a reconnect may restore less.");
        }
    }

    /// Releases everything the connection holds: starts the restore record's expiry (making a
    /// connection record claimable), then subscriptions, lobbies, presence (sending `leave` when
    /// it was the actor's last connection in the room).
    pub(crate) async fn cleanup(&mut self) {
        // Publishes in flight are stored or failing anyway: finish them (their bus publish),
        // so subscribers get what the store kept.
        self.drain_publishes_closing().await;
        // First: a connection record becomes claimable once released (N23), and a client that
        // reconnects at once should find it.
        // The offsets delivered on history topics go with the record (issue 19); not from a
        // connection whose session a newer one took over (the record is the newer one's now).
        let taken_over = self.conn.close_requested() == Some(crate::outbound::CloseRequest::TAKEN_OVER);
        if !taken_over && self.subs.iter().any(|(_, s)| s.tracker.is_some()) {
            self.save_restore().await;
        }
        // A door's session that asked to end with its connection (5.0 session expiry 0 at
        // `DISCONNECT`) is discarded first: its consumers with what they kept, its record.
        let discard = !taken_over && self.keep_s() == 0 && self.door.as_ref().is_some_and(|d| d.persistent);
        if discard {
            self.discard_door_session().await;
        }
        // A door's clean session without a client id never saved a record.
        let unsaved = |a: &Authed| {
            self.door.as_ref().is_some_and(|d| !d.persistent) && matches!(a.restore, RestoreKey::Connection(_))
        };
        if let Some(a) = self.auth.as_ref().filter(|a| !unsaved(a)) {
            let ttl = self.keep_s();
            if let Err(e) = self.st.store.release_restore(&a.restore, now_unix_s(), ttl).await {
                tracing::warn!(error = %e, "Releasing the restore record failed.");
            }
        }
        // Committed: the close frame (1012 on a drain) may go out now (issue 36).
        self.conn.mark_released();
        for (_, sub) in std::mem::take(&mut self.subs) {
            self.st.hub.remove(&sub.address, self.conn.id);
            self.st.hub.release(&bus_subscription(&sub.address, sub.group.as_ref())).await;
        }
        if let Some(d) = self.durable.take() {
            let keep = std::time::Duration::from_secs(self.keep_s());
            d.shutdown(self.st.config.shutdown_grace, keep).await;
        }
        if let Some((session, control)) = self.persistent.take() {
            self.st.unregister_session(&session, self.conn.id);
            if let Some(c) = control {
                self.st.hub.release(&c).await;
            }
        }
        for (lobby, rooms) in std::mem::take(&mut self.lobbies) {
            self.st.hub.lobby_unsubscribe(&rooms, self.conn.id, &Arc::from(lobby)).await;
        }
        self.leave_presence_room().await;
        self.auth = None;
    }

    /// How long the session is kept after the connection ends, in seconds: `restore_ttl`, or
    /// less when a door's client asked for less (MQTT 5.0 session expiry).
    pub(crate) fn keep_s(&self) -> u64 {
        let ttl = self.st.config.restore_ttl.as_secs();
        match self.door.as_ref().and_then(|d| d.expiry_s) {
            Some(asked) => ttl.min(u64::from(asked)),
            None => ttl,
        }
    }

    pub(crate) async fn on_ack(&mut self, ids: Vec<String>) {
        if let Some(d) = &self.durable {
            d.send(Cmd::Ack(ids)).await;
        }
    }

    /// Acks for another door, never waiting for the durable task: a door whose writer waits
    /// for acknowledgements (MQTT's in-flight bound) would otherwise wait on a task that waits
    /// for that writer (a backlog's frames wait for room in the queue). When the task's queue is
    /// full the acks go to the store at once, each on the session's durable consumers (a msgId
    /// is pending for one of them at most), as the task does for an id it does not remember.
    pub(crate) async fn ack_now(&mut self, ids: Vec<String>) {
        let Some(d) = &self.durable else { return };
        let Err(Cmd::Ack(ids)) = d.try_send(Cmd::Ack(ids)) else { return };
        let consumers: Vec<&str> =
            self.subs.iter().filter_map(|(_, s)| s.consumer.as_ref().map(skua_core::ConsumerId::as_str)).collect();
        let acks: Vec<(&str, &str)> =
            ids.iter().flat_map(|id| consumers.iter().map(move |c| (*c, id.as_str()))).collect();
        if acks.is_empty() {
            return;
        }
        match self.st.store.ack_many(&acks).await {
            Ok(done) => {
                let n = done.iter().filter(|d| **d).count() as u64;
                self.st.metrics.acks.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
            }
            Err(e) => tracing::warn!(error = %e, "Storing acks failed; the messages stay pending and come again."),
        }
    }

    /// This connection's durable task, started on first use.
    fn durable(&mut self) -> &DurableHandle {
        let (st, conn) = (&self.st, &self.conn);
        let key = self.auth.as_ref().map(|a| a.key.clone());
        self.durable.get_or_insert_with(|| {
            // Invariant: durable subscriptions exist only after auth.
            let key = key.expect("durable delivery starts after auth");
            DurableHandle::spawn(&st.durable, conn, &key)
        })
    }

    /// For a persistent session (a clientId, N25) and a logged topic: the subscription's
    /// consumer, created or refreshed in the store. `Err` when the store failed.
    async fn open_consumer(
        &self,
        address: &TopicAddress,
        logged: bool,
        group: Option<&Arc<str>>,
        filters: &[String],
        qos: u8,
    ) -> Result<Option<skua_core::ConsumerId>, skua_core::StoreError> {
        let Some(a) = &self.auth else { return Ok(None) };
        if !logged || a.key.client_id.is_none() {
            return Ok(None);
        }
        // A door's session keeps messages only for its QoS 1/2 subscriptions of a persistent
        // session (N54); its QoS 0 subscriptions and clean sessions get live messages only.
        if self.door.as_ref().is_some_and(|d| !d.persistent || qos == 0) {
            return Ok(None);
        }
        let id = match group {
            Some(g) => skua_core::ConsumerId::group(&skua_core::GroupKey { topic: address.clone(), group: g.clone() }),
            None => skua_core::ConsumerId::session(address, &a.key),
        };
        let consumer = skua_core::Consumer {
            id: id.to_string(),
            topic: crate::durable::topic_key(address),
            actor: a.actor.id.as_str().to_owned(),
            filters: filters.to_vec(),
        };
        self.st.store.open_consumer(&consumer, now_unix_s(), self.st.config.restore_ttl.as_secs()).await?;
        Ok(Some(id))
    }

    /// Most subscriptions plus lobby subscriptions one connection may hold.
    fn at_subscription_limit(&self) -> bool {
        self.subs.len() + self.lobbies.len() >= self.st.config.max_subscriptions_per_connection
    }
}

/// Whether two restore records hold the same subscriptions and lobbies, in any order (what
/// the store would keep; `holder_last_seen_ms` is the row's, not the record's).
fn same_record(mut a: RestoreRecord, mut b: RestoreRecord) -> bool {
    for r in [&mut a, &mut b] {
        r.holder_last_seen_ms = None;
        r.topics.sort_by(|x, y| x.pattern.cmp(&y.pattern));
        r.lobbies.sort();
    }
    a == b
}
