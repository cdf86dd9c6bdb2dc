//! History backends (issue 19, docs/recovery.md): [`MemoryHistory`] for one node and
//! [`RedisHistory`] (Redis streams) for a cluster. They live here because the Redis one shares
//! the presence slot's Redis connection.
//!
//! Redis layout, per (room, topic) under the cluster's key prefix:
//! `<prefix>:hist:<project>/<app>/<room>/<topic>` is a hash `{e: epoch, o: last offset}`, and
//! `…:s` the stream of kept messages, entry id `<offset>-1`, fields `t` (unix ms), `p`
//! (publisher), `f` (filter key, empty for none), `m` (msgId, empty for none), `d` (data).
//! One script assigns the offset and appends (so every node sees the same offset for a message)
//! and trims the stream to the newest `size` offsets; reads drop entries older than the ttl.
//! The stream expires `ttl` after the last append; the hash a day (or 2 × ttl) after it. When
//! the hash is lost (expired, evicted, flushed) the next append or read makes a new epoch and
//! drops whatever the stream still held.
//!
//! Per-project quota (issue 33, `history_max_bytes_per_project`), per project under the prefix:
//! `<prefix>:histq:<project>` is a hash of the payload bytes each topic's stream holds (field:
//! the topic's hash key) plus their sum (field `*`), and `…:x` a sorted set of those topics
//! scored by when their stream expires (Redis's own clock, `TIME`). The scripts keep both in
//! step with every append, trim and age drop; an append first forgets up to 16 topics whose
//! stream has expired, so each write costs O(1) amortized. A message that would take the sum
//! past the quota gets its offset but is not kept, and its topic's stream goes with it (see
//! [`Appended::kept`]).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

use crate::conn::RedisConn;
use ::redis::{Script, Value};
use async_trait::async_trait;
use bytes::Bytes;
use skua_core::history::{
    Appended, History, HistoryConfig, HistoryEntry, HistoryError, HistoryPos, HistoryRead, NewHistoryEntry, ReadFrom,
    history_key,
};
use skua_core::{ActorId, TopicAddress};

/// Bounds of a node's in-memory history (config `[history]`, docs/recovery.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryLimits {
    /// Largest `size` a topic's history may use (larger configured sizes saturate).
    pub max_size: u32,
    /// Most (room, topic) histories kept in memory; the least recently used goes first.
    pub max_topics: usize,
    /// Most payload bytes one (room, topic) history keeps; the oldest entries go first.
    pub max_topic_bytes: usize,
    /// Most payload bytes the histories of one project keep together (issue 33); a message
    /// beyond it is not kept ([`Appended::kept`]). 0: no quota.
    pub max_project_bytes: usize,
}

impl Default for HistoryLimits {
    fn default() -> Self {
        Self {
            max_size: 10_000,
            max_topics: 10_000,
            max_topic_bytes: 16 * 1024 * 1024,
            max_project_bytes: DEFAULT_MAX_PROJECT_BYTES,
        }
    }
}

/// Default of `history_max_bytes_per_project`: 64 MiB.
pub const DEFAULT_MAX_PROJECT_BYTES: usize = 64 * 1024 * 1024;

/// A fresh epoch: 16 random hex digits.
fn new_epoch() -> Arc<str> {
    let id = uuid::Uuid::new_v4().simple().to_string();
    Arc::from(&id[..16])
}

#[derive(Debug)]
struct Ring {
    epoch: Arc<str>,
    head: u64,
    entries: VecDeque<HistoryEntry>,
    bytes: usize,
    used: u64,
    /// The payload bytes its project's rings keep together.
    project: Arc<AtomicUsize>,
    /// Evicted: no longer in the map, so it keeps nothing more (an append that still held it).
    gone: bool,
}

impl Ring {
    fn new(project: Arc<AtomicUsize>) -> Self {
        Self { epoch: new_epoch(), head: 0, entries: VecDeque::new(), bytes: 0, used: 0, project, gone: false }
    }

