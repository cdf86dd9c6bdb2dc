//! The engine's HTTP/1.1 client: hyper's client connection API over TCP (rustls for `https`),
//! with a small keep-alive pool per origin (scheme, host, port).
//!
//! What it guarantees, per request:
//! - the address rules: a URL whose host is a link-local or metadata address, or outside the
//!   allowlist, is refused; host names are resolved when a connection is made and answers that
//!   are link-local or metadata addresses are dropped (refused when none is left) unless allowed;
//!   each kind's client adds its own rule ([`AddressRule`]): hydration refuses loopback unless
//!   allowed, wake (a client-supplied URL) refuses every internal address unless allowed;
//! - no redirects (a 3xx answer is a non-2xx status), no proxy;
//! - at most `concurrency_per_target` requests in flight per origin, and at most as many idle
//!   keep-alive connections kept for it, each for at most [`IDLE_TIMEOUT`];
//! - the connect timeout (the caller bounds the whole attempt);
//! - a bounded answer: a `Content-Length` above the limit fails before the body is read, and a
//!   longer body fails as soon as it passes the limit (its connection is closed, not reused).
//!
//! A request that a kept connection refused before writing anything (the peer had closed it) is
//! sent again on a fresh connection, as any HTTP client does.
//!
//! A connection has no task of its own: the request that holds it drives it ([`drive`]), so
//! writing the request, reading the answer and handing it over happen on the caller's task,
//! without a wake-up of another task at each step. A kept connection is not polled while idle;
//! one the peer closed meanwhile is noticed when it is next taken (and replaced).

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request, Uri};
use hyper_util::rt::TokioIo;
use skua_core::webhook::{host_allowed, is_link_local_or_metadata};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::config::WebhookConfig;
use crate::outcome::{DeliveryError, WebhookResponse};
use crate::resolve::{RefusedAddress, resolve_guarded};
use crate::rule::AddressRule;

/// How long an unused keep-alive connection is kept.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Routes (parsed URLs) and origins kept above which unused ones are dropped.
const PRUNE_AT: usize = 1024;

const USER_AGENT: HeaderValue = HeaderValue::from_static(concat!("skua-webhooks/", env!("CARGO_PKG_VERSION")));
const JSON: HeaderValue = HeaderValue::from_static("application/json");

/// The body of a request.
type Body = Full<Bytes>;

/// A connection's I/O future (hyper's `Connection`, over TCP or TLS).
type Driver = Pin<Box<dyn Future<Output = hyper::Result<()>> + Send>>;

/// One HTTP/1.1 connection: the handle requests are sent on and the future doing its I/O,
/// polled by whichever request holds the connection (`None` once it ended).
struct Conn {
    sender: http1::SendRequest<Body>,
    driver: Option<Driver>,
}

/// Runs `f` while driving the connection's I/O on this task. When the connection ends, its
/// future is dropped, which fails whatever `f` was waiting for from it.
async fn drive<F: Future>(driver: &mut Option<Driver>, f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    std::future::poll_fn(|cx| {
        if let Some(d) = driver
            && d.as_mut().poll(cx).is_ready()
        {
            *driver = None;
        }
        f.as_mut().poll(cx)
    })
    .await
}

/// One origin: where to connect, its concurrency limit and its idle connections.
struct Origin {
    https: bool,
    /// The host as resolved and as the TLS server name (no brackets around an IPv6 address).
    host: String,
    port: u16,
    /// The `Host` header.
    authority: HeaderValue,
    limit: Semaphore,
    // std Mutex: held to push or pop, never across an await.
    idle: Mutex<Vec<(Conn, Instant)>>,
}

/// A URL that passed the address rules: its origin and its request target (path and query).
struct Route {
    origin: Arc<Origin>,
    path: Uri,
}

/// The client (one per kind of a [`crate::WebhookSender`]).
pub(crate) struct Client {
    tls: tokio_rustls::TlsConnector,
    connect_timeout: Duration,
    allow_link_local: bool,
    rule: AddressRule,
    allowed_hosts: Vec<String>,
    max_idle: usize,
    concurrency: usize,
    // std Mutex: held to look up or insert an Arc, never across an await.
    routes: Mutex<Maps>,
}

