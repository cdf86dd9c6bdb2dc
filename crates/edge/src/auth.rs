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
}

/// Whether `token` has the shape of a JWT (three base64url segments).
fn looks_like_jwt(token: &str) -> bool {
    token.split('.').count() == 3 && token.starts_with("eyJ")
}

/// Checks `token` against `registry` at `now_unix_s`.
///
/// # Errors
/// The auth failure string: `token_expired` for an expired client token, `access_denied`
/// for anything unknown, badly signed, missing `exp`, or of a deactivated actor.
pub fn verify(registry: &Registry, token: &str, now_unix_s: u64) -> Result<Credential, &'static str> {
    if let Some(actor) = registry.actor_by_token(token) {
        if !actor.active {
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
    for project in registry.jwt_projects() {
        let Some(secret) = project.jwt_secret.as_deref() else { continue };
        let Ok(key) = jsonwebtoken::DecodingKey::from_secret(secret.as_bytes()) else { continue };
        let Ok(data) = jsonwebtoken::decode::<Claims>(token, &key, &validation) else { continue };
        let claims = data.claims;
        let actor =
            registry.actor(&claims.sub).filter(|a| a.project == project.id && a.active).ok_or(auth::ACCESS_DENIED)?;
        if claims.exp <= now_unix_s {
            return Err(auth::TOKEN_EXPIRED);
        }
        return Ok(Credential { actor: actor.clone(), expires_at: Some(claims.exp), token_digest: None });
    }
    Err(auth::ACCESS_DENIED)
}