    fn trim(&mut self, size: usize, max_bytes: usize, min_ts: u64) {
        let before = self.bytes;
        while let Some(front) = self.entries.front() {
            if self.entries.len() > size || self.bytes > max_bytes || front.timestamp_ms < min_ts {
                self.bytes -= front.data.len();
                self.entries.pop_front();
            } else {
                break;
            }
        }
        self.project.fetch_sub(before - self.bytes, Ordering::Relaxed);
    }

    /// Drops every entry, giving their bytes back to the project.
    fn clear(&mut self) {
        self.project.fetch_sub(self.bytes, Ordering::Relaxed);
        self.bytes = 0;
        self.entries.clear();
    }
}

/// In-memory history of one node: a ring per (room, topic). A restart loses it (and so
/// changes every epoch).
#[derive(Debug)]
pub struct MemoryHistory {
    limits: HistoryLimits,
    // std Mutex: short map and ring updates, never across an await.
    rings: Mutex<HashMap<String, Arc<Mutex<Ring>>>>,
    /// Payload bytes kept per project (a project's entry stays once made: projects are few).
    projects: Mutex<HashMap<String, Arc<AtomicUsize>>>,
    tick: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl MemoryHistory {
    /// An empty history within `limits`.
    pub fn new(limits: HistoryLimits) -> Self {
        Self {
            limits,
            rings: Mutex::new(HashMap::new()),
            projects: Mutex::new(HashMap::new()),
            tick: AtomicU64::new(0),
        }
    }

    /// Payload bytes the histories of `project` keep.
    pub fn project_bytes(&self, project: &str) -> usize {
        lock(&self.projects).get(project).map_or(0, |b| b.load(Ordering::Relaxed))
    }

    fn ring(&self, topic: &TopicAddress) -> Arc<Mutex<Ring>> {
        let key = history_key(topic);
        let used = self.tick.fetch_add(1, Ordering::Relaxed);
        let mut rings = lock(&self.rings);
        if let Some(r) = rings.get(&key) {
            lock(r).used = used;
            return r.clone();
        }
        if rings.len() >= self.limits.max_topics.max(1) {
            let oldest = rings.iter().min_by_key(|(_, r)| lock(r).used).map(|(k, _)| k.clone());
            if let Some(k) = oldest
                && let Some(r) = rings.remove(&k)
            {
                let mut r = lock(&r);
                r.clear();
                r.gone = true;
            }
        }
        let project = lock(&self.projects).entry(topic.room.project.as_str().to_owned()).or_default().clone();
        let ring = Arc::new(Mutex::new(Ring { used, ..Ring::new(project) }));
        rings.insert(key, ring.clone());
        ring
    }

    /// How many (room, topic) histories are kept.
    pub fn topics(&self) -> usize {
        lock(&self.rings).len()
    }

    fn size(&self, config: &HistoryConfig) -> usize {
        config.size.clamp(1, self.limits.max_size.max(1)) as usize
    }
}

#[async_trait]
impl History for MemoryHistory {
    async fn append(
        &self,
        topic: &TopicAddress,
        config: &HistoryConfig,
        entry: NewHistoryEntry<'_>,
    ) -> Result<Appended, HistoryError> {
        let ring = self.ring(topic);
        let mut ring = lock(&ring);
        ring.head += 1;
        let offset = ring.head;
        let len = entry.data.len();
        let quota = self.limits.max_project_bytes;
        if ring.gone || (quota != 0 && ring.project.load(Ordering::Relaxed).saturating_add(len) > quota) {
            // Not kept, and neither is anything older of this topic: a reader must not take
            // the gap for a complete history. (A ring evicted while this append held it keeps
            // nothing either: its epoch is gone from the map, so readers already see a new one.)
            ring.clear();
            return Ok(Appended { pos: HistoryPos { offset, epoch: ring.epoch.clone() }, kept: false });
        }
        ring.bytes += len;
        ring.project.fetch_add(len, Ordering::Relaxed);
        ring.entries.push_back(HistoryEntry {
            offset,
            timestamp_ms: entry.timestamp_ms,
            publisher: entry.publisher.clone(),
            filter: entry.filter.map(str::to_owned),
            msg_id: entry.msg_id.map(str::to_owned),
            data: entry.data.clone(),
        });
        let min_ts = entry.timestamp_ms.saturating_sub(config.ttl_ms);
        let size = self.size(config);
        ring.trim(size, self.limits.max_topic_bytes, min_ts);
        Ok(Appended { pos: HistoryPos { offset, epoch: ring.epoch.clone() }, kept: true })
    }

