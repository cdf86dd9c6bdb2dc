//! Idempotent publish (issue 19, item 4): the publish pipeline's gate over the
//! [`skua_core::Idempotency`] slot.
//!
//! A publish carrying an idempotency key claims `<project>:<key>` (outside any access scope) or
//! `<project>~<scope>:<key>` (in a room of an access scope: issue 33, item 7) for the window after
//! its checks passed and before anything is stored or published. Project ids and scope slugs
//! never contain `~` or `:`, so no key of one scope can be spelled from another. A repeat within the window is
//! answered as published with `duplicate: true` and goes no further: no delivery, no logged
//! row, no trigger, no wake, no quota. A first publish that fails after its claim (store, bus)
//! releases the claim, so the key does not block the retry. The claim's value is the first
//! publish's timestamp and stored msgId (or a nonce), which the duplicate's answer repeats.

use std::sync::Arc;
use std::time::Duration;

use skua_core::address::{RoomKey, SCOPE_SEPARATOR};
use skua_core::{Idempotency, IdempotencyError};

/// The gate: the slot, the window and the longest key accepted.
#[derive(Debug, Clone)]
pub struct IdempotencyGate {
    store: Arc<dyn Idempotency>,
    window: Duration,
    max_key_length: usize,
}

/// What the claim of a publish's key found.
#[derive(Debug)]
pub(crate) enum Gate {
    /// The key was free: this publish goes on, holding the claim.
    Claimed(Claimed),
    /// A publish with the key went ahead within the window.
    Duplicate {
        /// The first publish's timestamp (unix ms).
        timestamp_ms: u64,
        /// The first publish's stored msgId, or its nonce (see [`Claimed`]).
        tag: String,
    },
}

/// A claim this publish holds, released when the publish fails.
#[derive(Debug)]
pub(crate) struct Claimed {
    key: String,
    value: String,
}

impl IdempotencyGate {
    /// A gate over `store` remembering keys for `window`, accepting keys of 1 to
    /// `max_key_length` bytes.
    pub fn new(store: Arc<dyn Idempotency>, window: Duration, max_key_length: usize) -> Self {
        Self { store, window, max_key_length }
    }

    /// The longest key accepted, in bytes.
    pub fn max_key_length(&self) -> usize {
        self.max_key_length
    }

    /// Whether `key` may be used: 1 to `max_key_length` bytes.
    pub fn valid(&self, key: &str) -> bool {
        !key.is_empty() && key.len() <= self.max_key_length
    }

    /// Claims `key` in the key space of `room` (its project and access scope) for a publish
    /// stamped `timestamp_ms` whose stored msgId is `tag` (a fresh nonce for a topic that is not
    /// logged).
    pub(crate) async fn claim(
        &self,
        room: &RoomKey,
        key: &str,
        timestamp_ms: u64,
        tag: &str,
    ) -> Result<Gate, IdempotencyError> {
        let key = scoped_key(room, key);
        let value = format!("{timestamp_ms} {tag}");
        Ok(match self.store.claim(&key, &value, self.window).await? {
            None => Gate::Claimed(Claimed { key, value }),
            Some(first) => {
                let (ts, tag) = first.split_once(' ').unwrap_or(("", ""));
                Gate::Duplicate { timestamp_ms: ts.parse().unwrap_or(timestamp_ms), tag: tag.to_owned() }
            }
        })
    }

    /// Releases a failed publish's claim (best effort: a claim not released lapses with its
    /// window, and a retry within it is answered as a duplicate).
    pub(crate) async fn release(&self, claimed: Claimed) {
        if let Err(e) = self.store.release(&claimed.key, &claimed.value).await {
            tracing::warn!(error = %e, "Releasing a failed publish's idempotency key failed; it lapses with its window.");
        }
    }
}

/// The slot's key for the client's `key` published into `room`: `<project>:<key>` outside any
/// access scope, `<project>~<scope>:<key>` inside one (two scopes never share a key).
fn scoped_key(room: &RoomKey, key: &str) -> String {
    match room.room.split_once(SCOPE_SEPARATOR) {
        Some((scope, _)) => format!("{}{SCOPE_SEPARATOR}{scope}:{key}", room.project.as_str()),
        None => format!("{}:{key}", room.project.as_str()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use skua_core::address::RoomKey;
    use skua_core::{AppId, ProjectId};

    use super::scoped_key;

    fn room(room: &str) -> RoomKey {
        RoomKey { project: ProjectId::parse("p").unwrap(), app: AppId::parse("a").unwrap(), room: Arc::from(room) }
    }

    #[test]
    fn keys_are_per_project_and_access_scope_and_cannot_be_spelled_across_scopes() {
        assert_eq!(scoped_key(&room("r"), "k"), "p:k");
        assert_eq!(scoped_key(&room("red~r"), "k"), "p~red:k");
        assert_ne!(scoped_key(&room("blue~r"), "k"), scoped_key(&room("red~r"), "k"));
        // An unscoped client key that looks like a scope prefix stays in the unscoped space.
        assert_ne!(scoped_key(&room("r"), "~red:k"), scoped_key(&room("red~r"), "k"));
        assert_ne!(scoped_key(&room("r"), "red:k"), scoped_key(&room("red~r"), "k"));
    }
}
