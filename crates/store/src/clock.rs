//! The wall clock a store checks expiry with, injectable so tests set the time instead of
//! sleeping.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Returns the current time in unix seconds.
pub type UnixClock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// The system wall clock. A clock set before 1970 reads as 0.
pub fn system_clock() -> UnixClock {
    Arc::new(|| SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()))
}
