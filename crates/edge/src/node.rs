//! Starting and stopping one edge node: the only place that spawns or stops the node's tasks.
//!
//! [`EdgeNode::start`] starts the node's [`Engine`] (its node-level tasks: the hub's dispatcher,
//! the node-to-node control handler, liveness, revalidation, log retention, the release of what
//! a previous run under the same node id held) and builds the door's [`EdgeState`] over it;
//! [`EdgeNode::open`] then builds the router with the other doors' routes ([`ApiRoutes`]) and
//! starts the listeners (issue 31: nothing answers before the node serves every route). [`EdgeNode::drain`] and [`EdgeNode::stop`] take them down in order.

use std::sync::Arc;
use std::time::Duration;

use skua_core::{NodeId, SharedRegistry};
use skua_engine::{Engine, EngineTasks};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::config::EdgeConfig;
use crate::state::{Backends, EdgeState};
use crate::ws::ApiRoutes;

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
    /// The engine's node-level tasks (dispatcher, control, liveness, revalidation, retention,
    /// releases), stopped once connections have drained; the metrics listener runs among them.
    tasks: EngineTasks,
}

impl std::fmt::Debug for EdgeNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EdgeNode").field("node", &self.state.node).finish_non_exhaustive()
    }
}

impl EdgeNode {
    /// Builds the node's state over `backends` and starts its tasks; the listeners stay bound
    /// but accept nothing until [`Self::open`], so that the routes built over the engine after
    /// this call (the REST API, the dashboard) are in place before any request is answered
    /// (issue 31): a connection made meanwhile waits in the listen backlog.
    pub fn start(
        config: EdgeConfig,
        node: NodeId,
        registry: Arc<SharedRegistry>,
        backends: Backends,
        listeners: Listeners,
    ) -> Self {
        let (engine, tasks) = Engine::start(config, node, registry, backends);
        let config = &engine.config;
        let fd_budget = crate::fds::budget(crate::fds::soft_limit(), config.fd_reserve);
        if let Some(budget) = fd_budget.filter(|&b| b < config.max_connections) {
            tracing::warn!(
                fd_budget = budget,
                max_connections = config.max_connections,
                fd_reserve = config.fd_reserve,
                "The open-file limit leaves room for fewer sockets than max_connections: upgrades beyond it get 503 (fd_limit)."
            );
        }
        let state = Arc::new(EdgeState::new(engine, fd_budget));
        Self { state, server: None, pending: Some(listeners), tasks }
    }

    /// Starts accepting on the listeners given to [`Self::start`], serving `routes` besides
    /// the edge's own: from now on `/readyz`, `/ws`, `/v1` and `/admin` answer. Later calls do
    /// nothing.
    pub fn open(&mut self, routes: ApiRoutes) {
        let Some(listeners) = self.pending.take() else { return };
        let state = &self.state;
        if let Some(l) = listeners.metrics {
            // Scraped through the drain: it stops with the node-level tasks (Self::stop).
            let router = crate::ws::metrics_router(state.clone());
            let serve = crate::front::serve_metrics(
                l,
                state.clone(),
                router,
                self.tasks.stop_token().clone(),
                self.tasks.tracker().clone(),
            );
            self.tasks.tracker().spawn(async move {
                if let Err(e) = serve.await {
                    tracing::error!(error = %e, "Metrics listener stopped.");
                }
            });
        }
        let router = crate::ws::router(state.clone(), routes);
        self.server = Some(tokio::spawn(crate::front::serve(listeners.client, state.clone(), router, listeners.tls)));
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
        spread_closes(st, grace).await;
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
        self.tasks.stop(BACKGROUND_STOP).await;
    }

    /// [`Self::drain`] then [`Self::stop`]; returns whether the connections drained in `grace`.
    pub async fn shutdown(mut self, grace: Duration) -> bool {
        let drained = self.drain(grace).await;
        self.stop().await;
        drained
    }
}

/// Closes the authenticated connections 1012 one after another, evenly over `drain_spread`
/// (lame-duck style), so that their clients reconnect to the other nodes gradually rather than
/// in one burst; with `drain_rate`, at most that many a second (the window stretched to fit,
/// up to `grace` less the close timeout). Connections opened meanwhile (none: upgrades are
/// refused while draining) and those not yet authenticated close with the rest when the drain
/// begins.
async fn spread_closes(st: &EdgeState, grace: Duration) {
    let (spread, rate) = (st.config.drain_spread, st.config.drain_rate);
    if spread.is_zero() && rate == 0 {
        return;
    }
    let conns = st.connections.all();
    let n = u32::try_from(conns.len()).unwrap_or(u32::MAX);
    if n == 0 {
        return;
    }
    let window = drain_window(spread, rate, n, grace.saturating_sub(st.config.close_timeout));
    if window.is_zero() {
        return;
    }
    if rate > 0 && window < Duration::from_secs(u64::from(n)) / rate {
        tracing::warn!(
            connections = n,
            drain_rate = rate,
            ?window,
            "Draining: closing faster than drain_rate, or the closes would not fit in shutdown_grace."
        );
    }
    tracing::info!(connections = n, ?window, "Draining: closing connections 1012 spread over the window.");
    let start = tokio::time::Instant::now();
    for (i, (_, entry)) in (0..n).zip(conns) {
        // Past instants return at once: many closes per timer tick on a busy node.
        tokio::time::sleep_until(start + window / n * i).await;
        entry.handle.request_close(crate::outbound::CloseRequest::SERVER_RESTART);
    }
}

/// The window `n` closes are spread over: `spread`, stretched to `n / rate` seconds when `rate`
/// (closes per second, 0: no limit) asks for longer, the stretch never past `most`.
fn drain_window(spread: Duration, rate: u32, n: u32, most: Duration) -> Duration {
    let by_rate = if rate == 0 { Duration::ZERO } else { Duration::from_secs(u64::from(n)) / rate };
    spread.max(by_rate.min(most))
}

/// Serves the edge on `listener` until the state's shutdown token is cancelled: WebSocket
/// upgrades at `/ws`, `/healthz`, `/readyz` and (unless it has its own listener) `/metrics`;
/// no `/v1` or `/admin` (those come with [`EdgeNode::open`]).
/// With `tls`, every socket completes a TLS handshake first (`wss://`). Connection tasks are
/// tracked by the state's tracker, which the caller waits for.
///
/// # Errors
/// None today; the result is kept for listener failures.
pub async fn serve(listener: TcpListener, state: Arc<EdgeState>, tls: Option<TlsAcceptor>) -> std::io::Result<()> {
    crate::front::serve(listener, state.clone(), crate::ws::router(state, ApiRoutes::default()), tls).await
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drain_rate_stretches_the_spread_up_to_the_grace() {
        let s = Duration::from_secs;
        // No rate: the spread as configured.
        assert_eq!(drain_window(s(10), 0, 50_000, s(8)), s(10));
        // Few connections: the spread already keeps the rate.
        assert_eq!(drain_window(s(10), 1000, 5_000, s(28)), s(10));
        // Many: stretched to n / rate.
        assert_eq!(drain_window(s(10), 1000, 20_000, s(28)), s(20));
        assert_eq!(drain_window(Duration::ZERO, 2, 5, s(28)), Duration::from_millis(2500));
        // Never stretched past the grace less the close timeout.
        assert_eq!(drain_window(s(10), 1000, 50_000, s(28)), s(28));
    }
}
