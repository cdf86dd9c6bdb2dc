//! The REST API (issue 15): the HTTP/JSON surface the NoLag SDKs' `NoLagApi` clients call
//! (shared/REST-API-NOTES.md), served under `/v1` on the client listener.
//!
//! A façade only: every handler authenticates the project API key ([`auth`]), reads its JSON
//! (or MessagePack) body, calls the same service functions as the gRPC API
//! (`crate::service::*`, where every rule and registry write lives) scoped to the key's project,
//! and shapes the reply. Modules: [`error`] (the `{statusCode, message, error}` body and the
//! gRPC status → HTTP status map), [`body`] (bodies, timestamps, resource shapes), one per
//! resource, [`publish`] (`POST /v1/publish`) and [`openapi`] (the document, built from
//! [`ROUTES`], the same table the router is built from).

mod actors;
mod apps;
pub mod auth;
mod body;
pub mod error;
pub mod openapi;
mod publish;
mod rooms;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;

use crate::service::ControlService;

/// The REST API's settings (`rest_*` in config/default.toml).
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
    fn default() -> Self {
        Self { enabled: true, max_body_bytes: 1_048_576, rate_limit: 50, max_page_limit: 100 }
    }
}

/// The state every handler shares: the control service and the per-key limiter.
pub struct Rest {
    pub(crate) svc: ControlService,
    pub(crate) config: RestConfig,
    pub(crate) limiter: auth::KeyLimiter,
}

impl std::fmt::Debug for Rest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rest").field("config", &self.config).finish_non_exhaustive()
    }
}

/// One route of the API: the router and the OpenAPI document are both built from [`ROUTES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// HTTP method, lower case (`get`, `post`, `patch`, `delete`).
    pub method: &'static str,
    /// Path with `{param}` segments, `/v1` included.
    pub path: &'static str,
    /// What it does (the document's `summary`).
    pub summary: &'static str,
    /// The request body's schema name in the document, if it takes one.
    pub request: Option<&'static str>,
    /// The success reply: status and schema name (`None`: no body).
    pub reply: (u16, Option<&'static str>),
}

/// Declares every route once: the [`ROUTES`] table and the router's wiring come from this list.
macro_rules! api {
    ($($method:ident $path:literal => $handler:path, $summary:literal, $req:expr, $status:literal $reply:expr;)+) => {
        /// Every route of the REST API.
        pub const ROUTES: &[Route] = &[
            $(Route { method: stringify!($method), path: $path, summary: $summary, request: $req, reply: ($status, $reply) },)+
        ];

        fn wire(r: Router<Arc<Rest>>) -> Router<Arc<Rest>> {
            r$(.route($path, axum::routing::$method($handler)))+
        }
    };
}

api! {
    get "/v1/apps" => apps::list, "List the project's apps (paginated)", None, 200 Some("AppPage");
    post "/v1/apps" => apps::create, "Create an app", Some("AppCreate"), 201 Some("App");
    get "/v1/apps/{appId}" => apps::get, "Get an app", None, 200 Some("App");
    patch "/v1/apps/{appId}" => apps::update, "Update an app", Some("AppUpdate"), 200 Some("App");
    delete "/v1/apps/{appId}" => apps::delete, "Delete an app with its rooms and grants", None, 200 Some("Deleted");
    post "/v1/apps/{appId}/reset-to-blueprint" => apps::reset_to_blueprint, "Reset an app to its blueprint (Skua apps have none: the app unchanged)", None, 200 Some("App");
    get "/v1/apps/{appId}/rooms" => rooms::list, "List an app's rooms", None, 200 Some("RoomList");
    post "/v1/apps/{appId}/rooms" => rooms::create, "Create a (dynamic) room", Some("RoomCreate"), 201 Some("Room");
    post "/v1/apps/{appId}/rooms/ensure" => rooms::ensure, "Get or create a room by slug (403 unless config.autoProvisionRooms)", Some("RoomCreate"), 200 Some("Room");
    get "/v1/apps/{appId}/rooms/{roomId}" => rooms::get, "Get a room", None, 200 Some("Room");
    patch "/v1/apps/{appId}/rooms/{roomId}" => rooms::update, "Update a room", Some("RoomUpdate"), 200 Some("Room");
    delete "/v1/apps/{appId}/rooms/{roomId}" => rooms::delete, "Delete a dynamic room (403 for static rooms)", None, 204 None;
    get "/v1/apps/{appId}/rooms/{roomId}/actors" => rooms::list_grants, "List a room's grants", None, 200 Some("RoomActorAccessList");
    post "/v1/apps/{appId}/rooms/{roomId}/actors" => rooms::grant, "Grant an actor or an actor type access (the first grant makes the room private)", Some("RoomActorAccessCreate"), 201 Some("RoomActorAccess");
    delete "/v1/apps/{appId}/rooms/{roomId}/actors/{roomActorAccessId}" => rooms::revoke, "Revoke a grant (the last one makes the room public)", None, 204 None;
    get "/v1/actors" => actors::list, "List the project's actors", None, 200 Some("ActorList");
    post "/v1/actors" => actors::create, "Create an actor and its access token (returned only here)", Some("ActorCreate"), 201 Some("ActorWithToken");
    get "/v1/actors/{actorTokenId}" => actors::get, "Get an actor", None, 200 Some("Actor");
    patch "/v1/actors/{actorTokenId}" => actors::update, "Update an actor (name, isActive)", Some("ActorUpdate"), 200 Some("Actor");
    delete "/v1/actors/{actorTokenId}" => actors::delete, "Delete an actor (its connections close 4001)", None, 204 None;
    post "/v1/publish" => publish::publish, "Publish a message to app/room/topic (JSON, or MessagePack with Content-Type application/msgpack)", Some("Publish"), 200 Some("Published");
}

/// `/v1/openapi.json`: the document (no key needed).
async fn openapi_json() -> axum::response::Response {
    body::json_response(StatusCode::OK, openapi::document())
}

/// The REST router over `svc`: every route under `/v1`, bounded bodies, JSON errors for
/// unknown routes and methods.
pub fn router(svc: ControlService, config: RestConfig) -> Router {
    let state =
        Arc::new(Rest { svc, config, limiter: auth::KeyLimiter::new(config.rate_limit, Duration::from_secs(1)) });
    wire(Router::new())
        .route("/v1/openapi.json", axum::routing::get(openapi_json))
        .fallback(|| async { error::ApiError::new(StatusCode::NOT_FOUND, "no such route") })
        .method_not_allowed_fallback(|| async {
            error::ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method not allowed on this route")
        })
        .layer(DefaultBodyLimit::max(config.max_body_bytes))
        .with_state(state)
}
