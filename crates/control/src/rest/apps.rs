//! `/v1/apps`: the project's apps, through the service layer's app functions.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::Rest;
use super::auth::Caller;
use super::body::{self, App, Deleted, json_response};
use super::error::{ApiError, ErrorBody};
use crate::pb;
use crate::service::apps;

/// `page`, `limit`, `sortBy`, `sortOrder`, `search` of a paginated list.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub(crate) struct ListQuery {
    /// Page, from 1 [default 1].
    page: Option<u32>,
    /// Items per page [default 20; at most rest_max_page_limit].
    limit: Option<u32>,
    /// `name`, `slug` or `createdAt` [default createdAt].
    sort_by: Option<String>,
    /// `asc` or `desc` [default asc].
    sort_order: Option<String>,
    /// Keeps items whose name or slug contains it (case-insensitive).
    search: Option<String>,
}

/// The `config` object of an app (other keys are ignored).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AppConfig {
    /// Whether `rooms/ensure` may create rooms.
    auto_provision_rooms: Option<bool>,
    /// The app's own room cap.
    max_rooms: Option<u32>,
}

/// The body of `POST /v1/apps` (other keys of the SDKs' AppCreate are accepted and ignored).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AppCreate {
    /// Display name (required).
    name: Option<String>,
    /// Slug [default: the name lower-cased, other characters as `-`].
    slug: Option<String>,
    #[serde(default)]
    config: AppConfig,
    /// Topic names: without topics every subscribe fails `unknown_topic`.
    #[serde(default)]
    topics: Vec<String>,
}

/// The body of `PATCH /v1/apps/{appId}` (only the keys given change).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AppUpdate {
    name: Option<String>,
    /// Must equal the current slug (it is part of every address).
    slug: Option<String>,
    config: Option<AppConfig>,
    /// Replaces the topic list (removing a topic ends subscriptions to it).
    topics: Option<Vec<String>>,
}

/// `{data, pagination: {total, page, pageCount}}` as the Python SDK reads it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Pagination {
    pub(crate) total: usize,
    pub(crate) page: usize,
    pub(crate) page_count: usize,
}

/// One page of apps, in both forms the SDKs read: `pagination` and the flat fields.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AppPage {
    data: Vec<App>,
    pagination: Pagination,
    total: usize,
    page: usize,
    limit: usize,
    total_pages: usize,
}

fn topics(names: &[String]) -> Vec<pb::Topic> {
    names.iter().map(|n| pb::Topic { name: n.clone(), logged: false, webhook: None }).collect()
}

/// The page `q` asks for of `items`, `limit` capped at `max_limit`: the items, the
/// `pagination` object, and the limit applied.
pub(crate) fn paginated<T>(items: Vec<T>, q: &ListQuery, max_limit: u32) -> (Vec<T>, Pagination, usize) {
    let limit = q.limit.unwrap_or(20).clamp(1, max_limit.max(1)) as usize;
    let page = q.page.unwrap_or(1).max(1) as usize;
    let total = items.len();
    let pages = total.div_ceil(limit).max(1);
    let data: Vec<T> = items.into_iter().skip((page - 1).saturating_mul(limit)).take(limit).collect();
    (data, Pagination { total, page, page_count: pages }, limit)
}

/// What a paginated list can search and sort by.
pub(crate) trait Listed {
    /// Display name.
    fn name(&self) -> &str;
    /// Slug.
    fn slug(&self) -> &str;
}

impl Listed for App {
    fn name(&self) -> &str {
        &self.name
    }
    fn slug(&self) -> &str {
        &self.slug
    }
}

/// Keeps the items whose name or slug contains `search` (case-insensitive), sorted by
/// `sortBy` in `sortOrder` (creation order by default).
pub(crate) fn filter_sort<T: Listed>(mut items: Vec<T>, q: &ListQuery) -> Result<Vec<T>, ApiError> {
    if let Some(s) = q.search.as_deref().map(str::to_lowercase).filter(|s| !s.is_empty()) {
        items.retain(|a| a.name().to_lowercase().contains(&s) || a.slug().to_lowercase().contains(&s));
    }
    match q.sort_by.as_deref() {
        None | Some("createdAt") => {}
        Some("name") => items.sort_by(|a, b| a.name().cmp(b.name())),
        Some("slug") => items.sort_by(|a, b| a.slug().cmp(b.slug())),
        Some(other) => return Err(ApiError::bad_request(format!("sortBy {other:?}: use name, slug or createdAt"))),
    }
    match q.sort_order.as_deref() {
        None | Some("asc") => {}
        Some("desc") => items.reverse(),
        Some(other) => return Err(ApiError::bad_request(format!("sortOrder {other:?}: use asc or desc"))),
    }
    Ok(items)
}

/// List the project's apps (paginated).
#[utoipa::path(get, path = "/v1/apps", tag = "apps", params(ListQuery), responses(
    (status = 200, body = AppPage), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
    (status = 429, body = ErrorBody)))]
