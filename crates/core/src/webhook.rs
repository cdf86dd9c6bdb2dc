//! Webhook settings as the registry holds them (N41): endpoints, which kind of call uses them,
//! their documented bounds, and the address rule shared by configuration checks (control plane)
//! and the sender (`skua-webhooks`): link-local and cloud-metadata addresses are refused unless
//! the operator allows them.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::Duration;

pub mod poster;

pub use poster::{Answer, Attempts, CALL_RETRY_DELAYS, Post, PostFailure, Poster, RecentWebhook, json_body};

/// Most configured headers per webhook.
pub const MAX_HEADERS: usize = 32;
/// Longest header name, in bytes.
pub const MAX_HEADER_NAME_LEN: usize = 256;
/// Longest header value, in bytes.
pub const MAX_HEADER_VALUE_LEN: usize = 4096;
/// Headers a configuration may not set: the sender writes them.
pub const RESERVED_HEADERS: [&str; 8] = [
    "content-type",
    "content-length",
    "host",
    "x-nolag-signature",
    "x-nolag-signature-v2",
    "transfer-encoding",
    "connection",
    "upgrade",
];

/// Attempts of a trigger request unless `webhook_trigger_attempts` says otherwise (N44).
pub const TRIGGER_ATTEMPTS: u32 = 5;

/// The wait before a trigger's second attempt unless `webhook_trigger_first_retry` says
/// otherwise; each further wait doubles: 4 s, 8 s, 16 s, 32 s, about a minute in all
/// (docs/webhooks.md "Retries"). The one source of the trigger retry schedule's defaults: the
/// settings, the webhook engine and the trigger delivery all read it.
pub const TRIGGER_FIRST_RETRY: Duration = Duration::from_secs(4);

/// The waits between `attempts` attempts: `first`, then each one doubled (saturating).
pub fn exponential_delays(attempts: u32, first: Duration) -> Vec<Duration> {
    (0..attempts.saturating_sub(1)).map(|i| first.saturating_mul(2u32.saturating_pow(i))).collect()
}

/// The default trigger retry waits: [`exponential_delays`] of [`TRIGGER_ATTEMPTS`] and
/// [`TRIGGER_FIRST_RETRY`].
pub fn trigger_retry_delays() -> Vec<Duration> {
    exponential_delays(TRIGGER_ATTEMPTS, TRIGGER_FIRST_RETRY)
}

/// What a webhook call is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WebhookKind {
    /// `hydrationWebhook` / `onSubscribe` (N43): state for a new subscription.
    Hydration,
    /// `triggerWebhook` / `onPublish` (N44): every accepted publish.
    Trigger,
    /// A persistent member's `wake` URL (N47): never configured on a topic.
    Wake,
}

impl WebhookKind {
    /// Every kind.
    pub const ALL: [Self; 3] = [Self::Hydration, Self::Trigger, Self::Wake];

    /// The metric label and log name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Hydration => "hydration",
            Self::Trigger => "trigger",
            Self::Wake => "wake",
        }
    }

    /// The timeout when the configuration gives none: 5 s for hydration (N43), 10 s for triggers.
    pub fn default_timeout(self) -> Duration {
        match self {
            Self::Hydration => Duration::from_secs(5),
            Self::Trigger => Duration::from_secs(10),
            Self::Wake => Duration::from_secs(30),
        }
    }

    /// The largest `timeoutMs` a configuration may give: 30 s for both (N43).
    pub fn max_timeout(self) -> Duration {
        Duration::from_secs(30)
    }
}

/// One webhook endpoint: `{url, headers?, timeoutMs?}` (N41).
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookTarget {
    /// Where the call is POSTed (http or https).
    pub url: String,
    /// Extra headers, in configuration order.
    pub headers: Vec<(String, String)>,
    /// The configured timeout; `None` = the kind's default.
    pub timeout_ms: Option<u32>,
}

impl WebhookTarget {
    /// The timeout of one call of `kind` to this target, within the kind's bounds.
    pub fn timeout(&self, kind: WebhookKind) -> Duration {
        self.timeout_ms
            .filter(|ms| *ms > 0)
            .map_or(kind.default_timeout(), |ms| Duration::from_millis(u64::from(ms)).min(kind.max_timeout()))
    }
}

// Not derived: header values often carry credentials.
impl std::fmt::Debug for WebhookTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookTarget")
            .field("url", &self.url)
            .field("headers", &self.headers.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>())
            .field("timeout_ms", &self.timeout_ms)
            .finish()
    }
}

