//! Hydration on subscribe (N43): the request to the app's hydration webhook, posted through
//! the node's webhook seam ([`Poster`]: the server plugs in `skua-webhooks`; the engine knows no
//! HTTP) with up to 3 attempts within the webhook's timeout, its JSON answer turned into one
//! MessagePack value; and the [`Hold`] that keeps a subscription's live frames back until its
//! `hydration` frame is queued or has failed, so the client sees the state before the changes
//! after it.
//!
//! The held frames are bounded by the connection's outbound bounds (`outbound_queue_messages`,
//! `outbound_queue_bytes`): one more closes the connection 4008 like an overflowing queue.
//! Logged messages of a durable subscription are held too, where they already wait: its
//! durable task starts `held` and delivers nothing (they stay pending in the store) until the
//! hydration's `after` step resumes it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;
use serde_json::{Map, Value as Json};
use skua_core::webhook::{Attempts, CALL_RETRY_DELAYS, Post, Poster, WebhookCall};
use skua_core::{ActorId, ActorType, ProjectId};
use skua_protocol::{ServerFrame, ServerFrameKind};

use crate::metrics::Metrics;
use crate::outbound::ConnHandle;

/// What a hydration webhook is told (N43); the sender adds `deliveryId` and `timestamp`.
#[derive(Debug, Clone)]
pub struct HydrationRequest {
    /// The webhook (target, secret) and the app's and room's names.
    pub call: WebhookCall,
    /// `projectId`.
    pub project_id: ProjectId,
    /// `room`: the room slug as the client addresses it (never `<scope>~<room>`).
    pub room: Arc<str>,
    /// `topicName`: the bare topic name.
    pub topic_name: Arc<str>,
    /// `actorId`.
    pub actor_id: ActorId,
    /// `actorType`.
    pub actor_type: ActorType,
    /// `clientId`, for a session that has one.
    pub client_id: Option<String>,
    /// `scope`: `{accessScopeId, slug, name}` of the subscription's access scope, or `null`.
    pub scope: serde_json::Value,
}

/// Why a subscription got no hydration frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {detail}")]
pub struct HydrationError {
    /// A label from a fixed set (`timeout`, `status`, `transport`, `refused`, `too_large`,
    /// `not_json`, `shutdown`): the `skua_hydrations_total` result.
    pub reason: &'static str,
    /// What happened, for the log.
    pub detail: String,
}

impl HydrationRequest {
    /// The webhook body (without `deliveryId` and `timestamp`): `{projectId, app, room,
    /// roomName, topicName, actorId, actorType, clientId?, scope}` (N43).
    pub fn payload(&self) -> Map<String, Json> {
        let mut m = Map::new();
        m.insert("projectId".into(), self.project_id.as_str().into());
        m.insert("app".into(), (*self.call.app_slug).into());
        m.insert("room".into(), (*self.room).into());
        m.insert("roomName".into(), (*self.call.room_name).into());
        m.insert("topicName".into(), (*self.topic_name).into());
        m.insert("actorId".into(), self.actor_id.as_str().into());
        m.insert("actorType".into(), self.actor_type.as_str().into());
        if let Some(c) = &self.client_id {
            m.insert("clientId".into(), c.as_str().into());
        }
        m.insert("scope".into(), self.scope.clone());
        m
    }
}

