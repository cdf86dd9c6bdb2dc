//! Persistent presence and wake (docs/protocol.md N46–N48; docs/agents.md).
//!
//! A presence announce whose map has `persistent: true` is also written to the store
//! ([`skua_core::MemberStore`]): one record per (room, actor, clientId), without its `wake`
//! object (which never reaches a client: the live entry and every event carry the map without
//! it). Any other announce never touches the store: [`parse`] looks for the `persistent` key's
//! bytes before it decodes anything.
//!
//! - The last connection's end sets the actor's records `offline` and sends an `update` with
//!   `status: "offline"` instead of `leave`; `data: null` deletes them (`leave`). A lapsed node's
//!   members go offline through the liveness loop; a single node's start sets offline whatever
//!   an earlier run left online.
//! - `presenceList` adds up to `presence_list_limit` stored members of the room that are not
//!   connected (status `offline` or `waking`), after the live ones.
//! - Wake: every accepted publish into a room is offered to [`Members::on_publish`], which only
//!   queues it (bounded, `wake_queue`; a full queue drops the check, counted). The wake task asks
//!   the store for the room's offline wake-enabled members; a room without any is not asked
//!   again until a member of it changes (issue 36): announced, gone offline (its connection
//!   ended, its wake failed or timed out), removed. On a single node every such change passes
//!   through this node, so the answer stays until then; in a cluster a change on another node
//!   is not seen here, so the answer is also bounded in time there (`wake_negative_cache`).
//!   At most `wake_negative_rooms` answers are kept (then they are all forgotten). A check
//!   whose store query overlapped a change keeps no answer. Each candidate is moved to `waking` by
//!   [`skua_core::MemberStore::begin_wake`], which succeeds for exactly one caller in the
//!   cluster; that node sends the `waking` event and posts the wake request through the
//!   node's webhook seam ([`Poster`]: up to 3 attempts within the member's timeout, signed with
//!   the project's wake secret, N42). When the post fails for
//!   good, the member goes back to `offline` and each v2 publisher that caused the wake on this
//!   node gets `42950 wake_failed`. A member still `waking` after its timeout goes back to
//!   `offline` (any node's sweep, once a second).
//! - A wake is a client's (issue 33; `guard`): only agents, orchestrators and devices may
//!   carry one ([`Members::parse`]), its URL must pass the address rule ([`check_wake_url`],
//!   `wake_allowed_hosts`; the engine checks it again on every resolved address), its
//!   `timeoutMs` is raised to `wake_timeout_min`, at most `wake_limit_per_actor` wakes start per
//!   actor and `wake_limit_per_url` per URL origin per `wake_limit_period` (counted in Redis for
//!   the whole cluster when presence is in Redis, [`Members::with_shared_limits`]; per node
//!   otherwise, and while Redis does not answer), and logs show a URL's origin only, at most
//!   `wake_log_limit` lines per period.
//! - The store unreachable (a Postgres restart): a wake check it cannot answer is kept, one per
//!   room (at most `wake_queue` rooms), and run again by the sweep once the store answers, so a
//!   publish made during the outage still wakes the room's members, once. A member left
//!   `waking` (its `end_wake` failed, or its node died) is set `offline` by the first sweep
//!   after its timeout that reaches the store. A member whose last connection ends while the
//!   store does not answer is set `offline` (and its `update` sent) by the first sweep that
//!   reaches it, unless it is present again by then; it is not left `online`, unwakeable.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{Map, Value};
use skua_core::webhook::{Attempts, CALL_RETRY_DELAYS, Post, Poster, WebhookKind, WebhookTarget};
use skua_core::{
    ActorId, AppId, Envelope, MemberStatus, MemberWrite, NodeId, Persistence, Presence, PresenceChange, PresenceEvent,
    ProjectId, RoomKey, SharedRegistry, Store, StoreError, StoredMember,
};
use skua_protocol::ErrorFrame;
use skua_protocol::codes::{code, error};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::clock::{now_unix_ms, now_unix_s};
use crate::config::MembersConfig;
use crate::hub::Hub;
use crate::outbound::ConnHandle;

mod guard;

use guard::{LogBudget, WakeLimits, count, has_room};
pub use guard::{check_wake_url, url_origin};

/// Longest wake URL accepted, in bytes.
pub const MAX_WAKE_URL_LEN: usize = 2048;
/// Most records one sweep moves or removes.
const SWEEP_BATCH: u32 = 1000;

/// A persistent announce, split: what clients see, the advertisement and the wake object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Persistent {
    /// The presence map without `wake` (packed MessagePack).
    pub data: Bytes,
    /// The packed `advertisement` value (empty without one).
    pub advertisement: Vec<u8>,
    /// The `wake` object as JSON, when it is enabled.
    pub wake: Option<String>,
}

/// `persistent` as a packed fixstr: what [`parse`] looks for before decoding.
const PERSISTENT_KEY: &[u8] = b"\xaapersistent";

