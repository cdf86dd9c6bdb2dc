//! Apps of a project: create, get, list, update (name, topics, room provisioning and cap),
//! delete (with their rooms, grants and lobbies).

use skua_core::registry_store::{AppRecord, Change, Object};
use tonic::Status;

use super::shared::{app, below_cap, delete_app_changes, deleted, name_or, project};
use super::{ControlService, convert};
use crate::pb;
use crate::sync::now_ms;
use crate::validate;

/// An app's topic list: bounded, unique names, valid webhooks.
fn check_topics(topics: &[pb::Topic]) -> Result<(), Status> {
    if topics.len() > validate::MAX_TOPICS_PER_APP {
        return Err(Status::invalid_argument(format!("topics: at most {}", validate::MAX_TOPICS_PER_APP)));
    }
    for (i, t) in topics.iter().enumerate() {
        validate::slug("topics.name", &t.name)?;
        if topics[..i].iter().any(|o| o.name == t.name) {
            return Err(Status::invalid_argument(format!("topics lists {:?} twice", t.name)));
        }
        if let Some(w) = &t.webhook {
            validate::url("topics.webhook.url", &w.url)?;
            validate::slug_list("topics.webhook.events", &w.events, validate::MAX_WEBHOOK_EVENTS)?;
        }
    }
    Ok(())
}

pub(crate) async fn create(svc: &ControlService, r: pb::CreateAppRequest) -> Result<pb::App, Status> {
    validate::slug("slug", &r.slug)?;
    if !r.id.is_empty() {
        validate::slug("id", &r.id)?;
    }
    validate::name("name", &r.name)?;
    check_topics(&r.topics)?;
    let now = now_ms();
    let a = svc
        .mutate(|d| {
            let p = project(d, &r.project_id)?;
            let id = if r.id.is_empty() { format!("{}-{}", p.id, r.slug) } else { r.id.clone() };
            validate::slug("id", &id).map_err(|_| {
                Status::invalid_argument("the generated app id (<project>-<slug>) is too long; give an id")
            })?;
            if d.apps.contains_key(&id) {
                return Err(Status::already_exists(format!("app id {id:?} already exists")));
            }
            if d.apps.values().any(|a| a.project == p.id && a.slug == r.slug) {
                return Err(Status::already_exists(format!("app {:?} already exists in project {:?}", r.slug, p.id)));
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
            };
            Ok((vec![Change::Put(Object::App(a.clone()))], a))
        })
        .await?;
    Ok(convert::app(&svc.sync.snapshot().data, &a))
}

pub(crate) async fn get(svc: &ControlService, r: pb::GetAppRequest) -> Result<pb::App, Status> {
    let snap = svc.read().await;
    let p = project(&snap.data, &r.project_id)?;
    let a = app(&snap.data, &p.id, &r.app)?;
    Ok(convert::app(&snap.data, a))
}

pub(crate) async fn list(svc: &ControlService, r: pb::ListAppsRequest) -> Result<pb::ListAppsResponse, Status> {
    let snap = svc.read().await;
    let p = project(&snap.data, &r.project_id)?;
    let mut apps: Vec<&AppRecord> = snap.data.apps.values().filter(|a| a.project == p.id).collect();
    apps.sort_by_key(|a| (a.created_at_ms, a.id.clone()));
    Ok(pb::ListAppsResponse { apps: apps.into_iter().map(|a| convert::app(&snap.data, a)).collect() })
}

pub(crate) async fn update(svc: &ControlService, r: pb::UpdateAppRequest) -> Result<pb::App, Status> {
    if let Some(n) = &r.name {
        validate::name("name", n)?;
    }
    if let Some(t) = &r.topics {
        check_topics(&t.topics)?;
    }
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
            Ok((vec![Change::Put(Object::App(a.clone()))], a))
        })
        .await?;
    Ok(convert::app(&svc.sync.snapshot().data, &a))
}

pub(crate) async fn delete(svc: &ControlService, r: pb::DeleteAppRequest) -> Result<pb::DeleteResponse, Status> {
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
