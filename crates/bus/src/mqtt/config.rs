//! [`MqttBusConfig`]: how a node reaches its broker, and the bounds of everything it buffers.

use std::sync::Arc;
use std::time::Duration;

use skua_core::ids::is_slug;

/// Default [`MqttBusConfig::max_packet_size`]: 1 MiB + 64 KiB, so that a publication carrying
/// the largest payload the edge accepts (921 600 bytes) plus its envelope and topic fits.
pub const DEFAULT_MAX_PACKET_SIZE: u32 = 1024 * 1024 + 64 * 1024;

/// The largest packet MQTT can express (the 4-byte remaining length, plus its header).
const MQTT_MAX_PACKET_SIZE: u32 = 268_435_455;

/// The default broker port when the url names none.
const DEFAULT_PORT: u16 = 1883;
/// The default broker port of `mqtts://`.
const DEFAULT_TLS_PORT: u16 = 8883;

/// `scheme://host…` with any `user:password@` replaced by `…@`, for logs and errors: a bus url
/// may carry the broker password.
pub fn redact_url(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.rfind('@') {
            Some(at) => format!("{scheme}://…@{}", &rest[at + 1..]),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// TLS material of an `mqtts://` connection, as PEM bytes read by the caller.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct MqttTls {
    /// CA certificates the broker's certificate must chain to; `None`: the system's roots.
    pub ca_pem: Option<Vec<u8>>,
    /// Client certificate chain and private key, for brokers that require client certificates.
    pub client_pem: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for MqttTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MqttTls")
            .field("ca_pem", &self.ca_pem.as_ref().map(|_| "<pem>"))
            .field("client_pem", &self.client_pem.as_ref().map(|_| "<certificate and redacted key>"))
            .finish()
    }
}

/// Reads the TLS material of an `mqtts://` connection again (the files it came from), before
/// every reconnection attempt: renewed certificates reach the next connection without a restart.
/// `Err` is a sentence (a file that cannot be read or is half written); the previous material is
/// kept and the next attempt reads again.
#[derive(Clone)]
pub struct MqttTlsReload(pub Arc<dyn Fn() -> Result<MqttTls, String> + Send + Sync>);

impl PartialEq for MqttTlsReload {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for MqttTlsReload {}

impl std::fmt::Debug for MqttTlsReload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MqttTlsReload(<files>)")
    }
}

/// Settings of one node's [`MqttBus`](super::MqttBus). Build it with [`MqttBusConfig::new`] (or
/// [`Default`]) and adjust fields; [`MqttBus::connect`](super::MqttBus::connect) checks them.
#[derive(Clone, PartialEq, Eq)]
pub struct MqttBusConfig {
    /// The broker, `mqtt://[user[:password]@]host:port` (port 1883 when omitted; IPv6 hosts in
    /// brackets), or `mqtts://…` for TLS (port 8883 when omitted). User and password are
    /// percent-decoded and sent in CONNECT; they never appear in logs ([`redact_url`]). The
    /// WebSocket transport is not compiled in.
    pub url: String,
    /// Certificates of an `mqtts://` connection; `None` with `mqtts://`: the system's roots, no
    /// client certificate.
    pub tls: Option<MqttTls>,
    /// Where `tls` came from, read again before each reconnection attempt (the first
    /// connection uses `tls`); `None`: `tls` is used for every connection.
    pub tls_reload: Option<MqttTlsReload>,
    /// First level of every internal topic and part of every shared-subscription name: nodes
    /// see each other only within one namespace, so clusters and test runs can share a broker.
    /// 1–64 letters, digits, `-` or `_`.
    pub namespace: String,
    /// The node's MQTT client id is `<client_id_prefix>-<node>`; it must be unique on the
    /// broker, which drops the older connection of a duplicate. 1–128 letters, digits, `-`, `_`
    /// (room for `<something>-<namespace>`).
    pub client_id_prefix: String,
    /// MQTT keep-alive; the broker drops the connection after 1.5 × this without traffic.
    /// At least 5 s (rumqttc's lower bound), at most 65 535 s.
    pub keep_alive: Duration,
    /// Largest MQTT packet this node sends or accepts (told to the broker in CONNECT, so it
    /// never forwards larger ones to this node). Default [`DEFAULT_MAX_PACKET_SIZE`].
    pub max_packet_size: u32,
    /// Publications held by the node: waiting to be sent (also while disconnected) or sent and
    /// not yet acknowledged by the broker. When full, `publish` waits while connected and
    /// fails with `Unavailable` while disconnected.
    pub publish_buffer: usize,
    /// First delay before reconnecting after the connection was lost; doubled (with jitter) on
    /// every failed attempt up to [`reconnect_backoff_max`](Self::reconnect_backoff_max).
    pub reconnect_backoff_min: Duration,
    /// Longest delay between reconnection attempts.
    pub reconnect_backoff_max: Duration,
    /// How long `connect` waits for the first connection (and rumqttc for each CONNACK).
    pub connect_timeout: Duration,
    /// How long `subscribe` waits for the broker's SUBACK, and the resubscription after a
    /// reconnect for all of them, before giving up.
    pub ack_timeout: Duration,
    /// Capacity of rumqttc's request channel between this node's tasks and its event loop.
    pub request_channel_capacity: usize,
    /// Most QoS 1/2 publishes in flight at once (further limited by the broker's receive
    /// maximum; Mosquitto announces 20).
    pub max_inflight: u16,
    /// How many recently delivered envelope ids are remembered to drop the second copy of a
    /// publication the broker sends once per matching subscription.
    pub dedupe_window: usize,
    /// After a reconnect, how long publications held during the outage wait before they are
    /// sent, so other nodes have re-made their subscriptions (default: the longest reconnect
    /// backoff plus one second). Zero sends them at once.
    pub flush_hold: Duration,
}

