//! Applying control-plane changes to open connections (issue 5, N15, N28).
//!
//! The node keeps a table of its authenticated connections ([`Connections`]). When a new
//! registry is installed (`Engine::install_registry`) and on every revalidation tick
//! (`revalidate_interval`, default 10 min, a timer rather than heartbeats so idle clients are
//! checked too), the node:
//! - closes connections whose actor was deleted (4001 `token_not_found`), deactivated or
//!   kicked, or whose access token was rotated or deleted (4001 `token_revoked`), or whose
//!   project is gone (4001 `project_not_found`): no `disconnect` frame precedes these;
//! - closes the newest connections of a project above its `max_connections` (4002
//!   `connection_limit_reached`);
//! - bumps a watch that every session listens to, so each re-checks its subscriptions and
//!   lobbies against the new registry (`session/revalidate.rs`): revoked access ends a
//!   subscription with an error frame, a room created after connect is subscribable at once.
//!   Sessions re-check only what the change touched ([`RegistryDelta`]: rooms whose grants
//!   changed, apps whose topics changed, lobbies); the timer re-checks everything.
//!
//! It also counts accepted publishes per project for monthly quotas; the control plane's
//! propagator flushes the counts to the store and hands back cluster-wide totals.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use skua_core::{ActorId, ConnId, ProjectId, Registry, RegistryDelta, SharedRegistry};
use skua_protocol::codes::{close, reason};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::clock::now_unix_ms;
use crate::outbound::{CloseRequest, ConnHandle};

/// 4001 `token_not_found`: the actor was deleted.
pub const TOKEN_NOT_FOUND: CloseRequest =
    CloseRequest { code: close::REVALIDATION_FAILED, reason: reason::TOKEN_NOT_FOUND };
/// 4001 `scope_inactive`: the actor's access scope was deactivated.
pub const SCOPE_INACTIVE: CloseRequest =
    CloseRequest { code: close::REVALIDATION_FAILED, reason: reason::SCOPE_INACTIVE };
/// 4001 `token_revoked`: the actor was deactivated or disconnected, or its token replaced.
pub const TOKEN_REVOKED: CloseRequest =
    CloseRequest { code: close::REVALIDATION_FAILED, reason: reason::TOKEN_REVOKED };
/// 4001 `project_not_found`: the project was deleted.
pub const PROJECT_NOT_FOUND: CloseRequest =
    CloseRequest { code: close::REVALIDATION_FAILED, reason: reason::PROJECT_NOT_FOUND };
/// 4002 `connection_limit_reached`: the project is above its connection limit.
pub const CONNECTION_LIMIT: CloseRequest =
    CloseRequest { code: close::CONNECTION_LIMIT, reason: reason::CONNECTION_LIMIT_REACHED };

/// How a connection reached the node, as the connection lists show it (issue 37).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ConnProtocol {
    /// The NoLag protocol over WebSocket (`/ws`).
    #[default]
    Ws,
    /// MQTT on the device listener, plain or TLS (`mqtt_listen`, `mqtt_tls_listen`).
    Mqtt,
    /// MQTT over WebSocket (`/mqtt`).
    MqttWs,
}

impl ConnProtocol {
    /// Its name in the connection lists: `ws`, `mqtt`, `mqtt-ws`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ws => "ws",
            Self::Mqtt => "mqtt",
            Self::MqttWs => "mqtt-ws",
        }
    }
}

/// One authenticated connection of this node.
#[derive(Debug, Clone)]
pub struct ConnEntry {
    /// Its project.
    pub project: ProjectId,
    /// Its actor.
    pub actor: ActorId,
    /// `clientId` given at auth.
    pub client_id: Option<String>,
    /// How it reached the node.
    pub protocol: ConnProtocol,
    /// SHA-256 of the access token it authenticated with (`None` for client tokens).
    pub token_digest: Option<[u8; 32]>,
    /// When it authenticated, unix ms.
    pub connected_at_ms: u64,
    /// Its outbound side, to close it.
    pub handle: Arc<ConnHandle>,
    /// Topic subscriptions it holds (kept current by the session).
    pub subscriptions: Arc<std::sync::atomic::AtomicU32>,
}

