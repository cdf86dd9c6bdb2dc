//! [`InProcessBus`]: the embedded bus, for nodes that live in one process.
//!
//! One [`InProcessBus`] is the shared "broker": a routing table behind a `std::sync::Mutex`.
//! [`InProcessBus::connect`] gives a node its [`Bus`] handle and the receiving end of its own
//! bounded delivery channel. How it keeps the [`Bus`] contract:
//!
//! - **Delivery, one plain copy, groups**: `publish` computes the targets of an envelope under
//!   the lock (a node's `Topic` and `TopicKey` subscriptions collapse into one [`Route::Plain`]
//!   target; each group picks one member, round robin) and sends after releasing it.
//! - **Order and retain**: every channel (topic address, or room for presence events) has an
//!   async *turn* lock. `publish` holds its channel's turn from routing until the last send, and
//!   `subscribe` holds it from recording the subscription until the retained replay is queued. So
//!   publications on one channel reach every node in one order, and a replay reaches a node before
//!   any live publication routed after its subscription existed: a node never sees an older
//!   retained copy after a newer live one.
//! - **Control messages** go through a channel of their own per project, which only `Control`
//!   subscriptions join: they never meet topic, presence or group subscribers, and are never
//!   retained.
//! - **Retained messages** are replayed to new `Topic` and `TopicKey` subscriptions only, never
//!   to `Group` subscriptions: a replay to a group member would give that group a second copy of a
//!   publication it already consumed (contract 3), and MQTT v5 §4.8.2 likewise sends no retained
//!   messages to shared subscriptions. At most `max_retained` (topic, filter key) pairs are kept;
//!   see [`InProcessBus::with_max_retained`].
//! - **Backpressure**: `publish` awaits each full receiver; nothing is dropped and nothing is
//!   buffered without bound. A node whose receiver was dropped is removed with its subscriptions;
//!   deliveries to it are discarded and are not an error for the publisher.
//! - **Sinks**: a node that set a sink ([`Bus::set_sink`]) is offered each delivery first, on
//!   the publisher's task and under the channel's turn, so the order above holds whether the
//!   sink takes it or hands it back to the receiver.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use async_trait::async_trait;
use skua_core::{
    Bus, BusDelivery, BusError, BusSubscription, DeliverySink, Envelope, GroupKey, NodeId, ProjectId, RoomKey, Route,
    TopicAddress,
};
use tokio::sync::{Mutex as TurnLock, mpsc};
use tracing::{debug, warn};

/// Default bound on retained (topic, filter key) pairs: see [`InProcessBus::with_max_retained`].
pub const DEFAULT_MAX_RETAINED: usize = 100_000;

/// The in-process bus: a clonable handle onto one routing table shared by every node connected
/// to it. See the [module docs](self) for how it keeps the [`Bus`] contract.
#[derive(Clone)]
pub struct InProcessBus {
    shared: Arc<Shared>,
}

impl InProcessBus {
    /// A bus that keeps up to [`DEFAULT_MAX_RETAINED`] retained publications.
    pub fn new() -> Self {
        Self::with_max_retained(DEFAULT_MAX_RETAINED)
    }

    /// A bus that keeps up to `max_retained` retained publications, one per (topic address,
    /// filter key). A retained publication replacing a kept one is always stored. When the store
    /// is full, a retained publication for a *new* (topic, filter key) is still delivered live
    /// but not kept, so later subscribers do not get it replayed; refusals are counted and logged
    /// at WARN on the 1st, 2nd, 4th, 8th, … occurrence. Kept publications are never evicted:
    /// the bus cannot know which of them still matter; [`Bus::forget_retained`] drops those of
    /// deleted rooms.
    pub fn with_max_retained(max_retained: usize) -> Self {
        Self { shared: Arc::new(Shared { state: Mutex::new(State::default()), max_retained }) }
    }

    /// Connects a node: returns its [`Bus`] handle and its delivery receiver, which holds at most
    /// `capacity` undelivered envelopes (at least 1). When it is full, publishers targeting this
    /// node wait in `publish`.
    ///
    /// Each call makes an independent node, even for a `node` id already connected. Dropping the
    /// handle removes the node's subscriptions; dropping the receiver makes the bus remove the
    /// node the next time it delivers to it.
    pub fn connect(&self, node: NodeId, capacity: usize) -> (Arc<dyn Bus>, mpsc::Receiver<BusDelivery>) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let slot = {
            let mut state = self.shared.lock();
            let slot = state.next_slot;
            state.next_slot += 1;
            state.nodes.insert(slot, NodeEntry { node: node.clone(), tx, sink: None, subs: HashSet::new() });
            slot
        };
        debug!(%node, slot, "Node connected to the in-process bus.");
        (Arc::new(NodeHandle { shared: self.shared.clone(), slot, node }), rx)
    }

    /// How many retained publications are kept.
    pub fn retained_len(&self) -> usize {
        self.shared.lock().retained_len
    }

    /// How many retained publications for a new (topic, filter key) were not kept because the
    /// retained store was full.
    pub fn retained_refused(&self) -> u64 {
        self.shared.lock().retained_refused
    }
}