impl std::fmt::Debug for MqttBusConfig {
    // Not derived: the url may carry the broker password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MqttBusConfig")
            .field("url", &redact_url(&self.url))
            .field("tls", &self.tls)
            .field("tls_reload", &self.tls_reload)
            .field("namespace", &self.namespace)
            .field("client_id_prefix", &self.client_id_prefix)
            .field("keep_alive", &self.keep_alive)
            .field("max_packet_size", &self.max_packet_size)
            .field("publish_buffer", &self.publish_buffer)
            .finish_non_exhaustive()
    }
}

impl MqttBusConfig {
    /// Defaults for everything but the broker url and the namespace.
    pub fn new(url: impl Into<String>, namespace: impl Into<String>) -> Self {
        Self { url: url.into(), namespace: namespace.into(), ..Self::default() }
    }
}

impl Default for MqttBusConfig {
    fn default() -> Self {
        Self {
            url: "mqtt://127.0.0.1:1883".to_owned(),
            tls: None,
            tls_reload: None,
            namespace: "skua".to_owned(),
            client_id_prefix: "skua".to_owned(),
            keep_alive: Duration::from_secs(30),
            max_packet_size: DEFAULT_MAX_PACKET_SIZE,
            publish_buffer: 1024,
            reconnect_backoff_min: Duration::from_millis(100),
            reconnect_backoff_max: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(10),
            ack_timeout: Duration::from_secs(10),
            request_channel_capacity: 128,
            max_inflight: 100,
            dedupe_window: 4096,
            flush_hold: Duration::from_secs(6),
        }
    }
}

/// Why a [`MqttBusConfig`] was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MqttConfigError {
    /// The broker url is not `mqtt://host[:port]`.
    #[error("invalid bus url {url:?}: {reason}")]
    Url {
        /// The refused url, credentials removed.
        url: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The namespace is not a slug.
    #[error("invalid bus namespace {namespace:?}: 1-64 letters, digits, '-' or '_'")]
    Namespace {
        /// The refused namespace.
        namespace: String,
    },
    /// The client id prefix is not a slug.
    #[error("invalid MQTT client id prefix {prefix:?}: 1-128 letters, digits, '-' or '_'")]
    ClientIdPrefix {
        /// The refused prefix.
        prefix: String,
    },
    /// A numeric setting is out of range.
    #[error("invalid bus setting {setting}: {rule}")]
    Setting {
        /// The field of [`MqttBusConfig`].
        setting: &'static str,
        /// The range it must be in.
        rule: &'static str,
    },
}

/// Where the broker listens, parsed from [`MqttBusConfig::url`].
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct BrokerAddr {
    pub host: String,
    pub port: u16,
    /// `mqtts://`.
    pub tls: bool,
    /// User name and password from the url, percent-decoded.
    pub login: Option<(String, String)>,
}

impl std::fmt::Debug for BrokerAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerAddr")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("tls", &self.tls)
            .field("user", &self.login.as_ref().map(|(u, _)| u))
            .finish_non_exhaustive()
    }
}