/// The webhooks of one topic, each the topic's own entry or else the app's (N41).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicWebhooks {
    /// `onSubscribe`, else the app's `hydrationWebhook`.
    pub hydration: Option<Arc<WebhookTarget>>,
    /// `onPublish`, else the app's `triggerWebhook`.
    pub trigger: Option<Arc<WebhookTarget>>,
}

impl TopicWebhooks {
    /// The target of `kind`, if any.
    pub fn get(&self, kind: WebhookKind) -> Option<&Arc<WebhookTarget>> {
        match kind {
            WebhookKind::Hydration => self.hydration.as_ref(),
            WebhookKind::Trigger => self.trigger.as_ref(),
            WebhookKind::Wake => None,
        }
    }
}

/// A webhook secret: never in `Debug` output.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookSecret(pub Arc<str>);

impl WebhookSecret {
    /// The secret's bytes, for signing.
    pub fn expose(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl std::fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WebhookSecret(<redacted>)")
    }
}

/// Everything a sender needs for one call about one topic: the target, the app's secret and the
/// names the payload carries (N43, N44).
#[derive(Debug, Clone)]
pub struct WebhookCall {
    /// Which kind of call.
    pub kind: WebhookKind,
    /// Where to.
    pub target: Arc<WebhookTarget>,
    /// The app's secret, when it has one (N42).
    pub secret: Option<WebhookSecret>,
    /// The app's slug (`app` in payloads).
    pub app_slug: Arc<str>,
    /// The room's display name (`roomName`).
    pub room_name: Arc<str>,
}

/// Whether `ip` is link-local or a cloud metadata address: 169.254.0.0/16, fe80::/10,
/// `fd00:ec2::254` (AWS over IPv6), 100.100.100.200 (Alibaba), also written IPv4-mapped
/// (`::ffff:169.254.169.254`), IPv4-compatible or NAT64 (`64:ff9b::/96`).
pub fn is_link_local_or_metadata(ip: IpAddr) -> bool {
    fn v4(ip: Ipv4Addr) -> bool {
        ip.is_link_local() || ip == Ipv4Addr::new(100, 100, 100, 200)
    }
    match ip {
        IpAddr::V4(ip) => v4(ip),
        IpAddr::V6(ip) => {
            let s = ip.segments();
            if (s[0] & 0xffc0) == 0xfe80 || ip == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) {
                return true;
            }
            let [.., a, b, c, d] = ip.octets();
            let embedded = Ipv4Addr::new(a, b, c, d);
            let mapped_or_compatible = s[..5] == [0; 5] && (s[5] == 0xffff || s[5] == 0);
            let nat64 = s[..6] == [0x64, 0xff9b, 0, 0, 0, 0];
            (mapped_or_compatible || nat64) && v4(embedded)
        }
    }
}

/// The IPv4 address an IPv6 address carries, when it is IPv4-mapped (`::ffff:a.b.c.d`),
/// IPv4-compatible (`::a.b.c.d`, not `::` or `::1`) or NAT64 (`64:ff9b::a.b.c.d`): the address
/// rules judge the IPv4 address (a connection to it reaches the IPv4 host).
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let [.., a, b, c, d] = ip.octets();
    let mapped = s[..5] == [0; 5] && s[5] == 0xffff;
    let compatible = s[..6] == [0; 6] && !(s[6] == 0 && s[7] <= 1);
    let nat64 = s[..6] == [0x64, 0xff9b, 0, 0, 0, 0];
    (mapped || compatible || nat64).then_some(Ipv4Addr::new(a, b, c, d))
}

