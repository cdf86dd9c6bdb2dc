//! What the Redis test files share: two handles (two nodes) on one fresh key prefix.

use skua_conformance::skip::skip;
use skua_presence::RedisPresence;

/// The variable naming the Redis the tests use.
pub const URL_VAR: &str = "SKUA_TEST_REDIS_URL";

/// Two handles made by `make` from two connections (two nodes) on one fresh prefix
/// `skua-test-<uuid>`, or `None` after saying why (a missing URL fails under `CI=true`).
pub async fn pair<T>(make: impl Fn(RedisPresence, &str) -> T) -> Option<(T, T)> {
    let Some(url) = std::env::var(URL_VAR).ok().filter(|u| !u.is_empty()) else {
        skip(&format!("{URL_VAR} not set"));
        return None;
    };
    let prefix = format!("skua-test-{}", uuid::Uuid::new_v4().simple());
    let open = || async {
        let presence =
            RedisPresence::connect(&url, &prefix).await.unwrap_or_else(|e| panic!("connecting to {url}: {e:?}"));
        make(presence, &prefix)
    };
    Some((open().await, open().await))
}
