//! [`RedisSharedLimits`] (the wake limits' counters, issue 33) against the Redis at
//! `SKUA_TEST_REDIS_URL`, each test under its own key prefix `skua-test-<uuid>` (keys expire
//! with their period). A missing URL skips with a loud line on stderr, and fails under
//! `CI=true` (STYLE.md §8).

use std::time::{Duration, Instant};

use skua_core::limits::SharedLimits;
use skua_presence::RedisSharedLimits;

mod common;

/// Two handles (two nodes) on one fresh prefix, or `None` after saying why.
async fn pair() -> Option<(RedisSharedLimits, RedisSharedLimits)> {
    common::pair(|presence, prefix| presence.shared_limits(prefix)).await
}

#[tokio::test]
async fn two_nodes_share_one_limit_and_a_refused_take_takes_nothing() {
    let Some((a, b)) = pair().await else { return };
    let hour = Duration::from_secs(3600);
    // Actor limit 3, URL limit 4, taken on either node.
    assert!(a.take_all(&[("actor", 3), ("url", 4)], hour).await.unwrap());
    assert!(b.take_all(&[("actor", 3), ("url", 4)], hour).await.unwrap());
    assert!(a.take_all(&[("actor", 3), ("url", 4)], hour).await.unwrap());
    assert!(!b.take_all(&[("actor", 3), ("url", 4)], hour).await.unwrap(), "3 per actor for the cluster, not per node");
    // The refused take charged nothing: the URL has one left, for another actor.
    assert!(b.take_all(&[("other-actor", 3), ("url", 4)], hour).await.unwrap());
    assert!(!a.take_all(&[("third-actor", 3), ("url", 4)], hour).await.unwrap(), "the URL's 4 are used");
}

#[tokio::test]
async fn a_window_ends_after_its_period() {
    let Some((a, b)) = pair().await else { return };
    let period = Duration::from_millis(200);
    let start = Instant::now();
    assert!(a.take_all(&[("k", 1)], period).await.unwrap());
    // Polls Redis's own expiry (there is no event to await); each poll is one round trip.
    while !b.take_all(&[("k", 1)], period).await.unwrap() {
        assert!(start.elapsed() < Duration::from_secs(5), "the window never ended");
        // Waiting for time to pass, not for an event: a few polls per window.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(start.elapsed() >= period, "a new window before the period: {:?}", start.elapsed());
}
