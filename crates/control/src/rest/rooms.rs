//! `/v1/apps/{appId}/rooms…`: rooms (`roomId` is the room's slug) and their grants
//! (`RoomActorAccess`), through the service layer's room and grant functions.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::Rest;
use super::auth::Caller;
use super::body::{self, AnnotationsIn, Room, RoomActorAccess};
use super::error::{ApiError, ErrorBody};
use super::reply::{json_response, no_content};
use crate::pb;
use crate::service::annotations::AnnotationsUpdate;
use crate::service::{apps, grants, rooms};

/// A room's `config` in a body (other keys are ignored).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RoomConfigIn {
    /// Must be what the room is: a room is private while a grant names it (a new room is
    /// public), so add a grant rather than set it.
    is_private: Option<bool>,
}

/// The body of `POST …/rooms` and `…/rooms/ensure` (`topics`, `isEnabled` and `config` as in
/// RoomUpdate).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RoomCreate {
    /// Display name (required unless `slug` is given).
    name: Option<String>,
    /// Slug [default: the name lower-cased, other characters as `-`].
    slug: Option<String>,
    /// Only the app's topics (in any order): rooms serve their app's topics.
    topics: Option<Vec<String>>,
    /// Only `true` (Skua rooms cannot be disabled).
    is_enabled: Option<bool>,
    /// Only `isPrivate: false` (a new room is public until its first grant).
    config: Option<RoomConfigIn>,
    /// `description`, `externalId`, `metadata`.
    #[serde(flatten)]
    annotations: AnnotationsIn,
}

/// The body of `PATCH …/rooms/{roomId}`: a key that asks for what the room cannot be is 400.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RoomUpdate {
    name: Option<String>,
    /// Only `true` (Skua rooms cannot be disabled).
    is_enabled: Option<bool>,
    /// Only the app's topics (in any order): rooms serve their app's topics.
    topics: Option<Vec<String>>,
    /// Only what the room is: `isPrivate` true while a grant names it.
    config: Option<RoomConfigIn>,
    /// `description`, `externalId`, `metadata`: only the keys given change, `null` clears.
    #[serde(flatten)]
    annotations: AnnotationsIn,
}

/// Refuses (400, naming the field) what a room body asks that the room cannot be (issue 31):
/// `isEnabled: false`, `topics` other than the app's `app_topics`, and a `config.isPrivate`
/// other than `private` (what the room is, or would be: a new room is public). The same for
/// `POST`, `ensure` and `PATCH`.
fn check_room_keys(
    topics: Option<&[String]>,
    is_enabled: Option<bool>,
    config: Option<&RoomConfigIn>,
    app_topics: &[String],
    private: bool,
) -> Result<(), ApiError> {
    if is_enabled == Some(false) {
        return Err(ApiError::bad_request(
            "isEnabled: Skua rooms cannot be disabled; delete the room or make it private",
        ));
    }
    if let Some(topics) = topics {
        let mut asked: Vec<&str> = topics.iter().map(String::as_str).collect();
        let mut served: Vec<&str> = app_topics.iter().map(String::as_str).collect();
        asked.sort_unstable();
        asked.dedup();
        served.sort_unstable();
        if asked != served {
            return Err(ApiError::bad_request(format!(
                "topics: Skua rooms serve their app's topics ({}); give those or omit the key, and \
                 narrow an actor's topics with a grant's topics",
                app_topics.join(", ")
            )));
        }
    }
    if let Some(want) = config.and_then(|c| c.is_private)
        && want != private
    {
        return Err(ApiError::bad_request(if want {
            "config.isPrivate: a room is private while a grant names it; add one with POST …/rooms/{roomId}/actors"
        } else {
            "config.isPrivate: this room has grants; it becomes public when the last one is revoked"
        }));
    }
    Ok(())
}

/// The topic names of `app` (an id or slug) of the caller's project.
async fn app_topics(rest: &Rest, project: &str, app: &str) -> Result<Vec<String>, ApiError> {
    let a = apps::get(&rest.svc, pb::GetAppRequest { project_id: project.to_owned(), app: app.to_owned() }).await?;
    Ok(a.topics.into_iter().map(|t| t.name).collect())
}

