//! Client addresses: trusted-proxy ranges, `X-Forwarded-For`, and the per-address limits
//! (concurrent connections and new connections per second).
//!
//! Addresses are counted by key: an IPv4 address, or the /64 prefix of an IPv6 address (one
//! subscriber usually gets a whole /64, so counting single IPv6 addresses would make the limits
//! free to bypass). IPv4-mapped IPv6 addresses count as their IPv4 address.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use tokio::time::Instant;

pub(crate) use crate::config::{Cidr, canonical};

/// Whether `ip` is in one of `ranges`.
pub(crate) fn is_trusted(ranges: &[Cidr], ip: IpAddr) -> bool {
    ranges.iter().any(|r| r.contains(ip))
}

/// The client address of a request that came through a trusted proxy at `peer`: the rightmost
/// `X-Forwarded-For` entry that is not itself a trusted proxy (entries left of it are whatever
/// the client sent, so they are never believed). When every entry is trusted the leftmost one
/// is the client; without a usable header, or at an entry that does not parse, the last
/// trusted hop is.
pub(crate) fn forwarded_client<'a>(
    ranges: &[Cidr],
    peer: IpAddr,
    headers: impl DoubleEndedIterator<Item = &'a str>,
) -> IpAddr {
    let mut client = peer;
    for value in headers.rev() {
        for entry in value.rsplit(',') {
            let Some(ip) = parse_entry(entry.trim()) else { return client };
            client = ip;
            if !is_trusted(ranges, ip) {
                return ip;
            }
        }
    }
    client
}

/// One `X-Forwarded-For` entry: an address, possibly with a port (`1.2.3.4:80`, `[::1]:80`).
fn parse_entry(s: &str) -> Option<IpAddr> {
    s.parse::<IpAddr>()
        .or_else(|_| s.parse::<SocketAddr>().map(|a| a.ip()))
        .ok()
        .or_else(|| s.strip_prefix('[').and_then(|r| r.strip_suffix(']')).and_then(|r| r.parse().ok()))
        .map(canonical)
}

/// The key an address is counted under: IPv4 as is, IPv6 by its /64.
fn key(ip: IpAddr) -> IpAddr {
    match canonical(ip) {
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & (u128::MAX << 64))),
        v4 @ IpAddr::V4(_) => v4,
    }
}

/// Why [`IpLimits::admit`] refused an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// It holds `max_connections_per_ip` connections already.
    Connections,
    /// It opened `max_new_connections_per_ip_per_second` connections within the last second.
    Rate,
}

impl Refusal {
    /// The `reason` label of `skua_front_refusals_total`.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Connections => "ip_connections",
            Self::Rate => "ip_rate",
        }
    }
}

/// Per-address state: open connections and a token bucket of new connections.
#[derive(Debug)]
struct Entry {
    conns: u32,
    tokens: f64,
    last: Instant,
}

#[derive(Debug, Default)]
struct Table {
    entries: HashMap<IpAddr, Entry>,
    /// The table is swept of idle entries when it reaches this size.
    sweep_at: usize,
}

/// Smallest size at which the table is swept.
const MIN_SWEEP: usize = 1024;

/// Concurrent connections and new connections per second, per client address. Entries of
/// addresses with no open connection and a full bucket are dropped by sweeps (amortised, each
/// time the table doubles), so the table holds the addresses with open connections plus those
/// seen within about the last second.
#[derive(Debug)]
pub(crate) struct IpLimits {
    max_conns: u32,
    per_sec: u32,
    // std Mutex: short map updates, never held across an await.
    table: Mutex<Table>,
}

impl IpLimits {
    /// Limits of `max_conns` open and `per_sec` new connections per address (0 = no limit).
    pub(crate) fn new(max_conns: u32, per_sec: u32) -> Arc<Self> {
        Arc::new(Self { max_conns, per_sec, table: Mutex::new(Table { entries: HashMap::new(), sweep_at: MIN_SWEEP }) })
    }

    fn capacity(&self) -> f64 {
        f64::from(self.per_sec)
    }

    /// Counts a new connection of `ip`, or says why it is refused. The returned slot holds the
    /// connection against the address until dropped.
    pub(crate) fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<IpSlot, Refusal> {
        if self.max_conns == 0 && self.per_sec == 0 {
            return Ok(IpSlot { limits: None, key: ip });
        }
        let key = key(ip);
        let now = Instant::now();
        let mut t = self.table.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if t.entries.len() >= t.sweep_at {
            let cap = self.capacity();
            let rate = cap;
            t.entries.retain(|_, e| e.conns > 0 || e.tokens + now.duration_since(e.last).as_secs_f64() * rate < cap);
            t.sweep_at = (t.entries.len() * 2).max(MIN_SWEEP);
        }
        let cap = self.capacity();
        let e = t.entries.entry(key).or_insert(Entry { conns: 0, tokens: cap, last: now });
        if self.max_conns != 0 && e.conns >= self.max_conns {
            return Err(Refusal::Connections);
        }
        if self.per_sec != 0 {
            let elapsed = now.saturating_duration_since(e.last).as_secs_f64();
            e.last = now;
            e.tokens = (e.tokens + elapsed * cap).min(cap);
            if e.tokens < 1.0 {
                return Err(Refusal::Rate);
            }
            e.tokens -= 1.0;
        }
        e.conns += 1;
        Ok(IpSlot { limits: Some(self.clone()), key })
    }

    /// Addresses tracked now (for tests).
    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.table.lock().unwrap_or_else(std::sync::PoisonError::into_inner).entries.len()
    }
}

