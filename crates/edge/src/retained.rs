//! What retained messages may cost a node (issue 12, defect 2): a ledger of the retained
//! publications this node has published or received, one entry per (topic, filter key), with a
//! cap on keys per topic, on bytes per topic and on bytes over all topics.
//!
//! The publishing edge asks the ledger before a retained publish goes to the bus, so a publish
//! beyond a cap is refused with `retained_limit_exceeded` and nothing is published. Every node
//! asks it again before keeping a received retained publication in its replay cache; one that
//! does not fit is delivered live but not kept, and the older one it supersedes is dropped.
//! On one node (the in-process bus) the ledger sees every retained publish, so the caps hold
//! exactly; in a cluster each node enforces them on what it publishes and what it keeps.
//!
//! Entries are never forgotten except by replacement, as the bus keeps retained messages
//! until they are replaced; a replacement may always shrink a topic.

use std::collections::HashMap;
use std::sync::Mutex;

use skua_core::{Publication, TopicAddress};

/// What each kept retained publication is charged besides its data and filter key: the map
/// entries and the envelope around it.
const ENTRY_OVERHEAD: usize = 128;

/// Why a retained publication was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The topic already has `max_retained_per_topic` filter keys.
    Keys,
    /// The topic's retained messages would exceed `max_retained_bytes_per_topic`.
    TopicBytes,
    /// This node's retained messages would exceed `max_retained_bytes`.
    NodeBytes,
}

impl Refusal {
    /// The metric label and the start of the client's hint.
    pub fn label(self) -> &'static str {
        match self {
            Self::Keys => "topic_keys",
            Self::TopicBytes => "topic_bytes",
            Self::NodeBytes => "node_bytes",
        }
    }

    /// The `hint` of the error frame.
    pub fn hint(self) -> &'static str {
        match self {
            Self::Keys => "the topic has max_retained_per_topic retained filter keys already",
            Self::TopicBytes => "the topic's retained messages would exceed max_retained_bytes_per_topic",
            Self::NodeBytes => "the node's retained messages would exceed max_retained_bytes",
        }
    }
}

/// The caps, from the edge configuration.
#[derive(Debug, Clone, Copy)]
pub struct RetainedLimits {
    /// Filter keys per topic (`max_retained_per_topic`).
    pub keys_per_topic: usize,
    /// Bytes per topic (`max_retained_bytes_per_topic`).
    pub bytes_per_topic: usize,
    /// Bytes over all topics (`max_retained_bytes`).
    pub bytes: usize,
}

#[derive(Debug, Default)]
struct TopicLedger {
    keys: HashMap<Option<String>, usize>,
    bytes: usize,
}

#[derive(Debug, Default)]
struct Ledger {
    topics: HashMap<TopicAddress, TopicLedger>,
    bytes: usize,
}

/// The node's retained-message accounting.
#[derive(Debug)]
pub struct RetainedLedger {
    limits: RetainedLimits,
    // std Mutex: a few map operations, never held across an await.
    inner: Mutex<Ledger>,
}

impl RetainedLedger {
    /// An empty ledger enforcing `limits`.
    pub fn new(limits: RetainedLimits) -> Self {
        Self { limits, inner: Mutex::new(Ledger::default()) }
    }

    /// Records `p` as its (topic, filter key)'s retained publication; see [`Self::admit`].
    ///
    /// # Errors
    /// As [`Self::admit`].
    pub fn admit_publication(&self, p: &Publication) -> Result<(), Refusal> {
        self.admit(&p.topic, &p.filter, p.data.len())
    }

    /// Records a retained publication of `data_len` bytes on (`topic`, `filter`) if every cap
    /// allows it, replacing the earlier one of that key. Recording the same one twice (as the
    /// publishing node does, at publish and on delivery) changes nothing.
    ///
    /// # Errors
    /// The first cap it would break; nothing is recorded.
    pub fn admit(&self, topic: &TopicAddress, filter: &Option<String>, data_len: usize) -> Result<(), Refusal> {
        let cost = data_len + filter.as_ref().map_or(0, String::len) + ENTRY_OVERHEAD;
        let mut l = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (old, keys, topic_bytes) = match l.topics.get(topic) {
            Some(t) => (t.keys.get(filter).copied(), t.keys.len(), t.bytes),
            None => (None, 0, 0),
        };
        if old.is_none() && keys >= self.limits.keys_per_topic {
            return Err(Refusal::Keys);
        }
        let released = old.unwrap_or(0);
        if topic_bytes - released + cost > self.limits.bytes_per_topic {
            return Err(Refusal::TopicBytes);
        }
        if l.bytes - released + cost > self.limits.bytes {
            return Err(Refusal::NodeBytes);
        }
        l.bytes = l.bytes - released + cost;
        let t = l.topics.entry(topic.clone()).or_default();
        t.bytes = t.bytes - released + cost;
        t.keys.insert(filter.clone(), cost);
        Ok(())
    }

    /// Bytes charged for the retained publications recorded now.
    pub fn bytes(&self) -> usize {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner).bytes
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use skua_core::{ActorId, AppId, ConnId, EnvelopeId, NodeId, ProjectId, RoomKey};

    use super::*;

    fn publication(topic: &str, filter: Option<&str>, len: usize) -> Publication {
        Publication {
            history: None,
            id: EnvelopeId(1),
            topic: TopicAddress {
                room: RoomKey {
                    project: ProjectId::parse("p").unwrap(),
                    app: AppId::parse("a").unwrap(),
                    room: Arc::from("r"),
                },
                topic: Arc::from(topic),
            },
            filter: filter.map(str::to_owned),
            publisher: ActorId::parse("x").unwrap(),
            publisher_conn: ConnId(1),
            node: NodeId::parse("n").unwrap(),
            timestamp_ms: 0,
            msg_id: None,
            retain: true,
            qos: 1,
            data: bytes::Bytes::from(vec![0; len]),
        }
    }

    #[test]
    fn caps_on_keys_topic_bytes_and_node_bytes_and_replacements_always_fit() {
        let l = RetainedLedger::new(RetainedLimits { keys_per_topic: 2, bytes_per_topic: 1100, bytes: 1600 });
        assert_eq!(l.admit_publication(&publication("t", None, 500)), Ok(()));
        assert_eq!(l.admit_publication(&publication("t", Some("k"), 500)), Err(Refusal::TopicBytes));
        assert_eq!(l.admit_publication(&publication("t", Some("k"), 100)), Ok(()));
        assert_eq!(l.admit_publication(&publication("t", Some("j"), 1)), Err(Refusal::Keys));
        // Replacing a key frees what it held first.
        assert_eq!(l.admit_publication(&publication("t", None, 700)), Ok(()));
        assert_eq!(l.admit_publication(&publication("u", None, 600)), Err(Refusal::NodeBytes));
        assert_eq!(l.admit_publication(&publication("u", None, 400)), Ok(()));
        assert_eq!(l.bytes(), 700 + 100 + 1 + 400 + 3 * ENTRY_OVERHEAD);
        // The same publication again changes nothing.
        assert_eq!(l.admit_publication(&publication("u", None, 400)), Ok(()));
        assert_eq!(l.bytes(), 700 + 100 + 1 + 400 + 3 * ENTRY_OVERHEAD);
    }
}
