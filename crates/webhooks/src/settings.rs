//! [`WebhookSettings`]: the webhook engine's settings (`webhook_*`, docs/webhooks.md), as
//! flags, `SKUA_*` variables and config-file keys; the server checks them into a
//! [`WebhookConfig`] with [`WebhookSettings::config`], right below the declaration.

use skua_core::setting;
use skua_core::settings::SettingError;
use skua_core::settings::check::{invalid, nonzero_duration, positive, required};

use crate::WebhookConfig;

skua_core::settings! {
    /// The webhook engine's settings: address rules and limits, the trigger queue and its
    /// delivery bounds, the trigger retry schedule.
    pub struct WebhookSettings {
        /// Webhooks may call link-local and cloud metadata addresses (169.254.0.0/16, fe80::/10) [default false].
        ///
        /// Webhooks (docs/webhooks.md). URLs may not name link-local or cloud metadata addresses
        /// (169.254.0.0/16, fe80::/10, also IPv4-mapped; metadata.google.internal) unless this is true:
        /// checked when a webhook is configured, and again for every address a host name resolves to
        /// when a request is made.
        #[arg(long, env = "SKUA_WEBHOOK_ALLOW_LINK_LOCAL")]
        pub webhook_allow_link_local: bool = false,
        /// Hosts webhooks may call (comma-separated; `name`, `*.parent` or an address); empty = any [default empty].
        ///
        /// When not empty, webhooks may only call these hosts: exact names, "*.example.com" for any
        /// name under example.com, or addresses. Checked at configuration and at send time.
        #[arg(long, env = "SKUA_WEBHOOK_ALLOWED_HOSTS", value_delimiter = ',')]
        pub webhook_allowed_hosts: Vec<String> = Vec::new(),
        /// Hydration webhooks may call loopback addresses (127.0.0.0/8, ::1, localhost): their answer reaches clients [default false; --dev true].
        ///
        /// Hydration webhooks may call loopback addresses (127.0.0.0/8, ::1, localhost) only when this
        /// is true (`skua serve --dev` sets it): a hydration answer reaches the subscriber, so a tenant
        /// could otherwise read the node's own local services back. Checked at configuration and for
        /// every address a host name resolves to. Triggers and private addresses are not affected.
        #[arg(long, env = "SKUA_WEBHOOK_ALLOW_LOOPBACK")]
        pub webhook_allow_loopback: bool = false,
        /// Triggers waiting in this node's trigger queue; beyond it they overflow, nothing blocks [default 10000].
        ///
        /// Triggers waiting in this node's trigger queue (the engine's; every other webhook is sent on
        /// its caller's task). When full nothing blocks: a logged topic's trigger that does not fit
        /// stays in the outbox for a later scan; any other goes to the overflow queue and becomes a
        /// dead letter (skua_triggers_total{outcome="overflowed"}).
        #[arg(long, env = "SKUA_WEBHOOK_QUEUE")]
        pub webhook_queue: usize = 10_000,
        /// Queued triggers being delivered at once, retry waits included [default 1024].
        ///
        /// Triggers being delivered at once, including those waiting for a retry; the trigger queue
        /// waits behind them.
        #[arg(long, env = "SKUA_WEBHOOK_MAX_PENDING")]
        pub webhook_max_pending: usize = 1024,
        /// Webhook requests in flight at once to one target (scheme, host, port) [default 16].
        ///
        /// Requests in flight at once to one target (scheme, host and port); more wait their turn
        /// (within their timeout). Also the idle keep-alive connections kept per target (90 s each).
        #[arg(long, env = "SKUA_WEBHOOK_CONCURRENCY_PER_TARGET")]
        pub webhook_concurrency_per_target: usize = 16,
        /// Most bytes of a webhook answer read; longer answers fail [default 1048576].
        ///
        /// Most bytes of an answer read (hydration data must also fit a frame); a longer answer fails
        /// and is not read further, so a receiver answering 10 MB costs at most this much memory.
        #[arg(long, env = "SKUA_WEBHOOK_MAX_RESPONSE_BYTES")]
        pub webhook_max_response_bytes: usize = 1_048_576,
        /// Connection timeout of webhook requests [default 5s].
        ///
        /// Connection establishment timeout, within each request's own timeout (hydration: the
        /// webhook's timeoutMs, default 5s, at most 30s; triggers: default 10s, at most 30s).
        #[arg(long, env = "SKUA_WEBHOOK_CONNECT_TIMEOUT")]
        pub webhook_connect_timeout: String = "5s",
        /// Attempts of a trigger webhook request before it fails [default 5].
        ///
        /// Triggers: attempts (5xx answers, timeouts and transport errors are retried), and the wait
        /// before the second attempt, doubling after: 4s, 8s, 16s, 32s (about a minute in all).
        /// Hydration always makes at most 3 attempts, 1s then 2s apart, within its timeout (N43).
        #[arg(long, env = "SKUA_WEBHOOK_TRIGGER_ATTEMPTS")]
        pub webhook_trigger_attempts: u32 = skua_core::webhook::TRIGGER_ATTEMPTS,
        /// Wait before a trigger's second attempt; each further wait doubles [default 4s: 4s, 8s, 16s, 32s].
        #[arg(long, env = "SKUA_WEBHOOK_TRIGGER_FIRST_RETRY")]
        pub webhook_trigger_first_retry: String = skua_core::duration::format(skua_core::webhook::TRIGGER_FIRST_RETRY),
        /// Webhook deliveries whose outcome a node keeps for the admin dashboard [default 100; 0: none].
        ///
        /// Deliveries (every kind) whose outcome each node keeps in memory for the admin dashboard's
        /// webhooks page: kind, target host, outcome, status, latency, time. 0 keeps none.
        #[arg(long, env = "SKUA_WEBHOOK_RECENT_DELIVERIES")]
        pub webhook_recent_deliveries: usize = 100,
    }
}

