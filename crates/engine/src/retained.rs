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
//! Entries are forgotten by replacement (a replacement may always shrink a topic) and when
//! their room, app or project is deleted ([`RetainedLedger::release_gone`], called when the
//! node installs a registry): the deleted room's messages can no longer be read through this
//! node, so its bytes go back to the pool, and the bus is told to drop them
//! ([`skua_core::Bus::forget_retained`]: the in-process bus does; an MQTT broker keeps them
//! within its own limits). Each project may take at most
//! `max_retained_bytes_per_project` of the node's pool (issue 33), so one tenant cannot fill it
//! for all.

use std::collections::HashMap;
use std::sync::Mutex;

use skua_core::{ProjectId, Publication, RoomKey, TopicAddress};

/// What each kept retained publication is charged besides its data and filter key: the map
/// entries and the envelope around it.
const ENTRY_OVERHEAD: usize = 128;

/// Which retained cap a retained publish would break (the publish refusal's, in core).
pub use skua_core::refusal::RetainedRefusal as Refusal;

/// The caps, from the edge configuration.
#[derive(Debug, Clone, Copy)]
pub struct RetainedLimits {
    /// Filter keys per topic (`max_retained_per_topic`).
    pub keys_per_topic: usize,
    /// Bytes per topic (`max_retained_bytes_per_topic`).
    pub bytes_per_topic: usize,
    /// Bytes over all topics (`max_retained_bytes`).
    pub bytes: usize,
    /// Bytes over all topics of one project (`max_retained_bytes_per_project`).
    pub bytes_per_project: usize,
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
    projects: HashMap<ProjectId, usize>,
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
        let project = &topic.room.project;
        let project_bytes = l.projects.get(project).copied().unwrap_or(0);
        if project_bytes - released + cost > self.limits.bytes_per_project {
            return Err(Refusal::ProjectBytes);
        }
        l.bytes = l.bytes - released + cost;
        l.projects.insert(project.clone(), project_bytes - released + cost);
        let t = l.topics.entry(topic.clone()).or_default();
        t.bytes = t.bytes - released + cost;
        t.keys.insert(filter.clone(), cost);
        Ok(())
    }

    /// Bytes charged for the retained publications recorded now.
    pub fn bytes(&self) -> usize {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner).bytes
    }

    /// Bytes charged for `project`'s retained publications.
    pub fn project_bytes(&self, project: &ProjectId) -> usize {
        let l = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        l.projects.get(project).copied().unwrap_or(0)
    }

    /// Forgets every topic whose room `exists` says is gone (deleted with its app or project):
    /// their bytes go back to the node's and their project's pools. Returns the topics
    /// forgotten.
    pub fn release_gone(&self, exists: impl Fn(&RoomKey) -> bool) -> Vec<TopicAddress> {
        let mut l = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let gone: Vec<TopicAddress> = l.topics.keys().filter(|t| !exists(&t.room)).cloned().collect();
        for topic in &gone {
            let Some(t) = l.topics.remove(topic) else { continue };
            l.bytes = l.bytes.saturating_sub(t.bytes);
            let project = &topic.room.project;
            if let Some(n) = l.projects.get_mut(project) {
                *n = n.saturating_sub(t.bytes);
                if *n == 0 {
                    l.projects.remove(project);
                }
            }
        }
        gone
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use skua_core::{ActorId, AppId, ConnId, EnvelopeId, NodeId, ProjectId, RoomKey};

    use super::*;

    fn publication(topic: &str, filter: Option<&str>, len: usize) -> Publication {
        publication_in("p", "r", topic, filter, len)
    }

    fn publication_in(project: &str, room: &str, topic: &str, filter: Option<&str>, len: usize) -> Publication {
        Publication {
            history: None,
            id: EnvelopeId(1),
            topic: TopicAddress {
                room: RoomKey {
                    project: ProjectId::parse(project).unwrap(),
                    app: AppId::parse("a").unwrap(),
                    room: Arc::from(room),
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
        let l = RetainedLedger::new(RetainedLimits {
            keys_per_topic: 2,
            bytes_per_topic: 1100,
            bytes: 1600,
            bytes_per_project: 1600,
        });
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

    #[test]
    fn a_project_is_held_to_its_share_and_deleted_rooms_give_their_bytes_back() {
        let l = RetainedLedger::new(RetainedLimits {
            keys_per_topic: 10,
            bytes_per_topic: 10_000,
            bytes: 3000,
            bytes_per_project: 2000,
        });
        let big = |project: &str, room: &str, key: &str| publication_in(project, room, "t", Some(key), 872);
        // 872 bytes of data, a 1-byte filter key and the entry overhead: 1001 bytes each.
        assert_eq!(l.admit_publication(&big("b", "r1", "1")), Ok(()));
        assert_eq!(l.admit_publication(&big("b", "r2", "2")), Err(Refusal::ProjectBytes), "b's share is 2000");
        assert_eq!(l.admit_publication(&publication_in("b", "r2", "t", Some("2"), 800)), Ok(()));
        assert_eq!(l.admit_publication(&big("a", "r1", "1")), Ok(()));
        assert_eq!(l.admit_publication(&big("c", "r1", "1")), Err(Refusal::NodeBytes));
        let b = ProjectId::parse("b").unwrap();
        assert_eq!(l.project_bytes(&b), 1001 + 929);
        // b deletes r1: its bytes come back, to the node and to b.
        let gone = l.release_gone(|room| !(room.project == b && &*room.room == "r1"));
        assert_eq!(gone.len(), 1);
        assert_eq!((l.project_bytes(&b), l.bytes()), (929, 929 + 1001));
        assert_eq!(l.admit_publication(&big("c", "r1", "1")), Ok(()));
        // Everything of b goes with its project.
        l.release_gone(|room| room.project != b);
        assert_eq!((l.project_bytes(&b), l.bytes()), (0, 2002));
    }
}
