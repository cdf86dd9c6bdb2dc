//! The front door: accepting sockets, before any WebSocket exists.
//!
//! Our own accept loop rather than `axum::serve`, which has no header-read timeout and counts
//! nothing before the upgrade (issue 12, item 4). Every accepted socket:
//! 1. takes a connection slot (`max_connections`) at once; the slot stays with the socket until
//!    it closes or becomes a WebSocket, which then holds it. With no slot left a socket is still
//!    served (so `/healthz` and `/readyz`, which stays 200, answer on a full node) from a small
//!    overflow pool, but its upgrade is refused 503 with `Retry-After`; with the pool empty too
//!    it is closed at once;
//! 2. with `proxy_protocol`, must come from `trusted_proxies` and start with a PROXY header;
//! 3. unless its client is a trusted proxy, is counted against its client address
//!    ([`ip`]): over `max_connections_per_ip` or `max_new_connections_per_ip_per_second` it
//!    gives its slot back and is answered 429 (from the overflow pool);
//! 4. finishes its TLS handshake, if the listener has TLS;
//! 5. is served HTTP/1.1 by hyper with the axum router, with `http_header_timeout` for every
//!    request head (idle keep-alive sockets included).
//!
//! Steps 2 and 4 together must finish within `http_header_timeout` of the accept, and each
//! request head within `http_header_timeout` of the previous response. Upgrade requests are
//! checked again in `ws_upgrade`: the `Origin` allowlist ([`origin`]), and for sockets of a
//! trusted proxy the client named by `X-Forwarded-For` against the per-address limits.

use crate::ip;
mod origin;
mod proxy;

/// Reads a PROXY protocol header (versions 1 and 2) at the start of `r`, nothing past it: the
/// client's address, or `None` when the proxy names none (a health check).
///
/// # Errors
/// A message when the header is malformed or the stream ends before it does.
pub(crate) async fn read_proxy_header<R: tokio::io::AsyncRead + Unpin>(
    r: &mut R,
) -> Result<Option<std::net::SocketAddr>, String> {
    proxy::read_header(r).await.map_err(|e| e.to_string())
}
mod spill;

use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderMap, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, timeout_at};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub(crate) use ip::{IpLimits, IpSlot, Refusal};
pub(crate) use origin::allowed as origin_allowed;

use crate::state::EdgeState;

/// Sockets served beyond `max_connections` at once (for `/healthz`, `/readyz`, `/metrics` on a
/// full node, and for 429 answers); beyond it they are closed at accept.
const OVERFLOW_SOCKETS: usize = 256;
/// Sockets the separate metrics listener serves at once; beyond it they are closed at accept.
const METRICS_SOCKETS: usize = 64;

/// Reasons in `skua_front_refusals_total`, besides [`Refusal::label`].
pub(crate) mod reason {
    /// No connection slot (and, at accept, no overflow socket) left.
    pub const MAX_CONNECTIONS: &str = "max_connections";
    /// No complete request head (or idle keep-alive) within `http_header_timeout`.
    pub const HEADER_TIMEOUT: &str = "header_timeout";
    /// TLS handshake failed or did not finish within `http_header_timeout`.
    pub const TLS_HANDSHAKE: &str = "tls_handshake";
    /// Missing, malformed or late PROXY header, or one from an untrusted peer.
    pub const PROXY_HEADER: &str = "proxy_header";
    /// An upgrade whose `Origin` is not in `allowed_origins`.
    pub const ORIGIN: &str = "origin";
    /// An upgrade beyond what the open-file limit leaves room for (`fd_reserve`).
    pub const FD_LIMIT: &str = "fd_limit";
    /// `/metrics` without the configured bearer token.
    pub const METRICS_UNAUTHORIZED: &str = "metrics_unauthorized";
    /// A request body not in full within `http_body_timeout` of its head (answered 408).
    pub const BODY_TIMEOUT: &str = "body_timeout";
}

