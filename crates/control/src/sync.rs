//! Propagation: how every node learns of registry changes within a second (N15).
//!
//! Each node runs one [`Propagator`]. Every `poll_interval` (default 250 ms) it reads the
//! registry's version from the store, a single-row read; when the version moved it loads the
//! registry, builds a fresh [`skua_core::Registry`] and hands it to the node
//! ([`NodeAdmin::install_registry`]), which swaps its `SharedRegistry` and lets every
//! connection re-check itself. The same loop flushes the node's publish counts to the store
//! (monthly quotas) and reads back the totals. This works the same on SQLite and Postgres and
//! across any number of nodes; a node whose store is unreachable keeps serving with the last
//! registry and retries each tick (docs/control-plane.md).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use skua_core::registry_store::{Change, ConnectionRecord, month_of};
use skua_core::{ProjectId, RegistrySnapshot, RegistryStore, StoreError};
use tokio_util::sync::CancellationToken;

use crate::node::NodeAdmin;

/// Keeps a node's registry in step with the store.
pub struct Propagator {
    store: Arc<dyn RegistryStore>,
    node: Arc<dyn NodeAdmin>,
    poll_interval: Duration,
    // std Mutex: only swaps an Arc, never held across an await.
    current: Mutex<Arc<RegistrySnapshot>>,
    // tokio Mutex: one reload at a time (the poll loop and writers after a conflict).
    reload: tokio::sync::Mutex<()>,
    /// Whether this node writes its connections to the store for cluster-wide listing.
    share_connections: bool,
    // tokio Mutex: only the poll loop writes; held across the store write. `None` = the next
    // write replaces all of this node's rows.
    shared: tokio::sync::Mutex<SharedConnections>,
    /// When the store's registry version was last read successfully (ms since `started`).
    synced_ms: std::sync::atomic::AtomicU64,
    started: std::time::Instant,
    /// Registry versions that went backwards (a restored store), each reloaded in full.
    resets: std::sync::atomic::AtomicU64,
}

/// What this node last wrote of its connections.
#[derive(Default)]
struct SharedConnections {
    written: Option<std::collections::HashMap<String, ConnectionRecord>>,
    last_write: Option<std::time::Instant>,
}

/// How often a node with unchanged connections still writes, to show it is alive.
const CONNECTIONS_HEARTBEAT: Duration = Duration::from_secs(2);

/// Connections of nodes that wrote nothing for this long are not listed (the node is gone).
pub const CONNECTIONS_STALE: Duration = Duration::from_secs(10);

impl std::fmt::Debug for Propagator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Propagator").field("version", &self.snapshot().version).finish_non_exhaustive()
    }
}

/// Why the first registry could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The store failed.
    #[error("loading the registry failed")]
    Store(#[from] StoreError),
    /// The stored registry is inconsistent.
    #[error("the stored registry is invalid: {0}")]
    Invalid(String),
}

impl Propagator {
    /// Loads the registry (it must load: a node does not start without one), installs it on
    /// `node`, and returns the propagator; [`Self::run`] then keeps it current. With
    /// `share_connections` (a store that several nodes share) the node also writes its
    /// connections to the store, so that `ListConnections` on any node sees every node's.
    ///
    /// # Errors
    /// [`StartError`] when the store fails or holds an invalid registry.
    pub async fn start(
        store: Arc<dyn RegistryStore>,
        node: Arc<dyn NodeAdmin>,
        poll_interval: Duration,
        share_connections: bool,
    ) -> Result<Arc<Self>, StartError> {
        let snapshot = store.load().await?;
        let registry = snapshot.data.build().map_err(|e| StartError::Invalid(e.0))?;
        node.install_registry(registry);
        Ok(Arc::new(Self {
            store,
            node,
            poll_interval,
            current: Mutex::new(Arc::new(snapshot)),
            reload: tokio::sync::Mutex::new(()),
            share_connections,
            shared: tokio::sync::Mutex::new(SharedConnections::default()),
            synced_ms: std::sync::atomic::AtomicU64::new(0),
            started: std::time::Instant::now(),
            resets: std::sync::atomic::AtomicU64::new(0),
        }))
    }

