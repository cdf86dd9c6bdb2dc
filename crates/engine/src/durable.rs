//! Durable delivery (N24–N26, N37): logged-topic messages to persistent sessions and
//! load-balanced groups, with acks, redelivery and replay. The data model is in docs/durable.md.
//!
//! Each connection with a durable subscription (a persistent session's subscription to a logged
//! topic) gets one [`DurableTask`]. The hub's dispatcher hands it the live messages of those
//! subscriptions instead of queueing frames itself; the task claims each one in the store before
//! it sends it (the live messages waiting together in one request to the node's writer, which
//! claims what all the node's tasks wait for in one statement: [`crate::durable_writer`]), so a
//! message pending for a load-balanced group reaches one connection only, and
//! a message the task could not take in time (its queue full) is simply picked up from the store
//! later ("catch-up"). The task waits for room in the connection's outbound queue before each
//! frame, so a backlog of any size is paged from the store, never loaded at once, and never
//! closes the connection as a slow consumer.
//!
//! Nodes tell each other about sessions over their project's control channel on the bus
//! ([`BusSubscription::Control`](skua_core::BusSubscription::Control), typed
//! [`ControlMessage`]s that never reach clients): `Takeover` (a newer connection claimed a
//! clientId session, so the older one closes) and `Kick` (held messages of a consumer were
//! released; its connected members take them).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use skua_core::{
    Bus, Claim, ConnId, ConsumerId, ConsumerOf, Control, ControlMessage, Envelope, Holder, NodeId, Release, SessionKey,
    Store, TopicAddress,
};
use skua_protocol::{MessageFrame, ServerFrame};
use tokio::sync::{mpsc, oneshot};
use tokio_util::task::TaskTracker;

use crate::clock::now_unix_s;
use crate::config::EdgeConfig;
use crate::ids::EnvelopeIds;
use crate::metrics::Metrics;
use crate::outbound::ConnHandle;

/// Most msgId → consumer entries a task remembers for routing acks; an ack of an id it does not
/// remember is tried on each of the connection's consumers.
const MAX_INFLIGHT_INDEX: usize = 4096;

/// Most commands a durable task takes off its queue in one go: their live messages go to the
/// node's writer as one claim request, their acks as one ack request.
const MAX_BATCH: usize = skua_core::MAX_BATCH_IDS;

/// A connection's release that failed (store unreachable) is retried this often…
const RELEASE_RETRY_EVERY: Duration = Duration::from_secs(5);
/// …this many times; after that the session's next connection, or the node's restart, frees them.
const RELEASE_RETRIES: u32 = 24;

/// The topic key of the message log: `<project>/<app>/<room>/<topic>`.
pub fn topic_key(a: &TopicAddress) -> String {
    a.log_key()
}

/// A local durable task serving a consumer: its connection and its command queue.
type ConsumerTask = (ConnId, mpsc::Sender<Cmd>);

/// Subscription changes of one connection's durable task ([`Cmd::Start`], [`Cmd::Stop`],
/// [`Cmd::Resume`]): queued without waiting, so a reader never waits for a task that waits for
/// room in the connection's outbound queue (an MQTT writer frees it only at the acknowledgements
/// that reader is to read). The task takes them before its queue (a group member's stop after
/// what was queued before it). Bounded: a
/// command supersedes the waiting ones of its consumer it makes moot (a stop the start and
/// resume before it, a start an earlier start), so at most a stop, a start and a resume wait
/// per consumer; beyond `cap` commands the connection closes as a slow consumer.
#[derive(Debug)]
struct Lane {
    // std Mutex: queue updates only, never across an await.
    cmds: Mutex<std::collections::VecDeque<Cmd>>,
    notify: tokio::sync::Notify,
    cap: usize,
}

impl Lane {
    fn new(cap: usize) -> Self {
        Self { cmds: Mutex::new(std::collections::VecDeque::new()), notify: tokio::sync::Notify::new(), cap }
    }

    /// Queues `cmd` (a start, stop or resume); false when the lane is full.
    fn push(&self, cmd: Cmd) -> bool {
        let mut q = guard(&self.cmds);
        let of = |c: &Cmd| match c {
            Cmd::Start { consumer, .. } | Cmd::Stop { consumer, .. } | Cmd::Resume { consumer } => {
                Some(consumer.clone())
            }
            _ => None,
        };
        let Some(consumer) = of(&cmd) else { return true };
        let mine = |c: &Cmd| of(c).as_ref() == Some(&consumer);
        match &cmd {
            Cmd::Stop { .. } => {
                q.retain(|c| !(mine(c) && matches!(c, Cmd::Start { .. } | Cmd::Resume { .. })));
                if q.iter().any(|c| mine(c) && matches!(c, Cmd::Stop { .. })) {
                    return true;
                }
            }
            Cmd::Start { .. } => q.retain(|c| !(mine(c) && matches!(c, Cmd::Start { .. } | Cmd::Resume { .. }))),
            _ => {
                if q.iter().any(|c| mine(c) && matches!(c, Cmd::Resume { .. })) {
                    return true;
                }
            }
        }
        if q.len() >= self.cap {
            return false;
        }
        q.push_back(cmd);
        drop(q);
        self.notify.notify_one();
        true
    }

