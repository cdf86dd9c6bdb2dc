//! Credential checks: static access tokens from the registry and client tokens (JWTs, N27, N38).

use std::sync::Arc;

use serde::Deserialize;
use skua_core::registry::{Actor, Registry};
use skua_protocol::codes::auth;

/// Who a credential names, and until when it is valid.
#[derive(Debug, Clone)]
pub struct Credential {
    /// The actor.
    pub actor: Arc<Actor>,
    /// Unix seconds when a client token expires; `None` for access tokens.
    pub expires_at: Option<u64>,
    /// SHA-256 of the access token, to notice its revocation; `None` for client tokens.
    pub token_digest: Option<[u8; 32]>,
}

#[derive(Debug, Deserialize)]
struct Claims {
    sub: String,
    exp: u64,
    /// Not valid before (unix seconds), checked when present (issue 12).
    #[serde(default)]
    nbf: Option<u64>,
}

/// Whether `token` has the shape of a JWT (three base64url segments).
fn looks_like_jwt(token: &str) -> bool {
    token.split('.').count() == 3 && token.starts_with("eyJ")
}

/// Checks `token` against `registry` at `now_unix_s`. A client token's `aud` must name one of
/// `audiences` (a token without `aud` is accepted; with no audiences configured, a token
/// carrying `aud` is refused); its `nbf`, when present, must have passed.
///
/// # Errors
/// The auth failure string: `token_expired` for an expired client token, `access_denied`
/// for anything unknown, badly signed, missing `exp`, not yet valid, for another audience, or
/// of a deactivated actor.
pub fn verify(
    registry: &Registry,
    token: &str,
    now_unix_s: u64,
    audiences: &[String],
) -> Result<Credential, &'static str> {
    if let Some(actor) = registry.actor_by_token(token) {
        if !actor.active || !actor.scope_active() {
            return Err(auth::ACCESS_DENIED);
        }
        let token_digest = Some(skua_core::registry::digest(token));
        return Ok(Credential { actor: actor.clone(), expires_at: None, token_digest });
    }
    if !looks_like_jwt(token) {
        return Err(auth::ACCESS_DENIED);
    }
    let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::HS256);
    // Expiry is checked below so an expired token gets exactly `token_expired` (N38).
    validation.validate_exp = false;
    validation.leeway = 0;
    validation.set_required_spec_claims(&["exp", "sub"]);
    if !audiences.is_empty() {
        validation.set_audience(audiences);
    }
    for project in registry.jwt_projects() {
        let Some(secret) = project.jwt_secret.as_deref() else { continue };
        let Ok(key) = jsonwebtoken::DecodingKey::from_secret(secret.as_bytes()) else { continue };
        let Ok(data) = jsonwebtoken::decode::<Claims>(token, &key, &validation) else { continue };
        let claims = data.claims;
        let actor = registry
            .actor(&claims.sub)
            .filter(|a| a.project == project.id && a.active && a.scope_active())
            .ok_or(auth::ACCESS_DENIED)?;
        if claims.exp <= now_unix_s {
            return Err(auth::TOKEN_EXPIRED);
        }
        if claims.nbf.is_some_and(|nbf| nbf > now_unix_s) {
            return Err(auth::ACCESS_DENIED);
        }
        return Ok(Credential { actor: actor.clone(), expires_at: Some(claims.exp), token_digest: None });
    }
    Err(auth::ACCESS_DENIED)
}

/// Failed `auth`s per source address (issue 12, item 6): after `after` failures in a row, each
/// further failed `auth` from that address is answered late, 250 ms doubling per failure up to
/// `max` (a valid credential is answered at once: issue 33, item 10). An address is forgotten a minute after its last failure; at most
/// [`AuthThrottle::MAX_ADDRESSES`] are tracked (beyond that new addresses are not throttled,
/// so memory stays bounded whatever the number of sources).
#[derive(Debug)]
pub struct AuthThrottle {
    after: u32,
    max: std::time::Duration,
    // std Mutex: one map operation per failed or throttled auth, never across an await.
    failures: std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, (u32, tokio::time::Instant)>>,
}

impl AuthThrottle {
    /// Most addresses tracked at once.
    pub const MAX_ADDRESSES: usize = 100_000;
    /// How long after its last failure an address is forgotten.
    pub const FORGET_AFTER: std::time::Duration = std::time::Duration::from_secs(60);
    /// The delay after the first failure beyond `after`.
    pub const FIRST_DELAY: std::time::Duration = std::time::Duration::from_millis(250);

    /// A throttle delaying after `after` failures, by at most `max`.
    pub fn new(after: u32, max: std::time::Duration) -> Self {
        Self { after, max, failures: std::sync::Mutex::default() }
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<std::net::IpAddr, (u32, tokio::time::Instant)>> {
        self.failures.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How long a failed `auth` from `ip` waits before it is answered (zero when not throttled).
    pub fn delay(&self, ip: std::net::IpAddr) -> std::time::Duration {
        let now = tokio::time::Instant::now();
        let Some(&(n, last)) = self.lock().get(&ip) else { return std::time::Duration::ZERO };
        if n < self.after || now.duration_since(last) >= Self::FORGET_AFTER {
            return std::time::Duration::ZERO;
        }
        let doublings = (n - self.after).min(20);
        Self::FIRST_DELAY.saturating_mul(1 << doublings).min(self.max)
    }

    /// Records a failed `auth` from `ip`.
    pub fn failed(&self, ip: std::net::IpAddr) {
        let now = tokio::time::Instant::now();
        let mut map = self.lock();
        if map.len() >= Self::MAX_ADDRESSES && !map.contains_key(&ip) {
            map.retain(|_, (_, last)| now.duration_since(*last) < Self::FORGET_AFTER);
            if map.len() >= Self::MAX_ADDRESSES {
                return;
            }
        }
        let e = map.entry(ip).or_insert((0, now));
        if now.duration_since(e.1) >= Self::FORGET_AFTER {
            e.0 = 0;
        }
        e.0 = e.0.saturating_add(1);
        e.1 = now;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::AuthThrottle;

    #[tokio::test(start_paused = true)]
    async fn failures_beyond_the_threshold_double_the_delay_up_to_the_max_and_are_forgotten() {
        let t = AuthThrottle::new(2, Duration::from_secs(1));
        let ip = "192.0.2.1".parse().unwrap();
        let other = "192.0.2.2".parse().unwrap();
        for _ in 0..2 {
            assert_eq!(t.delay(ip), Duration::ZERO);
            t.failed(ip);
        }
        assert_eq!(t.delay(ip), Duration::from_millis(250));
        t.failed(ip);
        assert_eq!(t.delay(ip), Duration::from_millis(500));
        for _ in 0..40 {
            t.failed(ip);
        }
        assert_eq!(t.delay(ip), Duration::from_secs(1));
        assert_eq!(t.delay(other), Duration::ZERO);
        tokio::time::advance(AuthThrottle::FORGET_AFTER).await;
        assert_eq!(t.delay(ip), Duration::ZERO);
        t.failed(ip);
        assert_eq!(t.delay(ip), Duration::ZERO, "counting starts again");
    }
}
