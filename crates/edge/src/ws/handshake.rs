//! The server side of the WebSocket opening handshake (RFC 6455 4.2), done here rather than by
//! axum's `WebSocketUpgrade` so the upgraded socket can be wrapped before tungstenite reads it
//! ([`super::close_code`]). The checks and their answers are the ones axum made.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode, header};
use hyper::upgrade::OnUpgrade;

/// A valid upgrade request: its key and the socket once the 101 went out.
pub(super) struct Handshake {
    /// `Sec-WebSocket-Key`.
    key: HeaderValue,
    /// Resolves to the socket once the response is written.
    pub(super) on_upgrade: OnUpgrade,
}

/// The status and text answering a request that is not a valid upgrade.
pub(super) type Rejection = (StatusCode, &'static str);

/// Checks an HTTP/1.1 upgrade request (the front serves no HTTP/2), taking its upgrade handle;
/// the answer to send instead when it is not one.
pub(super) fn check<B>(req: &mut Request<B>) -> Result<Handshake, Rejection> {
    let headers = req.headers();
    if req.method() != Method::GET {
        return Err(reject(StatusCode::METHOD_NOT_ALLOWED, "Request method must be `GET`"));
    }
    if !header_contains(headers, &header::CONNECTION, "upgrade") {
        return Err(reject(StatusCode::BAD_REQUEST, "Connection header did not include 'upgrade'"));
    }
    if !header_eq(headers, &header::UPGRADE, "websocket") {
        return Err(reject(StatusCode::BAD_REQUEST, "`Upgrade` header did not include 'websocket'"));
    }
    let Some(key) = headers.get(header::SEC_WEBSOCKET_KEY).cloned() else {
        return Err(reject(StatusCode::BAD_REQUEST, "`Sec-WebSocket-Key` header missing"));
    };
    if !header_eq(headers, &header::SEC_WEBSOCKET_VERSION, "13") {
        return Err(reject(StatusCode::BAD_REQUEST, "`Sec-WebSocket-Version` header did not include '13'"));
    }
    let Some(on_upgrade) = req.extensions_mut().remove::<OnUpgrade>() else {
        return Err(reject(
            StatusCode::UPGRADE_REQUIRED,
            "WebSocket request couldn't be upgraded since no upgrade state was present",
        ));
    };
    Ok(Handshake { key, on_upgrade })
}

impl Handshake {
    /// The 101 that completes the handshake (no subprotocol, no extension).
    pub(super) fn accept(&self) -> Response<Body> {
        self.accept_with(None)
    }

    /// The 101 that completes the handshake, naming `protocol` (which the client offered).
    pub(super) fn accept_with(&self, protocol: Option<&'static str>) -> Response<Body> {
        let accept = tungstenite::handshake::derive_accept_key(self.key.as_bytes());
        let mut r = Response::new(Body::empty());
        *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        let h = r.headers_mut();
        h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        // Base64: always a valid header value.
        if let Ok(v) = HeaderValue::from_str(&accept) {
            h.insert(header::SEC_WEBSOCKET_ACCEPT, v);
        }
        if let Some(p) = protocol {
            h.insert(header::SEC_WEBSOCKET_PROTOCOL, HeaderValue::from_static(p));
        }
        r
    }
}

/// Whether the request offers `protocol` in `Sec-WebSocket-Protocol` (comma-separated
/// tokens, in one or more headers; compared exactly, as RFC 6455 4.2.2 tokens are).
pub(super) fn offers_protocol(headers: &HeaderMap, protocol: &str) -> bool {
    headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|p| p.trim() == protocol)
}

fn reject(status: StatusCode, text: &'static str) -> Rejection {
    (status, text)
}

fn header_eq(headers: &HeaderMap, key: &HeaderName, value: &str) -> bool {
    headers.get(key).is_some_and(|h| h.as_bytes().eq_ignore_ascii_case(value.as_bytes()))
}

fn header_contains(headers: &HeaderMap, key: &HeaderName, value: &str) -> bool {
    headers
        .get(key)
        .and_then(|h| std::str::from_utf8(h.as_bytes()).ok())
        .is_some_and(|h| h.to_ascii_lowercase().contains(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: Method, headers: &[(&str, &str)], upgradable: bool) -> Request<()> {
        let mut b = Request::builder().method(method).uri("/ws");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let mut req = b.body(()).expect("request");
        if upgradable {
            req.extensions_mut().insert(hyper::upgrade::on(Request::new(())));
        }
        req
    }

    const VALID: [(&str, &str); 4] = [
        ("connection", "keep-alive, Upgrade"),
        ("upgrade", "WebSocket"),
        ("sec-websocket-version", "13"),
        ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ];

    #[test]
    fn a_valid_request_is_accepted_with_the_rfc_6455_accept_key() {
        let mut req = request(Method::GET, &VALID, true);
        let hs = check(&mut req).unwrap_or_else(|r| panic!("refused: {r:?}"));
        let r = hs.accept();
        assert_eq!(r.status(), StatusCode::SWITCHING_PROTOCOLS);
        // RFC 6455 1.3's example.
        assert_eq!(r.headers()[header::SEC_WEBSOCKET_ACCEPT], "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
        assert_eq!(r.headers()[header::UPGRADE], "websocket");
        assert_eq!(r.headers()[header::CONNECTION], "upgrade");
    }

    #[test]
    fn a_subprotocol_is_found_among_the_offered_ones_and_named_in_the_101() {
        let mut headers = HeaderMap::new();
        headers.append(header::SEC_WEBSOCKET_PROTOCOL, HeaderValue::from_static("mqttv3.1, mqtt"));
        assert!(offers_protocol(&headers, "mqtt"));
        assert!(!offers_protocol(&headers, "mqt"));
        assert!(!offers_protocol(&HeaderMap::new(), "mqtt"));
        let mut req = request(Method::GET, &VALID, true);
        let hs = check(&mut req).unwrap_or_else(|r| panic!("refused: {r:?}"));
        assert_eq!(hs.accept_with(Some("mqtt")).headers()[header::SEC_WEBSOCKET_PROTOCOL], "mqtt");
        assert!(hs.accept().headers().get(header::SEC_WEBSOCKET_PROTOCOL).is_none());
    }

    #[test]
    fn invalid_requests_get_axums_answers() {
        let status = |req: &mut Request<()>| check(req).err().map(|(status, _)| status);
        assert_eq!(status(&mut request(Method::POST, &VALID, true)), Some(StatusCode::METHOD_NOT_ALLOWED));
        for missing in 0..VALID.len() {
            let headers: Vec<_> = VALID.iter().enumerate().filter(|(i, _)| *i != missing).map(|(_, h)| *h).collect();
            assert_eq!(status(&mut request(Method::GET, &headers, true)), Some(StatusCode::BAD_REQUEST), "{missing}");
        }
        let old = [VALID[0], VALID[1], ("sec-websocket-version", "8"), VALID[3]];
        assert_eq!(status(&mut request(Method::GET, &old, true)), Some(StatusCode::BAD_REQUEST));
        assert_eq!(status(&mut request(Method::GET, &VALID, false)), Some(StatusCode::UPGRADE_REQUIRED));
    }
}
