//! The publish pipeline: one [`Publisher`] for every entry point (a client's `publish` frame,
//! the server-side publish of gRPC, REST and the admin dashboard, [`Origin::Api`]).
//!
//! A publish is this list of calls, in this order (N17, N24, issue 12):
//! rate → size → quota → access → filter → retained admission → idempotency claim (publishes
//! with a key, [`crate::idempotency`]) → store append (logged topics) → envelope → bus publish
//! → count and tell the observers.
//! Each entry point builds a [`PublishRequest`] and maps the [`Refused`] reason (core's one
//! typed refusal) to its own reply once (an `error` frame, a gRPC status, an HTTP answer); an
//! [`Origin`] says which checks apply. After the bus accepted a publication, every
//! [`PublishObserver`] given at start sees it once, and the room's offline members may be
//! woken (N47), here and nowhere else.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use bytes::Bytes;
pub use skua_core::refusal::{Refused, Unknown};
use skua_core::registry::{AccessError, Actor, Operation, Registry, ResolvedTopic};
use skua_core::{
    ActorId, BusError, ConnId, Envelope, EnvelopeId, NodeId, ProjectId, Publication, RoomKey, SharedRegistry, Store,
    StoreError, TopicAddress,
};
use skua_protocol::FilterError;
use skua_protocol::codes::error;

use crate::clock::now_unix_ms;
use crate::hub::Hub;
use crate::idempotency::{Gate, IdempotencyGate};
use crate::ids::EnvelopeIds;
use crate::members::{Members, WakeCause, WakeReply};
use crate::metrics::Metrics;
use crate::ratelimit::TokenBucket;
use crate::revalidate::Connections;
use crate::triggers::Triggers;

/// One connection's publish topics as resolved against the registry (`app/room/topic` as
/// sent → address, logged flag): a publish to a kept topic skips the registry look-ups and the
/// address building. An entry holds only for the registry snapshot and the actor it was
/// resolved with (any registry change — grants, topics, rooms, actors — and any change of the
/// connection's actor, by revalidation or `reauth`, empties the cache) and only until the
/// earliest expiry of the room's grants in force when it was resolved. Refusals are never kept.
#[derive(Debug)]
pub struct TopicCache {
    /// The registry snapshot the entries were resolved against (a `Weak`, so a new snapshot
    /// can never reuse its address while the cache still compares with it).
    registry: Weak<Registry>,
    /// The actor they were resolved for.
    actor: Weak<Actor>,
    /// (topic as sent, resolution, first unix second it no longer holds); at most `capacity`.
    entries: Vec<(Box<str>, ResolvedTopic, u64)>,
    /// Most entries kept (`EdgeConfig::publish_topic_cache`); 0: nothing is kept.
    capacity: usize,
    /// Where the next entry goes once the cache is full (the oldest entry).
    next: usize,
}

impl TopicCache {
    /// An empty cache of at most `capacity` topics.
    pub fn new(capacity: usize) -> Self {
        Self { registry: Weak::new(), actor: Weak::new(), entries: Vec::new(), capacity, next: 0 }
    }

    /// `topic` resolved for `actor` to publish at `now_s`, from the cache when it still holds.
    ///
    /// # Errors
    /// [`AccessError`] as [`Registry::resolve_topic`] gives it.
    pub fn resolve(
        &mut self,
        registry: &Arc<Registry>,
        actor: &Arc<Actor>,
        topic: &str,
        now_s: u64,
    ) -> Result<ResolvedTopic, AccessError> {
        if self.registry.as_ptr() != Arc::as_ptr(registry) || self.actor.as_ptr() != Arc::as_ptr(actor) {
            self.entries.clear();
            self.next = 0;
            self.registry = Arc::downgrade(registry);
            self.actor = Arc::downgrade(actor);
        }
        if let Some(i) = self.entries.iter().position(|(t, ..)| **t == *topic) {
            let (_, resolved, until) = &self.entries[i];
            if now_s < *until {
                return Ok(resolved.clone());
            }
            self.entries.swap_remove(i);
            self.next = 0;
        }
        let resolved = registry.resolve_topic(actor, topic, Operation::Publish, now_s)?;
        if self.capacity > 0
            && let Some(until) = grants_hold_until(registry, &resolved.address, topic, now_s)
        {
            let entry = (Box::from(topic), resolved.clone(), until);
            if self.entries.len() < self.capacity {
                self.entries.push(entry);
            } else {
                let i = self.next % self.entries.len();
                self.entries[i] = entry;
                self.next = (i + 1) % self.entries.len();
            }
        }
        Ok(resolved)
    }
}

