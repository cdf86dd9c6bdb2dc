//! The publish pipeline: one [`Publisher`] for every entry point (a client's `publish` frame,
//! the control plane's server-side publish; REST and ingress later).
//!
//! A publish is this list of calls, in this order (N17, N24, issue 12):
//! rate → size → quota → access → filter → retained admission → idempotency claim (publishes
//! with a key, [`crate::idempotency`]) → store append (logged topics) → envelope → bus publish
//! → count and tell the observers.
//! Each entry point builds a [`PublishRequest`] and maps the [`Refused`] reason to its own
//! reply (an `error` frame, a gRPC status); an [`Origin`] says which checks apply. After the
//! bus accepted a publication, every [`PublishObserver`] given at start sees it once.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use skua_core::registry::{AccessError, Actor, Operation};
use skua_core::{
    ActorId, BusError, ConnId, Envelope, EnvelopeId, NodeId, Publication, SharedRegistry, Store, StoreError,
    TopicAddress,
};
use skua_protocol::FilterError;
use skua_protocol::codes::error;

use crate::clock::now_unix_ms;
use crate::hub::Hub;
use crate::idempotency::{Gate, IdempotencyGate};
use crate::ids::EnvelopeIds;
use crate::metrics::Metrics;
use crate::ratelimit::TokenBucket;
use crate::revalidate::Connections;
use crate::triggers::Triggers;

/// Who publishes, and so which checks apply.
#[derive(Debug)]
pub enum Origin<'a> {
    /// A client connection, publishing to the address it sent: every check applies (its rate
    /// bucket, its size limit, its project's quota, its actor's access), and the publish
    /// counts towards the quota.
    Connection {
        /// The authenticated actor.
        actor: &'a Actor,
        /// The connection.
        conn: ConnId,
        /// `app/room/topic` as the client sent it.
        topic: &'a str,
        /// The connection's publish rate limit (N18).
        bucket: &'a mut TokenBucket,
        /// Largest `data` in bytes.
        max_message_size: usize,
    },
    /// The server itself (the control plane), publishing as `from` to an address it resolved,
    /// size-checked and validated itself: no rate, size, quota or access check here.
    Server {
        /// Who subscribers see as `from`.
        from: ActorId,
        /// The resolved address.
        topic: TopicAddress,
        /// Unix ms the caller stamped (and answers with).
        timestamp_ms: u64,
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

/// Why a publish was refused. Nothing of it was published; only a [`Refused::Bus`] of a logged
/// topic's message leaves it stored (N24: stored first).
#[derive(Debug)]
pub enum Refused {
    /// The connection's rate limit is used up; no token was taken (N18).
    RateLimited,
    /// `data` is larger than the publisher's limit.
    TooLarge {
        /// The limit, in bytes.
        max_size_bytes: u64,
    },
    /// The project's monthly message quota is used up.
    QuotaExceeded,
    /// The topic does not exist or the actor may not publish there.
    Access(AccessError),
    /// The filter is invalid.
    Filter(FilterError),
    /// Retaining it would break a retained cap (issue 12).
    RetainedLimit(crate::retained::Refusal),
    /// The store did not take a logged topic's message (N24).
    Store(StoreError),
    /// The bus did not take the publication.
    Bus(BusError),
    /// The idempotency key is empty or longer than the limit (issue 19).
    InvalidIdempotencyKey {
        /// The longest key accepted, in bytes.
        max_length: usize,
    },
    /// The idempotency backend (Redis in a cluster) could not be asked; nothing was published.
    Idempotency(skua_core::IdempotencyError),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::RateLimited => f.write_str("the publish rate limit is used up"),
            Self::TooLarge { max_size_bytes } => write!(f, "data exceeds {max_size_bytes} bytes"),
            Self::QuotaExceeded => f.write_str("the project's monthly message quota is used up"),
            Self::Access(e) => f.write_str(e.hint),
            Self::Filter(e) => f.write_str(e.as_wire_str()),
            Self::RetainedLimit(r) => f.write_str(r.hint()),
            Self::Store(e) => write!(f, "the store refused the logged message: {e}"),
            Self::Bus(e) => write!(f, "the message bus refused it: {e}"),
            Self::InvalidIdempotencyKey { max_length } => {
                write!(f, "idempotencyKey must be a string of 1 to {max_length} bytes")
            }
            Self::Idempotency(e) => write!(f, "the idempotency key could not be checked: {e}"),
        }
    }
}

