//! One webhook request: the call (target, secret), its JSON body with `deliveryId` (stable
//! across retries) and `timestamp` (unix ms at creation), and the N42 signature.

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde_json::{Map, Value};
use skua_core::webhook::{WebhookCall, WebhookSecret};
use uuid::Uuid;

/// The header carrying `sha256=<hex HMAC-SHA256(raw body, secret)>` (N42).
pub const SIGNATURE_HEADER: &str = "X-NoLag-Signature";

/// The header carrying `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>">`, made when
/// each attempt is sent, so a receiver can reject a replay by the header's time alone.
pub const SIGNATURE_V2_HEADER: &str = "X-NoLag-Signature-V2";

/// `sha256=<hex HMAC-SHA256>`: 7 + 64 bytes.
pub(crate) const SIGNATURE_LEN: usize = 7 + 64;

/// `sha256=<hex>` of the HMAC-SHA256 of `body` keyed with `secret` (N42).
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    // ASCII only.
    String::from_utf8_lossy(&sign_bytes(secret, body)).into_owned()
}

/// [`sign`] into a fixed buffer (no allocation): the header value's bytes.
pub(crate) fn sign_bytes(secret: &[u8], body: &[u8]) -> [u8; SIGNATURE_LEN] {
    let tag = with_key(secret, |key| ring::hmac::sign(key, body));
    let mut out = [0u8; SIGNATURE_LEN];
    out[..7].copy_from_slice(b"sha256=");
    for (i, b) in tag.as_ref().iter().take(32).enumerate() {
        out[7 + 2 * i] = HEX[usize::from(b >> 4)];
        out[8 + 2 * i] = HEX[usize::from(b & 0xf)];
    }
    out
}

/// `t=<unix_s>,v1=<hex HMAC-SHA256 of "<unix_s>.<body>">` keyed with `secret`: the
/// [`SIGNATURE_V2_HEADER`] value.
pub fn sign_v2(secret: &[u8], unix_s: u64, body: &[u8]) -> String {
    let t = unix_s.to_string();
    let tag = with_key(secret, |key| {
        let mut ctx = ring::hmac::Context::with_key(key);
        ctx.update(t.as_bytes());
        ctx.update(b".");
        ctx.update(body);
        ctx.sign()
    });
    let mut out = String::with_capacity(t.len() + 6 + 64);
    out.push_str("t=");
    out.push_str(&t);
    out.push_str(",v1=");
    for b in tag.as_ref().iter().take(32) {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    out
}

const HEX: &[u8; 16] = b"0123456789abcdef";

thread_local! {
    /// The HMAC key of the secret signed with last on this thread: an app's requests share one
    /// secret, and building a key hashes it (two SHA-256 blocks) every time.
    static LAST_KEY: std::cell::RefCell<Option<(Vec<u8>, ring::hmac::Key)>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs `f` with the HMAC-SHA256 key of `secret`, built once per secret and thread.
fn with_key<T>(secret: &[u8], f: impl FnOnce(&ring::hmac::Key) -> T) -> T {
    LAST_KEY.with(|cell| {
        let mut last = cell.borrow_mut();
        match &*last {
            Some((s, key)) if s.as_slice() == secret => f(key),
            _ => {
                let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret);
                let out = f(&key);
                *last = Some((secret.to_vec(), key));
                out
            }
        }
    })
}

/// A webhook request ready to send (and to resend: the body and its signature are fixed).
#[derive(Debug, Clone)]
pub struct WebhookRequest {
    /// Where and how (target, secret, kind).
    pub call: WebhookCall,
    /// `deliveryId`: the same on every attempt, and on a dead letter's retry.
    pub delivery_id: Uuid,
    /// The serialized body (with `deliveryId` and `timestamp`).
    pub body: Bytes,
    /// The `X-NoLag-Signature` value, when the app has a secret.
    pub signature: Option<String>,
}

impl WebhookRequest {
    /// A request with a fresh `deliveryId` and `timestamp` added to `payload`.
    pub fn new(call: WebhookCall, payload: Map<String, Value>) -> Self {
        Self::with_delivery_id(call, payload, Uuid::new_v4(), now_ms())
    }

    /// A request with a given `deliveryId` and `timestamp` (a dead letter's retry keeps both).
    pub fn with_delivery_id(
        call: WebhookCall,
        payload: Map<String, Value>,
        delivery_id: Uuid,
        timestamp_ms: u64,
    ) -> Self {
        let body = skua_core::webhook::json_body(payload, &delivery_id.to_string(), timestamp_ms);
        Self::from_body(call, delivery_id, body)
    }

    /// A request from an already serialized body (e.g. read back from an outbox); the body must
    /// already carry `deliveryId` and `timestamp`.
    pub fn from_body(call: WebhookCall, delivery_id: Uuid, body: Bytes) -> Self {
        let signature = call.secret.as_ref().map(|s: &WebhookSecret| sign(s.expose(), &body));
        Self { call, delivery_id, body, signature }
    }
}

/// Unix ms now.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use skua_core::webhook::{WebhookKind, WebhookTarget};

    use super::*;

    #[test]
    fn signature_is_hmac_sha256_hex() {
        // RFC 4231 test case 2.
        assert_eq!(
            sign(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn signature_v2_signs_time_dot_body() {
        // HMAC-SHA256 of "1700000000.{}" keyed "whsec_x" (Python's hmac module).
        assert_eq!(
            sign_v2(b"whsec_x", 1_700_000_000, b"{}"),
            "t=1700000000,v1=be8cb8325f2202445260a855532f967e30ad2a9394ce28da66ee02880ddcb661"
        );
    }

    #[test]
    fn a_cached_key_follows_the_secret() {
        let a = sign(b"Jefe", b"what do ya want for nothing?");
        assert_ne!(sign(b"other", b"what do ya want for nothing?"), a, "another secret, another key");
        assert_eq!(sign(b"Jefe", b"what do ya want for nothing?"), a);
    }

    #[test]
    fn body_carries_delivery_id_and_timestamp_and_is_signed() {
        let call = WebhookCall {
            kind: WebhookKind::Trigger,
            target: Arc::new(WebhookTarget { url: "http://x".into(), headers: vec![], timeout_ms: None }),
            secret: Some(WebhookSecret("s".into())),
            app_slug: "a".into(),
            room_name: "r".into(),
        };
        let mut m = Map::new();
        m.insert("topicName".into(), "t".into());
        let r = WebhookRequest::new(call, m);
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(v["deliveryId"], r.delivery_id.to_string());
        assert!(v["timestamp"].as_u64().unwrap() > 1_700_000_000_000);
        assert_eq!(r.signature.unwrap(), sign(b"s", &r.body));
    }
}