/// `%XX` escapes decoded (userinfo of a url); `None` for a bad escape or invalid UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Parses `mqtt[s]://[user[:password]@]host[:port]`.
pub(crate) fn parse_url(url: &str) -> Result<BrokerAddr, MqttConfigError> {
    let err = |reason| MqttConfigError::Url { url: redact_url(url), reason };
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(err("expected mqtt://host:port"));
    };
    let tls = match scheme.to_ascii_lowercase().as_str() {
        "mqtt" => false,
        "mqtts" | "ssl" => true,
        "ws" | "wss" => return Err(err("the WebSocket transport is not supported; use mqtt://host:port")),
        "tcp" => return Err(err("use the mqtt:// scheme")),
        _ => return Err(err("unknown scheme; expected mqtt://host:port")),
    };
    let (login, rest) = match rest.rsplit_once('@') {
        None => (None, rest),
        Some((userinfo, host)) => {
            let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
            let (Some(user), Some(password)) = (percent_decode(user), percent_decode(password)) else {
                return Err(err("invalid percent-encoding in the user or password"));
            };
            if user.is_empty() {
                return Err(err("the user name is empty"));
            }
            (Some((user, password)), host)
        }
    };
    if rest.contains(['/', '?', '#']) {
        return Err(err("a path, query or fragment is not allowed; expected mqtt://host:port"));
    }
    let (host, port) = if let Some(bracketed) = rest.strip_prefix('[') {
        let Some((host, after)) = bracketed.split_once(']') else {
            return Err(err("unclosed '[' in an IPv6 host"));
        };
        match after {
            "" => (host, None),
            _ => match after.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None => return Err(err("expected ':port' after an IPv6 host")),
            },
        }
    } else {
        match rest.rsplit_once(':') {
            Some((host, _)) if host.contains(':') => return Err(err("IPv6 hosts must be written in brackets")),
            Some((host, port)) => (host, Some(port)),
            None => (rest, None),
        }
    };
    if host.is_empty() {
        return Err(err("the host is empty"));
    }
    let port = match port {
        None if tls => DEFAULT_TLS_PORT,
        None => DEFAULT_PORT,
        Some(p) => match p.parse::<u16>() {
            Ok(0) | Err(_) => return Err(err("the port must be a number from 1 to 65535")),
            Ok(p) => p,
        },
    };
    Ok(BrokerAddr { host: host.to_owned(), port, tls, login })
}

