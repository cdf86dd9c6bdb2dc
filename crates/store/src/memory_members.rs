//! Persistent presence members of [`MemoryStore`](crate::MemoryStore): one ordered map behind
//! one `std::sync::Mutex`, each operation one short critical section with no `.await` (which makes
//! `begin_wake` atomic for every handle in the process).

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use skua_core::{MemberStatus, MemberWrite, StoredMember};

/// (room, actor, clientId).
type Key = (String, String, String);

struct Row {
    member: StoredMember,
    advertisement: Vec<u8>,
    node: String,
    waking_until_ms: u64,
    expires_at_s: u64,
}

/// The members map.
#[derive(Default)]
pub(crate) struct MemoryMembers {
    rows: Mutex<BTreeMap<Key, Row>>,
}

impl MemoryMembers {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<Key, Row>> {
        // No code panics while holding the lock, so a poisoned map is still consistent.
        self.rows.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn upsert(&self, w: &MemberWrite<'_>) -> Option<StoredMember> {
        let mut rows = self.lock();
        let key = (w.room.to_owned(), w.actor.to_owned(), w.client_id.to_owned());
        let (version, joined_at) = match rows.get(&key) {
            Some(r) => {
                let version = r.member.advertisement_version + u64::from(r.advertisement != w.advertisement);
                let renewed = r.member.status != MemberStatus::Online && r.expires_at_s <= w.now_s;
                (version, if renewed { w.now_s } else { r.member.joined_at })
            }
            None => {
                // A new record: within the project's limit (contract 4)?
                let prefix = w.project_prefix();
                let start = (prefix.to_owned(), String::new(), String::new());
                let held = rows.range(start..).take_while(|(k, _)| k.0.starts_with(prefix)).count();
                if w.project_limit != 0 && held as u64 >= w.project_limit {
                    return None;
                }
                (1, w.now_s)
            }
        };
        let member = StoredMember {
            room: key.0.clone(),
            actor: key.1.clone(),
            client_id: key.2.clone(),
            data: Bytes::copy_from_slice(w.data),
            wake: w.wake.map(str::to_owned),
            status: MemberStatus::Online,
            advertisement_version: version,
            joined_at,
        };
        rows.insert(
            key,
            Row {
                member: member.clone(),
                advertisement: w.advertisement.to_vec(),
                node: w.node.to_owned(),
                waking_until_ms: 0,
                expires_at_s: w.expires_at_s,
            },
        );
        Some(member)
    }

    /// Sets offline the online rows `pick` selects.
    fn offline(&self, expires_at_s: u64, pick: impl Fn(&Key, &Row) -> bool) -> Vec<StoredMember> {
        let mut rows = self.lock();
        let mut out = Vec::new();
        for (k, r) in rows.iter_mut() {
            if r.member.status == MemberStatus::Online && pick(k, r) {
                r.member.status = MemberStatus::Offline;
                r.waking_until_ms = 0;
                r.expires_at_s = expires_at_s;
                out.push(r.member.clone());
            }
        }
        out
    }

    pub(crate) fn members_offline(&self, room: &str, actor: &str, expires_at_s: u64) -> Vec<StoredMember> {
        self.offline(expires_at_s, |k, _| k.0 == room && k.1 == actor)
    }

    pub(crate) fn other_nodes_offline(&self, keep: &str, expires_at_s: u64) -> Vec<StoredMember> {
        self.offline(expires_at_s, |_, r| r.node != keep)
    }

    pub(crate) fn delete(&self, room: &str, actor: &str) -> u64 {
        let mut rows = self.lock();
        let before = rows.len();
        rows.retain(|k, _| !(k.0 == room && k.1 == actor));
        (before - rows.len()) as u64
    }

    /// Up to `limit` rows of `room` that `keep` accepts, in key order.
    fn select(&self, room: &str, limit: u32, keep: impl Fn(&Row) -> bool) -> Vec<StoredMember> {
        let rows = self.lock();
        let start = (room.to_owned(), String::new(), String::new());
        rows.range(start..)
            .take_while(|(k, _)| k.0 == room)
            .filter(|(_, r)| keep(r))
            .take(limit as usize)
            .map(|(_, r)| r.member.clone())
            .collect()
    }

    pub(crate) fn list(&self, room: &str, now_s: u64, limit: u32) -> Vec<StoredMember> {
        self.select(room, limit, |r| r.member.status == MemberStatus::Online || r.expires_at_s > now_s)
    }

    pub(crate) fn candidates(&self, room: &str, now_s: u64, limit: u32) -> Vec<StoredMember> {
        self.select(room, limit, |r| {
            r.member.status == MemberStatus::Offline && r.member.wake.is_some() && r.expires_at_s > now_s
        })
    }

    /// Moves the row from `from` to `to`; whether it was in `from`.
    pub(crate) fn transition(
        &self,
        room: &str,
        actor: &str,
        client_id: &str,
        from: MemberStatus,
        to: MemberStatus,
        until_ms: u64,
    ) -> bool {
        let mut rows = self.lock();
        let key = (room.to_owned(), actor.to_owned(), client_id.to_owned());
        match rows.get_mut(&key) {
            Some(r) if r.member.status == from => {
                r.member.status = to;
                r.waking_until_ms = until_ms;
                true
            }
            _ => false,
        }
    }

    pub(crate) fn expired_wakes(&self, now_ms: u64, limit: u32) -> Vec<StoredMember> {
        let mut rows = self.lock();
        let mut out = Vec::new();
        for r in rows.values_mut() {
            if out.len() >= limit as usize {
                break;
            }
            if r.member.status == MemberStatus::Waking && r.waking_until_ms <= now_ms {
                r.member.status = MemberStatus::Offline;
                r.waking_until_ms = 0;
                out.push(r.member.clone());
            }
        }
        out
    }

    pub(crate) fn expire(&self, now_s: u64, limit: u32) -> Vec<StoredMember> {
        let mut rows = self.lock();
        let gone: Vec<Key> = rows
            .iter()
            .filter(|(_, r)| r.member.status != MemberStatus::Online && r.expires_at_s <= now_s)
            .take(limit as usize)
            .map(|(k, _)| k.clone())
            .collect();
        gone.iter().filter_map(|k| rows.remove(k)).map(|r| r.member).collect()
    }
}
