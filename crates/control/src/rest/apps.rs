//! `/v1/apps`: the project's apps, through the service layer's app functions.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Value, json};

use super::Rest;
use super::auth::Caller;
use super::body::{self, json_response};
use super::error::ApiError;
use crate::pb;
use crate::service::apps;

/// `page`, `limit`, `sortBy`, `sortOrder`, `search` of a paginated list.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ListQuery {
    page: Option<u32>,
    limit: Option<u32>,
    sort_by: Option<String>,
    sort_order: Option<String>,
    search: Option<String>,
}

/// The `config` object of an app (other keys are ignored).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AppConfig {
    auto_provision_rooms: Option<bool>,
    max_rooms: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AppCreate {
    name: Option<String>,
    slug: Option<String>,
    #[serde(default)]
    config: AppConfig,
    #[serde(default)]
    topics: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AppUpdate {
    name: Option<String>,
    slug: Option<String>,
    config: Option<AppConfig>,
    topics: Option<Vec<String>>,
}

fn topics(names: &[String]) -> Vec<pb::Topic> {
    names.iter().map(|n| pb::Topic { name: n.clone(), logged: false, webhook: None }).collect()
}

/// Pages of `items` as both SDKs read them: `{data, pagination:{total, page, pageCount}}` and
/// the flat `total, page, limit, totalPages`.
pub(crate) fn paginated(items: Vec<Value>, q: &ListQuery, max_limit: u32) -> Value {
    let limit = q.limit.unwrap_or(20).clamp(1, max_limit.max(1)) as usize;
    let page = q.page.unwrap_or(1).max(1) as usize;
    let total = items.len();
    let pages = total.div_ceil(limit).max(1);
    let data: Vec<Value> = items.into_iter().skip((page - 1).saturating_mul(limit)).take(limit).collect();
    json!({
        "data": data,
        "pagination": { "total": total, "page": page, "pageCount": pages },
        "total": total,
        "page": page,
        "limit": limit,
        "totalPages": pages,
    })
}

/// Keeps the items whose `name` or `slug` contains `search` (case-insensitive), sorted by
/// `sortBy` (`name`, `slug`, `createdAt`; default creation) in `sortOrder`.
pub(crate) fn filter_sort(mut items: Vec<Value>, q: &ListQuery) -> Result<Vec<Value>, ApiError> {
    if let Some(s) = q.search.as_deref().map(str::to_lowercase).filter(|s| !s.is_empty()) {
        let hit = |v: &Value, k: &str| v[k].as_str().is_some_and(|x| x.to_lowercase().contains(&s));
        items.retain(|v| hit(v, "name") || hit(v, "slug"));
    }
    let key = match q.sort_by.as_deref() {
        None | Some("createdAt") => None,
        Some(k @ ("name" | "slug")) => Some(k),
        Some(other) => return Err(ApiError::bad_request(format!("sortBy {other:?}: use name, slug or createdAt"))),
    };
    if let Some(k) = key {
        items.sort_by(|a, b| a[k].as_str().cmp(&b[k].as_str()));
    }
    match q.sort_order.as_deref() {
        None | Some("asc") => {}
        Some("desc") => items.reverse(),
        Some(other) => return Err(ApiError::bad_request(format!("sortOrder {other:?}: use asc or desc"))),
    }
    Ok(items)
}

pub(crate) async fn list(
    State(rest): State<Arc<Rest>>,
    caller: Caller,
    q: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = q.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let r = apps::list(&rest.svc, pb::ListAppsRequest { project_id: caller.project }).await?;
    let items = filter_sort(r.apps.iter().map(body::app).collect(), &q)?;
    Ok(json_response(StatusCode::OK, paginated(items, &q, rest.config.max_page_limit)))
}

pub(crate) async fn get(
    State(rest): State<Arc<Rest>>,
    caller: Caller,
    Path(app): Path<String>,
) -> Result<Response, ApiError> {
    let a = apps::get(&rest.svc, pb::GetAppRequest { project_id: caller.project, app }).await?;
    Ok(json_response(StatusCode::OK, body::app(&a)))
}

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
    Ok(json_response(StatusCode::CREATED, body::app(&a)))
}

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
    Ok(json_response(StatusCode::OK, body::app(&a)))
}

pub(crate) async fn delete(
    State(rest): State<Arc<Rest>>,
    caller: Caller,
    Path(app): Path<String>,
) -> Result<Response, ApiError> {
    let d =
        apps::delete(&rest.svc, pb::DeleteAppRequest { project_id: caller.project.clone(), app: app.clone() }).await?;
    caller.audit("apps.delete", &app);
    Ok(json_response(StatusCode::OK, json!({ "success": true, "deleted": d.deleted })))
}

pub(crate) async fn reset_to_blueprint(
    State(rest): State<Arc<Rest>>,
    caller: Caller,
    Path(app): Path<String>,
) -> Result<Response, ApiError> {
    // Skua apps have no blueprint: there is nothing to reset to, so the app is returned as is.
    let a = apps::get(&rest.svc, pb::GetAppRequest { project_id: caller.project, app }).await?;
    Ok(json_response(StatusCode::OK, body::app(&a)))
}
