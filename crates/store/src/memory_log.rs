//! The message log of [`MemoryStore`](crate::MemoryStore): the same model as the SQL tables
//! (docs/durable.md) in maps, behind the store's one mutex. Memory is bounded by retention
//! ([`MemoryLog::prune`], which the edge runs periodically) like the SQL stores' disk.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use skua_core::{
    Claim, Consumer, ConsumerBacklog, DeadLetter, DeadLetterFilter, Holder, NewDeadLetter, NewMessage, OutboxTrigger,
    Release, Retention, StoredMessage,
};

#[derive(Debug)]
struct Message {
    msg_id: String,
    topic: Arc<str>,
    filter: Option<String>,
    publisher: String,
    timestamp_ms: u64,
    data: Bytes,
    created_at: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct HeldBy {
    session: String,
    node: String,
    conn: u64,
}

#[derive(Debug)]
struct Pending {
    msg_id: String,
    deliveries: u32,
    holder: Option<HeldBy>,
}

#[derive(Debug)]
struct ConsumerState {
    topic: String,
    actor: String,
    filters: Vec<String>,
    expires_at: u64,
    pending: BTreeMap<u64, Pending>,
}

/// Messages, consumers and pending entries in memory.
#[derive(Debug, Default)]
pub(crate) struct MemoryLog {
    next_seq: u64,
    messages: BTreeMap<u64, Message>,
    consumers: HashMap<String, ConsumerState>,
    /// The trigger outbox by message seq.
    outbox: BTreeMap<u64, OutboxEntry>,
    /// The outbox's seqs by msgId.
    outbox_ids: HashMap<String, u64>,
    /// Dead letters by id.
    dead: BTreeMap<u64, DeadLetter>,
    next_dead: u64,
}

#[derive(Debug)]
struct OutboxEntry {
    owner: String,
    lease_until_ms: u64,
    attempts: u32,
}

impl MemoryLog {
    pub(crate) fn append(&mut self, m: &NewMessage<'_>, now_unix_s: u64) -> u64 {
        self.next_seq += 1;
        let seq = self.next_seq;
        for c in self.consumers.values_mut() {
            let wants = c.topic == m.topic
                && c.actor != m.publisher
                && c.expires_at > now_unix_s
                && (c.filters.is_empty() || m.filter.is_some_and(|f| c.filters.iter().any(|x| x == f)));
            if wants {
                c.pending.insert(seq, Pending { msg_id: m.msg_id.to_owned(), deliveries: 0, holder: None });
            }
        }
        self.messages.insert(
            seq,
            Message {
                msg_id: m.msg_id.to_owned(),
                topic: Arc::from(m.topic),
                filter: m.filter.map(str::to_owned),
                publisher: m.publisher.to_owned(),
                timestamp_ms: m.timestamp_ms,
                data: Bytes::copy_from_slice(m.data),
                created_at: now_unix_s,
            },
        );
        if let Some(t) = m.trigger {
            self.outbox
                .insert(seq, OutboxEntry { owner: t.owner.to_owned(), lease_until_ms: t.lease_until_ms, attempts: 0 });
            self.outbox_ids.insert(m.msg_id.to_owned(), seq);
        }
        seq
    }

    pub(crate) fn claim_outbox(
        &mut self,
        owner: &str,
        now_ms: u64,
        lease_until_ms: u64,
        limit: u32,
    ) -> Vec<OutboxTrigger> {
        let mut out = Vec::new();
        for (seq, o) in &mut self.outbox {
            if out.len() >= limit as usize {
                break;
            }
            if o.lease_until_ms > now_ms {
                continue;
            }
            let Some(m) = self.messages.get(seq) else { continue };
            o.owner = owner.to_owned();
            o.lease_until_ms = lease_until_ms;
            out.push(OutboxTrigger {
                msg_id: m.msg_id.clone(),
                topic: m.topic.to_string(),
                filter: m.filter.clone(),
                publisher: m.publisher.clone(),
                timestamp_ms: m.timestamp_ms,
                data: m.data.clone(),
                attempts: o.attempts,
            });
        }
        out
    }

    fn outbox_seq(&self, msg_id: &str) -> Option<u64> {
        self.outbox_ids.get(msg_id).copied().filter(|seq| self.outbox.contains_key(seq))
    }

    pub(crate) fn renew_outbox(&mut self, msg_id: &str, owner: &str, lease_until_ms: u64) -> Option<u32> {
        let seq = self.outbox_seq(msg_id)?;
        let o = self.outbox.get_mut(&seq).filter(|o| o.owner == owner)?;
        o.lease_until_ms = lease_until_ms;
        o.attempts = o.attempts.saturating_add(1);
        Some(o.attempts)
    }