/// The first unix second at which access to `address` (resolved from `topic`, the address as
/// sent) may change with time alone: the earliest expiry of its room's grants still in force at
/// `now_s`, `u64::MAX` when none expires. Grants only ever lapse, so for one registry snapshot
/// and one actor an answer holds for every second before it. `None` if the room is not found.
fn grants_hold_until(registry: &Registry, address: &TopicAddress, topic: &str, now_s: u64) -> Option<u64> {
    let slug = topic.split('/').nth(1)?;
    let app = registry.project(&address.room.project)?.apps.iter().find(|a| a.id == address.room.app)?;
    let room = app.rooms.get(slug)?;
    Some(room.grants.iter().filter_map(|g| g.expires_at).filter(|e| *e > now_s).min().unwrap_or(u64::MAX))
}

/// Who publishes, and so which checks apply.
#[derive(Debug)]
pub enum Origin<'a> {
    /// A client connection, publishing to the address it sent: every check applies (its rate
    /// bucket, its size limit, its project's quota, its actor's access), and the publish
    /// counts towards the quota.
    Connection {
        /// The authenticated actor.
        actor: &'a Arc<Actor>,
        /// The connection.
        conn: ConnId,
        /// `app/room/topic` as the client sent it.
        topic: &'a str,
        /// The connection's resolved topics.
        topics: &'a mut TopicCache,
        /// The connection's publish rate limit (N18).
        bucket: &'a mut TokenBucket,
        /// Largest `data` in bytes.
        max_message_size: usize,
    },
    /// The application backend (gRPC `Publish`, `POST /v1/publish`, the admin dashboard),
    /// publishing into `project` to `app/room/topic` as sent: resolved here against the
    /// registry the node serves (app by id or slug, the unscoped room, a topic of the app), its
    /// `data` checked to be one MessagePack value within the project's size limit; no rate,
    /// quota or grant check (it is the backend speaking), and it does not count towards the
    /// quota.
    Api {
        /// The project (the API key's, or the one the call names).
        project: &'a ProjectId,
        /// `app/room/topic` as sent.
        topic: &'a str,
        /// The actor subscribers see as `from` (it must be the project's); `None`: `server`.
        from: Option<&'a str>,
    },
}

/// One publish as an entry point hands it to the [`Publisher`].
#[derive(Debug)]
pub struct PublishRequest<'a> {
    /// Who publishes.
    pub origin: Origin<'a>,
    /// The normalised filter key, or why the one sent is invalid.
    pub filter: Result<Option<String>, FilterError>,
    /// Packed MessagePack payload, untouched (N2).
    pub data: Bytes,
    /// Keep as the last message of (topic, filter key) (N20).
    pub retain: bool,
    /// QoS as asked.
    pub qos: u8,
    /// A repeat of this key (per project) within the idempotency window is answered as a
    /// duplicate and not published again (issue 19).
    pub idempotency_key: Option<&'a str>,
    /// Who hears of a failed wake of the room's offline members (N47): a v2 connection's
    /// publish; `None`: nobody.
    pub wake_reply: Option<WakeReply>,
}

/// A publish the bus took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    /// The publication's envelope id.
    pub id: EnvelopeId,
    /// Unix ms the publication carries.
    pub timestamp_ms: u64,
    /// The stored message's `msgId` (logged topics only).
    pub msg_id: Option<String>,
    /// Where it was published (its room may have members to wake, N47).
    pub topic: TopicAddress,
    /// A repeated idempotency key: nothing was published now; `timestamp_ms` and `msg_id` are
    /// the first publish's.
    pub duplicate: bool,
}

/// The label of `skua_publishes_total{result}` for a refusal; `None` for one counted without.
fn metric_label(r: &Refused) -> Option<&'static str> {
    Some(match r {
        Refused::RateLimited => error::RATE_LIMIT_EXCEEDED,
        Refused::TooLarge { .. } => error::MESSAGE_TOO_LARGE,
        Refused::QuotaExceeded => return None,
        Refused::Access(_) | Refused::Unknown(_) => error::UNKNOWN_TOPIC,
        Refused::InvalidData => error::INVALID_FRAME,
        Refused::Filter(_) => "invalid_filter",
        Refused::RetainedLimit(_) => error::RETAINED_LIMIT_EXCEEDED,
        Refused::Store(_) => error::STORE_UNAVAILABLE,
        Refused::Bus(_) | Refused::Idempotency(_) => error::BROKER_UNAVAILABLE,
        Refused::InvalidIdempotencyKey { .. } => error::INVALID_IDEMPOTENCY_KEY,
    })
}

