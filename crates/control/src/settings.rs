//! [`ControlSettings`]: the control plane's settings (gRPC, caps, REST API, dashboard), as
//! flags, `SKUA_*` variables and config-file keys; the server checks them into the control
//! plane's configurations ([`ControlLimits`],
//! [`RestConfig`], [`DashboardConfig`],
//! [`ThrottleConfig`]) with the checks below the declaration;
//! each of those configurations' `Default` is the declared defaults, checked.

use std::time::Duration;

use skua_core::setting;
use skua_core::settings::SettingError;
use skua_core::settings::check::{duration, invalid, nonzero_duration, positive, required};

/// Longest a gRPC call may take unless `grpc_request_timeout` says otherwise.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

skua_core::settings! {
    /// The control plane's settings.
    pub struct ControlSettings {
        /// Control plane: most apps per project [default 100].
        ///
        /// Caps of the control plane; beyond them requests fail FAILED_PRECONDITION.
        #[arg(long, env = "SKUA_MAX_APPS_PER_PROJECT")]
        pub max_apps_per_project: u32 = 100,
        /// Control plane: most rooms per app unless the app sets its own cap [default 10000].
        ///
        /// An app may set a lower or higher cap of its own (max_rooms); EnsureRoom honours it too.
        #[arg(long, env = "SKUA_MAX_ROOMS_PER_APP")]
        pub max_rooms_per_app: u32 = 10_000,
        /// Control plane: most actors per project [default 100000].
        #[arg(long, env = "SKUA_MAX_ACTORS_PER_PROJECT")]
        pub max_actors_per_project: u32 = 100_000,
        /// Control plane: most grants per room [default 1000].
        #[arg(long, env = "SKUA_MAX_GRANTS_PER_ROOM")]
        pub max_grants_per_room: u32 = 1000,
        /// Control plane: most lobbies per project [default 1000].
        #[arg(long, env = "SKUA_MAX_LOBBIES_PER_PROJECT")]
        pub max_lobbies_per_project: u32 = 1000,
        /// Control plane: largest page of a List call [default 1000].
        ///
        /// Largest page of a List call; the default page is min(100, this).
        #[arg(long, env = "SKUA_MAX_PAGE_SIZE")]
        pub max_page_size: u32 = 1000,
        /// Serve gRPC reflection without the admin key [default false; --dev true].
        ///
        /// gRPC reflection (`grpcurl list`) without the admin key. Health stays public either way.
        /// `--dev` turns it on.
        #[arg(long, env = "SKUA_GRPC_REFLECTION_PUBLIC")]
        pub grpc_reflection_public: bool = false,
        /// Longest a gRPC call may take, reading its request body included; beyond it the call is answered CANCELLED and its stream freed [default 30s].
        ///
        /// Longest a gRPC call may take, reading its request body included: a call not answered by then
        /// gets CANCELLED ("Timeout expired") and its HTTP/2 stream is freed, so a client that sends a
        /// request's headers and never its body does not hold the stream (issue 33). A health `Watch`
        /// stream ends after it too (watchers re-watch).
        #[arg(long, env = "SKUA_GRPC_REQUEST_TIMEOUT")]
        pub grpc_request_timeout: String = skua_core::duration::format(DEFAULT_REQUEST_TIMEOUT),
        /// Failed admin-key checks from one address before it is blocked; 0: never [default 5].
        ///
        /// Admin-key brute force: after this many failed checks from one address (each within
        /// admin_key_failure_window of the previous one), every call from it is refused
        /// (RESOURCE_EXHAUSTED) for 1s, doubling per further failure up to admin_key_backoff_max.
        /// 0 turns it off. IPv6 addresses count per /64; at most 4096 addresses are remembered.
        #[arg(long, env = "SKUA_ADMIN_KEY_MAX_FAILURES")]
        pub admin_key_max_failures: u32 = 5,
        /// A failed admin-key check this long after the previous one counts from one again [default 1m].
        #[arg(long, env = "SKUA_ADMIN_KEY_FAILURE_WINDOW")]
        pub admin_key_failure_window: String = "1m",
        /// Longest block of an address failing admin-key checks [default 5m].
        #[arg(long, env = "SKUA_ADMIN_KEY_BACKOFF_MAX")]
        pub admin_key_backoff_max: String = "5m",
        /// Serve the REST API under /v1 on the client listener [default true].
        ///
        /// REST API (docs/rest-api.md): the NoLag-compatible HTTP/JSON API under /v1 on the client
        /// listener (same port as /ws), authenticated with project API keys (`skua admin api-keys`).
        #[arg(long, env = "SKUA_REST_API")]
        pub rest_api: bool = true,
        /// Largest REST request body in bytes; larger ones get 413 [default 1048576].
        ///
        /// Largest request body; larger ones are answered 413.
        #[arg(long, env = "SKUA_REST_MAX_BODY_BYTES")]
        pub rest_max_body_bytes: usize = 1_048_576,
        /// REST requests per second per API key, also the burst; beyond it 429 [default 50].
        ///
        /// Requests per second per API key, also the burst; beyond it 429 with Retry-After.
        #[arg(long, env = "SKUA_REST_RATE_LIMIT")]
        pub rest_rate_limit: u32 = 50,
        /// Largest `limit` of a paginated REST list [default 100].
        ///
        /// Largest `limit` of the paginated app list (larger values are capped); the bare-array lists
        /// (rooms, grants, actors) return at most max_page_size items.
        #[arg(long, env = "SKUA_REST_MAX_PAGE_LIMIT")]
        pub rest_max_page_limit: u32 = 100,
        /// Serve the admin dashboard under /admin on the client listener when an admin key is set [default true].
        ///
        /// Admin dashboard (docs/dashboard.md): a web UI under /admin on the client listener, served
        /// only when admin_key is set; signing in takes the admin key. Off with dashboard = false.
        #[arg(long, env = "SKUA_DASHBOARD")]
        pub dashboard: bool = true,
        /// How long a dashboard sign-in lasts [default 8h].
        ///
        /// How long a sign-in lasts.
        #[arg(long, env = "SKUA_DASHBOARD_SESSION_TTL")]
        pub dashboard_session_ttl: String = "8h",
        /// Most dashboard sessions at once; a new sign-in beyond it ends the oldest [default 64].
        ///
        /// Sessions kept at once; a sign-in beyond it ends the oldest.
        #[arg(long, env = "SKUA_DASHBOARD_MAX_SESSIONS")]
        pub dashboard_max_sessions: usize = 64,
        /// Messages a dashboard live topic view keeps [default 200].
        ///
        /// Messages a live topic view keeps (the oldest go first).
        #[arg(long, env = "SKUA_DASHBOARD_LIVE_BUFFER")]
        pub dashboard_live_buffer: usize = 200,
        /// Dashboard live topic views open at once on a node [default 8].
        ///
        /// Live topic views open at once on a node (each is one bus subscription of the node).
        #[arg(long, env = "SKUA_DASHBOARD_MAX_LIVE_VIEWS")]
        pub dashboard_max_live_views: usize = 8,
        /// A live topic view nobody polled for this long is closed [default 1m].
        ///
        /// A live topic view nobody polled for this long is closed.
        #[arg(long, env = "SKUA_DASHBOARD_LIVE_IDLE")]
        pub dashboard_live_idle: String = "1m",
        /// How often the dashboard samples the node's counters for its chart [default 5s].
        ///
        /// How often the overview samples the node's counters, and how many samples its chart keeps
        /// (120 at 5s: the last 10 minutes).
        #[arg(long, env = "SKUA_DASHBOARD_SAMPLE_INTERVAL")]
        pub dashboard_sample_interval: String = "5s",
        /// Samples the dashboard's chart keeps [default 120: 10 minutes at 5s].
        #[arg(long, env = "SKUA_DASHBOARD_HISTORY")]
        pub dashboard_history: usize = 120,
        /// Rows a dashboard list page shows at once (durable groups, rooms, actors) [default 100].
        ///
        /// Rows a dashboard list page shows at once (durable groups, rooms, actors; more behind "next").
        #[arg(long, env = "SKUA_DASHBOARD_PAGE_SIZE")]
        pub dashboard_page_size: usize = 100,
        /// Longest search term of a dashboard list page, in characters; longer ones are refused [default 200].
        ///
        /// Longest search term of a dashboard list page, in characters; a longer one is refused (400).
        #[arg(long, env = "SKUA_DASHBOARD_SEARCH_MAX_CHARS")]
        pub dashboard_search_max_chars: usize = 200,
    }
}