/// Serves `router` (the client routes) on `listener` until the state's shutdown token is
/// cancelled, over TLS when `tls` is given; see [`crate::node::serve`].
pub(crate) async fn serve(
    listener: TcpListener,
    state: Arc<EdgeState>,
    router: Router,
    tls: Option<TlsAcceptor>,
) -> std::io::Result<()> {
    let (stop, tasks) = (state.shutdown.clone(), state.tracker.clone());
    accept_loop(listener, Front::new(state, router, tls, Kind::Client, stop, tasks)).await
}

/// Serves `router` (`/metrics` alone) on `listener` until `stop` is cancelled: through the
/// whole drain (not only until the client listener stops), so that `skua_draining` and
/// `skua_drain_seconds` are scraped while the connections close (issue 32, item 4). Its
/// sockets are spawned on `tasks`, not on the connection tracker the drain waits for.
pub(crate) async fn serve_metrics(
    listener: TcpListener,
    state: Arc<EdgeState>,
    router: Router,
    stop: CancellationToken,
    tasks: TaskTracker,
) -> std::io::Result<()> {
    accept_loop(listener, Front::new(state, router, None, Kind::Metrics, stop, tasks)).await
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Client,
    Metrics,
}

/// What one listener's sockets share.
struct Front {
    state: Arc<EdgeState>,
    router: Router,
    tls: Option<TlsAcceptor>,
    kind: Kind,
    limits: Arc<IpLimits>,
    /// Sockets served without a connection slot.
    overflow: Arc<Semaphore>,
    http: hyper::server::conn::http1::Builder,
    /// Stops accepting and ends the sockets' HTTP gracefully: the state's shutdown token for
    /// the client listener, the node's stop for the metrics listener.
    stop: CancellationToken,
    /// Where the sockets' tasks are spawned.
    tasks: TaskTracker,
}

impl Front {
    fn new(
        state: Arc<EdgeState>,
        router: Router,
        tls: Option<TlsAcceptor>,
        kind: Kind,
        stop: CancellationToken,
        tasks: TaskTracker,
    ) -> Arc<Self> {
        let c = &state.config;
        let mut http = hyper::server::conn::http1::Builder::new();
        http.timer(TokioTimer::new()).header_read_timeout(c.http_header_timeout).keep_alive(true);
        let overflow = match kind {
            Kind::Client => OVERFLOW_SOCKETS,
            Kind::Metrics => METRICS_SOCKETS,
        };
        Arc::new(Self {
            stop,
            tasks,
            // Shared with the other doors (MQTT), so a client cannot double its budget.
            limits: state.ip_limits.clone(),
            overflow: Arc::new(Semaphore::new(overflow)),
            state,
            router,
            tls,
            kind,
            http,
        })
    }

    fn refuse(&self, reason: &'static str) {
        self.state.metrics.front_refusals.inc(reason);
    }

    /// A slot for a socket just accepted: a connection slot, else an overflow one.
    fn take_slot(&self) -> Option<Slot> {
        if self.kind == Kind::Client
            && let Ok(p) = self.state.conn_slots.clone().try_acquire_owned()
        {
            return Some(Slot::Connection(p));
        }
        self.overflow.clone().try_acquire_owned().ok().map(Slot::Overflow)
    }