/// Who published an accepted publication.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A client connection of this node.
    Connection(ConnId),
    /// The server (control plane).
    Server,
}

/// One accepted publish as observers see it: borrowed, so clone what you keep.
#[derive(Debug, Clone, Copy)]
pub struct PublishEvent<'a> {
    /// Who published it.
    pub source: Source,
    /// The publication the bus took (address, filter key, publisher, msgId, data, retain…).
    pub publication: &'a Publication,
}

/// Sees every publish the bus accepted, once, on the publisher's task (triggers, wake, REST
/// audit attach here). Never sees a refused publish.
pub trait PublishObserver: std::fmt::Debug + Send + Sync + 'static {
    /// Called once per accepted publish. Must not block: hand work to a bounded queue.
    fn accepted(&self, event: &PublishEvent<'_>);
}

/// The node's publish pipeline (see the module docs for the order of its steps).
pub struct Publisher {
    registry: Arc<SharedRegistry>,
    hub: Arc<Hub>,
    store: Arc<dyn Store>,
    metrics: Arc<Metrics>,
    /// Quota usage per project.
    usage: Arc<Connections>,
    node: NodeId,
    ids: Arc<EnvelopeIds>,
    observers: Vec<Arc<dyn PublishObserver>>,
    /// Trigger webhooks (N44, N45): the outbox lease of logged messages, then told of every
    /// accepted publish after the observers.
    triggers: Option<Arc<Triggers>>,
    /// The history slot (issue 19): a topic with history gets its offset here.
    history: Option<Arc<dyn skua_core::history::History>>,
    /// Throttles the WARN about messages a project's history quota did not keep.
    history_not_kept_log: crate::triggers::Throttle,
    /// Idempotent publish (issue 19); `None`: keys are ignored.
    idempotency: Option<IdempotencyGate>,
    /// The largest server-side publish of a project without its own limit (`max_message_size`).
    max_message_size: usize,
    /// Wakes the offline members of a publish's room (N47); `None`: nobody is woken.
    members: Option<Arc<Members>>,
    /// `from` of server-side publishes that name no actor.
    server: ActorId,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher").field("node", &self.node).field("observers", &self.observers.len()).finish()
    }
}

impl Publisher {
    /// A pipeline over the node's registry, hub (retained caps, bus), store and quota usage;
    /// `observers` see every accepted publish.
    pub fn new(
        node: NodeId,
        registry: Arc<SharedRegistry>,
        hub: Arc<Hub>,
        store: Arc<dyn Store>,
        metrics: Arc<Metrics>,
        usage: Arc<Connections>,
        observers: Vec<Arc<dyn PublishObserver>>,
    ) -> Self {
        let ids = Arc::new(EnvelopeIds::new(&node));
        Self {
            registry,
            hub,
            store,
            metrics,
            usage,
            node,
            ids,
            observers,
            triggers: None,
            history: None,
            history_not_kept_log: crate::triggers::Throttle::default(),
            idempotency: None,
            max_message_size: skua_protocol::DEFAULT_MAX_PAYLOAD_BYTES,
            members: None,
            server: ActorId::parse("server").expect("\"server\" is a valid actor id"),
        }
    }

    /// Server-side publishes of projects without their own limit carry at most `bytes`
    /// (`max_message_size`; never above the frame ceiling).
    #[must_use]
    pub fn with_max_message_size(mut self, bytes: usize) -> Self {
        self.max_message_size = bytes;
        self
    }

    /// Wakes the offline members of each accepted publish's room through `members` (N47).
    #[must_use]
    pub fn with_members(mut self, members: Option<Arc<Members>>) -> Self {
        self.members = members;
        self
    }

    /// Answers repeated idempotency keys through `gate` (issue 19).
    #[must_use]
    pub fn with_idempotency(mut self, gate: Option<IdempotencyGate>) -> Self {
        self.idempotency = gate;
        self
    }

    /// Posts trigger webhooks through `triggers` (N44, N45).
    #[must_use]
    pub fn with_triggers(mut self, triggers: Option<Arc<Triggers>>) -> Self {
        self.triggers = triggers;
        self
    }

    /// Keeps the history of topics that have one in `history` (issue 19).
    #[must_use]
    pub fn with_history(mut self, history: Option<Arc<dyn skua_core::history::History>>) -> Self {
        self.history = history;
        self
    }