/// Caps the control plane enforces; each is a `skua serve` setting ([`ControlSettings`](crate::ControlSettings)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlLimits {
    /// Most apps per project.
    pub max_apps_per_project: u32,
    /// Most rooms per app, unless the app sets its own cap.
    pub max_rooms_per_app: u32,
    /// Most actors per project.
    pub max_actors_per_project: u32,
    /// Most grants per room.
    pub max_grants_per_room: u32,
    /// Most lobbies per project.
    pub max_lobbies_per_project: u32,
    /// Largest page of a List call (and the default page is min(100, this)).
    pub max_page_size: u32,
}

impl Default for ControlLimits {
    /// The declared defaults ([`ControlSettings`]), checked.
    fn default() -> Self {
        declared(ControlSettings::limits)
    }
}

/// The REST API's settings (`rest_*`, declared in [`ControlSettings`](crate::ControlSettings)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestConfig {
    /// Whether `/v1` is served on the client listener.
    pub enabled: bool,
    /// Largest request body in bytes; larger bodies are answered 413.
    pub max_body_bytes: usize,
    /// Requests per second per API key, also the burst; beyond it 429 with `Retry-After`.
    pub rate_limit: u32,
    /// Largest `limit` of a paginated list (apps); larger values are capped.
    pub max_page_limit: u32,
}