    /// Serves one accepted socket to its end (or its upgrade).
    async fn serve_socket(self: Arc<Self>, mut tcp: TcpStream, peer: SocketAddr, mut slot: Slot) {
        let config = &self.state.config;
        let deadline = Instant::now() + config.http_header_timeout;
        let mut client = ip::canonical(peer.ip());
        if self.kind == Kind::Client && config.proxy_protocol {
            if !ip::is_trusted(&config.trusted_proxies, client) {
                tracing::debug!(%peer, "PROXY protocol connection from an untrusted peer; closed.");
                self.refuse(reason::PROXY_HEADER);
                return;
            }
            match timeout_at(deadline, proxy::read_header(&mut tcp)).await {
                Ok(Ok(Some(source))) => client = ip::canonical(source.ip()),
                Ok(Ok(None)) => {}
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "PROXY header refused; closed.");
                    self.refuse(reason::PROXY_HEADER);
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "No PROXY header within the header timeout; closed.");
                    self.refuse(reason::PROXY_HEADER);
                    return;
                }
            }
        }
        let trusted = ip::is_trusted(&config.trusted_proxies, client);
        let mut ip_slot = None;
        let mut refused = None;
        if self.kind == Kind::Client && !trusted {
            match self.limits.admit(client) {
                Ok(s) => ip_slot = Some(s),
                Err(r) => {
                    self.refuse(r.label());
                    // A refused socket must not hold a connection slot while it is answered.
                    if let Slot::Connection(_) = slot {
                        match self.overflow.clone().try_acquire_owned() {
                            Ok(p) => slot = Slot::Overflow(p),
                            Err(_) => return,
                        }
                    }
                    refused = Some(r);
                }
            }
        }
        let conn = match (refused, slot) {
            (Some(r), slot) => Mode::Refused(r, slot.into_permit()),
            (None, Slot::Connection(p)) => Mode::Serve(ConnInfo::new(client, trusted, &self.limits, Some(p), ip_slot)),
            (None, Slot::Overflow(p)) => {
                let info = ConnInfo::new(client, trusted, &self.limits, None, ip_slot);
                Mode::Overflow(info, p)
            }
        };
        match &self.tls {
            None => self.serve_http(tcp, conn).await,
            Some(acceptor) => match timeout_at(deadline, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => self.serve_http(tls, conn).await,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed.");
                    self.refuse(reason::TLS_HANDSHAKE);
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake did not finish within the header timeout; closed.");
                    self.refuse(reason::TLS_HANDSHAKE);
                }
            },
        }
    }

    /// Serves HTTP/1.1 on `io` until the socket closes or is upgraded.
    async fn serve_http<I>(&self, io: I, mode: Mode)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (info, refused, _held) = match mode {
            Mode::Serve(info) => (Some(info), None, None),
            Mode::Overflow(info, p) => (Some(info), None, Some(p)),
            Mode::Refused(r, p) => (None, Some(r), Some(p)),
        };
        let router = self.router.clone();
        let body_timeout = self.state.config.http_body_timeout;
        let metrics = self.state.metrics.clone();
        let service = hyper::service::service_fn(move |req: Request<Incoming>| {
            let mut router = router.clone();
            let info = info.clone();
            let metrics = metrics.clone();
            async move {
                let Some(info) = info else {
                    return Ok::<_, Infallible>(
                        refused.map_or_else(|| refusal(StatusCode::TOO_MANY_REQUESTS, "refused"), Refusal::respond),
                    );
                };
                // The body must arrive in full within `http_body_timeout` of the head (issue 33,
                // item 6): a handler reading it past then gets an error, and whatever it answered
                // becomes 408 with the socket closed (freeing its connection slot).
                let timed_out = Arc::new(AtomicBool::new(false));
                let mut req = req.map(|b| TimedBody::new(b, Instant::now() + body_timeout, timed_out.clone()));
                req.extensions_mut().insert(info);
                // The router is always ready (axum::Router::poll_ready).
                let r = tower_service::Service::call(&mut router, req).await;
                if timed_out.load(Ordering::Relaxed) {
                    metrics.front_refusals.inc(reason::BODY_TIMEOUT);
                    return Ok(refusal(StatusCode::REQUEST_TIMEOUT, "request body not received in time"));
                }
                r
            }
        });
        // Small reads (tungstenite's, after the upgrade) are served from large socket reads.
        let io = TokioIo::new(spill::SpillReader::new(io));
        let conn = self.http.serve_connection(io, service).with_upgrades();
        let mut conn = std::pin::pin!(conn);
        let shutdown = self.stop.clone();
        let result = tokio::select! {
            r = conn.as_mut() => r,
            () = shutdown.cancelled() => {
                // Requests in flight are answered (503 for upgrades, as the node drains).
                conn.as_mut().graceful_shutdown();
                conn.await
            }
        };
        if let Err(e) = result {
            if e.is_timeout() {
                self.refuse(reason::HEADER_TIMEOUT);
            } else {
                tracing::debug!(error = %e, "HTTP connection ended with an error.");
            }
        }
    }
}

