//! The engine's handle ([`Engine`]) and the node-level tasks it starts ([`EngineTasks`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use skua_core::webhook::Poster;
use skua_core::{ConnId, EnvelopeId, NodeId, Presence, ProjectId, Registry, SessionKey, SharedRegistry, Store};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::backends::Backends;
use crate::config::EdgeConfig;
use crate::durable::Durable;
use crate::hub::Hub;
use crate::liveness::{DeferredRemovals, Liveness};
use crate::members::Members;
use crate::metrics::{Metrics, MetricsSource};
use crate::outbound::{ConnHandle, OutboundBudget};
use crate::publish::Publisher;
use crate::revalidate::{ConnEntry, Connections, Registration};
use crate::triggers::Triggers;

/// Control messages (takeovers, kicks) queued between the dispatcher and their handler; beyond
/// it they are dropped with a warning (a kick is retried by the next release, a takeover by the
/// older connection's next reconnect).
const CONTROL_QUEUE: usize = 1024;

/// The broker core of one node: registry, backends, fan-out, publish pipeline, durable delivery,
/// members, triggers and the table of authenticated connections, shared by every door (the
/// WebSocket edge, the control plane's APIs). Plain data; [`Engine::start`] starts its tasks.
///
/// The fields the doors read on every frame are public for now; the rest is behind methods.
pub struct Engine {
    /// Settings.
    pub config: EdgeConfig,
    /// This node.
    pub node: NodeId,
    /// Apps, rooms, actors; swapped at run time (N15).
    pub registry: Arc<SharedRegistry>,
    /// Presence store.
    pub presence: Arc<dyn Presence>,
    /// Session store.
    pub store: Arc<dyn Store>,
    /// Local fan-out.
    pub hub: Arc<Hub>,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// Connection tasks of every door; waited for on shutdown.
    pub tracker: TaskTracker,
    /// Cancelled when the node starts draining: every connection closes.
    pub shutdown: CancellationToken,
    /// Authenticated connections, for control-plane changes (`revalidate`).
    pub connections: Arc<Connections>,
    /// The publish pipeline every entry point uses.
    pub publisher: Publisher,
    /// Durable delivery, local clientId sessions and node-to-node control.
    pub durable: Arc<Durable>,
    /// Trigger webhooks (N44, N45), when the node posts webhooks.
    pub triggers: Option<Arc<Triggers>>,
    /// The node's webhook seam: hydration (N43), triggers and wakes go through it.
    pub webhooks: Option<Arc<dyn Poster>>,
    /// Persistent presence and wake (N46, N47).
    pub members: Arc<Members>,
    /// Topic history (issue 19).
    pub history: Option<Arc<dyn skua_core::history::History>>,
    /// The node-wide bound on queued outbound bytes (`outbound_budget_bytes`).
    pub outbound_budget: Arc<OutboundBudget>,
    /// Presence removals that failed, for the liveness loop to retry.
    deferred_removals: Arc<DeferredRemovals>,
    /// Whether a bus outage is this node's own (`/readyz`).
    local_bus_outage: crate::readiness::LocalBusOutage,
    /// Further series for `/metrics`.
    metrics_sources: Vec<Arc<dyn MetricsSource>>,
    next_conn: AtomicU64,
    // std Mutex: counter updates only, never across an await.
    project_conns: Mutex<HashMap<ProjectId, u32>>,
}

/// The node-level tasks [`Engine::start`] started: the hub's dispatcher, the node-to-node
/// control handler, liveness, members, triggers, revalidation, retention and prunes, the
/// release of what a previous run under the same node id held.
#[derive(Debug)]
pub struct EngineTasks {
    /// The tasks; a door may add its own node-level tasks (e.g. a metrics listener).
    tracker: TaskTracker,
    /// Cancelled by [`Self::stop`]: stops every task.
    stop: CancellationToken,
}

impl EngineTasks {
    /// The node-level tasks, for a door to add its own that stop with them.
    pub fn tracker(&self) -> &TaskTracker {
        &self.tracker
    }

    /// Cancelled when the node-level tasks stop.
    pub fn stop_token(&self) -> &CancellationToken {
        &self.stop
    }

    /// Stops the node-level tasks, waiting up to `wait` for them.
    pub async fn stop(self, wait: Duration) {
        self.stop.cancel();
        self.tracker.close();
        let _ = tokio::time::timeout(wait, self.tracker.wait()).await;
    }
}

