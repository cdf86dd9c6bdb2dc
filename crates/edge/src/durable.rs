//! Durable delivery (N24–N26, N37): logged-topic messages to persistent sessions and
//! load-balanced groups, with acks, redelivery and replay. The data model is in docs/durable.md.
//!
//! Each connection with a durable subscription (a persistent session's subscription to a logged
//! topic) gets one [`DurableTask`]. The hub's dispatcher hands it the live messages of those
//! subscriptions instead of queueing frames itself; the task claims each one in the store before
//! it sends it, so a message pending for a load-balanced group reaches one connection only, and
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
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use skua_core::{
    Claim, ConsumerId, Control, ControlMessage, Envelope, Holder, NodeId, Release, SessionKey, TopicAddress,
};
use skua_protocol::{MessageFrame, ServerFrame};
use tokio::sync::{mpsc, oneshot};

use crate::outbound::ConnHandle;
use crate::state::{EdgeState, now_unix_s};

/// Most msgId → consumer entries a task remembers for routing acks; an ack of an id it does not
/// remember is tried on each of the connection's consumers.
const MAX_INFLIGHT_INDEX: usize = 4096;

/// A connection's release that failed (store unreachable) is retried this often…
const RELEASE_RETRY_EVERY: Duration = Duration::from_secs(5);
/// …this many times; after that the session's next connection, or the node's restart, frees them.
const RELEASE_RETRIES: u32 = 24;

/// The topic key of the message log: `<project>/<app>/<room>/<topic>`.
pub fn topic_key(a: &TopicAddress) -> String {
    a.log_key()
}

/// Publishes a control message on its project's control channel.
pub(crate) async fn publish_control(st: &EdgeState, message: ControlMessage) {
    let env = Envelope::Control(Control { id: st.next_envelope_id(), node: st.node.clone(), message });
    if let Err(e) = st.hub.bus().publish(Arc::new(env)).await {
        tracing::warn!(error = %e, "Control message not published; other nodes learn of it later or not at all.");
    }
}

/// Handles control messages arriving from the bus, until `rx` closes.
pub(crate) async fn run_control(st: Arc<EdgeState>, mut rx: mpsc::Receiver<Control>) {
    while let Some(c) = rx.recv().await {
        match c.message {
            ControlMessage::Takeover { session, conn } => {
                let mine = c.node == st.node;
                for older in st.session_conns(&session) {
                    if !(mine && older.id == conn) && older.request_close(crate::outbound::CloseRequest::TAKEN_OVER) {
                        tracing::info!(conn = %older.id, "Session taken over by a newer connection; closing the older one.");
                    }
                }
            }
            ControlMessage::Kick { consumer } => {
                for tx in st.consumer_tasks(&consumer) {
                    let _ = tx.try_send(Cmd::Kick { consumer: consumer.clone() });
                }
            }
        }
    }
}

/// Tells the connected members of each released consumer (ids as the store returns them) to
/// take its messages.
pub(crate) async fn kick(st: &EdgeState, consumers: &[String]) {
    for c in consumers {
        match ConsumerId::parse(c) {
            Ok(consumer) => publish_control(st, ControlMessage::Kick { consumer }).await,
            Err(e) => tracing::warn!(error = %e, "The store released messages of an unknown consumer; nobody is told."),
        }
    }
}

/// What a durable task is told.
#[derive(Debug)]
pub(crate) enum Cmd {
    /// A live message of a durable subscription.
    Live { consumer: ConsumerId, env: Arc<Envelope> },
    /// A durable subscription started (subscribe or restore): deliver what is pending; for a
    /// group, as a replay (`replayStart`…`replayEnd`, N26) of the backlog `(count, up_to seq)`
    /// read before `subscribed` went out, so later messages stay live.
    Start { consumer: ConsumerId, echo: Arc<str>, replay: Option<(u64, u64)> },
    /// A durable subscription ended; `forget` drops a session's consumer from the store.
    Stop { consumer: ConsumerId, forget: bool },
    /// Messages of the consumer were released somewhere: take what is unheld.
    Kick { consumer: ConsumerId },
    /// The client acked these msgIds.
    Ack(Vec<String>),
    /// The connection ended: release what it holds, then stop.
    Shutdown(oneshot::Sender<()>),
}