/// Posts `request` through `poster` (3 attempts on 5xx and transport errors, 1 s then 2 s
/// apart, all within the webhook's timeout) and turns its 2xx JSON answer into one encoded
/// MessagePack value (the `hydration` frame's `data`).
///
/// # Errors
/// [`HydrationError`] for a timeout, a non-2xx answer, a body that is not JSON, …
pub async fn hydrate(poster: &dyn Poster, request: &HydrationRequest) -> Result<Bytes, HydrationError> {
    let call = &request.call;
    let delivery_id = uuid::Uuid::new_v4().to_string();
    let body = skua_core::webhook::json_body(request.payload(), &delivery_id, crate::clock::now_unix_ms());
    let post =
        Post { kind: call.kind, target: &call.target, secret: call.secret.as_ref(), delivery_id: &delivery_id, body };
    let attempts = Attempts::Within { delays: &CALL_RETRY_DELAYS, budget: call.target.timeout(call.kind) };
    let answer =
        poster.post(post, attempts).await.map_err(|e| HydrationError { reason: e.outcome, detail: e.error })?;
    let json: Json = serde_json::from_slice(&answer.body).map_err(|e| HydrationError {
        reason: "not_json",
        detail: format!("HTTP {} answer ({} bytes) is not JSON: {e}", answer.status, answer.body.len()),
    })?;
    let mut out = Vec::with_capacity(answer.body.len());
    rmpv::encode::write_value(&mut out, &to_msgpack(&json))
        .map_err(|e| HydrationError { reason: "not_json", detail: e.to_string() })?;
    Ok(Bytes::from(out))
}

/// A JSON value as MessagePack: integers stay integers, other numbers become float64.
pub fn to_msgpack(v: &Json) -> rmpv::Value {
    match v {
        Json::Null => rmpv::Value::Nil,
        Json::Bool(b) => rmpv::Value::Boolean(*b),
        Json::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => rmpv::Value::from(u),
            (None, Some(i)) => rmpv::Value::from(i),
            _ => rmpv::Value::F64(n.as_f64().unwrap_or(0.0)),
        },
        Json::String(s) => rmpv::Value::from(s.as_str()),
        Json::Array(a) => rmpv::Value::Array(a.iter().map(to_msgpack).collect()),
        Json::Object(o) => {
            rmpv::Value::Map(o.iter().map(|(k, v)| (rmpv::Value::from(k.as_str()), to_msgpack(v))).collect())
        }
    }
}

#[derive(Debug, Default)]
struct Held {
    released: bool,
    frames: VecDeque<Bytes>,
    bytes: usize,
}

/// A subscription's live frames, kept back while its hydration is under way.
#[derive(Debug)]
pub struct Hold {
    released: AtomicBool,
    // std Mutex: a push or the one release, never across an await.
    held: Mutex<Held>,
    max_frames: usize,
    max_bytes: usize,
}

impl Hold {
    /// A hold bounded like an outbound queue of `max_frames` frames and `max_bytes` bytes.
    pub fn new(max_frames: usize, max_bytes: usize) -> Arc<Self> {
        Arc::new(Self { released: AtomicBool::new(false), held: Mutex::default(), max_frames, max_bytes })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queues `frame` on `conn`, or keeps it while the hold lasts. `false` when it was neither
    /// (the connection is closing, or this frame overflowed: the connection closes 4008).
    pub fn push(&self, conn: &ConnHandle, frame: Bytes) -> bool {
        if self.released.load(Ordering::Acquire) {
            return conn.push_uncounted(frame);
        }
        let mut h = self.lock();
        if h.released {
            drop(h);
            return conn.push_uncounted(frame);
        }
        if h.frames.len() >= self.max_frames || (h.bytes + frame.len() > self.max_bytes && h.bytes > 0) {
            drop(h);
            conn.overflow();
            return false;
        }
        h.bytes += frame.len();
        h.frames.push_back(frame);
        true
    }

    /// Queues `first` (the hydration frame, when there is one), then every held frame in order,
    /// and stops holding.
    pub fn release(&self, conn: &ConnHandle, first: Option<Bytes>) {
        let mut h = self.lock();
        if let Some(f) = first {
            conn.push(ServerFrameKind::Hydration, f);
        }
        for f in h.frames.drain(..) {
            conn.push_uncounted(f);
        }
        h.bytes = 0;
        h.released = true;
        self.released.store(true, Ordering::Release);
    }
}

/// What runs once a hold is released (a durable subscription's resume).
pub type AfterRelease = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Posts one subscription's hydration request through `poster` and releases its `hold`: with the `hydration` frame
/// when the answer came and fits `max_data` bytes, without one otherwise (logged, counted);
/// then runs `after`. Nothing is sent (and `after` does not run) when the subscription went
/// meanwhile (its hold is gone) or the connection closed.
pub async fn run(
    poster: Arc<dyn Poster>,
    request: HydrationRequest,
    conn: Arc<ConnHandle>,
    hold: Weak<Hold>,
    metrics: Arc<Metrics>,
    max_data: usize,
    after: Option<AfterRelease>,
) {
    let topic = request.topic_name.clone();
    let result = tokio::select! {
        r = hydrate(poster.as_ref(), &request) => r,
        () = conn.closed() => return,
    };
    let Some(hold) = hold.upgrade() else {
        metrics.hydrations.inc("gone");
        return;
    };
    match result {
        Ok(data) if data.len() <= max_data => {
            hold.release(&conn, Some(ServerFrame::Hydration { topic: &topic, data: &data }.encode()));
            metrics.hydrations.inc("ok");
        }
        Ok(data) => {
            tracing::warn!(%topic, bytes = data.len(), max = max_data, "Hydration data is larger than a frame allows; no hydration frame.");
            hold.release(&conn, None);
            metrics.hydrations.inc("too_large");
        }
        Err(e) => {
            tracing::warn!(%topic, reason = e.reason, detail = %e.detail, "Hydration webhook failed; no hydration frame.");
            hold.release(&conn, None);
            metrics.hydrations.inc(e.reason);
        }
    }
    drop(hold);
    if let Some(after) = after {
        after.await;
    }
}

#[cfg(test)]
mod tests {
    use skua_core::ConnId;