impl Engine {
    /// Builds the engine over `backends` (each slot wrapped in its latency accounting) and
    /// starts its node-level tasks. The dispatcher outlives a drain (closing sessions still
    /// publish their presence leaves); the tasks stop with [`EngineTasks::stop`].
    pub fn start(
        config: EdgeConfig,
        node: NodeId,
        registry: Arc<SharedRegistry>,
        backends: Backends,
    ) -> (Arc<Self>, EngineTasks) {
        let metrics = Arc::new(Metrics::default());
        let backends = crate::timed::wrap(backends, &metrics);
        let limits = crate::retained::RetainedLimits {
            keys_per_topic: config.max_retained_per_topic,
            bytes_per_topic: config.max_retained_bytes_per_topic,
            bytes: config.max_retained_bytes,
            bytes_per_project: config.max_retained_bytes_per_project,
        };
        let hub = Arc::new(Hub::new(backends.bus, metrics.clone(), limits));
        // The dispatcher outlives the drain (closing sessions still publish their presence
        // leaves); it stops when the bus closes or `dispatcher_stop` is cancelled.
        let dispatcher_stop = CancellationToken::new();
        let background = TaskTracker::new();
        hub.attach_sink();
        let shards = match config.dispatch_shards {
            0 => tokio::runtime::Handle::current().metrics().num_workers(),
            n => n,
        };
        hub.start_dispatch(backends.bus_deliveries, dispatcher_stop.clone(), shards, config.bus_queue, &background);
        let connections = Arc::new(Connections::default());
        let triggers = backends.webhooks.clone().map(|poster| {
            Triggers::new(&node, registry.clone(), backends.store.clone(), poster, config.triggers.clone())
        });
        let publisher = Publisher::new(
            node.clone(),
            registry.clone(),
            hub.clone(),
            backends.store.clone(),
            metrics.clone(),
            connections.clone(),
            backends.publish_observers,
        )
        .with_triggers(triggers.clone())
        .with_history(backends.history.clone())
        .with_idempotency(Some(crate::idempotency::IdempotencyGate::new(
            backends.idempotency,
            config.idempotency_window,
            config.idempotency_max_key_length,
        )))
        .with_max_message_size(config.max_message_size);
        let durable = Arc::new(Durable::new(
            node.clone(),
            backends.store.clone(),
            hub.bus().clone(),
            publisher.ids(),
            metrics.clone(),
            background.clone(),
            &config,
        ));
        let deferred_removals = Arc::new(DeferredRemovals::default());
        let members = Arc::new(
            Members::new(
                config.members.clone(),
                node.clone(),
                backends.store.clone(),
                hub.clone(),
                registry.clone(),
                backends.presence.clone(),
                backends.webhooks.clone(),
            )
            .with_shared_limits(backends.shared_limits),
        );
        let publisher = publisher.with_members(Some(members.clone()));
        let mut metrics_sources = backends.metrics_sources;
        metrics_sources.push(members.clone());
        let liveness = Liveness {
            node: node.clone(),
            presence: backends.presence.clone(),
            hub: hub.clone(),
            durable: durable.clone(),
            store: backends.store.clone(),
            restore_ttl: config.restore_ttl,
            deferred: deferred_removals.clone(),
            refresh: config.node_refresh,
            ttl: config.node_ttl,
            members: members.clone(),
        };
        let retention = skua_core::Retention {
            max_age_s: config.log_max_age.as_secs(),
            max_per_topic: config.log_max_per_topic,
            min_interval_s: config.log_prune_interval.as_secs(),
            batch: config.log_prune_batch,
        };
        let (prune_every, revalidate_every) = (config.log_prune_interval, config.revalidate_interval);
        let (restore_prune_every, prune_batch) = (config.restore_prune_interval, config.log_prune_batch);
        let outbound_budget = OutboundBudget::new(config.outbound_budget_bytes);
        let engine = Arc::new(Engine {
            config,
            node,
            registry: registry.clone(),
            presence: backends.presence,
            store: backends.store.clone(),
            hub: hub.clone(),
            metrics: metrics.clone(),
            tracker: TaskTracker::new(),
            shutdown: CancellationToken::new(),
            connections: connections.clone(),
            publisher,
            durable: durable.clone(),
            triggers: triggers.clone(),
            webhooks: backends.webhooks,
            members: members.clone(),
            history: backends.history,
            outbound_budget,
            deferred_removals,
            local_bus_outage: crate::readiness::LocalBusOutage::default(),
            metrics_sources,
            next_conn: AtomicU64::new(1),
            project_conns: Mutex::new(HashMap::new()),
        });
        background.spawn(crate::liveness::run(liveness, dispatcher_stop.clone()));
        let all = engine.connections.clone();
        background.spawn(crate::outbound::enforce_budget(
            engine.outbound_budget.clone(),
            move || all.all().into_iter().map(|(_, e)| e.handle).collect(),
            dispatcher_stop.clone(),
        ));
        background.spawn(members.run(dispatcher_stop.clone()));
        if let Some(t) = &triggers {
            t.run(&background, dispatcher_stop.clone(), engine.config.triggers.take_over_at_start);
        }
        let (control_tx, control_rx) = mpsc::channel(CONTROL_QUEUE);
        hub.set_control(control_tx);
        background.spawn(crate::durable::run_control(durable.clone(), control_rx));
        background.spawn(crate::durable::run_retention(
            backends.store,
            metrics,
            prune_every,
            retention,
            dispatcher_stop.clone(),
        ));
        background.spawn(crate::restore_prune::run(
            engine.store.clone(),
            restore_prune_every,
            prune_batch,
            dispatcher_stop.clone(),
        ));
        // A node restarted under the same id frees what its previous run's connections held.
        let d = durable.clone();
        let me = engine.node.clone();
        background.spawn(async move { d.release_node(&me).await });
        background.spawn(crate::revalidate::run(connections, registry, revalidate_every, dispatcher_stop.clone()));
        (engine, EngineTasks { tracker: background, stop: dispatcher_stop })
    }