async fn accept_loop(listener: TcpListener, front: Arc<Front>) -> std::io::Result<()> {
    let shutdown = front.stop.clone();
    loop {
        let accepted = tokio::select! {
            biased;
            () = shutdown.cancelled() => return Ok(()),
            r = listener.accept() => r,
        };
        let (tcp, peer) = match accepted {
            Ok(a) => a,
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                // Out of file descriptors and the like: wait rather than spin (as axum::serve).
                tracing::error!(error = %e, "Accepting a connection failed.");
                tokio::select! {
                    () = shutdown.cancelled() => return Ok(()),
                    () = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
                continue;
            }
        };
        // TCP_NODELAY: the writer already batches frames; Nagle on top of it measured p99
        // 16.9 ms instead of ~4 ms in the 1→100 fan-out (docs/benchmarks.md).
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY could not be set.");
        }
        let Some(slot) = front.take_slot() else {
            front.refuse(reason::MAX_CONNECTIONS);
            continue;
        };
        front.tasks.spawn(front.clone().serve_socket(tcp, peer, slot));
    }
}

/// Errors of one connection that `accept` reports; the listener is fine.
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    matches!(e.kind(), ConnectionRefused | ConnectionAborted | ConnectionReset)
}

/// What an accepted socket holds.
enum Slot {
    /// One of `max_connections`.
    Connection(OwnedSemaphorePermit),
    /// One of the overflow sockets.
    Overflow(OwnedSemaphorePermit),
}

impl Slot {
    fn into_permit(self) -> OwnedSemaphorePermit {
        match self {
            Self::Connection(p) | Self::Overflow(p) => p,
        }
    }
}

/// How a socket is served.
enum Mode {
    /// Everything; it holds a connection slot for its upgrade.
    Serve(ConnInfo),
    /// Everything but upgrades (503): no connection slot was left.
    Overflow(ConnInfo, OwnedSemaphorePermit),
    /// 429 to every request: its client address is over a limit.
    Refused(Refusal, OwnedSemaphorePermit),
}

/// An HTTP refusal that closes the socket after the answer (so whatever it holds is freed).
pub(crate) fn refusal(status: StatusCode, text: &'static str) -> Response {
    (status, [(header::CONNECTION, "close")], text).into_response()
}

/// Seconds a client refused by a full node should wait (`Retry-After`): the SDKs reconnect
/// through the load balancer, most likely to another edge, which stays ready meanwhile.
const FULL_RETRY_AFTER: &str = "5";

/// The 503 for an upgrade a full node cannot take (`max_connections`, the open-file budget):
/// `Retry-After` and the socket closed. The node stays ready (`/readyz` 200, issue 32 item 1).
fn full_refusal(text: &'static str) -> Response {
    (StatusCode::SERVICE_UNAVAILABLE, [(header::CONNECTION, "close"), (header::RETRY_AFTER, FULL_RETRY_AFTER)], text)
        .into_response()
}

/// The 503 for an upgrade beyond the open-file budget, counted as [`reason::FD_LIMIT`].
pub(crate) fn fd_limit_refusal(metrics: &crate::metrics::Metrics) -> Response {
    metrics.front_refusals.inc(reason::FD_LIMIT);
    full_refusal("node is at its open-file limit")
}

/// What requests learn about their socket (a request extension).
#[derive(Clone)]
pub(crate) struct ConnInfo(Arc<ConnShared>);

struct ConnShared {
    /// The client's address: the TCP peer, or the PROXY header's source.
    client: IpAddr,
    /// Whether `client` is a trusted proxy, whose requests' `X-Forwarded-For` names the client.
    trusted: bool,
    limits: Arc<IpLimits>,
    // std Mutex: taken once by an upgrade, never held across an await.
    held: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    slot: Option<OwnedSemaphorePermit>,
    ip: Option<IpSlot>,
}

/// Why an upgrade was refused by [`ConnInfo::admit`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum UpgradeRefusal {
    /// The socket holds no connection slot: the node is at `max_connections`.
    ConnectionLimit,
    /// The client named by `X-Forwarded-For` is over a per-address limit.
    Ip(Refusal),
}

impl UpgradeRefusal {
    /// The HTTP answer, counted in `metrics`.
    pub(crate) fn respond(self, metrics: &crate::metrics::Metrics) -> Response {
        match self {
            Self::ConnectionLimit => {
                metrics.front_refusals.inc(reason::MAX_CONNECTIONS);
                full_refusal("node is at its connection limit")
            }
            Self::Ip(r) => {
                metrics.front_refusals.inc(r.label());
                r.respond()
            }
        }
    }
}