    pub(crate) fn finish_outbox(&mut self, msg_id: &str) -> bool {
        let seq = self.outbox_ids.remove(msg_id);
        seq.is_some_and(|seq| self.outbox.remove(&seq).is_some())
    }

    pub(crate) fn expire_outbox_leases(&mut self, keep: &str) -> u64 {
        let mut n = 0;
        for o in self.outbox.values_mut().filter(|o| o.owner != keep) {
            o.lease_until_ms = 0;
            n += 1;
        }
        n
    }

    pub(crate) fn dead_letter(&mut self, l: &NewDeadLetter<'_>, cap: skua_core::DeadLetterCap) -> u64 {
        let existing = self.dead.iter().find(|(_, d)| d.delivery_id == l.delivery_id).map(|(id, _)| *id);
        let id = existing.unwrap_or_else(|| {
            self.next_dead += 1;
            self.next_dead
        });
        self.dead.insert(
            id,
            DeadLetter {
                id,
                delivery_id: l.delivery_id.to_owned(),
                project: l.project.to_owned(),
                kind: l.kind.to_owned(),
                topic: l.topic.to_owned(),
                target: l.target.to_owned(),
                body: Bytes::copy_from_slice(l.body),
                last_error: l.last_error.to_owned(),
                attempts: l.attempts,
                failed_at_ms: l.failed_at_ms,
            },
        );
        self.finish_outbox(l.delivery_id);
        // Newest first: keep while both caps hold, drop the rest (as the SQL stores do).
        let mine: Vec<(u64, u64)> = self
            .dead
            .iter()
            .rev()
            .filter(|(_, d)| d.project == l.project)
            .map(|(id, d)| (*id, d.body.len() as u64))
            .collect();
        let (mut kept, mut bytes, mut dropped) = (0u64, 0u64, 0u64);
        for (id, len) in mine {
            bytes = bytes.saturating_add(len);
            if kept < cap.count && bytes <= cap.bytes {
                kept += 1;
            } else {
                self.dead.remove(&id);
                dropped += 1;
            }
        }
        dropped
    }

    pub(crate) fn list_dead_letters(&self, f: DeadLetterFilter<'_>, after: u64, limit: u32) -> Vec<DeadLetter> {
        self.dead
            .range(after.saturating_add(1)..)
            .map(|(_, d)| d)
            .filter(|d| selects(f, d))
            .take(limit as usize)
            .cloned()
            .collect()
    }

    pub(crate) fn delete_dead_letters(&mut self, f: DeadLetterFilter<'_>) -> u64 {
        let before = self.dead.len();
        self.dead.retain(|_, d| !selects(f, d));
        (before - self.dead.len()) as u64
    }

    pub(crate) fn open_consumer(&mut self, c: &Consumer, now_unix_s: u64, ttl_s: u64) {
        let expires_at = now_unix_s.saturating_add(ttl_s);
        let entry = self.consumers.entry(c.id.clone()).or_insert_with(|| ConsumerState {
            topic: c.topic.clone(),
            actor: c.actor.clone(),
            filters: Vec::new(),
            expires_at,
            pending: BTreeMap::new(),
        });
        entry.topic.clone_from(&c.topic);
        entry.actor.clone_from(&c.actor);
        entry.filters.clone_from(&c.filters);
        entry.expires_at = expires_at;
    }

    pub(crate) fn touch(&mut self, ids: &[&str], now_unix_s: u64, ttl_s: u64) {
        for id in ids {
            if let Some(c) = self.consumers.get_mut(*id) {
                c.expires_at = now_unix_s.saturating_add(ttl_s);
            }
        }
    }

    pub(crate) fn drop_consumer(&mut self, id: &str) {
        self.consumers.remove(id);
    }

    pub(crate) fn claim(&mut self, consumer: &str, msg_id: &str, h: Holder<'_>) -> Claim {
        let Some(c) = self.consumers.get_mut(consumer) else { return Claim::Absent };
        let Some((&seq, p)) = c.pending.iter_mut().find(|(_, p)| p.msg_id == msg_id) else { return Claim::Absent };
        if p.holder.is_some() {
            return Claim::Held;
        }
        p.holder = Some(held(h));
        p.deliveries += 1;
        Claim::Claimed { redelivered: p.deliveries > 1, seq }
    }

    pub(crate) fn backlog(&self, consumer: &str) -> (u64, u64) {
        let Some(c) = self.consumers.get(consumer) else { return (0, 0) };
        let unheld = c.pending.iter().filter(|(_, p)| p.holder.is_none());
        unheld.fold((0, 0), |(n, max), (seq, _)| (n + 1, max.max(*seq)))
    }