/// Splits a presence map with `persistent: true`; `Ok(None)` for any other (the ordinary path,
/// which decodes nothing unless the map holds the `persistent` key's bytes).
///
/// # Errors
/// A hint when the `wake` object is malformed.
pub fn parse(data: &[u8]) -> Result<Option<Persistent>, &'static str> {
    if !data.windows(PERSISTENT_KEY.len()).any(|w| w == PERSISTENT_KEY) {
        return Ok(None);
    }
    let Ok(rmpv::Value::Map(entries)) = rmpv::decode::read_value(&mut &data[..]) else { return Ok(None) };
    let is = |v: &rmpv::Value, k: &str| v.as_str() == Some(k);
    if !entries.iter().any(|(k, v)| is(k, "persistent") && v.as_bool() == Some(true)) {
        return Ok(None);
    }
    let mut advertisement = Vec::new();
    if let Some((_, v)) = entries.iter().find(|(k, _)| is(k, "advertisement")) {
        // Writing to a Vec cannot fail.
        let _ = rmpv::encode::write_value(&mut advertisement, v);
    }
    let wake = match entries.iter().find(|(k, _)| is(k, "wake")) {
        Some((_, v)) if !v.is_nil() => wake_json(v)?,
        _ => None,
    };
    let kept = rmpv::Value::Map(entries.into_iter().filter(|(k, _)| !is(k, "wake")).collect());
    let mut out = Vec::with_capacity(data.len());
    let _ = rmpv::encode::write_value(&mut out, &kept);
    Ok(Some(Persistent { data: Bytes::from(out), advertisement, wake }))
}

/// The `wake` object as stored JSON (`{url, headers, timeoutMs}`), `None` when `enabled: false`.
fn wake_json(v: &rmpv::Value) -> Result<Option<String>, &'static str> {
    const BAD: &str = "presence wake must be {url, headers?, timeoutMs?, enabled?} with an http(s) url";
    let rmpv::Value::Map(m) = v else { return Err(BAD) };
    let get = |k: &str| m.iter().find(|(key, _)| key.as_str() == Some(k)).map(|(_, v)| v);
    if get("enabled").is_some_and(|e| e.as_bool() == Some(false)) {
        return Ok(None);
    }
    let url = get("url").and_then(rmpv::Value::as_str).ok_or(BAD)?;
    if url.len() > MAX_WAKE_URL_LEN || !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(BAD);
    }
    let mut headers = Map::new();
    if let Some(h) = get("headers") {
        let rmpv::Value::Map(h) = h else { return Err(BAD) };
        if h.len() > skua_core::webhook::MAX_HEADERS {
            return Err("presence wake has too many headers");
        }
        for (k, v) in h {
            let (Some(k), Some(v)) = (k.as_str(), v.as_str()) else { return Err(BAD) };
            let reserved = skua_core::webhook::RESERVED_HEADERS.iter().any(|r| r.eq_ignore_ascii_case(k));
            if reserved
                || k.len() > skua_core::webhook::MAX_HEADER_NAME_LEN
                || v.len() > skua_core::webhook::MAX_HEADER_VALUE_LEN
            {
                return Err("presence wake header is reserved or too long");
            }
            // Refused here rather than when the request is made (issue 33): CR/LF would split
            // the request, and a name that is no HTTP token could never be sent.
            let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
            if k.is_empty() || !k.chars().all(token) || v.chars().any(|c| c.is_control() && c != '\t') {
                return Err("presence wake header name must be an HTTP token and its value hold no control characters");
            }
            headers.insert(k.to_owned(), Value::String(v.to_owned()));
        }
    }
    let mut out = Map::new();
    out.insert("url".into(), Value::String(url.to_owned()));
    out.insert("headers".into(), Value::Object(headers));
    if let Some(t) = get("timeoutMs").and_then(rmpv::Value::as_u64) {
        out.insert("timeoutMs".into(), Value::from(t));
    }
    Ok(Some(Value::Object(out).to_string()))
}

/// Where and how one wake request goes (from the member's `wake` object).
#[derive(Debug, Clone)]
pub struct WakeTarget {
    /// The URL.
    pub url: String,
    /// Extra headers.
    pub headers: Vec<(String, String)>,
    /// How long the member has to connect, and the budget of the request's attempts.
    pub timeout: Duration,
}

/// A publish that may wake members of its room.
#[derive(Debug, Clone)]
pub struct WakeCause {
    /// The room.
    pub room: RoomKey,
    /// The bare topic name (`topic` of the wake request).
    pub topic: Arc<str>,
    /// For the `wake_failed` error: the publisher's connection (v2 only), the topic as it sent
    /// it and its msgRef.
    pub reply: Option<WakeReply>,
}

/// Whom a failed wake is reported to.
#[derive(Debug, Clone)]
pub struct WakeReply {
    /// The publisher's connection.
    pub conn: Weak<ConnHandle>,
    /// The topic as the publisher sent it.
    pub topic: String,
    /// Its msgRef.
    pub msg_ref: Option<String>,
}