impl WebhookSettings {
    /// The engine's settings, checked. `wake_allowed_hosts` is the members' setting
    /// (`skua_engine`'s `MembersSettings`): empty here, the server sets it.
    ///
    /// # Errors
    /// [`SettingError`] naming the first bad key.
    pub fn config(&self) -> Result<WebhookConfig, SettingError> {
        let allowed_hosts: Vec<String> = required(setting!(self, webhook_allowed_hosts))?
            .into_iter()
            .map(|h| h.trim().to_ascii_lowercase())
            .filter(|h| !h.is_empty())
            .collect();
        if let Some(bad) =
            allowed_hosts.iter().find(|h| h.contains(['/', ':', ' ']) && h.parse::<std::net::IpAddr>().is_err())
        {
            return Err(invalid("webhook_allowed_hosts", format!("{bad:?}: give host names (or *.parent), not URLs")));
        }
        Ok(WebhookConfig {
            concurrency_per_target: positive(setting!(self, webhook_concurrency_per_target))?,
            max_response_bytes: positive(setting!(self, webhook_max_response_bytes))?,
            connect_timeout: nonzero_duration(setting!(self, webhook_connect_timeout))?,
            allow_link_local: required(setting!(self, webhook_allow_link_local))?,
            allowed_hosts,
            allow_loopback: required(setting!(self, webhook_allow_loopback))?,
            wake_allowed_hosts: Vec::new(),
            recent_deliveries: required(setting!(self, webhook_recent_deliveries))?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_declared_defaults_pass_their_checks() {
        let c = WebhookSettings::defaults().config().unwrap();
        assert_eq!((c.concurrency_per_target, c.max_response_bytes), (16, 1 << 20));
        assert_eq!(WebhookConfig::default(), c);
    }

    #[test]
    fn a_url_among_the_allowed_hosts_is_refused_by_name() {
        let s = WebhookSettings {
            webhook_allowed_hosts: Some(vec!["https://a.example".into()]),
            ..WebhookSettings::defaults()
        };
        assert_eq!(s.config().unwrap_err().key, "webhook_allowed_hosts");
    }
}
