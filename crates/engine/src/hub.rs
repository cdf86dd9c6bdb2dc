//! The node's local fan-out: which local connections want which topics and rooms, the bus
//! subscriptions that serve them (one per internal topic, reference counted), and the
//! dispatcher that turns each bus delivery into frames on the connections' queues.
//!
//! This is the hot path and deliberately concrete code. A delivery is matched under a read
//! lock, each distinct frame is encoded once, and the same bytes go to every recipient's
//! bounded queue without waiting (a full queue closes that connection, never stalls others).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use bytes::Bytes;
use skua_core::{
    ActorId, Bus, BusDelivery, BusError, BusSubscription, ConnId, Control, Envelope, EnvelopeId, GroupKey,
    PresenceChange, PresenceEvent, Publication, RoomKey, Route, TopicAddress,
};
use skua_protocol::{MessageFrame, PresenceEventKind, ServerFrame, ServerFrameKind};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::durable::DurableRoute;
use crate::metrics::Metrics;
use crate::outbound::ConnHandle;

/// One local subscription as the hub matches it.
#[derive(Debug)]
pub struct LocalSub {
    /// The subscribing connection.
    pub conn: Arc<ConnHandle>,
    /// Its actor: never receives its own publications (N16).
    pub actor: ActorId,
    /// The topic string exactly as the client sent it (N11).
    pub echo: Arc<str>,
    /// Filter keys; empty means wildcard (N13).
    pub filters: Arc<[String]>,
    /// Load-balancing group name, for group members.
    pub group: Option<Arc<str>>,
    /// Set for a durable subscription: its logged messages go through the connection's
    /// durable task, which claims them in the store first.
    pub durable: Option<DurableRoute>,
    /// Set while a hydration is under way (N43): live frames wait in it.
    pub hold: Option<Arc<crate::hydrate::Hold>>,
    /// For a topic with history: what it was delivered, and its recovery (issue 19).
    pub history: Option<Arc<crate::history::Tracker>>,
    /// Latest retained id seen per filter key, so a replay is never delivered twice. Shared
    /// (weakly) with a paced snapshot still being sent, which skips what is no longer latest.
    retained_seen: Arc<Mutex<RetainedSeen>>,
}

/// Latest retained publication id seen per filter key.
type RetainedSeen = HashMap<Option<String>, EnvelopeId>;

/// The part of a new subscription's retained snapshot that did not fit in its connection's
/// queue at once: sent by [`Self::send`], waiting for room before each frame, so a large
/// snapshot is paced like a stored replay and never closes the subscriber 4008 (issue 12).
#[derive(Debug)]
pub struct DeferredRetained {
    conn: Arc<ConnHandle>,
    seen: std::sync::Weak<Mutex<RetainedSeen>>,
    frames: Vec<(Option<String>, EnvelopeId, Bytes)>,
}

impl DeferredRetained {
    /// Sends the frames in order, each once there is room. A frame is skipped once a newer
    /// retained publication of its key was delivered; sending stops when the subscription is
    /// gone or the connection closes.
    pub async fn send(self, metrics: Arc<Metrics>) {
        for (key, id, frame) in self.frames {
            self.conn.room().await;
            if self.conn.is_closing() {
                return;
            }
            let Some(seen) = self.seen.upgrade() else { return };
            let latest = seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&key) == Some(&id);
            if latest {
                self.conn.push(ServerFrameKind::Message, frame);
                metrics.replays_by_kind.inc("retained");
            }
        }
    }
}

impl LocalSub {
    /// A subscription not yet inserted.
    pub fn new(
        conn: Arc<ConnHandle>,
        actor: ActorId,
        echo: Arc<str>,
        filters: Arc<[String]>,
        group: Option<Arc<str>>,
    ) -> Self {
        Self {
            conn,
            actor,
            echo,
            filters,
            group,
            durable: None,
            hold: None,
            history: None,
            retained_seen: Arc::default(),
        }
    }

    /// Queues a live frame, or keeps it in the hydration hold; a history topic's frame only
    /// when its tracker admits it (not during a recovery, not replayed already).
    fn push_live(&self, p: &Publication, frame: Bytes) -> bool {
        if let Some(t) = &self.history
            && let Some(h) = &p.history
        {
            return t.deliver_live(h, || match &self.hold {
                Some(hold) => hold.push(&self.conn, frame).then_some(None),
                None => self.conn.push_tracked(frame).map(Some),
            });
        }
        match &self.hold {
            Some(h) => h.push(&self.conn, frame),
            None => self.conn.push_uncounted(frame),
        }
    }

    fn matches(&self, p: &Publication) -> bool {
        if p.publisher == self.actor {
            return false;
        }
        match &p.filter {
            // A filtered subscription never receives unfiltered publishes (N13).
            None => self.filters.is_empty(),
            Some(key) => self.filters.is_empty() || self.filters.iter().any(|f| f == key),
        }
    }

