//! [`MembersConfig`]: persistent presence and wake (N46, N47; docs/agents.md).

use std::time::Duration;

/// Persistent presence and wake settings (`presence_*` and `wake_*` settings).
#[derive(Debug, Clone)]
pub struct MembersConfig {
    /// How long a persistent member's record outlives its last connection (N46).
    pub ttl: Duration,
    /// Most persistent members a `presenceList` adds beside the live ones (docs/protocol.md).
    pub list_limit: u32,
    /// Most stored persistent members per project, cluster-wide (issue 33): a new one beyond
    /// it is refused with `presence_limit_exceeded`.
    pub max_per_project: u64,
    /// A member that does not connect this long after its wake goes back to offline, when its
    /// `wake.timeoutMs` gives no other value (N47).
    pub wake_timeout: Duration,
    /// The longest `wake.timeoutMs` honoured.
    pub wake_timeout_max: Duration,
    /// Publishes waiting for a wake check on a node; beyond it a publish wakes nobody (counted).
    pub wake_queue: usize,
    /// Offline members woken per room and check at most.
    pub wake_batch: u32,
    /// In a cluster: how long a room found without wakeable members is not checked again by
    /// this node (a change on another node is not seen here). A single node keeps the answer
    /// until a member of the room changes ([`Self::negative_until_changed`]).
    pub wake_negative_cache: Duration,
    /// The shortest `wake.timeoutMs` honoured: a member is woken at most once per this long.
    pub wake_timeout_min: Duration,
    /// The internal addresses wake URLs may name (`wake_allowed_hosts`); checked at announce,
    /// and by the webhook engine when the request is made.
    pub wake_allowed: skua_core::webhook::InternalAllowList,
    /// The period of the wake limits.
    pub wake_limit_period: Duration,
    /// Wakes started per actor (all its clientIds) per period.
    pub wake_limit_per_actor: u32,
    /// Wakes started per project and wake URL origin per period.
    pub wake_limit_per_url: u32,
    /// Log lines about failed or limited wakes per period.
    pub wake_log_limit: u32,
    /// Most rooms remembered without wakeable members; beyond it every answer is forgotten.
    pub wake_negative_rooms: usize,
    /// A single node: every member change passes through it, so a room's "no wakeable members"
    /// holds until one invalidates it, with no time bound.
    pub negative_until_changed: bool,
    /// At start, set offline every member another node run left online: a single node (nothing
    /// of an earlier run is connected).
    pub offline_others_at_start: bool,
}

impl Default for MembersConfig {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(7 * 24 * 3600),
            list_limit: 1000,
            max_per_project: 10_000,
            wake_timeout: Duration::from_secs(30),
            wake_timeout_max: Duration::from_secs(300),
            wake_queue: 4096,
            wake_batch: 64,
            wake_negative_cache: Duration::from_secs(1),
            wake_timeout_min: Duration::from_secs(1),
            wake_allowed: skua_core::webhook::InternalAllowList::default(),
            wake_limit_period: Duration::from_secs(60),
            wake_limit_per_actor: 64,
            wake_limit_per_url: 256,
            wake_log_limit: 10,
            wake_negative_rooms: 65_536,
            negative_until_changed: false,
            offline_others_at_start: false,
        }
    }
}