    /// The store this propagator reads.
    pub fn store(&self) -> &Arc<dyn RegistryStore> {
        &self.store
    }

    /// The node it feeds.
    pub fn node(&self) -> &Arc<dyn NodeAdmin> {
        &self.node
    }

    /// Whether every node's connections are in the store.
    pub fn shares_connections(&self) -> bool {
        self.share_connections
    }

    /// Writes what changed in this node's connections since the last write (everything after
    /// a failure or at start), or a heartbeat when nothing did for a while.
    async fn share_connections(&self) -> Result<(), StoreError> {
        let node = self.node.node_id();
        let current: std::collections::HashMap<String, ConnectionRecord> = self
            .node
            .all_connections()
            .into_iter()
            .map(|(project, c)| {
                let record = ConnectionRecord {
                    node: node.clone(),
                    conn: c.connection_id.clone(),
                    project: project.to_string(),
                    actor: c.actor.to_string(),
                    client_id: c.client_id.unwrap_or_default(),
                    connected_at_ms: c.connected_at_ms,
                    subscriptions: c.subscriptions,
                    protocol: c.protocol.to_owned(),
                };
                (c.connection_id, record)
            })
            .collect();
        let mut shared = self.shared.lock().await;
        let (full, upserts, removed): (bool, Vec<ConnectionRecord>, Vec<String>) = match &shared.written {
            None => (true, current.values().cloned().collect(), Vec::new()),
            Some(prev) => (
                false,
                current.values().filter(|c| prev.get(&c.conn) != Some(*c)).cloned().collect(),
                prev.keys().filter(|k| !current.contains_key(*k)).cloned().collect(),
            ),
        };
        let heartbeat_due = shared.last_write.is_none_or(|t| t.elapsed() >= CONNECTIONS_HEARTBEAT);
        if !full && upserts.is_empty() && removed.is_empty() && !heartbeat_due {
            return Ok(());
        }
        match self.store.write_connections(&node, now_ms(), full, &upserts, &removed).await {
            Ok(()) => {
                shared.written = Some(current);
                shared.last_write = Some(std::time::Instant::now());
                Ok(())
            }
            Err(e) => {
                shared.written = None;
                Err(e)
            }
        }
    }

    /// The last snapshot installed.
    pub fn snapshot(&self) -> Arc<RegistrySnapshot> {
        self.current.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Installs the result of a change set this node just applied at `version`, so the
    /// writer's own node serves it at once (other nodes see it at their next poll).
    pub fn applied(&self, base: &RegistrySnapshot, changes: &[Change], version: u64) {
        let mut data = base.data.clone();
        data.apply(changes);
        let snapshot = RegistrySnapshot { version, data };
        self.install(snapshot);
    }

    fn install(&self, snapshot: RegistrySnapshot) {
        {
            let current = self.current.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if current.version >= snapshot.version {
                return;
            }
        }
        self.install_any(snapshot);
    }

    /// Installs `snapshot` whatever its version (see [`Self::refresh`] for a version that
    /// went backwards).
    fn install_any(&self, snapshot: RegistrySnapshot) {
        match snapshot.data.build() {
            Ok(registry) => {
                let version = snapshot.version;
                *self.current.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(snapshot);
                self.node.install_registry(registry);
                tracing::debug!(version, "Registry installed.");
            }
            Err(e) => {
                // Kept serving the previous registry; the control plane validates every change,
                // so this means a store edited by hand.
                tracing::error!(version = snapshot.version, error = %e.0, "Stored registry is invalid; keeping the previous one.");
            }
        }
    }

    /// Reloads from the store if its version moved; returns whether a new registry was
    /// installed. A version below the one this node serves means the store was restored to an
    /// earlier point (backup, point-in-time recovery): the version is the store's, so the
    /// stored registry is loaded and installed as it is (logged, counted in
    /// [`Self::resets`]); otherwise every write through this node would conflict forever.
    ///
    /// # Errors
    /// [`StoreError`] when the store failed (the current registry stays).
    pub async fn refresh(&self) -> Result<bool, StoreError> {
        let _one = self.reload.lock().await;
        let version = self.store.version().await?;
        self.mark_synced();
        let current = self.snapshot().version;
        if version == current {
            return Ok(false);
        }
        let snapshot = self.store.load().await?;
        if snapshot.version < current {
            tracing::warn!(
                served = current,
                stored = snapshot.version,
                "The registry version went backwards (the store was restored?); installing the stored registry."
            );
            self.resets.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.install_any(snapshot);
            return Ok(true);
        }
        let moved = snapshot.version > current;
        self.install(snapshot);
        Ok(moved)
    }

    fn mark_synced(&self) {
        let ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX).max(1);
        self.synced_ms.store(ms, std::sync::atomic::Ordering::Relaxed);
    }

