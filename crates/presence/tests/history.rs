//! The history backends (issue 19): the same behaviour checks against [`MemoryHistory`] and
//! against [`RedisHistory`] on the Redis at `SKUA_TEST_REDIS_URL` (each test under its own key
//! prefix, deleted at the end; a missing URL skips loudly and fails under `CI=true`), plus what
//! only one of them does (a restart, a flushed Redis, two nodes sharing offsets).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use skua_conformance::skip::skip;
use skua_core::history::{History, HistoryConfig, NewHistoryEntry, ReadFrom};
use skua_core::{ActorId, AppId, ProjectId, RoomKey, TopicAddress};
use skua_presence::RedisPresence;
use skua_presence::history::{HistoryLimits, MemoryHistory};

const URL_VAR: &str = "SKUA_TEST_REDIS_URL";
const NOW: u64 = 1_800_000_000_000;

fn topic(room: &str) -> TopicAddress {
    topic_of("p", room)
}

fn topic_of(project: &str, room: &str) -> TopicAddress {
    TopicAddress {
        room: RoomKey {
            project: ProjectId::parse(project).unwrap(),
            app: AppId::parse("a").unwrap(),
            room: Arc::from(room),
        },
        topic: Arc::from("feed"),
    }
}

async fn append(h: &dyn History, t: &TopicAddress, c: &HistoryConfig, ts: u64, n: u32) -> u64 {
    let publisher = ActorId::parse("bob").unwrap();
    let data = Bytes::from(n.to_be_bytes().to_vec());
    let entry = NewHistoryEntry { timestamp_ms: ts, publisher: &publisher, filter: None, msg_id: None, data: &data };
    h.append(t, c, entry).await.unwrap().pos.offset
}

fn offsets(r: &skua_core::history::HistoryRead) -> Vec<u64> {
    r.entries.iter().map(|e| e.offset).collect()
}

/// Offsets, order, size and age trimming, the read modes, and the fields of an entry.
async fn behaves(h: &dyn History) {
    let big = HistoryConfig { size: 100, ttl_ms: 60_000 };
    let t = topic("r1");
    for n in 1..=5 {
        assert_eq!(append(h, &t, &big, NOW, n).await, u64::from(n), "offsets count from 1");
    }
    let r = h.read(&t, &big, ReadFrom::After(2), 100, NOW).await.unwrap();
    assert_eq!(offsets(&r), [3, 4, 5]);
    assert_eq!((r.head, r.first), (5, 1));
    assert!(r.reaches_back_to(2, &r.epoch) && r.reaches_back_to(0, &r.epoch) && r.reaches_back_to(5, &r.epoch));
    assert!(!r.reaches_back_to(2, "another-epoch"));
    assert!(!r.reaches_back_to(9, &r.epoch), "an offset beyond the head is not ours");
    let latest = h.read(&t, &big, ReadFrom::Latest, 2, NOW).await.unwrap();
    assert_eq!(offsets(&latest), [4, 5], "the latest, oldest first");
    assert_eq!(offsets(&h.read(&t, &big, ReadFrom::After(0), 2, NOW).await.unwrap()), [1, 2], "limit");

    // Size: only the newest `size` offsets are kept.
    let small = HistoryConfig { size: 3, ttl_ms: 60_000 };
    let t2 = topic("r2");
    for n in 1..=5 {
        append(h, &t2, &small, NOW, n).await;
    }
    let r = h.read(&t2, &small, ReadFrom::After(0), 100, NOW).await.unwrap();
    assert_eq!(offsets(&r), [3, 4, 5]);
    assert_eq!(r.first, 3);
    assert!(!r.reaches_back_to(1, &r.epoch), "offset 2 is gone: recovering from 1 is incomplete");
    assert!(r.reaches_back_to(2, &r.epoch));

    // Age: entries older than the ttl are dropped on read.
    let short = HistoryConfig { size: 100, ttl_ms: 1_000 };
    let t3 = topic("r3");
    append(h, &t3, &short, NOW - 5_000, 1).await;
    append(h, &t3, &short, NOW - 500, 2).await;
    let r = h.read(&t3, &short, ReadFrom::After(0), 100, NOW).await.unwrap();
    assert_eq!(offsets(&r), [2]);
    assert!(!r.reaches_back_to(0, &r.epoch) && r.reaches_back_to(1, &r.epoch));
    let since = h.read(&t, &big, ReadFrom::Since(NOW), 100, NOW).await.unwrap();
    assert_eq!(offsets(&since), [1, 2, 3, 4, 5]);
    assert!(h.read(&t, &big, ReadFrom::Since(NOW + 1), 100, NOW).await.unwrap().entries.is_empty());

    // `Since` with a small limit: the first entries stamped at or after the time, found past
    // more entries than one scan batch, and only among the newest `size` offsets.
    let t5 = topic("r5");
    for n in 1..=150 {
        append(h, &t5, &big, NOW - 150 + u64::from(n), n).await;
    }
    let some = HistoryConfig { size: 200, ttl_ms: 60_000 };
    assert_eq!(offsets(&h.read(&t5, &some, ReadFrom::Since(NOW - 10), 1, NOW).await.unwrap()), [140]);
    assert_eq!(offsets(&h.read(&t5, &some, ReadFrom::Since(NOW - 10), 3, NOW).await.unwrap()), [140, 141, 142]);
    let smaller = HistoryConfig { size: 20, ttl_ms: 60_000 };
    assert_eq!(offsets(&h.read(&t5, &smaller, ReadFrom::Since(NOW - 150), 1, NOW).await.unwrap()), [131]);

    // Every field comes back as appended.
    let t4 = topic("r4");
    let publisher = ActorId::parse("alice").unwrap();
    let data = Bytes::from_static(b"\x81\xa1k\xa1v");
    let entry = NewHistoryEntry {
        timestamp_ms: NOW,
        publisher: &publisher,
        filter: Some("vip"),
        msg_id: Some("m-1"),
        data: &data,
    };
    let pos = h.append(&t4, &big, entry).await.unwrap().pos;
    let r = h.read(&t4, &big, ReadFrom::After(0), 10, NOW).await.unwrap();
    assert_eq!(r.epoch, pos.epoch, "reads name the epoch appends gave");
    let e = &r.entries[0];
    assert_eq!(
        (e.offset, e.timestamp_ms, e.publisher.as_str(), e.filter.as_deref(), e.msg_id.as_deref(), &e.data[..]),
        (1, NOW, "alice", Some("vip"), Some("m-1"), &data[..])
    );
    // Rooms do not share offsets or epochs.
    assert_ne!(h.read(&t, &big, ReadFrom::Latest, 1, NOW).await.unwrap().epoch, r.epoch);
}

