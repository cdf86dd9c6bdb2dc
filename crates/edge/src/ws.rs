//! The HTTP side: `/ws` upgrades, `/healthz`, `/readyz`, `/metrics`; and each connection's
//! reader loop and writer task.

use std::net::IpAddr;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use axum::Router;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use hyper_util::rt::TokioIo;
use skua_protocol::{ClientFrame, DecodeError};
use tokio::time::{Instant, sleep_until};
use tokio_tungstenite::WebSocketStream;
use tracing::Instrument;
use tungstenite::Message;
use tungstenite::protocol::frame::CloseFrame;
use tungstenite::protocol::{Role, WebSocketConfig};

use crate::clock::{deadline_of, next_change, now_unix_s};
use crate::contain::contained;
use crate::front::ConnInfo;
use crate::outbound::{CloseRequest, ConnHandle, Outbox, Take};
use crate::session::Session;
use crate::state::EdgeState;

mod handshake;

use crate::close_code::{BadCloseCode, CloseCodeCheck};

pub(crate) use crate::close_code::WebSocket;

/// Most frames the writer sends before flushing the socket.
const WRITE_BATCH: usize = 64;
/// tungstenite's read buffer per connection, kept while the connection lives.
const READ_BUFFER: usize = 1024;

/// The routers other doors serve on the edge's listener: the REST API under `/v1`, the
/// admin dashboard under `/admin` and a door served over WebSocket at `/mqtt` (each answers 404
/// when absent).
#[derive(Clone, Default)]
pub struct ApiRoutes {
    /// The REST API's routes (their paths start with `/v1`).
    pub api: Option<Router>,
    /// The admin dashboard's routes (their paths start with `/admin`).
    pub admin: Option<Router>,
    /// The door served over WebSocket at `/mqtt` (MQTT over WebSocket, issue 37), given when
    /// the MQTT door is enabled.
    pub mqtt_ws: Option<Arc<dyn crate::door::WsDoor>>,
}

impl std::fmt::Debug for ApiRoutes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiRoutes")
            .field("api", &self.api)
            .field("admin", &self.admin)
            .field("mqtt_ws", &self.mqtt_ws.as_ref().map(|d| d.subprotocol()))
            .finish()
    }
}