    /// The node's envelope ids, for other senders (node-to-node control).
    pub fn ids(&self) -> Arc<EnvelopeIds> {
        self.ids.clone()
    }

    /// A fresh cluster-unique envelope id (shared by every envelope this node sends).
    pub fn next_envelope_id(&self) -> EnvelopeId {
        self.ids.next()
    }

    /// Runs one publish through the pipeline and counts its result.
    ///
    /// # Errors
    /// [`Refused`] with the first step that failed (see [`Refused`] for what it leaves behind).
    pub async fn publish(&self, req: PublishRequest<'_>) -> Result<Accepted, Refused> {
        match self.begin(req).await {
            Begun::Done(r) => r,
            Begun::Staged(staged) => {
                let committed = staged.committed().await;
                self.finish(committed).await
            }
        }
    }

    /// The first half of [`publish`](Self::publish), for a publisher that keeps going while
    /// its logged messages commit (a connection's pipeline): every check, the idempotency
    /// claim, and the logged message queued in the store's append order. A publish refused
    /// here (or a duplicate) is [`Begun::Done`] and counted; one that passed is
    /// [`Begun::Staged`]: await [`Staged::committed`], then hand it to
    /// [`finish`](Self::finish). Staged publishes must be finished in the order they were
    /// begun: that is the order of their bus publishes (and of their messages in the log).
    pub async fn begin(&self, req: PublishRequest<'_>) -> Begun {
        match self.stage(req).await {
            Ok(staged) => Begun::Staged(staged),
            Err(r) => {
                self.count(&r);
                Begun::Done(r)
            }
        }
    }

    /// The second half of [`publish`](Self::publish): once the logged message (if any)
    /// committed, the history, the bus publish and the observers; counts the result.
    ///
    /// # Errors
    /// [`Refused`]: [`Refused::Store`] when the commit failed, else as the bus or history did.
    pub async fn finish(&self, committed: Committed) -> Result<Accepted, Refused> {
        let r = self.complete(committed).await;
        self.count(&r);
        r
    }

    fn count(&self, r: &Result<Accepted, Refused>) {
        match r {
            Ok(a) if a.duplicate => {
                self.metrics.publishes_duplicate.fetch_add(1, Ordering::Relaxed);
            }
            Ok(_) => {}
            Err(e) => match metric_label(e) {
                Some(label) => self.metrics.publish_refused(label),
                None => {
                    self.metrics.publishes_refused.fetch_add(1, Ordering::Relaxed);
                }
            },
        }
    }

