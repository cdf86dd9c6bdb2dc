//! The door's transports: MQTT on TCP (`mqtt_listen`), over TLS (`mqtt_tls_listen`, the client
//! listener's certificate) and over WebSocket at `/mqtt` on the client listener (the edge
//! upgrades it, [`WsDoor`]). Each connection takes a connection slot and its address's count
//! from the node's shared pools (a device's sockets and the same client's WebSockets are
//! counted together), must bring its `CONNECT` within `http_header_timeout` of its accept (TLS
//! handshake included; for WebSocket, of the upgrade), and then runs the same connection code.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use skua_edge::EdgeState;
use skua_edge::door::{DoorAdmission, DoorLimits, DoorRefusal, WsDoor, WsIo};
use skua_edge::revalidate::ConnProtocol;
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Instant, timeout_at};
use tokio_rustls::TlsAcceptor;

use crate::conn;
use crate::{MqttLimits, MqttMetrics};

/// The subprotocol of MQTT over WebSocket (MQTT 5.0 §6, MQTT-6.0.0-3; 3.1.1 §6).
pub const WS_SUBPROTOCOL: &str = "mqtt";

/// The MQTT door of one node: what its listeners and its WebSocket route share (counters,
/// bounds); a `CONNECT` takes over its client identifier's session whatever the transport.
pub struct MqttDoor {
    metrics: Arc<MqttMetrics>,
    limits: MqttLimits,
}

impl std::fmt::Debug for MqttDoor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MqttDoor").field("limits", &self.limits).finish_non_exhaustive()
    }
}

impl MqttDoor {
    /// The door with `metrics` (register them with the node's metrics sources) and `limits`.
    pub fn new(metrics: Arc<MqttMetrics>, limits: MqttLimits) -> Arc<Self> {
        Arc::new(Self { metrics, limits })
    }

    /// Accepts MQTT connections on `listener` (over TLS with `tls`) until the node's shutdown
    /// token is cancelled; each runs on the node's task tracker (a drain waits for it).
    pub async fn serve(self: Arc<Self>, listener: TcpListener, tls: Option<TlsAcceptor>, st: Arc<EdgeState>) {
        let admission = DoorLimits::new(&st);
        loop {
            let accepted = tokio::select! {
                () = st.shutdown.cancelled() => return,
                a = listener.accept() => a,
            };
            let (tcp, peer) = match accepted {
                Ok(a) => a,
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    // Out of file descriptors and the like: wait a little rather than spin.
                    tracing::warn!(error = %e, "Accepting an MQTT connection failed.");
                    tokio::select! {
                        () = st.shutdown.cancelled() => return,
                        () = tokio::time::sleep(Duration::from_millis(100)) => continue,
                    }
                }
            };
            let admitted = match admission.admit(&st, peer) {
                Ok(a) => a,
                Err(r) => {
                    self.metrics.refused.inc(match r {
                        DoorRefusal::Draining => "draining",
                        DoorRefusal::Full => "full",
                        DoorRefusal::Address => "address",
                        DoorRefusal::ProxyHeader => "proxy_header",
                    });
                    continue;
                }
            };
            self.metrics.connections.fetch_add(1, Ordering::Relaxed);
            let (door, st2, tls, limits) = (self.clone(), st.clone(), tls.clone(), admission.clone());
            st.tracker.spawn(async move { door.serve_tcp(tcp, peer, tls, admitted, limits, st2).await });
        }
    }

    /// Serves one accepted socket: with `proxy_protocol` its PROXY header first (the client's
    /// address), then the TLS handshake, if any, all within the `CONNECT`'s deadline.
    async fn serve_tcp(
        &self,
        mut tcp: TcpStream,
        peer: SocketAddr,
        tls: Option<TlsAcceptor>,
        admitted: DoorAdmission,
        limits: DoorLimits,
        st: Arc<EdgeState>,
    ) {
        // The writer batches packets already (as the WebSocket edge's, docs/benchmarks.md).
        let _ = tcp.set_nodelay(true);
        let deadline = Instant::now() + st.config.http_header_timeout;
        let admitted = match timeout_at(deadline, limits.readmit(&st, &mut tcp, admitted)).await {
            Ok(Ok(a)) => a,
            Ok(Err(r)) => {
                self.metrics.refused.inc(if r == DoorRefusal::Address { "address" } else { "proxy_header" });
                return;
            }
            Err(_) => {
                tracing::debug!(%peer, "No PROXY header within the header timeout; closed.");
                self.metrics.refused.inc("proxy_header");
                return;
            }
        };
        let (rd, wr): (conn::Reader, conn::Writer) = match tls {
            None => {
                let (rd, wr) = tcp.into_split();
                (Box::new(rd), Box::new(wr))
            }
            Some(acceptor) => match timeout_at(deadline, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => {
                    let (rd, wr) = tokio::io::split(stream);
                    (Box::new(rd), Box::new(wr))
                }
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "MQTT TLS handshake failed.");
                    self.metrics.refused.inc("tls_handshake");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "MQTT TLS handshake did not finish within the header timeout.");
                    self.metrics.refused.inc("tls_handshake");
                    return;
                }
            },
        };
        let metrics = self.metrics.clone();
        conn::serve_socket(rd, wr, deadline, ConnProtocol::Mqtt, admitted, st, metrics, self.limits).await;
    }
}

impl WsDoor for MqttDoor {
    fn subprotocol(&self) -> &'static str {
        WS_SUBPROTOCOL
    }

    fn serve(
        &self,
        st: Arc<EdgeState>,
        io: WsIo,
        admitted: DoorAdmission,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'static>> {
        self.metrics.connections.fetch_add(1, Ordering::Relaxed);
        let (metrics, limits) = (self.metrics.clone(), self.limits);
        Box::pin(async move {
            let deadline = Instant::now() + st.config.http_header_timeout;
            let (rd, wr): (conn::Reader, conn::Writer) = (Box::new(io.reader), Box::new(io.writer));
            conn::serve_socket(rd, wr, deadline, ConnProtocol::MqttWs, admitted, st, metrics, limits).await;
        })
    }
}

/// Errors of one connection that `accept` reports; the listener is fine.
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    matches!(e.kind(), ConnectionAborted | ConnectionRefused | ConnectionReset)
}
