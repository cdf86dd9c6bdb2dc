//! Serving the control plane: the `Control` service behind the admin-key check, plus the
//! standard health (`grpc.health.v1`) service, which needs no key so that probes work, and
//! reflection (`grpc.reflection.v1`), behind the key unless [`ServeOptions::reflection_public`].
//! Failed key checks back off per source address ([`crate::throttle`]). With a TLS acceptor
//! every connection completes a handshake first.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;
use tonic::service::interceptor::InterceptedService;
use tonic::{Request, Status};

use crate::grpc::throttle::{AdminKeyThrottle, ThrottleConfig};
use crate::pb;
use crate::pb::control_server::ControlServer;
use crate::service::ControlService;

/// How long a control-plane client gets to complete its TLS handshake.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Checks `authorization: Bearer <admin key>` on every call (constant time: digests compared),
/// refusing addresses that failed too often ([`AdminKeyThrottle`]).
#[derive(Clone)]
pub struct AdminKeyCheck {
    digest: Arc<[u8; 32]>,
    throttle: Arc<AdminKeyThrottle>,
}

impl std::fmt::Debug for AdminKeyCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminKeyCheck(<redacted>)")
    }
}

impl AdminKeyCheck {
    /// A check accepting `key`, with a throttle of its own with the default settings.
    pub fn new(key: &str) -> Self {
        Self::with_throttle(key, Arc::new(AdminKeyThrottle::new(ThrottleConfig::default())))
    }

    /// A check accepting `key`, backing off failing addresses in `throttle` (the table the
    /// dashboard's sign-in shares: issue 33, item 11).
    pub fn with_throttle(key: &str, throttle: Arc<AdminKeyThrottle>) -> Self {
        Self { digest: Arc::new(Sha256::digest(key.as_bytes()).into()), throttle }
    }

    fn key_matches(&self, req: &Request<()>) -> Result<(), Status> {
        let Some(value) = req.metadata().get("authorization") else {
            return Err(Status::unauthenticated("missing admin API key: send `authorization: Bearer <key>`"));
        };
        let given = value.to_str().ok().and_then(|v| v.strip_prefix("Bearer ")).unwrap_or_default();
        let d: [u8; 32] = Sha256::digest(given.trim().as_bytes()).into();
        // Fixed-length digests compared in full: no early exit that would time the key.
        let same = d.iter().zip(self.digest.iter()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0;
        if same { Ok(()) } else { Err(Status::unauthenticated("invalid admin API key")) }
    }
}

/// The refusal of a blocked address.
fn throttled(remaining: Duration) -> Status {
    let secs = remaining.as_secs() + u64::from(remaining.subsec_nanos() > 0);
    Status::resource_exhausted(format!("too many failed admin-key attempts; retry in {secs}s"))
}

impl tonic::service::Interceptor for AdminKeyCheck {
    fn call(&mut self, req: Request<()>) -> Result<Request<()>, Status> {
        let verdict = self.key_matches(&req);
        let Some(ip) = req.remote_addr().map(|a| a.ip()) else {
            return verdict.map(|()| req);
        };
        let now = Instant::now();
        let blocked = self.throttle.check(ip, now).err();
        match (verdict, blocked) {
            (Ok(()), None) => {
                self.throttle.succeeded(ip);
                Ok(req)
            }
            // A blocked address is refused whatever it presents, so the block cannot be used to
            // test keys; wrong keys sent meanwhile lengthen it.
            (Ok(()), Some(remaining)) => Err(throttled(remaining)),
            (Err(_), Some(remaining)) => Err(throttled(self.throttle.failed(ip, now).unwrap_or(remaining))),
            (Err(status), None) => {
                if let Some(block) = self.throttle.failed(ip, now) {
                    tracing::warn!(%ip, block_s = block.as_secs(), "Repeated failed admin-key checks; address blocked.");
                }
                Err(status)
            }
        }
    }
}

pub use crate::settings::DEFAULT_REQUEST_TIMEOUT;

/// How [`serve`] runs the control plane.
#[derive(Clone)]
pub struct ServeOptions {
    /// The key calls must present (`authorization: Bearer KEY`).
    pub admin_key: String,
    /// Handshakes every connection when set (certificates come from the caller).
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    /// Serves reflection without the admin key (development).
    pub reflection_public: bool,
    /// Backing off addresses that fail the key check: the node's one table, shared with the
    /// dashboard's sign-in.
    pub throttle: Arc<AdminKeyThrottle>,
    /// Longest a call may take, reading its request body included (`grpc_request_timeout`,
    /// issue 33): a request whose body never arrives is answered `CANCELLED` and its stream
    /// freed within it.
    pub request_timeout: Duration,
}

impl std::fmt::Debug for ServeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeOptions")
            .field("admin_key", &"<redacted>")
            .field("tls", &self.tls.is_some())
            .field("reflection_public", &self.reflection_public)
            .field("request_timeout", &self.request_timeout)
            .finish_non_exhaustive()
    }
}