    /// Checks, claims and queues; `Err(Ok(..))` is a duplicate's answer.
    async fn stage(&self, req: PublishRequest<'_>) -> Result<Staged, Result<Accepted, Refused>> {
        let PublishRequest { origin, filter, data, retain, qos, idempotency_key, wake_reply } = req;
        let gate = self.idempotency.as_ref().zip(idempotency_key);
        if let Some((g, key)) = gate
            && !g.valid(key)
        {
            return Err(Err(Refused::InvalidIdempotencyKey { max_length: g.max_key_length() }));
        }
        let registry = self.registry.load();
        let (source, publisher, resolved, project) = match origin {
            Origin::Connection { actor, conn, topic, topics, bucket, max_message_size } => {
                // A publish refused for rate takes no token; one refused later has used its token.
                if !bucket.try_take() {
                    return Err(Err(Refused::RateLimited));
                }
                if data.len() > max_message_size {
                    return Err(Err(Refused::TooLarge { max_size_bytes: max_message_size as u64 }));
                }
                if let Some(quota) = registry.project(&actor.project).and_then(|p| p.limits.monthly_message_quota)
                    && self.usage.over_quota(&actor.project, quota)
                {
                    return Err(Err(Refused::QuotaExceeded));
                }
                let resolved = topics
                    .resolve(&registry, actor, topic, crate::clock::now_unix_s())
                    .map_err(|e| Err(Refused::Access(e)))?;
                (Source::Connection(conn), actor.id.clone(), resolved, Some(actor.project.clone()))
            }
            Origin::Api { project, topic, from } => {
                let (resolved, from) = self.resolve_api(&registry, project, topic, from, &data).map_err(Err)?;
                (Source::Server, from, resolved, None)
            }
        };
        let filter = filter.map_err(|e| Err(Refused::Filter(e.as_wire_str())))?;
        // Retained caps before anything is stored or published (issue 12).
        if retain {
            self.hub
                .admit_retained(&resolved.address, &filter, data.len())
                .map_err(|e| Err(Refused::RetainedLimit(e)))?;
        }
        let timestamp_ms = now_unix_ms();
        // A repeated idempotency key goes no further (issue 19): the claim's tag is the stored
        // msgId of a logged topic's message, a nonce otherwise.
        let mut logged_id = None;
        let claimed = match gate {
            Some((g, key)) => {
                let tag = uuid::Uuid::now_v7().to_string();
                match g
                    .claim(&resolved.address.room, key, timestamp_ms, &tag)
                    .await
                    .map_err(|e| Err(Refused::Idempotency(e)))?
                {
                    Gate::Claimed(c) => {
                        logged_id = resolved.logged.then_some(tag);
                        Some(c)
                    }
                    Gate::Duplicate { timestamp_ms, tag } => {
                        let msg_id = resolved.logged.then_some(tag).filter(|t| !t.is_empty());
                        return Err(Ok(Accepted {
                            id: self.next_envelope_id(),
                            timestamp_ms,
                            msg_id,
                            topic: resolved.address,
                            duplicate: true,
                        }));
                    }
                }
            }
            None => None,
        };
        // A logged topic's message is stored before anything else sees it (N24): queued here,
        // in the order of this publisher's publishes; `finish` goes on once it committed.
        let mut outboxed: Option<String> = None;
        let mut commit = None;
        let msg_id = if resolved.logged {
            let id = logged_id.take().unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
            let key = crate::durable::topic_key(&resolved.address);
            let m = skua_core::NewMessage {
                msg_id: &id,
                topic: &key,
                filter: filter.as_deref(),
                publisher: publisher.as_str(),
                // Order is kept per connection: another connection's appends may commit beside.
                stream: match source {
                    Source::Connection(c) => c.0,
                    Source::Server => 0,
                },
                timestamp_ms,
                qos,
                data: &data,
                // The trigger goes to the outbox with the message (N45).
                trigger: self.triggers.as_ref().and_then(|t| t.lease_for(&registry, &resolved.address)),
            };
            match self.store.append_queued(&m, timestamp_ms / 1000).await {
                Ok(c) => commit = Some(c),
                Err(e) => {
                    tracing::warn!(error = %e, "Storing a logged message failed; publish refused.");
                    if let (Some(g), Some(c)) = (self.idempotency.as_ref(), claimed) {
                        g.release(c).await;
                    }
                    return Err(Err(Refused::Store(e)));
                }
            }
            if m.trigger.is_some() {
                outboxed = Some(id.clone());
            }
            Some(id)
        } else {
            None
        };
        Ok(Staged {
            commit,
            rest: Box::new(Rest {
                source,
                publisher,
                address: resolved.address,
                filter,
                data,
                retain,
                qos,
                timestamp_ms,
                msg_id,
                outboxed,
                claimed,
                registry,
                project,
                wake_reply,
            }),
        })
    }

    /// Resolves and checks a server-side publish ([`Origin::Api`]) against `registry`: the
    /// address (`app/room/topic`: an app of `project` by id or slug, one of its rooms, one of
    /// its topics), the size (the project's `max_message_size`, else the node's), `data` as one
    /// MessagePack value, and the actor it is sent as.
    fn resolve_api(
        &self,
        registry: &Registry,
        project: &ProjectId,
        topic: &str,
        from: Option<&str>,
        data: &[u8],
    ) -> Result<(ResolvedTopic, ActorId), Refused> {
        let unknown = |u| Err(Refused::Unknown(u));
        let Some(p) = registry.project(project) else { return unknown(Unknown::Project(project.to_string())) };
        let mut parts = topic.split('/');
        let (Some(app), Some(room), Some(name), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
            return Err(Refused::Access(AccessError { hint: skua_core::registry::HINT_BAD_ADDRESS }));
        };
        let Some(a) = p.apps.iter().find(|a| a.id.as_str() == app).or_else(|| p.apps.iter().find(|a| a.slug == app))
        else {
            return unknown(Unknown::App { project: project.to_string(), app: app.to_owned() });
        };
        let Some(r) = a.rooms.get(room) else {
            return unknown(Unknown::Room { app: a.slug.clone(), room: room.to_owned() });
        };
        let Some(config) = a.topics.get(name) else {
            return unknown(Unknown::Topic { app: a.slug.clone(), topic: name.to_owned() });
        };
        let max =
            p.limits.max_message_size.unwrap_or(self.max_message_size).min(skua_protocol::MAX_PAYLOAD_CEILING_BYTES);
        if data.len() > max {
            return Err(Refused::TooLarge { max_size_bytes: max as u64 });
        }
        let mut reader = skua_protocol::msgpack::Reader::new(data);
        if reader.skip_value().is_err() || !reader.is_empty() {
            return Err(Refused::InvalidData);
        }
        let from = match from {
            None => self.server.clone(),
            Some(id) => match registry.actor(id).filter(|a| a.project == *project) {
                Some(a) => a.id.clone(),
                None => return unknown(Unknown::Actor { project: project.to_string(), actor: id.to_owned() }),
            },
        };
        let address = TopicAddress {
            room: RoomKey { project: p.id.clone(), app: a.id.clone(), room: r.slug.clone() },
            topic: Arc::from(name),
        };
        Ok((ResolvedTopic { address, logged: config.logged }, from))
    }