    pub(crate) fn list_consumers(&self, prefix: &str, after: &str, limit: u32) -> Vec<ConsumerBacklog> {
        let mut ids: Vec<&String> =
            self.consumers.keys().filter(|id| id.starts_with(prefix) && id.as_str() > after).collect();
        ids.sort_unstable();
        ids.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        ids.into_iter()
            .filter_map(|id| {
                let c = self.consumers.get(id)?;
                let oldest = c.pending.keys().next().and_then(|seq| self.messages.get(seq)).map(|m| m.timestamp_ms);
                Some(ConsumerBacklog {
                    id: id.clone(),
                    pending: c.pending.len() as u64,
                    held: c.pending.values().filter(|p| p.holder.is_some()).count() as u64,
                    oldest_timestamp_ms: oldest,
                    expires_at_unix_s: c.expires_at,
                })
            })
            .collect()
    }

    pub(crate) fn claim_page(
        &mut self,
        consumer: &str,
        h: Holder<'_>,
        seqs: std::ops::RangeInclusive<u64>,
        limit: u32,
    ) -> Vec<StoredMessage> {
        let Some(c) = self.consumers.get_mut(consumer) else { return Vec::new() };
        let mut out = Vec::new();
        if seqs.is_empty() {
            return out;
        }
        for (seq, p) in c.pending.range_mut(seqs) {
            if out.len() >= limit as usize {
                break;
            }
            if p.holder.is_some() {
                continue;
            }
            let Some(m) = self.messages.get(seq) else { continue };
            p.holder = Some(held(h));
            p.deliveries += 1;
            out.push(StoredMessage {
                seq: *seq,
                msg_id: m.msg_id.clone(),
                filter: m.filter.clone(),
                publisher: m.publisher.clone(),
                timestamp_ms: m.timestamp_ms,
                data: m.data.clone(),
                redelivered: p.deliveries > 1,
            });
        }
        out
    }

    pub(crate) fn ack(&mut self, consumer: &str, msg_id: &str) -> bool {
        let Some(c) = self.consumers.get_mut(consumer) else { return false };
        let Some(seq) = c.pending.iter().find(|(_, p)| p.msg_id == msg_id).map(|(s, _)| *s) else { return false };
        c.pending.remove(&seq);
        true
    }

    pub(crate) fn release(&mut self, scope: Release<'_>) -> Vec<String> {
        let matches = |id: &str, h: &HeldBy| match scope {
            Release::ConnConsumer { node, conn, consumer } => id == consumer && h.node == node && h.conn == conn,
            Release::Conn { node, conn } => h.node == node && h.conn == conn,
            Release::SessionExcept(me) => h.session == me.session && !(h.node == me.node && h.conn == me.conn),
            Release::Node(node) => h.node == node,
        };
        let mut ids = Vec::new();
        for (id, c) in &mut self.consumers {
            let mut any = false;
            for p in c.pending.values_mut() {
                if p.holder.as_ref().is_some_and(|h| matches(id, h)) {
                    p.holder = None;
                    any = true;
                }
            }
            if any {
                ids.push(id.clone());
            }
        }
        ids
    }

    pub(crate) fn prune(&mut self, now_unix_s: u64, retention: Retention) -> u64 {
        let cutoff = now_unix_s.saturating_sub(retention.max_age_s);
        let mut per_topic: HashMap<Arc<str>, u64> = HashMap::new();
        for m in self.messages.values() {
            *per_topic.entry(m.topic.clone()).or_default() += 1;
        }
        let mut gone = Vec::new();
        for (seq, m) in &self.messages {
            let over = per_topic.get_mut(&m.topic).filter(|n| **n > retention.max_per_topic);
            if let Some(n) = over {
                *n -= 1;
                gone.push(*seq);
            } else if m.created_at < cutoff {
                gone.push(*seq);
            }
        }
        for seq in &gone {
            self.messages.remove(seq);
        }
        self.consumers.retain(|_, c| c.expires_at > now_unix_s);
        for c in self.consumers.values_mut() {
            c.pending.retain(|seq, _| self.messages.contains_key(seq));
        }
        self.outbox.retain(|seq, _| self.messages.contains_key(seq));
        self.outbox_ids.retain(|_, seq| self.outbox.contains_key(seq));
        gone.len() as u64
    }
}

fn selects(f: DeadLetterFilter<'_>, d: &DeadLetter) -> bool {
    f.project.is_none_or(|p| p == d.project) && (f.delivery_ids.is_empty() || f.delivery_ids.contains(&d.delivery_id))
}

fn held(h: Holder<'_>) -> HeldBy {
    HeldBy { session: h.session.to_owned(), node: h.node.to_owned(), conn: h.conn }
}
