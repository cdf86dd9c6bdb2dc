//! [`Link`]: everything one node knows about its MQTT connection, as plain data. The tasks in
//! [`super::tasks`] and the [`Bus`](skua_core::Bus) methods change it under one
//! `std::sync::Mutex` and never await while holding it; this module does no I/O, so its rules
//! are unit tested directly.
//!
//! - **Subscriptions**: the set the node wants (`subs`), each with its MQTT subscription
//!   identifier, and the identifier → route table used to route inbound packets. A route
//!   exists from the moment the subscription is requested (so nothing the broker sends right
//!   after its SUBACK is missed) until the broker's UNSUBACK (so a publication the broker
//!   assigned to this node's share of a group before the UNSUBSCRIBE is still delivered, not
//!   lost for the group). While disconnected there is no session, and routes go at once.
//! - **Control requests** (SUBSCRIBE/UNSUBSCRIBE) wait in `ctl_queue` until the pump hands them
//!   to rumqttc, then in `ctl_handed` until rumqttc reports their packet id, then in
//!   `ctl_inflight` until the broker acknowledges them.
//! - **Publications** wait in `queue`, then in `handed` (given to rumqttc, packet id unknown),
//!   then, for QoS 1 and 2, in `unacked` until PUBACK / PUBREC. When the connection drops,
//!   everything not acknowledged goes back to the front of `queue` in its original order, so it
//!   is sent again after the reconnect (rumqttc itself discards it: clean start, no session).

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Instant;

use bytes::Bytes;
use rumqttc::v5::mqttbytes::QoS;
use skua_core::{BusError, BusSubscription, GroupKey};
use tokio::sync::oneshot;

use super::topics::filter_matches;

/// Largest MQTT subscription identifier (a variable byte integer of up to four bytes).
const MAX_SUBSCRIPTION_ID: u32 = 268_435_455;

/// Where the connection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// No connection; publications are buffered, subscription changes recorded.
    Disconnected,
    /// Connected (CONNACK seen); re-making every subscription before publishing again.
    Resubscribing,
    /// Connected and every subscription re-made: [`Bus::is_available`](skua_core::Bus).
    Available,
}

/// What the owner of a subscribe waiter learns.
pub(crate) type Ack = Result<(), BusError>;

/// A publication on its way to the broker.
#[derive(Debug, Clone)]
pub(crate) struct Outbound {
    /// Publish order on this node, used to restore the order after a reconnect.
    pub seq: u64,
    pub topic: String,
    pub qos: QoS,
    pub retain: bool,
    pub payload: Bytes,
}

/// How deliveries through one subscription identifier are routed.
#[derive(Debug, Clone)]
pub(crate) enum RouteKind {
    Plain,
    Group(GroupKey),
}

#[derive(Debug)]
struct RouteEntry {
    kind: RouteKind,
    /// The MQTT filter, for brokers that send no subscription identifiers.
    filter: String,
}

#[derive(Debug)]
pub(crate) struct SubEntry {
    pub id: u32,
    pub filter: String,
    pub group: bool,
    /// The connection generation whose SUBACK confirmed it.
    acked_gen: Option<u64>,
    /// Callers waiting for the SUBACK.
    waiters: Vec<oneshot::Sender<Ack>>,
}

/// A control request for the broker.
#[derive(Debug)]
pub(crate) enum Ctl {
    Subscribe {
        sub: BusSubscription,
        id: u32,
        /// Part of the resubscription after a CONNACK.
        resub: bool,
    },
    Unsubscribe {
        filter: String,
        /// The route kept until the UNSUBACK.
        id: u32,
        waiter: Option<oneshot::Sender<Ack>>,
    },
}

/// What the pump should hand to rumqttc next.
#[derive(Debug)]
pub(crate) enum Work {
    /// A SUBSCRIBE: filter, identifier, whether it is a group.
    Subscribe { filter: String, id: u32, group: bool },
    /// An UNSUBSCRIBE of a filter.
    Unsubscribe { filter: String },
    /// A PUBLISH.
    Publish(Outbound),
}

/// The result of [`Link::subscribe`] and [`Link::unsubscribe`].
#[derive(Debug)]
pub(crate) enum Step {
    /// Nothing to wait for: already done, absent, or recorded while disconnected.
    Done,
    /// Wait for the broker's acknowledgement; the subscription identifier lets a caller that
    /// gives up clean up the right entry.
    Wait(oneshot::Receiver<Ack>, u32),
}