impl Refused {
    /// The label of `skua_publishes_total{result}`; `None` for a refusal counted without one.
    fn metric_label(&self) -> Option<&'static str> {
        Some(match self {
            Self::RateLimited => error::RATE_LIMIT_EXCEEDED,
            Self::TooLarge { .. } => error::MESSAGE_TOO_LARGE,
            Self::QuotaExceeded => return None,
            Self::Access(_) => error::UNKNOWN_TOPIC,
            Self::Filter(_) => "invalid_filter",
            Self::RetainedLimit(_) => error::RETAINED_LIMIT_EXCEEDED,
            Self::Store(_) => error::STORE_UNAVAILABLE,
            Self::Bus(_) | Self::Idempotency(_) => error::BROKER_UNAVAILABLE,
            Self::InvalidIdempotencyKey { .. } => error::INVALID_IDEMPOTENCY_KEY,
        })
    }
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
    /// Idempotent publish (issue 19); `None`: keys are ignored.
    idempotency: Option<IdempotencyGate>,
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
            idempotency: None,
        }
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
        let r = self.run(req).await;
        match &r {
            Ok(a) if a.duplicate => {
                self.metrics.publishes_duplicate.fetch_add(1, Ordering::Relaxed);
            }
            Ok(_) => {}
            Err(e) => match e.metric_label() {
                Some(label) => self.metrics.publish_refused(label),
                None => {
                    self.metrics.publishes_refused.fetch_add(1, Ordering::Relaxed);
                }
            },
        }
        r
    }

    async fn run(&self, req: PublishRequest<'_>) -> Result<Accepted, Refused> {
        let PublishRequest { origin, filter, data, retain, qos, idempotency_key } = req;
        let gate = self.idempotency.as_ref().zip(idempotency_key);
        if let Some((g, key)) = gate
            && !g.valid(key)
        {
            return Err(Refused::InvalidIdempotencyKey { max_length: g.max_key_length() });
        }
        let registry = self.registry.load();
        let (source, publisher, resolved, timestamp_ms, project) = match origin {
            Origin::Connection { actor, conn, topic, bucket, max_message_size } => {
                // A publish refused for rate takes no token; one refused later has used its token.
                if !bucket.try_take() {
                    return Err(Refused::RateLimited);
                }
                if data.len() > max_message_size {
                    return Err(Refused::TooLarge { max_size_bytes: max_message_size as u64 });
                }
                if let Some(quota) = registry.project(&actor.project).and_then(|p| p.limits.monthly_message_quota)
                    && self.usage.over_quota(&actor.project, quota)
                {
                    return Err(Refused::QuotaExceeded);
                }
                let resolved = registry
                    .resolve_topic(actor, topic, Operation::Publish, crate::clock::now_unix_s())
                    .map_err(Refused::Access)?;
                (Source::Connection(conn), actor.id.clone(), resolved, None, Some(&actor.project))
            }
            Origin::Server { from, topic, timestamp_ms } => {
                let logged = registry
                    .project(&topic.room.project)
                    .and_then(|pr| pr.apps.iter().find(|a| a.id == topic.room.app))
                    .and_then(|a| a.topics.get(&*topic.topic))
                    .is_some_and(|t| t.logged);
                let resolved = skua_core::registry::ResolvedTopic { address: topic, logged };
                (Source::Server, from, resolved, Some(timestamp_ms), None)
            }
        };
        let filter = filter.map_err(Refused::Filter)?;
        // Retained caps before anything is stored or published (issue 12).
        if retain {
            self.hub.admit_retained(&resolved.address, &filter, data.len()).map_err(Refused::RetainedLimit)?;
        }
        let timestamp_ms = timestamp_ms.unwrap_or_else(now_unix_ms);
        // A repeated idempotency key goes no further (issue 19): the claim's tag is the stored
        // msgId of a logged topic's message, a nonce otherwise.
        let mut logged_id = None;
        let claimed = match gate {
            Some((g, key)) => {
                let tag = uuid::Uuid::now_v7().to_string();
                let project = &resolved.address.room.project;
                match g.claim(project, key, timestamp_ms, &tag).await.map_err(Refused::Idempotency)? {
                    Gate::Claimed(c) => {
                        logged_id = resolved.logged.then_some(tag);
                        Some((g, c))
                    }
                    Gate::Duplicate { timestamp_ms, tag } => {
                        let msg_id = resolved.logged.then_some(tag).filter(|t| !t.is_empty());
                        return Ok(Accepted {
                            id: self.next_envelope_id(),
                            timestamp_ms,
                            msg_id,
                            topic: resolved.address,
                            duplicate: true,
                        });
                    }
                }
            }
            None => None,
        };
        // A logged topic's message is stored before anything else sees it (N24).
        let mut outboxed: Option<String> = None;
        let msg_id = if resolved.logged {
            let id = logged_id.take().unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
            let key = crate::durable::topic_key(&resolved.address);
            let m = skua_core::NewMessage {
                msg_id: &id,
                topic: &key,
                filter: filter.as_deref(),
                publisher: publisher.as_str(),
                timestamp_ms,
                qos,
                data: &data,
                // The trigger goes to the outbox with the message (N45).
                trigger: self.triggers.as_ref().and_then(|t| t.lease_for(&registry, &resolved.address)),
            };
            if let Err(e) = self.store.append(&m, timestamp_ms / 1000).await {
                tracing::warn!(error = %e, "Storing a logged message failed; publish refused.");
                if let Some((g, c)) = claimed {
                    g.release(c).await;
                }
                return Err(Refused::Store(e));
            }
            self.metrics.logged_appends.fetch_add(1, Ordering::Relaxed);
            if m.trigger.is_some() {
                outboxed = Some(id.clone());
            }
            Some(id)
        } else {
            None
        };
        // A topic with history: its offset, assigned once here, before the bus (issue 19).
        let history = match (&self.history, registry.history(&resolved.address)) {
            (Some(h), Some(config)) => {
                let entry = skua_core::history::NewHistoryEntry {
                    timestamp_ms,
                    publisher: &publisher,
                    filter: filter.as_deref(),
                    msg_id: msg_id.as_deref(),
                    data: &data,
                };
                match h.append(&resolved.address, &config, entry).await {
                    Ok(pos) => Some(pos),
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
        let address = resolved.address.clone();
        let envelope = Arc::new(Envelope::Publication(Publication {
            id,
            topic: resolved.address,
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
        if let Some(project) = project {
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
        Ok(Accepted { id, timestamp_ms, msg_id, topic: address, duplicate: false })
    }
}