/// How the hub reaches a connection's durable task.
#[derive(Debug, Clone)]
pub struct DurableRoute {
    /// The subscription's consumer.
    pub consumer: ConsumerId,
    tx: mpsc::Sender<Cmd>,
    overflow: Arc<AtomicBool>,
}

impl DurableRoute {
    /// Hands a live message to the task; when its queue is full the message stays pending in
    /// the store and the task catches up from there.
    pub(crate) fn offer(&self, env: &Arc<Envelope>) {
        let cmd = Cmd::Live { consumer: self.consumer.clone(), env: env.clone() };
        if self.tx.try_send(cmd).is_err() {
            self.overflow.store(true, Ordering::Release);
        }
    }
}

/// The session side of a connection's durable task.
#[derive(Debug)]
pub(crate) struct DurableHandle {
    tx: mpsc::Sender<Cmd>,
    overflow: Arc<AtomicBool>,
}

impl DurableHandle {
    /// Starts the task of `conn` (session `key`).
    pub(crate) fn spawn(st: &Arc<EdgeState>, conn: &Arc<ConnHandle>, key: &SessionKey) -> Self {
        let (tx, rx) = mpsc::channel(st.config.durable_queue.max(1));
        let overflow = Arc::new(AtomicBool::new(false));
        let task = DurableTask {
            st: st.clone(),
            conn: conn.clone(),
            session: key.holder_key(),
            consumers: HashMap::new(),
            inflight: HashMap::new(),
            overflow: overflow.clone(),
            self_tx: tx.clone(),
        };
        tokio::spawn(task.run(rx));
        Self { tx, overflow }
    }

    /// The route the hub uses for `consumer`'s subscription.
    pub(crate) fn route(&self, consumer: &ConsumerId) -> DurableRoute {
        DurableRoute { consumer: consumer.clone(), tx: self.tx.clone(), overflow: self.overflow.clone() }
    }

    /// Sends a command, waiting for queue room (the reader applies backpressure).
    pub(crate) async fn send(&self, cmd: Cmd) {
        let _ = self.tx.send(cmd).await;
    }

    /// Releases what the connection holds and stops the task, waiting at most `grace`.
    pub(crate) async fn shutdown(self, grace: Duration) {
        let (done, wait) = oneshot::channel();
        if self.tx.send(Cmd::Shutdown(done)).await.is_ok() {
            let _ = tokio::time::timeout(grace, wait).await;
        }
    }
}

#[derive(Debug)]
struct ConsumerState {
    echo: Arc<str>,
}

/// One connection's durable deliveries.
struct DurableTask {
    st: Arc<EdgeState>,
    conn: Arc<ConnHandle>,
    session: String,
    consumers: HashMap<ConsumerId, ConsumerState>,
    /// msgId → consumer, for routing acks.
    inflight: HashMap<String, ConsumerId>,
    overflow: Arc<AtomicBool>,
    /// Registered with the node so kicks reach this task.
    self_tx: mpsc::Sender<Cmd>,
}