/// Publishes of one project: the cluster total last read and this node's count since.
#[derive(Debug, Default, Clone)]
struct Usage {
    period: String,
    total: u64,
    pending: u64,
}

/// The node's connection table, change watch and publish counters.
#[derive(Debug)]
pub struct Connections {
    // std Mutex: map updates and scans without an await.
    conns: Mutex<HashMap<ConnId, ConnEntry>>,
    /// The generation of the latest change; sessions wait on it.
    changes: watch::Sender<u64>,
    // std Mutex: pushed per change, read by sessions without an await. The last
    // `MAX_DELTAS` changes; a session further behind re-checks everything.
    deltas: Mutex<std::collections::VecDeque<(u64, RegistryDelta)>>,
    // std Mutex: one short update per accepted publish.
    usage: Mutex<HashMap<ProjectId, Usage>>,
}

impl Default for Connections {
    fn default() -> Self {
        Self {
            conns: Mutex::new(HashMap::new()),
            changes: watch::channel(0).0,
            deltas: Mutex::new(std::collections::VecDeque::new()),
            usage: Mutex::new(HashMap::new()),
        }
    }
}

/// Changes remembered for sessions that have not caught up yet.
const MAX_DELTAS: usize = 64;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Removes its connection from the table when dropped (the session ends).
#[derive(Debug)]
pub struct Registration {
    connections: Arc<Connections>,
    conn: ConnId,
}

impl Registration {
    /// Records the access token the connection now uses (after `reauth`).
    pub fn set_token_digest(&self, digest: Option<[u8; 32]>) {
        if let Some(e) = lock(&self.connections.conns).get_mut(&self.conn) {
            e.token_digest = digest;
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        lock(&self.connections.conns).remove(&self.conn);
    }
}

impl Connections {
    /// A receiver that changes whenever connections should re-check themselves.
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Asks every session to re-check what `delta` touches.
    pub fn notify(&self, delta: RegistryDelta) {
        let mut deltas = lock(&self.deltas);
        let generation = deltas.back().map_or(0, |(g, _)| *g) + 1;
        deltas.push_back((generation, delta));
        if deltas.len() > MAX_DELTAS {
            deltas.pop_front();
        }
        // Under the lock, so generations are published in order.
        self.changes.send_replace(generation);
    }

    /// What changed after generation `seen` up to `now`, merged.
    pub fn delta_since(&self, seen: u64, now: u64) -> RegistryDelta {
        let deltas = lock(&self.deltas);
        if deltas.front().is_none_or(|(g, _)| *g > seen + 1) {
            return RegistryDelta::everything();
        }
        let mut out = RegistryDelta::default();
        for (_, d) in deltas.iter().filter(|(g, _)| *g > seen && *g <= now) {
            out.merge(d);
        }
        out
    }

    /// Authenticated connections of `project` (of `actor` only, when given).
    pub fn list(&self, project: &ProjectId, actor: Option<&ActorId>) -> Vec<(ConnId, ConnEntry)> {
        lock(&self.conns)
            .iter()
            .filter(|(_, e)| e.project == *project && actor.is_none_or(|a| e.actor == *a) && !e.handle.is_closing())
            .map(|(id, e)| (*id, e.clone()))
            .collect()
    }

    /// Every authenticated connection that is not closing.
    pub fn all(&self) -> Vec<(ConnId, ConnEntry)> {
        lock(&self.conns).iter().filter(|(_, e)| !e.handle.is_closing()).map(|(id, e)| (*id, e.clone())).collect()
    }

    /// Closes every connection of `actor` with 4001 `token_revoked`; returns how many.
    pub fn disconnect(&self, actor: &ActorId) -> u32 {
        let conns = lock(&self.conns);
        let mut n = 0;
        for e in conns.values().filter(|e| e.actor == *actor) {
            if e.handle.request_close(TOKEN_REVOKED) {
                n += 1;
            }
        }
        n
    }

