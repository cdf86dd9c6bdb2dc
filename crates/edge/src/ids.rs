//! Cluster-unique envelope ids, shared by every envelope this node sends (publications from
//! the publish pipeline, node-to-node control messages).

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use skua_core::{EnvelopeId, NodeId};

/// Cluster-unique envelope ids: this node's hash in the high half, a counter in the low.
#[derive(Debug)]
pub struct EnvelopeIds {
    node_hash: u64,
    next: AtomicU64,
}

impl EnvelopeIds {
    /// The ids of `node`, counting from 1.
    pub fn new(node: &NodeId) -> Self {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        node.hash(&mut h);
        Self { node_hash: h.finish(), next: AtomicU64::new(1) }
    }

    /// A fresh cluster-unique envelope id.
    pub fn next(&self) -> EnvelopeId {
        EnvelopeId((u128::from(self.node_hash) << 64) | u128::from(self.next.fetch_add(1, Ordering::Relaxed)))
    }
}
