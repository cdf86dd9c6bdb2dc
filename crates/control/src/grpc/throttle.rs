//! Backing off source addresses that keep presenting a wrong admin key (issue 12, item 6).
//!
//! Each address (an IPv6 address by its /64, which one host usually owns whole) counts its
//! failed admin-key checks. A failure more than `window` after the previous one starts the
//! count again. From the `max_failures`-th failure on, every call from the address is refused
//! for a delay that doubles with each further failure (1 s, 2 s, 4 s, … up to `backoff_max`),
//! whatever key it presents; wrong keys sent while blocked count as failures too, so hammering
//! lengthens the block. A correct key outside a block clears the address. The table holds
//! at most [`MAX_TRACKED`] addresses: when full, idle entries go first, then the oldest.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Most source addresses remembered at once.
pub const MAX_TRACKED: usize = 4096;

/// The first block's length; each further failure doubles it.
const FIRST_BLOCK: Duration = Duration::from_secs(1);

pub use crate::settings::ThrottleConfig;

#[derive(Debug, Clone, Copy)]
struct Entry {
    failures: u32,
    last: Instant,
    blocked_until: Option<Instant>,
}

/// Failed admin-key checks per source address.
#[derive(Debug)]
pub struct AdminKeyThrottle {
    config: ThrottleConfig,
    // std Mutex: short sections with no await, on the (rare) admin call path.
    table: Mutex<HashMap<IpAddr, Entry>>,
}

/// An IPv6 address's /64; IPv4 (and IPv4-mapped) addresses as they are.
fn key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
        },
    }
}

impl AdminKeyThrottle {
    /// An empty table.
    pub fn new(config: ThrottleConfig) -> Self {
        Self { config, table: Mutex::new(HashMap::new()) }
    }

    /// `Err(remaining)` while `ip` is blocked.
    ///
    /// # Errors
    /// The time left of the block.
    pub fn check(&self, ip: IpAddr, now: Instant) -> Result<(), Duration> {
        let table = self.table.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match table.get(&key(ip)).and_then(|e| e.blocked_until) {
            Some(until) if until > now => Err(until - now),
            _ => Ok(()),
        }
    }

    /// Counts a failed check from `ip`; returns the block it started, if any.
    pub fn failed(&self, ip: IpAddr, now: Instant) -> Option<Duration> {
        if self.config.max_failures == 0 {
            return None;
        }
        let mut table = self.table.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let k = key(ip);
        if !table.contains_key(&k) && table.len() >= MAX_TRACKED {
            self.make_room(&mut table, now);
        }
        let e = table.entry(k).or_insert(Entry { failures: 0, last: now, blocked_until: None });
        if now.saturating_duration_since(e.last) > self.config.window {
            e.failures = 0;
        }
        e.failures = e.failures.saturating_add(1);
        e.last = now;
        if e.failures < self.config.max_failures {
            return None;
        }
        let doublings = (e.failures - self.config.max_failures).min(31);
        let block = FIRST_BLOCK.saturating_mul(1u32 << doublings).min(self.config.backoff_max);
        e.blocked_until = Some(now + block);
        Some(block)
    }

    /// Clears `ip` after a correct key.
    pub fn succeeded(&self, ip: IpAddr) {
        let mut table = self.table.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        table.remove(&key(ip));
    }

    /// Addresses remembered now.
    pub fn tracked(&self) -> usize {
        self.table.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }

    fn make_room(&self, table: &mut HashMap<IpAddr, Entry>, now: Instant) {
        let window = self.config.window;
        table
            .retain(|_, e| e.blocked_until.is_some_and(|u| u > now) || now.saturating_duration_since(e.last) <= window);
        if table.len() >= MAX_TRACKED
            && let Some(oldest) = table.iter().min_by_key(|(_, e)| e.last).map(|(k, _)| *k)
        {
            table.remove(&oldest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn blocks_after_max_failures_and_doubles() {
        let t = AdminKeyThrottle::new(ThrottleConfig::default());
        let now = Instant::now();
        let a = ip("192.0.2.1");
        for i in 0..4 {
            assert_eq!(t.failed(a, now + Duration::from_millis(i)), None);
            assert!(t.check(a, now).is_ok());
        }
        assert_eq!(t.failed(a, now), Some(Duration::from_secs(1)));
        assert!(t.check(a, now).is_err());
        assert!(t.check(ip("192.0.2.2"), now).is_ok(), "other addresses are not affected");
        let later = now + Duration::from_secs(2);
        assert!(t.check(a, later).is_ok(), "the block ends");
        assert_eq!(t.failed(a, later), Some(Duration::from_secs(2)));
        assert_eq!(t.failed(a, later), Some(Duration::from_secs(4)));
        for _ in 0..20 {
            t.failed(a, later);
        }
        assert_eq!(t.check(a, later), Err(Duration::from_secs(300)), "capped at backoff_max");
    }

    #[test]
    fn success_clears_and_a_quiet_window_restarts_the_count() {
        let t = AdminKeyThrottle::new(ThrottleConfig::default());
        let now = Instant::now();
        let a = ip("192.0.2.1");
        for _ in 0..4 {
            t.failed(a, now);
        }
        t.succeeded(a);
        assert_eq!(t.failed(a, now), None, "count restarted after a success");
        for _ in 0..3 {
            t.failed(a, now);
        }
        let quiet = now + Duration::from_secs(61);
        assert_eq!(t.failed(a, quiet), None, "a failure after a quiet window counts from one");
    }

    #[test]
    fn ipv6_is_keyed_by_its_64_and_the_table_is_bounded() {
        let t = AdminKeyThrottle::new(ThrottleConfig { max_failures: 1, ..ThrottleConfig::default() });
        let now = Instant::now();
        t.failed(ip("2001:db8:1:2::1"), now);
        assert!(t.check(ip("2001:db8:1:2:ffff::9"), now).is_err(), "same /64");
        assert!(t.check(ip("2001:db8:1:3::1"), now).is_ok());
        let start = now + Duration::from_secs(1000);
        for i in 0..(MAX_TRACKED as u32 + 100) {
            let a = IpAddr::V4((0x0a00_0000 + i).into());
            t.failed(a, start + Duration::from_millis(u64::from(i)));
        }
        assert!(t.tracked() <= MAX_TRACKED);
    }

    #[test]
    fn zero_max_failures_turns_it_off() {
        let t = AdminKeyThrottle::new(ThrottleConfig { max_failures: 0, ..ThrottleConfig::default() });
        let now = Instant::now();
        for _ in 0..100 {
            assert_eq!(t.failed(ip("192.0.2.1"), now), None);
        }
        assert_eq!(t.tracked(), 0);
    }
}
