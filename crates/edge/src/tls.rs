//! The client listener over TLS (`wss://`): accept, handshake with a deadline, then serve the
//! router over HTTP/1.1 with upgrades. The acceptor (certificates, reloading) is built by the
//! server crate; plain TCP goes through `axum::serve` in [`crate::serve`].

use std::time::Duration;

use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How long a client gets to complete the TLS handshake before its socket is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `app` on `listener` through `acceptor` until `shutdown` is cancelled, then lets
/// connections still in HTTP finish (upgraded sockets are tracked by the edge itself).
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    acceptor: TlsAcceptor,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let connections = TaskTracker::new();
    loop {
        let (tcp, peer) = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(c) => c,
                Err(e) => {
                    // A failed accept (a reset before accept, out of descriptors) must not end
                    // the listener; pause briefly as axum::serve does so EMFILE cannot spin.
                    tracing::debug!(error = %e, "Accept failed.");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        // TCP_NODELAY: as on the plain listener (the writer batches frames itself).
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY could not be set.");
        }
        let acceptor = acceptor.clone();
        let app = app.clone();
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed.");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out.");
                    return;
                }
            };
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), TowerToHyperService::new(app))
                .with_upgrades();
            tokio::pin!(conn);
            let result = tokio::select! {
                r = conn.as_mut() => r,
                () = shutdown.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = result {
                tracing::debug!(%peer, error = %e, "HTTP connection ended with an error.");
            }
        });
    }
    connections.close();
    connections.wait().await;
    Ok(())
}
