//! [`MembersConfig`]: persistent presence and wake (N46, N47; docs/agents.md).

use std::time::Duration;

use skua_core::setting;
use skua_core::settings::SettingError;
use skua_core::settings::check::{duration, invalid, nonzero_duration, positive, required};

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
    /// The declared defaults of [`MembersSettings`], checked.
    fn default() -> Self {
        MembersSettings::defaults().config().unwrap_or_else(|e| unreachable!("the declared defaults: {e}"))
    }
}

skua_core::settings! {
    /// Persistent presence and wake settings, as flags, `SKUA_*` variables and config-file keys
    /// (checked into a [`MembersConfig`] by the server).
    pub struct MembersSettings {
        /// How long a persistent presence member outlives its last connection (N46) [default 7d].
        ///
        /// Persistent presence and wake (N46, N47; docs/agents.md).
        /// How long a persistent member's record outlives its last connection; then it is removed
        /// (a `leave`). Announcing again renews it.
        #[arg(long, env = "SKUA_PRESENCE_TTL")]
        pub presence_ttl: String = "7d",
        /// Most persistent members a presenceList adds beside the live ones [default 1000].
        ///
        /// Most persistent members a presenceList adds beside the live ones (offline and waking members,
        /// by actor id); the rest are not listed (docs/protocol.md "Presence lists").
        #[arg(long, env = "SKUA_PRESENCE_LIST_LIMIT")]
        pub presence_list_limit: u32 = 1000,
        /// Most stored persistent presence members per project, cluster-wide; a new one beyond it is refused presence_limit_exceeded [default 10000].
        ///
        /// Most persistent members (records of any status, until removed or expired) one project may
        /// hold in the store, for the whole cluster: an announce that would add one more is refused with
        /// `presence_limit_exceeded` (nothing announced or stored); a member announcing again (its own
        /// record) is never refused. Announces racing on several connections may pass it by as many as
        /// run at once.
        #[arg(long, env = "SKUA_PRESENCE_MAX_MEMBERS_PER_PROJECT")]
        pub presence_max_members_per_project: u64 = 10_000,
        /// How long a woken member has to connect when its wake.timeoutMs gives nothing (N47) [default 30s].
        ///
        /// A woken member that does not connect within its wake.timeoutMs (this when it gives none) goes
        /// back to offline; the wake request's attempts share the same budget.
        #[arg(long, env = "SKUA_WAKE_TIMEOUT")]
        pub wake_timeout: String = "30s",
        /// The longest wake.timeoutMs honoured [default 5m].
        ///
        /// The longest wake.timeoutMs honoured.
        #[arg(long, env = "SKUA_WAKE_TIMEOUT_MAX")]
        pub wake_timeout_max: String = "5m",
        /// Publishes waiting for a wake check on a node; beyond it they wake nobody (counted) [default 4096].
        ///
        /// Publishes waiting for a wake check on a node; beyond it a publish wakes nobody, counted as
        /// skua_wakes_total{outcome="dropped"}. While the store does not answer, also the most rooms
        /// whose wake check waits for it, and the most members whose going offline waits for it.
        #[arg(long, env = "SKUA_WAKE_QUEUE")]
        pub wake_queue: usize = 4096,
        /// Offline members one wake check wakes at most [default 64].
        ///
        /// Offline members one wake check wakes at most (per room and publish).
        #[arg(long, env = "SKUA_WAKE_BATCH")]
        pub wake_batch: u32 = 64,
        /// In a cluster, how long a room without wakeable members is not checked again by a node (a single node: until a member changes) [default 1s].
        ///
        /// A room found without wakeable members is not looked at again until one of its members changes
        /// (announced, gone offline, woken without success, removed): a publish into a room without
        /// persistent members costs no store query. A single node sees every change; in a cluster a change
        /// on another node is not seen, so there the answer also lapses after this long (issue 36).
        #[arg(long, env = "SKUA_WAKE_NEGATIVE_CACHE")]
        pub wake_negative_cache: String = "1s",
        /// Internal addresses wake URLs may name (comma-separated exact host names, addresses or CIDR ranges); loopback, private, link-local, CGNAT, multicast and metadata addresses are refused otherwise [default empty; --dev 127.0.0.0/8,::1,localhost].
        ///
        /// Wake URLs are a client's: outside this list, a wake URL naming (or resolving to) a loopback,
        /// private, link-local, CGNAT (100.64.0.0/10), multicast, unspecified, reserved or cloud metadata
        /// address is refused, when announced (an error frame naming `wake`) and when posted (after name
        /// resolution, every address). Entries: exact host names ("wake.internal"), addresses or CIDR
        /// ranges ("10.20.0.0/16", "fd00::/8"). `skua serve --dev` sets 127.0.0.0/8, ::1 and localhost.
        #[arg(long, env = "SKUA_WAKE_ALLOWED_HOSTS", value_delimiter = ',')]
        pub wake_allowed_hosts: Vec<String> = Vec::new(),
        /// The shortest wake.timeoutMs honoured: a member is woken at most once per this long [default 1s].
        ///
        /// The shortest wake.timeoutMs honoured (a smaller one is raised to it): a member is woken at
        /// most once per this long.
        #[arg(long, env = "SKUA_WAKE_TIMEOUT_MIN")]
        pub wake_timeout_min: String = "1s",
        /// The period of the wake limits (wake_limit_per_actor, wake_limit_per_url, wake_log_limit) [default 1m].
        ///
        /// The period of the wake limits below (fixed windows). With Redis presence the two limits are
        /// counted in Redis for the whole cluster (keys <namespace>:limit:wake:…); with memory presence,
        /// and on a node while Redis does not answer, each node counts alone.
        #[arg(long, env = "SKUA_WAKE_LIMIT_PERIOD")]
        pub wake_limit_period: String = "1m",
        /// Wakes started per actor (all its clientIds) per wake_limit_period, for the cluster with Redis presence (per node otherwise); beyond it members stay offline [default 64].
        ///
        /// Wakes started per actor (all its clientIds together) per period; beyond it the members stay
        /// offline (skua_wakes_total{outcome="limited"}) and a later publish wakes them.
        #[arg(long, env = "SKUA_WAKE_LIMIT_PER_ACTOR")]
        pub wake_limit_per_actor: u32 = 64,
        /// Wakes started per project and wake URL origin (scheme, host, port) per wake_limit_period, for the cluster with Redis presence (per node otherwise) [default 256].
        ///
        /// Wakes started per project and wake URL origin (scheme, host, port) per period.
        #[arg(long, env = "SKUA_WAKE_LIMIT_PER_URL")]
        pub wake_limit_per_url: u32 = 256,
        /// Log lines about failed or limited wakes a node writes per wake_limit_period; the rest are counted [default 10].
        ///
        /// Log lines about failed or limited wakes a node writes per period (URLs shown as
        /// scheme://host:port only); the rest are counted in skua_wakes_total.
        #[arg(long, env = "SKUA_WAKE_LOG_LIMIT")]
        pub wake_log_limit: u32 = 10,
        /// Most rooms a node remembers as having no wakeable members; beyond it it forgets them all [default 65536].
        ///
        /// Most rooms a node remembers as having no wakeable members; past it, it forgets them all (each
        /// is then asked once more).
        #[arg(long, env = "SKUA_WAKE_NEGATIVE_ROOMS")]
        pub wake_negative_rooms: usize = 65_536,
    }
}

