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
    /// Waits between attempts; attempts = `retry_delays.len() + 1`.
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
    /// At start, end every other node run's outbox leases: a single node on a durable store
    /// (nobody else would send what an earlier run left).
    pub take_over_at_start: bool,
}

impl Default for TriggerConfig {
    fn default() -> Self {
        Self {
            queue: 10_000,
            in_flight: 1024,
            batch_window: Duration::from_millis(5),
            retry_delays: [2, 6, 15, 37].into_iter().map(Duration::from_secs).collect(),
            lease: Duration::from_secs(30),
            attempt_timeout: Duration::from_secs(30),
            scan_interval: Duration::from_secs(5),
            dead_letters_per_project: 10_000,
            overflow_queue: 1024,
            take_over_at_start: false,
        }
    }
}