    /// Records `id` as the retained message seen for `key`; false if it was already seen.
    fn mark_retained(&self, key: &Option<String>, id: EnvelopeId) -> bool {
        let mut seen = self.retained_seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if seen.get(key) == Some(&id) {
            return false;
        }
        seen.insert(key.clone(), id);
        true
    }
}

#[derive(Debug, Default)]
struct TopicEntry {
    subs: Vec<LocalSub>,
    // std Mutex: short map updates from the dispatcher, never across an await.
    retained: Mutex<HashMap<Option<String>, Arc<Envelope>>>,
    rr: AtomicUsize,
    /// How this topic's queued deliveries are spread over the dispatch shards.
    flow: Arc<Flow>,
}

/// A topic's queued deliveries: whether they are split over every shard, and how many shard
/// jobs are not done yet. The split changes only while nothing is in flight, so a subscriber
/// never gets a topic's messages from two shards at once (per-topic order, see [`Hub::start_dispatch`]).
#[derive(Debug, Default)]
struct Flow {
    split: std::sync::atomic::AtomicBool,
    inflight: AtomicUsize,
}

/// A local connection present in a room, with what it last announced (kept so the node can
/// re-announce its entries when the presence backend lost them).
#[derive(Debug)]
struct RoomMember {
    conn: Arc<ConnHandle>,
    actor: ActorId,
    data: Bytes,
}

/// One local presence announcement: (room, actor, connection, packed data).
pub type LocalPresence = (RoomKey, ActorId, ConnId, Bytes);

#[derive(Debug, Default)]
struct RoomEntry {
    /// Connections that announced presence here.
    members: Vec<RoomMember>,
    /// Lobby subscriptions covering this room: (connection, lobby slug as the client used it).
    lobbies: Vec<(Arc<ConnHandle>, Arc<str>)>,
}

#[derive(Debug, Default)]
struct BusRefs {
    subs: HashMap<BusSubscription, usize>,
    addresses: HashMap<TopicAddress, usize>,
}

/// The local fan-out of one node.
pub struct Hub {
    bus: Arc<dyn Bus>,
    topics: RwLock<HashMap<TopicAddress, TopicEntry>>,
    rooms: RwLock<HashMap<RoomKey, RoomEntry>>,
    // tokio Mutex: held across bus.subscribe so reference counts and bus state change together.
    bus_refs: tokio::sync::Mutex<BusRefs>,
    metrics: Arc<Metrics>,
    /// What retained messages this node keeps may cost.
    retained: crate::retained::RetainedLedger,
    /// Where control messages go (set once at start).
    control: std::sync::OnceLock<mpsc::Sender<Control>>,
    /// Whether the bus offers deliveries to [`Hub::try_deliver`] first.
    sink: std::sync::atomic::AtomicBool,
    /// Deliveries handed back to the bus's receiver and not yet handed to a dispatch shard.
    /// While any are waiting (or a shard has the topic's deliveries in flight), nothing is
    /// dispatched in place, so the receiver's order is kept.
    queued: AtomicUsize,
    /// Picks a topic's (or room's) home shard.
    shard_hash: std::hash::RandomState,
    /// Server-side watchers of topics (the admin dashboard's live view), by topic.
    taps: RwLock<HashMap<TopicAddress, Vec<TapSender>>>,
    /// How many taps exist: dispatch skips the map while there are none.
    tap_count: AtomicUsize,
    next_tap: AtomicU64,
}

/// One tap's id and queue.
type TapSender = (u64, mpsc::Sender<Arc<Envelope>>);

/// A server-side watch of one topic ([`Hub::tap`]): every publication this node receives on
/// it, through the node's own bus subscription, until [`Hub::untap`]. Publications that find
/// the queue full are dropped for this watcher only.
#[derive(Debug)]
pub struct TopicTap {
    /// The watched topic.
    pub address: TopicAddress,
    /// The publications, in the bus's order.
    pub rx: mpsc::Receiver<Arc<Envelope>>,
    id: u64,
}

/// Fan-outs with more local subscribers than this are split over every dispatch shard, each
/// shard serving the subscribers of its share of the connections; smaller ones run whole on
/// their topic's home shard (measured, docs/benchmarks.md "Issue 21 (round 2)").
pub const SPLIT_FANOUT: usize = 64;

/// Which part of a delivery a dispatch shard handles.
#[derive(Debug, Clone, Copy)]
struct Part {
    /// This shard's index, and how many shards share the delivery (1: it is whole).
    index: usize,
    of: usize,
    /// The topic's home shard: keeps its retained copy and picks its group members.
    home: bool,
}

impl Part {
    const WHOLE: Self = Self { index: 0, of: 1, home: true };

    fn serves(self, conn: ConnId) -> bool {
        self.of <= 1 || usize::try_from(conn.0 % self.of as u64).unwrap_or(0) == self.index
    }
}

/// One piece of work queued for a dispatch shard.
struct Job {
    delivery: Arc<BusDelivery>,
    part: Part,
    /// The topic's flow, counted when the job was queued; released once it ran.
    flow: Option<Arc<Flow>>,
}