    use super::*;
    use crate::outbound::CloseRequest;

    #[test]
    fn json_becomes_the_same_msgpack_value() {
        let j: Json = serde_json::from_str(r#"{"a":[1,-2,1.5,"x",null,true],"b":{}}"#).unwrap();
        let m = to_msgpack(&j);
        let mut buf = Vec::new();
        rmpv::encode::write_value(&mut buf, &m).unwrap();
        let back = rmpv::decode::read_value(&mut buf.as_slice()).unwrap();
        assert_eq!(back["a"][0].as_u64(), Some(1));
        assert_eq!(back["a"][1].as_i64(), Some(-2));
        assert_eq!(back["a"][2].as_f64(), Some(1.5));
        assert_eq!(back["a"][3].as_str(), Some("x"));
        assert!(back["a"][4].is_nil());
        assert!(back["b"].as_map().is_some_and(Vec::is_empty));
    }

    #[test]
    fn held_frames_follow_the_hydration_frame_in_order() {
        let (conn, mut out) = ConnHandle::new(ConnId(1), 16, 1 << 20, Arc::new(Metrics::default()));
        let hold = Hold::new(16, 1 << 20);
        assert!(hold.push(&conn, Bytes::from_static(b"m1")));
        assert!(hold.push(&conn, Bytes::from_static(b"m2")));
        assert!(out.try_recv(&conn).is_none(), "held, not queued");
        hold.release(&conn, Some(Bytes::from_static(b"h")));
        assert!(hold.push(&conn, Bytes::from_static(b"m3")));
        let got: Vec<Bytes> = std::iter::from_fn(|| out.try_recv(&conn)).collect();
        assert_eq!(got, [&b"h"[..], b"m1", b"m2", b"m3"]);
    }

    #[test]
    fn a_hold_past_the_outbound_bounds_closes_the_connection_as_slow() {
        let (conn, _out) = ConnHandle::new(ConnId(1), 16, 1 << 20, Arc::new(Metrics::default()));
        let hold = Hold::new(2, 1 << 20);
        assert!(hold.push(&conn, Bytes::from_static(b"a")));
        assert!(hold.push(&conn, Bytes::from_static(b"b")));
        assert!(!hold.push(&conn, Bytes::from_static(b"c")));
        assert_eq!(conn.close_requested(), Some(CloseRequest::SLOW_CONSUMER));
    }
}