    /// Whether each backend slot is reachable now, by slot name (`bus`, `presence`, `store`).
    pub fn backends_up(&self) -> [(&'static str, bool); 3] {
        [
            ("bus", self.hub.bus().is_available()),
            ("presence", self.presence.is_available()),
            ("store", self.store.is_available()),
        ]
    }

    /// Whether this node's bus link is down while a live peer's is up: the outage is the
    /// node's own, and it should leave its load balancer ([`crate::readiness`]).
    pub async fn bus_outage_is_local(&self) -> bool {
        self.local_bus_outage.check(&**self.hub.bus(), &self.presence, &self.node).await
    }

    /// The last answer of [`Self::bus_outage_is_local`] while the link is still down.
    pub fn bus_outage_was_local(&self) -> bool {
        self.local_bus_outage.last(&**self.hub.bus())
    }

    /// Further series for `/metrics` (the server's, the members'), in rendering order.
    pub fn metrics_sources(&self) -> &[Arc<dyn MetricsSource>] {
        &self.metrics_sources
    }

    /// Records `conn` as a local connection of `session`; returns the others (to close).
    pub fn register_session(&self, session: &SessionKey, conn: &Arc<ConnHandle>) -> Vec<Arc<ConnHandle>> {
        self.durable.register_session(session, conn)
    }

    /// Forgets `conn` as a connection of `session`.
    pub fn unregister_session(&self, session: &SessionKey, conn: ConnId) {
        self.durable.unregister_session(session, conn);
    }

    /// Adds an authenticated connection to the table until the returned guard drops.
    pub fn register_connection(&self, id: ConnId, entry: ConnEntry) -> Registration {
        self.connections.register(id, entry)
    }

    /// Installs a new registry: swaps the snapshot, closes what it no longer allows, and has
    /// every session re-check its subscriptions (N15).
    pub fn install_registry(&self, registry: Registry) {
        let old = self.registry.load();
        self.registry.store(registry);
        let new = self.registry.load();
        self.connections.sweep(&new);
        self.connections.notify(old.delta(&new));
        // Deleted rooms (apps, projects) give their retained bytes back (issue 33).
        let released = self.hub.release_retained(|room| {
            crate::triggers::payload::app_of(&new, room).is_some_and(|a| a.rooms.contains_key(room.slug()))
        });
        if released > 0 {
            tracing::debug!(topics = released, "Released the retained messages of deleted rooms.");
        }
    }

    /// A fresh connection id, unique on this node across every door.
    pub fn next_conn_id(&self) -> ConnId {
        ConnId(self.next_conn.fetch_add(1, Ordering::Relaxed))
    }

    /// A fresh cluster-unique envelope id.
    pub fn next_envelope_id(&self) -> EnvelopeId {
        self.publisher.next_envelope_id()
    }

    /// Open authenticated connections per project.
    pub fn connections_by_project(&self) -> Vec<(ProjectId, u32)> {
        let m = self.project_conns.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut v: Vec<(ProjectId, u32)> = m.iter().map(|(p, n)| (p.clone(), *n)).collect();
        v.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
        v
    }

    /// Claims a connection of `project` against `max`; `None` when the project is full.
    pub fn claim_project_slot(self: &Arc<Self>, project: &ProjectId, max: Option<u32>) -> Option<ProjectSlot> {
        let mut m = self.project_conns.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = m.entry(project.clone()).or_insert(0);
        if max.is_some_and(|max| *n >= max) {
            return None;
        }
        *n += 1;
        Some(ProjectSlot { engine: self.clone(), project: project.clone() })
    }

    /// Queues a presence removal that failed, for the liveness loop to retry.
    pub fn defer_presence_removal(
        &self,
        room: skua_core::RoomKey,
        actor: skua_core::ActorId,
        conn: skua_core::ConnRef,
    ) {
        self.deferred_removals.push(room, actor, conn);
    }

    /// Open connections of `project` on this node.
    pub fn project_connections(&self, project: &ProjectId) -> u32 {
        self.project_conns.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(project).copied().unwrap_or(0)
    }
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("node", &self.node).field("config", &self.config).finish_non_exhaustive()
    }
}

/// One authenticated connection counted against its project; released on drop.
pub struct ProjectSlot {
    engine: Arc<Engine>,
    project: ProjectId,
}

impl Drop for ProjectSlot {
    fn drop(&mut self) {
        let mut m = self.engine.project_conns.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = m.get_mut(&self.project) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                m.remove(&self.project);
            }
        }
    }
}