/// What a WebSocket holds for its lifetime: its connection slot and its client address's count.
#[derive(Debug)]
pub(crate) struct Admitted {
    /// The client's address (after PROXY header and `X-Forwarded-For`).
    pub(crate) client_ip: IpAddr,
    _slot: OwnedSemaphorePermit,
    _ip: Option<IpSlot>,
}

impl Admitted {
    /// The client's address, its connection slot and its address's count.
    pub(crate) fn into_parts(self) -> (IpAddr, OwnedSemaphorePermit, Option<IpSlot>) {
        (self.client_ip, self._slot, self._ip)
    }
}

impl ConnInfo {
    fn new(
        client: IpAddr,
        trusted: bool,
        limits: &Arc<IpLimits>,
        slot: Option<OwnedSemaphorePermit>,
        ip: Option<IpSlot>,
    ) -> Self {
        Self(Arc::new(ConnShared { client, trusted, limits: limits.clone(), held: Mutex::new(Held { slot, ip }) }))
    }

    /// The client's address: the TCP peer, or the PROXY header's source.
    pub(crate) fn client(&self) -> IpAddr {
        self.0.client
    }

    /// Admits the socket's upgrade: resolves the client address (from `X-Forwarded-For` when
    /// the socket is a trusted proxy's, counting it against the per-address limits) and takes
    /// the socket's connection slot.
    pub(crate) fn admit(
        &self,
        headers: &HeaderMap,
        trusted_proxies: &[crate::config::Cidr],
    ) -> Result<Admitted, UpgradeRefusal> {
        let held = std::mem::take(&mut *self.0.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        let (client_ip, ip) = if self.0.trusted {
            let values = headers.get_all("x-forwarded-for").into_iter().filter_map(|v| v.to_str().ok());
            let client = ip::forwarded_client(trusted_proxies, self.0.client, values);
            (client, Some(self.0.limits.admit(client).map_err(UpgradeRefusal::Ip)?))
        } else {
            (self.0.client, held.ip)
        };
        let slot = held.slot.ok_or(UpgradeRefusal::ConnectionLimit)?;
        Ok(Admitted { client_ip, _slot: slot, _ip: ip })
    }
}

impl Refusal {
    /// The body of the 429 answer.
    pub(crate) fn text(self) -> &'static str {
        match self {
            Self::Connections => "too many connections from this address",
            Self::Rate => "too many new connections from this address",
        }
    }

    /// Seconds a client should wait before trying again (the 429's `Retry-After`, issue 33):
    /// the new-connection budget refills every second; open connections take longer to end.
    pub(crate) fn retry_after(self) -> &'static str {
        match self {
            Self::Connections => "5",
            Self::Rate => "1",
        }
    }

    /// The 429 answer, closing the socket after it.
    pub(crate) fn respond(self) -> Response {
        (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::CONNECTION, "close"), (header::RETRY_AFTER, self.retry_after())],
            self.text(),
        )
            .into_response()
    }
}

/// A request body that must arrive in full by a deadline (issue 33, item 6). Past it, the next
/// read fails and `timed_out` is set, so that the front answers 408 whatever the handler made
/// of the error. The timer is armed only when a read has to wait (most bodies are empty or
/// already buffered).
struct TimedBody {
    inner: Incoming,
    deadline: Instant,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    timed_out: Arc<AtomicBool>,
}

impl TimedBody {
    fn new(inner: Incoming, deadline: Instant, timed_out: Arc<AtomicBool>) -> Self {
        Self { inner, deadline, sleep: None, timed_out }
    }
}

impl hyper::body::Body for TimedBody {
    type Data = bytes::Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|r| r.map_err(Into::into)));
        }
        let deadline = this.deadline;
        let sleep = this.sleep.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if sleep.as_mut().poll(cx).is_ready() {
            this.timed_out.store(true, Ordering::Relaxed);
            return Poll::Ready(Some(Err("request body not received within http_body_timeout".into())));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}
