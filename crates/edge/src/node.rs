//! Starting and stopping one edge node: the only place that spawns or stops the node's tasks.
//!
//! [`EdgeNode::start`] builds the shared [`EdgeState`], then starts, each with the narrow
//! handles it uses: the hub's dispatcher, the node-to-node control handler, liveness,
//! revalidation, log retention, the release of what a previous run under the same node id
//! held; [`EdgeNode::open`] then starts the listeners, once the caller has installed every
//! route (issue 31: nothing answers before the node serves it). [`EdgeNode::drain`] and [`EdgeNode::stop`] take them down in order.

use std::sync::Arc;
use std::time::Duration;

use skua_core::{NodeId, SharedRegistry};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::EdgeConfig;
use crate::durable::Durable;
use crate::hub::Hub;
use crate::liveness::{DeferredRemovals, Liveness};
use crate::metrics::Metrics;
use crate::state::{Backends, EdgeState};

/// Control messages (takeovers, kicks) queued between the dispatcher and their handler; beyond
/// it they are dropped with a warning (a kick is retried by the next release, a takeover by the
/// older connection's next reconnect).
const CONTROL_QUEUE: usize = 1024;

/// How long the bus gets to send what it still buffers once connections have drained.
const BUS_FLUSH: Duration = Duration::from_secs(2);

/// How long the node-level tasks get to stop.
const BACKGROUND_STOP: Duration = Duration::from_secs(1);

/// The sockets an edge node serves.
pub struct Listeners {
    /// Client connections (WebSocket upgrades, `/healthz`, `/readyz`, `/metrics` unless below).
    pub client: TcpListener,
    /// TLS for the client listener (`wss://`), when configured.
    pub tls: Option<TlsAcceptor>,
    /// A separate `/metrics` listener (`metrics_listen`), when configured.
    pub metrics: Option<TcpListener>,
}

impl std::fmt::Debug for Listeners {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listeners")
            .field("client", &self.client)
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

/// A running edge node: its shared state and every task it started.
pub struct EdgeNode {
    state: Arc<EdgeState>,
    server: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    /// The listeners until [`Self::open`] starts accepting on them.
    pending: Option<Listeners>,
    /// Node-level tasks (dispatcher, control, liveness, revalidation, retention, releases).
    background: TaskTracker,
    /// Cancelled once connections have drained: stops the node-level tasks.
    dispatcher_stop: CancellationToken,
}

impl std::fmt::Debug for EdgeNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EdgeNode").field("node", &self.state.node).finish_non_exhaustive()
    }
}

