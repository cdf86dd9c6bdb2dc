//! The admin dashboard (issue 20): server-rendered HTML under `/admin` on the client listener,
//! served only when the node has an admin key.
//!
//! Every page calls the same service functions as the gRPC and REST APIs
//! (`crate::service::*`), so validation and error messages are identical. Sign-in is with the
//! admin key (constant-time digest comparison, the gRPC listener's per-address back-off); the
//! session is a random token in an `HttpOnly`, `SameSite=Strict` cookie (`Secure` when the
//! listener has TLS), kept in memory (bounded, expiring). Every state change is a POST carrying
//! the session's CSRF token, refused (403) when it comes from another site (`Origin`,
//! `Sec-Fetch-Site`). A page without a session redirects to the sign-in form; a form post
//! without one is refused 403.
//!
//! Modules: [`html`] (escaping, layout, embedded CSS and JS), [`common`] (what the pages share:
//! notices, refusals, parameters, the error page, the chooser, the current project and app),
//! [`targets`] (the webhook fields of the app and topic forms), [`search`] (the list pages'
//! search box and matching); then one module per page or resource: [`overview`] (with the
//! presence of a room), [`projects`], [`apps`], [`topics`], [`rooms`], [`actors`],
//! [`connections`] (a project's open connections with their protocol), [`grants`],
//! [`lobbies`], [`scopes`], [`api_keys`], [`webhooks`] (dead letters, recent deliveries),
//! [`live`] (the live topic view and test publish), [`durable`] (durable groups' backlogs).

mod actors;
mod api_keys;
mod apps;
mod common;
mod connections;
mod durable;
mod grants;
mod html;
mod live;
mod lobbies;
mod overview;
mod projects;
mod rooms;
mod scopes;
mod search;
mod targets;
mod topics;
mod webhooks;

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{ConnectInfo, DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use crate::grpc::throttle::AdminKeyThrottle;
use crate::service::ControlService;

/// The cookie holding the session token.
const COOKIE: &str = "skua_admin";
/// Largest form body accepted (a test publish's data included).
const MAX_FORM_BYTES: usize = 1_048_576;

pub use crate::settings::DashboardConfig;

/// One signed-in browser.
#[derive(Debug, Clone)]
struct Session {
    csrf: String,
    expires: Instant,
}

/// One sample of the node's counters, with the rates since the previous one.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub(crate) struct Sample {
    /// Unix ms.
    t: u64,
    connections: u64,
    in_per_s: f64,
    out_per_s: f64,
    #[serde(skip)]
    messages_in: u64,
    #[serde(skip)]
    messages_out: u64,
}

/// The dashboard of one node: its control service, sessions, counters' history, live views.
pub struct Dashboard {
    svc: ControlService,
    config: DashboardConfig,
    key_digest: [u8; 32],
    throttle: Arc<AdminKeyThrottle>,
    secure: bool,
    started: Instant,
    sessions: Mutex<HashMap<String, Session>>,
    history: Mutex<VecDeque<Sample>>,
    live: live::Views,
}

impl std::fmt::Debug for Dashboard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dashboard").field("config", &self.config).field("secure", &self.secure).finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A random token: two v4 UUIDs (244 random bits from the OS generator), hex.
fn random_token() -> String {
    format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple())
}

impl Dashboard {
    /// A dashboard over `svc` accepting `admin_key`; `secure` marks the cookie `Secure` (the
    /// listener has TLS); failed sign-ins back off per address in `throttle` (the table the
    /// gRPC listener's key check shares, so an address gets one budget of tries: issue 33).
    pub fn new(
        svc: ControlService,
        admin_key: &str,
        config: DashboardConfig,
        throttle: Arc<AdminKeyThrottle>,
        secure: bool,
    ) -> Arc<Self> {
        Arc::new(Self {
            svc,
            config,
            key_digest: Sha256::digest(admin_key.as_bytes()).into(),
            throttle,
            secure,
            started: Instant::now(),
            sessions: Mutex::new(HashMap::new()),
            history: Mutex::new(VecDeque::new()),
            live: live::Views::default(),
        })
    }

