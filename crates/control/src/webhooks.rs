//! Checks of webhook configuration (N41), in one place for every way in (gRPC, fixtures, a
//! later REST API): http(s) URLs only, no link-local or cloud-metadata address unless the
//! operator allows it, the host on the allow-list when there is one, bounded headers and
//! timeouts; and the per-app secret's generation.
//!
//! A literal address is checked here; a host *name* that resolves to a refused address is
//! refused when the call is made (`skua-webhooks` checks every resolved address).

use std::net::IpAddr;

use skua_core::registry_store::WebhookTargetRecord;
use skua_core::webhook::{
    MAX_HEADER_NAME_LEN, MAX_HEADER_VALUE_LEN, MAX_HEADERS, METADATA_HOSTS, RESERVED_HEADERS, WebhookKind,
    host_allowed, is_link_local_or_metadata,
};

/// Longest webhook URL.
pub const MAX_URL_LEN: usize = 2048;

/// The node's rules for webhook URLs (`webhook_allow_link_local`, `webhook_allow_loopback`,
/// `webhook_allowed_hosts`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WebhookPolicy {
    /// Allow link-local and cloud-metadata addresses (169.254.0.0/16, fe80::/10, …).
    pub allow_link_local: bool,
    /// Allow hydration webhooks on loopback addresses (127.0.0.0/8, ::1, `localhost`): a
    /// hydration answer reaches clients, so a tenant could read the node's local services.
    pub allow_loopback: bool,
    /// When not empty, only these hosts (`name`, `*.parent`, or an address) are allowed.
    pub allowed_hosts: Vec<String>,
}

/// Why a webhook configuration was refused; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct WebhookConfigError {
    /// The field, e.g. `hydration_webhook.url`.
    pub field: String,
    /// What is wrong and what to do.
    pub reason: String,
}

fn refuse(field: &str, part: &str, reason: impl Into<String>) -> WebhookConfigError {
    WebhookConfigError {
        field: if part.is_empty() { field.to_owned() } else { format!("{field}.{part}") },
        reason: reason.into(),
    }
}

/// At most 64 characters of `v`, for echoing bad input back safely.
fn echo(v: &str) -> String {
    let mut s: String = v.chars().take(64).collect();
    if s.len() < v.len() {
        s.push('…');
    }
    s
}

fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

impl WebhookPolicy {
    /// Checks one endpoint of `kind` given as `field`.
    ///
    /// # Errors
    /// [`WebhookConfigError`] naming the first problem.
    pub fn check(&self, field: &str, kind: WebhookKind, t: &WebhookTargetRecord) -> Result<(), WebhookConfigError> {
        self.check_url(field, &t.url)?;
        if kind == WebhookKind::Hydration && !self.allow_loopback && names_loopback(&t.url) {
            return Err(refuse(
                field,
                "url",
                format!(
                    "{:?} names a loopback address (127.0.0.0/8, ::1, localhost); refused for hydration unless the \
                     server sets webhook_allow_loopback",
                    echo(&t.url)
                ),
            ));
        }
        if t.headers.len() > MAX_HEADERS {
            return Err(refuse(field, "headers", format!("{} headers; at most {MAX_HEADERS}", t.headers.len())));
        }
        for (name, value) in &t.headers {
            if name.is_empty() || name.len() > MAX_HEADER_NAME_LEN || !name.chars().all(is_token_char) {
                return Err(refuse(
                    field,
                    "headers",
                    format!("header name {:?} is invalid: 1-{MAX_HEADER_NAME_LEN} token characters", echo(name)),
                ));
            }
            if RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
                return Err(refuse(
                    field,
                    "headers",
                    format!("header {name} is set by the server and may not be configured"),
                ));
            }
            if value.len() > MAX_HEADER_VALUE_LEN || value.chars().any(|c| c.is_control() && c != '\t') {
                return Err(refuse(
                    field,
                    "headers",
                    format!(
                        "the value of header {name} is invalid: at most {MAX_HEADER_VALUE_LEN} bytes, no control characters"
                    ),
                ));
            }
        }
        if let Some(ms) = t.timeout_ms {
            let max = kind.max_timeout().as_millis();
            if u128::from(ms) > max {
                return Err(refuse(
                    field,
                    "timeout_ms",
                    format!("{ms} is above the {} webhook maximum of {max} ms", kind.as_str()),
                ));
            }
        }
        Ok(())
    }

    /// Checks a webhook URL alone.
    ///
    /// # Errors
    /// [`WebhookConfigError`] naming `field.url`.
    pub fn check_url(&self, field: &str, v: &str) -> Result<(), WebhookConfigError> {
        if v.len() > MAX_URL_LEN {
            return Err(refuse(field, "url", format!("longer than {MAX_URL_LEN} characters")));
        }
        let url = url::Url::parse(v).map_err(|e| refuse(field, "url", format!("{:?} is not a URL: {e}", echo(v))))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(refuse(field, "url", format!("{:?} is not an http(s) URL", echo(v))));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(refuse(
                field,
                "url",
                "credentials in the URL are not accepted; send them as a configured header",
            ));
        }
        let (host_text, ip): (String, Option<IpAddr>) = match url.host() {
            Some(url::Host::Domain(d)) => (d.to_ascii_lowercase(), None),
            Some(url::Host::Ipv4(a)) => (a.to_string(), Some(IpAddr::V4(a))),
            Some(url::Host::Ipv6(a)) => (a.to_string(), Some(IpAddr::V6(a))),
            None => return Err(refuse(field, "url", format!("{:?} has no host", echo(v)))),
        };
        if !self.allow_link_local {
            let metadata_name = METADATA_HOSTS.contains(&host_text.trim_end_matches('.'));
            if metadata_name || ip.is_some_and(is_link_local_or_metadata) {
                return Err(refuse(
                    field,
                    "url",
                    format!(
                        "{host_text} is a link-local or cloud metadata address (169.254.0.0/16, fe80::/10); refused \
                         unless the server sets webhook_allow_link_local"
                    ),
                ));
            }
        }
        if !self.allowed_hosts.is_empty() && !host_allowed(&self.allowed_hosts, &host_text) {
            return Err(refuse(field, "url", format!("host {host_text} is not in the server's webhook_allowed_hosts")));
        }
        Ok(())
    }
}