    /// How long since this node last read the store's registry version successfully (its
    /// registry is at most this stale, plus one poll); since start when it never has.
    pub fn lag(&self) -> Duration {
        let synced = Duration::from_millis(self.synced_ms.load(std::sync::atomic::Ordering::Relaxed));
        self.started.elapsed().saturating_sub(synced)
    }

    /// Times the store's registry version went backwards and the stored registry was
    /// installed over a newer one.
    pub fn resets(&self) -> u64 {
        self.resets.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Polls until `stop` is cancelled: registry changes, and publish counts for quotas.
    /// A failing store is logged once per outage and retried every tick.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let mut tick = tokio::time::interval(self.poll_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing = false;
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = tick.tick() => {}
            }
            let mut result = match self.refresh().await {
                Ok(_) => self.flush_usage().await,
                Err(e) => Err(e),
            };
            if result.is_ok() && self.share_connections {
                result = self.share_connections().await;
            }
            match result {
                Ok(()) if failing => {
                    failing = false;
                    tracing::info!("Registry store reachable again.");
                }
                Ok(()) => {}
                Err(e) if !failing => {
                    failing = true;
                    tracing::warn!(
                        error = &e as &dyn std::error::Error,
                        "Registry store unreachable; serving the last registry and retrying."
                    );
                }
                Err(_) => {}
            }
        }
        // Counts of the last moments still reach the store; this node's connections leave it.
        let _ = self.flush_usage().await;
        if self.share_connections
            && let Err(e) = self.store.forget_node(&self.node.node_id()).await
        {
            tracing::debug!(error = &e as &dyn std::error::Error, "Could not remove this node's connections.");
        }
    }

    /// Adds the node's publish counts to the store and reads back the totals of every project
    /// that has a quota.
    async fn flush_usage(&self) -> Result<(), StoreError> {
        let period = month_of(now_ms() / 1000);
        let counts = self.node.take_usage();
        let mut flushed = Vec::new();
        let mut failed = None;
        let mut iter = counts.into_iter();
        for (project, n) in iter.by_ref() {
            match self.store.add_usage(project.as_str(), &period, n).await {
                Ok(total) => {
                    self.node.set_usage(&project, &period, total);
                    flushed.push(project);
                }
                Err(e) => {
                    failed = Some((e, (project, n)));
                    break;
                }
            }
        }
        if let Some((e, first)) = failed {
            let mut back = vec![first];
            back.extend(iter);
            self.node.return_usage(back);
            return Err(e);
        }
        let registry = self.node.registry();
        for p in self.snapshot().data.projects.values().filter(|p| p.limits.monthly_message_quota.is_some()) {
            let Ok(id) = ProjectId::parse(&p.id) else { continue };
            if flushed.contains(&id) || registry.project(&id).is_none() {
                continue;
            }
            let total = self.store.usage(&p.id, &period).await?;
            self.node.set_usage(&id, &period, total);
        }
        Ok(())
    }
}

/// Unix milliseconds now.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