    async fn read(
        &self,
        topic: &TopicAddress,
        config: &HistoryConfig,
        from: ReadFrom,
        limit: usize,
        now_ms: u64,
    ) -> Result<HistoryRead, HistoryError> {
        let ring = self.ring(topic);
        let mut ring = lock(&ring);
        let size = self.size(config);
        ring.trim(size, self.limits.max_topic_bytes, now_ms.saturating_sub(config.ttl_ms));
        let first = ring.entries.front().map_or(0, |e| e.offset);
        let entries: Vec<HistoryEntry> = match from {
            ReadFrom::After(a) => {
                // Offsets are contiguous in the ring: index arithmetic instead of a scan.
                let skip = usize::try_from(a.saturating_add(1).saturating_sub(first)).unwrap_or(usize::MAX);
                ring.entries.iter().skip(if first == 0 { 0 } else { skip }).take(limit).cloned().collect()
            }
            ReadFrom::Latest => {
                let n = ring.entries.len();
                ring.entries.iter().skip(n.saturating_sub(limit)).cloned().collect()
            }
            ReadFrom::Since(t) => ring.entries.iter().filter(|e| e.timestamp_ms >= t).take(limit).cloned().collect(),
        };
        Ok(HistoryRead { epoch: ring.epoch.clone(), head: ring.head, first, entries })
    }
}

/// Forgets up to 16 of the project's topics whose stream has expired (KEYS[3] the quota hash,
/// KEYS[4] the expiry set, `now` Redis's clock in ms); shared by both scripts.
const REAP: &str = r"
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function reap(now)
  for _, t in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', '(' .. now, 'LIMIT', 0, 16)) do
    local b = tonumber(redis.call('HGET', KEYS[3], t) or '0')
    redis.call('HINCRBY', KEYS[3], '*', -b)
    redis.call('HDEL', KEYS[3], t)
    redis.call('ZREM', KEYS[4], t)
  end
end
local function data_len(ent)
  local f = ent[2]
  for i = 1, #f, 2 do
    if f[i] == 'd' then return string.len(f[i + 1]) end
  end
  return 0
end
-- This topic's stream gave back `n` bytes (at most what it is charged).
local function give_back(n)
  local mine = tonumber(redis.call('HGET', KEYS[3], KEYS[1]) or '0')
  n = math.min(n, mine)
  if n > 0 then
    redis.call('HINCRBY', KEYS[3], KEYS[1], -n)
    redis.call('HINCRBY', KEYS[3], '*', -n)
  end
end
-- The stream is gone (expired, lost, dropped): its charge goes.
local function forget_stream()
  redis.call('ZREM', KEYS[4], KEYS[1])
  local mine = redis.call('HGET', KEYS[3], KEYS[1])
  if not mine then return end
  redis.call('HINCRBY', KEYS[3], '*', -tonumber(mine))
  redis.call('HDEL', KEYS[3], KEYS[1])
end
";

/// Appends one message: KEYS = hash, stream, quota hash, expiry set; ARGV = fresh epoch, size,
/// t, p, f, m, d, stream ttl ms, hash ttl ms, quota bytes (0: none). Returns `{offset, epoch,
/// kept}`.
static APPEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{REAP}{}",
        r"
local now = now_ms()
reap(now)
local e = redis.call('HGET', KEYS[1], 'e')
if not e then
  e = ARGV[1]
  redis.call('HSET', KEYS[1], 'e', e, 'o', 0)
  redis.call('DEL', KEYS[2])
end
if redis.call('EXISTS', KEYS[2]) == 0 then forget_stream() end
local o = redis.call('HINCRBY', KEYS[1], 'o', 1)
local len = string.len(ARGV[7])
local quota = tonumber(ARGV[10])
local kept = 1
if quota > 0 and tonumber(redis.call('HGET', KEYS[3], '*') or '0') + len > quota then
  -- Not kept, nor anything older of this topic: no reader takes the gap for a whole history.
  kept = 0
  redis.call('DEL', KEYS[2])
  forget_stream()
else
  redis.call('XADD', KEYS[2], o .. '-1', 't', ARGV[3], 'p', ARGV[4], 'f', ARGV[5], 'm', ARGV[6], 'd', ARGV[7])
  redis.call('HINCRBY', KEYS[3], KEYS[1], len)
  redis.call('HINCRBY', KEYS[3], '*', len)
  local keep = tonumber(ARGV[2])
  if o > keep then
    local freed = 0
    for _, ent in ipairs(redis.call('XRANGE', KEYS[2], '-', (o - keep) .. '-1')) do freed = freed + data_len(ent) end
    redis.call('XTRIM', KEYS[2], 'MINID', (o - keep + 1) .. '-0')
    give_back(freed)
  end
  redis.call('PEXPIRE', KEYS[2], ARGV[8])
  redis.call('ZADD', KEYS[4], now + tonumber(ARGV[8]), KEYS[1])
end
redis.call('PEXPIRE', KEYS[1], ARGV[9])
local qttl = tonumber(ARGV[9])
if redis.call('PTTL', KEYS[3]) < qttl then redis.call('PEXPIRE', KEYS[3], qttl) end
if redis.call('PTTL', KEYS[4]) < qttl then redis.call('PEXPIRE', KEYS[4], qttl) end
return {o, e, kept}
"
    ))
});