/// The result of [`Link::route`].
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Routed {
    /// Deliver one [`Route::Plain`](skua_core::Route::Plain) copy.
    pub plain: bool,
    /// Deliver one copy per group.
    pub groups: Vec<GroupKey>,
    /// A plain copy dropped as the second copy of one envelope.
    pub duplicate: bool,
    /// Group copies dropped because the broker sent a retained message to a shared
    /// subscription.
    pub retained_to_group: bool,
    /// The packet named only identifiers this node no longer uses.
    pub unrouted: bool,
}

/// The connection state of one node (see the module docs).
#[derive(Debug)]
pub(crate) struct Link {
    pub phase: Phase,
    /// Incremented on every CONNACK.
    pub generation: u64,
    /// The broker's maximum packet size from its last CONNACK.
    pub broker_max_packet: Option<u32>,
    /// When the current resubscription started, while [`Phase::Resubscribing`].
    pub resub_started: Option<Instant>,
    /// After a reconnect, publications held during the outage wait until this instant, so the
    /// other nodes (reconnecting on their own backoff) have re-made their subscriptions and
    /// receive them; see [`Link::set_flush_hold`].
    pub flush_after: Option<Instant>,
    /// How long [`Link::flush_after`] holds after a reconnect (zero: no hold).
    flush_hold: std::time::Duration,
    resub_outstanding: usize,
    next_id: u32,
    subs: HashMap<BusSubscription, SubEntry>,
    routes: HashMap<u32, RouteEntry>,
    /// Routes of removed subscriptions, kept until their UNSUBACK.
    draining: HashSet<u32>,
    ctl_queue: VecDeque<Ctl>,
    ctl_handed: VecDeque<Ctl>,
    ctl_inflight: HashMap<u16, Ctl>,
    next_seq: u64,
    queue: VecDeque<Outbound>,
    handed: VecDeque<Outbound>,
    unacked: HashMap<u16, Outbound>,
    dedupe: Dedupe,
}

impl Link {
    /// A disconnected link remembering up to `dedupe_window` recent envelope ids.
    pub fn new(dedupe_window: usize) -> Self {
        Self {
            phase: Phase::Disconnected,
            generation: 0,
            broker_max_packet: None,
            resub_started: None,
            flush_after: None,
            flush_hold: std::time::Duration::ZERO,
            resub_outstanding: 0,
            next_id: 1,
            subs: HashMap::new(),
            routes: HashMap::new(),
            draining: HashSet::new(),
            ctl_queue: VecDeque::new(),
            ctl_handed: VecDeque::new(),
            ctl_inflight: HashMap::new(),
            next_seq: 0,
            queue: VecDeque::new(),
            handed: VecDeque::new(),
            unacked: HashMap::new(),
            dedupe: Dedupe::new(dedupe_window),
        }
    }

    /// Subscriptions recorded.
    pub fn subscriptions(&self) -> usize {
        self.subs.len()
    }

    /// Publications held: queued, handed to rumqttc, or awaiting their acknowledgement.
    pub fn held(&self) -> usize {
        self.queue.len() + self.handed.len() + self.unacked.len()
    }