    async fn complete(&self, committed: Committed) -> Result<Accepted, Refused> {
        let Committed { store, rest } = committed;
        let Rest {
            source,
            publisher,
            address: topic,
            filter,
            data,
            retain,
            qos,
            timestamp_ms,
            msg_id,
            outboxed,
            claimed,
            registry,
            project,
            wake_reply,
        } = *rest;
        let claimed = self.idempotency.as_ref().zip(claimed);
        if let Err(e) = store {
            tracing::warn!(error = %e, "Storing a logged message failed; publish refused.");
            if let Some((g, c)) = claimed {
                g.release(c).await;
            }
            return Err(Refused::Store(e));
        }
        if msg_id.is_some() {
            self.metrics.logged_appends.fetch_add(1, Ordering::Relaxed);
        }
        // A topic with history: its offset, assigned once here, before the bus (issue 19).
        let history = match (&self.history, registry.history(&topic)) {
            (Some(h), Some(config)) => {
                let entry = skua_core::history::NewHistoryEntry {
                    timestamp_ms,
                    publisher: &publisher,
                    filter: filter.as_deref(),
                    msg_id: msg_id.as_deref(),
                    data: &data,
                };
                match h.append(&topic, &config, entry).await {
                    Ok(a) => {
                        if !a.kept {
                            // Delivered, with its offset, but not kept (issue 33).
                            self.metrics.history_not_kept.fetch_add(1, Ordering::Relaxed);
                            if let Some(n) = self.history_not_kept_log.note(1) {
                                tracing::warn!(
                                    project = %topic.room.project,
                                    not_kept = n,
                                    "A project's history is at history_max_bytes_per_project: messages are delivered but not kept (count since the last line)."
                                );
                            }
                        }
                        Some(a.pos)
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "Appending to a topic's history failed; publish refused.");
                        // As for a refused bus publish below: the trigger leaves the outbox, the
                        // key is free for the retry.
                        if let Some(id) = &outboxed
                            && let Err(e) = self.store.finish_outbox(id).await
                        {
                            tracing::warn!(error = %e, "Removing a refused publish's trigger from the outbox failed.");
                        }
                        if let Some((g, c)) = claimed {
                            g.release(c).await;
                        }
                        return Err(Refused::Bus(BusError::Unavailable));
                    }
                }
            }
            _ => None,
        };
        let id = self.next_envelope_id();
        let address = topic.clone();
        let envelope = Arc::new(Envelope::Publication(Publication {
            id,
            topic,
            filter,
            publisher,
            // Connection ids start at 1: no client connection is a server publish's.
            publisher_conn: match source {
                Source::Connection(c) => c,
                Source::Server => ConnId(0),
            },
            node: self.node.clone(),
            timestamp_ms,
            msg_id: msg_id.clone(),
            retain,
            qos,
            data,
            history,
        }));
        // Observers borrow the publication after the bus took it; without observers the
        // envelope is handed over whole (no extra reference).
        let observed = (!self.observers.is_empty() || self.triggers.is_some()).then(|| envelope.clone());
        if let Err(e) = self.hub.bus().publish(envelope).await {
            // Refused: its trigger leaves the outbox (the message stays stored, N24).
            if let Some(id) = outboxed
                && let Err(e) = self.store.finish_outbox(&id).await
            {
                tracing::warn!(error = %e, "Removing a refused publish's trigger from the outbox failed.");
            }
            if let Some((g, c)) = claimed {
                g.release(c).await;
            }
            return Err(Refused::Bus(e));
        }
        self.metrics.publishes_accepted.fetch_add(1, Ordering::Relaxed);
        if let Some(project) = &project {
            self.usage.count_publish(project);
        }
        if let Some(env) = observed
            && let Envelope::Publication(publication) = &*env
        {
            let event = PublishEvent { source, publication };
            for o in &self.observers {
                o.accepted(&event);
            }
            if let Some(t) = &self.triggers {
                t.accepted(&registry, publication);
            }
        }
        // Offline members of the room may be woken (N47); a v2 publisher hears of a failure.
        if let Some(m) = &self.members
            && m.wants(&address.room)
        {
            m.on_publish(WakeCause { room: address.room.clone(), topic: address.topic.clone(), reply: wake_reply });
        }
        Ok(Accepted { id, timestamp_ms, msg_id, topic: address, duplicate: false })
    }
}