impl Default for RestConfig {
    /// The declared defaults ([`ControlSettings`]), checked.
    fn default() -> Self {
        declared(ControlSettings::rest)
    }
}

/// The dashboard's settings (`dashboard_*`, declared in [`ControlSettings`](crate::ControlSettings)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DashboardConfig {
    /// Whether `/admin` is served (only ever with an admin key).
    pub enabled: bool,
    /// How long a sign-in lasts.
    pub session_ttl: Duration,
    /// Most sessions at once; signing in beyond it ends the oldest.
    pub max_sessions: usize,
    /// Messages a live topic view keeps (the oldest go first).
    pub live_buffer: usize,
    /// Live topic views open at once on this node.
    pub max_live_views: usize,
    /// A live view nobody polled for this long is closed.
    pub live_idle: Duration,
    /// How often the overview samples the node's counters.
    pub sample_interval: Duration,
    /// Samples the overview's chart keeps.
    pub history: usize,
    /// Rows a paged list shows at once (durable groups, rooms, actors).
    pub page_size: usize,
    /// Longest search term of a list page, in characters; a longer one is refused (400).
    pub search_max_chars: usize,
}

impl Default for DashboardConfig {
    /// The declared defaults ([`ControlSettings`]), checked.
    fn default() -> Self {
        declared(ControlSettings::dashboard)
    }
}

/// Settings of [`AdminKeyThrottle`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThrottleConfig {
    /// Failures (each within `window` of the previous one) before an address is blocked; 0 turns
    /// the throttle off.
    pub max_failures: u32,
    /// A failure this long after the previous one starts the count again.
    pub window: Duration,
    /// Longest block.
    pub backoff_max: Duration,
}

impl Default for ThrottleConfig {
    /// The declared defaults ([`ControlSettings`]), checked.
    fn default() -> Self {
        declared(ControlSettings::admin_key_throttle)
    }
}

impl ControlSettings {
    /// The caps the control plane enforces, checked.
    ///
    /// # Errors
    /// [`SettingError`] naming the first bad key.
    pub fn limits(&self) -> Result<ControlLimits, SettingError> {
        Ok(ControlLimits {
            max_apps_per_project: positive(setting!(self, max_apps_per_project))?,
            max_rooms_per_app: positive(setting!(self, max_rooms_per_app))?,
            max_actors_per_project: positive(setting!(self, max_actors_per_project))?,
            max_grants_per_room: positive(setting!(self, max_grants_per_room))?,
            max_lobbies_per_project: positive(setting!(self, max_lobbies_per_project))?,
            max_page_size: positive(setting!(self, max_page_size))?,
        })
    }

