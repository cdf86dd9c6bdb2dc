//! [`TriggerConfig`]: how a node delivers trigger webhooks (docs/webhooks.md).

use std::time::Duration;

use skua_core::setting;
use skua_core::settings::SettingError;
use skua_core::settings::check::{at_most, invalid, nonzero_duration, positive};

/// Trigger delivery settings (`trigger_*` settings, docs/webhooks.md).
#[derive(Debug, Clone)]
pub struct TriggerConfig {
    /// Triggers queued on a node before delivery.
    pub queue: usize,
    /// Triggers being delivered (or waiting between attempts) at once.
    pub in_flight: usize,
    /// How long the first queued trigger waits for others to start with it (0: at once).
    pub batch_window: Duration,
    /// Waits between attempts; attempts = `retry_delays.len() + 1` (default: 4 s, 8 s, 16 s,
    /// 32 s, [`skua_core::webhook::trigger_retry_delays`]).
    pub retry_delays: Vec<Duration>,
    /// How long a node holds an outbox trigger beyond its current attempt and wait.
    pub lease: Duration,
    /// How long one attempt may take at most (the longest webhook timeout).
    pub attempt_timeout: Duration,
    /// How often each node claims outbox triggers whose lease ran out.
    pub scan_interval: Duration,
    /// Dead letters kept per project; beyond it the oldest are dropped (counted).
    pub dead_letters_per_project: u64,
    /// Non-logged triggers waiting to be written as dead letters after the queue was full;
    /// beyond it they are dropped (counted as `lost`).
    pub overflow_queue: usize,
    /// Longest trigger body (JSON) built; a longer one is not sent but kept as a dead letter
    /// with its `data` omitted (`trigger_max_body_bytes`).
    pub max_body_bytes: usize,
    /// Bytes of trigger bodies queued or being delivered on the node (`trigger_queue_bytes`).
    pub queue_bytes: usize,
    /// The part of `queue_bytes` one project may take (`trigger_queue_bytes_per_project`).
    pub queue_bytes_per_project: usize,
    /// Bytes of bodies waiting to be written as dead letters (`trigger_overflow_bytes`).
    pub overflow_bytes: usize,
    /// Bytes of dead-letter bodies kept per project (`webhook_dead_letter_bytes_per_project`).
    pub dead_letter_bytes_per_project: u64,
    /// At start, end every other node run's outbox leases: a single node on a durable store
    /// (nobody else would send what an earlier run left).
    pub take_over_at_start: bool,
}

impl TriggerConfig {
    /// The per-project dead-letter caps.
    pub fn dead_letter_cap(&self) -> skua_core::DeadLetterCap {
        skua_core::DeadLetterCap { count: self.dead_letters_per_project, bytes: self.dead_letter_bytes_per_project }
    }
}

impl Default for TriggerConfig {
    /// The declared defaults of [`TriggerSettings`], checked.
    fn default() -> Self {
        TriggerSettings::defaults().config().unwrap_or_else(|e| unreachable!("the declared defaults: {e}"))
    }
}

