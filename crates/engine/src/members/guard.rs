//! The rules of client-supplied wakes (issue 33): the address rule of a wake URL at announce,
//! what logs show of a URL, the wake limits per actor and URL, and the wake log budget.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use skua_core::ProjectId;
use skua_core::webhook::InternalAllowList;

/// Why a wake URL is refused at announce (the hint of the error frame; names `wake`).
const WAKE_ADDRESS_REFUSED: &str = "presence wake url names a loopback, private, link-local, CGNAT, multicast, \
     reserved or metadata address, which the server does not allow (wake_allowed_hosts)";

/// The rule of a client-supplied wake URL at announce (issue 33): an http(s) URL without
/// credentials whose host `allowed` lets through ([`InternalAllowList::allows_host`]: a host
/// name is checked again on every address it resolves to when the request is made).
///
/// # Errors
/// The error frame's hint, naming `wake`.
pub fn check_wake_url(url: &str, allowed: &InternalAllowList) -> Result<(), &'static str> {
    let parsed = url::Url::parse(url).map_err(|_| "presence wake url does not parse")?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err("presence wake url must be http(s)");
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err("presence wake url may not carry credentials; send them as a wake header");
    }
    let host = parsed.host_str().ok_or("presence wake url has no host")?;
    if !allowed.allows_host(host) {
        return Err(WAKE_ADDRESS_REFUSED);
    }
    Ok(())
}

/// `scheme://host:port` of a URL: what logs show of it (a path or query may carry a secret).
pub fn url_origin(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(u) => format!(
            "{}://{}:{}",
            u.scheme(),
            u.host_str().unwrap_or_default(),
            u.port_or_known_default().unwrap_or_default()
        ),
        Err(_) => "<invalid url>".to_owned(),
    }
}

/// Wakes started per key in the current period (fixed windows).
#[derive(Debug, Default)]
pub(super) struct WakeLimits {
    pub(super) by_actor: HashMap<(ProjectId, String), (Instant, u32)>,
    pub(super) by_url: HashMap<(ProjectId, String), (Instant, u32)>,
}

/// Whether `key` has a wake left under `max` this `period`.
pub(super) fn has_room<K: std::hash::Hash + Eq>(
    map: &HashMap<K, (Instant, u32)>,
    key: &K,
    period: Duration,
    max: u32,
) -> bool {
    map.get(key).is_none_or(|(since, n)| since.elapsed() >= period || *n < max)
}

/// Counts a wake of `key` this `period`.
pub(super) fn count<K: std::hash::Hash + Eq>(map: &mut HashMap<K, (Instant, u32)>, key: K, period: Duration) {
    let e = map.entry(key).or_insert((Instant::now(), 0));
    if e.0.elapsed() >= period {
        *e = (Instant::now(), 0);
    }
    e.1 = e.1.saturating_add(1);
}

/// The wake log lines written this period and those left out (issue 33: a client controls how
/// often a wake fails, so it must not control how much the node logs).
#[derive(Debug)]
pub(super) struct LogBudget {
    pub(super) since: Instant,
    pub(super) written: u32,
    pub(super) left_out: u64,
}

impl LogBudget {
    /// Whether a line may be written now, at most `limit` per `period`: `Some(lines left out
    /// since the last one written)`.
    pub(super) fn take(&mut self, period: Duration, limit: u32) -> Option<u64> {
        if self.since.elapsed() >= period {
            self.since = Instant::now();
            self.written = 0;
        }
        if self.written >= limit {
            self.left_out = self.left_out.saturating_add(1);
            return None;
        }
        self.written += 1;
        Some(std::mem::take(&mut self.left_out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wake_urls_are_checked_against_the_allow_list() {
        let none = InternalAllowList::default();
        for bad in [
            "http://127.0.0.1:9/w",
            "http://10.0.0.1/w",
            "http://2130706433/w",
            "http://0x7f000001/w",
            "http://0177.0.0.1/w",
            "http://[::ffff:127.0.0.1]/w",
            "http://[::1]/w",
            "http://100.64.0.1/w",
            "http://169.254.169.254/w",
            "http://localhost/w",
            "http://metadata.google.internal/w",
            "http://user:pw@hooks.example.com/w",
            "ftp://hooks.example.com/w",
        ] {
            let e = check_wake_url(bad, &none).unwrap_err();
            assert!(e.contains("wake"), "{bad}: {e}");
        }
        assert!(check_wake_url("https://hooks.example.com/w?token=x", &none).is_ok());
        let dev = InternalAllowList::parse(&["127.0.0.0/8".into(), "::1".into(), "localhost".into()]).unwrap();
        for ok in ["http://127.0.0.1:9/w", "http://0x7f000001/w", "http://[::ffff:127.0.0.1]/w", "http://localhost/w"] {
            assert!(check_wake_url(ok, &dev).is_ok(), "{ok}");
        }
        assert!(check_wake_url("http://10.0.0.1/w", &dev).is_err());
        assert_eq!(url_origin("https://h.example/p?secret=1"), "https://h.example:443");
    }

    // Issue 33: a client decides how often a wake fails, so the lines about it are bounded per
    // period (each written line says how many were left out before it).
    #[test]
    fn wake_log_lines_are_bounded_per_period() {
        let mut b = LogBudget { since: Instant::now(), written: 0, left_out: 0 };
        let hour = Duration::from_secs(3600);
        let written: Vec<Option<u64>> = (0..100).map(|_| b.take(hour, 3)).collect();
        assert_eq!(written.iter().filter(|w| w.is_some()).count(), 3);
        assert_eq!(b.left_out, 97);
        // A new period: the next line carries the count left out.
        assert_eq!(b.take(Duration::ZERO, 3), Some(97));
        assert_eq!(b.take(hour, 0), None);
    }
}
