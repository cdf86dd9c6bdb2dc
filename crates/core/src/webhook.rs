//! Webhook settings as the registry holds them (N41): endpoints, which kind of call uses them,
//! their documented bounds, and the address rule shared by configuration checks (control plane)
//! and the sender (`skua-webhooks`): link-local and cloud-metadata addresses are refused unless
//! the operator allows them.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::Duration;

/// Most configured headers per webhook.
pub const MAX_HEADERS: usize = 32;
/// Longest header name, in bytes.
pub const MAX_HEADER_NAME_LEN: usize = 256;
/// Longest header value, in bytes.
pub const MAX_HEADER_VALUE_LEN: usize = 4096;
/// Headers a configuration may not set: the sender writes them.
pub const RESERVED_HEADERS: [&str; 7] =
    ["content-type", "content-length", "host", "x-nolag-signature", "transfer-encoding", "connection", "upgrade"];

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