    /// Samples the node's counters every `sample_interval` into the bounded history, and
    /// closes idle live views, until `stop` is cancelled.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let mut tick = tokio::time::interval(self.config.sample_interval.max(Duration::from_millis(100)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => {
                    self.live.close_idle(Duration::ZERO);
                    return;
                }
                _ = tick.tick() => {}
            }
            self.sample();
            self.live.close_idle(self.config.live_idle);
        }
    }

    /// Adds one sample to the history.
    fn sample(&self) {
        let s = self.svc.sync.node().stats();
        let now = crate::sync::now_ms();
        let mut h = lock(&self.history);
        let (in_per_s, out_per_s) = match h.back() {
            Some(prev) if now > prev.t => {
                #[allow(clippy::cast_precision_loss)]
                let secs = (now - prev.t) as f64 / 1000.0;
                #[allow(clippy::cast_precision_loss)]
                let rate = |a: u64, b: u64| a.saturating_sub(b) as f64 / secs;
                (rate(s.messages_in, prev.messages_in), rate(s.messages_out, prev.messages_out))
            }
            _ => (0.0, 0.0),
        };
        h.push_back(Sample {
            t: now,
            connections: s.connections,
            in_per_s,
            out_per_s,
            messages_in: s.messages_in,
            messages_out: s.messages_out,
        });
        while h.len() > self.config.history.max(2) {
            h.pop_front();
        }
    }

    /// The history, oldest first.
    pub(crate) fn samples(&self) -> Vec<Sample> {
        lock(&self.history).iter().copied().collect()
    }

    /// Whether `given` is the admin key (digests compared in full, no early exit).
    fn key_matches(&self, given: &str) -> bool {
        let d: [u8; 32] = Sha256::digest(given.trim().as_bytes()).into();
        d.iter().zip(self.key_digest.iter()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }

    /// Starts a session; returns its token. Expired ones go first, then the oldest beyond
    /// `max_sessions`.
    fn open_session(&self) -> String {
        let now = Instant::now();
        let mut sessions = lock(&self.sessions);
        sessions.retain(|_, s| s.expires > now);
        while sessions.len() >= self.config.max_sessions.max(1) {
            let Some(oldest) = sessions.iter().min_by_key(|(_, s)| s.expires).map(|(k, _)| k.clone()) else { break };
            sessions.remove(&oldest);
        }
        let token = random_token();
        sessions.insert(token.clone(), Session { csrf: random_token(), expires: now + self.config.session_ttl });
        token
    }

    /// The session of the request's cookie, if valid: `(token, csrf)`.
    fn session(&self, headers: &HeaderMap) -> Option<(String, String)> {
        let token = cookie(headers, COOKIE)?;
        let mut sessions = lock(&self.sessions);
        match sessions.get(&token) {
            Some(s) if s.expires > Instant::now() => Some((token, s.csrf.clone())),
            Some(_) => {
                sessions.remove(&token);
                None
            }
            None => None,
        }
    }

    fn cookie_attrs(&self) -> &'static str {
        cookie_attrs(self.secure)
    }
}

/// The session cookie's attributes: `Secure` when the listener has TLS.
fn cookie_attrs(secure: bool) -> &'static str {
    if secure { "; Path=/admin; HttpOnly; SameSite=Strict; Secure" } else { "; Path=/admin; HttpOnly; SameSite=Strict" }
}

/// The value of cookie `name`.
fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(';')).find_map(|kv| {
        let (k, v) = kv.trim().split_once('=')?;
        (k == name && !v.is_empty()).then(|| v.to_owned())
    })
}

/// Whether the request comes from another site: `Sec-Fetch-Site` other than `same-origin`
/// or `none`, or an `Origin` whose host is not the request's `Host`. Requests without either
/// header (not from a browser) pass: they still need the session and its CSRF token.
fn cross_site(headers: &HeaderMap) -> bool {
    if let Some(site) = headers.get("sec-fetch-site")
        && !matches!(site.as_bytes(), b"same-origin" | b"none")
    {
        return true;
    }
    let Some(origin) = headers.get(header::ORIGIN) else { return false };
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or_default();
    let Some(o) = origin.to_str().ok().and_then(|o| url::Url::parse(o).ok()) else { return true };
    let authority = match (o.host_str(), o.port()) {
        (Some(h), Some(p)) => format!("{h}:{p}"),
        (Some(h), None) => h.to_owned(),
        _ => return true,
    };
    !authority.eq_ignore_ascii_case(host)
}

/// A parsed `application/x-www-form-urlencoded` body.
#[derive(Debug, Default)]
pub(crate) struct Form(HashMap<String, String>);

impl Form {
    fn parse(body: &[u8]) -> Self {
        Self(url::form_urlencoded::parse(body).into_owned().collect())
    }