/// Wake counters (`skua_wakes_total{outcome}`).
#[derive(Debug, Default)]
pub struct WakeMetrics {
    /// Wakes this node started (member moved to waking).
    pub started: AtomicU64,
    /// Wake requests answered 2xx.
    pub sent: AtomicU64,
    /// Wake requests that failed for good.
    pub failed: AtomicU64,
    /// Members that did not connect within their timeout.
    pub timed_out: AtomicU64,
    /// Wake checks dropped because the wake queue was full.
    pub dropped: AtomicU64,
    /// Wakes not attempted because no poster is configured or the member's wake is invalid.
    pub skipped: AtomicU64,
    /// Wake checks kept for a retry because the store did not answer.
    pub deferred: AtomicU64,
    /// Wakes not started because the actor or the URL used up its wakes for the period.
    pub limited: AtomicU64,
    /// Members whose going offline waited for the store (`skua_members_offline_deferred_total`).
    pub offline_deferred: AtomicU64,
}

impl crate::metrics::MetricsSource for Members {
    fn render(&self, out: &mut String) {
        let m = &self.metrics;
        let name = "skua_wakes_total";
        let _ = writeln!(out, "# HELP {name} Wakes of persistent presence members, by outcome.\n# TYPE {name} counter");
        for (label, c) in [
            ("started", &m.started),
            ("sent", &m.sent),
            ("failed", &m.failed),
            ("timed_out", &m.timed_out),
            ("dropped", &m.dropped),
            ("skipped", &m.skipped),
            ("deferred", &m.deferred),
            ("limited", &m.limited),
        ] {
            let _ = writeln!(out, "{name}{{outcome=\"{label}\"}} {}", c.load(Ordering::Relaxed));
        }
        let name = "skua_members_offline_deferred_total";
        let _ = writeln!(
            out,
            "# HELP {name} Persistent members whose going offline waited for the store to answer.\n# TYPE {name} counter\n{name} {}",
            m.offline_deferred.load(Ordering::Relaxed)
        );
    }
}

/// (room, actor, clientId) of a member being woken by this node.
type MemberKey = (String, String, String);

/// Publishers told of one wake's failure at most (the rest are not).
const MAX_REPLIES: usize = 64;

/// A wake check waiting for the store: the first publish's cause and every v2 publisher since.
#[derive(Debug)]
struct Deferred {
    cause: WakeCause,
    replies: Vec<WakeReply>,
}

/// The rooms known to have no wakeable members.
#[derive(Debug, Default)]
struct Negative {
    rooms: HashMap<RoomKey, Instant>,
    /// Bumped by every invalidation.
    generation: u64,
}

/// Persistent presence and wake of one node.
pub struct Members {
    config: MembersConfig,
    node: NodeId,
    store: Arc<dyn Store>,
    hub: Arc<Hub>,
    registry: Arc<SharedRegistry>,
    poster: Option<Arc<dyn Poster>>,
    queue: mpsc::Sender<WakeCause>,
    rx: Mutex<Option<mpsc::Receiver<WakeCause>>>,
    /// Rooms found without wakeable members, and when, with the number of invalidations so
    /// far (a check keeps its answer only if none happened while it asked the store).
    negative: Mutex<Negative>,
    /// Wakes in flight on this node, with the publishes that caused them.
    waking: Mutex<HashMap<MemberKey, Vec<WakeReply>>>,
    /// Wake checks the store could not answer (it was unreachable), by room, with the
    /// publishers to tell of a failure: retried by the sweep until the store answers. At most
    /// `wake_queue` rooms; beyond that a check is dropped (counted).
    deferred: Mutex<HashMap<RoomKey, Deferred>>,
    /// Members whose last connection ended while the store did not answer: set offline by the
    /// sweep once it does (unless present again). At most `wake_queue`.
    offline_pending: Mutex<HashSet<(RoomKey, ActorId)>>,
    /// Who is present (to tell a member back since from one still away).
    presence: Arc<dyn Presence>,
    /// Wakes started in the current period per (project, actor) and per (project, URL
    /// origin); emptied of past periods by the sweep. With [`Self::shared_limits`] only the
    /// fallback while those do not answer.
    limits: Mutex<WakeLimits>,
    /// The cluster's counters of the wake limits (Redis, when presence is in Redis): the
    /// limits then hold for the cluster, not per node (issue 33).
    shared_limits: Option<Arc<dyn skua_core::limits::SharedLimits>>,
    /// The log lines about failed or limited wakes this period, and those left out.
    log_budget: Mutex<LogBudget>,
    /// Counters.
    pub metrics: WakeMetrics,
}

impl std::fmt::Debug for Members {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Members").field("node", &self.node).finish_non_exhaustive()
    }
}

/// `<project>/<app>/<room>`, the store's room column.
pub fn room_column(room: &RoomKey) -> String {
    format!("{}/{}/{}", room.project, room.app, room.room)
}

/// The room of a store room column.
fn room_key(column: &str) -> Option<RoomKey> {
    let mut parts = column.splitn(3, '/');
    let project = ProjectId::parse(parts.next()?).ok()?;
    let app = AppId::parse(parts.next()?).ok()?;
    let room = parts.next().filter(|r| !r.is_empty())?;
    Some(RoomKey { project, app, room: room.into() })
}

impl Members {
    /// Whether a wake log line may be written now: `Some(lines left out since the last one)`.
    fn log_line(&self) -> Option<u64> {
        let mut b = self.log_budget.lock().unwrap_or_else(PoisonError::into_inner);
        b.take(self.config.wake_limit_period, self.config.wake_log_limit)
    }

