//! [`MqttSettings`]: the MQTT door's protocol bounds (`mqtt_*`, docs/mqtt.md "Limits"), as
//! flags, `SKUA_*` variables and config-file keys; the server checks them into the
//! [`MqttLimits`] the door runs with. The plain listener itself (`mqtt_listen`) is the node's
//! setting; the TLS one (`mqtt_tls_listen`) is declared here.

use skua_core::setting;
use skua_core::settings::SettingError;
use skua_core::settings::check::{between, optional_address};

skua_core::settings! {
    /// The MQTT device door's bounds on what one packet may carry (docs/mqtt.md, "Limits").
    pub struct MqttSettings {
        /// MQTT over TLS (mqtts) device listener, e.g. 0.0.0.0:8883, with the client listener's certificate; empty = off [default empty].
        ///
        /// MQTT over TLS ("mqtts", docs/mqtt.md) on its own address, e.g. "0.0.0.0:8883": the same door
        /// as mqtt_listen, with the client listener's certificate (tls_cert/tls_key or --tls-self-signed,
        /// reloaded with it); starting with this set and no certificate is refused. Empty = off. Either
        /// MQTT listener also enables MQTT over WebSocket at /mqtt on the client listener.
        #[arg(long, env = "SKUA_MQTT_TLS_LISTEN")]
        pub mqtt_tls_listen: String = "",
        /// MQTT: longest topic name or filter a device may send, in bytes; longer closes the connection as malformed [default 1024].
        ///
        /// MQTT device door (docs/mqtt.md): longest topic name or filter a device may send, in bytes
        /// (a NoLag address is three slugs). Longer closes the connection as malformed (5.0
        /// DISCONNECT 0x81). 1 to 65535 (an MQTT string's limit).
        #[arg(long, env = "SKUA_MQTT_MAX_TOPIC_BYTES")]
        pub mqtt_max_topic_bytes: usize = 1024,
        /// MQTT: most topic filters in one SUBSCRIBE or UNSUBSCRIBE; more closes the connection as malformed [default 64].
        ///
        /// MQTT: most topic filters in one SUBSCRIBE or UNSUBSCRIBE. More closes the connection as
        /// malformed. 1 to 4096; what a device may hold is max_subscriptions_per_connection.
        #[arg(long, env = "SKUA_MQTT_MAX_FILTERS")]
        pub mqtt_max_filters: usize = 64,
        /// MQTT 5.0: most user properties in one packet; more closes the connection as malformed [default 32].
        ///
        /// MQTT 5.0: most user properties in one packet (CONNECT, its will, PUBLISH, SUBSCRIBE,
        /// UNSUBSCRIBE). More closes the connection as malformed. 1 to 4096.
        #[arg(long, env = "SKUA_MQTT_MAX_USER_PROPERTIES")]
        pub mqtt_max_user_properties: usize = 32,
        /// MQTT: longest client identifier in CONNECT, in bytes; longer closes the connection as malformed [default 256].
        ///
        /// MQTT: longest client identifier a CONNECT may carry, in bytes. Longer closes the connection
        /// as malformed. 23 to 65535: MQTT requires servers to accept identifiers of 1 to 23 bytes.
        #[arg(long, env = "SKUA_MQTT_MAX_CLIENT_ID_BYTES")]
        pub mqtt_max_client_id_bytes: usize = 256,
        /// MQTT: QoS 2 publishes of one device awaiting their PUBREL (the 5.0 receive maximum told in CONNACK); one more closes the connection [default 64].
        ///
        /// MQTT: QoS 2 publishes of one device received and awaiting their PUBREL; told to 5.0
        /// devices as the receive maximum in CONNACK. One more closes the connection (protocol
        /// error, 0x82). 1 to 65535.
        #[arg(long, env = "SKUA_MQTT_RECEIVE_MAXIMUM")]
        pub mqtt_receive_maximum: u16 = 64,
        /// MQTT: QoS 1/2 deliveries to one device awaiting its PUBACK/PUBCOMP; at most the device's own 5.0 receive maximum [default 32].
        ///
        /// MQTT: QoS 1 and 2 deliveries to one device sent and not yet acknowledged (PUBACK, or
        /// PUBCOMP for QoS 2); a 5.0 device's own receive maximum lowers it. When they are all in
        /// flight the device's writer waits for an acknowledgement (its queue fills as a slow
        /// consumer's would). 1 to 65535.
        #[arg(long, env = "SKUA_MQTT_MAX_INFLIGHT")]
        pub mqtt_max_inflight: u16 = 32,
    }
}