    /// The field's value, trimmed; empty when absent.
    pub(crate) fn get(&self, k: &str) -> &str {
        self.0.get(k).map_or("", |v| v.trim())
    }

    /// Whether the field was sent (even empty).
    pub(crate) fn has(&self, k: &str) -> bool {
        self.0.contains_key(k)
    }

    /// The field's value as it was sent (data of a test publish).
    pub(crate) fn raw(&self, k: &str) -> &str {
        self.0.get(k).map_or("", String::as_str)
    }
}

/// A request that passed the checks of its kind: the session's CSRF token, and the form of a
/// POST.
pub(crate) struct Authed {
    pub(crate) csrf: String,
    pub(crate) form: Form,
    pub(crate) query: Form,
}

/// A redirect (303 See Other) to `to`.
pub(crate) fn redirect(to: &str) -> Response {
    let mut r = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(to) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r
}

fn forbidden(why: &'static str) -> Response {
    (StatusCode::FORBIDDEN, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], why).into_response()
}

/// Checks a GET: the session (`None`: redirect to the sign-in form).
fn check_get(d: &Dashboard, req: &Request) -> Option<Authed> {
    let query = Form::parse(req.uri().query().unwrap_or_default().as_bytes());
    d.session(req.headers()).map(|(_, csrf)| Authed { csrf, form: Form::default(), query })
}