impl DurableTask {
    fn holder(&self) -> Holder<'_> {
        Holder { session: &self.session, node: self.st.node.as_str(), conn: self.conn.id.0 }
    }

    async fn run(mut self, mut rx: mpsc::Receiver<Cmd>) {
        let touch_every = (self.st.config.restore_ttl / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
        let mut touch = tokio::time::interval(touch_every);
        touch.tick().await;
        loop {
            let cmd = tokio::select! {
                cmd = rx.recv() => cmd,
                _ = touch.tick() => { self.touch().await; continue; }
            };
            let Some(cmd) = cmd else { break };
            if let Cmd::Shutdown(done) = cmd {
                self.shutdown().await;
                let _ = done.send(());
                return;
            }
            self.handle(cmd).await;
            if self.overflow.swap(false, Ordering::AcqRel) {
                let ids: Vec<ConsumerId> = self.consumers.keys().cloned().collect();
                for c in ids {
                    self.deliver_pending(&c, None).await;
                }
            }
        }
        self.shutdown().await;
    }

    async fn handle(&mut self, cmd: Cmd) {
        match cmd {
            Cmd::Live { consumer, env } => self.live(&consumer, &env).await,
            Cmd::Start { consumer, echo, replay } => {
                self.st.register_consumer_task(&consumer, self.conn.id, &self.self_tx);
                self.consumers.insert(consumer.clone(), ConsumerState { echo });
                self.deliver_pending(&consumer, replay).await;
            }
            Cmd::Stop { consumer, forget } => self.stop(&consumer, forget).await,
            Cmd::Kick { consumer } => {
                if self.consumers.contains_key(&consumer) {
                    self.deliver_pending(&consumer, None).await;
                }
            }
            Cmd::Ack(ids) => self.ack(ids).await,
            Cmd::Shutdown(_) => {}
        }
    }

    async fn live(&mut self, consumer: &ConsumerId, env: &Arc<Envelope>) {
        let Some(state) = self.consumers.get(consumer) else { return };
        let echo = state.echo.clone();
        let Envelope::Publication(p) = &**env else { return };
        let Some(msg_id) = p.msg_id.as_deref() else { return };
        let is_replay = match self.st.store.claim(consumer.as_str(), msg_id, self.holder()).await {
            Ok(Claim::Claimed { redelivered }) => {
                self.remember(msg_id, consumer);
                redelivered
            }
            Ok(Claim::Held) => return,
            Ok(Claim::Absent) => false,
            Err(e) => {
                // At least once: deliver it; it stays pending and may come again.
                tracing::warn!(error = %e, "Claiming a logged message failed; delivering it untracked.");
                false
            }
        };
        let frame = MessageFrame {
            topic: &echo,
            data: &p.data,
            filter: p.filter.as_deref(),
            from: p.publisher.as_str(),
            timestamp: p.timestamp_ms,
            msg_id: Some(msg_id),
            is_replay,
        };
        self.push(&ServerFrame::Message(frame)).await;
    }

    /// Delivers what is pending and unheld for `consumer`, oldest first, in pages. As a group
    /// replay (N26) it is framed by `replayStart{count}` / `replayEnd{replayed}` and bounded by
    /// the backlog read at subscribe time; newer messages follow live.
    async fn deliver_pending(&mut self, consumer: &ConsumerId, backlog: Option<(u64, u64)>) {
        let Some(echo) = self.consumers.get(consumer).map(|c| c.echo.clone()) else { return };
        let replay = backlog.is_some();
        let (count, up_to) = backlog.unwrap_or((0, u64::MAX));
        if replay {
            if count == 0 {
                return;
            }
            self.push(&ServerFrame::ReplayStart { count }).await;
        }
        let mut delivered = 0u64;
        let page_size = self.st.config.replay_page_size.max(1);
        loop {
            if self.conn.is_closing() {
                return;
            }
            let page = match self.st.store.claim_page(consumer.as_str(), self.holder(), up_to, page_size).await {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(error = %e, "Reading pending messages failed; they stay pending.");
                    break;
                }
            };
            if page.is_empty() {
                break;
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
                };
                self.push(&ServerFrame::Message(frame)).await;
                delivered += 1;
                if m.redelivered {
                    self.st.metrics.redeliveries.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        if replay {
            self.st.metrics.replays.fetch_add(1, Ordering::Relaxed);
            self.st.metrics.replayed_messages.fetch_add(delivered, Ordering::Relaxed);
            if delivered < count {
                // Pruned by retention meanwhile, or taken by another member that connected too.
                self.st.metrics.replay_shortfall.fetch_add(count - delivered, Ordering::Relaxed);
                tracing::info!(consumer = %consumer, count, delivered, "Replay delivered fewer messages than announced.");
            }
            self.push(&ServerFrame::ReplayEnd { replayed: delivered }).await;
        }
    }

    async fn stop(&mut self, consumer: &ConsumerId, forget: bool) {
        self.consumers.remove(consumer);
        self.st.unregister_consumer_task(consumer, self.conn.id);
        self.inflight.retain(|_, c| c != consumer);
        let store = &self.st.store;
        if forget {
            if let Err(e) = store.drop_consumer(consumer.as_str()).await {
                tracing::warn!(error = %e, "Dropping a consumer failed; it expires by itself.");
            }
            return;
        }
        let scope =
            Release::ConnConsumer { node: self.st.node.as_str(), conn: self.conn.id.0, consumer: consumer.as_str() };
        match store.release(scope).await {
            Ok(released) => kick(&self.st, &released).await,
            Err(e) => tracing::warn!(error = %e, "Releasing held messages failed; the next connection takes them."),
        }
    }

    async fn ack(&mut self, ids: Vec<String>) {
        for id in ids {
            let consumers: Vec<ConsumerId> = match self.inflight.remove(&id) {
                Some(c) => vec![c],
                None => self.consumers.keys().cloned().collect(),
            };
            for c in consumers {
                match self.st.store.ack(c.as_str(), &id).await {
                    Ok(true) => {
                        self.st.metrics.acks.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                    Ok(false) => {}
                    Err(e) => tracing::warn!(error = %e, "Storing an ack failed; the message may be delivered again."),
                }
            }
        }
    }

    async fn touch(&self) {
        let ids: Vec<&str> = self.consumers.keys().map(ConsumerId::as_str).collect();
        if ids.is_empty() {
            return;
        }
        let ttl = self.st.config.restore_ttl.as_secs();
        if let Err(e) = self.st.store.touch_consumers(&ids, now_unix_s(), ttl).await {
            tracing::warn!(error = %e, "Refreshing consumers failed; retrying at the next tick.");
        }
    }

    async fn shutdown(&mut self) {
        for c in self.consumers.keys() {
            self.st.unregister_consumer_task(c, self.conn.id);
        }
        self.touch().await;
        let scope = Release::Conn { node: self.st.node.as_str(), conn: self.conn.id.0 };
        match self.st.store.release(scope).await {
            Ok(released) => kick(&self.st, &released).await,
            Err(e) => {
                tracing::warn!(error = %e, "Releasing held messages failed; retrying in the background.");
                let (st, conn) = (self.st.clone(), self.conn.id.0);
                self.st.background.spawn(async move {
                    for _ in 0..RELEASE_RETRIES {
                        tokio::time::sleep(RELEASE_RETRY_EVERY).await;
                        if let Ok(released) = st.store.release(Release::Conn { node: st.node.as_str(), conn }).await {
                            return kick(&st, &released).await;
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

/// Deletes logged messages past retention, on every node, until `stop` fires.
pub(crate) async fn run_retention(st: Arc<EdgeState>, stop: tokio_util::sync::CancellationToken) {
    let mut tick = tokio::time::interval(st.config.log_prune_interval.max(Duration::from_secs(1)));
    let retention =
        skua_core::Retention { max_age_s: st.config.log_max_age.as_secs(), max_per_topic: st.config.log_max_per_topic };
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.cancelled() => return,
        }
        match st.store.prune_log(now_unix_s(), retention).await {
            Ok(0) => {}
            Ok(n) => {
                st.metrics.log_pruned.fetch_add(n, Ordering::Relaxed);
                tracing::info!(deleted = n, "Pruned logged messages past retention.");
            }
            Err(e) => tracing::warn!(error = %e, "Pruning logged messages failed; retrying at the next interval."),
        }
    }
}

/// Releases what a lapsed node's connections held, so other members take it.
pub(crate) async fn release_node(st: &EdgeState, node: &NodeId) {
    match st.store.release(Release::Node(node.as_str())).await {
        Ok(released) => kick(st, &released).await,
        Err(e) => tracing::warn!(error = %e, %node, "Releasing a lapsed node's messages failed."),
    }
}
