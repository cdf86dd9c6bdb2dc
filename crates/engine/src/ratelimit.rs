//! Per-connection publish rate limit: a token bucket (N18).
//!
//! Hand-written rather than `governor` because it must follow tokio's clock, so tests with
//! paused time can drive it, and because one bucket per connection needs no keyed state.

use std::time::Duration;

use tokio::time::Instant;

/// A token bucket holding at most `capacity` tokens, refilled by `capacity` per `window`.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    capacity: f64,
    tokens: f64,
    per_sec: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(capacity: u32, window: Duration) -> Self {
        let capacity = f64::from(capacity.max(1));
        let secs = window.as_secs_f64().max(1e-9);
        Self { capacity, tokens: capacity, per_sec: capacity / secs, last: Instant::now() }
    }

    /// Takes one token if there is one.
    pub fn try_take(&mut self) -> bool {
        let now = Instant::now();
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * self.per_sec).min(self.capacity);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn burst_then_refill() {
        let mut b = TokenBucket::new(50, Duration::from_secs(1));
        let ok = (0..80).filter(|_| b.try_take()).count();
        assert_eq!(ok, 50);
        tokio::time::advance(Duration::from_millis(100)).await;
        let ok = (0..80).filter(|_| b.try_take()).count();
        assert_eq!(ok, 5);
        tokio::time::advance(Duration::from_secs(10)).await;
        let ok = (0..80).filter(|_| b.try_take()).count();
        assert_eq!(ok, 50, "refill is capped at the burst");
    }
}
