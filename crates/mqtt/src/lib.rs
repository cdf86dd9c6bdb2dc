//! Skua's MQTT device door (issue 37, docs/protocol.md N49–N54): MQTT 3.1.1 and 5.0 clients on
//! their own listener (`mqtt_listen`), driving the same session a WebSocket connection drives
//! ([`skua_edge::door::DoorSession`]): same auth and throttling, topic resolution and grants,
//! publish pipeline, hub subscriptions, outbound queue and no-echo rule.
//!
//! Modules:
//! - [`codec`]: packets in (rumqttc's decoders inside our bounds) and out;
//! - [`payload`]: device payloads ↔ NoLag `data` (N51);
//! - [`frames`]: the NoLag frames a session queues, read for the device's writer;
//! - [`settings`]: the door's protocol bounds as settings ([`MqttSettings`]) and checked
//!   ([`MqttLimits`]);
//! - `conn`: one device connection: `CONNECT`, its reader loop and its writer.

pub mod codec;
mod conn;
pub mod frames;
pub mod payload;
pub mod settings;

pub use settings::{MqttLimits, MqttSettings};

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use skua_edge::EdgeState;
use skua_edge::metrics::Family;
use tokio::net::TcpListener;

/// The door's counters, rendered on `/metrics` (register with the node's metrics sources).
#[derive(Debug, Default)]
pub struct MqttMetrics {
    /// Connections accepted on the MQTT listener.
    pub connections: AtomicU64,
    /// Sockets refused at accept, by reason (`draining`, `full`, `address`).
    pub refused: Family,
    /// `CONNECT`s answered, by outcome (`ok`, `refused`, `malformed_credential`, ...).
    pub connects: Family,
    /// Device publishes refused, by reason (the NoLag error string; 3.1.1 acks them anyway).
    pub publishes_refused: Family,
    /// Connections closed for bad input, by fault (`malformed`, `protocol_error`, ...).
    pub faults: Family,
    /// Deliveries dropped because they exceed the device's maximum packet size (5.0).
    pub deliveries_too_large: AtomicU64,
}

impl skua_edge::metrics::MetricsSource for MqttMetrics {
    fn render(&self, out: &mut String) {
        use std::fmt::Write;
        let _ = writeln!(out, "# HELP skua_mqtt_connections_total Connections accepted on the MQTT listener.");
        let _ = writeln!(out, "# TYPE skua_mqtt_connections_total counter");
        let _ = writeln!(out, "skua_mqtt_connections_total {}", self.connections.load(Ordering::Relaxed));
        let families: [(&str, &str, &str, &Family); 4] = [
            ("skua_mqtt_refused_total", "reason", "MQTT sockets refused at accept.", &self.refused),
            ("skua_mqtt_connects_total", "outcome", "MQTT CONNECTs answered, by outcome.", &self.connects),
            (
                "skua_mqtt_publishes_refused_total",
                "reason",
                "Device publishes refused (3.1.1 acks them and drops them), by reason.",
                &self.publishes_refused,
            ),
            ("skua_mqtt_faults_total", "fault", "MQTT connections closed for bad input.", &self.faults),
        ];
        for (name, label, help, family) in families {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} counter");
            for (value, n) in family.snapshot() {
                let _ = writeln!(out, "{name}{{{label}=\"{value}\"}} {n}");
            }
        }
        let _ = writeln!(
            out,
            "# HELP skua_mqtt_deliveries_too_large_total Deliveries dropped: larger than the device's maximum packet size."
        );
        let _ = writeln!(out, "# TYPE skua_mqtt_deliveries_too_large_total counter");
        let _ =
            writeln!(out, "skua_mqtt_deliveries_too_large_total {}", self.deliveries_too_large.load(Ordering::Relaxed));
    }
}

/// Accepts MQTT connections on `listener` until the node's shutdown token is cancelled. Each
/// connection takes a connection slot and its address's count as a WebSocket does, and runs
/// on the node's task tracker (a drain waits for it). `limits` bound what its packets carry.
pub async fn serve(listener: TcpListener, st: Arc<EdgeState>, metrics: Arc<MqttMetrics>, limits: MqttLimits) {
    let door = skua_edge::door::DoorLimits::new(&st);
    loop {
        let accepted = tokio::select! {
            () = st.shutdown.cancelled() => return,
            a = listener.accept() => a,
        };
        let (tcp, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors and the like: wait a little rather than spin.
                tracing::warn!(error = %e, "Accepting an MQTT connection failed.");
                tokio::select! {
                    () = st.shutdown.cancelled() => return,
                    () = tokio::time::sleep(std::time::Duration::from_millis(100)) => continue,
                }
            }
        };
        let admitted = match door.admit(&st, peer) {
            Ok(a) => a,
            Err(r) => {
                metrics.refused.inc(match r {
                    skua_edge::door::DoorRefusal::Draining => "draining",
                    skua_edge::door::DoorRefusal::Full => "full",
                    skua_edge::door::DoorRefusal::Address => "address",
                });
                continue;
            }
        };
        metrics.connections.fetch_add(1, Ordering::Relaxed);
        let (st2, m2) = (st.clone(), metrics.clone());
        st.tracker.spawn(async move {
            conn::serve_socket(tcp, admitted, st2, m2, limits).await;
        });
    }
}
