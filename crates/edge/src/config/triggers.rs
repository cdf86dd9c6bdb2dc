//! [`TriggerConfig`]: how a node delivers trigger webhooks (docs/webhooks.md).

use std::time::Duration;

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
    fn default() -> Self {
        Self {
            queue: 10_000,
            in_flight: 1024,
            batch_window: Duration::from_millis(5),
            retry_delays: skua_core::webhook::trigger_retry_delays(),
            lease: Duration::from_secs(30),
            attempt_timeout: Duration::from_secs(30),
            scan_interval: Duration::from_secs(5),
            dead_letters_per_project: 10_000,
            overflow_queue: 1024,
            max_body_bytes: 2 * 1024 * 1024,
            queue_bytes: 64 * 1024 * 1024,
            queue_bytes_per_project: 16 * 1024 * 1024,
            overflow_bytes: 16 * 1024 * 1024,
            dead_letter_bytes_per_project: 64 * 1024 * 1024,
            take_over_at_start: false,
        }
    }
}