    /// Splits a presence map with `persistent: true` as [`parse`] does, and applies the wake
    /// rules of a client-supplied URL (issue 33): only an actor of a type that is woken
    /// (`agent`, `orchestrator`, `device`) may carry a `wake`, and its URL must pass
    /// [`check_wake_url`] with `wake_allowed_hosts`.
    ///
    /// # Errors
    /// The error frame's hint, naming `wake` for a wake that is refused.
    pub fn parse(&self, data: &[u8], actor_type: skua_core::ActorType) -> Result<Option<Persistent>, &'static str> {
        let Some(p) = parse(data)? else { return Ok(None) };
        if let Some(wake) = &p.wake {
            if !actor_type.may_be_woken() {
                return Err("presence wake is only for agent, orchestrator and device actors");
            }
            let v: Value = serde_json::from_str(wake).map_err(|_| "presence wake is malformed")?;
            check_wake_url(v.get("url").and_then(Value::as_str).unwrap_or_default(), &self.config.wake_allowed)?;
        }
        Ok(Some(p))
    }

    /// Members of `node`, posting wakes through `poster` (`None`: nothing is woken).
    pub fn new(
        config: MembersConfig,
        node: NodeId,
        store: Arc<dyn Store>,
        hub: Arc<Hub>,
        registry: Arc<SharedRegistry>,
        presence: Arc<dyn Presence>,
        poster: Option<Arc<dyn Poster>>,
    ) -> Self {
        let (queue, rx) = mpsc::channel(config.wake_queue.max(1));
        Self {
            config,
            node,
            store,
            hub,
            registry,
            poster,
            queue,
            rx: Mutex::new(Some(rx)),
            negative: Mutex::new(Negative::default()),
            waking: Mutex::new(HashMap::new()),
            deferred: Mutex::new(HashMap::new()),
            offline_pending: Mutex::new(HashSet::new()),
            presence,
            limits: Mutex::new(WakeLimits::default()),
            shared_limits: None,
            log_budget: Mutex::new(LogBudget { since: Instant::now(), written: 0, left_out: 0 }),
            metrics: WakeMetrics::default(),
        }
    }

    /// Counts the wake limits in `limits`, shared by the cluster's nodes; `None`: per node.
    #[must_use]
    pub fn with_shared_limits(mut self, limits: Option<Arc<dyn skua_core::limits::SharedLimits>>) -> Self {
        self.shared_limits = limits;
        self
    }

    /// Whether a wake of `actor_key` to `url_key` is within the wake limits: the cluster's
    /// counters when there are any (which take it at once), this node's otherwise or when they
    /// do not answer.
    async fn wake_admitted(&self, actor_key: &(ProjectId, String), url_key: &(ProjectId, String)) -> bool {
        let period = self.config.wake_limit_period;
        if let Some(shared) = &self.shared_limits {
            let actor = format!("wake:actor:{}/{}", actor_key.0, actor_key.1);
            let url = format!("wake:url:{}/{}", url_key.0, url_key.1);
            let keys =
                [(actor.as_str(), self.config.wake_limit_per_actor), (url.as_str(), self.config.wake_limit_per_url)];
            match shared.take_all(&keys, period).await {
                Ok(taken) => return taken,
                Err(e) => {
                    tracing::debug!(error = %e, "The cluster's wake limits did not answer; this node counts alone.")
                }
            }
        }
        let limits = self.limits.lock().unwrap_or_else(PoisonError::into_inner);
        has_room(&limits.by_actor, actor_key, period, self.config.wake_limit_per_actor)
            && has_room(&limits.by_url, url_key, period, self.config.wake_limit_per_url)
    }

    fn expires_at(&self) -> u64 {
        now_unix_s().saturating_add(self.config.ttl.as_secs())
    }

    /// Writes a persistent announce; the stored record (status online), or `None` when the
    /// record is new and its project holds `presence_max_members_per_project` already.
    ///
    /// # Errors
    /// The store's.
    pub async fn announce(
        &self,
        room: &RoomKey,
        actor: &ActorId,
        client_id: &str,
        p: &Persistent,
    ) -> Result<Option<StoredMember>, StoreError> {
        let column = room_column(room);
        let write = MemberWrite {
            room: &column,
            actor: actor.as_str(),
            client_id,
            data: &p.data,
            advertisement: &p.advertisement,
            wake: p.wake.as_deref(),
            node: self.node.as_str(),
            now_s: now_unix_s(),
            expires_at_s: self.expires_at(),
            project_limit: self.config.max_per_project,
        };
        // Back on this node: a going offline still waiting for the store is void.
        self.offline_pending.lock().unwrap_or_else(PoisonError::into_inner).remove(&(room.clone(), actor.clone()));
        let Some(m) = self.store.upsert_member(&write).await? else { return Ok(None) };
        self.forget_negative(room);
        Ok(Some(m))
    }

    /// The actor's last connection left `room`: its records go offline. `true` when it had any
    /// (an `update` to offline was published instead of a `leave`). When the store does not
    /// answer, the change waits for it (the sweep retries it, and publishes the `update` then,
    /// unless the actor is present again) and the answer is `known_persistent`: whether the
    /// caller knows the actor announced persistent presence there (then no `leave` is due).
    pub async fn went_offline(&self, room: &RoomKey, actor: &ActorId, known_persistent: bool) -> bool {
        match self.store.members_offline(&room_column(room), actor.as_str(), self.expires_at()).await {
            Ok(changed) => {
                let Some(m) = changed.first() else { return false };
                self.forget_negative(room);
                self.publish(room.clone(), actor.clone(), m, PresenceChange::Update, MemberStatus::Offline).await;
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, ?room, "Setting a persistent member offline failed; retried when the store answers.");
                let mut pending = self.offline_pending.lock().unwrap_or_else(PoisonError::into_inner);
                if pending.len() < self.config.wake_queue.max(1) {
                    pending.insert((room.clone(), actor.clone()));
                    self.metrics.offline_deferred.fetch_add(1, Ordering::Relaxed);
                } else {
                    tracing::warn!("Members waiting to go offline are full; this one stays as stored.");
                }
                known_persistent
            }
        }
    }

    /// Sets offline the members whose going offline waited for the store, unless they are
    /// present again; stops at the first the store still does not answer.
    async fn retry_offline(&self) {
        loop {
            let next = {
                let mut pending = self.offline_pending.lock().unwrap_or_else(PoisonError::into_inner);
                let Some(key) = pending.iter().next().cloned() else { return };
                pending.take(&key)
            };
            let Some((room, actor)) = next else { return };
            match self.presence.list(&room).await {
                Ok(live) if live.iter().any(|e| e.actor == actor) => continue,
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(error = %e, ?room, "Presence unreachable; a member's going offline waits.");
                    self.offline_pending.lock().unwrap_or_else(PoisonError::into_inner).insert((room, actor));
                    return;
                }
            }
            match self.store.members_offline(&room_column(&room), actor.as_str(), self.expires_at()).await {
                Ok(changed) => {
                    if let Some(m) = changed.first() {
                        self.forget_negative(&room);
                        self.publish(room, actor, m, PresenceChange::Update, MemberStatus::Offline).await;
                    }
                }
                Err(e) => {
                    tracing::debug!(error = %e, ?room, "A member's going offline failed again.");
                    self.offline_pending.lock().unwrap_or_else(PoisonError::into_inner).insert((room, actor));
                    return;
                }
            }
        }
    }

    /// `data: null`: removes the actor's records in `room`; how many there were.
    pub async fn remove(&self, room: &RoomKey, actor: &ActorId) -> u64 {
        match self.store.delete_members(&room_column(room), actor.as_str()).await {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, ?room, "Removing a persistent member failed.");
                0
            }
        }
    }

    /// Up to `presence_list_limit` stored members of `room`.
    ///
    /// # Errors
    /// The store's.
    pub async fn list(&self, room: &RoomKey) -> Result<Vec<StoredMember>, StoreError> {
        self.store.list_members(&room_column(room), now_unix_s(), self.config.list_limit).await
    }

    async fn publish(
        &self,
        room: RoomKey,
        actor: ActorId,
        m: &StoredMember,
        change: PresenceChange,
        status: MemberStatus,
    ) {
        if status == MemberStatus::Offline {
            // Offline members are what a wake check looks for: a wake that failed or timed
            // out, an expiry, a member gone offline.
            self.forget_negative(&room);
        }
        let ev = PresenceEvent {
            room,
            actor,
            change,
            data: m.data.clone(),
            node: self.node.clone(),
            persistent: Some(Persistence { status, advertisement_version: m.advertisement_version }),
        };
        if let Err(e) = self.hub.bus().publish(Arc::new(Envelope::Presence(ev))).await {
            tracing::warn!(error = %e, "A persistent presence event could not be published.");
        }
    }

    /// Publishes the event of a stored member read back by a sweep.
    async fn publish_stored(&self, m: &StoredMember, change: PresenceChange, status: MemberStatus) {
        let (Some(room), Ok(actor)) = (room_key(&m.room), ActorId::parse(&m.actor)) else { return };
        self.publish(room, actor, m, change, status).await;
    }

    fn forget_negative(&self, room: &RoomKey) {
        let mut negative = self.negative.lock().unwrap_or_else(PoisonError::into_inner);
        negative.generation = negative.generation.wrapping_add(1);
        negative.rooms.remove(room);
    }

    /// The invalidations so far, read before a wake check asks the store.
    fn negative_generation(&self) -> u64 {
        self.negative.lock().unwrap_or_else(PoisonError::into_inner).generation
    }

    /// Keeps "no wakeable members" for `room`, unless a change happened since `generation`.
    fn remember_negative(&self, room: &RoomKey, generation: u64) {
        let mut negative = self.negative.lock().unwrap_or_else(PoisonError::into_inner);
        if negative.generation != generation {
            return;
        }
        if negative.rooms.len() >= self.config.wake_negative_rooms.max(1) && !negative.rooms.contains_key(room) {
            negative.rooms.clear();
        }
        negative.rooms.insert(room.clone(), Instant::now());
    }

    /// Whether a "no wakeable members" answer from `at` still holds: on a single node until a
    /// change removes it, in a cluster also for at most `wake_negative_cache`.
    fn negative_holds(&self, at: Instant) -> bool {
        self.config.negative_until_changed || at.elapsed() < self.config.wake_negative_cache
    }

    /// Whether a publish into `room` should be checked for members to wake: a poster is
    /// configured and the room was not found without wakeable members lately. Cheap (one map
    /// lookup); call before building a [`WakeCause`].
    pub fn wants(&self, room: &RoomKey) -> bool {
        if self.poster.is_none() {
            return false;
        }
        let negative = self.negative.lock().unwrap_or_else(PoisonError::into_inner);
        negative.rooms.get(room).is_none_or(|at| !self.negative_holds(*at))
    }

    /// An accepted publish into `cause.room`: queues a wake check. Never waits.
    pub fn on_publish(&self, cause: WakeCause) {
        if !self.wants(&cause.room) {
            return;
        }
        if self.queue.try_send(cause).is_err() {
            self.metrics.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Runs the wake checks and the sweeps until `cancel` fires.
    pub async fn run(self: Arc<Self>, cancel: CancellationToken) {
        if self.config.offline_others_at_start {
            // A single node: nothing of an earlier run is connected ("" names no node).
            match self.store.other_nodes_members_offline("", self.expires_at()).await {
                Ok(changed) if !changed.is_empty() => {
                    tracing::info!(members = changed.len(), "Persistent members of an earlier run set offline.");
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "Setting an earlier run's persistent members offline failed."),
            }
        }
        let Some(mut rx) = self.rx.lock().unwrap_or_else(PoisonError::into_inner).take() else { return };
        let mut sweep = tokio::time::interval(Duration::from_secs(1));
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                _ = sweep.tick() => self.sweep().await,
                cause = rx.recv() => match cause {
                    Some(cause) => self.check(cause).await,
                    None => return,
                },
            }
        }
    }

    /// Waking members past their timeout go back to offline; expired records go; stale
    /// negative-cache entries go (the map stays bounded by the rooms published to lately).
    async fn sweep(self: &Arc<Self>) {
        {
            let mut negative = self.negative.lock().unwrap_or_else(PoisonError::into_inner);
            negative.rooms.retain(|_, at| self.negative_holds(*at));
            drop(negative);
            let period = self.config.wake_limit_period;
            let mut limits = self.limits.lock().unwrap_or_else(PoisonError::into_inner);
            limits.by_actor.retain(|_, (since, _)| since.elapsed() < period);
            limits.by_url.retain(|_, (since, _)| since.elapsed() < period);
        }
        match self.store.expired_wakes(now_unix_ms(), SWEEP_BATCH).await {
            Ok(back) => {
                for m in back {
                    self.metrics.timed_out.fetch_add(1, Ordering::Relaxed);
                    self.publish_stored(&m, PresenceChange::Update, MemberStatus::Offline).await;
                }
                // The store answers: what it could not answer before runs now.
                self.retry_offline().await;
                self.retry_deferred().await;
            }
            Err(e) => tracing::debug!(error = %e, "Sweeping expired wakes failed."),
        }
        match self.store.expire_members(now_unix_s(), SWEEP_BATCH).await {
            Ok(gone) => {
                for m in gone {
                    self.publish_stored(&m, PresenceChange::Leave, MemberStatus::Offline).await;
                }
            }
            Err(e) => tracing::debug!(error = %e, "Expiring persistent members failed."),
        }
    }

    async fn check(self: &Arc<Self>, cause: WakeCause) {
        let column = room_column(&cause.room);
        // Publishers into a room whose members this node is waking, or whose check waits for
        // the store, share the outcome.
        if let Some(reply) = &cause.reply {
            let mut waking = self.waking.lock().unwrap_or_else(PoisonError::into_inner);
            for (key, replies) in waking.iter_mut() {
                if key.0 == column && replies.len() < MAX_REPLIES {
                    replies.push(reply.clone());
                }
            }
        }
        {
            let mut deferred = self.deferred.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(d) = deferred.get_mut(&cause.room) {
                // Already waiting for the store: the retry wakes for this publish too.
                if let Some(reply) = cause.reply
                    && d.replies.len() < MAX_REPLIES
                {
                    d.replies.push(reply);
                }
                return;
            }
        }
        let replies = cause.reply.iter().cloned().collect();
        if let Err((e, replies)) = self.wake_room(&cause, &column, replies).await {
            tracing::warn!(error = %e, room = ?cause.room, "Looking for members to wake failed; retried when the store answers.");
            self.defer(cause, replies);
        }
    }

    /// Keeps a check the store could not answer for the sweep to retry.
    fn defer(&self, cause: WakeCause, replies: Vec<WakeReply>) {
        let mut deferred = self.deferred.lock().unwrap_or_else(PoisonError::into_inner);
        if deferred.len() >= self.config.wake_queue.max(1) && !deferred.contains_key(&cause.room) {
            self.metrics.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.metrics.deferred.fetch_add(1, Ordering::Relaxed);
        let room = cause.room.clone();
        deferred.entry(room).or_insert(Deferred { cause, replies: Vec::new() }).replies.extend(replies);
    }

    /// Runs the deferred checks, stopping at the first the store still cannot answer.
    async fn retry_deferred(self: &Arc<Self>) {
        loop {
            let next = {
                let mut deferred = self.deferred.lock().unwrap_or_else(PoisonError::into_inner);
                let Some(room) = deferred.keys().next().cloned() else { return };
                deferred.remove(&room)
            };
            let Some(Deferred { cause, replies }) = next else { return };
            let column = room_column(&cause.room);
            if let Err((e, replies)) = self.wake_room(&cause, &column, replies).await {
                tracing::debug!(error = %e, room = ?cause.room, "A deferred wake check failed again.");
                self.defer(cause, replies);
                return;
            }
        }
    }

    /// Wakes the offline wake-enabled members of `cause.room`; `replies` are told if a wake
    /// fails. `Err` (with the replies back) when the store did not answer: nothing was woken
    /// that a retry would wake again (a member whose `begin_wake` answer was lost stays
    /// `waking` without a request until its timeout).
    async fn wake_room(
        self: &Arc<Self>,
        cause: &WakeCause,
        column: &str,
        replies: Vec<WakeReply>,
    ) -> Result<(), (StoreError, Vec<WakeReply>)> {
        let generation = self.negative_generation();
        let candidates = match self.store.wake_candidates(column, now_unix_s(), self.config.wake_batch).await {
            Ok(c) => c,
            Err(e) => return Err((e, replies)),
        };
        if candidates.is_empty() {
            self.remember_negative(&cause.room, generation);
            return Ok(());
        }
        for m in candidates {
            let Some(target) = self.target(&m) else {
                self.metrics.skipped.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            // Bounded per actor and per URL (issue 33): one actor with many clientIds, or many
            // actors naming one receiver, cannot turn a publish into unbounded requests.
            let project = cause.room.project.clone();
            let actor_key = (project.clone(), m.actor.clone());
            let url_key = (project, url_origin(&target.url));
            let period = self.config.wake_limit_period;
            if !self.wake_admitted(&actor_key, &url_key).await {
                self.metrics.limited.fetch_add(1, Ordering::Relaxed);
                if let Some(left_out) = self.log_line() {
                    tracing::warn!(
                        origin = %url_key.1,
                        actor = %m.actor,
                        left_out,
                        "A wake was not started: its actor or URL used up its wakes for the period."
                    );
                }
                continue;
            }
            let until = now_unix_ms().saturating_add(u64::try_from(target.timeout.as_millis()).unwrap_or(u64::MAX));
            match self.store.begin_wake(column, &m.actor, &m.client_id, until).await {
                Ok(true) => {
                    let mut limits = self.limits.lock().unwrap_or_else(PoisonError::into_inner);
                    count(&mut limits.by_actor, actor_key, period);
                    count(&mut limits.by_url, url_key, period);
                }
                Ok(false) => continue,
                // The members not woken yet are still offline: the retry wakes them.
                Err(e) => return Err((e, replies)),
            }
            self.metrics.started.fetch_add(1, Ordering::Relaxed);
            let key = (column.to_owned(), m.actor.clone(), m.client_id.clone());
            self.waking.lock().unwrap_or_else(PoisonError::into_inner).insert(key.clone(), replies.clone());
            self.publish_stored(&m, PresenceChange::Waking, MemberStatus::Waking).await;
            let this = self.clone();
            let cause = cause.clone();
            tokio::spawn(async move { this.post(cause, m, key, target).await });
        }
        Ok(())
    }

    fn target(&self, m: &StoredMember) -> Option<WakeTarget> {
        let v: Value = serde_json::from_str(m.wake.as_deref()?).ok()?;
        let url = v.get("url")?.as_str()?.to_owned();
        let headers = v
            .get("headers")
            .and_then(Value::as_object)
            .map(|h| h.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect())
            .unwrap_or_default();
        let timeout = v
            .get("timeoutMs")
            .and_then(Value::as_u64)
            .filter(|ms| *ms > 0)
            .map_or(self.config.wake_timeout, Duration::from_millis)
            .min(self.config.wake_timeout_max)
            // A member is woken at most once per its timeout: a floor (issue 33).
            .max(self.config.wake_timeout_min);
        Some(WakeTarget { url, headers, timeout })
    }

    async fn post(&self, cause: WakeCause, m: StoredMember, key: MemberKey, target: WakeTarget) {
        let Some(poster) = &self.poster else { return };
        let mut body = Map::new();
        body.insert("projectId".into(), Value::String(cause.room.project.to_string()));
        // `app` is the app's slug, as in every webhook payload (N43, N44).
        let registry = self.registry.load();
        let app =
            crate::triggers::payload::app_slug(crate::triggers::payload::app_of(&registry, &cause.room), &cause.room);
        body.insert("app".into(), Value::String(app));
        body.insert("room".into(), Value::String(cause.room.slug().to_owned()));
        body.insert("actorTokenId".into(), Value::String(m.actor.clone()));
        if !m.client_id.is_empty() {
            body.insert("clientId".into(), Value::String(m.client_id.clone()));
        }
        body.insert("reason".into(), Value::String("dispatch".into()));
        body.insert("topic".into(), Value::String(cause.topic.to_string()));
        let secret = registry.project(&cause.room.project).and_then(|p| p.wake_secret.clone());
        drop(registry);
        let delivery_id = uuid::Uuid::new_v4().to_string();
        let body = skua_core::webhook::json_body(body, &delivery_id, now_unix_ms());
        let webhook = WebhookTarget { url: target.url.clone(), headers: target.headers.clone(), timeout_ms: None };
        let post = Post {
            kind: WebhookKind::Wake,
            target: &webhook,
            secret: secret.as_ref(),
            delivery_id: &delivery_id,
            body,
        };
        let attempts = Attempts::Within { delays: &CALL_RETRY_DELAYS, budget: target.timeout };
        let result = poster.post(post, attempts).await.map(drop).map_err(|e| e.error);
        let replies = self.waking.lock().unwrap_or_else(PoisonError::into_inner).remove(&key).unwrap_or_default();
        match result {
            Ok(()) => {
                self.metrics.sent.fetch_add(1, Ordering::Relaxed);
            }
            Err(why) => {
                self.metrics.failed.fetch_add(1, Ordering::Relaxed);
                // The origin only (a path or query may carry a secret), and at most
                // `wake_log_limit` lines per period: a client controls how often this happens.
                if let Some(left_out) = self.log_line() {
                    let origin = url_origin(&target.url);
                    tracing::warn!(%origin, actor = %m.actor, error = %why, left_out, "A wake request failed.");
                }
                if matches!(self.store.end_wake(&key.0, &key.1, &key.2).await, Ok(true)) {
                    self.publish_stored(&m, PresenceChange::Update, MemberStatus::Offline).await;
                }
                for r in replies {
                    let Some(conn) = r.conn.upgrade() else { continue };
                    conn.send(&skua_protocol::ServerFrame::Error(ErrorFrame {
                        error: error::WAKE_FAILED,
                        code: Some(code::WAKE_FAILED),
                        topic: Some(&r.topic),
                        msg_ref: r.msg_ref.as_deref(),
                        actor_token_id: Some(&m.actor),
                        ..ErrorFrame::default()
                    }));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::triggers::payload::tests::pack;

    fn map(entries: Vec<(&str, rmpv::Value)>) -> rmpv::Value {
        rmpv::Value::Map(entries.into_iter().map(|(k, v)| (rmpv::Value::from(k), v)).collect())
    }

    #[test]
    fn ordinary_presence_is_not_persistent() {
        let data = pack(&map(vec![("status", "online".into())]));
        assert_eq!(parse(&data), Ok(None));
        let data = pack(&map(vec![("persistent", false.into())]));
        assert_eq!(parse(&data), Ok(None));
    }

    #[test]
    fn wake_is_split_off_and_advertisement_kept() {
        let wake = map(vec![("url", "http://127.0.0.1:9/wake".into()), ("timeoutMs", 5000.into())]);
        let data = pack(&map(vec![
            ("persistent", true.into()),
            ("advertisement", map(vec![("v", 1.into())])),
            ("wake", wake),
        ]));
        let p = parse(&data).unwrap().unwrap();
        let kept = rmpv::decode::read_value(&mut &p.data[..]).unwrap();
        assert!(kept.as_map().unwrap().iter().all(|(k, _)| k.as_str() != Some("wake")));
        assert_eq!(p.advertisement, pack(&map(vec![("v", 1.into())])));
        let w: Value = serde_json::from_str(p.wake.as_deref().unwrap()).unwrap();
        assert_eq!(w["url"], "http://127.0.0.1:9/wake");
        assert_eq!(w["timeoutMs"], 5000);
    }

    #[test]
    fn disabled_or_bad_wake() {
        let off = map(vec![("url", "http://x/".into()), ("enabled", false.into())]);
        let p = parse(&pack(&map(vec![("persistent", true.into()), ("wake", off)]))).unwrap().unwrap();
        assert_eq!(p.wake, None);
        let bad = map(vec![("url", "ftp://x/".into())]);
        assert!(parse(&pack(&map(vec![("persistent", true.into()), ("wake", bad)]))).is_err());
    }

    // Issue 33: CR/LF (and other control characters) in a wake header, or a header name that
    // is no HTTP token, is refused at announce.
    #[test]
    fn wake_headers_with_control_characters_are_refused() {
        for (k, v) in [("X-A", "a\r\nInjected: 1"), ("X-A", "a\nb"), ("X A", "v"), ("X-A\r\nB", "v"), ("", "v")] {
            let wake = map(vec![("url", "http://x.example/".into()), ("headers", map(vec![(k, v.into())]))]);
            let e = parse(&pack(&map(vec![("persistent", true.into()), ("wake", wake)]))).unwrap_err();
            assert!(e.contains("wake"), "{k:?}: {e}");
        }
        let wake = map(vec![("url", "http://x.example/".into()), ("headers", map(vec![("X-A", "a\tb".into())]))]);
        assert!(parse(&pack(&map(vec![("persistent", true.into()), ("wake", wake)]))).is_ok());
    }

    #[test]
    fn room_columns_round_trip() {
        let room = RoomKey {
            project: ProjectId::parse("p1").unwrap(),
            app: AppId::parse("a1").unwrap(),
            room: "r/with/slashes".into(),
        };
        assert_eq!(room_key(&room_column(&room)), Some(room));
    }
}