impl Default for InProcessBus {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for InProcessBus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.lock();
        f.debug_struct("InProcessBus")
            .field("nodes", &state.nodes.len())
            .field("retained", &state.retained_len)
            .field("max_retained", &self.shared.max_retained)
            .finish_non_exhaustive()
    }
}

/// Identifies one connected node inside the routing table.
type Slot = u64;

struct Shared {
    /// `std::sync::Mutex`, not tokio's: every critical section edits or reads the routing table
    /// and never awaits. Senders are cloned out before any `send().await`.
    state: Mutex<State>,
    max_retained: usize,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // No code panics while holding the lock, and every section leaves the tables consistent
        // before anything that could panic, so a poisoned table is still a valid one.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[derive(Default)]
struct State {
    next_slot: Slot,
    nodes: HashMap<Slot, NodeEntry>,
    topics: HashMap<TopicAddress, Channel>,
    rooms: HashMap<RoomKey, Channel>,
    /// Control channels, one per project; never retained.
    controls: HashMap<ProjectId, Channel>,
    retained_len: usize,
    retained_refused: u64,
}

struct NodeEntry {
    node: NodeId,
    tx: mpsc::Sender<BusDelivery>,
    /// Offered each delivery before `tx` ([`Bus::set_sink`]).
    sink: Option<Weak<dyn DeliverySink>>,
    /// The source of truth for idempotence; the channels' sets mirror it.
    subs: HashSet<BusSubscription>,
}

/// Everything routed through one topic address (publications), one room (presence events) or
/// one project (control messages).
#[derive(Default)]
struct Channel {
    /// Held across routing and sending; see the module docs. Replaced (never shared) when the
    /// channel is dropped and made again, so holders check `Arc::ptr_eq` after acquiring it.
    turn: Arc<TurnLock<()>>,
    /// `Topic` (or `Presence`, or `Control`) subscribers.
    all: HashSet<Slot>,
    /// `TopicKey` subscribers by filter key.
    keys: HashMap<String, HashSet<Slot>>,
    /// `Group` subscribers by group name.
    groups: HashMap<Arc<str>, Group>,
    /// The last unfiltered retained publication.
    retained_plain: Option<Arc<Envelope>>,
    /// The last retained publication per filter key.
    retained_keys: HashMap<String, Arc<Envelope>>,
}

impl Channel {
    fn is_unused(&self) -> bool {
        self.all.is_empty()
            && self.keys.is_empty()
            && self.groups.is_empty()
            && self.retained_plain.is_none()
            && self.retained_keys.is_empty()
    }

    fn add(&mut self, slot: Slot, want: Want<'_>) {
        match want {
            Want::All => {
                self.all.insert(slot);
            }
            Want::Key(key) => {
                self.keys.entry(key.to_owned()).or_default().insert(slot);
            }
            Want::Group(key) => {
                let group = self.groups.entry(key.group.clone()).or_insert_with(|| Group {
                    key: key.clone(),
                    members: Vec::new(),
                    next: 0,
                });
                // The node's `subs` set already refused a second subscription of this group.
                group.members.push(slot);
            }
        }
    }

    fn remove(&mut self, slot: Slot, want: Want<'_>) {
        match want {
            Want::All => {
                self.all.remove(&slot);
            }
            Want::Key(key) => {
                if let Some(set) = self.keys.get_mut(key) {
                    set.remove(&slot);
                    if set.is_empty() {
                        self.keys.remove(key);
                    }
                }
            }
            Want::Group(key) => {
                if let Some(group) = self.groups.get_mut(&key.group) {
                    group.members.retain(|&member| member != slot);
                    if group.members.is_empty() {
                        self.groups.remove(&key.group);
                    }
                }
            }
        }
    }

