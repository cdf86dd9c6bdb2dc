//! Skua's MQTT device door (issue 37, docs/protocol.md N49–N54): MQTT 3.1.1 and 5.0 clients on
//! their own listener (`mqtt_listen`, over TLS `mqtt_tls_listen`) and over WebSocket at `/mqtt`,
//! driving the same session a WebSocket connection drives
//! ([`skua_edge::door::DoorSession`]): same auth and throttling, topic resolution and grants,
//! publish pipeline, hub subscriptions, outbound queue and no-echo rule.
//!
//! Modules:
//! - [`codec`]: packets in (rumqttc's decoders inside our bounds) and out;
//! - [`payload`]: device payloads ↔ NoLag `data` (N51);
//! - [`frames`]: the NoLag frames a session queues, read for the device's writer;
//! - [`settings`]: the door's protocol bounds as settings ([`MqttSettings`]) and checked
//!   ([`MqttLimits`]);
//! - [`listener`]: the transports: TCP, TLS, WebSocket (`/mqtt`), sharing the node's
//!   connection slots and per-address counts;
//! - `conn`: one device connection: `CONNECT`, its reader loop and its writer.

pub mod codec;
mod conn;
pub mod frames;
pub mod listener;
pub mod payload;
pub mod settings;

pub use listener::MqttDoor;
pub use settings::{MqttLimits, MqttSettings};

use std::sync::atomic::{AtomicU64, Ordering};

use skua_edge::metrics::Family;

/// The door's counters, rendered on `/metrics` (register with the node's metrics sources).
#[derive(Debug, Default)]
pub struct MqttMetrics {
    /// Connections accepted on the MQTT listener.
    pub connections: AtomicU64,
    /// Sockets refused at accept, by reason (`draining`, `full`, `address`, `tls_handshake`).
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
