//! `/v1/actors`: the project's actors (`actorTokenId` is the actor's id) and their access
//! tokens, through the service layer's actor functions. Ids of another project answer 404.

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
use super::body::{self, Actor, ActorWithToken, AnnotationsIn, present};
use super::error::{ApiError, ErrorBody};
use super::reply::{json_response, no_content};
use crate::pb;
use crate::service::{actors, scopes};

/// The body of `POST /v1/actors`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ActorCreate {
    /// Display name [default: the id].
    name: Option<String>,
    /// `user`, `device`, `agent`, `orchestrator`, `observer` or `server` (required).
    actor_type: Option<String>,
    /// `description`, `externalId`, `metadata`.
    #[serde(flatten)]
    annotations: AnnotationsIn,
}

/// The body of `PATCH /v1/actors/{actorTokenId}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ActorUpdate {
    name: Option<String>,
    /// `false` closes its connections 4001 `token_revoked`.
    is_active: Option<bool>,
    /// A scope id (or slug) to move the actor into, `null` to take it out of any; its
    /// connections close 4001 `token_revoked` and reconnect under the new addresses.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    access_scope_id: Option<Value>,
    /// `description`, `externalId`, `metadata`: only the keys given change, `null` clears.
    #[serde(flatten)]
    annotations: AnnotationsIn,
}

/// The actor `id` when it belongs to the caller's project; 404 otherwise (as missing).
async fn owned(rest: &Rest, caller: &Caller, id: &str) -> Result<pb::Actor, ApiError> {
    let a = actors::get(&rest.svc, pb::GetActorRequest { actor_id: id.to_owned() }).await?;
    if a.project_id != caller.project {
        return Err(ApiError::not_found(format!("actor {id:?} not found")));
    }
    Ok(a)
}

/// List the project's actors (a bare array, at most max_page_size).
#[utoipa::path(get, path = "/v1/actors", tag = "actors",
    responses((status = 200, body = Vec<Actor>), (status = 401, body = ErrorBody)))]
pub(crate) async fn list(State(rest): State<Arc<Rest>>, caller: Caller) -> Result<Response, ApiError> {
    // One page of the largest size: the SDKs read a bare array (max_page_size caps it).
    let page_size = rest.svc.limits().max_page_size;
    let l = actors::list(
        &rest.svc,
        pb::ListActorsRequest { project_id: caller.project, page_size, page_token: String::new() },
    )
    .await?;
    Ok(json_response(StatusCode::OK, &l.actors.iter().map(body::actor).collect::<Vec<_>>()))
}

/// Get an actor (never its token).
#[utoipa::path(get, path = "/v1/actors/{actorTokenId}", tag = "actors", params(("actorTokenId" = String, Path, description = "Actor id")),
    responses((status = 200, body = Actor), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn get(
    State(rest): State<Arc<Rest>>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(json_response(StatusCode::OK, &body::actor(&owned(&rest, &caller, &id).await?)))
}

/// Create an actor and its access token, returned only here.
#[utoipa::path(post, path = "/v1/actors", tag = "actors", request_body = ActorCreate,
    responses((status = 201, body = ActorWithToken), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)))]
pub(crate) async fn create(
    State(rest): State<Arc<Rest>>,
    caller: Caller,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let c: ActorCreate = body::parse(b)?;
    let annotations = c.annotations.update()?;
    let req = pb::CreateActorRequest {
        project_id: caller.project.clone(),
        id: String::new(),
        actor_type: c.actor_type.unwrap_or_default(),
        name: c.name.unwrap_or_default(),
        rate_limit: 0,
    };
    let r = actors::create_annotated(&rest.svc, req, &annotations).await?;
    let a = r.actor.unwrap_or_default();
    caller.audit("actors.create", &a.id);
    Ok(json_response(StatusCode::CREATED, &ActorWithToken { actor: body::actor(&a), access_token: r.access_token }))
}

/// Rename, deactivate or reactivate an actor, or move it into or out of an access scope.
#[utoipa::path(patch, path = "/v1/actors/{actorTokenId}", tag = "actors", params(("actorTokenId" = String, Path, description = "Actor id")), request_body = ActorUpdate,
    responses((status = 200, body = Actor), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn update(
    State(rest): State<Arc<Rest>>,
    caller: Caller,
    Path(id): Path<String>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let u: ActorUpdate = body::parse(b)?;
    let annotations = u.annotations.update()?;
    annotations.check()?;
    let scope = match &u.access_scope_id {
        None => None,
        Some(Value::Null) => Some(String::new()),
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(_) => return Err(ApiError::bad_request("accessScopeId must be a scope id or null")),
    };
    let mut a = owned(&rest, &caller, &id).await?;
    if let Some(scope) = scope {
        a = scopes::set_actor_scope(&rest.svc, pb::SetActorScopeRequest { actor_id: id.clone(), scope }).await?;
    }
    if let Some(n) = &u.name {
        a = actors::rename(&rest.svc, &id, n).await?;
    }
    if !annotations.is_empty() {
        a = actors::annotate(&rest.svc, &id, &annotations).await?;
    }
    match u.is_active {
        Some(true) => a = actors::activate(&rest.svc, pb::ActorRef { actor_id: id.clone() }).await?,
        Some(false) => a = actors::deactivate(&rest.svc, pb::ActorRef { actor_id: id.clone() }).await?,
        None => {}
    }
    caller.audit("actors.update", &id);
    Ok(json_response(StatusCode::OK, &body::actor(&a)))
}

/// Delete an actor with its tokens and grants.
#[utoipa::path(delete, path = "/v1/actors/{actorTokenId}", tag = "actors", params(("actorTokenId" = String, Path, description = "Actor id")),
    responses((status = 204, description = "Deleted; its connections close 4001 token_not_found"), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn delete(
    State(rest): State<Arc<Rest>>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    owned(&rest, &caller, &id).await?;
    actors::delete(&rest.svc, pb::ActorRef { actor_id: id.clone() }).await?;
    caller.audit("actors.delete", &id);
    Ok(no_content())
}
