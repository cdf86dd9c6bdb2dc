//! Cluster-unique envelope ids, shared by every envelope this node sends (publications from
//! the publish pipeline, node-to-node control messages).

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use skua_core::{EnvelopeId, NodeId};

/// Cluster-unique envelope ids: a hash of this node's id and of a random value drawn for this
/// run in the high half, a counter in the low. The run's part matters: a node restarted under
/// the same id counts from 1 again, and the other nodes' bus deduplication (the last
/// `dedupe_window` ids) would take its new envelopes for its earlier run's copies and drop them
/// (found by skua-chaos).
#[derive(Debug)]
pub struct EnvelopeIds {
    run_hash: u64,
    next: AtomicU64,
}

impl EnvelopeIds {
    /// The ids of `node` for this run, counting from 1.
    pub fn new(node: &NodeId) -> Self {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        node.hash(&mut h);
        uuid::Uuid::new_v4().as_u128().hash(&mut h);
        Self { run_hash: h.finish(), next: AtomicU64::new(1) }
    }

    /// A fresh cluster-unique envelope id.
    pub fn next(&self) -> EnvelopeId {
        EnvelopeId((u128::from(self.run_hash) << 64) | u128::from(self.next.fetch_add(1, Ordering::Relaxed)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_runs_of_one_node_id_never_share_envelope_ids() {
        let node = NodeId::parse("chaos-1").expect("node id");
        let (earlier, later) = (EnvelopeIds::new(&node), EnvelopeIds::new(&node));
        let first: std::collections::HashSet<EnvelopeId> = (0..1000).map(|_| earlier.next()).collect();
        assert!((0..1000).all(|_| !first.contains(&later.next())));
    }
}
