//! A connection task's panic, contained: the WebSocket door's and the other doors' tasks run
//! through [`contained`], so a panic closes one connection instead of unwinding the node's.

/// Runs `fut`, turning a panic into `None` (logged and counted in
/// `skua_connection_panics_total`) so the caller can close and clean up the connection.
pub(crate) async fn contained<F: std::future::Future>(
    fut: F,
    metrics: &crate::metrics::Metrics,
    part: &str,
) -> Option<F::Output> {
    use futures_util::FutureExt;
    match std::panic::AssertUnwindSafe(fut).catch_unwind().await {
        Ok(out) => Some(out),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            tracing::error!(part, panic = %what, "A connection task panicked; the connection is closed 1011.");
            metrics.connection_panics.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            None
        }
    }
}
