//! `/v1/apps`: the project's apps, through the service layer's app functions.

use std::collections::BTreeMap;
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
use super::body::{self, AnnotationsIn, App, Deleted};
use super::error::{ApiError, ErrorBody};
use super::reply::json_response;
use crate::pb;
use crate::service::{apps, convert};
use skua_core::webhook::WebhookKind;

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

/// One webhook endpoint `{url, headers?, timeoutMs?}` (N41; docs/webhooks.md). An empty `url`
/// in an update removes the webhook.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WebhookIn {
    /// http(s) URL the call is POSTed to.
    url: String,
    /// Extra request headers.
    #[serde(default)]
    headers: BTreeMap<String, String>,
    /// Timeout of one call in ms [default: hydration 5000, trigger 10000; at most 30000].
    timeout_ms: Option<u32>,
}

impl WebhookIn {
    fn target(&self) -> pb::WebhookTarget {
        pb::WebhookTarget {
            url: self.url.clone(),
            headers: self.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            timeout_ms: self.timeout_ms.unwrap_or(0),
        }
    }
}

/// `topicConfigs.<topic>.webhooks`: the topic's own webhooks, each winning over the app's.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TopicWebhooksIn {
    /// Hydration (N43).
    on_subscribe: Option<WebhookIn>,
    /// Trigger (N44).
    on_publish: Option<WebhookIn>,
}

/// One entry of `topicConfigs` (other keys are ignored).
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TopicConfigIn {
    #[serde(default)]
    webhooks: TopicWebhooksIn,
    /// Each room's last messages, kept for recovery (issue 19, docs/recovery.md).
    history: Option<TopicHistoryIn>,
}

