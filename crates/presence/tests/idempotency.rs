//! [`RedisIdempotency`] against the Redis at `SKUA_TEST_REDIS_URL`, each test under its own key
//! prefix `skua-test-<uuid>` (claims expire by themselves: the longest window here is 2 s).
//! A missing URL skips with a loud line on stderr, and fails under `CI=true` (STYLE.md §8).

use std::time::{Duration, Instant};

use skua_core::Idempotency;
use skua_presence::RedisIdempotency;

mod common;

/// Two handles (two nodes) on one fresh prefix, or `None` after saying why.
async fn pair() -> Option<(RedisIdempotency, RedisIdempotency)> {
    common::pair(|presence, prefix| presence.idempotency(prefix)).await
}

#[tokio::test]
async fn a_key_claimed_on_one_node_is_a_duplicate_on_another() {
    let Some((a, b)) = pair().await else { return };
    let w = Duration::from_secs(2);
    assert_eq!(a.claim("p:k", "first", w).await.unwrap(), None);
    assert_eq!(b.claim("p:k", "second", w).await.unwrap(), Some("first".to_owned()));
    assert_eq!(a.claim("p:k", "third", w).await.unwrap(), Some("first".to_owned()));
    assert_eq!(b.claim("q:k", "other project", w).await.unwrap(), None, "scopes never collide");
}

#[tokio::test]
async fn a_claim_lapses_with_its_window() {
    let Some((a, b)) = pair().await else { return };
    let w = Duration::from_millis(200);
    let start = Instant::now();
    assert_eq!(a.claim("p:k", "first", w).await.unwrap(), None);
    // Polls Redis's own expiry (there is no event to await); each poll is one round trip.
    loop {
        match b.claim("p:k", "again", w).await.unwrap() {
            None => break,
            Some(v) => assert_eq!(v, "first"),
        }
        assert!(start.elapsed() < Duration::from_secs(5), "the claim never lapsed");
        // Waiting for time to pass, not for an event: a few polls per window.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(start.elapsed() >= w, "lapsed before its window: {:?}", start.elapsed());
}

#[tokio::test]
async fn release_frees_only_the_claim_holding_the_value() {
    let Some((a, b)) = pair().await else { return };
    let w = Duration::from_secs(2);
    assert_eq!(a.claim("p:k", "first", w).await.unwrap(), None);
    b.release("p:k", "someone else's").await.unwrap();
    assert_eq!(b.claim("p:k", "second", w).await.unwrap(), Some("first".to_owned()));
    a.release("p:k", "first").await.unwrap();
    assert_eq!(b.claim("p:k", "second", w).await.unwrap(), None, "released: a retry claims it");
}

#[tokio::test]
async fn concurrent_claims_of_one_key_have_one_winner() {
    let Some((a, b)) = pair().await else { return };
    let w = Duration::from_secs(2);
    let claims: Vec<_> = (0..20)
        .map(|i| {
            let n = if i % 2 == 0 { &a } else { &b };
            n.claim("p:race", if i % 2 == 0 { "a" } else { "b" }, w)
        })
        .collect();
    let results = futures_util::future::join_all(claims).await;
    let winners = results.iter().filter(|r| matches!(r, Ok(None))).count();
    assert_eq!(winners, 1, "{results:?}");
}
