//! When the durable stores delete restore records.
//!
//! `load_restore` already hides an expired record and a claim never takes one; deleting them is
//! only about bounded growth, so it is kept off every connection's path (issue 36: it used to
//! run inside `release_restore`, on every node, as a window scan of the whole table). The edge
//! calls `Store::prune_restores` every `restore_prune_interval` on every node; a store shared
//! by the nodes (Postgres) lets one of them in at a time (an advisory lock, not the log
//! pruner's) and only when the last prune by any node (`restore_prune_state.pruned_at`) is at
//! least half an interval old, so the cluster prunes once or twice per interval whatever its
//! size. A prune:
//! - deletes the expired rows, `batch` at a time (`restore_records_expires_at`);
//! - caps each actor's ended connection records at [`MAX_ENDED_RECORDS_PER_ACTOR`], looking only
//!   at the actors released since the last prune: `released_seq` grows with every release, and
//!   `restore_prune_state.seen_seq` is the highest one the last prune saw
//!   (`restore_records_released_seq` finds them; the primary key finds their rows). A release
//!   that commits after a prune with a lower `released_seq` than the one it saw is capped at
//!   that actor's next release.

/// The default `restore_prune_interval`, in seconds.
pub const PRUNE_INTERVAL_S: u64 = 60;

pub use skua_core::store::MAX_ENDED_RECORDS_PER_ACTOR;

/// The cluster-wide pruning state: when restore records were last pruned, and the highest
/// `released_seq` that prune looked at.
pub(crate) const STATE: &str = "SELECT pruned_at, seen_seq FROM restore_prune_state WHERE id = 1";
pub(crate) const STATE_SET: &str = "UPDATE restore_prune_state SET pruned_at = $1, seen_seq = $2 WHERE id = 1";
/// One batch of expired rows (`restore_records_expires_at`).
pub(crate) const EXPIRED: &str = "DELETE FROM restore_records WHERE (project, actor, client_id) IN ( \
     SELECT project, actor, client_id FROM restore_records \
     WHERE expires_at IS NOT NULL AND expires_at <= $1 LIMIT $2)";
/// The highest `released_seq` (`restore_records_released_seq`).
pub(crate) const LAST_RELEASED: &str =
    "SELECT COALESCE(MAX(released_seq), 0) FROM restore_records WHERE released_seq IS NOT NULL";
/// Ended connection records beyond the newest `$1` of each actor released in (`$2`, `$3`].
pub(crate) const EXCESS: &str = "DELETE FROM restore_records WHERE (project, actor, client_id) IN ( \
     SELECT project, actor, client_id FROM ( \
         SELECT r.project, r.actor, r.client_id, ROW_NUMBER() OVER ( \
             PARTITION BY r.project, r.actor ORDER BY r.released_seq DESC) AS n \
         FROM restore_records r \
         WHERE r.released_seq IS NOT NULL AND (r.project, r.actor) IN ( \
             SELECT DISTINCT project, actor FROM restore_records \
             WHERE released_seq > $2 AND released_seq <= $3)) ranked \
     WHERE n > $1)";

/// Implements `prune_restores_sql` (what `Store::prune_restores` runs) for a store type with
/// `restore_prune_begin`/`restore_prune_end` methods (the one-pruner-at-a-time lock).
macro_rules! prune_restores {
    ($store:ty, $backend:expr) => {
        impl $store {
            /// `Store::prune_restores` in SQL ([`crate::prune`]).
            async fn prune_restores_sql(
                &self,
                now_unix_s: u64,
                min_interval_s: u64,
                batch: u64,
            ) -> Result<u64, StoreError> {
                let Some(mut conn) = self.restore_prune_begin().await? else { return Ok(0) };
                let result = async {
                    use crate::prune::*;
                    let err = |e| crate::error::sql($backend, "prune_restores")(e);
                    let now = unix_to_sql(now_unix_s);
                    let state: Option<(i64, i64)> =
                        sqlx::query_as(STATE).fetch_optional(&mut *conn).await.map_err(err)?;
                    let (pruned_at, seen_seq) = state.unwrap_or((0, 0));
                    if crate::prune::too_soon(now, pruned_at, min_interval_s) {
                        return Ok(0);
                    }
                    let batch = batch.max(1);
                    let mut deleted = crate::log::delete_in_batches!(
                        conn,
                        batch,
                        err,
                        sqlx::query(EXPIRED).bind(now).bind(unix_to_sql(batch))
                    );
                    let last: i64 = sqlx::query_scalar(LAST_RELEASED).fetch_one(&mut *conn).await.map_err(err)?;
                    // A restored (older) database has lower seqs than the watermark: look at all.
                    let since = if seen_seq > last { 0 } else { seen_seq };
                    if last > since {
                        let cap = i64::try_from(MAX_ENDED_RECORDS_PER_ACTOR).unwrap_or(i64::MAX);
                        let done = sqlx::query(EXCESS).bind(cap).bind(since).bind(last).execute(&mut *conn).await;
                        deleted += done.map_err(err)?.rows_affected();
                    }
                    sqlx::query(STATE_SET).bind(now).bind(last).execute(&mut *conn).await.map_err(err)?;
                    Ok(deleted)
                }
                .await;
                self.restore_prune_end(conn).await;
                result
            }
        }
    };
}

pub(crate) use prune_restores;

/// Whether the last prune (by any node, at `pruned_at`) is less than half of `min_interval_s`
/// before `now`: then this turn is skipped. A `pruned_at` in the future (a clock step back)
/// does not skip.
pub(crate) fn too_soon(now: i64, pruned_at: i64, min_interval_s: u64) -> bool {
    let half = i64::try_from(min_interval_s / 2).unwrap_or(i64::MAX);
    half > 0 && pruned_at <= now && now - pruned_at < half
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_within_half_an_interval_of_the_last_is_skipped() {
        assert!(!too_soon(1_000, 0, 60), "never pruned");
        assert!(too_soon(1_029, 1_000, 60));
        assert!(!too_soon(1_030, 1_000, 60));
        assert!(!too_soon(1_000, 2_000, 60), "a clock step back does not skip");
        assert!(!too_soon(1_000, 1_000, 1), "under 2 s: every turn prunes");
    }
}