/// Appends `len` bytes to `t`; whether they were kept.
async fn append_bytes(h: &dyn History, t: &TopicAddress, c: &HistoryConfig, len: usize) -> (u64, bool) {
    let publisher = ActorId::parse("bob").unwrap();
    let data = Bytes::from(vec![7u8; len]);
    let entry = NewHistoryEntry { timestamp_ms: NOW, publisher: &publisher, filter: None, msg_id: None, data: &data };
    let a = h.append(t, c, entry).await.unwrap();
    (a.pos.offset, a.kept)
}

/// The per-project quota (issue 33), built with 1000 bytes per project: one project filling
/// its quota keeps the other's history untouched, a message beyond it gets its offset but is
/// not kept (and a recovery across it is incomplete), trims and age drops give bytes back.
async fn project_quota(h: &dyn History) {
    let c = HistoryConfig { size: 100, ttl_ms: 60_000 };
    let (a1, a2, b) = (topic_of("pa", "r1"), topic_of("pa", "r2"), topic_of("pb", "r1"));
    assert_eq!(append_bytes(h, &b, &c, 100).await, (1, true));
    for n in 1..=4 {
        assert_eq!(append_bytes(h, &a1, &c, 200).await, (n, true));
    }
    assert_eq!(append_bytes(h, &a2, &c, 200).await, (1, true), "1000 bytes: exactly the quota");
    // Full: the next message of project pa is not kept, and its topic's older entries go.
    assert_eq!(append_bytes(h, &a1, &c, 1).await, (5, false));
    let r = h.read(&a1, &c, ReadFrom::After(0), 100, NOW).await.unwrap();
    assert_eq!((r.head, r.entries.len()), (5, 0));
    assert!(!r.reaches_back_to(3, &r.epoch), "a recovery across a message not kept is incomplete");
    // Project pb is not affected by pa's quota: its history keeps growing.
    for n in 2..=9 {
        assert_eq!(append_bytes(h, &b, &c, 100).await, (n, true), "another project's history is its own");
    }
    assert_eq!(offsets(&h.read(&b, &c, ReadFrom::After(0), 100, NOW).await.unwrap()).len(), 9);
    // What a1 held was given back: pa keeps 200 bytes (a2), so 800 more fit.
    assert_eq!(append_bytes(h, &a1, &c, 800).await, (6, true));
    assert_eq!(append_bytes(h, &a2, &c, 1).await, (2, false));
    let r = h.read(&a1, &c, ReadFrom::After(5), 100, NOW).await.unwrap();
    assert!(r.reaches_back_to(5, &r.epoch) && offsets(&r) == [6]);
    // A size trim gives back what it drops: a size-1 topic replaces its message in place.
    let one = HistoryConfig { size: 1, ttl_ms: 60_000 };
    let (c1, c2) = (topic_of("pc", "r1"), topic_of("pc", "r2"));
    for n in 1..=20 {
        assert_eq!(append_bytes(h, &c1, &one, 400).await, (n, true), "trimmed bytes are given back");
    }
    assert_eq!(append_bytes(h, &c2, &c, 600).await, (1, true));
    // An age drop on read gives back too.
    let short = HistoryConfig { size: 100, ttl_ms: 1_000 };
    let publisher = ActorId::parse("bob").unwrap();
    let data = Bytes::from(vec![1u8; 600]);
    let old =
        NewHistoryEntry { timestamp_ms: NOW - 5_000, publisher: &publisher, filter: None, msg_id: None, data: &data };
    let d1 = topic_of("pd", "r1");
    assert!(h.append(&d1, &short, old).await.unwrap().kept);
    assert!(h.read(&d1, &short, ReadFrom::After(0), 100, NOW).await.unwrap().entries.is_empty());
    assert_eq!(append_bytes(h, &topic_of("pd", "r2"), &c, 1000).await, (1, true), "the aged entry's bytes came back");
}