    /// The REST API's settings, checked.
    ///
    /// # Errors
    /// [`SettingError`] naming the first bad key.
    pub fn rest(&self) -> Result<RestConfig, SettingError> {
        Ok(RestConfig {
            enabled: required(setting!(self, rest_api))?,
            max_body_bytes: positive(setting!(self, rest_max_body_bytes))?,
            rate_limit: positive(setting!(self, rest_rate_limit))?,
            max_page_limit: positive(setting!(self, rest_max_page_limit))?,
        })
    }

    /// The dashboard's settings, checked.
    ///
    /// # Errors
    /// [`SettingError`] naming the first bad key.
    pub fn dashboard(&self) -> Result<DashboardConfig, SettingError> {
        Ok(DashboardConfig {
            enabled: required(setting!(self, dashboard))?,
            session_ttl: nonzero_duration(setting!(self, dashboard_session_ttl))?,
            max_sessions: positive(setting!(self, dashboard_max_sessions))?,
            live_buffer: positive(setting!(self, dashboard_live_buffer))?,
            max_live_views: positive(setting!(self, dashboard_max_live_views))?,
            live_idle: nonzero_duration(setting!(self, dashboard_live_idle))?,
            sample_interval: nonzero_duration(setting!(self, dashboard_sample_interval))?,
            history: positive(setting!(self, dashboard_history))?,
            page_size: positive(setting!(self, dashboard_page_size))?,
            search_max_chars: positive(setting!(self, dashboard_search_max_chars))?,
        })
    }

    /// The back-off of addresses failing the admin-key check, checked (`admin_key_backoff_max`
    /// at least 1 s, the first block).
    ///
    /// # Errors
    /// [`SettingError`] naming the first bad key.
    pub fn admin_key_throttle(&self) -> Result<ThrottleConfig, SettingError> {
        let t = ThrottleConfig {
            max_failures: required(setting!(self, admin_key_max_failures))?,
            window: duration(setting!(self, admin_key_failure_window))?,
            backoff_max: duration(setting!(self, admin_key_backoff_max))?,
        };
        if t.backoff_max < Duration::from_secs(1) {
            return Err(invalid("admin_key_backoff_max", "must be at least 1s"));
        }
        Ok(t)
    }

    /// Longest a gRPC call may take, reading its request body included (above 0).
    ///
    /// # Errors
    /// [`SettingError`] naming `grpc_request_timeout`.
    pub fn grpc_request_timeout(&self) -> Result<Duration, SettingError> {
        nonzero_duration(setting!(self, grpc_request_timeout))
    }

    /// Whether gRPC reflection needs no admin key.
    ///
    /// # Errors
    /// [`SettingError`] when unset (the defaults set it).
    pub fn grpc_reflection_public(&self) -> Result<bool, SettingError> {
        required(setting!(self, grpc_reflection_public))
    }
}

/// The value of a configuration's `Default`: `check` of the declared defaults, which a test
/// (`tests::the_declared_defaults_pass_their_checks`) proves always passes.
pub(crate) fn declared<T>(check: impl FnOnce(&ControlSettings) -> Result<T, SettingError>) -> T {
    check(&ControlSettings::defaults()).unwrap_or_else(|e| unreachable!("the declared defaults: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_declared_defaults_pass_their_checks() {
        let d = ControlSettings::defaults();
        assert_eq!(d.limits().unwrap().max_rooms_per_app, 10_000);
        assert_eq!(d.rest().unwrap().rate_limit, 50);
        assert_eq!(d.dashboard().unwrap().session_ttl, Duration::from_secs(8 * 3600));
        assert_eq!(d.admin_key_throttle().unwrap().backoff_max, Duration::from_secs(300));
        assert_eq!(d.grpc_request_timeout().unwrap(), DEFAULT_REQUEST_TIMEOUT);
    }

    #[test]
    fn a_zero_cap_is_refused_by_name() {
        let s = ControlSettings { rest_rate_limit: Some(0), ..ControlSettings::defaults() };
        assert_eq!(s.rest(), Err(invalid("rest_rate_limit", "must be at least 1")));
        let s = ControlSettings { admin_key_backoff_max: Some("500ms".into()), ..ControlSettings::defaults() };
        assert_eq!(s.admin_key_throttle(), Err(invalid("admin_key_backoff_max", "must be at least 1s")));
    }
}