/// Whether `v` (a URL that parsed) names a loopback or unspecified address, in any spelling the
/// URL parser accepts (decimal, hex, octal, IPv4-mapped), or `localhost`.
fn names_loopback(v: &str) -> bool {
    let Ok(url) = url::Url::parse(v) else { return false };
    let ip = match url.host() {
        Some(url::Host::Domain(d)) => {
            let d = d.trim_end_matches('.').to_ascii_lowercase();
            return d == "localhost" || d.ends_with(".localhost");
        }
        Some(url::Host::Ipv4(a)) => IpAddr::V4(a),
        Some(url::Host::Ipv6(a)) => a.to_ipv4_mapped().map_or(IpAddr::V6(a), IpAddr::V4),
        None => return false,
    };
    ip.is_loopback() || ip.is_unspecified() || matches!(ip, IpAddr::V4(a) if a.octets()[0] == 0)
}

/// A fresh webhook secret, `whsec_` and 64 hex digits (two v4 UUIDs: 244 random bits from the
/// OS generator).
pub fn new_secret() -> String {
    format!("whsec_{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(url: &str) -> WebhookTargetRecord {
        WebhookTargetRecord { url: url.into(), ..Default::default() }
    }

    #[test]
    fn urls_are_http_and_not_link_local() {
        let p = WebhookPolicy { allow_loopback: true, ..Default::default() };
        let h = WebhookKind::Hydration;
        assert!(p.check("w", h, &target("https://hooks.example.com/x")).is_ok());
        assert!(p.check("w", h, &target("http://127.0.0.1:9000/x")).is_ok());
        for bad in [
            "ftp://x.example",
            "not a url",
            "http://169.254.169.254/latest/meta-data",
            "http://[fe80::1]/",
            "http://[::ffff:169.254.169.254]/",
            "http://metadata.google.internal/computeMetadata",
            "https://user:pw@example.com/",
        ] {
            let e = p.check("hydration_webhook", h, &target(bad)).unwrap_err();
            assert_eq!(e.field, "hydration_webhook.url", "{bad}");
        }
        let e = p.check("w", h, &target("http://169.254.169.254/")).unwrap_err();
        assert!(e.to_string().contains("link-local"), "{e}");
        let allowed = WebhookPolicy { allow_link_local: true, ..Default::default() };
        assert!(allowed.check("w", h, &target("http://169.254.169.254/")).is_ok());
        let listed = WebhookPolicy { allowed_hosts: vec!["*.example.com".into()], ..Default::default() };
        assert!(listed.check("w", h, &target("https://a.example.com/")).is_ok());
        assert!(listed.check("w", h, &target("https://example.org/")).unwrap_err().reason.contains("allowed_hosts"));
    }

    // Issue 33: a hydration answer reaches the subscriber, so loopback is refused for it unless
    // the operator allows it; triggers keep the operator's choice.
    #[test]
    fn hydration_on_loopback_is_refused_unless_allowed() {
        let p = WebhookPolicy::default();
        for url in [
            "http://127.0.0.1:9090/metrics",
            "http://2130706433/",
            "http://0x7f000001/",
            "http://[::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://0.0.0.0/",
            "http://LOCALHOST./x",
        ] {
            let e = p.check("hydration_webhook", WebhookKind::Hydration, &target(url)).unwrap_err();
            assert!(e.reason.contains("webhook_allow_loopback"), "{url}: {e}");
            assert!(p.check("trigger_webhook", WebhookKind::Trigger, &target(url)).is_ok(), "{url}");
        }
        assert!(p.check("w", WebhookKind::Hydration, &target("http://10.0.0.5/h")).is_ok());
        let allowed = WebhookPolicy { allow_loopback: true, ..Default::default() };
        assert!(allowed.check("w", WebhookKind::Hydration, &target("http://127.0.0.1/h")).is_ok());
    }

    #[test]
    fn headers_and_timeouts_are_bounded() {
        let p = WebhookPolicy::default();
        let mut t = target("https://x.example/");
        t.headers.insert("X-Signature-Tag".into(), "v".into());
        assert!(p.check("w", WebhookKind::Trigger, &t).is_ok());
        t.headers.insert("Content-Type".into(), "text/plain".into());
        assert!(p.check("w", WebhookKind::Trigger, &t).unwrap_err().reason.contains("set by the server"));
        let mut t = target("https://x.example/");
        t.headers.insert("X-A".into(), "a\r\nInjected: 1".into());
        assert!(p.check("w", WebhookKind::Trigger, &t).is_err());
        let mut t = target("https://x.example/");
        for i in 0..=MAX_HEADERS {
            t.headers.insert(format!("x-{i}"), "v".into());
        }
        assert!(p.check("w", WebhookKind::Trigger, &t).is_err());
        let t = WebhookTargetRecord { timeout_ms: Some(30_001), ..target("https://x.example/") };
        assert_eq!(p.check("w", WebhookKind::Hydration, &t).unwrap_err().field, "w.timeout_ms");
        assert!(new_secret().starts_with("whsec_") && new_secret().len() == 70);
    }
}