/// Whether `ip` is not a public unicast address: loopback (127.0.0.0/8, ::1), private
/// (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, fc00::/7), link-local and metadata (see
/// [`is_link_local_or_metadata`]), CGNAT (100.64.0.0/10), multicast (224.0.0.0/4, ff00::/8),
/// unspecified and "this network" (0.0.0.0/8, ::), broadcast, the benchmarking and reserved
/// ranges (198.18.0.0/15, 240.0.0.0/4) and site-local (fec0::/10); IPv4-mapped, -compatible and
/// NAT64 addresses are judged by the IPv4 address they carry. The rule of client-supplied
/// URLs (wake): such an address is refused unless the operator allows it.
pub fn is_internal(ip: IpAddr) -> bool {
    fn v4(ip: Ipv4Addr) -> bool {
        let [a, b, ..] = ip.octets();
        ip.is_loopback()
            || ip.is_private()
            || ip.is_link_local()
            || ip.is_multicast()
            || ip.is_broadcast()
            || a == 0
            || (a == 100 && (b & 0xc0) == 64)
            || (a == 198 && (b & 0xfe) == 18)
            || a >= 240
            || is_link_local_or_metadata(IpAddr::V4(ip))
    }
    match ip {
        IpAddr::V4(ip) => v4(ip),
        IpAddr::V6(ip) => {
            if let Some(embedded) = embedded_v4(ip) {
                return v4(embedded);
            }
            let s0 = ip.segments()[0];
            ip.is_loopback()
                || ip.is_unspecified()
                || ip.is_multicast()
                || (s0 & 0xfe00) == 0xfc00
                || (s0 & 0xffc0) == 0xfec0
                || is_link_local_or_metadata(IpAddr::V6(ip))
        }
    }
}

/// An address range in CIDR notation (`10.0.0.0/8`, `fd00::/8`); a bare address is a range of
/// one. An IPv4-mapped IPv6 address is matched as its IPv4 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpRange {
    addr: IpAddr,
    prefix: u8,
}

impl IpRange {
    /// Parses `ADDR` or `ADDR/PREFIX` (an IPv6 address may stand in brackets).
    ///
    /// # Errors
    /// A message naming what is wrong.
    pub fn parse(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let bare = s.trim_start_matches('[');
        let (addr, prefix) = match bare.split_once('/') {
            None => (bare.trim_end_matches(']'), None),
            Some((a, p)) => (a.trim_end_matches(']'), Some(p)),
        };
        let addr: IpAddr = addr.parse().map_err(|_| format!("{s:?}: not an IP address or CIDR range"))?;
        let addr = canonical(addr);
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => match p.parse::<u8>() {
                Ok(p) if p <= max => p,
                _ => return Err(format!("{s:?}: the prefix length must be 0-{max}")),
            },
        };
        Ok(Self { addr, prefix })
    }

    /// Whether `ip` is in the range.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, canonical(ip)) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.prefix)).unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.prefix)).unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

impl std::fmt::Display for IpRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// An IPv4-mapped IPv6 address as IPv4.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 @ IpAddr::V4(_) => v4,
    }
}

/// The operator's exceptions to the rule of client-supplied URLs (`wake_allowed_hosts`): exact
/// host names and address ranges whose internal addresses ([`is_internal`]) may be called.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InternalAllowList {
    hosts: Vec<String>,
    ranges: Vec<IpRange>,
}

impl InternalAllowList {
    /// The list of `entries`: each an address or CIDR range, else an exact host name.
    ///
    /// # Errors
    /// The first entry that is empty, or looks like a URL or a range but does not parse.
    pub fn parse(entries: &[String]) -> Result<Self, String> {
        let mut out = Self::default();
        for e in entries {
            let e = e.trim();
            if let Ok(r) = IpRange::parse(e) {
                out.ranges.push(r);
            } else if e.is_empty() || e.contains(['/', ':', '@', ' ', '*']) {
                return Err(format!("{e:?}: give an exact host name, an address or a CIDR range"));
            } else {
                out.hosts.push(e.trim_end_matches('.').to_ascii_lowercase());
            }
        }
        Ok(out)
    }

    /// Whether the host name `host` is listed (every address it resolves to is then allowed).
    pub fn allows_name(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        self.hosts.contains(&host)
    }

    /// Whether `ip` may be called: a public address, or one in a listed range.
    pub fn allows_ip(&self, ip: IpAddr) -> bool {
        !is_internal(ip) || self.ranges.iter().any(|r| r.contains(ip))
    }

    /// Whether a URL's host may be called before resolution: a listed name, an allowed address,
    /// or any other name except `localhost` (`*.localhost`) and the metadata names (a name's
    /// addresses are checked when it is resolved, before connecting). `host` is the URL's host
    /// as the `url` crate normalises it (an IPv4 address in decimal, hex or octal becomes
    /// dotted; an IPv6 address keeps its brackets or not).
    pub fn allows_host(&self, host: &str) -> bool {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return self.allows_ip(ip);
        }
        if self.allows_name(bare) {
            return true;
        }
        let name = bare.trim_end_matches('.').to_ascii_lowercase();
        !(name == "localhost" || name.ends_with(".localhost") || METADATA_HOSTS.contains(&name.as_str()))
    }
}

