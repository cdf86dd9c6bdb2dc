//! `WsClient`: a raw NoLag protocol client for tests, and `Frame`, a decoded server frame.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use rmpv::Value;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// How long [`WsClient`] waits for an expected frame before failing the test.
pub const FRAME_TIMEOUT: Duration = Duration::from_secs(5);

/// Builds a msgpack map value: `frame! { "type" => "publish", "topic" => "a/b/c" }`.
#[macro_export]
macro_rules! frame {
    ($($k:expr => $v:expr),* $(,)?) => {
        ::rmpv::Value::Map(vec![$((::rmpv::Value::from($k), ::rmpv::Value::from($v))),*])
    };
}

/// Encodes a value as msgpack bytes.
pub fn encode(v: &Value) -> Vec<u8> {
    let mut buf = Vec::new();
    rmpv::encode::write_value(&mut buf, v).expect("encoding to a Vec cannot fail");
    buf
}

/// A decoded server frame (a msgpack map).
#[derive(Debug, Clone, PartialEq)]
pub struct Frame(pub Value);

impl Frame {
    /// The value of `key`, or `Nil` when absent.
    pub fn get(&self, key: &str) -> &Value {
        static NIL: Value = Value::Nil;
        match &self.0 {
            Value::Map(m) => m.iter().find(|(k, _)| k.as_str() == Some(key)).map_or(&NIL, |(_, v)| v),
            _ => &NIL,
        }
    }

    /// Whether `key` is present.
    pub fn has(&self, key: &str) -> bool {
        matches!(&self.0, Value::Map(m) if m.iter().any(|(k, _)| k.as_str() == Some(key)))
    }

    /// `type`.
    pub fn ty(&self) -> &str {
        self.get("type").as_str().unwrap_or("")
    }

    /// A string field (panics with context when absent or not a string).
    pub fn str(&self, key: &str) -> &str {
        self.get(key).as_str().unwrap_or_else(|| panic!("frame has no string {key:?}: {self:?}"))
    }

    /// An integer field.
    pub fn int(&self, key: &str) -> i64 {
        self.get(key).as_i64().unwrap_or_else(|| panic!("frame has no integer {key:?}: {self:?}"))
    }

    /// The keys, in encoded order.
    pub fn keys(&self) -> Vec<String> {
        match &self.0 {
            Value::Map(m) => m.iter().filter_map(|(k, _)| k.as_str().map(str::to_owned)).collect(),
            _ => Vec::new(),
        }
    }
}

/// What a client saw next.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A decoded frame.
    Frame(Frame),
    /// An empty binary frame (heartbeat echo).
    Heartbeat,
    /// A close frame: code and reason.
    Close(u16, String),
    /// The connection ended without a close frame.
    Ended,
}

/// A raw protocol client.
pub struct WsClient {
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
}

impl std::fmt::Debug for WsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WsClient").finish_non_exhaustive()
    }
}

impl WsClient {
    /// Connects to `url`.
    pub async fn connect(url: &str) -> Self {
        let (ws, _) = tokio_tungstenite::connect_async(url).await.unwrap_or_else(|e| panic!("connect {url}: {e}"));
        Self { ws }
    }

    /// Sends a msgpack value as a binary frame.
    pub async fn send(&mut self, v: Value) {
        self.send_bytes(encode(&v)).await;
    }

    /// Sends a msgpack value as a binary frame; `false` when the connection is already gone
    /// (the server closed it first), for clients that reconnect on that.
    pub async fn try_send(&mut self, v: Value) -> bool {
        self.ws.send(Message::Binary(encode(&v).into())).await.is_ok()
    }

    /// Sends raw bytes as a binary frame.
    pub async fn send_bytes(&mut self, b: Vec<u8>) {
        self.ws.send(Message::Binary(b.into())).await.expect("send frame");
    }

    /// Sends a text frame.
    pub async fn send_text(&mut self, s: &str) {
        self.ws.send(Message::Text(s.into())).await.expect("send text");
    }

    /// Sends a heartbeat (empty binary frame).
    pub async fn heartbeat(&mut self) {
        self.send_bytes(Vec::new()).await;
    }

