//! Counters the edge keeps. Exported by the operations issue's `/metrics`; read by tests now.

use std::sync::atomic::AtomicU64;

/// Node-wide counters. Labels never carry topic, actor or connection ids.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Connections accepted (upgrades).
    pub connections_opened: AtomicU64,
    /// Connections closed.
    pub connections_closed: AtomicU64,
    /// Frames queued for clients.
    pub frames_out: AtomicU64,
    /// Frames received from clients.
    pub frames_in: AtomicU64,
    /// Publishes accepted.
    pub publishes_accepted: AtomicU64,
    /// Publishes refused (any error frame).
    pub publishes_refused: AtomicU64,
    /// Message frames delivered to local subscribers.
    pub deliveries: AtomicU64,
    /// Connections closed 4008 because their outbound queue overflowed.
    pub slow_consumer_closes: AtomicU64,
    /// Bus deliveries the hub could not route (no local subscription left).
    pub undeliverable: AtomicU64,
    /// Messages of logged topics written to the store.
    pub logged_appends: AtomicU64,
    /// Publishes or subscribes refused because the store failed.
    pub store_failures: AtomicU64,
    /// Acks that ended a pending message.
    pub acks: AtomicU64,
    /// Logged messages delivered again after their connection left without acking.
    pub redeliveries: AtomicU64,
    /// Group replays run (N26).
    pub replays: AtomicU64,
    /// Messages delivered by group replays.
    pub replayed_messages: AtomicU64,
    /// Messages announced by `replayStart` but not replayed (pruned meanwhile, or taken by
    /// another member).
    pub replay_shortfall: AtomicU64,
    /// Logged messages deleted by retention.
    pub log_pruned: AtomicU64,
}
