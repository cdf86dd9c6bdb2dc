//! `/v1/scopes`: access scopes of the project (`accessScopeId` is the scope's id), through the
//! service layer's scope functions. Membership changes through `PATCH /v1/actors/{id}`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::Rest;
use super::apps::{ListQuery, Listed, Pagination, filter_sort, paginated};
use super::auth::Caller;
use super::body::{self, Actor};
use super::error::{ApiError, ErrorBody};
use super::reply::{json_response, no_content};
use crate::pb;
use crate::service::{actors, scopes};

/// An access scope.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Scope {
    access_scope_id: String,
    project_id: String,
    /// Injected after the app segment of its actors' addresses.
    slug: String,
    name: String,
    description: Option<String>,
    #[schema(value_type = Option<Object>)]
    metadata: Option<Value>,
    /// `false` closes its actors' connections 4001 `scope_inactive`.
    is_active: bool,
    created_at: Option<String>,
    updated_at: Option<String>,
}

impl Listed for Scope {
    fn name(&self) -> &str {
        &self.name
    }
    fn slug(&self) -> &str {
        &self.slug
    }
}

/// One page of scopes, in both forms the SDKs read.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ScopePage {
    data: Vec<Scope>,
    pagination: Pagination,
    total: usize,
    page: usize,
    limit: usize,
    total_pages: usize,
}

/// The body of `POST /v1/scopes`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ScopeCreate {
    /// Display name (required).
    name: Option<String>,
    /// Slug [default: the name lower-cased, other characters as `-`].
    slug: Option<String>,
}

/// The body of `PATCH /v1/scopes/{accessScopeId}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ScopeUpdate {
    name: Option<String>,
    /// `false` closes the scope's actors' connections 4001 `scope_inactive`.
    is_active: Option<bool>,
}

fn scope_json(s: &pb::Scope) -> Scope {
    let created = body::iso_ms(s.created_at_ms).as_str().map(str::to_owned);
    Scope {
        access_scope_id: s.id.clone(),
        project_id: s.project_id.clone(),
        slug: s.slug.clone(),
        name: s.name.clone(),
        description: None,
        metadata: None,
        is_active: s.active,
        created_at: created.clone(),
        updated_at: created,
    }
}

fn by(caller: &Caller, scope: String) -> pb::ScopeRef {
    pb::ScopeRef { project_id: caller.project.clone(), scope }
}

/// List the project's access scopes (paginated).
#[utoipa::path(get, path = "/v1/scopes", tag = "scopes", params(ListQuery), responses(
    (status = 200, body = ScopePage), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
pub(crate) async fn list(
    State(rest): State<Arc<Rest>>,
    caller: Caller,
    q: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = q.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let l = scopes::list(&rest.svc, pb::ListScopesRequest { project_id: caller.project }).await?;
    let items = filter_sort(l.scopes.iter().map(scope_json).collect(), &q)?;
    let (data, pagination, limit) = paginated(items, &q, rest.config.max_page_limit);
    let (total, page, total_pages) = (pagination.total, pagination.page, pagination.page_count);
    Ok(json_response(StatusCode::OK, &ScopePage { data, pagination, total, page, limit, total_pages }))
}

/// Get an access scope.
#[utoipa::path(get, path = "/v1/scopes/{accessScopeId}", tag = "scopes",
    params(("accessScopeId" = String, Path, description = "Scope id or slug")),
    responses((status = 200, body = Scope), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn get(
    State(rest): State<Arc<Rest>>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let s = scopes::get(&rest.svc, by(&caller, id)).await?;
    Ok(json_response(StatusCode::OK, &scope_json(&s)))
}

/// Create an access scope.
#[utoipa::path(post, path = "/v1/scopes", tag = "scopes", request_body = ScopeCreate, responses(
    (status = 201, body = Scope), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
    (status = 409, body = ErrorBody)))]
pub(crate) async fn create(
    State(rest): State<Arc<Rest>>,
    caller: Caller,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let c: ScopeCreate = body::parse(b)?;
    let name = c.name.filter(|n| !n.trim().is_empty()).ok_or_else(|| ApiError::bad_request("name is required"))?;
    let slug = c.slug.unwrap_or_else(|| body::slugify(&name));
    let s =
        scopes::create(&rest.svc, pb::CreateScopeRequest { project_id: caller.project.clone(), slug, name }).await?;
    caller.audit("scopes.create", &s.id);
    Ok(json_response(StatusCode::CREATED, &scope_json(&s)))
}

/// Rename, deactivate or reactivate an access scope.
#[utoipa::path(patch, path = "/v1/scopes/{accessScopeId}", tag = "scopes", request_body = ScopeUpdate,
    params(("accessScopeId" = String, Path, description = "Scope id or slug")),
    responses((status = 200, body = Scope), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
    (status = 404, body = ErrorBody)))]
pub(crate) async fn update(
    State(rest): State<Arc<Rest>>,
    caller: Caller,
    Path(id): Path<String>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let u: ScopeUpdate = body::parse(b)?;
    let r = pb::UpdateScopeRequest { project_id: caller.project.clone(), scope: id, name: u.name, active: u.is_active };
    let s = scopes::update(&rest.svc, r).await?;
    caller.audit("scopes.update", &s.id);
    Ok(json_response(StatusCode::OK, &scope_json(&s)))
}

/// Delete an access scope: its actors become unscoped.
#[utoipa::path(delete, path = "/v1/scopes/{accessScopeId}", tag = "scopes",
    params(("accessScopeId" = String, Path, description = "Scope id or slug")),
    responses((status = 204, description = "Deleted"), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn delete(
    State(rest): State<Arc<Rest>>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    scopes::delete(&rest.svc, by(&caller, id.clone())).await?;
    caller.audit("scopes.delete", &id);
    Ok(no_content())
}

/// List the actors of an access scope.
#[utoipa::path(get, path = "/v1/scopes/{accessScopeId}/actors", tag = "scopes",
    params(("accessScopeId" = String, Path, description = "Scope id or slug")),
    responses((status = 200, body = Vec<Actor>), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn list_actors(
    State(rest): State<Arc<Rest>>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let s = scopes::get(&rest.svc, by(&caller, id)).await?;
    let page_size = rest.svc.limits().max_page_size;
    let l = actors::list(
        &rest.svc,
        pb::ListActorsRequest { project_id: caller.project, page_size, page_token: String::new() },
    )
    .await?;
    let members: Vec<Actor> = l.actors.iter().filter(|a| a.scope_id == s.id).map(body::actor).collect();
    Ok(json_response(StatusCode::OK, &members))
}
