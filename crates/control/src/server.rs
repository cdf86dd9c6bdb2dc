//! Serving the control plane: the `Control` service behind the admin-key check, plus the
//! standard health (`grpc.health.v1`) and reflection (`grpc.reflection.v1`) services, which
//! need no key so that probes and `grpcurl list` work.

use std::net::SocketAddr;
use std::sync::Arc;

use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;
use tonic::service::interceptor::InterceptedService;
use tonic::{Request, Status};

use crate::pb;
use crate::pb::control_server::ControlServer;
use crate::service::ControlService;

/// Checks `authorization: Bearer <admin key>` on every call (constant time: digests compared).
#[derive(Clone)]
pub struct AdminKeyCheck {
    digest: Arc<[u8; 32]>,
}

impl std::fmt::Debug for AdminKeyCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminKeyCheck(<redacted>)")
    }
}

impl AdminKeyCheck {
    /// A check accepting `key`.
    pub fn new(key: &str) -> Self {
        Self { digest: Arc::new(Sha256::digest(key.as_bytes()).into()) }
    }
}

impl tonic::service::Interceptor for AdminKeyCheck {
    fn call(&mut self, req: Request<()>) -> Result<Request<()>, Status> {
        let Some(value) = req.metadata().get("authorization") else {
            return Err(Status::unauthenticated("missing admin API key: send `authorization: Bearer <key>`"));
        };
        let given = value.to_str().ok().and_then(|v| v.strip_prefix("Bearer ")).unwrap_or_default();
        let d: [u8; 32] = Sha256::digest(given.trim().as_bytes()).into();
        // Fixed-length digests compared in full: no early exit that would time the key.
        let same = d.iter().zip(self.digest.iter()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0;
        if same { Ok(req) } else { Err(Status::unauthenticated("invalid admin API key")) }
    }
}

/// Serves the control plane on `listener` until `stop` is cancelled.
///
/// # Errors
/// When the listener fails or the reflection descriptors do not load (a build defect).
pub async fn serve(
    listener: tokio::net::TcpListener,
    service: ControlService,
    admin_key: &str,
    stop: CancellationToken,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let (health_reporter, health) = tonic_health::server::health_reporter();
    health_reporter.set_serving::<ControlServer<ControlService>>().await;
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let control = InterceptedService::new(ControlServer::new(service), AdminKeyCheck::new(admin_key));
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    tonic::transport::Server::builder()
        .trace_fn(rpc_span)
        .add_service(health)
        .add_service(reflection)
        .add_service(control)
        .serve_with_incoming_shutdown(incoming, stop.cancelled_owned())
        .await?;
    Ok(())
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
