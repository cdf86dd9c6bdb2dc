//! The last webhook deliveries of a node and how each ended (the admin dashboard's webhooks
//! page): a ring of at most `webhook_recent_deliveries` entries, the oldest dropped first.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use skua_core::webhook::WebhookKind;

use crate::metrics::Outcome;

/// One delivery's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecentDelivery {
    /// Its kind.
    pub kind: WebhookKind,
    /// The target's host (and port, when not the scheme's), never its path or query.
    pub host: String,
    /// How it ended.
    pub outcome: Outcome,
    /// The HTTP status of the last answer, if one came.
    pub status: Option<u16>,
    /// From the first attempt to the outcome (retries and waits included).
    pub latency: Duration,
    /// When it ended, unix ms.
    pub at_unix_ms: u64,
}

/// The bounded ring of recent deliveries.
#[derive(Debug)]
pub struct RecentDeliveries {
    cap: usize,
    // std Mutex: a push or a copy, never held across an await.
    ring: Mutex<Ring>,
}

#[derive(Debug, Default)]
struct Ring {
    entries: VecDeque<RecentDelivery>,
    /// The last URL recorded by [`RecentDeliveries::record_at`] and its [`host_of`]: a node
    /// posts to a few targets, mostly the same one in a row, and parsing the URL cost ~7 k
    /// instructions per delivery (docs/benchmarks.md, "Issue 14").
    last: Option<(String, String)>,
}

impl RecentDeliveries {
    /// A ring keeping the last `cap` deliveries (0: none are kept).
    pub fn new(cap: usize) -> Self {
        Self { cap, ring: Mutex::new(Ring { entries: VecDeque::with_capacity(cap.min(1024)), last: None }) }
    }

    /// Records one delivery to `url`, whose host `delivery` is given ([`host_of`], parsed
    /// again only when `url` is not the one recorded last); nothing when the cap is 0.
    pub fn record_at(&self, url: &str, delivery: impl FnOnce(String) -> RecentDelivery) {
        if self.cap == 0 {
            return;
        }
        let mut ring = self.ring.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let host = match &ring.last {
            Some((u, h)) if u == url => h.clone(),
            _ => {
                let h = host_of(url);
                ring.last = Some((url.to_owned(), h.clone()));
                h
            }
        };
        ring.push(self.cap, delivery(host));
    }

    /// Records one delivery; beyond the cap the oldest goes.
    pub fn record(&self, d: RecentDelivery) {
        if self.cap == 0 {
            return;
        }
        self.ring.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(self.cap, d);
    }

    /// The deliveries kept, newest first.
    pub fn list(&self) -> Vec<RecentDelivery> {
        self.ring.lock().unwrap_or_else(std::sync::PoisonError::into_inner).entries.iter().rev().cloned().collect()
    }
}

impl Ring {
    fn push(&mut self, cap: usize, d: RecentDelivery) {
        while self.entries.len() >= cap {
            self.entries.pop_front();
        }
        self.entries.push_back(d);
    }
}

/// The host part of `url` as a delivery shows it: `host` or `host:port`; `?` when it does not
/// parse.
pub fn host_of(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(u) => match (u.host_str(), u.port()) {
            (Some(h), Some(p)) => format!("{h}:{p}"),
            (Some(h), None) => h.to_owned(),
            (None, _) => "?".to_owned(),
        },
        Err(_) => "?".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(n: u64) -> RecentDelivery {
        RecentDelivery {
            kind: WebhookKind::Trigger,
            host: "h".into(),
            outcome: Outcome::Ok,
            status: Some(200),
            latency: Duration::from_millis(n),
            at_unix_ms: n,
        }
    }

    #[test]
    fn the_ring_keeps_the_last_cap_newest_first() {
        let r = RecentDeliveries::new(3);
        for n in 1..=5 {
            r.record(d(n));
        }
        assert_eq!(r.list().iter().map(|x| x.at_unix_ms).collect::<Vec<_>>(), [5, 4, 3]);
        let none = RecentDeliveries::new(0);
        none.record(d(1));
        assert!(none.list().is_empty());
    }

    #[test]
    fn recorded_urls_keep_their_own_host_when_targets_alternate() {
        let r = RecentDeliveries::new(4);
        for (n, url) in ["http://a.example/x", "http://a.example/y", "https://b.example:8443/z", "http://a.example/x"]
            .into_iter()
            .enumerate()
        {
            r.record_at(url, |host| RecentDelivery { host, ..d(n as u64) });
        }
        let hosts: Vec<String> = r.list().into_iter().map(|x| x.host).collect();
        assert_eq!(hosts, ["a.example", "b.example:8443", "a.example", "a.example"]);
        let none = RecentDeliveries::new(0);
        none.record_at("http://a.example/", |host| RecentDelivery { host, ..d(1) });
        assert!(none.list().is_empty());
    }

    #[test]
    fn hosts_leave_out_paths_and_secrets() {
        assert_eq!(host_of("https://hooks.example.com/x?token=secret"), "hooks.example.com");
        assert_eq!(host_of("http://user:pw@127.0.0.1:8080/p"), "127.0.0.1:8080");
        assert_eq!(host_of("not a url"), "?");
    }
}