impl EdgeNode {
    /// Builds the node's state over `backends` and starts its tasks; the listeners stay bound
    /// but accept nothing until [`Self::open`], so that the routes installed on the state after
    /// this call ([`EdgeState::api`], [`EdgeState::admin`]) are in place before any request is
    /// answered (issue 31): a connection made meanwhile waits in the listen backlog.
    pub fn start(
        config: EdgeConfig,
        node: NodeId,
        registry: Arc<SharedRegistry>,
        backends: Backends,
        listeners: Listeners,
    ) -> Self {
        let metrics = Arc::new(Metrics::default());
        let backends = crate::timed::wrap(backends, &metrics);
        let limits = crate::retained::RetainedLimits {
            keys_per_topic: config.max_retained_per_topic,
            bytes_per_topic: config.max_retained_bytes_per_topic,
            bytes: config.max_retained_bytes,
            bytes_per_project: config.max_retained_bytes_per_project,
        };
        let hub = Arc::new(Hub::new(backends.bus, metrics.clone(), limits));
        let auth_throttle = crate::auth::AuthThrottle::new(config.auth_backoff_after, config.auth_backoff_max);
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
        let connections = Arc::new(crate::revalidate::Connections::default());
        let triggers = backends.trigger_hooks.map(|hooks| {
            crate::triggers::Triggers::new(
                &node,
                registry.clone(),
                backends.store.clone(),
                hooks,
                config.triggers.clone(),
            )
        });
        let publisher = crate::publish::Publisher::new(
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
            crate::members::Members::new(
                config.members.clone(),
                node.clone(),
                backends.store.clone(),
                hub.clone(),
                registry.clone(),
                backends.presence.clone(),
                backends.wake_poster,
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
        let fd_budget = crate::fds::budget(crate::fds::soft_limit(), config.fd_reserve);
        if let Some(budget) = fd_budget.filter(|&b| b < config.max_connections) {
            tracing::warn!(
                fd_budget = budget,
                max_connections = config.max_connections,
                fd_reserve = config.fd_reserve,
                "The open-file limit leaves room for fewer sockets than max_connections: upgrades beyond it get 503 (fd_limit)."
            );
        }
        let outbound_budget = crate::outbound::OutboundBudget::new(config.outbound_budget_bytes);
        let state = Arc::new(EdgeState {
            conn_slots: Arc::new(Semaphore::new(config.max_connections)),
            fd_budget,
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
            deferred_removals,
            triggers: triggers.clone(),
            auth_throttle,
            metrics_sources,
            hydrator: backends.hydrator,
            members: members.clone(),
            history: backends.history,
            api: std::sync::OnceLock::new(),
            admin: std::sync::OnceLock::new(),
            draining: std::sync::atomic::AtomicBool::new(false),
            drain_started: std::sync::OnceLock::new(),
            outbound_budget,
            next_conn: std::sync::atomic::AtomicU64::new(1),
            project_conns: std::sync::Mutex::new(std::collections::HashMap::new()),
        });
        background.spawn(crate::liveness::run(liveness, dispatcher_stop.clone()));
        let all = state.connections.clone();
        background.spawn(crate::outbound::enforce_budget(
            state.outbound_budget.clone(),
            move || all.all().into_iter().map(|(_, e)| e.handle).collect(),
            dispatcher_stop.clone(),
        ));
        background.spawn(members.run(dispatcher_stop.clone()));
        if let Some(t) = &triggers {
            t.run(&background, dispatcher_stop.clone(), state.config.triggers.take_over_at_start);
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
            state.store.clone(),
            restore_prune_every,
            prune_batch,
            dispatcher_stop.clone(),
        ));
        // A node restarted under the same id frees what its previous run's connections held.
        let d = durable.clone();
        let me = state.node.clone();
        background.spawn(async move { d.release_node(&me).await });
        background.spawn(crate::revalidate::run(connections, registry, revalidate_every, dispatcher_stop.clone()));
        Self { state, server: None, pending: Some(listeners), background, dispatcher_stop }
    }

    /// Starts accepting on the listeners given to [`Self::start`]: from now on `/readyz`,
    /// `/ws` and every installed route answer. Later calls do nothing.
    pub fn open(&mut self) {
        let Some(listeners) = self.pending.take() else { return };
        let state = &self.state;
        if let Some(l) = listeners.metrics {
            // Scraped through the drain: it stops with the node-level tasks (Self::stop).
            let router = crate::ws::metrics_router(state.clone());
            let serve = crate::front::serve_metrics(
                l,
                state.clone(),
                router,
                self.dispatcher_stop.clone(),
                self.background.clone(),
            );
            self.background.spawn(async move {
                if let Err(e) = serve.await {
                    tracing::error!(error = %e, "Metrics listener stopped.");
                }
            });
        }
        self.server = Some(tokio::spawn(serve(listeners.client, state.clone(), listeners.tls)));
    }

    /// The node's shared state.
    pub fn state(&self) -> &Arc<EdgeState> {
        &self.state
    }

    /// Drains: readiness fails and new upgrades are refused, for the drain delay while open
    /// sockets carry on; then every socket closes 1012 after its presence is released (the
    /// authenticated ones spread evenly over `drain_spread`), and the node waits up to `grace`
    /// (counted from the first close) for every connection task; then the bus sends what it still
    /// buffers (acknowledged publishes, the sessions' presence leaves). Node-level tasks keep
    /// running until [`Self::stop`]. Returns whether the connections finished within `grace`.
    pub async fn drain(&mut self, grace: Duration) -> bool {
        let st = &self.state;
        st.mark_draining();
        if !st.config.drain_delay.is_zero() {
            tracing::info!(delay = ?st.config.drain_delay, "Draining: readiness fails; sockets close after the delay.");
            tokio::time::sleep(st.config.drain_delay).await;
        }
        // The grace counts from the first close, the spread included.
        let deadline = tokio::time::Instant::now() + grace;
        spread_closes(st, st.config.drain_spread).await;
        st.begin_drain();
        if let Some(server) = self.server.take() {
            let _ = tokio::time::timeout_at(deadline, server).await;
        }
        st.tracker.close();
        // Connection tasks first; the dispatcher keeps running so their leaves still go out.
        let drained = tokio::time::timeout_at(deadline, st.tracker.wait()).await.is_ok();
        st.hub.bus().close(BUS_FLUSH).await;
        drained
    }

    /// Stops the node-level tasks (dispatcher, control, liveness, revalidation, retention),
    /// waiting a moment for them.
    pub async fn stop(self) {
        self.dispatcher_stop.cancel();
        self.background.close();
        let _ = tokio::time::timeout(BACKGROUND_STOP, self.background.wait()).await;
    }

    /// [`Self::drain`] then [`Self::stop`]; returns whether the connections drained in `grace`.
    pub async fn shutdown(mut self, grace: Duration) -> bool {
        let drained = self.drain(grace).await;
        self.stop().await;
        drained
    }
}

/// Closes the authenticated connections 1012 one after another, evenly over `spread`
/// (lame-duck style), so that their clients reconnect to the other nodes gradually rather than
/// in one burst. Connections opened meanwhile (none: upgrades are refused while draining) and
/// those not yet authenticated close with the rest when the drain begins.
async fn spread_closes(st: &EdgeState, spread: Duration) {
    if spread.is_zero() {
        return;
    }
    let conns = st.connections.all();
    let n = u32::try_from(conns.len()).unwrap_or(u32::MAX);
    if n == 0 {
        return;
    }
    tracing::info!(connections = n, ?spread, "Draining: closing connections 1012 spread over the window.");
    let start = tokio::time::Instant::now();
    for (i, (_, entry)) in (0..n).zip(conns) {
        // Past instants return at once: many closes per timer tick on a busy node.
        tokio::time::sleep_until(start + spread / n * i).await;
        entry.handle.request_close(crate::outbound::CloseRequest::SERVER_RESTART);
    }
}

/// Serves the edge on `listener` until the state's shutdown token is cancelled: WebSocket
/// upgrades at `/ws`, `/healthz`, `/readyz` and (unless it has its own listener) `/metrics`.
/// With `tls`, every socket completes a TLS handshake first (`wss://`). Connection tasks are
/// tracked by the state's tracker, which the caller waits for.
///
/// # Errors
/// None today; the result is kept for listener failures.
pub async fn serve(listener: TcpListener, state: Arc<EdgeState>, tls: Option<TlsAcceptor>) -> std::io::Result<()> {
    crate::front::serve(listener, state.clone(), crate::ws::router(state), tls).await
}

/// Serves `/metrics` alone on `listener` (`metrics_listen`), until the state's shutdown token
/// is cancelled (a running [`EdgeNode`] keeps its own metrics listener until it stops).
///
/// # Errors
/// None today; the result is kept for listener failures.
pub async fn serve_metrics(listener: TcpListener, state: Arc<EdgeState>) -> std::io::Result<()> {
    let (stop, tasks) = (state.shutdown.clone(), state.tracker.clone());
    crate::front::serve_metrics(listener, state.clone(), crate::ws::metrics_router(state), stop, tasks).await
}