    /// `None` when empty; else whether the first command is a group member's stop.
    fn front_is_group_stop(&self) -> Option<bool> {
        guard(&self.cmds).front().map(|c| matches!(c, Cmd::Stop { forget: false, .. }))
    }

    fn pop(&self) -> Option<Cmd> {
        guard(&self.cmds).pop_front()
    }

    fn take(&self) -> Vec<Cmd> {
        guard(&self.cmds).drain(..).collect()
    }
}

fn guard<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What durable delivery and node-to-node control use: this node, the store, the bus, the
/// local clientId sessions (for takeovers) and the local durable tasks (for kicks).
pub struct Durable {
    node: NodeId,
    store: Arc<dyn Store>,
    bus: Arc<dyn Bus>,
    ids: Arc<EnvelopeIds>,
    metrics: Arc<Metrics>,
    /// Node-level tasks: release retries outlive their connection.
    tasks: TaskTracker,
    queue: usize,
    /// How often a task sweeps its consumers' unheld pending messages (zero: never).
    sweep: Duration,
    restore_ttl: Duration,
    replay_page_size: u32,
    /// Most subscription changes waiting for one task ([`Lane`]).
    lane_cap: usize,
    /// The node's batched claims and acks.
    writer: crate::durable_writer::Writer,
    // std Mutex: map updates only, never across an await.
    /// Local connections of each clientId session (normally one), for takeovers.
    sessions: Mutex<HashMap<SessionKey, Vec<Arc<ConnHandle>>>>,
    // std Mutex: map updates only, never across an await.
    /// Local durable tasks of each consumer, for kicks.
    consumer_tasks: Mutex<HashMap<ConsumerId, Vec<ConsumerTask>>>,
}

impl std::fmt::Debug for Durable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Durable").field("node", &self.node).finish_non_exhaustive()
    }
}

impl Durable {
    /// Durable delivery of `node` over `store` and `bus`; release retries run on `tasks`.
    pub fn new(
        node: NodeId,
        store: Arc<dyn Store>,
        bus: Arc<dyn Bus>,
        ids: Arc<EnvelopeIds>,
        metrics: Arc<Metrics>,
        tasks: TaskTracker,
        config: &EdgeConfig,
    ) -> Self {
        let writer = crate::durable_writer::Writer::spawn(
            store.clone(),
            node.clone(),
            config.durable_writer_queue,
            config.durable_writers,
        );
        Self {
            node,
            store,
            writer,
            bus,
            ids,
            metrics,
            tasks,
            queue: config.durable_queue.max(1),
            sweep: config.durable_sweep_interval,
            restore_ttl: config.restore_ttl,
            replay_page_size: config.replay_page_size,
            lane_cap: config.max_subscriptions_per_connection.saturating_mul(3).saturating_add(3),
            sessions: Mutex::new(HashMap::new()),
            consumer_tasks: Mutex::new(HashMap::new()),
        }
    }

    /// Records `conn` as a local connection of `session`; returns the others (to close).
    pub fn register_session(&self, session: &SessionKey, conn: &Arc<ConnHandle>) -> Vec<Arc<ConnHandle>> {
        let mut map = guard(&self.sessions);
        let list = map.entry(session.clone()).or_default();
        let others = list.iter().filter(|c| c.id != conn.id).cloned().collect();
        list.push(conn.clone());
        others
    }

    /// Forgets `conn` as a connection of `session`.
    pub fn unregister_session(&self, session: &SessionKey, conn: ConnId) {
        let mut map = guard(&self.sessions);
        if let Some(list) = map.get_mut(session) {
            list.retain(|c| c.id != conn);
            if list.is_empty() {
                map.remove(session);
            }
        }
    }

    /// The local connections of `session`.
    pub fn session_conns(&self, session: &SessionKey) -> Vec<Arc<ConnHandle>> {
        guard(&self.sessions).get(session).cloned().unwrap_or_default()
    }

    /// Registers a durable task as serving `consumer`.
    fn register_consumer_task(&self, consumer: &ConsumerId, conn: ConnId, tx: &mpsc::Sender<Cmd>) {
        let mut map = guard(&self.consumer_tasks);
        let list = map.entry(consumer.clone()).or_default();
        if !list.iter().any(|(c, _)| *c == conn) {
            list.push((conn, tx.clone()));
        }
    }

