//! When a durable store deletes expired restore records.
//!
//! `load_restore` already hides an expired record; deleting it is only about bounded growth. Each
//! store handle deletes every expired row (one indexed `DELETE`) from `release_restore`, at most
//! once per [`PRUNE_INTERVAL_S`] of its clock, so the table holds the live sessions, the released
//! ones inside their ttl, and at most one interval's worth of expired ones — as long as sessions
//! keep being released. A deployment where they do not can also call `prune` itself.

use std::sync::atomic::{AtomicU64, Ordering};

/// At most one prune per store handle per this many seconds of its clock.
pub const PRUNE_INTERVAL_S: u64 = 60;

pub use skua_core::store::MAX_ENDED_RECORDS_PER_ACTOR;

/// Hands out prune turns, one per interval, to one caller each.
#[derive(Debug, Default)]
pub(crate) struct PruneSchedule {
    /// Clock seconds from which the next turn is due; 0 makes the first call prune.
    next_at: AtomicU64,
}

impl PruneSchedule {
    /// Whether the caller should prune now; then the next turn is an interval away.
    pub(crate) fn claim(&self, now_unix_s: u64) -> bool {
        let next_at = self.next_at.load(Ordering::Relaxed);
        now_unix_s >= next_at
            && self
                .next_at
                .compare_exchange(
                    next_at,
                    now_unix_s.saturating_add(PRUNE_INTERVAL_S),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_turn_per_interval() {
        let s = PruneSchedule::default();
        assert!(s.claim(1_000));
        assert!(!s.claim(1_000));
        assert!(!s.claim(1_000 + PRUNE_INTERVAL_S - 1));
        assert!(s.claim(1_000 + PRUNE_INTERVAL_S));
        assert!(!s.claim(1_000 + PRUNE_INTERVAL_S));
    }
}
