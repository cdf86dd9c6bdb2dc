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

use super::Rest;
use super::auth::Caller;
use super::body::{self, json_response, no_content};
use super::error::ApiError;
use crate::pb;
use crate::service::actors;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ActorCreate {
    name: Option<String>,
    actor_type: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ActorUpdate {
    name: Option<String>,
    is_active: Option<bool>,
    /// Absent: unchanged; `null`: unscoped; a string: that scope.
    #[serde(default)]
    access_scope_id: Option<Value>,
}

/// The actor `id` when it belongs to the caller's project; 404 otherwise (as missing).
async fn owned(rest: &Rest, caller: &Caller, id: &str) -> Result<pb::Actor, ApiError> {
    let a = actors::get(&rest.svc, pb::GetActorRequest { actor_id: id.to_owned() }).await?;
    if a.project_id != caller.project {
        return Err(ApiError::not_found(format!("actor {id:?} not found")));
    }
    Ok(a)
}

pub(crate) async fn list(State(rest): State<Arc<Rest>>, caller: Caller) -> Result<Response, ApiError> {
    // One page of the largest size: the SDKs read a bare array (max_page_size caps it).
    let page_size = rest.svc.limits().max_page_size;
    let l = actors::list(
        &rest.svc,
        pb::ListActorsRequest { project_id: caller.project, page_size, page_token: String::new() },
    )
    .await?;
    Ok(json_response(StatusCode::OK, Value::Array(l.actors.iter().map(body::actor).collect())))
}

pub(crate) async fn get(
    State(rest): State<Arc<Rest>>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    Ok(json_response(StatusCode::OK, body::actor(&owned(&rest, &caller, &id).await?)))
}

pub(crate) async fn create(
    State(rest): State<Arc<Rest>>,
    caller: Caller,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let c: ActorCreate = body::parse(b)?;
    let req = pb::CreateActorRequest {
        project_id: caller.project.clone(),
        id: String::new(),
        actor_type: c.actor_type.unwrap_or_default(),
        name: c.name.unwrap_or_default(),
        rate_limit: 0,
    };
    let r = actors::create(&rest.svc, req).await?;
    let a = r.actor.unwrap_or_default();
    caller.audit("actors.create", &a.id);
    let mut v = body::actor(&a);
    v["accessToken"] = Value::String(r.access_token);
    Ok(json_response(StatusCode::CREATED, v))
}

pub(crate) async fn update(
    State(rest): State<Arc<Rest>>,
    caller: Caller,
    Path(id): Path<String>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let u: ActorUpdate = body::parse(b)?;
    if u.access_scope_id.as_ref().is_some_and(|v| !v.is_null()) {
        return Err(ApiError::bad_request("accessScopeId: access scopes are not supported by this Skua version"));
    }
    let mut a = owned(&rest, &caller, &id).await?;
    if let Some(n) = &u.name {
        a = actors::rename(&rest.svc, &id, n).await?;
    }
    match u.is_active {
        Some(true) => a = actors::activate(&rest.svc, pb::ActorRef { actor_id: id.clone() }).await?,
        Some(false) => a = actors::deactivate(&rest.svc, pb::ActorRef { actor_id: id.clone() }).await?,
        None => {}
    }
    caller.audit("actors.update", &id);
    Ok(json_response(StatusCode::OK, body::actor(&a)))
}

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