    /// The retained publications a new subscription `want` gets replayed.
    fn replay_for(&self, want: Want<'_>) -> Vec<Arc<Envelope>> {
        match want {
            Want::All => self.retained_plain.iter().chain(self.retained_keys.values()).cloned().collect(),
            Want::Key(key) => self.retained_keys.get(key).cloned().into_iter().collect(),
            Want::Group(_) => Vec::new(),
        }
    }
}

/// The members of one load-balanced group, in subscribe order, and whose turn is next.
struct Group {
    key: GroupKey,
    members: Vec<Slot>,
    next: usize,
}

/// Which channel a subscription or an envelope belongs to.
#[derive(Clone, Copy)]
enum ChannelRef<'a> {
    Topic(&'a TopicAddress),
    Room(&'a RoomKey),
    Control(&'a ProjectId),
}

/// What a subscription selects inside its channel.
#[derive(Clone, Copy)]
enum Want<'a> {
    All,
    Key(&'a str),
    Group(&'a GroupKey),
}

fn split(sub: &BusSubscription) -> (ChannelRef<'_>, Want<'_>) {
    match sub {
        BusSubscription::Topic(topic) => (ChannelRef::Topic(topic), Want::All),
        BusSubscription::TopicKey(topic, key) => (ChannelRef::Topic(topic), Want::Key(key)),
        BusSubscription::Group(group) => (ChannelRef::Topic(&group.topic), Want::Group(group)),
        BusSubscription::Presence(room) => (ChannelRef::Room(room), Want::All),
        BusSubscription::Control(project) => (ChannelRef::Control(project), Want::All),
    }
}

fn channel<'s>(
    topics: &'s mut HashMap<TopicAddress, Channel>,
    rooms: &'s mut HashMap<RoomKey, Channel>,
    controls: &'s mut HashMap<ProjectId, Channel>,
    at: ChannelRef<'_>,
) -> Option<&'s mut Channel> {
    match at {
        ChannelRef::Topic(topic) => topics.get_mut(topic),
        ChannelRef::Room(room) => rooms.get_mut(room),
        ChannelRef::Control(project) => controls.get_mut(project),
    }
}

impl State {
    fn channel_mut(&mut self, at: ChannelRef<'_>) -> Option<&mut Channel> {
        channel(&mut self.topics, &mut self.rooms, &mut self.controls, at)
    }

    /// The channel's turn lock, making the channel if it does not exist.
    fn turn_of(&mut self, at: ChannelRef<'_>) -> Arc<TurnLock<()>> {
        let channel = match at {
            ChannelRef::Topic(topic) => self.topics.entry(topic.clone()).or_default(),
            ChannelRef::Room(room) => self.rooms.entry(room.clone()).or_default(),
            ChannelRef::Control(project) => self.controls.entry(project.clone()).or_default(),
        };
        channel.turn.clone()
    }

    fn drop_if_unused(&mut self, at: ChannelRef<'_>) {
        let unused = self.channel_mut(at).is_some_and(|c| c.is_unused());
        if unused {
            match at {
                ChannelRef::Topic(topic) => self.topics.remove(topic),
                ChannelRef::Room(room) => self.rooms.remove(room),
                ChannelRef::Control(project) => self.controls.remove(project),
            };
        }
    }

    fn remove_node(&mut self, slot: Slot) {
        let Some(entry) = self.nodes.remove(&slot) else {
            return;
        };
        for sub in &entry.subs {
            let (at, want) = split(sub);
            if let Some(c) = self.channel_mut(at) {
                c.remove(slot, want);
            }
            self.drop_if_unused(at);
        }
        debug!(node = %entry.node, slot, "Node left the in-process bus.");
    }

    /// Keeps `envelope` as the retained publication of its (topic, filter key), if there is room.
    fn retain(&mut self, at: ChannelRef<'_>, filter: Option<&str>, envelope: &Arc<Envelope>, max: usize) {
        let Some(c) = channel(&mut self.topics, &mut self.rooms, &mut self.controls, at) else {
            return;
        };
        let slot = match filter {
            None => c.retained_plain.as_mut(),
            Some(key) => c.retained_keys.get_mut(key),
        };
        if let Some(kept) = slot {
            *kept = envelope.clone();
            return;
        }
        if self.retained_len >= max {
            self.retained_refused += 1;
            if self.retained_refused.is_power_of_two() {
                warn!(
                    max_retained = max,
                    refused = self.retained_refused,
                    "Retained store full; publication delivered live but not kept."
                );
            }
            return;
        }
        match filter {
            None => c.retained_plain = Some(envelope.clone()),
            Some(key) => {
                c.retained_keys.insert(key.to_owned(), envelope.clone());
            }
        }
        self.retained_len += 1;
    }

    /// Every delivery of a live envelope on channel `at`, as (sender, route, receiving node).
    fn targets(&mut self, at: ChannelRef<'_>, filter: Option<&str>) -> Vec<(Target, Route, Slot)> {
        let State { nodes, topics, rooms, controls, .. } = self;
        match channel(topics, rooms, controls, at) {
            Some(c) => targets_of(nodes, c, filter),
            None => Vec::new(),
        }
    }
}

/// Every delivery of a live envelope on channel `c`, as (sender, route, receiving node).
fn targets_of(nodes: &HashMap<Slot, NodeEntry>, c: &mut Channel, filter: Option<&str>) -> Vec<(Target, Route, Slot)> {
    let keyed = filter.and_then(|key| c.keys.get(key));
    let mut targets = Vec::with_capacity(c.all.len() + keyed.map_or(0, HashSet::len) + c.groups.len());
    let mut push = |slot: Slot, route: Route| {
        if let Some(node) = nodes.get(&slot) {
            targets.push((Target { tx: node.tx.clone(), sink: node.sink.clone() }, route, slot));
        }
    };
    for &slot in &c.all {
        push(slot, Route::Plain);
    }
    // A node with both a `Topic` and a matching `TopicKey` subscription gets one copy.
    for &slot in keyed.into_iter().flatten().filter(|slot| !c.all.contains(slot)) {
        push(slot, Route::Plain);
    }
    for group in c.groups.values_mut() {
        // Round robin, passing over members whose receiver is gone so that a live member
        // gets the publication.
        let len = group.members.len();
        let pick = (0..len)
            .map(|i| group.members[(group.next + i) % len])
            .enumerate()
            .find(|(_, slot)| nodes.get(slot).is_some_and(|node| !node.tx.is_closed()));
        if let Some((skipped, slot)) = pick {
            group.next = (group.next + skipped + 1) % len;
            push(slot, Route::Group(group.key.clone()));
        }
    }
    targets
}

/// Where one delivery goes: the node's sink first, when it has one, then its receiver.
struct Target {
    tx: mpsc::Sender<BusDelivery>,
    sink: Option<Weak<dyn DeliverySink>>,
}

impl Target {
    /// Hands over `delivery`, waiting while the receiver is full; false when the node is gone.
    async fn deliver(&self, delivery: BusDelivery) -> bool {
        let delivery = match self.sink.as_ref().and_then(Weak::upgrade) {
            Some(sink) => match sink.try_deliver(delivery) {
                None => return true,
                Some(d) => d,
            },
            None => delivery,
        };
        self.tx.send(delivery).await.is_ok()
    }
}

/// One node's [`Bus`] handle.
struct NodeHandle {
    shared: Arc<Shared>,
    slot: Slot,
    node: NodeId,
}

impl NodeHandle {
    fn forget_nodes(&self, gone: &[Slot]) {
        let mut state = self.shared.lock();
        for &slot in gone {
            state.remove_node(slot);
        }
    }
}

impl Drop for NodeHandle {
    fn drop(&mut self) {
        self.shared.lock().remove_node(self.slot);
    }
}

#[async_trait]
impl Bus for NodeHandle {
    /// Delivers `envelope` to every matching node, waiting while a receiver is full.
    ///
    /// # Errors
    /// None: a node whose receiver was dropped is removed and skipped.
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped after the first send, some nodes have the envelope and others
    /// never get it (still at most once). A retained publication is kept once routing started.
    async fn publish(&self, envelope: Arc<Envelope>) -> Result<(), BusError> {
        let (at, filter, retain) = match &*envelope {
            Envelope::Publication(p) => (ChannelRef::Topic(&p.topic), p.filter.as_deref(), p.retain),
            Envelope::Presence(e) => (ChannelRef::Room(&e.room), None, false),
            Envelope::Control(c) => (ChannelRef::Control(c.message.project()), None, false),
        };
        let trace: Option<Arc<str>> = skua_core::trace::capture().map(Arc::from);
        loop {
            // A free turn is taken under the table's lock and the targets routed in the same
            // critical section (one lock, one channel look-up); a busy one is waited for with the
            // table unlocked, and the channel checked again once it is ours.
            let uncontended = {
                let mut state = self.shared.lock();
                if !retain {
                    // The common case in one channel look-up.
                    let State { nodes, topics, rooms, controls, .. } = &mut *state;
                    let Some(c) = channel(topics, rooms, controls, at) else { return Ok(()) };
                    match c.turn.clone().try_lock_owned() {
                        Ok(held) => Ok((held, targets_of(nodes, c, filter))),
                        Err(_) => Err(c.turn.clone()),
                    }
                } else {
                    // A retained publish keeps its copy even without a subscriber.
                    let turn = match state.channel_mut(at) {
                        Some(c) => c.turn.clone(),
                        None => state.turn_of(at),
                    };
                    match turn.clone().try_lock_owned() {
                        Ok(held) => {
                            state.retain(at, filter, &envelope, self.shared.max_retained);
                            Ok((held, state.targets(at, filter)))
                        }
                        Err(_) => Err(turn),
                    }
                }
            };
            let (_turn, targets) = match uncontended {
                Ok(routed) => routed,
                Err(turn) => {
                    let held = turn.clone().lock_owned().await;
                    let mut state = self.shared.lock();
                    let current = state.channel_mut(at).is_some_and(|c| Arc::ptr_eq(&c.turn, &turn));
                    if !current {
                        // The channel was dropped and made again while we waited for its turn.
                        continue;
                    }
                    if retain {
                        state.retain(at, filter, &envelope, self.shared.max_retained);
                    }
                    (held, state.targets(at, filter))
                }
            };
            let mut gone = Vec::new();
            for (target, route, slot) in targets {
                let delivery = BusDelivery {
                    envelope: envelope.clone(),
                    route,
                    retained_replay: false,
                    trace_parent: trace.clone(),
                };
                if !target.deliver(delivery).await {
                    gone.push(slot);
                }
            }
            if !gone.is_empty() {
                self.forget_nodes(&gone);
            }
            return Ok(());
        }
    }

    /// Records the subscription, then queues the retained publications it matches (none for a
    /// group), waiting while this node's own receiver is full.
    ///
    /// # Errors
    /// [`BusError::Closed`] when this node's receiver was dropped; the node is removed.
    async fn subscribe(&self, sub: &BusSubscription) -> Result<(), BusError> {
        let (at, want) = split(sub);
        loop {
            let turn = {
                let mut state = self.shared.lock();
                let Some(node) = state.nodes.get(&self.slot) else {
                    return Err(BusError::Closed);
                };
                if node.subs.contains(sub) {
                    return Ok(());
                }
                if node.tx.is_closed() {
                    state.remove_node(self.slot);
                    return Err(BusError::Closed);
                }
                state.turn_of(at)
            };
            let _turn = turn.lock().await;
            let (target, replay) = {
                let mut state = self.shared.lock();
                if !state.nodes.contains_key(&self.slot) {
                    state.drop_if_unused(at);
                    return Err(BusError::Closed);
                }
                let State { nodes, topics, rooms, controls, .. } = &mut *state;
                let Some(node) = nodes.get_mut(&self.slot) else {
                    return Err(BusError::Closed);
                };
                let Some(c) = channel(topics, rooms, controls, at).filter(|c| Arc::ptr_eq(&c.turn, &turn)) else {
                    continue;
                };
                if !node.subs.insert(sub.clone()) {
                    return Ok(());
                }
                c.add(self.slot, want);
                (Target { tx: node.tx.clone(), sink: node.sink.clone() }, c.replay_for(want))
            };
            debug!(node = %self.node, ?sub, replayed = replay.len(), "Subscribed.");
            for envelope in replay {
                let delivery = BusDelivery { envelope, route: Route::Plain, retained_replay: true, trace_parent: None };
                if !target.deliver(delivery).await {
                    self.forget_nodes(&[self.slot]);
                    return Err(BusError::Closed);
                }
            }
            return Ok(());
        }
    }

    /// Drops the retained publications of `topics` (every node's: they are shared).
    fn forget_retained(&self, topics: &[TopicAddress]) {
        let mut state = self.shared.lock();
        for topic in topics {
            let Some(c) = state.topics.get_mut(topic) else { continue };
            let n = usize::from(c.retained_plain.take().is_some()) + c.retained_keys.len();
            c.retained_keys.clear();
            state.retained_len = state.retained_len.saturating_sub(n);
            state.drop_if_unused(ChannelRef::Topic(topic));
        }
    }

    /// Offers this node's deliveries to `sink` first, in channel order (under the turn).
    fn set_sink(&self, sink: Weak<dyn DeliverySink>) -> bool {
        match self.shared.lock().nodes.get_mut(&self.slot) {
            Some(node) => {
                node.sink = Some(sink);
                true
            }
            None => false,
        }
    }

    /// Removes the subscription; `Ok` when it did not exist.
    ///
    /// # Errors
    /// None.
    async fn unsubscribe(&self, sub: &BusSubscription) -> Result<(), BusError> {
        let (at, want) = split(sub);
        let mut state = self.shared.lock();
        let removed = state.nodes.get_mut(&self.slot).is_some_and(|node| node.subs.remove(sub));
        if removed {
            if let Some(c) = state.channel_mut(at) {
                c.remove(self.slot, want);
            }
            state.drop_if_unused(at);
            debug!(node = %self.node, ?sub, "Unsubscribed.");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