    /// Counts one accepted publish of `project`.
    pub fn count_publish(&self, project: &ProjectId) {
        let mut u = lock(&self.usage);
        match u.get_mut(project) {
            Some(e) => e.pending += 1,
            None => {
                u.insert(project.clone(), Usage { pending: 1, ..Usage::default() });
            }
        }
    }

    /// Whether `project` has used up `quota` this period (cluster total plus local count).
    pub fn over_quota(&self, project: &ProjectId, quota: u64) -> bool {
        let period = skua_core::registry_store::month_of(crate::clock::now_unix_s());
        lock(&self.usage).get(project).is_some_and(|u| {
            let total = if u.period == period { u.total } else { 0 };
            total.saturating_add(u.pending) >= quota
        })
    }

    /// Takes the counts since the last call.
    pub fn take_usage(&self) -> Vec<(ProjectId, u64)> {
        let mut u = lock(&self.usage);
        u.iter_mut().filter(|(_, e)| e.pending > 0).map(|(p, e)| (p.clone(), std::mem::take(&mut e.pending))).collect()
    }

    /// Gives back counts that could not be flushed.
    pub fn return_usage(&self, counts: Vec<(ProjectId, u64)>) {
        let mut u = lock(&self.usage);
        for (p, n) in counts {
            u.entry(p).or_default().pending += n;
        }
    }

    /// Records the cluster total of `project` for `period`.
    pub fn set_usage(&self, project: &ProjectId, period: &str, total: u64) {
        let mut u = lock(&self.usage);
        let e = u.entry(project.clone()).or_default();
        e.period = period.to_owned();
        e.total = total;
    }

    /// Closes what `registry` no longer allows; see the module docs.
    pub fn sweep(&self, registry: &Registry) {
        let conns = lock(&self.conns);
        let mut live: HashMap<&ProjectId, Vec<(&ConnId, &ConnEntry)>> = HashMap::new();
        for (id, e) in conns.iter().filter(|(_, e)| !e.handle.is_closing()) {
            let verdict = if registry.project(&e.project).is_none() {
                Some(PROJECT_NOT_FOUND)
            } else {
                match registry.actor(e.actor.as_str()) {
                    None => Some(TOKEN_NOT_FOUND),
                    Some(a) if !a.active => Some(TOKEN_REVOKED),
                    Some(a) if !a.scope_active() => Some(SCOPE_INACTIVE),
                    Some(a) if a.disconnect_before_ms.is_some_and(|t| e.connected_at_ms < t) => Some(TOKEN_REVOKED),
                    Some(_) if e.token_digest.is_some_and(|d| !registry.has_token_digest(&d)) => Some(TOKEN_REVOKED),
                    Some(_) => None,
                }
            };
            match verdict {
                Some(req) => {
                    tracing::info!(conn = %id, actor = %e.actor, reason = req.reason, "Revalidation failed; closing.");
                    e.handle.request_close(req);
                }
                None => live.entry(&e.project).or_default().push((id, e)),
            }
        }
        for (project, mut list) in live {
            let Some(max) = registry.project(project).and_then(|p| p.limits.max_connections) else { continue };
            let max = max as usize;
            if list.len() <= max {
                continue;
            }
            // The newest go: the longest-standing connections keep working.
            list.sort_by_key(|(id, e)| (e.connected_at_ms, **id));
            for (id, e) in &list[max..] {
                tracing::info!(conn = %id, %project, "Project over its connection limit; closing.");
                e.handle.request_close(CONNECTION_LIMIT);
            }
        }
    }
}

impl Connections {
    /// Adds an authenticated connection to the table until the returned guard drops.
    pub fn register(self: &Arc<Self>, id: ConnId, mut entry: ConnEntry) -> Registration {
        entry.connected_at_ms = now_unix_ms();
        lock(&self.conns).insert(id, entry);
        Registration { connections: self.clone(), conn: id }
    }
}

/// Revalidates every connection against `registry` each `interval` until `stop` is cancelled.
pub async fn run(
    connections: Arc<Connections>,
    registry: Arc<SharedRegistry>,
    interval: std::time::Duration,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {
                connections.sweep(&registry.load());
                connections.notify(RegistryDelta::everything());
            }
        }
    }
}