impl MqttBusConfig {
    /// Checks every field; returns the broker address.
    pub(crate) fn validate(&self) -> Result<BrokerAddr, MqttConfigError> {
        let addr = parse_url(&self.url)?;
        if (self.tls.is_some() || self.tls_reload.is_some()) && !addr.tls {
            return Err(MqttConfigError::Setting { setting: "tls", rule: "certificates need an mqtts:// url" });
        }
        if !is_slug(&self.namespace) {
            return Err(MqttConfigError::Namespace { namespace: self.namespace.clone() });
        }
        let prefix = &self.client_id_prefix;
        let prefix_ok = !prefix.is_empty()
            && prefix.len() <= 128
            && prefix.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !prefix_ok {
            return Err(MqttConfigError::ClientIdPrefix { prefix: self.client_id_prefix.clone() });
        }
        let setting = |setting, rule| Err(MqttConfigError::Setting { setting, rule });
        if self.keep_alive < Duration::from_secs(5) || self.keep_alive > Duration::from_secs(65_535) {
            return setting("keep_alive", "from 5 s to 65535 s");
        }
        if !(1024..=MQTT_MAX_PACKET_SIZE).contains(&self.max_packet_size) {
            return setting("max_packet_size", "from 1024 to 268435455 bytes");
        }
        if self.publish_buffer == 0 {
            return setting("publish_buffer", "at least 1");
        }
        if self.reconnect_backoff_min.is_zero() || self.reconnect_backoff_min > self.reconnect_backoff_max {
            return setting("reconnect_backoff_min", "above zero and at most reconnect_backoff_max");
        }
        if self.connect_timeout < Duration::from_secs(1) {
            return setting("connect_timeout", "at least 1 s");
        }
        if self.ack_timeout.is_zero() {
            return setting("ack_timeout", "above zero");
        }
        if self.request_channel_capacity == 0 {
            return setting("request_channel_capacity", "at least 1");
        }
        if self.max_inflight == 0 {
            return setting("max_inflight", "at least 1");
        }
        if self.dedupe_window == 0 {
            return setting("dedupe_window", "at least 1");
        }
        Ok(addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(host: &str, port: u16) -> BrokerAddr {
        BrokerAddr { host: host.to_owned(), port, tls: false, login: None }
    }

    #[test]
    fn urls_that_parse() {
        assert_eq!(parse_url("mqtt://127.0.0.1:1883"), Ok(addr("127.0.0.1", 1883)));
        assert_eq!(parse_url("MQTT://broker.internal:18830"), Ok(addr("broker.internal", 18830)));
        assert_eq!(parse_url("mqtt://broker"), Ok(addr("broker", 1883)));
        assert_eq!(parse_url("mqtt://[::1]:1884"), Ok(addr("::1", 1884)));
        assert_eq!(parse_url("mqtt://[::1]"), Ok(addr("::1", 1883)));
        assert_eq!(parse_url("mqtts://broker"), Ok(BrokerAddr { tls: true, ..addr("broker", 8883) }));
        assert_eq!(parse_url("ssl://broker:9883"), Ok(BrokerAddr { tls: true, ..addr("broker", 9883) }));
        let login = Some(("skua".to_owned(), "p@ss:w/rd".to_owned()));
        assert_eq!(
            parse_url("mqtts://skua:p%40ss%3Aw%2Frd@broker:8883"),
            Ok(BrokerAddr { tls: true, login, ..addr("broker", 8883) })
        );
        let user_only = Some(("node".to_owned(), String::new()));
        assert_eq!(parse_url("mqtt://node@[::1]"), Ok(BrokerAddr { login: user_only, ..addr("::1", 1883) }));
    }

    #[test]
    fn credentials_never_show() {
        let url = "mqtts://skua:hunter2-secret@broker:8883";
        assert_eq!(redact_url(url), "mqtts://…@broker:8883");
        let config = MqttBusConfig::new(url, "skua");
        assert!(!format!("{config:?}").contains("hunter2"));
        assert!(!format!("{:?}", parse_url(url).unwrap()).contains("hunter2"));
        let e = parse_url("mqtts://skua:hunter2-secret@broker:8883/path").unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
        let tls = MqttTls { ca_pem: None, client_pem: Some((b"cert".to_vec(), b"PRIVATE KEY hunter2".to_vec())) };
        assert!(!format!("{tls:?}").contains("hunter2"));
    }

    #[test]
    fn urls_that_do_not_parse_say_why() {
        let reason = |url: &str| match parse_url(url) {
            Err(MqttConfigError::Url { reason, .. }) => reason,
            other => panic!("{url}: {other:?}"),
        };
        assert_eq!(reason("127.0.0.1:1883"), "expected mqtt://host:port");
        assert_eq!(reason("ws://h/mqtt"), "the WebSocket transport is not supported; use mqtt://host:port");
        assert_eq!(reason("tcp://h:1883"), "use the mqtt:// scheme");
        assert_eq!(reason("redis://h"), "unknown scheme; expected mqtt://host:port");
        assert_eq!(reason("mqtt://:p@h:1883"), "the user name is empty");
        assert_eq!(reason("mqtt://u:%zz@h:1883"), "invalid percent-encoding in the user or password");
        assert_eq!(reason("mqtt://h:1883/x"), "a path, query or fragment is not allowed; expected mqtt://host:port");
        assert_eq!(reason("mqtt://h:0"), "the port must be a number from 1 to 65535");
        assert_eq!(reason("mqtt://h:99999"), "the port must be a number from 1 to 65535");
        assert_eq!(reason("mqtt://h:x"), "the port must be a number from 1 to 65535");
        assert_eq!(reason("mqtt://:1883"), "the host is empty");
        assert_eq!(reason("mqtt://::1:1883"), "IPv6 hosts must be written in brackets");
        assert_eq!(reason("mqtt://[::1"), "unclosed '[' in an IPv6 host");
    }

    #[test]
    fn settings_are_checked() {
        assert!(MqttBusConfig::default().validate().is_ok());
        let long_prefix = MqttBusConfig { client_id_prefix: format!("skua-{}", "n".repeat(64)), ..Default::default() };
        assert!(long_prefix.validate().is_ok(), "prefix + a 64-character namespace fits");
        let bad = [
            MqttBusConfig { namespace: "a/b".into(), ..Default::default() },
            MqttBusConfig { namespace: String::new(), ..Default::default() },
            MqttBusConfig { client_id_prefix: "a b".into(), ..Default::default() },
            MqttBusConfig { client_id_prefix: "a".repeat(129), ..Default::default() },
            MqttBusConfig { keep_alive: Duration::from_secs(1), ..Default::default() },
            MqttBusConfig { max_packet_size: 10, ..Default::default() },
            MqttBusConfig { publish_buffer: 0, ..Default::default() },
            MqttBusConfig { reconnect_backoff_min: Duration::from_secs(9), ..Default::default() },
            MqttBusConfig { reconnect_backoff_min: Duration::ZERO, ..Default::default() },
            MqttBusConfig { connect_timeout: Duration::from_millis(10), ..Default::default() },
            MqttBusConfig { ack_timeout: Duration::ZERO, ..Default::default() },
            MqttBusConfig { request_channel_capacity: 0, ..Default::default() },
            MqttBusConfig { max_inflight: 0, ..Default::default() },
            MqttBusConfig { dedupe_window: 0, ..Default::default() },
            MqttBusConfig { tls: Some(MqttTls::default()), ..Default::default() },
        ];
        for config in bad {
            assert!(config.validate().is_err(), "{config:?}");
        }
    }
}