/// The body of `POST …/rooms/{roomId}/actors`: exactly one of `actorTokenId` / `actorType`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RoomActorAccessCreate {
    /// `subscribe`, `publish` or `pubSub` (required).
    permission: Option<String>,
    actor_token_id: Option<String>,
    actor_type: Option<String>,
    /// A subset of the app's topics [default all].
    topics: Option<Vec<String>>,
    /// Only `true`.
    is_active: Option<bool>,
    /// ISO 8601 timestamp (or unix seconds) after which the grant no longer applies.
    #[schema(value_type = Option<String>)]
    expires_at: Option<Value>,
    /// Free-form, at most 64 bytes; kept and returned, never interpreted.
    #[schema(value_type = Option<String>)]
    role: Option<Value>,
    /// A JSON object, at most 16384 bytes as compact JSON; kept and returned, never interpreted.
    #[schema(value_type = Option<Object>)]
    metadata: Option<Value>,
}

/// The Room shape of `r`, with its app's topics.
fn room_json(rest: &Rest, r: &pb::Room) -> Room {
    let snap = rest.svc.snapshot();
    let topics: Vec<String> =
        snap.data.apps.get(&r.app_id).map(|a| a.topics.iter().map(|t| t.name.clone()).collect()).unwrap_or_default();
    body::room(r, &topics)
}

/// A RoomCreate body checked: the room's slug, display name and annotations; 400 for what a
/// room cannot be ([`check_room_keys`]; `ensure` of an existing room checks against it).
async fn new_room(
    rest: &Rest,
    project: &str,
    app: &str,
    b: Result<Bytes, BytesRejection>,
    ensure: bool,
) -> Result<(String, String, AnnotationsUpdate), ApiError> {
    let c: RoomCreate = body::parse(b)?;
    let name = c.name.filter(|n| !n.trim().is_empty());
    let slug = match (c.slug.filter(|s| !s.is_empty()), &name) {
        (Some(s), _) => s,
        (None, Some(n)) => body::slugify(n),
        (None, None) => return Err(ApiError::bad_request("name is required")),
    };
    let annotations = c.annotations.update()?;
    let served = app_topics(rest, project, app).await?;
    let get = pb::GetRoomRequest { project_id: project.to_owned(), app: app.to_owned(), slug: slug.clone() };
    let private = ensure && rooms::get(&rest.svc, get).await.is_ok_and(|r| r.private);
    check_room_keys(c.topics.as_deref(), c.is_enabled, c.config.as_ref(), &served, private)?;
    Ok((slug, name.unwrap_or_default(), annotations))
}

