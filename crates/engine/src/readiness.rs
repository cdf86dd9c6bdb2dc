//! Whether an outage of this node's bus link is its own (issue 32, item 11), for `/readyz`.
//!
//! The bus is shared by every node: failing readiness whenever the link is down would take the
//! whole fleet out of its load balancer during a broker outage. But a node whose own link is
//! down while its peers' links are up (its network was cut and is coming back, its MQTT client
//! is reconnecting) cannot serve what its peers can: every new `auth` would be refused
//! `broker_unavailable`. So while the link is down the node asks the presence backend how its
//! live peers' links were at their last refresh (each node says so with its liveness refresh):
//! when at least one peer's link is up, the outage is local and the node is not ready. When no
//! peer's is (a shared outage), or the presence backend cannot say (unreachable too, or no
//! peers), the node stays ready, as before. The answer is kept for [`RECHECK`], so probes cost
//! at most one presence query a second while the link is down, and none while it is up.

use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use skua_core::{Bus, NodeId, Presence};

use crate::clock::now_unix_s;

/// How long an answer is kept while the link stays down.
pub const RECHECK: Duration = Duration::from_secs(1);

/// How long a presence query may take before the node counts the outage as shared.
const ASK_TIMEOUT: Duration = Duration::from_secs(1);

/// The node's last answer to "is my bus outage my own".
#[derive(Debug, Default)]
pub struct LocalBusOutage {
    // std Mutex: read and written without an await inside.
    last: Mutex<Option<(Instant, bool)>>,
}

impl LocalBusOutage {
    /// Whether the bus link is down while a live peer's is up (asks the presence backend at
    /// most once per [`RECHECK`] while the link is down; never while it is up).
    pub async fn check(&self, bus: &dyn Bus, presence: &Arc<dyn Presence>, me: &NodeId) -> bool {
        if bus.is_available() {
            *self.lock() = None;
            return false;
        }
        if let Some((at, local)) = *self.lock()
            && at.elapsed() < RECHECK
        {
            return local;
        }
        let local = match tokio::time::timeout(ASK_TIMEOUT, presence.nodes(now_unix_s())).await {
            Ok(Ok(nodes)) => nodes.iter().any(|n| n.node != *me && n.alive && n.bus_up == Some(true)),
            Ok(Err(_)) | Err(_) => false,
        };
        *self.lock() = Some((Instant::now(), local));
        local
    }

    /// The last answer of [`Self::check`] while the link is still down (for the `skua_ready`
    /// gauge, which cannot wait for the backend); `false` once the link is up.
    pub fn last(&self, bus: &dyn Bus) -> bool {
        !bus.is_available() && self.lock().is_some_and(|(_, local)| local)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(Instant, bool)>> {
        self.last.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
