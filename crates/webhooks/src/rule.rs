//! The address rule each kind of webhook client adds (hydration, triggers, wake): one place the
//! client (URL hosts) and the resolver (resolved addresses) both read.

use std::net::IpAddr;

use skua_core::webhook::InternalAllowList;

/// The rule a kind's client adds to the link-local rule and the allow-list.
#[derive(Debug, Clone)]
pub(crate) enum AddressRule {
    /// Nothing more (triggers: the operator's documented choice).
    Open,
    /// Loopback and unspecified addresses (and `localhost`) are refused (hydration, whose
    /// answer reaches clients, without `webhook_allow_loopback`).
    NoLoopback,
    /// Every internal address ([`skua_core::webhook::is_internal`]) is refused unless the list
    /// allows it (wake: the URL is a client's).
    NoInternal(InternalAllowList),
}

impl AddressRule {
    /// Whether a URL's host (normalised by the `url` crate, brackets trimmed) passes.
    pub(crate) fn allows_host(&self, bare: &str) -> bool {
        match self {
            Self::Open => true,
            Self::NoLoopback => match bare.parse::<IpAddr>() {
                Ok(ip) => !is_loopback(ip),
                Err(_) => {
                    let name = bare.trim_end_matches('.').to_ascii_lowercase();
                    !(name == "localhost" || name.ends_with(".localhost"))
                }
            },
            Self::NoInternal(list) => list.allows_host(bare),
        }
    }

    /// Whether a resolved address of the host name `name` may be connected to.
    pub(crate) fn allows_resolved(&self, name: &str, ip: IpAddr) -> bool {
        match self {
            Self::Open => true,
            Self::NoLoopback => !is_loopback(ip),
            Self::NoInternal(list) => list.allows_name(name) || list.allows_ip(ip),
        }
    }

    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::Open => "",
            Self::NoLoopback => {
                "a loopback address; refused for hydration unless the server sets webhook_allow_loopback"
            }
            Self::NoInternal(_) => {
                "a loopback, private, link-local, CGNAT, multicast or reserved address; refused for a \
                 wake URL unless the server's wake_allowed_hosts allows it"
            }
        }
    }
}

/// Loopback or unspecified, also written IPv4-mapped.
fn is_loopback(ip: IpAddr) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 @ IpAddr::V4(_) => v4,
    };
    ip.is_loopback() || ip.is_unspecified() || matches!(ip, IpAddr::V4(v4) if v4.octets()[0] == 0)
}