skua_core::settings! {
    /// Trigger delivery settings, as flags, `SKUA_*` variables and config-file keys (checked into a
    /// [`TriggerConfig`] by the server, with the queue and retries of the webhook engine's).
    pub struct TriggerSettings {
        /// How long a node holds a logged topic's trigger beyond its current attempt [default 30s].
        ///
        /// Triggers of logged topics go through the store's outbox (N45).
        /// A logged topic's trigger is held by the node sending it for its current attempt, the wait
        /// after it, and this long; a trigger whose node stops renewing it (it crashed) is taken over
        /// by another node's outbox scan after that.
        #[arg(long, env = "SKUA_TRIGGER_LEASE")]
        pub trigger_lease: String = "30s",
        /// How long the first queued trigger waits for others to start with it, 0s: at once; at most 1s [default 5ms].
        ///
        /// How long the first trigger queued on a node waits for others to start with it ("0s": each
        /// starts at once; at most "1s"). One HTTP request per trigger either way; a window lets a node
        /// under a steady publish rate wake up once per window rather than once per trigger.
        #[arg(long, env = "SKUA_TRIGGER_BATCH_WINDOW")]
        pub trigger_batch_window: String = "5ms",
        /// How often each node claims outbox triggers whose lease ran out [default 5s].
        ///
        /// How often each node claims outbox triggers whose lease ran out.
        #[arg(long, env = "SKUA_TRIGGER_SCAN_INTERVAL")]
        pub trigger_scan_interval: String = "5s",
        /// Webhook dead letters kept per project; the oldest are dropped beyond it [default 10000].
        ///
        /// Webhook dead letters kept per project; beyond it the oldest are dropped (counted in
        /// skua_webhook_dead_letters_dropped_total).
        #[arg(long, env = "SKUA_WEBHOOK_DEAD_LETTERS_PER_PROJECT")]
        pub webhook_dead_letters_per_project: u64 = 10_000,
        /// Non-logged triggers waiting to become dead letters after the trigger queue was full; beyond it they are dropped (counted) [default 1024].
        ///
        /// Non-logged triggers waiting to be written as dead letters (in batches of up to 256) after the
        /// trigger queue was full; beyond it a trigger is dropped, counted as
        /// skua_triggers_total{outcome="lost"} (docs/webhooks.md "Overload").
        #[arg(long, env = "SKUA_TRIGGER_OVERFLOW_QUEUE")]
        pub trigger_overflow_queue: usize = 1024,
        /// Longest trigger body (JSON); a longer one is not sent but dead-lettered with its data omitted [default 2097152].
        ///
        /// Byte budgets of trigger bodies (docs/webhooks.md "Overload", docs/security.md). A trigger's
        /// body (JSON, data converted from MessagePack) is built only up to trigger_max_body_bytes: a
        /// longer one is not sent but kept as a dead letter whose data is omitted, counted as
        /// skua_triggers_total{outcome="too_large"}; the publish itself succeeds. At most the three
        /// queue budgets below.
        #[arg(long, env = "SKUA_TRIGGER_MAX_BODY_BYTES")]
        pub trigger_max_body_bytes: usize = 2_097_152,
        /// Bytes of trigger bodies queued or being delivered on a node [default 67108864].
        ///
        /// Bytes of trigger bodies queued or being delivered (retries included) on this node, and the
        /// part of it one project may take; beyond either a trigger is treated as one beyond the queue
        /// (logged: left in the outbox; otherwise a dead letter), counted in
        /// skua_trigger_budget_refusals_total{budget}.
        #[arg(long, env = "SKUA_TRIGGER_QUEUE_BYTES")]
        pub trigger_queue_bytes: usize = 67_108_864,
        /// Bytes of trigger bodies one project may have queued or being delivered on a node [default 16777216].
        #[arg(long, env = "SKUA_TRIGGER_QUEUE_BYTES_PER_PROJECT")]
        pub trigger_queue_bytes_per_project: usize = 16_777_216,
        /// Bytes of trigger bodies waiting to be written as dead letters; beyond it they are dropped (counted) [default 16777216].
        ///
        /// Bytes of trigger bodies waiting to be written as dead letters; beyond it they are dropped
        /// (outcome="lost").
        #[arg(long, env = "SKUA_TRIGGER_OVERFLOW_BYTES")]
        pub trigger_overflow_bytes: usize = 16_777_216,
        /// Bytes of webhook dead-letter bodies kept per project; the oldest are dropped beyond it [default 67108864].
        ///
        /// Bytes of webhook dead-letter bodies kept per project (beside webhook_dead_letters_per_project);
        /// the oldest are dropped beyond it (skua_webhook_dead_letters_dropped_total).
        #[arg(long, env = "SKUA_WEBHOOK_DEAD_LETTER_BYTES_PER_PROJECT")]
        pub webhook_dead_letter_bytes_per_project: u64 = 67_108_864,
    }
}

impl TriggerSettings {
    /// These settings, checked into the trigger delivery's configuration. The queue, the
    /// deliveries at once and the retry schedule are declared with the webhook engine's
    /// settings (`webhook_queue`, `webhook_max_pending`, `webhook_trigger_attempts`,
    /// `webhook_trigger_first_retry`); the server sets them from there, and
    /// `take_over_at_start` from the backends.
    ///
    /// # Errors
    /// [`SettingError`] naming the first bad key.
    pub fn config(&self) -> Result<TriggerConfig, SettingError> {
        let s = self;
        let t = TriggerConfig {
            queue: 10_000,
            in_flight: 1024,
            batch_window: at_most(setting!(s, trigger_batch_window), Duration::from_secs(1))?,
            retry_delays: skua_core::webhook::trigger_retry_delays(),
            lease: nonzero_duration(setting!(s, trigger_lease))?,
            attempt_timeout: skua_core::webhook::WebhookKind::Trigger.max_timeout(),
            scan_interval: nonzero_duration(setting!(s, trigger_scan_interval))?,
            dead_letters_per_project: positive(setting!(s, webhook_dead_letters_per_project))?,
            overflow_queue: positive(setting!(s, trigger_overflow_queue))?,
            max_body_bytes: positive(setting!(s, trigger_max_body_bytes))?,
            queue_bytes: positive(setting!(s, trigger_queue_bytes))?,
            queue_bytes_per_project: positive(setting!(s, trigger_queue_bytes_per_project))?,
            overflow_bytes: positive(setting!(s, trigger_overflow_bytes))?,
            dead_letter_bytes_per_project: positive(setting!(s, webhook_dead_letter_bytes_per_project))?,
            take_over_at_start: false,
        };
        // A body that could never fit a queue would never be sent nor dead-lettered (a logged
        // one would wait in the outbox for ever).
        let fits = t.queue_bytes_per_project.min(t.queue_bytes).min(t.overflow_bytes);
        if t.max_body_bytes > fits {
            return Err(invalid(
                "trigger_max_body_bytes",
                format!(
                    "must be at most trigger_queue_bytes, trigger_queue_bytes_per_project and trigger_overflow_bytes ({fits})"
                ),
            ));
        }
        Ok(t)
    }
}