/// Most local subscribers a publication may have to be fanned out on the publisher's task
/// (through [`Hub::try_deliver`]); larger fan-outs go through the dispatcher task, which
/// batches them (measured, docs/benchmarks.md: in place, S=1000 cost 1.0 µs per delivery
/// instead of 0.52, because writers then get fewer frames per write).
pub const INLINE_FANOUT: usize = 8;

/// Small fan-outs run on the publisher's task: no dispatcher wake-up per message.
impl skua_core::DeliverySink for Hub {
    fn try_deliver(&self, d: BusDelivery) -> Option<BusDelivery> {
        if self.queued.load(Ordering::Acquire) == 0
            && let Envelope::Publication(p) = &*d.envelope
            && self.dispatch_traced(&d, p, Some(INLINE_FANOUT), Part::WHOLE)
        {
            return None;
        }
        self.queued.fetch_add(1, Ordering::AcqRel);
        Some(d)
    }
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub").finish_non_exhaustive()
    }
}

fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn lock<T>(l: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    l.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The bus subscription that serves a local subscription.
pub fn bus_subscription(address: &TopicAddress, group: Option<&Arc<str>>) -> BusSubscription {
    match group {
        None => BusSubscription::Topic(address.clone()),
        Some(g) => BusSubscription::Group(GroupKey { topic: address.clone(), group: g.clone() }),
    }
}

fn address_of(sub: &BusSubscription) -> Option<&TopicAddress> {
    match sub {
        BusSubscription::Topic(a) | BusSubscription::TopicKey(a, _) => Some(a),
        BusSubscription::Group(g) => Some(&g.topic),
        BusSubscription::Presence(_) | BusSubscription::Control(_) => None,
    }
}

fn message_frame(echo: &str, p: &Publication) -> Bytes {
    ServerFrame::Message(MessageFrame {
        topic: echo,
        data: &p.data,
        filter: p.filter.as_deref(),
        from: p.publisher.as_str(),
        timestamp: p.timestamp_ms,
        msg_id: p.msg_id.as_deref(),
        is_replay: false,
        history: p.history.as_ref().map(|h| (h.offset, &*h.epoch)),
    })
    .encode()
}

/// Encodes one frame per distinct echo string (almost always exactly one).
#[derive(Default)]
struct FrameCache(Vec<(Arc<str>, Bytes)>);

impl FrameCache {
    fn get(&mut self, echo: &Arc<str>, p: &Publication) -> Bytes {
        // Pointer first: subscriptions of one topic string usually share one `Arc`.
        if let Some((_, b)) = self.0.iter().find(|(e, _)| Arc::ptr_eq(e, echo) || e == echo) {
            return b.clone();
        }
        let b = message_frame(echo, p);
        self.0.push((echo.clone(), b.clone()));
        b
    }
}

impl Hub {
    /// A hub publishing and subscribing through `bus`.
    pub fn new(bus: Arc<dyn Bus>, metrics: Arc<Metrics>, retained: crate::retained::RetainedLimits) -> Self {
        Self {
            bus,
            topics: RwLock::new(HashMap::new()),
            rooms: RwLock::new(HashMap::new()),
            bus_refs: tokio::sync::Mutex::new(BusRefs::default()),
            metrics,
            retained: crate::retained::RetainedLedger::new(retained),
            control: std::sync::OnceLock::new(),
            sink: std::sync::atomic::AtomicBool::new(false),
            queued: AtomicUsize::new(0),
            shard_hash: std::hash::RandomState::new(),
            taps: RwLock::new(HashMap::new()),
            tap_count: AtomicUsize::new(0),
            next_tap: AtomicU64::new(1),
        }
    }

    /// Watches `address` from the server (not a connection): subscribes this node on the bus
    /// for it and returns a queue of `capacity` publications.
    ///
    /// # Errors
    /// [`BusError`] when the bus refused the subscription.
    pub async fn tap(&self, address: &TopicAddress, capacity: usize) -> Result<TopicTap, BusError> {
        self.acquire(&BusSubscription::Topic(address.clone())).await?;
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let id = self.next_tap.fetch_add(1, Ordering::Relaxed);
        write(&self.taps).entry(address.clone()).or_default().push((id, tx));
        self.tap_count.fetch_add(1, Ordering::AcqRel);
        Ok(TopicTap { address: address.clone(), rx, id })
    }

    /// Ends a watch taken by [`Self::tap`], releasing its bus subscription.
    pub async fn untap(&self, tap: TopicTap) {
        let removed = {
            let mut taps = write(&self.taps);
            let removed = taps.get_mut(&tap.address).is_some_and(|v| {
                let before = v.len();
                v.retain(|(id, _)| *id != tap.id);
                v.len() < before
            });
            if taps.get(&tap.address).is_some_and(Vec::is_empty) {
                taps.remove(&tap.address);
            }
            removed
        };
        if removed {
            self.tap_count.fetch_sub(1, Ordering::AcqRel);
            self.release(&BusSubscription::Topic(tap.address.clone())).await;
        }
    }

    /// Copies a publication to the taps of its topic, never waiting.
    fn feed_taps(&self, env: &Arc<Envelope>, p: &Publication) {
        if self.tap_count.load(Ordering::Acquire) == 0 {
            return;
        }
        if let Some(taps) = read(&self.taps).get(&p.topic) {
            for (_, tx) in taps {
                // Full: this watcher misses it (the dashboard says so); closed: untap is coming.
                let _ = tx.try_send(env.clone());
            }
        }
    }

    /// Asks the bus to offer deliveries to this hub in place first; see [`INLINE_FANOUT`].
    pub fn attach_sink(self: &Arc<Self>) {
        let sink: Arc<dyn skua_core::DeliverySink> = self.clone();
        if self.bus.set_sink(Arc::downgrade(&sink)) {
            self.sink.store(true, Ordering::Release);
        }
    }

    /// Routes control messages to `tx` from now on.
    pub fn set_control(&self, tx: mpsc::Sender<Control>) {
        let _ = self.control.set(tx);
    }

    /// Admits a retained publication this node is about to publish (see [`crate::retained`]).
    ///
    /// # Errors
    /// The cap it would break; the caller refuses the publish.
    pub fn admit_retained(
        &self,
        topic: &TopicAddress,
        filter: &Option<String>,
        data_len: usize,
    ) -> Result<(), crate::retained::Refusal> {
        self.retained.admit(topic, filter, data_len).inspect_err(|r| self.metrics.retained_refused.inc(r.label()))
    }

    /// Bytes charged for the retained messages this node keeps account of.
    pub fn retained_bytes(&self) -> usize {
        self.retained.bytes()
    }

    /// Bytes charged for `project`'s retained messages on this node.
    pub fn retained_bytes_of(&self, project: &skua_core::ProjectId) -> usize {
        self.retained.project_bytes(project)
    }

    /// Forgets the retained messages of rooms that `exists` says are gone (deleted, or their
    /// app or project deleted): their bytes go back to the pools and the copies this node
    /// keeps for replay are dropped. Returns how many topics were forgotten.
    pub fn release_retained(&self, exists: impl Fn(&skua_core::RoomKey) -> bool) -> usize {
        let gone = self.retained.release_gone(exists);
        if !gone.is_empty() {
            self.bus.forget_retained(&gone);
            let topics = read(&self.topics);
            for topic in &gone {
                if let Some(entry) = topics.get(topic) {
                    lock(&entry.retained).clear();
                }
            }
        }
        gone.len()
    }

    /// The bus this hub uses.
    pub fn bus(&self) -> &Arc<dyn Bus> {
        &self.bus
    }

    /// Takes a reference on a bus subscription, subscribing on the bus for the first one.
    ///
    /// # Errors
    /// [`BusError`] when the bus refused; no reference was taken.
    pub async fn acquire(&self, sub: &BusSubscription) -> Result<(), BusError> {
        let mut refs = self.bus_refs.lock().await;
        if let Some(n) = refs.subs.get_mut(sub) {
            *n += 1;
        } else {
            // The entry exists before the bus subscription does, so a retained replay that
            // arrives before the local subscription is inserted is cached, not dropped.
            let created = address_of(sub).is_some_and(|a| {
                let mut topics = write(&self.topics);
                let fresh = !topics.contains_key(a);
                topics.entry(a.clone()).or_default();
                fresh
            });
            if let Err(e) = self.bus.subscribe(sub).await {
                if created
                    && let Some(a) = address_of(sub)
                    && !refs.addresses.contains_key(a)
                {
                    let mut topics = write(&self.topics);
                    if topics.get(a).is_some_and(|e| e.subs.is_empty()) {
                        topics.remove(a);
                    }
                }
                return Err(e);
            }
            refs.subs.insert(sub.clone(), 1);
        }
        if let Some(a) = address_of(sub) {
            *refs.addresses.entry(a.clone()).or_insert(0) += 1;
        }
        Ok(())
    }

    /// The bus subscriptions this node holds (each serves every local subscriber of it).
    pub async fn bus_subscriptions(&self) -> Vec<BusSubscription> {
        self.bus_refs.lock().await.subs.keys().cloned().collect()
    }

    /// Drops a reference taken by [`Self::acquire`]; the last one unsubscribes on the bus.
    pub async fn release(&self, sub: &BusSubscription) {
        let mut refs = self.bus_refs.lock().await;
        let last = match refs.subs.get_mut(sub) {
            Some(n) if *n > 1 => {
                *n -= 1;
                false
            }
            Some(_) => {
                refs.subs.remove(sub);
                true
            }
            None => return,
        };
        if last && let Err(e) = self.bus.unsubscribe(sub).await {
            tracing::warn!(error = %e, ?sub, "Bus unsubscribe failed; deliveries for it will be dropped.");
        }
        if let Some(a) = address_of(sub) {
            let gone = match refs.addresses.get_mut(a) {
                Some(n) if *n > 1 => {
                    *n -= 1;
                    false
                }
                Some(_) => true,
                None => false,
            };
            if gone {
                refs.addresses.remove(a);
                // No reference left for this address: nobody can be about to insert, so the
                // entry (and its retained cache) can go if it is empty.
                let mut topics = write(&self.topics);
                if topics.get(a).is_some_and(|e| e.subs.is_empty()) {
                    topics.remove(a);
                }
            }
        }
    }

    /// Inserts (or replaces, N14) the subscription of `sub.conn` on `address`. `first`, the
    /// encoded `subscribed` frame, is queued on the connection before anything the subscription
    /// receives,
    /// followed by the retained messages it matches (N20, N33) unless `with_retained` is false.
    /// Returns the subscription it replaced, and the part of the retained snapshot that did not
    /// fit in the connection's queue at once, for the caller to send paced.
    pub fn insert(
        &self,
        address: &TopicAddress,
        sub: LocalSub,
        first: Option<Bytes>,
        with_retained: bool,
    ) -> (Option<LocalSub>, Option<DeferredRetained>) {
        let mut topics = write(&self.topics);
        let entry = topics.entry(address.clone()).or_default();
        let old = entry.subs.iter().position(|s| s.conn.id == sub.conn.id).map(|i| entry.subs.swap_remove(i));
        let mut sub = sub;
        // Share the topic string with the previous subscription when it is the same (it nearly
        // always is), so the dispatcher's per-string frame cache matches by pointer.
        if let Some(last) = entry.subs.last()
            && last.echo == sub.echo
        {
            sub.echo = last.echo.clone();
        }
        if let Some(f) = first {
            sub.conn.push(ServerFrameKind::Subscribed, f);
        }
        let mut deferred = Vec::new();
        if with_retained && sub.group.is_none() {
            let retained = lock(&entry.retained);
            for env in retained.values() {
                if let Envelope::Publication(p) = &**env
                    && sub.matches(p)
                    && sub.mark_retained(&p.filter, p.id)
                {
                    // Right after `subscribed` while the queue has room (the common case: the
                    // snapshot comes before anything live); the rest is paced.
                    if deferred.is_empty() && sub.conn.has_room() {
                        sub.conn.push(ServerFrameKind::Message, message_frame(&sub.echo, p));
                        self.metrics.replays_by_kind.inc("retained");
                    } else {
                        deferred.push((p.filter.clone(), p.id, message_frame(&sub.echo, p)));
                    }
                }
            }
        }
        let deferred = (!deferred.is_empty()).then(|| DeferredRetained {
            conn: sub.conn.clone(),
            seen: Arc::downgrade(&sub.retained_seen),
            frames: deferred,
        });
        entry.subs.push(sub);
        (old, deferred)
    }

    /// Bus deliveries handed back to the bus's receiver and not yet taken by a dispatch shard.
    pub fn queued_deliveries(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    /// The local subscriptions of load-balanced group `group`: each member's actor and
    /// connection.
    pub fn group_members(&self, group: &GroupKey) -> Vec<(ActorId, ConnId)> {
        let topics = read(&self.topics);
        let Some(entry) = topics.get(&group.topic) else { return Vec::new() };
        entry
            .subs
            .iter()
            .filter(|s| s.group.as_ref() == Some(&group.group) && !s.conn.is_closing())
            .map(|s| (s.actor.clone(), s.conn.id))
            .collect()
    }

    /// Removes the subscription of `conn` on `address`, returning it.
    pub fn remove(&self, address: &TopicAddress, conn: ConnId) -> Option<LocalSub> {
        let mut topics = write(&self.topics);
        let entry = topics.get_mut(address)?;
        let i = entry.subs.iter().position(|s| s.conn.id == conn)?;
        Some(entry.subs.swap_remove(i))
    }

    /// Replaces the filter keys of `conn`'s subscription on `address` (setFilters, N14).
    pub fn set_filters(&self, address: &TopicAddress, conn: ConnId, filters: Arc<[String]>) -> bool {
        let mut topics = write(&self.topics);
        let Some(sub) = topics.get_mut(address).and_then(|e| e.subs.iter_mut().find(|s| s.conn.id == conn)) else {
            return false;
        };
        sub.filters = filters;
        true
    }

    /// Adds `conn` to the presence listeners of `room` (after acquiring its bus subscription).
    ///
    /// # Errors
    /// [`BusError`] when the bus refused the room's subscription.
    pub async fn join_room(&self, room: &RoomKey, conn: &Arc<ConnHandle>, actor: &ActorId) -> Result<(), BusError> {
        self.acquire(&BusSubscription::Presence(room.clone())).await?;
        let member = RoomMember { conn: conn.clone(), actor: actor.clone(), data: Bytes::new() };
        write(&self.rooms).entry(room.clone()).or_default().members.push(member);
        Ok(())
    }

    /// Records what `conn` last announced in `room`.
    pub fn set_presence_data(&self, room: &RoomKey, conn: ConnId, data: Bytes) {
        if let Some(m) = write(&self.rooms).get_mut(room).and_then(|e| e.members.iter_mut().find(|m| m.conn.id == conn))
        {
            m.data = data;
        }
    }

    /// Every presence announcement held by this node's connections.
    pub fn local_presence(&self) -> Vec<LocalPresence> {
        read(&self.rooms)
            .iter()
            .flat_map(|(room, e)| {
                e.members
                    .iter()
                    .filter(|m| !m.data.is_empty())
                    .map(|m| (room.clone(), m.actor.clone(), m.conn.id, m.data.clone()))
            })
            .collect()
    }

    /// Removes `conn` from the presence listeners of `room`.
    pub async fn leave_room(&self, room: &RoomKey, conn: ConnId) {
        let removed = {
            let mut rooms = write(&self.rooms);
            let Some(e) = rooms.get_mut(room) else { return };
            let before = e.members.len();
            e.members.retain(|m| m.conn.id != conn);
            let removed = e.members.len() != before;
            if e.members.is_empty() && e.lobbies.is_empty() {
                rooms.remove(room);
            }
            removed
        };
        if removed {
            self.release(&BusSubscription::Presence(room.clone())).await;
        }
    }

    /// Adds a lobby subscription of `conn` to each of `rooms`.
    ///
    /// # Errors
    /// [`BusError`] when the bus refused a room's subscription; nothing stays added.
    pub async fn lobby_subscribe(
        &self,
        rooms: &[RoomKey],
        conn: &Arc<ConnHandle>,
        lobby: &Arc<str>,
    ) -> Result<(), BusError> {
        for (i, room) in rooms.iter().enumerate() {
            if let Err(e) = self.acquire(&BusSubscription::Presence(room.clone())).await {
                for r in &rooms[..i] {
                    self.lobby_unsubscribe_room(r, conn.id, lobby).await;
                }
                return Err(e);
            }
            write(&self.rooms).entry(room.clone()).or_default().lobbies.push((conn.clone(), lobby.clone()));
        }
        Ok(())
    }

    /// Removes a lobby subscription of `conn` from each of `rooms`.
    pub async fn lobby_unsubscribe(&self, rooms: &[RoomKey], conn: ConnId, lobby: &Arc<str>) {
        for room in rooms {
            self.lobby_unsubscribe_room(room, conn, lobby).await;
        }
    }

    async fn lobby_unsubscribe_room(&self, room: &RoomKey, conn: ConnId, lobby: &Arc<str>) {
        let removed = {
            let mut rooms = write(&self.rooms);
            let Some(e) = rooms.get_mut(room) else { return };
            let Some(i) = e.lobbies.iter().position(|(c, l)| c.id == conn && l == lobby) else { return };
            e.lobbies.swap_remove(i);
            if e.members.is_empty() && e.lobbies.is_empty() {
                rooms.remove(room);
            }
            true
        };
        if removed {
            self.release(&BusSubscription::Presence(room.clone())).await;
        }
    }

    /// Starts the dispatcher on `tracker`: a router taking the bus's deliveries from `rx` and
    /// `shards` dispatch tasks (at least 1), each with a queue of `capacity` jobs. Everything runs
    /// until `rx` closes or `cancel` fires.
    ///
    /// A publication goes to its topic's home shard (a hash of the topic address), a presence
    /// event to its room's, a control message to the first shard; so one topic's (one room's)
    /// deliveries run in order on one task. A fan-out to more than [`SPLIT_FANOUT`] local
    /// subscribers is split instead: every shard gets the delivery and serves its share of the
    /// connections (connection id modulo the shard count), the home shard also keeping the
    /// retained copy and picking group members; each subscriber is still served by one shard,
    /// in order. A topic switches between whole and split only while none of its deliveries
    /// are queued. When a shard's queue is full the router waits for room, the bus queue
    /// (`bus_queue`) fills behind it, and the bus's own overflow behaviour applies (the
    /// in-process bus makes publishers wait): nothing is dropped.
    pub fn start_dispatch(
        self: &Arc<Self>,
        rx: mpsc::Receiver<BusDelivery>,
        cancel: CancellationToken,
        shards: usize,
        capacity: usize,
        tracker: &tokio_util::task::TaskTracker,
    ) {
        let mut senders = Vec::with_capacity(shards.max(1));
        for _ in 0..shards.max(1) {
            let (tx, jobs) = mpsc::channel(capacity.max(1));
            senders.push(tx);
            tracker.spawn(self.clone().run_shard(jobs, cancel.clone()));
        }
        tracker.spawn(self.clone().run_router(rx, senders, cancel));
    }

    /// Runs one dispatch shard until its router stops or `cancel` fires.
    async fn run_shard(self: Arc<Self>, mut jobs: mpsc::Receiver<Job>, cancel: CancellationToken) {
        loop {
            let job = tokio::select! {
                j = jobs.recv() => match j { Some(j) => j, None => break },
                () = cancel.cancelled() => break,
            };
            match &*job.delivery.envelope {
                Envelope::Publication(p) => {
                    self.dispatch_traced(&job.delivery, p, None, job.part);
                }
                Envelope::Presence(ev) => self.dispatch_presence(ev),
                Envelope::Control(c) => self.dispatch_control(c),
            }
            if let Some(flow) = &job.flow {
                flow.inflight.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// Hands each delivery of `rx` to its shard(s), in order, waiting for room.
    async fn run_router(
        self: Arc<Self>,
        mut rx: mpsc::Receiver<BusDelivery>,
        shards: Vec<mpsc::Sender<Job>>,
        cancel: CancellationToken,
    ) {
        let n = shards.len();
        loop {
            let d = tokio::select! {
                d = rx.recv() => match d { Some(d) => d, None => break },
                () = cancel.cancelled() => break,
            };
            let home = match &*d.envelope {
                Envelope::Publication(p) => self.shard_of(&p.topic, n),
                Envelope::Presence(ev) => self.shard_of(&ev.room, n),
                Envelope::Control(_) => 0,
            };
            let (split, flow) = match &*d.envelope {
                Envelope::Publication(p) => self.plan(&p.topic, n),
                _ => (false, None),
            };
            let delivery = Arc::new(d);
            let sent = if split {
                let mut ok = true;
                for (index, tx) in shards.iter().enumerate() {
                    let part = Part { index, of: n, home: index == home };
                    let job = Job { delivery: delivery.clone(), part, flow: flow.clone() };
                    ok &= self.send_job(tx, job).await;
                }
                ok
            } else {
                self.send_job(&shards[home], Job { delivery, part: Part::WHOLE, flow }).await
            };
            if self.sink.load(Ordering::Acquire) {
                self.queued.fetch_sub(1, Ordering::AcqRel);
            }
            if !sent {
                break;
            }
        }
    }

    /// Queues `job`, waiting for room; false (the job's flow released) once the shard stopped.
    async fn send_job(&self, tx: &mpsc::Sender<Job>, job: Job) -> bool {
        match tx.send(job).await {
            Ok(()) => true,
            Err(mpsc::error::SendError(job)) => {
                if let Some(flow) = &job.flow {
                    flow.inflight.fetch_sub(1, Ordering::AcqRel);
                }
                false
            }
        }
    }

    fn shard_of<K: std::hash::Hash>(&self, key: &K, n: usize) -> usize {
        use std::hash::BuildHasher;
        usize::try_from(self.shard_hash.hash_one(key) % n as u64).unwrap_or(0)
    }

    /// Whether a publication on `topic` is split over the `n` shards; counts its jobs in the
    /// topic's flow (returned) before they are queued.
    fn plan(&self, topic: &TopicAddress, n: usize) -> (bool, Option<Arc<Flow>>) {
        let topics = read(&self.topics);
        let Some(entry) = topics.get(topic) else { return (false, None) };
        let flow = &entry.flow;
        let split = if flow.inflight.load(Ordering::Acquire) == 0 {
            // Only this router adds to `inflight`: nothing of the topic is queued, so the
            // split may change without reordering anything.
            let want = n > 1 && entry.subs.len() > SPLIT_FANOUT;
            flow.split.store(want, Ordering::Relaxed);
            want
        } else {
            flow.split.load(Ordering::Relaxed)
        };
        flow.inflight.fetch_add(if split { n } else { 1 }, Ordering::AcqRel);
        (split, Some(flow.clone()))
    }

    /// Delivers one bus delivery to the matching local connections.
    pub fn dispatch(&self, d: &BusDelivery) {
        match &*d.envelope {
            Envelope::Publication(p) => {
                self.dispatch_traced(d, p, None, Part::WHOLE);
            }
            Envelope::Presence(ev) => self.dispatch_presence(ev),
            Envelope::Control(c) => self.dispatch_control(c),
        }
    }

    /// Hands a control message to the node's control handler; never to a connection.
    fn dispatch_control(&self, c: &Control) {
        if let Some(tx) = self.control.get()
            && tx.try_send(c.clone()).is_err()
        {
            tracing::warn!("Control queue full; a control message was dropped.");
        }
    }

    /// Dispatches a publication inside its delivery span, when it carries a trace context.
    /// With `limit`, nothing happens (false) when the topic has more local subscribers.
    fn dispatch_traced(&self, d: &BusDelivery, p: &Publication, limit: Option<usize>, part: Part) -> bool {
        match &d.trace_parent {
            None => self.dispatch_publication(&d.envelope, p, &d.route, limit, part).is_some(),
            Some(tp) => {
                let span = crate::trace::delivery_span(tp);
                let _entered = span.enter();
                let delivered = self.dispatch_publication(&d.envelope, p, &d.route, limit, part);
                if let Some(n) = delivered {
                    span.record("delivered", n);
                }
                delivered.is_some()
            }
        }
    }

    /// Returns how many local connections got it; `None` (nothing done) when `limit` is set
    /// and the topic has more local subscriptions or deliveries queued on a shard. `part` is
    /// the share of the subscribers served here (see [`Self::start_dispatch`]).
    fn dispatch_publication(
        &self,
        env: &Arc<Envelope>,
        p: &Publication,
        route: &Route,
        limit: Option<usize>,
        part: Part,
    ) -> Option<u64> {
        let topics = read(&self.topics);
        let Some(entry) = topics.get(&p.topic) else {
            if part.home {
                self.metrics.undeliverable.fetch_add(1, Ordering::Relaxed);
            }
            return Some(0);
        };
        if limit.is_some_and(|n| entry.subs.len() > n || entry.flow.inflight.load(Ordering::Acquire) > 0) {
            return None;
        }
        if part.home && matches!(route, Route::Plain) {
            self.feed_taps(env, p);
        }
        let mut frames = FrameCache::default();
        let mut delivered = 0u64;
        // Frames queued here, counted once for the whole fan-out (durable offers are counted
        // when their task queues them).
        let mut queued = 0u64;
        match route {
            Route::Plain => {
                if p.retain && part.home {
                    let mut retained = lock(&entry.retained);
                    match self.retained.admit_publication(p) {
                        Ok(()) => {
                            retained.insert(p.filter.clone(), env.clone());
                        }
                        Err(r) => {
                            // Delivered live, not kept; the older one it supersedes goes.
                            retained.remove(&p.filter);
                            self.metrics.retained_refused.inc(r.label());
                            tracing::debug!(topic = ?p.topic, reason = r.label(), "Retained message not kept.");
                        }
                    }
                }
                for sub in entry.subs.iter().filter(|s| s.group.is_none() && part.serves(s.conn.id) && s.matches(p)) {
                    // A retained copy (live or replayed) is delivered once per subscription.
                    if p.retain && !sub.mark_retained(&p.filter, p.id) {
                        continue;
                    }
                    if let Some(d) = &sub.durable
                        && p.msg_id.is_some()
                    {
                        d.offer(env);
                        delivered += 1;
                        continue;
                    }
                    if sub.push_live(p, frames.get(&sub.echo, p)) {
                        delivered += 1;
                        queued += 1;
                    }
                }
            }
            Route::Group(_) if !part.home => {}
            Route::Group(g) => {
                let candidates = || entry.subs.iter().filter(|s| s.group.as_ref() == Some(&g.group) && s.matches(p));
                let n = candidates().count();
                if n == 0 {
                    self.metrics.undeliverable.fetch_add(1, Ordering::Relaxed);
                } else {
                    let pick = entry.rr.fetch_add(1, Ordering::Relaxed) % n;
                    if let Some(sub) = candidates().nth(pick) {
                        if let Some(d) = &sub.durable
                            && p.msg_id.is_some()
                        {
                            d.offer(env);
                            delivered += 1;
                        } else if sub.push_live(p, frames.get(&sub.echo, p)) {
                            delivered += 1;
                            queued += 1;
                        }
                    }
                }
            }
        }
        self.metrics.deliveries.fetch_add(delivered, Ordering::Relaxed);
        if queued > 0 {
            self.metrics.frames_out.fetch_add(queued, Ordering::Relaxed);
            self.metrics.frames_out_by_type.add(ServerFrameKind::Message, queued);
        }
        Some(delivered)
    }

    fn dispatch_presence(&self, ev: &PresenceEvent) {
        let rooms = read(&self.rooms);
        let Some(entry) = rooms.get(&ev.room) else { return };
        let event = match ev.change {
            PresenceChange::Join => PresenceEventKind::Join,
            PresenceChange::Update => PresenceEventKind::Update,
            PresenceChange::Leave => PresenceEventKind::Leave,
            PresenceChange::Waking => PresenceEventKind::Waking,
        };
        let data = (ev.change != PresenceChange::Leave).then_some(&ev.data[..]);
        if !entry.members.is_empty() {
            let persistent =
                ev.persistent.filter(|_| ev.change != PresenceChange::Leave).map(|p| skua_protocol::PersistentRef {
                    status: p.status.as_str(),
                    advertisement_version: p.advertisement_version,
                });
            let frame =
                ServerFrame::Presence { event, actor_token_id: ev.actor.as_str(), presence: data, persistent }.encode();
            for m in &entry.members {
                m.conn.push(ServerFrameKind::Presence, frame.clone());
            }
        }
        let mut cache: Vec<(&Arc<str>, Bytes)> = Vec::new();
        for (c, lobby) in &entry.lobbies {
            let frame = if let Some((_, b)) = cache.iter().find(|(l, _)| *l == lobby) {
                b.clone()
            } else {
                let b = ServerFrame::LobbyPresence {
                    event,
                    lobby_id: lobby,
                    room_id: ev.room.slug(),
                    actor_id: ev.actor.as_str(),
                    data,
                }
                .encode();
                cache.push((lobby, b.clone()));
                b
            };
            c.push(ServerFrameKind::LobbyPresence, frame);
        }
    }
}

#[cfg(test)]
mod tests;