/// Reads: KEYS = hash, stream, quota hash, expiry set; ARGV = fresh epoch, hash ttl ms, oldest kept unix ms, mode
/// (`after`, `latest`, `since`), offset (`since`: unix ms), limit, size. Drops entries older
/// than the ttl first. Returns `{epoch, head, first, entries}` (entries as XRANGE returns them,
/// oldest first except `latest`, which is newest first). `since` scans from the oldest entry in
/// batches and returns the first `limit` stamped at or after the time among the newest `size`
/// offsets (what the reader keeps of a stream a smaller `size` has not trimmed yet), so only
/// those travel.
static READ: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{REAP}{}",
        r"
local e = redis.call('HGET', KEYS[1], 'e')
if not e then
  e = ARGV[1]
  redis.call('HSET', KEYS[1], 'e', e, 'o', 0)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('DEL', KEYS[2])
end
if redis.call('EXISTS', KEYS[2]) == 0 then forget_stream() end
local head = tonumber(redis.call('HGET', KEYS[1], 'o'))
local min_ts = tonumber(ARGV[3])
local freed = 0
while true do
  local batch = redis.call('XRANGE', KEYS[2], '-', '+', 'COUNT', 32)
  if #batch == 0 then break end
  local stop = false
  for _, ent in ipairs(batch) do
    if tonumber(ent[2][2]) >= min_ts then stop = true break end
    freed = freed + data_len(ent)
    redis.call('XDEL', KEYS[2], ent[1])
  end
  if stop then break end
end
give_back(freed)
local first = 0
local f = redis.call('XRANGE', KEYS[2], '-', '+', 'COUNT', 1)
if #f > 0 then first = tonumber(string.match(f[1][1], '^(%d+)')) end
local entries
local limit = tonumber(ARGV[6])
if ARGV[4] == 'after' then
  entries = redis.call('XRANGE', KEYS[2], (tonumber(ARGV[5]) + 1) .. '-0', '+', 'COUNT', limit)
elseif ARGV[4] == 'latest' then
  entries = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', limit)
