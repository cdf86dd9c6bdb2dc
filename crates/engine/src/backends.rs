//! What a node's engine is built from: the backend slots and the webhook seam.

use std::sync::Arc;

use skua_core::{Bus, BusDelivery, Presence, Store};
use tokio::sync::mpsc;

/// The backends a node runs on, chosen by the server crate.
pub struct Backends {
    /// This node's bus client.
    pub bus: Arc<dyn Bus>,
    /// Deliveries the bus sends to this node.
    pub bus_deliveries: mpsc::Receiver<BusDelivery>,
    /// Presence store.
    pub presence: Arc<dyn Presence>,
    /// Session store.
    pub store: Arc<dyn Store>,
    /// Told of every accepted publish, in this order ([`crate::publish`]).
    pub publish_observers: Vec<Arc<dyn crate::publish::PublishObserver>>,
    /// Posts every webhook request of the node: triggers (N44), hydration (N43) and wakes
    /// (N47); `None`: this node posts no webhooks (no triggers, no hydration frames, nobody is
    /// woken).
    pub webhooks: Option<Arc<dyn skua_core::webhook::Poster>>,
    /// Further series for `/metrics` (e.g. the webhook engine's), appended in this order.
    pub metrics_sources: Vec<Arc<dyn crate::metrics::MetricsSource>>,
    /// The cluster's counters of the wake limits (issue 33); `None`: each node counts alone.
    pub shared_limits: Option<Arc<dyn skua_core::limits::SharedLimits>>,
    /// Topic history (issue 19); `None`: no topic keeps history on this node.
    pub history: Option<Arc<dyn skua_core::history::History>>,
    /// Remembers publish idempotency keys (issue 19): in memory on one node, Redis in a
    /// cluster.
    pub idempotency: Arc<dyn skua_core::Idempotency>,
}
