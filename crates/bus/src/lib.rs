//! Bus backends: implementations of [`skua_core::Bus`], the slot that moves publications and
//! presence events between nodes.
//!
//! This crate depends on `skua-core` (and on `skua-protocol` for its MessagePack reader and
//! writer, used by the MQTT envelope codec); the edge never names it (only the server picks a
//! backend). Modules:
//! - [`in_process`]: [`InProcessBus`], the embedded bus for a single process: every node is a
//!   handle onto one shared routing table, deliveries go through one bounded channel per node.
//! - [`mqtt`]: [`MqttBus`], the cluster bus: one MQTT v5 connection per node to a broker
//!   (Mosquitto, EMQX, VerneMQ); topic layout and envelope format in `docs/cluster.md`.
//!
//! Both are always compiled: one binary serves every role. Every implementation passes
//! `skua_conformance::bus_conformance!`.

pub mod in_process;
pub mod mqtt;

pub use in_process::{DEFAULT_MAX_RETAINED, InProcessBus};
pub use mqtt::{MqttBus, MqttBusConfig, MqttBusStats, MqttConfigError, MqttError};