    /// Unregisters a durable task from `consumer`.
    fn unregister_consumer_task(&self, consumer: &ConsumerId, conn: ConnId) {
        let mut map = guard(&self.consumer_tasks);
        if let Some(list) = map.get_mut(consumer) {
            list.retain(|(c, _)| *c != conn);
            if list.is_empty() {
                map.remove(consumer);
            }
        }
    }

    /// The local durable tasks serving `consumer`.
    fn consumer_tasks(&self, consumer: &ConsumerId) -> Vec<mpsc::Sender<Cmd>> {
        guard(&self.consumer_tasks)
            .get(consumer)
            .map(|l| l.iter().map(|(_, t)| t.clone()).collect())
            .unwrap_or_default()
    }

    /// Publishes a control message on its project's control channel.
    pub async fn publish_control(&self, message: ControlMessage) {
        let env = Envelope::Control(Control { id: self.ids.next(), node: self.node.clone(), message });
        if let Err(e) = self.bus.publish(Arc::new(env)).await {
            tracing::warn!(error = %e, "Control message not published; other nodes learn of it later or not at all.");
        }
    }

    /// Tells the connected members of each released consumer (ids as the store returns them)
    /// to take its messages.
    pub async fn kick(&self, consumers: &[String]) {
        for c in consumers {
            match ConsumerId::parse(c) {
                Ok(consumer) => self.publish_control(ControlMessage::Kick { consumer }).await,
                Err(e) => {
                    tracing::warn!(error = %e, "The store released messages of an unknown consumer; nobody is told.");
                }
            }
        }
    }

    /// Releases what a lapsed node's connections held, so other members take it.
    pub async fn release_node(&self, node: &NodeId) {
        match self.store.release(Release::Node(node.as_str())).await {
            Ok(released) => self.kick(&released).await,
            Err(e) => tracing::warn!(error = %e, %node, "Releasing a lapsed node's messages failed."),
        }
    }
}

/// Handles control messages arriving from the bus, until `rx` closes.
pub async fn run_control(d: Arc<Durable>, mut rx: mpsc::Receiver<Control>) {
    while let Some(c) = rx.recv().await {
        match c.message {
            ControlMessage::Takeover { session, conn } => {
                let mine = c.node == d.node;
                for older in d.session_conns(&session) {
                    if !(mine && older.id == conn) && older.request_close(crate::outbound::CloseRequest::TAKEN_OVER) {
                        tracing::info!(conn = %older.id, "Session taken over by a newer connection; closing the older one.");
                    }
                }
            }
            ControlMessage::Kick { consumer } => {
                for tx in d.consumer_tasks(&consumer) {
                    let _ = tx.try_send(Cmd::Kick { consumer: consumer.clone() });
                }
            }
        }
    }
}

/// What a durable task is told.
#[derive(Debug)]
#[allow(missing_docs)] // each variant's doc names its fields
pub enum Cmd {
    /// A live message of a durable subscription.
    Live { consumer: ConsumerId, env: Arc<Envelope> },
    /// A durable subscription started (subscribe or restore): deliver what is pending; for a
    /// group, as a replay (`replayStart`…`replayEnd`, N26) of the backlog `(count, up_to seq)`
    /// read before `subscribed` went out, so later messages stay live. `held`: deliver nothing
    /// (live messages stay pending in the store) until [`Cmd::Resume`], while the
    /// subscription's hydration is under way (N43).
    Start { consumer: ConsumerId, echo: Arc<str>, replay: Option<(u64, u64)>, held: bool },
    /// The held subscription's hydration is over: deliver what is pending, then live.
    Resume { consumer: ConsumerId },
    /// A durable subscription ended; `forget` drops a session's consumer from the store.
    Stop { consumer: ConsumerId, forget: bool },
    /// Messages of the consumer were released somewhere: take what is unheld.
    Kick { consumer: ConsumerId },
    /// The client acked these msgIds.
    Ack(Vec<String>),
    /// The connection ended: release what it holds, keep its consumers this long (the session's
    /// expiry), then stop.
    Shutdown(oneshot::Sender<()>, Duration),
}

/// The msgId of a live message (empty for anything else: never claimed).
fn msg_id(env: &Envelope) -> &str {
    match env {
        Envelope::Publication(p) => p.msg_id.as_deref().unwrap_or(""),
        _ => "",
    }
}

/// Live messages and acks a durable task took off its queue together ([`DurableTask::take_batch`]).
#[derive(Debug, Default)]
struct Batch {
    /// Live messages, in queue order.
    live: Vec<(ConsumerId, Arc<Envelope>)>,
    /// Acked msgIds, in queue order.
    acks: Vec<String>,
}