impl ServeOptions {
    /// Plain TCP, reflection behind the key, a throttle of its own with the default settings.
    pub fn new(admin_key: impl Into<String>) -> Self {
        Self {
            admin_key: admin_key.into(),
            tls: None,
            reflection_public: false,
            throttle: Arc::new(AdminKeyThrottle::new(ThrottleConfig::default())),
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }
}

/// Serves the control plane on `listener` until `stop` is cancelled.
///
/// # Errors
/// When the listener fails or the reflection descriptors do not load (a build defect).
pub async fn serve(
    listener: tokio::net::TcpListener,
    service: ControlService,
    options: ServeOptions,
    stop: CancellationToken,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let (health_reporter, health) = tonic_health::server::health_reporter();
    health_reporter.set_serving::<ControlServer<ControlService>>().await;
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let check = AdminKeyCheck::with_throttle(&options.admin_key, options.throttle.clone());
    let control = InterceptedService::new(ControlServer::new(service), check.clone());
    // The timeout wraps each call's whole handling, which for a unary call includes reading its
    // request body: a client that sends the headers and never the body no longer holds the
    // stream (issue 33, item 6). A health `Watch` stream ends after it too.
    let router = tonic::transport::Server::builder()
        .timeout(options.request_timeout)
        .trace_fn(rpc_span)
        .add_service(health)
        .add_service(control);
    let router = if options.reflection_public {
        router.add_service(reflection)
    } else {
        router.add_service(InterceptedService::new(reflection, check))
    };
    match options.tls {
        None => {
            let incoming = tonic::transport::server::TcpIncoming::from(listener);
            router.serve_with_incoming_shutdown(incoming, stop.cancelled_owned()).await?;
        }
        Some(acceptor) => {
            let handshakes = tokio_util::task::TaskTracker::new();
            // A child token: the accept loop also ends when the server returns with an error.
            let accepting = stop.child_token();
            let incoming = tls_incoming(listener, acceptor, &handshakes, accepting.clone());
            let served = router.serve_with_incoming_shutdown(incoming, stop.cancelled_owned()).await;
            accepting.cancel();
            handshakes.close();
            handshakes.wait().await;
            served?;
        }
    }
    Ok(())
}

/// Handshaken TLS connections from `listener`: one task per handshake (so a slow client never
/// holds up the others), each bounded by [`TLS_HANDSHAKE_TIMEOUT`].
fn tls_incoming(
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    tasks: &tokio_util::task::TaskTracker,
    stop: CancellationToken,
) -> impl futures_util::Stream<Item = std::io::Result<tokio_rustls::server::TlsStream<tokio::net::TcpStream>>> {
    // Bounded: when the server takes no connections, finished handshakes wait here, and their
    // tasks (each holding one socket) wait with them.
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let spawner = tasks.clone();
    tasks.spawn(async move {
        loop {
            let (tcp, peer) = tokio::select! {
                () = stop.cancelled() => return,
                accepted = listener.accept() => match accepted {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::debug!(error = %e, "gRPC accept failed.");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            let (acceptor, tx, stop) = (acceptor.clone(), tx.clone(), stop.clone());
            spawner.spawn(async move {
                let handshake = tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(tcp));
                let tls = tokio::select! {
                    () = stop.cancelled() => return,
                    r = handshake => match r {
                        Ok(Ok(tls)) => tls,
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "gRPC TLS handshake failed.");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(%peer, "gRPC TLS handshake timed out.");
                            return;
                        }
                    },
                };
                tokio::select! {
                    () = stop.cancelled() => {}
                    _ = tx.send(tls) => {}
                }
            });
        }
    });
    futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|s| (Ok(s), rx)) })
}

/// One `skua.rpc` span per call, named after the gRPC method, when traces are exported
/// (`skua_core::trace`); otherwise a disabled span.
fn rpc_span(req: &tonic::codegen::http::Request<()>) -> tracing::Span {
    if skua_core::trace::enabled() {
        let method = req.uri().path();
        tracing::info_span!(parent: None, "skua.rpc", otel.name = %method, rpc.system = "grpc", rpc.method = %method)
    } else {
        tracing::Span::none()
    }
}

/// Binds `addr` for [`serve`].
///
/// # Errors
/// When the address cannot be bound.
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}
