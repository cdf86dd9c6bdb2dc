//! Address ranges in CIDR notation (`trusted_proxies`).

use std::net::IpAddr;

/// An address range in CIDR notation (`10.0.0.0/8`, `fd00::/8`); a bare address is a range of
/// one. The same ranges as the wake allow-list's ([`skua_core::webhook::IpRange`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr(skua_core::webhook::IpRange);

impl Cidr {
    /// Parses `ADDR` or `ADDR/PREFIX`.
    ///
    /// # Errors
    /// A message naming what is wrong.
    pub fn parse(s: &str) -> Result<Self, String> {
        skua_core::webhook::IpRange::parse(s).map(Self)
    }

    /// Whether `ip` is in the range (an IPv4-mapped address as its IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.contains(ip)
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// An IPv4-mapped IPv6 address (a dual-stack listener's view of an IPv4 client) as IPv4.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 @ IpAddr::V4(_) => v4,
    }
}
