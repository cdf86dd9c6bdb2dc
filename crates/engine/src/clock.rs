//! Wall-clock time as the protocol and the backends count it.

/// Unix seconds now.
pub fn now_unix_s() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Unix milliseconds now.
pub fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A century from now: "never" for timers (well inside what `Instant` can represent).
pub const FAR_FUTURE: std::time::Duration = std::time::Duration::from_secs(100 * 365 * 24 * 3600);

/// The instant (on tokio's clock) when a unix-seconds expiry is reached. The expiry comes from
/// a client token, so the arithmetic saturates: anything beyond a century is "never" (issue 12,
/// defect 1: `exp` near 2^64 used to panic here). Every door times its token expiry with it.
pub fn deadline_of(expires_at: Option<u64>) -> tokio::time::Instant {
    let wait = match expires_at {
        None => FAR_FUTURE,
        Some(at) => std::time::Duration::from_secs(at.saturating_sub(now_unix_s())).min(FAR_FUTURE),
    };
    tokio::time::Instant::now() + wait
}

/// Waits for the next change notification of a watch (the registry's), handing the receiver
/// back, so a connection loop can keep the wait in a reusable future.
pub async fn next_change(
    mut rx: tokio::sync::watch::Receiver<u64>,
) -> (Result<(), tokio::sync::watch::error::RecvError>, tokio::sync::watch::Receiver<u64>) {
    let r = rx.changed().await;
    (r, rx)
}