impl Batch {
    fn add(&mut self, cmd: Cmd) {
        match cmd {
            Cmd::Live { consumer, env } => self.live.push((consumer, env)),
            Cmd::Ack(ids) => self.acks.extend(ids),
            _ => {}
        }
    }
}

/// How the hub reaches a connection's durable task.
#[derive(Debug, Clone)]
pub struct DurableRoute {
    /// The subscription's consumer.
    pub consumer: ConsumerId,
    tx: mpsc::Sender<Cmd>,
    lane: Arc<Lane>,
    overflow: Arc<AtomicBool>,
    conn: Arc<ConnHandle>,
}

impl DurableRoute {
    /// Hands a live message to the task; when its queue is full the message stays pending in
    /// the store and the task catches up from there.
    pub fn offer(&self, env: &Arc<Envelope>) {
        let cmd = Cmd::Live { consumer: self.consumer.clone(), env: env.clone() };
        if self.tx.try_send(cmd).is_err() {
            self.overflow.store(true, Ordering::Release);
        }
    }

    /// Ends the hold of a subscription started `held` ([`Cmd::Resume`]), without waiting.
    pub async fn resume(&self) {
        if !self.lane.push(Cmd::Resume { consumer: self.consumer.clone() }) {
            lane_full(&self.conn);
        }
    }
}

/// The session side of a connection's durable task.
#[derive(Debug)]
pub struct DurableHandle {
    tx: mpsc::Sender<Cmd>,
    lane: Arc<Lane>,
    overflow: Arc<AtomicBool>,
    conn: Arc<ConnHandle>,
}

/// A connection whose subscription changes pile up faster than its durable task takes them.
fn lane_full(conn: &ConnHandle) {
    if conn.request_close(crate::outbound::CloseRequest::SLOW_CONSUMER) {
        tracing::info!(conn = %conn.id, "Subscription changes waiting for durable delivery past the bound; closing as a slow consumer.");
    }
}

impl DurableHandle {
    /// Starts the task of `conn` (session `key`).
    pub fn spawn(d: &Arc<Durable>, conn: &Arc<ConnHandle>, key: &SessionKey) -> Self {
        let (tx, rx) = mpsc::channel(d.queue);
        let lane = Arc::new(Lane::new(d.lane_cap));
        let overflow = Arc::new(AtomicBool::new(false));
        let task = DurableTask {
            d: d.clone(),
            conn: conn.clone(),
            session: key.holder_key(),
            consumers: HashMap::new(),
            inflight: HashMap::new(),
            overflow: overflow.clone(),
            self_tx: tx.clone(),
            lane: lane.clone(),
        };
        tokio::spawn(task.run(rx));
        Self { tx, lane, overflow, conn: conn.clone() }
    }

    /// The route the hub uses for `consumer`'s subscription.
    pub fn route(&self, consumer: &ConsumerId) -> DurableRoute {
        DurableRoute {
            consumer: consumer.clone(),
            tx: self.tx.clone(),
            lane: self.lane.clone(),
            overflow: self.overflow.clone(),
            conn: self.conn.clone(),
        }
    }

    /// Queues a subscription change ([`Cmd::Start`], [`Cmd::Stop`]) without waiting: the task
    /// takes it after what is queued already. Past the bound the connection closes as a slow
    /// consumer.
    pub fn change(&self, cmd: Cmd) {
        if !self.lane.push(cmd) {
            lane_full(&self.conn);
        }
    }

    /// Sends a command, waiting for queue room (the reader applies backpressure).
    pub async fn send(&self, cmd: Cmd) {
        let _ = self.tx.send(cmd).await;
    }

    /// Sends a command if the task's queue has room; gives it back when it is full.
    ///
    /// # Errors
    /// The command, when the queue is full or the task ended.
    pub fn try_send(&self, cmd: Cmd) -> Result<(), Cmd> {
        self.tx.try_send(cmd).map_err(tokio::sync::mpsc::error::TrySendError::into_inner)
    }

    /// Releases what the connection holds, keeps its consumers `keep` from now (the session's
    /// expiry) and stops the task, waiting at most `grace`.
    pub async fn shutdown(self, grace: Duration, keep: Duration) {
        let (done, wait) = oneshot::channel();
        if self.tx.send(Cmd::Shutdown(done, keep)).await.is_ok() {
            let _ = tokio::time::timeout(grace, wait).await;
        }
    }
}

#[derive(Debug)]
struct ConsumerState {
    echo: Arc<str>,
    /// Held until its hydration is over; the group replay to run then.
    held: Option<Option<(u64, u64)>>,
    /// The highest store `seq` this task has delivered for the consumer (0: none yet). A
    /// catch-up after an overflow claims only above it, so this member's stream stays in order.
    last_seq: u64,
    /// The highest unheld pending `seq` seen at the previous sweep (0: none). A sweep claims
    /// only up to it: a message pending since before the previous sweep has waited at least
    /// `durable_sweep_interval` unclaimed; younger ones are still on their way to a member.
    sweep_mark: u64,
}