impl MembersSettings {
    /// These settings, checked (N46, N47); the single-node switches
    /// (`offline_others_at_start`, `negative_until_changed`) are the server's, from the backends.
    ///
    /// # Errors
    /// [`SettingError`] naming the first bad key.
    pub fn config(&self) -> Result<MembersConfig, SettingError> {
        let s = self;
        Ok(MembersConfig {
            ttl: nonzero_duration(setting!(s, presence_ttl))?,
            list_limit: required(setting!(s, presence_list_limit))?,
            max_per_project: positive(setting!(s, presence_max_members_per_project))?,
            wake_timeout: nonzero_duration(setting!(s, wake_timeout))?,
            wake_timeout_max: nonzero_duration(setting!(s, wake_timeout_max))?,
            wake_queue: positive(setting!(s, wake_queue))?,
            wake_batch: positive(setting!(s, wake_batch))?,
            wake_negative_cache: duration(setting!(s, wake_negative_cache))?,
            wake_timeout_min: duration(setting!(s, wake_timeout_min))?,
            wake_allowed: skua_core::webhook::InternalAllowList::parse(&required(setting!(s, wake_allowed_hosts))?)
                .map_err(|e| invalid("wake_allowed_hosts", e))?,
            wake_limit_period: nonzero_duration(setting!(s, wake_limit_period))?,
            wake_limit_per_actor: positive(setting!(s, wake_limit_per_actor))?,
            wake_limit_per_url: positive(setting!(s, wake_limit_per_url))?,
            wake_log_limit: required(setting!(s, wake_log_limit))?,
            wake_negative_rooms: positive(setting!(s, wake_negative_rooms))?,
            offline_others_at_start: false,
            negative_until_changed: false,
        })
    }
}
