//! [`WebhookReceiver`]: a real HTTP server (axum on `127.0.0.1:0`) that records every request
//! (method, path, headers, body) and answers as told, per path: ok with a JSON body, slow, an
//! error status, a non-JSON body, a huge body, or never. [`refusing_url`] gives a URL whose port
//! refuses connections.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How the receiver answers.
#[derive(Debug, Clone)]
pub enum Mode {
    /// 200 with this JSON body.
    Ok(serde_json::Value),
    /// 200 with this JSON body after a delay.
    Slow(Duration, serde_json::Value),
    /// This status with an empty body.
    Status(u16),
    /// 200 `text/plain` "not json".
    NonJson,
    /// 200 `application/json` streamed (chunked, no length) of this many bytes.
    Huge(usize),
    /// Never answers.
    Hang,
}

/// One recorded request.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// `POST`, …
    pub method: String,
    /// The path.
    pub path: String,
    /// Headers, names lowercase, in order.
    pub headers: Vec<(String, String)>,
    /// The raw body.
    pub body: Bytes,
    /// When the whole request had arrived (before it was answered).
    pub at: std::time::Instant,
}

impl RecordedRequest {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(k, _)| *k == name).map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    ///
    /// # Panics
    /// When it is not JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("webhook body is JSON")
    }

    /// Whether `X-NoLag-Signature` is `sha256=<hex>` of the HMAC-SHA256 of the raw body with
    /// `secret` (N42), checked here as a receiver would, independently of the signing code.
    pub fn signature_valid(&self, secret: &str) -> bool {
        let Some(hex) = self.header("x-nolag-signature").and_then(|v| v.strip_prefix("sha256=")) else {
            return false;
        };
        let Some(tag) = unhex(hex) else { return false };
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
        ring::hmac::verify(&key, &self.body, &tag).is_ok()
    }
}

/// Lower-case or upper-case hex digits as bytes; `None` for an odd length or another character.
fn unhex(s: &str) -> Option<Vec<u8>> {
    let digit = |c: u8| char::from(c).to_digit(16).and_then(|d| u8::try_from(d).ok());
    let s = s.as_bytes();
    if !s.len().is_multiple_of(2) {
        return None;
    }
    s.chunks(2).map(|p| Some(digit(p[0])? << 4 | digit(p[1])?)).collect()
}

#[derive(Default)]
struct Shared {
    // std Mutex: short sections, never across an await.
    modes: Mutex<(Option<Mode>, HashMap<String, Mode>)>,
    requests: Mutex<Vec<RecordedRequest>>,
    arrived: Notify,
}

/// A recording HTTP receiver; dropping it stops the server.
pub struct WebhookReceiver {
    addr: std::net::SocketAddr,
    shared: Arc<Shared>,
    stop: CancellationToken,
}

impl Drop for WebhookReceiver {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl WebhookReceiver {
    /// Starts a receiver answering `mode` on every path.
    ///
    /// # Panics
    /// When it cannot bind.
    pub async fn start(mode: Mode) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind receiver");
        let addr = listener.local_addr().expect("receiver address");
        let shared = Arc::new(Shared::default());
        shared.modes.lock().unwrap().0 = Some(mode);
        let stop = CancellationToken::new();
        let app = axum::Router::new().fallback(handle).with_state(shared.clone());
        let token = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).with_graceful_shutdown(token.cancelled_owned()).await;
        });
        Self { addr, shared, stop }
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Answers `mode` on every path without its own mode.
    pub fn set_mode(&self, mode: Mode) {
        self.shared.modes.lock().unwrap().0 = Some(mode);
    }

    /// Answers `mode` on `path`.
    pub fn set_path_mode(&self, path: &str, mode: Mode) {
        self.shared.modes.lock().unwrap().1.insert(path.to_owned(), mode);
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// Waits until at least `n` requests have arrived, and returns them all.
    ///
    /// # Panics
    /// After 10 s with fewer.
    pub async fn wait_for(&self, n: usize) -> Vec<RecordedRequest> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let notified = self.shared.arrived.notified();
            let got = self.requests();
            if got.len() >= n {
                return got;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                panic!("waited 10 s for {n} webhook requests; got {}: {got:?}", got.len());
            }
        }
    }
}

/// A URL on a port that refuses connections (bound, then released).
///
/// # Panics
/// When it cannot bind.
pub async fn refusing_url(path: &str) -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = l.local_addr().expect("address");
    drop(l);
    format!("http://{addr}{path}")
}

async fn handle(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, 16 << 20).await.unwrap_or_default();
    let path = parts.uri.path().to_owned();
    let headers = parts
        .headers
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
        .collect();
    shared.requests.lock().unwrap().push(RecordedRequest {
        method: parts.method.to_string(),
        path: path.clone(),
        headers,
        body,
        at: std::time::Instant::now(),
    });
    shared.arrived.notify_waiters();
    let mode = {
        let m = shared.modes.lock().unwrap();
        m.1.get(&path).cloned().or_else(|| m.0.clone()).unwrap_or(Mode::Status(200))
    };
    let json = |v: &serde_json::Value| {
        let mut r = Response::new(Body::from(v.to_string()));
        r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        r
    };
    match mode {
        Mode::Ok(v) => json(&v),
        Mode::Slow(d, v) => {
            tokio::time::sleep(d).await;
            json(&v)
        }
        Mode::Status(s) => {
            let mut r = Response::new(Body::empty());
            *r.status_mut() = StatusCode::from_u16(s).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            r
        }
        Mode::NonJson => {
            let mut r = Response::new(Body::from("not json"));
            r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
            r
        }
        Mode::Huge(n) => {
            const CHUNK: usize = 64 * 1024;
            let chunks = (0..n.div_ceil(CHUNK))
                .map(move |i| Ok::<_, std::convert::Infallible>(Bytes::from(vec![b' '; CHUNK.min(n - i * CHUNK)])));
            let mut r = Response::new(Body::from_stream(futures_util::stream::iter(chunks)));
            r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            r
        }
        Mode::Hang => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::RecordedRequest;

    fn signed(header: &str) -> RecordedRequest {
        RecordedRequest {
            method: "POST".into(),
            path: "/hook".into(),
            headers: vec![("x-nolag-signature".into(), header.into())],
            body: bytes::Bytes::from_static(b"{\"a\":1}"),
            at: std::time::Instant::now(),
        }
    }

    #[test]
    fn signature_is_checked_against_the_secret_and_the_body() {
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, b"s3cret");
        let tag = ring::hmac::sign(&key, b"{\"a\":1}");
        let hex: String = tag.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        assert!(signed(&format!("sha256={hex}")).signature_valid("s3cret"));
        assert!(signed(&format!("sha256={}", hex.to_uppercase())).signature_valid("s3cret"));
        assert!(!signed(&format!("sha256={hex}")).signature_valid("other"));
        assert!(!signed(&hex).signature_valid("s3cret"), "the sha256= prefix is required");
        assert!(!signed(&format!("sha256={}", &hex[1..])).signature_valid("s3cret"), "odd length");
        assert!(!signed("sha256=zz").signature_valid("s3cret"));
    }
}
