//! The restore-record pruning tick (issue 36): every `restore_prune_interval`, on every node,
//! `Store::prune_restores`. A shared store lets one node of the cluster prune per interval
//! (crates/store/src/prune.rs); a connection's release never prunes.

use std::sync::Arc;
use std::time::Duration;

use skua_core::Store;
use tokio_util::sync::CancellationToken;

use crate::clock::now_unix_s;

/// Prunes restore records every `every` (at least 1 s), `batch` rows per statement, until
/// `stop` fires. A failed prune is logged and retried at the next tick.
pub async fn run(store: Arc<dyn Store>, every: Duration, batch: u64, stop: CancellationToken) {
    let every = every.max(Duration::from_secs(1));
    let mut tick = tokio::time::interval(every);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.cancelled() => return,
        }
        match store.prune_restores(now_unix_s(), every.as_secs(), batch).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(deleted = n, "Pruned expired and surplus restore records."),
            Err(e) => tracing::warn!(error = %e, "Pruning restore records failed; retrying at the next interval."),
        }
    }
}
