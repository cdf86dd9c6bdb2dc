//! Apps of a project: create, get, list, update (name, topics, webhooks, room provisioning and
//! cap), delete (with their rooms, grants and lobbies), and the webhook secret's rotation.

use crate::service::Error;
use skua_core::registry_store::{AppRecord, Change, Object};
use skua_core::webhook::WebhookKind;

use super::annotations::AnnotationsUpdate;
use super::shared::{app, below_cap, delete_app_changes, deleted, name_or, project};
use super::{ControlService, convert};
use crate::pb;
use crate::sync::now_ms;
use crate::validate;
use crate::webhooks::new_secret;

/// One webhook endpoint from the API, checked by the node's policy; `INVALID_ARGUMENT` naming
/// the field otherwise. An empty url (removal) passes.
fn check_target(
    svc: &ControlService,
    field: &str,
    kind: WebhookKind,
    t: Option<&pb::WebhookTarget>,
) -> Result<(), Error> {
    match convert::target_record(t) {
        Some(r) => svc.webhooks.check(field, kind, &r).map_err(|e| Error::invalid_argument(e.to_string())),
        None => Ok(()),
    }
}

/// An app's topic list: bounded, unique names, valid webhooks.
fn check_topics(svc: &ControlService, topics: &[pb::Topic]) -> Result<(), Error> {
    if topics.len() > validate::MAX_TOPICS_PER_APP {
        return Err(Error::invalid_argument(format!("topics: at most {}", validate::MAX_TOPICS_PER_APP)));
    }
    for (i, t) in topics.iter().enumerate() {
        validate::slug(&format!("topics[{i}].name"), &t.name)?;
        if topics[..i].iter().any(|o| o.name == t.name) {
            return Err(Error::invalid_argument(format!("topics lists {:?} twice", t.name)));
        }
        if let Some(w) = &t.webhook {
            validate::url("topics.webhook.url", &w.url)?;
            validate::slug_list("topics.webhook.events", &w.events, validate::MAX_WEBHOOK_EVENTS)?;
        }
        if let Some(w) = &t.webhooks {
            let field = |which: &str| format!("topics.{}.webhooks.{which}", t.name);
            check_target(svc, &field("on_subscribe"), WebhookKind::Hydration, w.on_subscribe.as_ref())?;
            check_target(svc, &field("on_publish"), WebhookKind::Trigger, w.on_publish.as_ref())?;
        }
        if let Some(h) = &t.history
            && (h.size == 0 || h.ttl_ms == 0)
        {
            return Err(Error::invalid_argument(format!(
                "topics.{}.history: size and ttl_ms must be at least 1",
                t.name
            )));
        }
    }
    Ok(())
}

pub(crate) async fn create(svc: &ControlService, r: pb::CreateAppRequest) -> Result<pb::App, Error> {
    create_annotated(svc, r, &AnnotationsUpdate::default()).await
}

/// [`create`] with the app's description, external id and metadata (the REST API's).
pub(crate) async fn create_annotated(
    svc: &ControlService,
    r: pb::CreateAppRequest,
    annotations: &AnnotationsUpdate,
) -> Result<pb::App, Error> {
    annotations.check()?;
    validate::slug("slug", &r.slug)?;
    if !r.id.is_empty() {
        validate::slug("id", &r.id)?;
    }
    validate::name("name", &r.name)?;
    check_topics(svc, &r.topics)?;
    check_target(svc, "hydration_webhook", WebhookKind::Hydration, r.hydration_webhook.as_ref())?;
    check_target(svc, "trigger_webhook", WebhookKind::Trigger, r.trigger_webhook.as_ref())?;
    let secret = new_secret();
    let now = now_ms();
    let a = svc
        .mutate(|d| {
            let p = project(d, &r.project_id)?;
            let id = if r.id.is_empty() { format!("{}-{}", p.id, r.slug) } else { r.id.clone() };
            validate::slug("id", &id).map_err(|_| {
                Error::invalid_argument(
                    "slug is too long: the generated app id (<project>-<slug>) must be at most 64 characters",
                )
            })?;
            if d.apps.contains_key(&id) {
                return Err(Error::already_exists(format!("app id {id:?} already exists")));
            }
            if d.apps.values().any(|a| a.project == p.id && a.slug == r.slug) {
                return Err(Error::already_exists(format!("app {:?} already exists in project {:?}", r.slug, p.id)));
            }
            let count = d.apps.values().filter(|a| a.project == p.id).count();
            below_cap(
                format_args!("project {:?}", p.id),
                count,
                "apps",
                svc.limits.max_apps_per_project,
                &"max_apps_per_project",
            )?;
            let a = AppRecord {
                project: p.id.clone(),
                id,
                slug: r.slug.clone(),
                name: name_or(&r.name, &r.slug),
                topics: r.topics.iter().map(convert::topic_record).collect(),
                auto_provision_rooms: r.auto_provision_rooms,
                max_rooms: Some(r.max_rooms).filter(|n| *n > 0),
                created_at_ms: now,
                hydration_webhook: convert::target_record(r.hydration_webhook.as_ref()),
                trigger_webhook: convert::target_record(r.trigger_webhook.as_ref()),
                webhook_secret: Some(secret.clone()),
                annotations: annotations.record(),
            };
            Ok((vec![Change::Put(Object::App(a.clone()))], a))
        })
        .await?;
    Ok(pb::App { webhook_secret: secret, ..convert::app(&svc.sync.snapshot().data, &a) })
}