/// What [`Publisher::begin`] made of a publish.
#[derive(Debug)]
pub enum Begun {
    /// Refused, or a duplicate's answer: nothing more to do.
    Done(Result<Accepted, Refused>),
    /// Past its checks (a logged message queued in the store): wait for
    /// [`Staged::committed`], then [`Publisher::finish`] it, in the order publishes were begun.
    Staged(Staged),
}

/// A publish past its checks whose logged message (if any) is queued in the store.
pub struct Staged {
    /// The logged message's commit; `None`: nothing is stored (not a logged topic).
    commit: Option<skua_core::AppendCommit>,
    rest: Box<Rest>,
}

impl std::fmt::Debug for Staged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Staged").field("logged", &self.commit.is_some()).finish_non_exhaustive()
    }
}

impl Staged {
    /// Whether it waits for a commit (a logged topic's message); `false`: it can be finished
    /// at once.
    pub fn waits(&self) -> bool {
        self.commit.is_some()
    }

    /// The data's size in bytes.
    pub fn data_len(&self) -> usize {
        self.rest.data.len()
    }

    /// Waits for the logged message's commit (at once for other topics). Owns everything it
    /// needs: this future can wait in a connection's pipeline.
    pub async fn committed(self) -> Committed {
        let store = match self.commit {
            Some(c) => c.await.map(|_| ()),
            None => Ok(()),
        };
        Committed { store, rest: self.rest }
    }
}

/// A staged publish whose commit is over, to hand to [`Publisher::finish`].
pub struct Committed {
    /// What the commit came to.
    store: Result<(), StoreError>,
    rest: Box<Rest>,
}

impl std::fmt::Debug for Committed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Committed").field("stored", &self.store.is_ok()).finish_non_exhaustive()
    }
}

/// What the second half of a publish needs from the first.
struct Rest {
    source: Source,
    publisher: ActorId,
    address: TopicAddress,
    filter: Option<String>,
    data: Bytes,
    retain: bool,
    qos: u8,
    timestamp_ms: u64,
    msg_id: Option<String>,
    /// The msgId whose trigger went to the outbox with the message.
    outboxed: Option<String>,
    /// The idempotency claim, released when the publish fails.
    claimed: Option<crate::idempotency::Claimed>,
    registry: Arc<Registry>,
    /// The publisher's project, counted for its quota (connections only).
    project: Option<skua_core::ProjectId>,
    /// Who hears of a failed wake.
    wake_reply: Option<WakeReply>,
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use skua_core::registry::{App, Grant, GrantSubject, Permission, Project, ProjectLimits, Room, TopicConfig};
    use skua_core::{ActorType, AppId, ProjectId};

    use super::*;

    /// One project with app `demo`, topics `messages` and `other`, a public room `general` and
    /// a room `ops` whose only grant (to alice) is `grant`.
    fn registry(grant: Option<Grant>, alice_type: ActorType) -> Arc<Registry> {
        let p = ProjectId::parse("p").unwrap();
        let mut rooms = BTreeMap::new();
        rooms.insert("general".into(), Room { slug: "general".into(), name: "General".into(), grants: vec![] });
        // A room without grants is public: a second actor's grant keeps `ops` private.
        let bobs = Grant {
            subject: GrantSubject::Actor(ActorId::parse("bob").unwrap()),
            permission: Permission::PubSub,
            topics: None,
            expires_at: None,
        };
        let grants = grant.into_iter().chain([bobs]).collect();
        rooms.insert("ops".into(), Room { slug: "ops".into(), name: "Ops".into(), grants });
        let mut topics = BTreeMap::new();
        topics.insert("messages".into(), TopicConfig::default());
        topics.insert("other".into(), TopicConfig::default());
        let app = App {
            id: AppId::parse("demo-app").unwrap(),
            slug: "demo".into(),
            topics,
            rooms,
            webhooks: BTreeMap::new(),
            webhook_secret: None,
        };
        let project = Project {
            id: p.clone(),
            jwt_secret: None,
            wake_secret: None,
            apps: vec![app],
            lobbies: BTreeMap::new(),
            limits: ProjectLimits::default(),
        };
        let alice = Actor {
            id: ActorId::parse("alice").unwrap(),
            project: p,
            actor_type: alice_type,
            active: true,
            rate_limit: None,
            disconnect_before_ms: None,
            scope: None,
        };
        Arc::new(Registry::build(vec![project], vec![alice], vec![]).unwrap())
    }