/// Why a POST was refused: its status and message.
type Refusal = (StatusCode, &'static str);

fn refusal((status, why): Refusal) -> Response {
    if status == StatusCode::FORBIDDEN { forbidden(why) } else { (status, why).into_response() }
}

/// Checks a POST: same site, the session, its CSRF token; 403 otherwise.
async fn check_post(d: &Dashboard, req: Request) -> Result<(Authed, String), Refusal> {
    if cross_site(req.headers()) {
        return Err((StatusCode::FORBIDDEN, "cross-site request refused"));
    }
    let Some((token, csrf)) = d.session(req.headers()) else {
        return Err((StatusCode::FORBIDDEN, "sign in first: no valid session"));
    };
    let query = Form::parse(req.uri().query().unwrap_or_default().as_bytes());
    let body = axum::body::to_bytes(req.into_body(), MAX_FORM_BYTES)
        .await
        .map_err(|_| (StatusCode::PAYLOAD_TOO_LARGE, "form too large"))?;
    let form = Form::parse(&body);
    let sent = form.get("csrf").as_bytes();
    let same = sent.len() == csrf.len() && sent.iter().zip(csrf.as_bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0;
    if !same {
        return Err((StatusCode::FORBIDDEN, "invalid or missing CSRF token; reload the page"));
    }
    Ok((Authed { csrf, form, query }, token))
}

/// `GET /admin/login`.
async fn login_form(State(d): State<Arc<Dashboard>>, headers: HeaderMap) -> Response {
    if d.session(&headers).is_some() {
        return redirect("/admin");
    }
    html::login(None, StatusCode::OK)
}

/// `POST /admin/login`: the admin key, checked with the gRPC listener's back-off.
async fn login(State(d): State<Arc<Dashboard>>, req: Request) -> Response {
    if cross_site(req.headers()) {
        return forbidden("cross-site request refused");
    }
    let ip: Option<IpAddr> = req.extensions().get::<ConnectInfo<SocketAddr>>().map(|ConnectInfo(a)| a.ip());
    let Ok(body) = axum::body::to_bytes(req.into_body(), MAX_FORM_BYTES).await else {
        return (StatusCode::PAYLOAD_TOO_LARGE, "form too large").into_response();
    };
    let form = Form::parse(&body);
    let now = Instant::now();
    if let Some(ip) = ip
        && let Err(wait) = d.throttle.check(ip, now)
    {
        d.throttle.failed(ip, now);
        let secs = wait.as_secs().max(1);
        let mut r =
            html::login(Some(&format!("Too many failed sign-ins; retry in {secs}s.")), StatusCode::TOO_MANY_REQUESTS);
        r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        return r;
    }
    if !d.key_matches(form.raw("admin_key")) {
        if let Some(ip) = ip
            && let Some(block) = d.throttle.failed(ip, now)
        {
            tracing::warn!(%ip, block_s = block.as_secs(), "Repeated failed dashboard sign-ins; address blocked.");
        }
        return html::login(Some("Invalid admin key."), StatusCode::UNAUTHORIZED);
    }
    if let Some(ip) = ip {
        d.throttle.succeeded(ip);
    }
    let token = d.open_session();
    let mut r = redirect("/admin");
    if let Ok(v) = HeaderValue::from_str(&format!("{COOKIE}={token}{}", d.cookie_attrs())) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

/// `POST /admin/logout`.
async fn logout(State(d): State<Arc<Dashboard>>, req: Request) -> Response {
    let (_, token) = match check_post(&d, req).await {
        Ok(a) => a,
        Err(r) => return refusal(r),
    };
    lock(&d.sessions).remove(&token);
    let mut r = redirect("/admin/login");
    if let Ok(v) = HeaderValue::from_str(&format!("{COOKIE}=gone{}; Max-Age=0", d.cookie_attrs())) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

/// A GET page handler: runs `f` with the checked request, or redirects to sign-in.
macro_rules! page {
    ($name:ident => $f:path) => {
        async fn $name(State(d): State<Arc<Dashboard>>, req: Request) -> Response {
            match check_get(&d, &req) {
                Some(a) => $f(&d, a).await,
                None => redirect("/admin/login"),
            }
        }
    };
}

/// A form handler: runs `f` with the checked request, or refuses it 403.
macro_rules! action {
    ($name:ident => $f:path) => {
        async fn $name(State(d): State<Arc<Dashboard>>, req: Request) -> Response {
            match check_post(&d, req).await {
                Ok((a, _)) => $f(&d, a).await,
                Err(r) => refusal(r),
            }
        }
    };
}

page!(overview => overview::overview);
page!(stats => overview::stats_json);
page!(projects => projects::projects);
page!(apps => apps::apps);
page!(rooms => rooms::rooms);
page!(edit_app => apps::edit_app);
page!(edit_project => projects::edit_project);
page!(edit_actor => actors::edit_actor);
page!(edit_scope => scopes::edit_scope);
page!(edit_room => rooms::edit_room);
page!(edit_topic => topics::edit_topic);
page!(lobbies => lobbies::lobbies);
page!(edit_lobby => lobbies::edit_lobby);
page!(scopes => scopes::scopes);
page!(actors => actors::actors);
page!(grants => grants::grants);
page!(webhooks => webhooks::webhooks);
page!(presence => overview::presence);
page!(connections => connections::connections);
page!(api_keys => api_keys::api_keys);
page!(durable_page => durable::page);
page!(live_page => live::page);
page!(live_poll => live::poll);
action!(create_project => projects::create_project);
action!(delete_project => projects::delete_project);
action!(create_app => apps::create_app);
action!(delete_app => apps::delete_app);
action!(update_app => apps::update_app);
action!(update_project => projects::update_project);
action!(update_actor => actors::update_actor);
action!(rotate_actor_token => actors::rotate_actor_token);
action!(update_scope => scopes::update_scope);
action!(update_room => rooms::update_room);
action!(update_topic => topics::update_topic);
action!(create_lobby => lobbies::create_lobby);
action!(delete_lobby => lobbies::delete_lobby);
action!(create_scope => scopes::create_scope);
action!(update_lobby => lobbies::update_lobby);
action!(set_scope_state => scopes::set_scope_state);
action!(delete_scope => scopes::delete_scope);
action!(create_room => rooms::create_room);
action!(delete_room => rooms::delete_room);
action!(create_actor => actors::create_actor);
action!(delete_actor => actors::delete_actor);
action!(create_grant => grants::create_grant);
action!(delete_grant => grants::delete_grant);
action!(retry_webhooks => webhooks::retry_webhooks);
action!(create_api_key => api_keys::create_api_key);
action!(delete_api_key => api_keys::delete_api_key);
action!(live_watch => live::watch);
action!(live_publish => live::publish);

/// The dashboard's routes, all under `/admin`.
pub fn router(d: Arc<Dashboard>) -> Router {
    Router::new()
        .route("/admin", get(overview))
        .route("/admin/", get(|| async { redirect("/admin") }))
        .route("/admin/login", get(login_form).post(login))
        .route("/admin/logout", post(logout))
        .route("/admin/stats", get(stats))
        .route("/admin/projects", get(projects).post(create_project))
        .route("/admin/projects/delete", post(delete_project))
        .route("/admin/projects/edit", get(edit_project).post(update_project))
        .route("/admin/apps", get(apps).post(create_app))
        .route("/admin/apps/delete", post(delete_app))
        .route("/admin/apps/edit", get(edit_app).post(update_app))
        .route("/admin/apps/topic", get(edit_topic).post(update_topic))
        .route("/admin/rooms", get(rooms).post(create_room))
        .route("/admin/rooms/delete", post(delete_room))
        .route("/admin/rooms/edit", get(edit_room).post(update_room))
        .route("/admin/actors", get(actors).post(create_actor))
        .route("/admin/actors/delete", post(delete_actor))
        .route("/admin/actors/edit", get(edit_actor).post(update_actor))
        .route("/admin/actors/rotate", post(rotate_actor_token))
        .route("/admin/grants", get(grants).post(create_grant))
        .route("/admin/grants/delete", post(delete_grant))
        .route("/admin/presence", get(presence))
        .route("/admin/connections", get(connections))
        .route("/admin/lobbies", get(lobbies).post(create_lobby))
        .route("/admin/lobbies/delete", post(delete_lobby))
        .route("/admin/lobbies/edit", get(edit_lobby).post(update_lobby))
        .route("/admin/scopes", get(scopes).post(create_scope))
        .route("/admin/scopes/delete", post(delete_scope))
        .route("/admin/scopes/edit", get(edit_scope).post(update_scope))
        .route("/admin/scopes/state", post(set_scope_state))
        .route("/admin/api-keys", get(api_keys).post(create_api_key))
        .route("/admin/api-keys/delete", post(delete_api_key))
        .route("/admin/webhooks", get(webhooks))
        .route("/admin/webhooks/retry", post(retry_webhooks))
        .route("/admin/durable", get(durable_page))
        .route("/admin/live", get(live_page).post(live_watch))
        .route("/admin/live/poll", get(live_poll))
        .route("/admin/live/publish", post(live_publish))
        .route("/admin/assets/app.css", get(|| async { html::asset("text/css; charset=utf-8", html::CSS) }))
        .route("/admin/assets/app.js", get(|| async { html::asset("text/javascript; charset=utf-8", html::JS) }))
        .fallback(|| async { (StatusCode::NOT_FOUND, "no such page").into_response() })
        .layer(DefaultBodyLimit::max(MAX_FORM_BYTES))
        .layer(axum::middleware::map_response_with_state(d.secure, security_headers))
        .with_state(d)
}

/// Headers on every dashboard answer (issue 33, item 11): no MIME sniffing, no referrer beyond
/// the dashboard's own origin (`same-origin` keeps the `Origin` header the CSRF check reads),
/// and HSTS when the listener has TLS (`secure`).
async fn security_headers(State(secure): State<bool>, mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    if secure {
        h.insert(header::STRICT_TRANSPORT_SECURITY, HeaderValue::from_static("max-age=31536000"));
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn cross_site_requests_are_recognised() {
        let host = ("host", "127.0.0.1:8080");
        assert!(!cross_site(&headers(&[host])), "no browser headers: not cross-site");
        assert!(!cross_site(&headers(&[host, ("origin", "http://127.0.0.1:8080")])));
        assert!(!cross_site(&headers(&[host, ("sec-fetch-site", "same-origin")])));
        assert!(!cross_site(&headers(&[host, ("sec-fetch-site", "none")])));
        assert!(cross_site(&headers(&[host, ("origin", "http://evil.example")])));
        assert!(cross_site(&headers(&[host, ("origin", "http://127.0.0.1:9999")])), "another port");
        assert!(cross_site(&headers(&[host, ("origin", "null")])));
        assert!(cross_site(&headers(&[host, ("sec-fetch-site", "same-site")])));
        assert!(cross_site(&headers(&[host, ("sec-fetch-site", "cross-site")])));
        let tls = ("host", "admin.example.com");
        assert!(!cross_site(&headers(&[tls, ("origin", "https://admin.example.com")])), "default port");
    }

    #[test]
    fn the_session_cookie_is_read_and_secure_with_tls() {
        let h = headers(&[("cookie", "a=1; skua_admin=abc; b=2")]);
        assert_eq!(cookie(&h, COOKIE).as_deref(), Some("abc"));
        assert_eq!(cookie(&headers(&[("cookie", "skua_admin=")]), COOKIE), None);
        assert!(cookie_attrs(true).ends_with("; Secure"));
        assert!(!cookie_attrs(false).contains("Secure"));
        for secure in [true, false] {
            assert!(cookie_attrs(secure).contains("HttpOnly; SameSite=Strict"));
        }
    }
}