pub(crate) async fn get(svc: &ControlService, r: pb::GetAppRequest) -> Result<pb::App, Error> {
    let snap = svc.read().await;
    let p = project(&snap.data, &r.project_id)?;
    let a = app(&snap.data, &p.id, &r.app)?;
    Ok(convert::app(&snap.data, a))
}

pub(crate) async fn list(svc: &ControlService, r: pb::ListAppsRequest) -> Result<pb::ListAppsResponse, Error> {
    let snap = svc.read().await;
    let p = project(&snap.data, &r.project_id)?;
    let mut apps: Vec<&AppRecord> = snap.data.apps.values().filter(|a| a.project == p.id).collect();
    apps.sort_by_key(|a| (a.created_at_ms, a.id.clone()));
    Ok(pb::ListAppsResponse { apps: apps.into_iter().map(|a| convert::app(&snap.data, a)).collect() })
}

/// Changes an app's description, external id or metadata (the REST API's `PATCH`).
pub(crate) async fn annotate(
    svc: &ControlService,
    project_id: &str,
    app_ref: &str,
    u: &AnnotationsUpdate,
) -> Result<pb::App, Error> {
    u.check()?;
    let a = svc
        .mutate(|d| {
            let p = project(d, project_id)?;
            let mut a = app(d, &p.id, app_ref)?.clone();
            u.apply(&mut a.annotations);
            Ok((vec![Change::Put(Object::App(a.clone()))], a))
        })
        .await?;
    Ok(convert::app(&svc.sync.snapshot().data, &a))
}

pub(crate) async fn update(svc: &ControlService, r: pb::UpdateAppRequest) -> Result<pb::App, Error> {
    if let Some(n) = &r.name {
        validate::name("name", n)?;
    }
    if let Some(t) = &r.topics {
        check_topics(svc, &t.topics)?;
    }
    check_target(svc, "hydration_webhook", WebhookKind::Hydration, r.hydration_webhook.as_ref())?;
    check_target(svc, "trigger_webhook", WebhookKind::Trigger, r.trigger_webhook.as_ref())?;
    let a = svc
        .mutate(|d| {
            let p = project(d, &r.project_id)?;
            let mut a = app(d, &p.id, &r.app)?.clone();
            if let Some(n) = &r.name {
                a.name.clone_from(n);
            }
            if let Some(t) = &r.topics {
                a.topics = t.topics.iter().map(convert::topic_record).collect();
            }
            if let Some(v) = r.auto_provision_rooms {
                a.auto_provision_rooms = v;
            }
            if let Some(n) = r.max_rooms {
                a.max_rooms = Some(n).filter(|n| *n > 0);
            }
            if let Some(w) = &r.hydration_webhook {
                a.hydration_webhook = convert::target_record(Some(w));
            }
            if let Some(w) = &r.trigger_webhook {
                a.trigger_webhook = convert::target_record(Some(w));
            }
            Ok((vec![Change::Put(Object::App(a.clone()))], a))
        })
        .await?;
    Ok(convert::app(&svc.sync.snapshot().data, &a))
}

pub(crate) async fn delete(svc: &ControlService, r: pb::DeleteAppRequest) -> Result<pb::DeleteResponse, Error> {
    let n = svc
        .mutate(|d| {
            let p = project(d, &r.project_id)?;
            let a = app(d, &p.id, &r.app)?;
            let mut out = Vec::new();
            delete_app_changes(d, a, &mut out);
            let n = out.len();
            Ok((out, n))
        })
        .await?;
    Ok(deleted(n))
}

pub(crate) async fn rotate_webhook_secret(
    svc: &ControlService,
    r: pb::RotateWebhookSecretRequest,
) -> Result<pb::App, Error> {
    let secret = new_secret();
    let a = svc
        .mutate(|d| {
            let p = project(d, &r.project_id)?;
            let mut a = app(d, &p.id, &r.app)?.clone();
            a.webhook_secret = Some(secret.clone());
            Ok((vec![Change::Put(Object::App(a.clone()))], a))
        })
        .await?;
    tracing::info!(app = %a.id, "Webhook secret rotated.");
    Ok(pb::App { webhook_secret: secret, ..convert::app(&svc.sync.snapshot().data, &a) })
}