#[tokio::test]
async fn memory_history_keeps_a_quota_per_project() {
    let h = MemoryHistory::new(HistoryLimits { max_project_bytes: 1000, ..HistoryLimits::default() });
    project_quota(&h).await;
    // a1's 800; a2's 200 went with the message it did not keep.
    assert_eq!((h.project_bytes("pa"), h.project_bytes("pb")), (800, 900));
}

#[tokio::test]
async fn redis_history_keeps_a_quota_per_project_for_the_whole_cluster() {
    let Some(p) = Prefix::from_env() else { return };
    project_quota(&p.open().await.with_max_project_bytes(1000)).await;
    // Two nodes share one quota: what one kept counts for the other.
    let (x, y) = (p.open().await.with_max_project_bytes(300), p.open().await.with_max_project_bytes(300));
    let c = HistoryConfig { size: 100, ttl_ms: 60_000 };
    assert!(append_bytes(&x, &topic_of("pe", "r1"), &c, 200).await.1);
    assert!(!append_bytes(&y, &topic_of("pe", "r2"), &c, 200).await.1, "the quota is the cluster's");
    // A stream that expired (here: deleted, as Redis does) gives its bytes back.
    let client = redis::Client::open(p.url.as_str()).unwrap();
    let mut conn = client.get_connection_with_timeout(Duration::from_secs(1)).unwrap();
    let _: i64 = redis::cmd("DEL").arg(format!("{}:hist:pe/a/r1/feed:s", p.prefix)).query(&mut conn).unwrap();
    assert!(append_bytes(&y, &topic_of("pe", "r1"), &c, 250).await.1, "an expired stream is no longer charged");
}

#[tokio::test]
async fn memory_history_behaves() {
    behaves(&MemoryHistory::new(HistoryLimits::default())).await;
}

#[tokio::test]
async fn memory_history_is_bounded_and_a_restart_changes_the_epoch() {
    let c = HistoryConfig { size: 1_000_000, ttl_ms: 60_000 };
    let limits = HistoryLimits { max_size: 4, max_topics: 2, max_topic_bytes: 1024, ..HistoryLimits::default() };
    let h = MemoryHistory::new(limits);
    let t = topic("r1");
    for n in 1..=10 {
        append(&h, &t, &c, NOW, n).await;
    }
    let r = h.read(&t, &c, ReadFrom::After(0), 100, NOW).await.unwrap();
    assert_eq!(offsets(&r), [7, 8, 9, 10], "a configured size saturates at max_size");
    // Bytes: 4-byte payloads, 12 bytes per topic at most.
    let big = MemoryHistory::new(HistoryLimits {
        max_size: 1000,
        max_topics: 2,
        max_topic_bytes: 12,
        ..HistoryLimits::default()
    });
    for n in 1..=10 {
        append(&big, &t, &c, NOW, n).await;
    }
    assert_eq!(offsets(&big.read(&t, &c, ReadFrom::After(0), 100, NOW).await.unwrap()), [8, 9, 10]);
    // Topics: the least recently used goes, and comes back with a new epoch.
    let before = h.read(&t, &c, ReadFrom::Latest, 1, NOW).await.unwrap().epoch;
    append(&h, &topic("r2"), &c, NOW, 1).await;
    append(&h, &topic("r3"), &c, NOW, 1).await;
    assert_eq!(h.topics(), 2);
    let after = h.read(&t, &c, ReadFrom::Latest, 1, NOW).await.unwrap();
    assert_ne!(after.epoch, before, "an evicted history is a lost one");
    assert_eq!((after.head, after.entries.len()), (0, 0));
    // A restart (a new instance) is a new epoch.
    let restarted = MemoryHistory::new(limits);
    assert_ne!(restarted.read(&t, &c, ReadFrom::Latest, 1, NOW).await.unwrap().epoch, before);
}