/// One connection's durable deliveries.
struct DurableTask {
    d: Arc<Durable>,
    conn: Arc<ConnHandle>,
    session: String,
    consumers: HashMap<ConsumerId, ConsumerState>,
    /// msgId → consumer, for routing acks.
    inflight: HashMap<String, ConsumerId>,
    overflow: Arc<AtomicBool>,
    /// Registered with the node so kicks reach this task.
    self_tx: mpsc::Sender<Cmd>,
    /// Subscription changes, queued without waiting.
    lane: Arc<Lane>,
}

impl DurableTask {
    fn holder(&self) -> Holder<'_> {
        Holder { session: &self.session, node: self.d.node.as_str(), conn: self.conn.id.0 }
    }

    async fn run(mut self, mut rx: mpsc::Receiver<Cmd>) {
        let touch_every = (self.d.restore_ttl / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
        let mut touch = tokio::time::interval(touch_every);
        touch.tick().await;
        // A logged message that missed the bus (the broker restarted before the subscribing
        // node resubscribed, a node died with it in flight) is pending and unheld with members
        // connected: no live copy and no kick will come for it. The sweep picks it up.
        let sweeping = !self.d.sweep.is_zero();
        let mut sweep = tokio::time::interval(if sweeping { self.d.sweep } else { Duration::from_secs(3600) });
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        sweep.tick().await;
        let lane = self.lane.clone();
        loop {
            if let Some(group_stop) = lane.front_is_group_stop() {
                // Subscription changes come first (a start before the live messages queued
                // behind it, which it then delivers in store order), except that a group
                // member's unsubscribe waits for what was queued before it (the acks sent
                // before it, above all): it releases what the member holds to the others.
                if group_stop {
                    let mut before = rx.len();
                    while before > 0 {
                        let Ok(cmd) = rx.try_recv() else { break };
                        before -= 1;
                        if self.step(cmd, &mut rx).await {
                            return;
                        }
                    }
                }
                if let Some(cmd) = lane.pop() {
                    self.handle(cmd).await;
                    self.catch_up_after_overflow().await;
                }
                continue;
            }
            let cmd = tokio::select! {
                biased;
                () = lane.notify.notified() => continue,
                cmd = rx.recv() => cmd,
                _ = touch.tick() => { self.touch(self.d.restore_ttl).await; continue; }
                _ = sweep.tick(), if sweeping => { self.sweep().await; continue; }
            };
            let Some(cmd) = cmd else { break };
            if self.step(cmd, &mut rx).await {
                return;
            }
        }
        self.stop_waiting().await;
        let keep = self.d.restore_ttl;
        self.shutdown(keep).await;
    }

    /// Handles one command off the queue (a live message or an ack with those queued right
    /// behind it); true once the task is shut down.
    async fn step(&mut self, cmd: Cmd, rx: &mut mpsc::Receiver<Cmd>) -> bool {
        let next = match cmd {
            Cmd::Live { .. } | Cmd::Ack(_) => {
                let (batch, next) = self.take_batch(cmd, rx);
                self.live_batch(batch.live).await;
                self.ack(batch.acks).await;
                self.catch_up_after_overflow().await;
                next
            }
            other => Some(other),
        };
        let Some(cmd) = next else { return false };
        if let Cmd::Shutdown(done, keep) = cmd {
            self.stop_waiting().await;
            self.shutdown(keep).await;
            let _ = done.send(());
            return true;
        }
        self.handle(cmd).await;
        // A live message dropped because this queue was full is pending in the store: it is
        // caught up (in store order) before the next live message is handled; those queued
        // behind it are then held by this connection and skipped, so order holds.
        self.catch_up_after_overflow().await;
        false
    }

    /// At the end: the unsubscribes still waiting (their consumers forgotten or released);
    /// the starts and resumes waiting are moot.
    async fn stop_waiting(&mut self) {
        for cmd in self.lane.take() {
            if let Cmd::Stop { consumer, forget } = cmd {
                self.stop(&consumer, forget).await;
            }
        }
    }

    /// `first` (a live message or an ack) and the live messages and acks queued right behind
    /// it, up to [`MAX_BATCH`] commands: whatever waits already, never waiting for more. Stops
    /// at any other command (returned, to handle after the batch) and as soon as a live message
    /// was dropped (queue full): what is queued from then on may be newer than the dropped one,
    /// which the catch-up after this batch delivers first.
    fn take_batch(&self, first: Cmd, rx: &mut mpsc::Receiver<Cmd>) -> (Batch, Option<Cmd>) {
        let mut batch = Batch::default();
        batch.add(first);
        let mut taken = 1;
        while taken < MAX_BATCH && !self.overflow.load(Ordering::Acquire) {
            match rx.try_recv() {
                Ok(cmd @ (Cmd::Live { .. } | Cmd::Ack(_))) => batch.add(cmd),
                Ok(other) => return (batch, Some(other)),
                Err(_) => break,
            }
            taken += 1;
        }
        (batch, None)
    }

    async fn handle(&mut self, cmd: Cmd) {
        match cmd {
            Cmd::Live { consumer, env } => self.live_batch(vec![(consumer, env)]).await,
            Cmd::Start { consumer, echo, replay, held } => {
                self.d.register_consumer_task(&consumer, self.conn.id, &self.self_tx);
                let state = ConsumerState { echo, held: held.then_some(replay), last_seq: 0, sweep_mark: 0 };
                self.consumers.insert(consumer.clone(), state);
                if !held {
                    self.deliver_pending(&consumer, replay).await;
                }
            }
            Cmd::Resume { consumer } => {
                if let Some(replay) = self.consumers.get_mut(&consumer).and_then(|s| s.held.take()) {
                    self.deliver_pending(&consumer, replay).await;
                }
            }
            Cmd::Stop { consumer, forget } => self.stop(&consumer, forget).await,
            Cmd::Kick { consumer } => {
                if self.consumers.get(&consumer).is_some_and(|s| s.held.is_none()) {
                    self.deliver_pending(&consumer, None).await;
                }
            }
            Cmd::Ack(ids) => self.ack(ids).await,
            Cmd::Shutdown(..) => {}
        }
    }

    /// Delivers live messages, in the order given, each once this connection holds it in the
    /// store: all of them are claimed by one request to the node's writer
    /// ([`crate::durable_writer`]), which claims them together with what the node's other
    /// connections wait to claim, instead of a claim per message and subscriber.
    async fn live_batch(&mut self, live: Vec<(ConsumerId, Arc<Envelope>)>) {
        // A held subscription's messages stay pending; its resume delivers them. A closing
        // connection (its client left, or a newer connection took its session over) claims no
        // more of its session's own messages: they stay pending and unheld for the session's
        // next connection, which would otherwise get them only after this one's release, as
        // redeliveries (found by the MQTT door's session tests). A group's stay claimed here and
        // are released to the other members at once, as before.
        let closing = self.conn.is_closing();
        let live: Vec<(ConsumerId, Arc<Envelope>)> = live
            .into_iter()
            .filter(|(c, env)| {
                self.consumers.get(c).is_some_and(|s| s.held.is_none())
                    && matches!(&**env, Envelope::Publication(p) if p.msg_id.is_some())
                    && !(closing && matches!(c.of(), ConsumerOf::Session { .. }))
            })
            .collect();
        // Per message: deliver it (and whether as a redelivery) or not. One request to the
        // node's writer for all of them, stored with what other connections wait to claim.
        let mut verdicts: Vec<Option<bool>> = vec![None; live.len()];
        let mut claimed: Vec<(usize, u64)> = Vec::new();
        let wanted: Vec<(ConsumerId, String)> =
            live.iter().map(|(c, env)| (c.clone(), msg_id(env).to_owned())).collect();
        match self.d.writer.claim(wanted, &self.session, self.conn.id.0).await {
            Some(claims) => {
                for (i, claim) in claims.into_iter().enumerate() {
                    verdicts[i] = match claim {
                        Claim::Claimed { redelivered, seq } => {
                            claimed.push((i, seq));
                            Some(redelivered)
                        }
                        Claim::Held => None,
                        // Nothing pending for a group: another member was given it (a replay
                        // or catch-up got there before this live copy) and acked it, or
                        // retention pruned it, or it was appended before the group's
                        // consumer existed. Delivering it again would hand an acked message
                        // to a second member (N26); groups never get retained copies.
                        Claim::Absent if matches!(live[i].0.of(), ConsumerOf::Group(_)) => None,
                        Claim::Absent => Some(false),
                    };
                }
            }
            // At least once: deliver them; they stay pending and may come again (the writer
            // logged the failure).
            None => verdicts.iter_mut().for_each(|v| *v = Some(false)),
        }
        for (i, seq) in claimed {
            let (consumer, env) = &live[i];
            self.remember(msg_id(env), consumer);
            if let Some(s) = self.consumers.get_mut(consumer) {
                s.last_seq = s.last_seq.max(seq);
            }
        }
        for ((consumer, env), verdict) in live.iter().zip(verdicts) {
            let (Some(is_replay), Envelope::Publication(p)) = (verdict, &**env) else { continue };
            let Some(echo) = self.consumers.get(consumer).map(|s| s.echo.clone()) else { continue };
            let frame = MessageFrame {
                topic: &echo,
                data: &p.data,
                filter: p.filter.as_deref(),
                from: p.publisher.as_str(),
                timestamp: p.timestamp_ms,
                msg_id: p.msg_id.as_deref(),
                is_replay,
                history: p.history.as_ref().map(|h| (h.offset, &*h.epoch)),
            };
            self.push(&ServerFrame::Message(frame)).await;
        }
    }

    /// Delivers what is pending and unheld for `consumer`, oldest first, in pages. As a group
    /// replay (N26) it is framed by `replayStart{count}` / `replayEnd{replayed}` and bounded by
    /// the backlog read at subscribe time; newer messages follow live.
    async fn deliver_pending(&mut self, consumer: &ConsumerId, backlog: Option<(u64, u64)>) {
        let (count, up_to) = backlog.map_or((None, u64::MAX), |(count, up_to)| (Some(count), up_to));
        self.deliver_range(consumer, count, 0..=up_to).await;
    }

    /// [`Self::deliver_pending`] over the store orders `seqs`; `replay_count` frames it as a
    /// group replay.
    async fn deliver_range(
        &mut self,
        consumer: &ConsumerId,
        replay_count: Option<u64>,
        seqs: std::ops::RangeInclusive<u64>,
    ) {
        let Some(echo) = self.consumers.get(consumer).map(|c| c.echo.clone()) else { return };
        let replay = replay_count.is_some();
        let count = replay_count.unwrap_or(0);
        if replay {
            if count == 0 {
                return;
            }
            self.push(&ServerFrame::ReplayStart { count }).await;
        }
        let mut delivered = 0u64;
        let page_size = self.d.replay_page_size.max(1);
        loop {
            if self.conn.is_closing() {
                return;
            }
            let page = match self.d.store.claim_page(consumer.as_str(), self.holder(), seqs.clone(), page_size).await {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(error = %e, "Reading pending messages failed; they stay pending.");
                    break;
                }
            };
            if page.is_empty() {
                break;
            }
            if let (Some(s), Some(last)) = (self.consumers.get_mut(consumer), page.last()) {
                s.last_seq = s.last_seq.max(last.seq);
            }
            for m in page {
                self.remember(&m.msg_id, consumer);
                let frame = MessageFrame {
                    topic: &echo,
                    data: &m.data,
                    filter: m.filter.as_deref(),
                    from: &m.publisher,
                    timestamp: m.timestamp_ms,
                    msg_id: Some(&m.msg_id),
                    is_replay: replay || m.redelivered,
                    history: None,
                };
                self.push(&ServerFrame::Message(frame)).await;
                delivered += 1;
                if m.redelivered {
                    self.d.metrics.redeliveries.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        if replay {
            self.d.metrics.replays.fetch_add(1, Ordering::Relaxed);
            self.d.metrics.replayed_messages.fetch_add(delivered, Ordering::Relaxed);
            if delivered < count {
                // Pruned by retention meanwhile, or taken by another member that connected too.
                self.d.metrics.replay_shortfall.fetch_add(count - delivered, Ordering::Relaxed);
                tracing::info!(consumer = %consumer, count, delivered, "Replay delivered fewer messages than announced.");
            }
            self.push(&ServerFrame::ReplayEnd { replayed: delivered }).await;
        }
    }

    /// After a live message was dropped (queue full): delivers, for each consumer not held by
    /// a hydration, what is pending and unheld above the last message this task delivered for
    /// it. Older unheld messages were routed to other members (still queued at theirs, or
    /// dropped there and caught up by them): taking them here would hand this member a message
    /// older than one it already has; the sweep takes them if they stay unclaimed.
    async fn catch_up_after_overflow(&mut self) {
        if self.overflow.swap(false, Ordering::AcqRel) {
            self.d.metrics.durable_overflows.fetch_add(1, Ordering::Relaxed);
            let ids: Vec<(ConsumerId, u64)> =
                self.consumers.iter().filter(|(_, s)| s.held.is_none()).map(|(c, s)| (c.clone(), s.last_seq)).collect();
            for (c, last) in ids {
                self.deliver_range(&c, None, last.saturating_add(1)..=u64::MAX).await;
            }
        }
    }

    /// Delivers, for each consumer not held by a hydration, what is pending and unheld since
    /// before the previous sweep (a message that missed the bus, or one a slow member has not
    /// claimed for a whole `durable_sweep_interval`). The newest unheld message is read first and
    /// becomes the next sweep's bound, so whatever a sweep takes waited at least one interval.
    async fn sweep(&mut self) {
        let ids: Vec<(ConsumerId, u64)> =
            self.consumers.iter().filter(|(_, s)| s.held.is_none()).map(|(c, s)| (c.clone(), s.sweep_mark)).collect();
        for (c, mark) in ids {
            let next = match self.d.store.backlog(c.as_str()).await {
                Ok((0, _)) => 0,
                Ok((_, newest)) => newest,
                Err(e) => {
                    tracing::warn!(error = %e, "Reading a consumer's backlog failed; the next sweep takes what it can.");
                    mark
                }
            };
            if mark > 0 {
                self.deliver_range(&c, None, 0..=mark).await;
            }
            if let Some(s) = self.consumers.get_mut(&c) {
                s.sweep_mark = next;
            }
        }
    }

    async fn stop(&mut self, consumer: &ConsumerId, forget: bool) {
        self.consumers.remove(consumer);
        self.d.unregister_consumer_task(consumer, self.conn.id);
        self.inflight.retain(|_, c| c != consumer);
        let store = &self.d.store;
        if forget {
            if let Err(e) = store.drop_consumer(consumer.as_str()).await {
                tracing::warn!(error = %e, "Dropping a consumer failed; it expires by itself.");
            }
            return;
        }
        let scope =
            Release::ConnConsumer { node: self.d.node.as_str(), conn: self.conn.id.0, consumer: consumer.as_str() };
        match store.release(scope).await {
            Ok(released) => self.d.kick(&released).await,
            Err(e) => tracing::warn!(error = %e, "Releasing held messages failed; the next connection takes them."),
        }
    }

    /// Stores acks, with those other connections of the node wait to store: each on the
    /// consumer this task delivered it for, an id it does not remember on each of its
    /// consumers (a msgId is pending for one of them at most).
    async fn ack(&mut self, ids: Vec<String>) {
        if ids.is_empty() {
            return;
        }
        let mut acks: Vec<(ConsumerId, String)> = Vec::with_capacity(ids.len());
        for id in ids {
            match self.inflight.remove(&id) {
                Some(c) => acks.push((c, id)),
                None => acks.extend(self.consumers.keys().map(|c| (c.clone(), id.clone()))),
            }
        }
        if let Some(done) = self.d.writer.ack(acks).await {
            let n = done.iter().filter(|d| **d).count();
            self.d.metrics.acks.fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    /// Keeps the consumers `keep` from now (`restore_ttl` while connected).
    async fn touch(&self, keep: Duration) {
        let ids: Vec<&str> = self.consumers.keys().map(ConsumerId::as_str).collect();
        if ids.is_empty() {
            return;
        }
        let ttl = keep.as_secs();
        if let Err(e) = self.d.store.touch_consumers(&ids, now_unix_s(), ttl).await {
            tracing::warn!(error = %e, "Refreshing consumers failed; retrying at the next tick.");
        }
    }

    async fn shutdown(&mut self, keep: Duration) {
        for c in self.consumers.keys() {
            self.d.unregister_consumer_task(c, self.conn.id);
        }
        self.touch(keep).await;
        let scope = Release::Conn { node: self.d.node.as_str(), conn: self.conn.id.0 };
        match self.d.store.release(scope).await {
            Ok(released) => self.d.kick(&released).await,
            Err(e) => {
                tracing::warn!(error = %e, "Releasing held messages failed; retrying in the background.");
                let (d, conn) = (self.d.clone(), self.conn.id.0);
                self.d.tasks.spawn(async move {
                    for _ in 0..RELEASE_RETRIES {
                        tokio::time::sleep(RELEASE_RETRY_EVERY).await;
                        if let Ok(released) = d.store.release(Release::Conn { node: d.node.as_str(), conn }).await {
                            return d.kick(&released).await;
                        }
                    }
                    tracing::warn!("Gave up releasing a closed connection's messages; its next connection takes them.");
                });
            }
        }
        self.consumers.clear();
    }

    fn remember(&mut self, msg_id: &str, consumer: &ConsumerId) {
        if self.inflight.len() < MAX_INFLIGHT_INDEX {
            self.inflight.insert(msg_id.to_owned(), consumer.clone());
        }
    }

    /// Queues a frame once the connection has room (never overflowing it).
    async fn push(&self, frame: &ServerFrame<'_>) {
        self.conn.room().await;
        self.conn.send(frame);
    }
}

/// Deletes logged messages past `retention` every `every`, on every node, until `stop` fires.
pub async fn run_retention(
    store: Arc<dyn Store>,
    metrics: Arc<Metrics>,
    every: Duration,
    retention: skua_core::Retention,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut tick = tokio::time::interval(every.max(Duration::from_secs(1)));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.cancelled() => return,
        }
        match store.prune_log(now_unix_s(), retention).await {
            Ok(0) => {}
            Ok(n) => {
                metrics.log_pruned.fetch_add(n, Ordering::Relaxed);
                tracing::info!(deleted = n, "Pruned logged messages past retention.");
            }
            Err(e) => tracing::warn!(error = %e, "Pruning logged messages failed; retrying at the next interval."),
        }
    }
}