pub(crate) async fn list(
    State(rest): State<Arc<Rest>>,
    caller: Caller,
    q: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = q.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let r = apps::list(&rest.svc, pb::ListAppsRequest { project_id: caller.project }).await?;
    let items = filter_sort(r.apps.iter().map(body::app).collect(), &q)?;
    let (data, pagination, limit) = paginated(items, &q, rest.config.max_page_limit);
    let (total, page, total_pages) = (pagination.total, pagination.page, pagination.page_count);
    Ok(json_response(StatusCode::OK, &AppPage { data, pagination, total, page, limit, total_pages }))
}

/// Get an app.
#[utoipa::path(get, path = "/v1/apps/{appId}", tag = "apps",
    params(("appId" = String, Path, description = "App id or slug")),
    responses((status = 200, body = App), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn get(
    State(rest): State<Arc<Rest>>,
    caller: Caller,
    Path(app): Path<String>,
) -> Result<Response, ApiError> {
    let a = apps::get(&rest.svc, pb::GetAppRequest { project_id: caller.project, app }).await?;
    Ok(json_response(StatusCode::OK, &body::app(&a)))
}

/// Create an app.
#[utoipa::path(post, path = "/v1/apps", tag = "apps", request_body = AppCreate, responses(
    (status = 201, body = App), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
    (status = 403, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub(crate) async fn create(
    State(rest): State<Arc<Rest>>,
    caller: Caller,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let c: AppCreate = body::parse(b)?;
    let name = c.name.filter(|n| !n.trim().is_empty()).ok_or_else(|| ApiError::bad_request("name is required"))?;
    let slug = c.slug.unwrap_or_else(|| body::slugify(&name));
    let r = pb::CreateAppRequest {
        project_id: caller.project.clone(),
        slug,
        id: String::new(),
        name,
        topics: topics(&c.topics),
        auto_provision_rooms: c.config.auto_provision_rooms.unwrap_or(false),
        max_rooms: c.config.max_rooms.unwrap_or(0),
    };
    let a = apps::create(&rest.svc, r).await?;
    caller.audit("apps.create", &a.id);
    Ok(json_response(StatusCode::CREATED, &body::app(&a)))
}

/// Update an app.
#[utoipa::path(patch, path = "/v1/apps/{appId}", tag = "apps", request_body = AppUpdate,
    params(("appId" = String, Path, description = "App id or slug")),
    responses((status = 200, body = App), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
    (status = 404, body = ErrorBody)))]
pub(crate) async fn update(
    State(rest): State<Arc<Rest>>,
    caller: Caller,
    Path(app): Path<String>,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let u: AppUpdate = body::parse(b)?;
    if let Some(slug) = &u.slug {
        let current =
            apps::get(&rest.svc, pb::GetAppRequest { project_id: caller.project.clone(), app: app.clone() }).await?;
        if *slug != current.slug {
            return Err(ApiError::bad_request("slug cannot change: it is part of every topic address"));
        }
    }
    let config = u.config.unwrap_or_default();
    let r = pb::UpdateAppRequest {
        project_id: caller.project.clone(),
        app,
        name: u.name,
        topics: u.topics.map(|t| pb::TopicList { topics: topics(&t) }),
        auto_provision_rooms: config.auto_provision_rooms,
        max_rooms: config.max_rooms,
    };
    let a = apps::update(&rest.svc, r).await?;
    caller.audit("apps.update", &a.id);
    Ok(json_response(StatusCode::OK, &body::app(&a)))
}

/// Delete an app with its rooms and grants.
#[utoipa::path(delete, path = "/v1/apps/{appId}", tag = "apps",
    params(("appId" = String, Path, description = "App id or slug")),
    responses((status = 200, body = Deleted), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn delete(
    State(rest): State<Arc<Rest>>,
    caller: Caller,
    Path(app): Path<String>,
) -> Result<Response, ApiError> {
    let d =
        apps::delete(&rest.svc, pb::DeleteAppRequest { project_id: caller.project.clone(), app: app.clone() }).await?;
    caller.audit("apps.delete", &app);
    Ok(json_response(StatusCode::OK, &Deleted { success: true, deleted: d.deleted }))
}

/// Reset an app to its blueprint: Skua apps have none, so the app is returned unchanged.
#[utoipa::path(post, path = "/v1/apps/{appId}/reset-to-blueprint", tag = "apps",
    params(("appId" = String, Path, description = "App id or slug")),
    responses((status = 200, body = App), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn reset_to_blueprint(
    State(rest): State<Arc<Rest>>,
    caller: Caller,
    Path(app): Path<String>,
) -> Result<Response, ApiError> {
    let a = apps::get(&rest.svc, pb::GetAppRequest { project_id: caller.project, app }).await?;
    Ok(json_response(StatusCode::OK, &body::app(&a)))
}