/// List an app's rooms (a bare array, at most max_page_size).
#[utoipa::path(get, path = "/v1/apps/{appId}/rooms", tag = "rooms", params(("appId" = String, Path, description = "App id or slug")),
    responses((status = 200, body = Vec<Room>), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn list(
    State(rest): State<Arc<Rest>>,
    caller: Caller,
    Path(app): Path<String>,
) -> Result<Response, ApiError> {
    // One page of the largest size: the SDKs read a bare array (max_page_size caps it).
    let r = pb::ListRoomsRequest { project_id: caller.project, app, page_size: 0, page_token: String::new() };
    let page_size = rest.svc.limits().max_page_size;
    let l = rooms::list(&rest.svc, pb::ListRoomsRequest { page_size, ..r }).await?;
    let items: Vec<Room> = l.rooms.iter().map(|r| room_json(&rest, r)).collect();
    Ok(json_response(StatusCode::OK, &items))
}

/// Get a room.
#[utoipa::path(get, path = "/v1/apps/{appId}/rooms/{roomId}", tag = "rooms", params(("appId" = String, Path, description = "App id or slug"), ("roomId" = String, Path, description = "Room slug")),
    responses((status = 200, body = Room), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn get(
    State(rest): State<Arc<Rest>>,
    caller: Caller,
    Path((app, slug)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let r = rooms::get(&rest.svc, pb::GetRoomRequest { project_id: caller.project, app, slug }).await?;
    Ok(json_response(StatusCode::OK, &room_json(&rest, &r)))
}

/// Create a dynamic room.
#[utoipa::path(post, path = "/v1/apps/{appId}/rooms", tag = "rooms", params(("appId" = String, Path, description = "App id or slug")), request_body = RoomCreate,
    responses((status = 201, body = Room), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub(crate) async fn create(
    State(rest): State<Arc<Rest>>,
    caller: Caller,
    Path(app): Path<String>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let (slug, name, annotations) = new_room(&rest, &caller.project, &app, b, false).await?;
    let req = pb::CreateRoomRequest { project_id: caller.project.clone(), app, slug, name };
    let r = rooms::create_as(&rest.svc, req, true, &annotations).await?;
    caller.audit("rooms.create", &format!("{}/{}", r.app_id, r.slug));
    Ok(json_response(StatusCode::CREATED, &room_json(&rest, &r)))
}

/// Get the room with this slug, creating it (dynamic) when the app has config.autoProvisionRooms (403 otherwise).
#[utoipa::path(post, path = "/v1/apps/{appId}/rooms/ensure", tag = "rooms", params(("appId" = String, Path, description = "App id or slug")), request_body = RoomCreate,
    responses((status = 200, body = Room), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn ensure(
    State(rest): State<Arc<Rest>>,
    caller: Caller,
    Path(app): Path<String>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let (slug, name, annotations) = new_room(&rest, &caller.project, &app, b, true).await?;
    let req = pb::EnsureRoomRequest { project_id: caller.project.clone(), app, slug, name };
    let e = rooms::ensure_annotated(&rest.svc, req, &annotations).await?;
    let r = e.room.unwrap_or_default();
    if e.created {
        caller.audit("rooms.ensure", &format!("{}/{}", r.app_id, r.slug));
    }
    Ok(json_response(StatusCode::OK, &room_json(&rest, &r)))
}

/// Rename a room.
#[utoipa::path(patch, path = "/v1/apps/{appId}/rooms/{roomId}", tag = "rooms", params(("appId" = String, Path, description = "App id or slug"), ("roomId" = String, Path, description = "Room slug")),
    request_body = RoomUpdate, responses((status = 200, body = Room), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn update(
    State(rest): State<Arc<Rest>>,
    caller: Caller,
    Path((app, slug)): Path<(String, String)>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let u: RoomUpdate = body::parse(b)?;
    let annotations = u.annotations.update()?;
    annotations.check()?;
    let get = pb::GetRoomRequest { project_id: caller.project.clone(), app: app.clone(), slug: slug.clone() };
    let mut r = rooms::get(&rest.svc, get.clone()).await?;
    let served = app_topics(&rest, &caller.project, &app).await?;
    check_room_keys(u.topics.as_deref(), u.is_enabled, u.config.as_ref(), &served, r.private)?;
    if u.name.is_some() {
        let req = pb::UpdateRoomRequest { project_id: caller.project.clone(), app, slug, name: u.name };
        r = rooms::update(&rest.svc, req).await?;
    }
    if !annotations.is_empty() {
        r = rooms::annotate(&rest.svc, &get, &annotations).await?;
    }
    caller.audit("rooms.update", &format!("{}/{}", r.app_id, r.slug));
    Ok(json_response(StatusCode::OK, &room_json(&rest, &r)))
}

/// Delete a dynamic room (403 for static rooms).
#[utoipa::path(delete, path = "/v1/apps/{appId}/rooms/{roomId}", tag = "rooms", params(("appId" = String, Path, description = "App id or slug"), ("roomId" = String, Path, description = "Room slug")),
    responses((status = 204, description = "Deleted"), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn delete(
    State(rest): State<Arc<Rest>>,
    caller: Caller,
    Path((app, slug)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let get = pb::GetRoomRequest { project_id: caller.project.clone(), app: app.clone(), slug: slug.clone() };
    let r = rooms::get(&rest.svc, get).await?;
    if !r.dynamic {
        return Err(ApiError::forbidden(format!(
            "room {slug:?} is static (provisioned by the operator): it cannot be deleted here"
        )));
    }
    rooms::delete(&rest.svc, pb::DeleteRoomRequest { project_id: caller.project.clone(), app, slug }).await?;
    caller.audit("rooms.delete", &format!("{}/{}", r.app_id, r.slug));
    Ok(no_content())
}

/// List a room's grants.
#[utoipa::path(get, path = "/v1/apps/{appId}/rooms/{roomId}/actors", tag = "rooms", params(("appId" = String, Path, description = "App id or slug"), ("roomId" = String, Path, description = "Room slug")),
    responses((status = 200, body = Vec<RoomActorAccess>), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn list_grants(
    State(rest): State<Arc<Rest>>,
    caller: Caller,
    Path((app, room)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let l = grants::list(&rest.svc, pb::ListGrantsRequest { project_id: caller.project, app, room }).await?;
    Ok(json_response(StatusCode::OK, &l.grants.iter().map(body::grant).collect::<Vec<_>>()))
}

/// Grant an actor or an actor type access: the first grant makes the room private.
#[utoipa::path(post, path = "/v1/apps/{appId}/rooms/{roomId}/actors", tag = "rooms", params(("appId" = String, Path, description = "App id or slug"), ("roomId" = String, Path, description = "Room slug")),
    request_body = RoomActorAccessCreate,
    responses((status = 201, body = RoomActorAccess), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn grant(
    State(rest): State<Arc<Rest>>,
    caller: Caller,
    Path((app, room)): Path<(String, String)>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let c: RoomActorAccessCreate = body::parse(b)?;
    if c.is_active == Some(false) {
        return Err(ApiError::bad_request(
            "isActive: Skua grants are active while they exist; omit it or revoke the grant",
        ));
    }
    let expires_at =
        c.expires_at.as_ref().filter(|v| !v.is_null()).map(|v| body::unix_s("expiresAt", v)).transpose()?;
    let role = body::text_key("role", c.role.as_ref())?.flatten();
    let metadata = body::metadata_key("metadata", c.metadata.as_ref())?.flatten();
    let req = pb::CreateGrantRequest {
        project_id: caller.project.clone(),
        app,
        room,
        actor_id: c.actor_token_id.unwrap_or_default(),
        actor_type: c.actor_type.unwrap_or_default(),
        permission: c.permission.unwrap_or_default(),
        topics: c.topics.unwrap_or_default(),
        expires_at: expires_at.unwrap_or(0),
    };
    let g = grants::create_with(&rest.svc, req, role, metadata).await?;
    caller.audit("grants.create", &g.id);
    Ok(json_response(StatusCode::CREATED, &body::grant(&g)))
}

/// Revoke a grant: the last one makes the room public again.
#[utoipa::path(delete, path = "/v1/apps/{appId}/rooms/{roomId}/actors/{roomActorAccessId}", tag = "rooms",
    params(("appId" = String, Path, description = "App id or slug"), ("roomId" = String, Path, description = "Room slug"), ("roomActorAccessId" = String, Path, description = "Grant id")),
    responses((status = 204, description = "Revoked"), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn revoke(
    State(rest): State<Arc<Rest>>,
    caller: Caller,
    Path((app, room, grant_id)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    // The grant must be one of this room of an app of the key's project: else 404, as missing.
    let a = apps::get(&rest.svc, pb::GetAppRequest { project_id: caller.project.clone(), app }).await?;
    let owned = rest.svc.snapshot().data.grants.get(&grant_id).is_some_and(|g| g.app == a.id && g.room == room);
    if !owned {
        return Err(ApiError::not_found(format!("grant {grant_id:?} not found in room {room:?}")));
    }
    grants::delete(&rest.svc, pb::DeleteGrantRequest { grant_id: grant_id.clone() }).await?;
    caller.audit("grants.delete", &grant_id);
    Ok(no_content())
}