/// A fresh key prefix on the Redis at `SKUA_TEST_REDIS_URL`, deleted on drop.
struct Prefix {
    url: String,
    prefix: String,
}

impl Prefix {
    fn from_env() -> Option<Self> {
        let Some(url) = std::env::var(URL_VAR).ok().filter(|u| !u.is_empty()) else {
            skip(&format!("{URL_VAR} not set"));
            return None;
        };
        Some(Self { url, prefix: format!("skua-test-{}", uuid::Uuid::new_v4().simple()) })
    }

    async fn open(&self) -> skua_presence::history::RedisHistory {
        let presence = RedisPresence::connect(&self.url, &self.prefix).await.expect("connecting to Redis");
        presence.history(&self.prefix)
    }

    fn keys(&self) -> Vec<Vec<u8>> {
        let client = redis::Client::open(self.url.as_str()).unwrap();
        let mut conn = client.get_connection_with_timeout(Duration::from_secs(1)).unwrap();
        redis::cmd("KEYS").arg(format!("{}:*", self.prefix)).query(&mut conn).unwrap()
    }

    fn del(&self, keys: &[Vec<u8>]) {
        let client = redis::Client::open(self.url.as_str()).unwrap();
        let mut conn = client.get_connection_with_timeout(Duration::from_secs(1)).unwrap();
        if !keys.is_empty() {
            let _: i64 = redis::cmd("DEL").arg(keys).query(&mut conn).unwrap();
        }
    }
}

impl Drop for Prefix {
    fn drop(&mut self) {
        if let Ok(client) = redis::Client::open(self.url.as_str())
            && let Ok(mut conn) = client.get_connection_with_timeout(Duration::from_secs(1))
            && let Ok(keys) = redis::cmd("KEYS").arg(format!("{}:*", self.prefix)).query::<Vec<Vec<u8>>>(&mut conn)
            && !keys.is_empty()
        {
            let _ = redis::cmd("DEL").arg(keys).query::<i64>(&mut conn);
        }
    }
}

#[tokio::test]
async fn redis_history_behaves() {
    let Some(p) = Prefix::from_env() else { return };
    behaves(&p.open().await).await;
}

#[tokio::test]
async fn redis_history_offsets_are_shared_by_nodes_and_a_flush_changes_the_epoch() {
    let Some(p) = Prefix::from_env() else { return };
    let (a, b) = (p.open().await, p.open().await);
    let c = HistoryConfig { size: 100, ttl_ms: 60_000 };
    let t = topic("r1");
    assert_eq!(append(&a, &t, &c, NOW, 1).await, 1);
    assert_eq!(append(&b, &t, &c, NOW, 2).await, 2, "one counter for every node");
    assert_eq!(append(&a, &t, &c, NOW, 3).await, 3);
    let ra = a.read(&t, &c, ReadFrom::After(0), 10, NOW).await.unwrap();
    let rb = b.read(&t, &c, ReadFrom::After(0), 10, NOW).await.unwrap();
    assert_eq!((offsets(&ra), &ra.epoch), (vec![1, 2, 3], &rb.epoch));
    // The stream and counter expire with the ttl; both exist now, with the project's quota
    // hash and expiry set.
    assert_eq!(p.keys().len(), 4);
    // Redis loses the keys (a flush, an eviction): a new epoch, counting from 1 again.
    p.del(&p.keys());
    let r = a.read(&t, &c, ReadFrom::After(3), 10, NOW).await.unwrap();
    assert_ne!(r.epoch, ra.epoch);
    assert!(!r.reaches_back_to(3, &ra.epoch));
    let pos = b
        .append(
            &t,
            &c,
            NewHistoryEntry {
                timestamp_ms: NOW,
                publisher: &ActorId::parse("bob").unwrap(),
                filter: None,
                msg_id: None,
                data: &Bytes::from_static(b"\xc0"),
            },
        )
        .await
        .unwrap()
        .pos;
    assert_eq!((pos.offset, &pos.epoch), (1, &r.epoch));
}