/// One connection counted against its client address; released on drop.
#[derive(Debug)]
pub(crate) struct IpSlot {
    limits: Option<Arc<IpLimits>>,
    key: IpAddr,
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        let Some(limits) = &self.limits else { return };
        let mut t = limits.table.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let rate_limited = limits.per_sec != 0;
        if let Some(e) = t.entries.get_mut(&self.key) {
            e.conns = e.conns.saturating_sub(1);
            // Without a rate limit nothing else is kept: forget the address at once.
            if e.conns == 0 && !rate_limited {
                t.entries.remove(&self.key);
            }
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
    fn cidr_ranges_contain_their_addresses() {
        let r = Cidr::parse("10.1.0.0/16").unwrap();
        assert!(r.contains(ip("10.1.255.3")));
        assert!(!r.contains(ip("10.2.0.1")));
        assert!(r.contains(ip("::ffff:10.1.2.3")), "IPv4-mapped addresses are IPv4");
        assert!(Cidr::parse("0.0.0.0/0").unwrap().contains(ip("8.8.8.8")));
        assert!(Cidr::parse("192.0.2.7").unwrap().contains(ip("192.0.2.7")));
        assert!(!Cidr::parse("192.0.2.7").unwrap().contains(ip("192.0.2.8")));
        let v6 = Cidr::parse("fd00::/8").unwrap();
        assert!(v6.contains(ip("fd12::1")));
        assert!(!v6.contains(ip("fe80::1")));
        assert!(!v6.contains(ip("10.0.0.1")));
        for bad in ["", "10.0.0.0/33", "fd00::/129", "10.0.0/8", "example.com", "10.0.0.0/x"] {
            assert!(Cidr::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn forwarded_for_gives_the_rightmost_untrusted_entry() {
        let trusted = [Cidr::parse("10.0.0.0/8").unwrap()];
        let peer = ip("10.0.0.5");
        let one = |h: &str| forwarded_client(&trusted, peer, [h].into_iter());
        assert_eq!(one("203.0.113.9"), ip("203.0.113.9"));
        // The client may send any header of its own; the proxy appends what it saw.
        assert_eq!(one("1.1.1.1, 203.0.113.9"), ip("203.0.113.9"));
        assert_eq!(one("1.1.1.1, 203.0.113.9, 10.0.0.7"), ip("203.0.113.9"));
        assert_eq!(one("10.9.9.9, 10.0.0.7"), ip("10.9.9.9"), "all trusted: the leftmost");
        assert_eq!(one("garbage, 10.0.0.7"), ip("10.0.0.7"), "stops at what does not parse");
        assert_eq!(one("203.0.113.9:4711"), ip("203.0.113.9"));
        assert_eq!(one("[2001:db8::1]:80"), ip("2001:db8::1"));
        assert_eq!(one("[2001:db8::1]"), ip("2001:db8::1"));
        assert_eq!(forwarded_client(&trusted, peer, std::iter::empty()), peer);
        // Several headers are one list, in order.
        let two = forwarded_client(&trusted, peer, ["203.0.113.9", "10.0.0.7"].into_iter());
        assert_eq!(two, ip("203.0.113.9"));
    }

    #[test]
    fn ipv6_addresses_count_by_their_64_prefix() {
        let limits = IpLimits::new(1, 0);
        let _a = limits.admit(ip("2001:db8:1:2::1")).unwrap();
        assert_eq!(limits.admit(ip("2001:db8:1:2::ffff")).unwrap_err(), Refusal::Connections);
        let _b = limits.admit(ip("2001:db8:1:3::1")).unwrap();
        let _c = limits.admit(ip("::ffff:192.0.2.1")).unwrap();
        assert_eq!(limits.admit(ip("192.0.2.1")).unwrap_err(), Refusal::Connections);
    }

    #[test]
    fn concurrent_slots_are_released_on_drop_and_empty_entries_forgotten() {
        let limits = IpLimits::new(2, 0);
        let a = limits.admit(ip("192.0.2.1")).unwrap();
        let b = limits.admit(ip("192.0.2.1")).unwrap();
        assert_eq!(limits.admit(ip("192.0.2.1")).unwrap_err(), Refusal::Connections);
        drop(a);
        let c = limits.admit(ip("192.0.2.1")).unwrap();
        drop((b, c));
        assert_eq!(limits.tracked(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn new_connections_are_limited_per_second_with_a_burst_of_the_same() {
        let limits = IpLimits::new(0, 3);
        let ok = (0..5).filter_map(|_| limits.admit(ip("192.0.2.1")).ok()).count();
        assert_eq!(ok, 3);
        assert_eq!(limits.admit(ip("192.0.2.1")).unwrap_err(), Refusal::Rate);
        assert!(limits.admit(ip("192.0.2.2")).is_ok(), "per address");
        tokio::time::advance(std::time::Duration::from_millis(340)).await;
        assert!(limits.admit(ip("192.0.2.1")).is_ok(), "refilled by one");
        assert_eq!(limits.admit(ip("192.0.2.1")).unwrap_err(), Refusal::Rate);
    }

    #[tokio::test(start_paused = true)]
    async fn idle_addresses_are_swept() {
        let limits = IpLimits::new(10, 10);
        for i in 0..2000u32 {
            drop(limits.admit(IpAddr::V4(i.into())).unwrap());
        }
        assert!(limits.tracked() <= 2 * MIN_SWEEP);
        tokio::time::advance(std::time::Duration::from_secs(2)).await;
        let held: Vec<_> =
            (0..MIN_SWEEP as u32 * 2).map(|i| limits.admit(IpAddr::V4((i + 10_000).into())).unwrap()).collect();
        assert!(limits.tracked() <= held.len() + 1, "{} entries for {} open", limits.tracked(), held.len());
    }
}