/// Host names that always mean a cloud metadata service.
pub const METADATA_HOSTS: [&str; 3] = ["metadata.google.internal", "metadata.goog", "metadata"];

/// Whether `host` (a name or an address, without brackets) matches an allow-list entry: the
/// exact name, or `*.example.com` for any name under `example.com`. Case-insensitive.
pub fn host_allowed(allowed: &[String], host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    allowed.iter().any(|entry| {
        let entry = entry.trim_end_matches('.').to_ascii_lowercase();
        match entry.strip_prefix("*.") {
            Some(parent) => host.len() > parent.len() + 1 && host.ends_with(&format!(".{parent}")),
            None => host == entry,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_local_and_metadata_in_every_spelling() {
        for bad in [
            "169.254.169.254",
            "169.254.0.1",
            "100.100.100.200",
            "fe80::1",
            "febf::1",
            "fd00:ec2::254",
            "::ffff:169.254.169.254",
            "::169.254.169.254",
            "64:ff9b::a9fe:a9fe",
        ] {
            assert!(is_link_local_or_metadata(bad.parse().unwrap()), "{bad}");
        }
        for ok in ["127.0.0.1", "10.0.0.1", "8.8.8.8", "::1", "fec0::1", "::ffff:10.0.0.1", "2001:db8::1"] {
            assert!(!is_link_local_or_metadata(ok.parse().unwrap()), "{ok}");
        }
    }

    #[test]
    fn internal_addresses_in_every_spelling() {
        for bad in [
            "127.0.0.1",
            "127.1.2.3",
            "10.0.0.1",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.255",
            "224.0.0.1",
            "255.255.255.255",
            "0.0.0.0",
            "0.1.2.3",
            "198.18.0.1",
            "240.0.0.1",
            "::1",
            "::",
            "fc00::1",
            "fd12::1",
            "fe80::1",
            "fec0::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::127.0.0.1",
            "64:ff9b::7f00:1",
        ] {
            assert!(is_internal(bad.parse().unwrap()), "{bad}");
        }
        for ok in ["8.8.8.8", "100.63.0.1", "100.128.0.1", "172.32.0.1", "2001:db8::1", "::ffff:8.8.8.8"] {
            assert!(!is_internal(ok.parse().unwrap()), "{ok}");
        }
    }

    #[test]
    fn internal_allow_list_takes_names_and_ranges() {
        let none = InternalAllowList::default();
        assert!(!none.allows_host("127.0.0.1") && !none.allows_host("[::ffff:7f00:1]"));
        assert!(!none.allows_host("localhost") && !none.allows_host("a.localhost.") && !none.allows_host("metadata"));
        assert!(none.allows_host("hooks.example.com") && none.allows_host("8.8.8.8"));
        let list = InternalAllowList::parse(&["127.0.0.0/8".into(), "::1".into(), "Wake.Internal".into()]).unwrap();
        assert!(list.allows_host("127.0.0.1") && list.allows_host("[::1]") && list.allows_host("[::ffff:7f00:1]"));
        assert!(list.allows_host("wake.internal.") && !list.allows_host("10.0.0.1"));
        assert!(list.allows_name("WAKE.internal") && !list.allows_name("other.internal"));
        for bad in ["", "http://x/", "10.0.0.0/33", "*.example.com"] {
            assert!(InternalAllowList::parse(&[bad.into()]).is_err(), "{bad}");
        }
    }

    #[test]
    fn allow_list_matches_names_and_wildcards() {
        let list = vec!["hooks.example.com".to_owned(), "*.internal.example".to_owned()];
        assert!(host_allowed(&list, "HOOKS.example.com"));
        assert!(host_allowed(&list, "a.internal.example"));
        assert!(!host_allowed(&list, "internal.example"));
        assert!(!host_allowed(&list, "evil-hooks.example.com"));
        assert!(!host_allowed(&list, "xinternal.example"));
    }

    #[test]
    fn timeouts_default_and_cap() {
        let t = WebhookTarget { url: "http://x".into(), headers: vec![], timeout_ms: None };
        assert_eq!(t.timeout(WebhookKind::Hydration), Duration::from_secs(5));
        let t = WebhookTarget { timeout_ms: Some(90_000), ..t };
        assert_eq!(t.timeout(WebhookKind::Hydration), Duration::from_secs(30));
        assert!(!format!("{t:?}").contains("secret"));
    }
}
