//! The engine's settings: [`WebhookConfig`] and the [`RetrySchedule`] of a kind of request.

use std::time::Duration;

/// The engine's settings, checked from [`WebhookSettings`](crate::WebhookSettings) (declared
/// there with their defaults) by [`WebhookSettings::config`](crate::WebhookSettings::config);
/// `Default` is the declared defaults, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookConfig {
    /// Requests in flight at once to one target (scheme, host and port).
    pub concurrency_per_target: usize,
    /// Most bytes of an answer read; a longer answer fails `TooLarge` and is not read further.
    pub max_response_bytes: usize,
    /// Connection establishment timeout (within the call's own timeout).
    pub connect_timeout: Duration,
    /// Allow link-local and cloud-metadata addresses (169.254.0.0/16, fe80::/10, …).
    pub allow_link_local: bool,
    /// When not empty, only these hosts (`name`, `*.parent`, an address) are called.
    pub allowed_hosts: Vec<String>,
    /// Allow hydration webhooks on loopback addresses (127.0.0.0/8, ::1, `localhost`): a
    /// hydration answer reaches clients, so a loopback service could be read through it.
    pub allow_loopback: bool,
    /// The exceptions to the rule of wake URLs (a client's): exact host names, addresses and
    /// CIDR ranges whose internal addresses (loopback, private, …) may be called.
    pub wake_allowed_hosts: Vec<String>,
    /// Deliveries whose outcome the node keeps for the admin dashboard (the last ones).
    pub recent_deliveries: usize,
}

impl Default for WebhookConfig {
    /// The declared defaults, checked (`settings::tests::the_declared_defaults_pass_their_checks`).
    fn default() -> Self {
        crate::WebhookSettings::defaults().config().unwrap_or_else(|e| unreachable!("the declared defaults: {e}"))
    }
}

/// Delays between attempts; attempts = delays + 1. Only 5xx answers, timeouts and transport
/// errors are retried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetrySchedule {
    /// The wait before attempt 2, 3, …
    pub delays: Vec<Duration>,
}

impl RetrySchedule {
    /// Hydration and wake (N43): 3 attempts, 1 s then 2 s apart (within the call's timeout):
    /// [`skua_core::webhook::CALL_RETRY_DELAYS`].
    pub fn hydration() -> Self {
        Self { delays: skua_core::webhook::CALL_RETRY_DELAYS.to_vec() }
    }

    /// How many attempts at most.
    pub fn attempts(&self) -> usize {
        self.delays.len() + 1
    }
}