else
  entries = {}
  local t = tonumber(ARGV[5])
  local from = (math.max(head - tonumber(ARGV[7]), 0) + 1) .. '-0'
  while #entries < limit do
    local batch = redis.call('XRANGE', KEYS[2], from, '+', 'COUNT', 64)
    if #batch == 0 then break end
    for _, ent in ipairs(batch) do
      if #entries < limit and tonumber(ent[2][2]) >= t then entries[#entries + 1] = ent end
    end
    from = '(' .. batch[#batch][1]
  end
end
return {e, head, first, entries}
"
    ))
});

/// History in Redis streams, shared by every node of a cluster (see the module docs).
#[derive(Clone)]
pub struct RedisHistory {
    conn: RedisConn,
    prefix: Arc<str>,
    max_project_bytes: u64,
}

impl std::fmt::Debug for RedisHistory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisHistory").field("prefix", &self.prefix).finish_non_exhaustive()
    }
}

fn unavailable(e: impl std::error::Error + Send + Sync + 'static) -> HistoryError {
    HistoryError::Unavailable(Box::new(e))
}

#[derive(Debug, thiserror::Error)]
#[error("unexpected reply from Redis: {0}")]
struct Shape(&'static str);

/// How long the hash (epoch and counter) outlives the last append: a day, or 2 × ttl if longer.
fn hash_ttl_ms(config: &HistoryConfig) -> u64 {
    config.ttl_ms.saturating_mul(2).max(86_400_000)
}

fn as_u64(v: &Value) -> Option<u64> {
    match v {
        Value::Int(i) => u64::try_from(*i).ok(),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

fn as_bytes(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

fn entry(v: &Value) -> Result<HistoryEntry, HistoryError> {
    let Value::Array(parts) = v else { return Err(unavailable(Shape("entry"))) };
    let [id, Value::Array(fields)] = parts.as_slice() else { return Err(unavailable(Shape("entry parts"))) };
    let id = as_bytes(id).and_then(|b| std::str::from_utf8(b).ok()).ok_or_else(|| unavailable(Shape("entry id")))?;
    let offset = id.split('-').next().and_then(|o| o.parse().ok()).ok_or_else(|| unavailable(Shape("offset")))?;
    let mut e = HistoryEntry {
        offset,
        timestamp_ms: 0,
        publisher: ActorId::parse("server").map_err(|_| unavailable(Shape("actor")))?,
        filter: None,
        msg_id: None,
        data: Bytes::new(),
    };
    for pair in fields.chunks(2) {
        let [k, v] = pair else { continue };
        let (Some(k), Some(v)) = (as_bytes(k), as_bytes(v)) else { continue };
        let text = || std::str::from_utf8(v).ok().filter(|s| !s.is_empty()).map(str::to_owned);
        match k {
            b"t" => e.timestamp_ms = std::str::from_utf8(v).ok().and_then(|s| s.parse().ok()).unwrap_or(0),
            b"p" => {
                e.publisher = std::str::from_utf8(v)
                    .ok()
                    .and_then(|s| ActorId::parse(s).ok())
                    .ok_or_else(|| unavailable(Shape("publisher")))?;
            }
            b"f" => e.filter = text(),
            b"m" => e.msg_id = text(),
            b"d" => e.data = Bytes::copy_from_slice(v),
            _ => {}
        }
    }
    Ok(e)
}

impl RedisHistory {
    /// History over `conn`, keeping its keys under `prefix` (the cluster's namespace).
    pub fn new(conn: RedisConn, prefix: &str) -> Self {
        Self { conn, prefix: Arc::from(prefix), max_project_bytes: DEFAULT_MAX_PROJECT_BYTES as u64 }
    }

    /// The same history with a per-project quota of `bytes` of payload (0: none), shared by
    /// every node of the cluster (`history_max_bytes_per_project`).
    #[must_use]
    pub fn with_max_project_bytes(mut self, bytes: u64) -> Self {
        self.max_project_bytes = bytes;
        self
    }

    /// The topic's hash and stream, its project's quota hash and expiry set.
    fn keys(&self, topic: &TopicAddress) -> [Vec<u8>; 4] {
        let hash = format!("{}:hist:{}", self.prefix, history_key(topic));
        let stream = format!("{hash}:s");
        let quota = format!("{}:histq:{}", self.prefix, topic.room.project.as_str());
        let expiry = format!("{quota}:x");
        [hash.into_bytes(), stream.into_bytes(), quota.into_bytes(), expiry.into_bytes()]
    }
}

#[async_trait]
impl History for RedisHistory {
    async fn append(
        &self,
        topic: &TopicAddress,
        config: &HistoryConfig,
        entry: NewHistoryEntry<'_>,
    ) -> Result<Appended, HistoryError> {
        let [hash, stream, quota, expiry] = self.keys(topic);
        let mut inv = APPEND.prepare_invoke();
        inv.key(hash).key(stream).key(quota).key(expiry);
        inv.arg(&*new_epoch())
            .arg(config.size.max(1))
            .arg(entry.timestamp_ms)
            .arg(entry.publisher.as_str())
            .arg(entry.filter.unwrap_or(""))
            .arg(entry.msg_id.unwrap_or(""))
            .arg(&entry.data[..])
            .arg(config.ttl_ms.max(1))
            .arg(hash_ttl_ms(config))
            .arg(self.max_project_bytes);
        let mut conn = self.conn.clone();
        let (offset, epoch, kept): (u64, String, u8) = inv.invoke_async(&mut conn).await.map_err(unavailable)?;
        Ok(Appended { pos: HistoryPos { offset, epoch: Arc::from(epoch) }, kept: kept == 1 })
    }

    async fn read(
        &self,
        topic: &TopicAddress,
        config: &HistoryConfig,
        from: ReadFrom,
        limit: usize,
        now_ms: u64,
    ) -> Result<HistoryRead, HistoryError> {
        let [hash, stream, quota, expiry] = self.keys(topic);
        let (mode, offset) = match from {
            ReadFrom::After(a) => ("after", a),
            ReadFrom::Latest => ("latest", 0),
            ReadFrom::Since(t) => ("since", t),
        };
        let mut inv = READ.prepare_invoke();
        inv.key(hash).key(stream).key(quota).key(expiry);
        inv.arg(&*new_epoch())
            .arg(hash_ttl_ms(config))
            .arg(now_ms.saturating_sub(config.ttl_ms))
            .arg(mode)
            .arg(offset)
            .arg(limit.max(1))
            .arg(config.size.max(1));
        let mut conn = self.conn.clone();
        let reply: Value = inv.invoke_async(&mut conn).await.map_err(unavailable)?;
        let Value::Array(parts) = reply else { return Err(unavailable(Shape("read reply"))) };
        let [epoch, head, first, Value::Array(raw)] = parts.as_slice() else {
            return Err(unavailable(Shape("read parts")));
        };
        let epoch =
            as_bytes(epoch).and_then(|b| std::str::from_utf8(b).ok()).ok_or_else(|| unavailable(Shape("epoch")))?;
        let head = as_u64(head).ok_or_else(|| unavailable(Shape("head")))?;
        let first = as_u64(first).ok_or_else(|| unavailable(Shape("first")))?;
        let mut entries = raw.iter().map(entry).collect::<Result<Vec<_>, _>>()?;
        // Only the newest `size` offsets count as kept, even if a trim lagged behind.
        let floor = head.saturating_sub(u64::from(config.size.max(1)));
        entries.retain(|e| e.offset > floor);
        match from {
            ReadFrom::Latest => entries.reverse(),
            ReadFrom::Since(t) => {
                entries.retain(|e| e.timestamp_ms >= t);
                entries.truncate(limit);
            }
            ReadFrom::After(_) => {}
        }
        let first = if first != 0 && first <= floor { floor + 1 } else { first };
        Ok(HistoryRead { epoch: Arc::from(epoch), head, first, entries })
    }
}