    /// Queues a publication.
    pub fn push_publication(&mut self, topic: String, qos: QoS, retain: bool, payload: Bytes) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.queue.push_back(Outbound { seq, topic, qos, retain, payload });
    }

    // ------------------------------------------------------------------------------------------
    // Subscriptions.

    /// Records `sub` (idempotent) and, when connected, queues its SUBSCRIBE.
    pub fn subscribe(&mut self, sub: &BusSubscription, filter: impl FnOnce() -> String) -> Step {
        if let Some(entry) = self.subs.get_mut(sub) {
            if self.phase == Phase::Disconnected || entry.acked_gen == Some(self.generation) {
                return Step::Done;
            }
            let (tx, rx) = oneshot::channel();
            entry.waiters.push(tx);
            return Step::Wait(rx, entry.id);
        }
        let id = self.allocate_id();
        let filter = filter();
        let kind = match sub {
            BusSubscription::Group(g) => RouteKind::Group(g.clone()),
            _ => RouteKind::Plain,
        };
        let group = matches!(kind, RouteKind::Group(_));
        self.routes.insert(id, RouteEntry { kind, filter: filter.clone() });
        let mut entry = SubEntry { id, filter, group, acked_gen: None, waiters: Vec::new() };
        if self.phase == Phase::Disconnected {
            self.subs.insert(sub.clone(), entry);
            return Step::Done;
        }
        let (tx, rx) = oneshot::channel();
        entry.waiters.push(tx);
        self.subs.insert(sub.clone(), entry);
        self.ctl_queue.push_back(Ctl::Subscribe { sub: sub.clone(), id, resub: false });
        Step::Wait(rx, id)
    }

    /// Removes `sub` (`Done` when absent or disconnected) and, when connected, queues its
    /// UNSUBSCRIBE; its route stays until the UNSUBACK. A `subscribe` still waiting for its
    /// SUBACK returns `Ok`.
    pub fn unsubscribe(&mut self, sub: &BusSubscription) -> Step {
        let Some(entry) = self.subs.remove(sub) else {
            return Step::Done;
        };
        if self.phase == Phase::Disconnected {
            self.routes.remove(&entry.id);
            return Step::Done;
        }
        self.draining.insert(entry.id);
        let (tx, rx) = oneshot::channel();
        self.ctl_queue.push_back(Ctl::Unsubscribe { filter: entry.filter, id: entry.id, waiter: Some(tx) });
        Step::Wait(rx, entry.id)
    }

    /// Drops the route of a removed subscription whose UNSUBACK did not come in time.
    pub fn forget_route(&mut self, id: u32) {
        if self.draining.remove(&id) {
            self.routes.remove(&id);
        }
    }

    /// A `subscribe` caller gave up waiting: remove the subscription if it is still the one it
    /// asked for and unconfirmed. Returns whether it was removed.
    pub fn abandon(&mut self, sub: &BusSubscription, id: u32) -> bool {
        let unconfirmed = self.subs.get(sub).is_some_and(|e| e.id == id && e.acked_gen != Some(self.generation));
        if unconfirmed {
            // Nobody waits for this UNSUBSCRIBE: the route goes when its UNSUBACK comes.
            self.unsubscribe(sub);
        }
        unconfirmed
    }

    fn allocate_id(&mut self) -> u32 {
        loop {
            let id = self.next_id;
            self.next_id = if id >= MAX_SUBSCRIPTION_ID { 1 } else { id + 1 };
            if !self.routes.contains_key(&id) {
                return id;
            }
        }
    }

    // ------------------------------------------------------------------------------------------
    // Connection events.

    /// A CONNACK: a new session with no subscriptions. Queues a SUBSCRIBE for every wanted
    /// subscription (same identifiers); with none, the link is available at once.
    pub fn on_connack(&mut self, broker_max_packet: Option<u32>, now: Instant) {
        self.generation += 1;
        // A reconnect with publications held from the outage: give the other nodes time to
        // come back before sending them (the hop's sessions are clean, so a node that is not
        // subscribed yet would miss them).
        self.flush_after = (self.generation > 1 && !self.queue.is_empty() && !self.flush_hold.is_zero())
            .then(|| now + self.flush_hold);
        self.broker_max_packet = broker_max_packet;
        self.clear_ctl();
        let mut subs: Vec<(&BusSubscription, &SubEntry)> = self.subs.iter().collect();
        // Re-make them in identifier (creation) order: deterministic, and oldest first.
        subs.sort_by_key(|(_, e)| e.id);
        self.ctl_queue.extend(subs.into_iter().map(|(sub, e)| Ctl::Subscribe {
            sub: sub.clone(),
            id: e.id,
            resub: true,
        }));
        self.resub_outstanding = self.ctl_queue.len();
        if self.resub_outstanding == 0 {
            self.phase = Phase::Available;
            self.resub_started = None;
        } else {
            self.phase = Phase::Resubscribing;
            self.resub_started = Some(now);
        }
    }

    /// The connection is gone: requeue every unacknowledged publication in order, forget all
    /// control requests in flight (the session died with them) and release subscribe waiters
    /// (their subscriptions stay recorded and are re-made on the next CONNACK).
    pub fn on_disconnect(&mut self) {
        self.phase = Phase::Disconnected;
        self.resub_started = None;
        self.resub_outstanding = 0;
        self.clear_ctl();
        let mut back: Vec<Outbound> = self.unacked.drain().map(|(_, o)| o).chain(self.handed.drain(..)).collect();
        back.sort_by_key(|o| o.seq);
        for o in back.into_iter().rev() {
            self.queue.push_front(o);
        }
    }

    fn clear_ctl(&mut self) {
        self.ctl_queue.clear();
        self.ctl_handed.clear();
        self.ctl_inflight.clear();
        for id in self.draining.drain() {
            self.routes.remove(&id);
        }
        for entry in self.subs.values_mut() {
            entry.waiters.clear();
        }
    }

    // ------------------------------------------------------------------------------------------
    // The pump.

    /// The next request to hand to rumqttc, or `None`. Control requests go first and while
    /// resubscribing; publications only once available. The pump calls [`Link::handed`] when
    /// rumqttc took it, or [`Link::unhand`] when its channel was full.
    pub fn next_work(&mut self) -> Option<Work> {
        if self.phase == Phase::Disconnected {
            return None;
        }
        while let Some(ctl) = self.ctl_queue.pop_front() {
            match &ctl {
                Ctl::Subscribe { sub, id, resub } => match self.subs.get(sub) {
                    Some(e) if e.id == *id => {
                        let work = Work::Subscribe { filter: e.filter.clone(), id: *id, group: e.group };
                        self.ctl_queue.push_front(ctl);
                        return Some(work);
                    }
                    // Unsubscribed (or replaced) before it went out.
                    _ => {
                        if *resub {
                            self.resub_done();
                        }
                    }
                },
                Ctl::Unsubscribe { filter, .. } => {
                    let work = Work::Unsubscribe { filter: filter.clone() };
                    self.ctl_queue.push_front(ctl);
                    return Some(work);
                }
            }
        }
        if self.phase != Phase::Available {
            return None;
        }
        if let Some(t) = self.flush_after {
            if Instant::now() < t {
                return None;
            }
            self.flush_after = None;
        }
        self.queue.pop_front().map(Work::Publish)
    }

    /// Sets how long publications held during an outage wait after the reconnect.
    pub fn set_flush_hold(&mut self, hold: std::time::Duration) {
        self.flush_hold = hold;
    }

    /// rumqttc accepted `work` from [`Link::next_work`].
    pub fn handed(&mut self, work: Work) {
        match work {
            Work::Publish(o) => self.handed.push_back(o),
            Work::Subscribe { .. } | Work::Unsubscribe { .. } => {
                if let Some(ctl) = self.ctl_queue.pop_front() {
                    self.ctl_handed.push_back(ctl);
                }
            }
        }
    }

    /// rumqttc's request channel was full: put `work` back.
    pub fn unhand(&mut self, work: Work) {
        if let Work::Publish(o) = work {
            self.queue.push_front(o);
        }
        // Control work was only peeked: it is still at the front of `ctl_queue`.
    }

    // ------------------------------------------------------------------------------------------
    // rumqttc events.

    /// rumqttc wrote (or, on a packet id collision, will write) the oldest handed PUBLISH with
    /// `pkid` (0 for QoS 0). Returns whether buffer space was freed.
    pub fn on_outgoing_publish(&mut self, pkid: u16) -> bool {
        let Some(o) = self.handed.pop_front() else {
            return false;
        };
        if o.qos == QoS::AtMostOnce || pkid == 0 {
            true
        } else {
            self.unacked.insert(pkid, o);
            false
        }
    }

    /// PUBACK or PUBREC for `pkid`. Returns whether it matched a held publication.
    pub fn on_publish_ack(&mut self, pkid: u16) -> bool {
        self.unacked.remove(&pkid).is_some()
    }

    /// rumqttc wrote the oldest handed SUBSCRIBE or UNSUBSCRIBE with `pkid`.
    pub fn on_outgoing_ctl(&mut self, pkid: u16) {
        if let Some(ctl) = self.ctl_handed.pop_front() {
            self.ctl_inflight.insert(pkid, ctl);
        }
    }

    /// A SUBACK: `refused` is the broker's reason when it refused the subscription. Returns
    /// the filter of a refused subscription, which has been removed. The last SUBACK of a
    /// resubscription makes the link available.
    pub fn on_suback(&mut self, pkid: u16, refused: Option<String>) -> Option<String> {
        let Some(Ctl::Subscribe { sub, id, resub }) = self.ctl_inflight.remove(&pkid) else {
            return None;
        };
        let mut dropped = None;
        if let Some(entry) = self.subs.get_mut(&sub).filter(|e| e.id == id) {
            match &refused {
                None => {
                    entry.acked_gen = Some(self.generation);
                    for w in entry.waiters.drain(..) {
                        let _ = w.send(Ok(()));
                    }
                }
                Some(reason) => {
                    for w in entry.waiters.drain(..) {
                        let _ = w.send(Err(super::MqttError::SubscribeRefused {
                            filter: entry.filter.clone(),
                            reason: reason.clone(),
                        }
                        .into()));
                    }
                    dropped = Some(entry.filter.clone());
                    self.routes.remove(&id);
                    self.subs.remove(&sub);
                }
            }
        }
        if resub {
            self.resub_done();
            if self.resub_started.is_some() {
                // Progress: the stall timeout counts from the latest SUBACK.
                self.resub_started = Some(Instant::now());
            }
        }
        dropped
    }

    /// An UNSUBACK: the route of the removed subscription goes.
    pub fn on_unsuback(&mut self, pkid: u16) {
        if let Some(Ctl::Unsubscribe { id, waiter, .. }) = self.ctl_inflight.remove(&pkid) {
            self.forget_route(id);
            if let Some(waiter) = waiter {
                let _ = waiter.send(Ok(()));
            }
        }
    }

    /// One resubscription finished; the last one makes the link available.
    fn resub_done(&mut self) {
        if self.phase != Phase::Resubscribing || self.resub_outstanding == 0 {
            return;
        }
        self.resub_outstanding -= 1;
        if self.resub_outstanding == 0 {
            self.phase = Phase::Available;
            self.resub_started = None;
        }
    }

    // ------------------------------------------------------------------------------------------
    // Inbound routing.

    /// Routes one inbound PUBLISH: its subscription identifiers (or, without any, its topic),
    /// its retain flag and the envelope id for deduplication (`None` for presence events,
    /// which only ever match one subscription of a node).
    pub fn route(&mut self, ids: &[usize], topic: &str, retain: bool, envelope_id: Option<u128>) -> Routed {
        let mut routed = Routed::default();
        let mut group_ids: Vec<(u32, &GroupKey)> = Vec::new();
        let mut plain = false;
        if ids.is_empty() {
            for (id, r) in &self.routes {
                if filter_matches(&r.filter, topic) {
                    match &r.kind {
                        RouteKind::Plain => plain = true,
                        RouteKind::Group(g) => group_ids.push((*id, g)),
                    }
                }
            }
        } else {
            for id in ids {
                let Some((id, r)) = u32::try_from(*id).ok().and_then(|id| self.routes.get(&id).map(|r| (id, r))) else {
                    continue;
                };
                match &r.kind {
                    RouteKind::Plain => plain = true,
                    RouteKind::Group(g) => group_ids.push((id, g)),
                }
            }
        }
        routed.unrouted = !plain && group_ids.is_empty();
        // With retain-as-published off, the retain flag marks a replay caused by a new
        // subscription. Shared subscriptions never get replays (MQTT v5 §4.8.2); Mosquitto 2.0
        // sends them anyway, and a replay to a group would be a second copy for the group.
        if retain && !group_ids.is_empty() {
            routed.retained_to_group = true;
            group_ids.clear();
        }
        if plain {
            // Replays are never deduplicated: each new subscription gets its own.
            routed.plain = retain || envelope_id.is_none_or(|id| self.dedupe.first(id, 0));
            routed.duplicate = !routed.plain;
        }
        for (sub_id, g) in group_ids {
            if envelope_id.is_none_or(|id| self.dedupe.first(id, sub_id)) {
                routed.groups.push(g.clone());
            }
        }
        routed
    }
}

/// The last `cap` (envelope id, route) pairs delivered.
#[derive(Debug)]
struct Dedupe {
    cap: usize,
    seen: HashSet<(u128, u32)>,
    order: VecDeque<(u128, u32)>,
}

impl Dedupe {
    fn new(cap: usize) -> Self {
        Self { cap, seen: HashSet::with_capacity(cap), order: VecDeque::with_capacity(cap) }
    }

    /// Whether this is the first time `(id, route)` is seen within the window; records it.
    fn first(&mut self, id: u128, route: u32) -> bool {
        if !self.seen.insert((id, route)) {
            return false;
        }
        if self.order.len() == self.cap
            && let Some(old) = self.order.pop_front()
        {
            self.seen.remove(&old);
        }
        self.order.push_back((id, route));
        true
    }
}

#[cfg(test)]
mod tests;
