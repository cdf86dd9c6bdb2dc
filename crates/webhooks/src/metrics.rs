//! Webhook counters by kind and outcome (STYLE §6), rendered in the Prometheus text format for
//! `/metrics`. Labels are fixed sets, never URLs, apps or topics.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use skua_core::webhook::WebhookKind;

/// How a delivery ended (the `outcome` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A 2xx answer.
    Ok,
    /// A non-2xx answer after the last attempt.
    Status,
    /// No answer within the timeout.
    Timeout,
    /// Connection or protocol failure after the last attempt.
    Transport,
    /// Refused by the address rules (link-local, metadata, not allow-listed).
    Refused,
    /// The answer was larger than `webhook_max_response_bytes`.
    TooLarge,
    /// The node stopped before it was delivered.
    Shutdown,
}

impl Outcome {
    const ALL: [Self; 7] =
        [Self::Ok, Self::Status, Self::Timeout, Self::Transport, Self::Refused, Self::TooLarge, Self::Shutdown];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Status => "status",
            Self::Timeout => "timeout",
            Self::Transport => "transport",
            Self::Refused => "refused",
            Self::TooLarge => "too_large",
            Self::Shutdown => "shutdown",
        }
    }

    fn index(self) -> usize {
        Self::ALL.iter().position(|o| *o == self).unwrap_or(0)
    }
}

fn kind_index(kind: WebhookKind) -> usize {
    match kind {
        WebhookKind::Hydration => 0,
        WebhookKind::Trigger => 1,
        WebhookKind::Wake => 2,
    }
}

/// The engine's counters.
#[derive(Debug, Default)]
pub struct WebhookMetrics {
    deliveries: [[AtomicU64; Outcome::ALL.len()]; WebhookKind::ALL.len()],
    attempts: [AtomicU64; WebhookKind::ALL.len()],
    retries: [AtomicU64; WebhookKind::ALL.len()],
}

impl WebhookMetrics {
    /// Counts a finished delivery.
    pub fn delivered(&self, kind: WebhookKind, outcome: Outcome) {
        self.deliveries[kind_index(kind)][outcome.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one HTTP attempt (and a retry when it is not the first).
    pub fn attempt(&self, kind: WebhookKind, retry: bool) {
        self.attempts[kind_index(kind)].fetch_add(1, Ordering::Relaxed);
        if retry {
            self.retries[kind_index(kind)].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Deliveries of `kind` that ended with `outcome`.
    pub fn deliveries(&self, kind: WebhookKind, outcome: Outcome) -> u64 {
        self.deliveries[kind_index(kind)][outcome.index()].load(Ordering::Relaxed)
    }

    /// HTTP attempts of `kind`.
    pub fn attempts(&self, kind: WebhookKind) -> u64 {
        self.attempts[kind_index(kind)].load(Ordering::Relaxed)
    }

    /// Appends the exposition of every series to `out`.
    pub fn render_prometheus(&self, out: &mut String) {
        let name = "skua_webhook_deliveries_total";
        let _ = writeln!(out, "# HELP {name} Webhook deliveries finished, by kind and outcome.\n# TYPE {name} counter");
        for kind in WebhookKind::ALL {
            for o in Outcome::ALL {
                let n = self.deliveries(kind, o);
                let _ = writeln!(out, "{name}{{kind=\"{}\",outcome=\"{}\"}} {n}", kind.as_str(), o.as_str());
            }
        }
        for (name, help, series) in [
            ("skua_webhook_attempts_total", "HTTP requests made for webhooks, by kind.", &self.attempts),
            ("skua_webhook_retries_total", "Webhook requests that were retries, by kind.", &self.retries),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for kind in WebhookKind::ALL {
                let n = series[kind_index(kind)].load(Ordering::Relaxed);
                let _ = writeln!(out, "{name}{{kind=\"{}\"}} {n}", kind.as_str());
            }
        }
    }
}