    /// The next event, waiting at most `wait`; `None` on timeout.
    pub async fn next_event_within(&mut self, wait: Duration) -> Option<Event> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let msg = match tokio::time::timeout_at(deadline, self.ws.next()).await {
                Err(_) => return None,
                Ok(None) => return Some(Event::Ended),
                Ok(Some(Err(_))) => return Some(Event::Ended),
                Ok(Some(Ok(m))) => m,
            };
            return Some(match msg {
                Message::Binary(b) if b.is_empty() => Event::Heartbeat,
                Message::Binary(b) => {
                    let v = rmpv::decode::read_value(&mut &b[..])
                        .unwrap_or_else(|e| panic!("server sent undecodable msgpack: {e}"));
                    assert!(matches!(v, Value::Map(_)), "server frames are maps (N1): {v:?}");
                    Event::Frame(Frame(v))
                }
                Message::Close(Some(CloseFrame { code, reason })) => Event::Close(code.into(), reason.to_string()),
                Message::Close(None) => Event::Close(1005, String::new()),
                Message::Text(t) => panic!("server sent a text frame: {t}"),
                Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => continue,
            });
        }
    }

    /// The next event (fails the test after 5 s).
    pub async fn next_event(&mut self) -> Event {
        self.next_event_within(FRAME_TIMEOUT).await.expect("no event from the server within 5 s")
    }

    /// The next frame; fails on heartbeats, closes or timeouts.
    pub async fn next(&mut self) -> Frame {
        match self.next_event().await {
            Event::Frame(f) => f,
            other => panic!("expected a frame, got {other:?}"),
        }
    }

    /// The next frame, which must have `type` `ty`.
    pub async fn expect(&mut self, ty: &str) -> Frame {
        let f = self.next().await;
        assert_eq!(f.ty(), ty, "unexpected frame: {f:?}");
        f
    }

    /// The next frame, which must be an error with `error` = `err`.
    pub async fn expect_error(&mut self, err: &str) -> Frame {
        let f = self.expect("error").await;
        assert_eq!(f.str("error"), err, "unexpected error: {f:?}");
        f
    }

    /// Skips frames until one of `type` `ty` arrives (fails after 5 s overall).
    pub async fn next_of(&mut self, ty: &str) -> Frame {
        self.next_of_within(ty, FRAME_TIMEOUT).await
    }

    /// Skips frames until one of `type` `ty` arrives (fails after `wait` overall).
    pub async fn next_of_within(&mut self, ty: &str, wait: Duration) -> Frame {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next_event_within(left).await {
                Some(Event::Frame(f)) if f.ty() == ty => return f,
                Some(Event::Frame(_) | Event::Heartbeat) => {}
                other => panic!("waiting for {ty:?}, got {other:?}"),
            }
        }
    }

    /// Skips frames until one whose `type` is one of `tys` arrives (fails after `wait` overall).
    pub async fn next_of_within_any(&mut self, tys: &[&str], wait: Duration) -> Frame {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next_event_within(left).await {
                Some(Event::Frame(f)) if tys.contains(&f.ty()) => return f,
                Some(Event::Frame(_) | Event::Heartbeat) => {}
                other => panic!("waiting for one of {tys:?}, got {other:?}"),
            }
        }
    }

    /// Sends a heartbeat and asserts the echo is the next thing to arrive: proves that
    /// nothing else was queued for this client before it.
    pub async fn assert_nothing_pending(&mut self) {
        self.heartbeat().await;
        match self.next_event().await {
            Event::Heartbeat => {}
            other => panic!("expected nothing before the heartbeat echo, got {other:?}"),
        }
    }

    /// The raw bytes of the next binary frame (heartbeats skipped).
    pub async fn next_raw(&mut self) -> Vec<u8> {
        loop {
            let m = tokio::time::timeout(FRAME_TIMEOUT, self.ws.next()).await.expect("no frame within 5 s");
            match m {
                Some(Ok(Message::Binary(b))) if !b.is_empty() => return b.to_vec(),
                Some(Ok(Message::Binary(_) | Message::Ping(_) | Message::Pong(_))) => {}
                other => panic!("expected a binary frame, got {other:?}"),
            }
        }
    }

    /// Sends a heartbeat and returns every frame that arrives before its echo: everything
    /// queued for this client up to now.
    pub async fn drain_frames(&mut self) -> Vec<Frame> {
        self.heartbeat().await;
        let mut out = Vec::new();
        loop {
            match self.next_event().await {
                Event::Heartbeat => return out,
                Event::Frame(f) => out.push(f),
                other => panic!("draining, got {other:?}"),
            }
        }
    }

    /// Waits for the server's close frame and returns (code, reason).
    pub async fn expect_close(&mut self) -> (u16, String) {
        let deadline = tokio::time::Instant::now() + FRAME_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next_event_within(left).await {
                Some(Event::Close(c, r)) => return (c, r),
                Some(Event::Frame(_) | Event::Heartbeat) => {}
                other => panic!("expected a close frame, got {other:?}"),
            }
        }
    }

    /// Authenticates at protocol version 2 with an optional `clientId` and the `reconnect` flag;
    /// asserts success and returns the reply.
    pub async fn auth_session(&mut self, token: &str, client_id: Option<&str>, reconnect: bool) -> Frame {
        let mut f = vec![
            (Value::from("type"), Value::from("auth")),
            (Value::from("token"), Value::from(token)),
            (Value::from("protocolVersion"), Value::from(2)),
            (Value::from("reconnect"), Value::from(reconnect)),
        ];
        if let Some(id) = client_id {
            f.push((Value::from("clientId"), Value::from(id)));
        }
        self.send(Value::Map(f)).await;
        let reply = self.expect("auth").await;
        assert_eq!(reply.get("success"), &Value::Boolean(true), "{reply:?}");
        reply
    }

    /// Sends `auth` and returns the reply.
    pub async fn auth(&mut self, token: &str, version: Option<u32>) -> Frame {
        let mut f = vec![(Value::from("type"), Value::from("auth")), (Value::from("token"), Value::from(token))];
        if let Some(v) = version {
            f.push((Value::from("protocolVersion"), Value::from(v)));
        }
        self.send(Value::Map(f)).await;
        self.expect("auth").await
    }

    /// Authenticates and asserts success.
    pub async fn auth_ok(&mut self, token: &str, version: u32) -> Frame {
        let f = self.auth(token, Some(version)).await;
        assert_eq!(f.get("success"), &Value::Boolean(true), "auth failed: {f:?}");
        f
    }

    /// Subscribes and waits for `subscribed`.
    pub async fn subscribe(&mut self, topic: &str) {
        self.send(frame! {"type" => "subscribe", "topic" => topic}).await;
        let f = self.expect("subscribed").await;
        assert_eq!(f.str("topic"), topic);
    }

    /// Publishes with a msgRef and waits for `published`.
    pub async fn publish_acked(&mut self, topic: &str, data: Value) {
        self.send(frame! {"type" => "publish", "topic" => topic, "data" => data, "msgRef" => "ack"}).await;
        let f = self.expect("published").await;
        assert_eq!(f.str("msgRef"), "ack");
    }

    /// Closes the connection politely.
    pub async fn close(mut self) {
        let _ = self.ws.close(None).await;
    }
}