/// The edge's HTTP routes, with `routes` under `/v1` and `/admin`; `/metrics` only when it has
/// no listener of its own. Served by [`crate::front::serve`], which gives every request its
/// socket's [`ConnInfo`].
pub fn router(state: Arc<EdgeState>, routes: ApiRoutes) -> Router {
    let door = routes.mqtt_ws.clone();
    let routes = Arc::new(routes);
    let router = Router::new()
        .route("/ws", any(ws_upgrade))
        .route(
            "/mqtt",
            any(move |st: State<Arc<EdgeState>>, conn: Extension<ConnInfo>, req: axum::extract::Request| {
                door_upgrade(door.clone(), st, conn, req)
            }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/healthz/backends", get(backends))
        // A fallback rather than a `/v1/{*rest}` route: the API router's path parameters must
        // be the only ones its handlers see.
        .fallback(move |req: axum::extract::Request| api(routes.clone(), req));
    let router = if state.config.metrics_separate { router } else { router.route("/metrics", get(metrics)) };
    router.with_state(state)
}

/// The routes of the separate metrics listener (`metrics_listen`): `/metrics` only.
pub fn metrics_router(state: Arc<EdgeState>) -> Router {
    Router::new().route("/metrics", get(metrics)).with_state(state)
}

/// `/v1…`: handed to the API router ([`ApiRoutes::api`]); `/admin…` to the admin dashboard's
/// ([`ApiRoutes::admin`]), with the client's address as axum's `ConnectInfo` (port 0);
/// anything else 404.
async fn api(routes: Arc<ApiRoutes>, mut req: axum::extract::Request) -> Response {
    let path = req.uri().path();
    let under = |prefix: &str| path == prefix || path.strip_prefix(prefix).is_some_and(|r| r.starts_with('/'));
    let router = if under("/v1") {
        routes.api.as_ref()
    } else if under("/admin") {
        if let Some(conn) = req.extensions().get::<ConnInfo>().cloned() {
            let peer = std::net::SocketAddr::new(conn.client(), 0);
            req.extensions_mut().insert(axum::extract::ConnectInfo(peer));
        }
        routes.admin.as_ref()
    } else {
        None
    };
    match router {
        Some(router) => {
            let mut router = router.clone();
            match tower_service::Service::call(&mut router, req).await {
                Ok(r) => r,
                Err(never) => match never {},
            }
        }
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// `/readyz`: whether load balancers should send this node new clients: 503 `draining` once
/// it drains, 503 `bus_unreachable` while its own bus link is down but a peer's is up, 200
/// otherwise. A full node (`max_connections`, the open-file budget) stays ready: its upgrades
/// get 503 with `Retry-After`, and clients retry through the balancer to another edge, while a
/// balancer that saw it unhealthy might reset its open connections. A shared backend's
/// outage is deliberately not part of it: the bus, Redis and the store are shared by every
/// node, so failing readiness for them would empty every endpoint at once; they are exported
/// as `skua_backend_up` and shown by `/healthz/backends` instead.
async fn readyz(State(st): State<Arc<EdgeState>>) -> Response {
    match st.not_ready().await {
        Some(why) => (StatusCode::SERVICE_UNAVAILABLE, why).into_response(),
        None => "ready".into_response(),
    }
}

/// `/healthz/backends`: each backend slot `up` or `down`, one per line; 503 when one is down.
/// For people and alerts, not for probes (see [`readyz`]).
async fn backends(State(st): State<Arc<EdgeState>>) -> Response {
    let slots = st.backends_up();
    let body: String =
        slots.iter().map(|(slot, up)| format!("{slot}: {}\n", if *up { "up" } else { "down" })).collect();
    let status = if slots.iter().all(|(_, up)| *up) { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, body).into_response()
}

async fn metrics(State(st): State<Arc<EdgeState>>, headers: HeaderMap) -> Response {
    if let Some(token) = &st.config.metrics_token
        && !token.verify(headers.get(header::AUTHORIZATION))
    {
        st.metrics.front_refusals.inc(crate::front::reason::METRICS_UNAUTHORIZED);
        return (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Bearer")], "bearer token required")
            .into_response();
    }
    ([(header::CONTENT_TYPE, crate::prom::CONTENT_TYPE)], crate::prom::render(&st)).into_response()
}

/// The checks every upgrade passes after the handshake's own (`/ws` and the doors'): not
/// draining, an allowed `Origin`, room under the open-file budget, then the socket's connection
/// slot and its client address's count; the refusal to answer otherwise.
fn admit_upgrade(
    st: &EdgeState,
    conn: &ConnInfo,
    headers: &HeaderMap,
) -> Result<crate::front::Admitted, Box<Response>> {
    if st.is_draining() {
        return Err(Box::new(crate::front::refusal(StatusCode::SERVICE_UNAVAILABLE, "node is draining")));
    }
    let origin = headers.get(header::ORIGIN).map(axum::http::HeaderValue::as_bytes);
    if !crate::front::origin_allowed(&st.config.allowed_origins, origin) {
        st.metrics.front_refusals.inc(crate::front::reason::ORIGIN);
        return Err(Box::new(crate::front::refusal(StatusCode::FORBIDDEN, "origin not allowed")));
    }
    // Before the limit rather than at it: past it accepts (and the store, bus, webhooks) fail.
    if st.over_fd_budget() {
        return Err(Box::new(crate::front::fd_limit_refusal(&st.metrics)));
    }
    // The connection slot (and the client address's count) taken when the socket was accepted.
    conn.admit(headers, &st.config.trusted_proxies).map_err(|refused| Box::new(refused.respond(&st.metrics)))
}

/// The upgraded connection's WebSocket settings: frames and messages up to `max`.
fn socket_config(max: usize) -> WebSocketConfig {
    WebSocketConfig::default()
        .max_message_size(Some(max))
        .max_frame_size(Some(max))
        // tungstenite holds its read buffer for the socket's life and reads at most its size at
        // once; the front's `SpillReader` serves those reads from socket reads of up to 16 KiB, so
        // the buffer can be small (4 KiB: 26.5 -> 14.3 KiB RSS per idle connection; 1 KiB with
        // the spill reader: docs/benchmarks.md, "idle after the round-2 levers").
        .read_buffer_size(READ_BUFFER)
        .write_buffer_size(16 * 1024)
        .max_write_buffer_size(2 * max + 64 * 1024)
}

async fn ws_upgrade(
    State(st): State<Arc<EdgeState>>,
    Extension(conn): Extension<ConnInfo>,
    mut req: axum::extract::Request,
) -> Response {
    let hs = match handshake::check(&mut req) {
        Ok(hs) => hs,
        Err(refused) => return refused.into_response(),
    };
    let admitted = match admit_upgrade(&st, &conn, req.headers()) {
        Ok(a) => a,
        Err(refused) => return *refused,
    };
    let config = socket_config(st.config.max_frame_size);
    let response = hs.accept();
    let on_upgrade = hs.on_upgrade;
    // One task per connection: it waits for the 101 to be written, then serves the socket,
    // tracked so shutdown waits for it; the slot is held for the socket's life (and released
    // here when the upgrade fails).
    tokio::spawn(async move {
        let upgraded = match on_upgrade.await {
            Ok(u) => u,
            Err(e) => {
                tracing::debug!(error = %e, "WebSocket upgrade failed.");
                return;
            }
        };
        let socket = CloseCodeCheck::new(TokioIo::new(upgraded));
        // Boxed until it is split: a future keeps the room of every value it captured, so
        // passing it by value would hold two dead copies in every connection's task.
        let socket = Box::new(WebSocketStream::from_raw_socket(socket, Role::Server, Some(config)).await);
        let tracker = st.tracker.clone();
        let connection = async move {
            let id = st.next_conn_id();
            // Entered on every poll of the connection (each frame, each wake-up): only when
            // a subscriber wants it (trace export, or `conn` at debug level).
            let span = crate::trace::connection_span(id, &st.node);
            if span.is_disabled() {
                run_connection(socket, st, id, admitted.client_ip).await;
            } else {
                run_connection(socket, st, id, admitted.client_ip).instrument(span).await;
            }
            drop(admitted);
        };
        tracker.track_future(connection).await;
    });
    response
}

/// `/mqtt`: the upgrade of a door served over WebSocket ([`ApiRoutes::mqtt_ws`], MQTT over
/// WebSocket), checked and admitted as a `/ws` one; the client must offer the door's
/// subprotocol (MQTT-6.0.0-3), which the 101 names. 404 while no such door is installed.
async fn door_upgrade(
    door: Option<Arc<dyn crate::door::WsDoor>>,
    State(st): State<Arc<EdgeState>>,
    Extension(conn): Extension<ConnInfo>,
    mut req: axum::extract::Request,
) -> Response {
    let Some(door) = door else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let hs = match handshake::check(&mut req) {
        Ok(hs) => hs,
        Err(refused) => return refused.into_response(),
    };
    let protocol = door.subprotocol();
    if !handshake::offers_protocol(req.headers(), protocol) {
        return (StatusCode::BAD_REQUEST, format!("Sec-WebSocket-Protocol must offer '{protocol}'")).into_response();
    }
    let admitted = match admit_upgrade(&st, &conn, req.headers()) {
        Ok(a) => a,
        Err(refused) => return *refused,
    };
    let config = socket_config(st.config.max_frame_size);
    let response = hs.accept_with(Some(protocol));
    let on_upgrade = hs.on_upgrade;
    // As for `/ws`: one tracked task per connection, holding the slot for the socket's life.
    tokio::spawn(async move {
        let upgraded = match on_upgrade.await {
            Ok(u) => u,
            Err(e) => {
                tracing::debug!(error = %e, "WebSocket upgrade failed.");
                return;
            }
        };
        let socket = CloseCodeCheck::new(TokioIo::new(upgraded));
        let socket = WebSocketStream::from_raw_socket(socket, Role::Server, Some(config)).await;
        let serve = door.serve(st.clone(), crate::door::WsIo::new(socket), admitted.into());
        st.tracker.track_future(serve).await;
    });
    response
}

/// Serves one WebSocket until it closes.
async fn run_connection(socket: Box<WebSocket>, st: Arc<EdgeState>, id: skua_core::ConnId, client_ip: IpAddr) {
    st.metrics.connections_opened.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let (handle, outbox) =
        ConnHandle::new(id, st.config.outbound_queue_messages, st.config.outbound_queue_bytes, st.metrics.clone());
    let handle = Arc::new(handle.with_budget(st.outbound_budget.clone()));
    // Out of the box at once: the box's memory is freed here, not when the function returns.
    let socket = *socket;
    let (sink, stream) = socket.split();
    let writer = {
        let handle = handle.clone();
        let metrics = st.metrics.clone();
        let write =
            write_loop(sink, outbox, handle.clone(), st.config.close_timeout, st.config.history_receipt_interval);
        st.tracker.spawn(async move {
            // A panicking writer drops its half of the socket; the close request makes the
            // reader return too, so the socket and everything the session holds are released.
            if contained(write, &metrics, "writer").await.is_none() {
                handle.request_close(CloseRequest::INTERNAL_ERROR);
            }
        })
    };
    let mut session = Session::new(st.clone(), handle.clone(), client_ip);
    // A panic while handling a frame must not leave a half-dead connection whose subscriptions
    // keep delivering (issue 12, defect 1): it closes the socket 1011 and the session is still
    // cleaned up below.
    if contained(read_loop(&mut session, stream, &st, &handle), &st.metrics, "reader").await.is_none() {
        handle.request_close(CloseRequest::INTERNAL_ERROR);
    }
    // Release subscriptions and presence (sending leaves) before the socket goes.
    let _ = contained(Box::pin(session.cleanup()), &st.metrics, "cleanup").await;
    // Also after a cleanup that panicked: the writer must not wait for it.
    handle.mark_released();
    handle.request_close(CloseRequest::GONE);
    let _ = writer.await;
    st.metrics.connections_closed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

async fn read_loop(
    session: &mut Session,
    mut stream: SplitStream<WebSocket>,
    st: &Arc<EdgeState>,
    handle: &Arc<ConnHandle>,
) {
    // Every waiter lives across iterations: a frame costs polls of already registered
    // futures, not new timer and notification registrations (docs/benchmarks.md, pairs).
    // One timer for both the idle timeout and the token expiry, whichever is due first; it
    // is moved only when it fires or the expiry changes, not on every frame.
    let idle = st.config.idle_timeout;
    let mut last_activity = Instant::now();
    let mut expiry = session.expires_at();
    let mut expiry_deadline = deadline_of(expiry);
    // `auth_timeout` (off by default): the deadline for the first successful auth; it also
    // stands in for the token expiry until then.
    let mut auth_deadline = st.config.auth_timeout.map(|t| last_activity + t);
    if let Some(at) = auth_deadline {
        expiry_deadline = expiry_deadline.min(at);
    }
    let timer = sleep_until((last_activity + idle).min(expiry_deadline));
    tokio::pin!(timer);
    let shutdown = st.shutdown.cancelled();
    tokio::pin!(shutdown);
    let closed = std::future::poll_fn(|cx| handle.poll_closed_reader(cx));
    tokio::pin!(closed);
    // Control-plane changes and revalidation ticks (issue 5); the sender lives in `st`.
    let mut changes = st.connections.watch();
    let mut seen = *changes.borrow_and_update();
    let mut change = tokio_util::sync::ReusableBoxFuture::new(next_change(changes));
    loop {
        tokio::select! {
            biased;
            () = &mut shutdown => {
                handle.request_close(CloseRequest::SERVER_RESTART);
                return;
            }
            () = &mut closed => return,
            () = &mut timer => {
                let now = Instant::now();
                if auth_deadline.is_some_and(|at| at <= now) {
                    handle.request_close(CloseRequest::AUTH_TIMEOUT);
                    return;
                }
                if expiry_deadline <= now {
                    token_expired(handle);
                    return;
                }
                let idle_due = last_activity + idle;
                if idle_due <= now {
                    handle.request_close(CloseRequest::IDLE_TIMEOUT);
                    return;
                }
                timer.as_mut().reset(idle_due.min(expiry_deadline));
            }
            (r, mut rx) = change.get_pin() => {
                if r.is_err() {
                    // The node's state is going away; nothing more will change.
                    change.set(std::future::pending());
                    continue;
                }
                let now = *rx.borrow_and_update();
                change.set(next_change(rx));
                let delta = st.connections.delta_since(seen, now);
                seen = now;
                // Boxed like the frame handlers: only alive while a change is applied.
                Box::pin(session.revalidate(&delta)).await;
            }
            // The oldest publish in flight committed (issue 36): its bus publish and receipt.
            outcome = session.next_publish(), if session.publishing() => {
                Box::pin(session.finish_publish(outcome)).await;
            }
            // A full publish pipeline is not read: the client waits (backpressure).
            msg = stream.next(), if !session.pipeline_full() => {
                let Some(msg) = msg else { return };
                let msg = match msg {
                    Ok(m) => m,
                    Err(e) => {
                        match read_error_close(&e) {
                            Some(req) => {
                                tracing::debug!(error = %e, code = req.code, "WebSocket protocol violation; closing.");
                                handle.request_close(req);
                            }
                            None => tracing::debug!(error = %e, "WebSocket read failed."),
                        }
                        return;
                    }
                };
                // Any inbound frame, pings included, counts as activity (N5); pongs answer the
                // server's own receipt pings (issue 19) and do not.
                if !matches!(msg, Message::Pong(_)) {
                    last_activity = Instant::now();
                }
                st.metrics.frames_in.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                match msg {
                    Message::Binary(b) if b.is_empty() => {
                        st.metrics.frames_in_by_type.inc("heartbeat");
                        // Heartbeat: echo, and enforce client-token expiry here too (N5, N27).
                        if session.expires_at().is_some_and(|at| at <= now_unix_s()) {
                            token_expired(handle);
                            return;
                        }
                        handle.push_heartbeat();
                    }
                    Message::Binary(b) => match ClientFrame::decode(&b) {
                        // Boxed: the handlers' futures are large and live only while a frame is
                        // handled, instead of enlarging every idle connection's task.
                        Ok(frame) => {
                            st.metrics.frames_in_by_type.inc(frame.type_str());
                            Box::pin(session.handle(frame)).await;
                            session.sync_subscription_count();
                            // The idle clock runs from the end of the handling, not the frame's
                            // arrival: a reply that waited on the store (an `auth` whose restore
                            // claim took longer than `idle_timeout`) must not be followed by an
                            // idle close before the client could answer it (issue 35).
                            last_activity = Instant::now();
                        }
                        Err(e) => {
                            st.metrics.frames_in_by_type.inc("invalid");
                            // Its error frame comes after the receipts of earlier publishes.
                            Box::pin(session.drain_publishes()).await;
                            session.invalid_frame(&e);
                        }
                    },
                    Message::Text(_) => {
                        st.metrics.frames_in_by_type.inc("invalid");
                        Box::pin(session.drain_publishes()).await;
                        session.invalid_frame(&DecodeError {
                            hint: "text frames are not supported; send MessagePack in binary frames",
                            topic: None,
                            msg_ref: None,
                        });
                    }
                    Message::Close(_) => return,
                    Message::Pong(p) => {
                        if let Ok(batch) = <[u8; 8]>::try_from(&p[..]) {
                            handle.receipt(u64::from_be_bytes(batch));
                        }
                    }
                    // Pings are answered by tungstenite; raw frames are never read.
                    Message::Ping(_) | Message::Frame(_) => {}
                }
                if auth_deadline.is_some() && session.is_authed() {
                    auth_deadline = None;
                    expiry = session.expires_at();
                    expiry_deadline = deadline_of(expiry);
                    timer.as_mut().reset((last_activity + idle).min(expiry_deadline));
                } else if session.expires_at() != expiry {
                    expiry = session.expires_at();
                    expiry_deadline = deadline_of(expiry);
                    timer.as_mut().reset((last_activity + idle).min(expiry_deadline));
                }
            }
        }
    }
}

fn token_expired(handle: &ConnHandle) {
    handle.send(&skua_protocol::ServerFrame::Disconnect { reason: skua_protocol::codes::reason::TOKEN_EXPIRED });
    handle.request_close(CloseRequest::TOKEN_EXPIRED);
}

async fn write_loop(
    mut sink: SplitSink<WebSocket, Message>,
    mut outbox: Outbox,
    handle: Arc<ConnHandle>,
    close_timeout: Duration,
    receipt_interval: Duration,
) {
    // `take` also returns when a close is requested, so an idle writer needs no second waiter.
    // Whether the last write carried more than one frame: frames are arriving faster than
    // single writes, so waiting a little gathers more.
    let mut busy = false;
    // Receipt pings (issue 19): at most one per `receipt_interval`; one wanted sooner waits
    // for `receipt_timer` and then proves every batch written until it goes out.
    let mut last_receipt: Option<Instant> = None;
    let mut receipt_deferred = false;
    let receipt_timer = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(receipt_timer);
    // The waker the timer was last polled with: it holds that waker until it fires, so a wait
    // while a ping is deferred polls the timer once per deferral and later only checks whether
    // it fired, instead of polling it after every write (docs/benchmarks.md, issue 19).
    let mut timer_waker: Option<std::task::Waker> = None;
    loop {
        let woke = std::future::poll_fn(|cx| {
            if let Poll::Ready(t) = outbox.poll_take(&handle, cx) {
                return Poll::Ready(Woke::Take(t));
            }
            if !receipt_deferred {
                return Poll::Pending;
            }
            if timer_waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                return if receipt_timer.is_elapsed() { Poll::Ready(Woke::ReceiptDue) } else { Poll::Pending };
            }
            timer_waker = Some(cx.waker().clone());
            receipt_timer.as_mut().poll(cx).map(|()| Woke::ReceiptDue)
        })
        .await;
        let more = match woke {
            Woke::Take(t) => t == Take::Frames,
            Woke::ReceiptDue => {
                receipt_deferred = false;
                last_receipt = Some(Instant::now());
                if send_receipt(&mut sink, &handle).await.is_err() {
                    handle.request_close(CloseRequest::GONE);
                    break;
                }
                continue;
            }
        };
        if !more {
            break;
        }
        if busy || outbox.len() > 1 {
            // One turn of the scheduler before writing: under fan-out load the other writers
            // and the dispatcher run meanwhile, so more frames go into each write (measured:
            // 28 -> 36 frames per flush, p99 459 -> 159 ms at S=1000 R=2000; docs/benchmarks.md).
            // A connection receiving one frame at a time writes it at once.
            tokio::task::yield_now().await;
            outbox.try_take(&handle);
        }
        busy = outbox.len() > 1;
        let sent = tokio::select! {
            biased;
            () = handle.closed() => break,
            r = write_taken(&mut sink, &mut outbox, &handle) => r,
        };
        if sent.is_err() {
            handle.request_close(CloseRequest::GONE);
            break;
        }
        // History frames went out: a ping whose pong proves the client received every batch
        // written so far (issue 19; every WebSocket client answers pings by itself), now or,
        // within `receipt_interval` of the last one, when the timer fires.
        // A deferred one that came due while the writer was busy goes now.
        let wanted = handle.take_receipt_wanted();
        if receipt_deferred {
            if receipt_timer.is_elapsed() {
                receipt_deferred = false;
                last_receipt = Some(Instant::now());
                if send_receipt(&mut sink, &handle).await.is_err() {
                    handle.request_close(CloseRequest::GONE);
                    break;
                }
            }
        } else if wanted {
            let now = Instant::now();
            match last_receipt {
                Some(at) if now < at + receipt_interval => {
                    receipt_deferred = true;
                    receipt_timer.as_mut().reset(at + receipt_interval);
                    timer_waker = None;
                }
                _ => {
                    last_receipt = Some(now);
                    if send_receipt(&mut sink, &handle).await.is_err() {
                        handle.request_close(CloseRequest::GONE);
                        break;
                    }
                }
            }
        }
        outbox.shrink();
    }
    let req = handle.close_requested().unwrap_or(CloseRequest::GONE);
    handle.count_close(req);
    if req != CloseRequest::GONE {
        // The close frame (a 1012 above all) only once the session's restore record is
        // released: a client reconnecting the moment it reads it must find the record
        // claimable (issue 36). Bounded: a cleanup stuck on the store does not hold the socket.
        let _ = tokio::time::timeout(close_timeout, handle.released()).await;
    }
    let _ = tokio::time::timeout(close_timeout, async {
        if req != CloseRequest::GONE {
            // Frames queued before the close (a `disconnect` before 4003) still go out, except
            // to a slow consumer, whose queue is what overflowed.
            if req != CloseRequest::SLOW_CONSUMER {
                while let Some(f) = outbox.try_recv(&handle) {
                    if sink.feed(Message::Binary(f)).await.is_err() {
                        return;
                    }
                }
            }
            let frame = CloseFrame { code: req.code.into(), reason: req.reason.into() };
            let _ = sink.send(Message::Close(Some(frame))).await;
        }
        let _ = sink.close().await;
    })
    .await;
}

/// What woke a writer waiting for frames.
enum Woke {
    /// Frames were taken, or a close was requested.
    Take(Take),
    /// A deferred receipt ping is due.
    ReceiptDue,
}

/// A receipt ping naming the last batch written: its pong proves every frame before it arrived.
async fn send_receipt(sink: &mut SplitSink<WebSocket, Message>, handle: &ConnHandle) -> Result<(), tungstenite::Error> {
    sink.send(Message::Ping(handle.takes().to_be_bytes().to_vec().into())).await
}

/// Writes the taken frames, and whatever is queued meanwhile, until the queue is empty:
/// up to [`WRITE_BATCH`] frames are fed before each flush, and their counts are given back to
/// the queue after it.
async fn write_taken(
    sink: &mut SplitSink<WebSocket, Message>,
    outbox: &mut Outbox,
    handle: &ConnHandle,
) -> Result<(), tungstenite::Error> {
    loop {
        let (mut frames, mut bytes) = (0, 0);
        while frames < WRITE_BATCH {
            let Some(f) = outbox.pop() else { break };
            frames += 1;
            bytes += f.len();
            sink.feed(Message::Binary(f)).await?;
        }
        sink.flush().await?;
        handle.written(frames, bytes);
        if outbox.is_empty() && !outbox.try_take(handle) {
            return Ok(());
        }
    }
}

/// The close a failed read calls for: 1009 when the frame exceeded `max_frame_size` /
/// `max_message_size`, 1002 for a framing violation (RFC 6455 §7.4.1), a client close frame
/// with a forbidden code included ([`crate::close_code`]), 1007 for a text frame or close reason that
/// is not UTF-8. `None` when the peer is gone or the transport failed: there is nobody to send
/// a close frame to.
fn read_error_close(e: &tungstenite::Error) -> Option<CloseRequest> {
    use tungstenite::error::ProtocolError;
    match e {
        tungstenite::Error::Capacity(_) => Some(CloseRequest::TOO_BIG),
        tungstenite::Error::Utf8(_) => Some(CloseRequest::INVALID_PAYLOAD),
        // The TCP stream ended without a close frame: the peer is gone.
        tungstenite::Error::Protocol(ProtocolError::ResetWithoutClosingHandshake) => None,
        tungstenite::Error::Protocol(_) => Some(CloseRequest::PROTOCOL_ERROR),
        tungstenite::Error::Io(io) if BadCloseCode::is(io) => Some(CloseRequest::PROTOCOL_ERROR),
        _ => None,
    }
}

#[cfg(test)]
mod read_error_tests {
    use tungstenite::error::{CapacityError, ProtocolError};

    use super::*;

    fn close_of(e: tungstenite::Error) -> Option<CloseRequest> {
        read_error_close(&e)
    }

    #[test]
    fn read_errors_map_to_their_close_codes() {
        let too_long = CapacityError::MessageTooLong { size: 2, max_size: 1 };
        assert_eq!(close_of(tungstenite::Error::Capacity(too_long)), Some(CloseRequest::TOO_BIG));
        assert_eq!(close_of(tungstenite::Error::Utf8("bad".into())), Some(CloseRequest::INVALID_PAYLOAD));
        for p in [
            ProtocolError::UnmaskedFrameFromClient,
            ProtocolError::NonZeroReservedBits,
            ProtocolError::FragmentedControlFrame,
            ProtocolError::ControlFrameTooBig,
            ProtocolError::UnknownDataFrameType(3),
            ProtocolError::UnknownControlFrameType(11),
            ProtocolError::UnexpectedContinueFrame,
            ProtocolError::InvalidOpcode(3),
            ProtocolError::InvalidCloseSequence,
        ] {
            assert_eq!(close_of(tungstenite::Error::Protocol(p.clone())), Some(CloseRequest::PROTOCOL_ERROR), "{p:?}");
        }
        assert_eq!(close_of(tungstenite::Error::Protocol(ProtocolError::ResetWithoutClosingHandshake)), None);
        assert_eq!(close_of(tungstenite::Error::ConnectionClosed), None);
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert_eq!(close_of(tungstenite::Error::Io(io)), None);
        let bad = std::io::Error::new(std::io::ErrorKind::InvalidData, crate::close_code::BadCloseCode(1005));
        assert_eq!(close_of(tungstenite::Error::Io(bad)), Some(CloseRequest::PROTOCOL_ERROR));
    }
}