#[derive(Default)]
struct Maps {
    /// By URL string.
    routes: HashMap<String, Arc<Route>>,
    /// By `scheme://host:port`.
    origins: HashMap<String, Arc<Origin>>,
}

/// Why the client could not be built.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct ClientError(pub(crate) String);

impl Client {
    /// A client with `config`'s limits and `rule`; `https` is verified against the system's
    /// roots.
    pub(crate) fn new(config: &WebhookConfig, rule: AddressRule) -> Result<Self, ClientError> {
        let mut roots = rustls::RootCertStore::empty();
        for c in rustls_native_certs::load_native_certs().certs {
            // Skipping a malformed system root is what every TLS client does; with no roots at
            // all, `https` targets fail their certificate check (a transport error), `http` works.
            let _ = roots.add(c);
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| ClientError(format!("TLS: {e}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        let concurrency = config.concurrency_per_target.max(1);
        Ok(Self {
            tls: tokio_rustls::TlsConnector::from(Arc::new(tls)),
            connect_timeout: config.connect_timeout,
            allow_link_local: config.allow_link_local,
            rule,
            allowed_hosts: config.allowed_hosts.clone(),
            max_idle: concurrency,
            concurrency,
            routes: Mutex::new(Maps::default()),
        })
    }

    /// POSTs `body` to `url` with `headers` (besides `Host`, `User-Agent`, `Content-Type` and
    /// `Content-Length`), reading at most `limit` bytes of the answer. A non-2xx status is
    /// [`DeliveryError::Status`].
    pub(crate) async fn post(
        &self,
        url: &str,
        headers: HeaderMap,
        body: Bytes,
        limit: usize,
    ) -> Result<WebhookResponse, DeliveryError> {
        let route = self.route(url)?;
        let origin = &route.origin;
        let _permit = origin.limit.acquire().await.map_err(|_| DeliveryError::Shutdown)?;
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = route.path.clone();
        let h = request.headers_mut();
        *h = headers;
        h.insert(header::HOST, origin.authority.clone());
        h.insert(header::USER_AGENT, USER_AGENT);
        h.insert(header::CONTENT_TYPE, JSON);

        let mut reused = true;
        let (mut conn, response) = loop {
            let mut conn = match self.idle(origin).await {
                Some(c) => c,
                None => {
                    reused = false;
                    self.connect(origin).await?
                }
            };
            match drive(&mut conn.driver, conn.sender.try_send_request(request)).await {
                Ok(r) => break (conn, r),
                Err(mut e) => match e.take_message() {
                    // Not written: a kept connection the peer had closed; once more on a new one.
                    Some(r) if reused => request = r,
                    _ => return Err(DeliveryError::Transport(Box::new(e.into_error()))),
                },
            }
        };
        let status = response.status();
        if !status.is_success() {
            // The connection is dropped with the unread answer (closed, not reused).
            return Err(DeliveryError::Status { status: status.as_u16() });
        }
        let json_content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|v| {
                let v = v.trim();
                v.eq_ignore_ascii_case("application/json")
                    || v.len() >= 5 && v.as_bytes()[v.len() - 5..].eq_ignore_ascii_case(b"+json")
            });
        let mut incoming = response.into_body();
        if hyper::body::Body::size_hint(&incoming).lower() > limit as u64 {
            return Err(DeliveryError::TooLarge { limit });
        }
        let mut first: Option<Bytes> = None;
        let mut more = BytesMut::new();
        while let Some(frame) = drive(&mut conn.driver, incoming.frame()).await {
            let frame = frame.map_err(|e| DeliveryError::Transport(Box::new(e)))?;
            let Ok(chunk) = frame.into_data() else { continue };
            let have = first.as_ref().map_or(0, Bytes::len) + more.len();
            if have + chunk.len() > limit {
                return Err(DeliveryError::TooLarge { limit });
            }
            match &first {
                None => first = Some(chunk),
                Some(f) => {
                    if more.is_empty() {
                        more.extend_from_slice(f);
                    }
                    more.extend_from_slice(&chunk);
                }
            }
        }
        let body = if more.is_empty() { first.unwrap_or_default() } else { more.freeze() };
        // The answer was read to its end: the connection can carry the next request.
        if conn.driver.is_some() && !conn.sender.is_closed() {
            self.keep(origin, conn);
        }
        Ok(WebhookResponse { status: status.as_u16(), body, json_content_type })
    }

    /// The route of `url`, parsed and checked on first use. The address rules depend only on
    /// the URL and this client's fixed settings, so a route kept once passed them for good;
    /// resolved addresses are checked on every connection.
    fn route(&self, url: &str) -> Result<Arc<Route>, DeliveryError> {
        let mut maps = self.routes.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(r) = maps.routes.get(url) {
            return Ok(r.clone());
        }
        let parsed = url::Url::parse(url)
            .map_err(|e| DeliveryError::Refused { reason: format!("the URL does not parse: {e}") })?;
        let (origin_key, host, https, port) = self.check_address(&parsed)?;
        if maps.routes.len() >= PRUNE_AT {
            // Unused routes, then origins nobody routes to or uses, are forgotten.
            maps.routes.retain(|_, r| Arc::strong_count(r) > 1);
            maps.origins.retain(|_, o| Arc::strong_count(o) > 1);
        }
        let origin = match maps.origins.get(&origin_key) {
            Some(o) => o.clone(),
            None => {
                let authority = match (https, port) {
                    (true, 443) | (false, 80) => parsed.host_str().unwrap_or_default().to_owned(),
                    _ => format!("{}:{port}", parsed.host_str().unwrap_or_default()),
                };
                let authority = HeaderValue::from_str(&authority)
                    .map_err(|_| DeliveryError::Refused { reason: "the URL's host is not a valid header".into() })?;
                let o = Arc::new(Origin {
                    https,
                    host,
                    port,
                    authority,
                    limit: Semaphore::new(self.concurrency),
                    idle: Mutex::new(Vec::new()),
                });
                maps.origins.insert(origin_key, o.clone());
                o
            }
        };
        let target = &parsed[url::Position::BeforePath..url::Position::AfterQuery];
        let path = Uri::try_from(if target.is_empty() { "/" } else { target })
            .map_err(|e| DeliveryError::Refused { reason: format!("the URL's path is not valid: {e}") })?;
        let route = Arc::new(Route { origin, path });
        maps.routes.insert(url.to_owned(), route.clone());
        Ok(route)
    }

    /// The address rules on the URL itself (a literal address never reaches the resolver);
    /// returns the origin key `scheme://host:port`, the host to resolve, `https` and the port.
    fn check_address(&self, url: &url::Url) -> Result<(String, String, bool, u16), DeliveryError> {
        let host = url.host_str().ok_or_else(|| DeliveryError::Refused { reason: "the URL has no host".into() })?;
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let https = match url.scheme() {
            "http" => false,
            "https" => true,
            other => return Err(DeliveryError::Refused { reason: format!("scheme {other} is not http(s)") }),
        };
        if !self.allow_link_local && bare.parse::<IpAddr>().is_ok_and(is_link_local_or_metadata) {
            return Err(DeliveryError::Refused { reason: format!("{bare} is a link-local or cloud metadata address") });
        }
        if !self.rule.allows_host(bare) {
            return Err(DeliveryError::Refused { reason: format!("{bare} is {}", self.rule.name()) });
        }
        if !self.allowed_hosts.is_empty() && !host_allowed(&self.allowed_hosts, bare) {
            return Err(DeliveryError::Refused { reason: format!("host {bare} is not in webhook_allowed_hosts") });
        }
        let port = url.port_or_known_default().unwrap_or(if https { 443 } else { 80 });
        Ok((format!("{}://{}:{port}", url.scheme(), host), bare.to_owned(), https, port))
    }

    /// A kept connection of `origin` ready for a request, if any (expired or closed ones are
    /// dropped, which closes them).
    async fn idle(&self, origin: &Origin) -> Option<Conn> {
        loop {
            let (mut conn, since) = {
                let mut idle = origin.idle.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                idle.pop()?
            };
            if since.elapsed() >= IDLE_TIMEOUT || conn.sender.is_closed() {
                continue;
            }
            // Driving it lets the connection notice a close that came while it was idle.
            if drive(&mut conn.driver, conn.sender.ready()).await.is_ok() && conn.driver.is_some() {
                return Some(conn);
            }
        }
    }

    fn keep(&self, origin: &Origin, conn: Conn) {
        let now = Instant::now();
        let mut idle = origin.idle.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        idle.retain(|(c, since)| now.duration_since(*since) < IDLE_TIMEOUT && !c.sender.is_closed());
        if idle.len() < self.max_idle {
            idle.push((conn, now));
        }
    }

    /// Drops every kept connection unused for [`IDLE_TIMEOUT`] (called now and then).
    pub(crate) fn sweep(&self) {
        let origins: Vec<Arc<Origin>> = {
            let maps = self.routes.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            maps.origins.values().cloned().collect()
        };
        let now = Instant::now();
        for o in origins {
            let mut idle = o.idle.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            idle.retain(|(c, since)| now.duration_since(*since) < IDLE_TIMEOUT && !c.sender.is_closed());
        }
    }

    /// A new connection to `origin` (resolved, checked, connected, TLS when `https`); its I/O
    /// runs when a request drives it, and it closes when dropped.
    async fn connect(&self, origin: &Origin) -> Result<Conn, DeliveryError> {
        let timeout = self.connect_timeout;
        match tokio::time::timeout(timeout, self.open(origin)).await {
            Ok(r) => r,
            Err(_) => Err(DeliveryError::Timeout { after: timeout }),
        }
    }

    async fn open(&self, origin: &Origin) -> Result<Conn, DeliveryError> {
        let tcp = self.tcp(origin).await?;
        let transport = |e: hyper::Error| DeliveryError::Transport(Box::new(e));
        if origin.https {
            let name = rustls::pki_types::ServerName::try_from(origin.host.clone())
                .map_err(|e| DeliveryError::Refused { reason: format!("not a TLS server name: {e}") })?;
            let tls = self.tls.connect(name, tcp).await.map_err(|e| DeliveryError::Transport(Box::new(e)))?;
            let (sender, conn) = http1::handshake::<_, Body>(TokioIo::new(tls)).await.map_err(transport)?;
            Ok(Conn { sender, driver: Some(Box::pin(conn)) })
        } else {
            let (sender, conn) = http1::handshake::<_, Body>(TokioIo::new(tcp)).await.map_err(transport)?;
            Ok(Conn { sender, driver: Some(Box::pin(conn)) })
        }
    }

    /// A TCP connection to the first of `origin`'s allowed addresses that answers.
    async fn tcp(&self, origin: &Origin) -> Result<TcpStream, DeliveryError> {
        let addrs: Vec<SocketAddr> = match origin.host.parse::<IpAddr>() {
            // A literal address passed the rules in `check_address`.
            Ok(ip) => vec![SocketAddr::new(ip, origin.port)],
            Err(_) => match resolve_guarded(&origin.host, origin.port, self.allow_link_local, &self.rule).await {
                Ok(a) => a,
                Err(e) if e.is::<RefusedAddress>() => return Err(DeliveryError::Refused { reason: e.to_string() }),
                Err(e) => return Err(DeliveryError::Transport(e)),
            },
        };
        let mut last: Option<std::io::Error> = None;
        for addr in addrs {
            match TcpStream::connect(addr).await {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    return Ok(s);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(DeliveryError::Transport(Box::new(
            last.unwrap_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no address")),
        )))
    }
}

/// The request headers of a target's configuration, checked.
///
/// # Errors
/// [`DeliveryError::Refused`] for a header name or value that is not valid HTTP.
pub(crate) fn headers(
    extra: &[(String, String)],
    signature: Option<HeaderValue>,
    signature_v2: Option<HeaderValue>,
) -> Result<HeaderMap, DeliveryError> {
    let mut map = HeaderMap::with_capacity(4 + extra.len());
    for (name, value) in extra {
        let n = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| DeliveryError::Refused { reason: format!("header name {name:?} is not valid") })?;
        let v = HeaderValue::from_str(value)
            .map_err(|_| DeliveryError::Refused { reason: format!("the value of header {name} is not valid") })?;
        map.append(n, v);
    }
    if let Some(v) = signature {
        map.insert(HeaderName::from_static("x-nolag-signature"), v);
    }
    if let Some(v) = signature_v2 {
        map.insert(HeaderName::from_static("x-nolag-signature-v2"), v);
    }
    Ok(map)
}