    fn alices(expires_at: Option<u64>) -> Grant {
        Grant {
            subject: GrantSubject::Actor(ActorId::parse("alice").unwrap()),
            permission: Permission::PubSub,
            topics: None,
            expires_at,
        }
    }

    fn alice(r: &Registry) -> Arc<Actor> {
        r.actor("alice").unwrap().clone()
    }

    #[test]
    fn a_new_registry_without_the_grant_refuses_a_cached_topic() {
        let mut cache = TopicCache::new(8);
        let before = registry(Some(alices(None)), ActorType::User);
        let a = alice(&before);
        for _ in 0..2 {
            let r = cache.resolve(&before, &a, "demo/ops/messages", 10).unwrap();
            assert_eq!(&*r.address.topic, "messages");
        }
        let after = registry(None, ActorType::User);
        // The same actor value (as a session holds it until it revalidates).
        assert!(cache.resolve(&after, &a, "demo/ops/messages", 10).is_err(), "the grant was revoked");
        assert!(cache.resolve(&after, &alice(&after), "demo/ops/messages", 10).is_err());
        assert!(cache.resolve(&after, &a, "demo/general/messages", 10).is_ok());
    }

    #[test]
    fn a_cached_topic_is_refused_from_the_second_its_grant_expires() {
        let mut cache = TopicCache::new(8);
        let r = registry(Some(alices(Some(100))), ActorType::User);
        let a = alice(&r);
        assert!(cache.resolve(&r, &a, "demo/ops/messages", 98).is_ok());
        assert!(cache.resolve(&r, &a, "demo/ops/messages", 99).is_ok());
        assert!(cache.resolve(&r, &a, "demo/ops/messages", 100).is_err(), "expired at 100");
        assert!(cache.resolve(&r, &a, "demo/ops/messages", 101).is_err());
    }

    #[test]
    fn a_changed_actor_is_checked_again() {
        let mut cache = TopicCache::new(8);
        let r = registry(Some(alices(None)), ActorType::User);
        assert!(cache.resolve(&r, &alice(&r), "demo/general/messages", 10).is_ok());
        // Same registry snapshot, another actor value (a reauth, or a revalidated session).
        let observer = Arc::new(Actor { actor_type: ActorType::Observer, ..(*alice(&r)).clone() });
        assert!(cache.resolve(&r, &observer, "demo/general/messages", 10).is_err(), "observers may not publish");
    }

    #[test]
    fn the_cache_keeps_at_most_its_capacity_and_zero_keeps_nothing() {
        let r = registry(Some(alices(None)), ActorType::User);
        let a = alice(&r);
        let mut cache = TopicCache::new(2);
        for t in ["demo/ops/messages", "demo/ops/other", "demo/general/messages", "demo/general/other"] {
            assert!(cache.resolve(&r, &a, t, 10).is_ok());
            assert!(cache.entries.len() <= 2);
        }
        assert_eq!(cache.entries.len(), 2);
        // The oldest were replaced (docs/security.md, `publish_topic_cache`): the newest two stay.
        let mut kept: Vec<&str> = cache.entries.iter().map(|(t, ..)| &**t).collect();
        kept.sort_unstable();
        assert_eq!(kept, ["demo/general/messages", "demo/general/other"]);
        // Refusals are never kept.
        assert!(cache.resolve(&r, &a, "demo/nowhere/messages", 10).is_err());
        assert!(cache.entries.iter().all(|(t, ..)| !t.contains("nowhere")));
        let mut off = TopicCache::new(0);
        assert!(off.resolve(&r, &a, "demo/ops/messages", 10).is_ok());
        assert!(off.entries.is_empty());
    }
}
