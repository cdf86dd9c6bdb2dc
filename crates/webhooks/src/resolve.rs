//! Name resolution that applies the address rule at send time: a host name resolving to a
//! link-local or cloud-metadata address (169.254.0.0/16, fe80::/10, …) is never connected to
//! unless the operator allows it, whatever the configuration-time check saw (DNS can change).

use std::net::SocketAddr;

use skua_core::webhook::is_link_local_or_metadata;

/// The system resolver (tokio's `lookup_host`), keeping only allowed addresses.
#[derive(Debug, Clone, Copy)]
pub struct GuardedResolver {
    /// Allow link-local and metadata addresses (`webhook_allow_link_local`).
    pub allow_link_local: bool,
}

/// Why a name was refused.
#[derive(Debug, thiserror::Error)]
#[error("{name} resolves only to refused addresses (link-local or cloud metadata, or what the kind's rule refuses)")]
pub struct RefusedAddress {
    /// The name.
    pub name: String,
}

impl GuardedResolver {
    /// The allowed addresses of `host` with `port`.
    ///
    /// # Errors
    /// [`RefusedAddress`] when every address is refused; the resolver's error otherwise.
    pub async fn resolve(
        &self,
        host: &str,
        port: u16,
    ) -> Result<Vec<SocketAddr>, Box<dyn std::error::Error + Send + Sync>> {
        resolve_guarded(host, port, self.allow_link_local, &crate::rule::AddressRule::Open).await
    }
}

/// [`GuardedResolver::resolve`], also dropping the addresses `rule` refuses (every address the
/// name resolves to is checked).
pub(crate) async fn resolve_guarded(
    host: &str,
    port: u16,
    allow_link_local: bool,
    rule: &crate::rule::AddressRule,
) -> Result<Vec<SocketAddr>, Box<dyn std::error::Error + Send + Sync>> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await?
        .filter(|a| allow_link_local || !is_link_local_or_metadata(a.ip()))
        .filter(|a| rule.allows_resolved(host, a.ip()))
        .collect();
    if addrs.is_empty() {
        return Err(Box::new(RefusedAddress { name: host.to_owned() }));
    }
    Ok(addrs)
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn resolve(allow_link_local: bool, name: &str) -> Result<Vec<SocketAddr>, String> {
        let r = GuardedResolver { allow_link_local };
        r.resolve(name, 80).await.map_err(|e| e.to_string())
    }

    // The system resolver answers an address written as a name with that address, so this
    // exercises the filter on what resolution returns without a DNS server.
    #[tokio::test]
    async fn names_resolving_to_link_local_or_metadata_addresses_are_refused() {
        let e = resolve(false, "169.254.169.254").await.unwrap_err();
        assert!(e.contains("link-local"), "{e}");
        assert!(resolve(false, "fe80::1").await.is_err());
        assert_eq!(resolve(true, "169.254.169.254").await.unwrap()[0].ip().to_string(), "169.254.169.254");
        assert!(resolve(false, "localhost").await.unwrap().iter().all(|a| a.ip().is_loopback()));
    }

    // Issue 33: a wake URL's host name is checked on every address it resolves to, when the
    // request is made: `localhost` resolves to loopback and is refused unless the operator
    // allows the name or the range.
    #[tokio::test]
    async fn a_name_resolving_to_loopback_is_refused_for_a_wake_unless_allowed() {
        use crate::rule::AddressRule;
        use skua_core::webhook::InternalAllowList;
        let wake = |list: &[&str]| {
            let list: Vec<String> = list.iter().map(|s| (*s).to_owned()).collect();
            AddressRule::NoInternal(InternalAllowList::parse(&list).unwrap())
        };
        let e = resolve_guarded("localhost", 80, false, &wake(&[])).await.unwrap_err();
        assert!(e.is::<RefusedAddress>(), "{e}");
        assert!(resolve_guarded("localhost", 80, false, &AddressRule::NoLoopback).await.is_err());
        for allowed in [&["localhost"][..], &["127.0.0.0/8", "::1"][..]] {
            let a = resolve_guarded("localhost", 80, false, &wake(allowed)).await.unwrap();
            assert!(!a.is_empty() && a.iter().all(|a| a.ip().is_loopback()), "{allowed:?}");
        }
    }
}
