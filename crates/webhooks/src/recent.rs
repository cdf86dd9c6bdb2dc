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
    ring: Mutex<VecDeque<RecentDelivery>>,
}

impl RecentDeliveries {
    /// A ring keeping the last `cap` deliveries (0: none are kept).
    pub fn new(cap: usize) -> Self {
        Self { cap, ring: Mutex::new(VecDeque::with_capacity(cap.min(1024))) }
    }

    /// Records one delivery; beyond the cap the oldest goes.
    pub fn record(&self, d: RecentDelivery) {
        if self.cap == 0 {
            return;
        }
        let mut ring = self.ring.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        while ring.len() >= self.cap {
            ring.pop_front();
        }
        ring.push_back(d);
    }

    /// The deliveries kept, newest first.
    pub fn list(&self) -> Vec<RecentDelivery> {
        self.ring.lock().unwrap_or_else(std::sync::PoisonError::into_inner).iter().rev().cloned().collect()
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
    fn hosts_leave_out_paths_and_secrets() {
        assert_eq!(host_of("https://hooks.example.com/x?token=secret"), "hooks.example.com");
        assert_eq!(host_of("http://user:pw@127.0.0.1:8080/p"), "127.0.0.1:8080");
        assert_eq!(host_of("not a url"), "?");
    }
}