/// `topicConfigs.<topic>.history`: `{size, ttl}`, ttl in seconds (both at least 1).
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
pub(crate) struct TopicHistoryIn {
    /// Messages kept per room.
    size: u32,
    /// Seconds each message is kept.
    ttl: u64,
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
    /// Per-topic settings: `{<topic>: {webhooks: {onSubscribe?, onPublish?}}}`; every key must
    /// be one of `topics`.
    #[serde(default)]
    topic_configs: BTreeMap<String, TopicConfigIn>,
    /// App-level hydration webhook (topics without their own `onSubscribe` use it).
    hydration_webhook: Option<WebhookIn>,
    /// App-level trigger webhook (topics without their own `onPublish` use it).
    trigger_webhook: Option<WebhookIn>,
    /// `description`, `externalId`, `metadata`.
    #[serde(flatten)]
    annotations: AnnotationsIn,
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
    /// Replaces the per-topic settings (as in AppCreate); topics not named lose their own
    /// webhooks.
    topic_configs: Option<BTreeMap<String, TopicConfigIn>>,
    /// New app-level hydration webhook; an empty `url` removes it.
    hydration_webhook: Option<WebhookIn>,
    /// New app-level trigger webhook; an empty `url` removes it.
    trigger_webhook: Option<WebhookIn>,
    /// `description`, `externalId`, `metadata`: only the keys given change, `null` clears.
    #[serde(flatten)]
    annotations: AnnotationsIn,
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

/// Checks one webhook of a body by the node's rules (as the service layer does after), so that
/// a refusal names the field as the caller sent it (`triggerWebhook.url`,
/// `topicConfigs.<topic>.webhooks.onPublish.timeoutMs`). An empty `url` (removal) passes.
fn check_webhook(rest: &Rest, field: &str, kind: WebhookKind, w: Option<&WebhookIn>) -> Result<(), ApiError> {
    let Some(record) = convert::target_record(w.map(WebhookIn::target).as_ref()) else { return Ok(()) };
    rest.svc.webhooks.check(field, kind, &record).map_err(|e| {
        let field = e.field.strip_suffix(".timeout_ms").map_or_else(|| e.field.clone(), |f| format!("{f}.timeoutMs"));
        ApiError::bad_request(format!("{field}: {}", e.reason))
    })
}

/// [`check_webhook`] of every webhook a create or update body gives.
fn check_webhooks(
    rest: &Rest,
    hydration: Option<&WebhookIn>,
    trigger: Option<&WebhookIn>,
    configs: Option<&BTreeMap<String, TopicConfigIn>>,
) -> Result<(), ApiError> {
    check_webhook(rest, "hydrationWebhook", WebhookKind::Hydration, hydration)?;
    check_webhook(rest, "triggerWebhook", WebhookKind::Trigger, trigger)?;
    for (topic, c) in configs.into_iter().flatten() {
        let field = |which: &str| format!("topicConfigs.{topic}.webhooks.{which}");
        check_webhook(rest, &field("onSubscribe"), WebhookKind::Hydration, c.webhooks.on_subscribe.as_ref())?;
        check_webhook(rest, &field("onPublish"), WebhookKind::Trigger, c.webhooks.on_publish.as_ref())?;
    }
    Ok(())
}

/// The topic list of `names` with the webhooks of `configs` (whose keys must all be topics).
fn topics(names: &[String], configs: &BTreeMap<String, TopicConfigIn>) -> Result<Vec<pb::Topic>, ApiError> {
    if let Some(unknown) = configs.keys().find(|k| !names.contains(k)) {
        return Err(ApiError::bad_request(format!(
            "topicConfigs names {unknown:?}, which is not one of the app's topics"
        )));
    }
    Ok(names
        .iter()
        .map(|n| {
            let webhooks = configs.get(n).map(|c| pb::TopicWebhooks {
                on_subscribe: c.webhooks.on_subscribe.as_ref().map(WebhookIn::target),
                on_publish: c.webhooks.on_publish.as_ref().map(WebhookIn::target),
            });
            let history = configs
                .get(n)
                .and_then(|c| c.history)
                .map(|h| pb::TopicHistory { size: h.size, ttl_ms: h.ttl.saturating_mul(1000) });
            pb::Topic { name: n.clone(), logged: false, webhook: None, webhooks, history }
        })
        .collect())
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
    check_webhooks(&rest, c.hydration_webhook.as_ref(), c.trigger_webhook.as_ref(), Some(&c.topic_configs))?;
    let r = pb::CreateAppRequest {
        project_id: caller.project.clone(),
        slug,
        id: String::new(),
        name,
        topics: topics(&c.topics, &c.topic_configs)?,
        auto_provision_rooms: c.config.auto_provision_rooms.unwrap_or(false),
        max_rooms: c.config.max_rooms.unwrap_or(0),
        hydration_webhook: c.hydration_webhook.as_ref().map(WebhookIn::target),
        trigger_webhook: c.trigger_webhook.as_ref().map(WebhookIn::target),
    };
    let a = apps::create_annotated(&rest.svc, r, &c.annotations.update()?).await?;
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
    let annotations = u.annotations.update()?;
    annotations.check()?;
    check_webhooks(&rest, u.hydration_webhook.as_ref(), u.trigger_webhook.as_ref(), u.topic_configs.as_ref())?;
    let current = if u.slug.is_some() || u.topics.is_some() || u.topic_configs.is_some() {
        Some(apps::get(&rest.svc, pb::GetAppRequest { project_id: caller.project.clone(), app: app.clone() }).await?)
    } else {
        None
    };
    if let (Some(slug), Some(current)) = (&u.slug, &current)
        && *slug != current.slug
    {
        return Err(ApiError::bad_request("slug cannot change: it is part of every topic address"));
    }
    // A new topic list keeps the topics' own webhooks unless topicConfigs replaces them, and
    // topicConfigs alone applies to the current list.
    let topic_list = match (&u.topics, &u.topic_configs, &current) {
        (None, None, _) | (_, _, None) => None,
        (names, configs, Some(current)) => {
            let names = names.clone().unwrap_or_else(|| current.topics.iter().map(|t| t.name.clone()).collect());
            let mut list = topics(&names, configs.as_ref().unwrap_or(&BTreeMap::new()))?;
            for t in &mut list {
                let old = current.topics.iter().find(|o| o.name == t.name);
                if configs.is_none() {
                    t.webhooks = old.and_then(|o| o.webhooks.clone());
                    t.history = old.and_then(|o| o.history);
                }
                t.logged = old.is_some_and(|o| o.logged);
                t.webhook = old.and_then(|o| o.webhook.clone());
            }
            Some(pb::TopicList { topics: list })
        }
    };
    let config = u.config.unwrap_or_default();
    let r = pb::UpdateAppRequest {
        project_id: caller.project.clone(),
        app,
        name: u.name,
        topics: topic_list,
        auto_provision_rooms: config.auto_provision_rooms,
        max_rooms: config.max_rooms,
        hydration_webhook: u.hydration_webhook.as_ref().map(WebhookIn::target),
        trigger_webhook: u.trigger_webhook.as_ref().map(WebhookIn::target),
    };
    let mut a = apps::update(&rest.svc, r).await?;
    if !annotations.is_empty() {
        a = apps::annotate(&rest.svc, &caller.project, &a.id, &annotations).await?;
    }
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