/// The MQTT door's protocol bounds, checked from [`MqttSettings`] ([`MqttSettings::limits`]);
/// `Default` is the declared defaults, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MqttLimits {
    /// Longest topic name or filter, in bytes (`mqtt_max_topic_bytes`).
    pub max_topic_bytes: usize,
    /// Most topic filters in one `SUBSCRIBE` or `UNSUBSCRIBE` (`mqtt_max_filters`).
    pub max_filters: usize,
    /// Most user properties in one 5.0 packet (`mqtt_max_user_properties`).
    pub max_user_properties: usize,
    /// Longest client identifier, in bytes (`mqtt_max_client_id_bytes`).
    pub max_client_id_bytes: usize,
    /// Most QoS 2 publishes awaiting `PUBREL`, the 5.0 receive maximum (`mqtt_receive_maximum`).
    pub receive_maximum: u16,
    /// Most QoS 1/2 deliveries to one device awaiting acknowledgement (`mqtt_max_inflight`).
    pub max_inflight: u16,
}

impl MqttSettings {
    /// These settings checked: each bound above 0 and below what MQTT itself allows.
    ///
    /// # Errors
    /// [`SettingError`] naming the first bad key.
    pub fn limits(&self) -> Result<MqttLimits, SettingError> {
        use MqttLimits as L;
        Ok(L {
            max_topic_bytes: between(setting!(self, mqtt_max_topic_bytes), 1, L::MAX_STRING)?,
            max_filters: between(setting!(self, mqtt_max_filters), 1, L::MAX_PER_PACKET)?,
            max_user_properties: between(setting!(self, mqtt_max_user_properties), 1, L::MAX_PER_PACKET)?,
            max_client_id_bytes: between(setting!(self, mqtt_max_client_id_bytes), L::MIN_CLIENT_ID, L::MAX_STRING)?,
            receive_maximum: between(setting!(self, mqtt_receive_maximum), 1, u16::MAX)?,
            max_inflight: between(setting!(self, mqtt_max_inflight), 1, u16::MAX)?,
        })
    }

    /// `mqtt_tls_listen` checked: the MQTT-over-TLS listener's address, `None` when empty (off).
    ///
    /// # Errors
    /// [`SettingError`] when it is not a socket address.
    pub fn tls_listen(&self) -> Result<Option<std::net::SocketAddr>, SettingError> {
        optional_address(setting!(self, mqtt_tls_listen))
    }
}

impl Default for MqttLimits {
    /// The declared defaults, checked (`tests::the_declared_defaults_pass_their_checks`).
    fn default() -> Self {
        MqttSettings::defaults().limits().unwrap_or_else(|e| unreachable!("the declared defaults: {e}"))
    }
}

impl MqttLimits {
    /// Longest topic or client identifier a setting may allow: an MQTT string's length.
    pub const MAX_STRING: usize = 65_535;
    /// Most filters or user properties per packet a setting may allow.
    pub const MAX_PER_PACKET: usize = 4096;
    /// Shortest client identifier limit: MQTT servers must accept 1 to 23 bytes (MQTT-3.1.3-5).
    pub const MIN_CLIENT_ID: usize = 23;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_declared_defaults_pass_their_checks() {
        let l = MqttSettings::defaults().limits().unwrap();
        assert_eq!((l.max_topic_bytes, l.max_inflight), (1024, 32));
        assert_eq!(MqttLimits::default(), l);
    }

    #[test]
    fn a_bound_beyond_mqtt_is_refused_by_name() {
        let s = MqttSettings { mqtt_max_client_id_bytes: Some(22), ..MqttSettings::defaults() };
        let e = s.limits().unwrap_err();
        assert_eq!((e.key, e.reason.as_str()), ("mqtt_max_client_id_bytes", "22: must be between 23 and 65535"));
        let s = MqttSettings { mqtt_max_inflight: Some(0), ..MqttSettings::defaults() };
        assert_eq!(s.limits().unwrap_err().key, "mqtt_max_inflight");
        let s = MqttSettings { mqtt_tls_listen: Some("8883".into()), ..MqttSettings::defaults() };
        assert_eq!(s.tls_listen().unwrap_err().key, "mqtt_tls_listen");
        assert_eq!(MqttSettings::defaults().tls_listen(), Ok(None), "off by default");
    }
}
