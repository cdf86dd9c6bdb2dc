//! Actors of a project: create (with a first access token), get, list, activate and
//! deactivate, delete (with their tokens, grants and lobby allowances), rotate the token.

use crate::service::Error;
use skua_core::registry_store::{ActorRecord, Change, Object, ObjectKind};

use super::annotations::AnnotationsUpdate;
use super::shared::{
    actor, below_cap, del, delete_actor_changes, deleted, deletes, name_or, new_token, page_after, project,
};
use super::{ControlService, convert};
use crate::pb;
use crate::sync::now_ms;
use crate::validate;

pub(crate) async fn create(svc: &ControlService, r: pb::CreateActorRequest) -> Result<pb::CreateActorResponse, Error> {
    create_annotated(svc, r, &AnnotationsUpdate::default()).await
}

/// [`create`] with the actor's description, external id and metadata (the REST API's).
pub(crate) async fn create_annotated(
    svc: &ControlService,
    r: pb::CreateActorRequest,
    annotations: &AnnotationsUpdate,
) -> Result<pb::CreateActorResponse, Error> {
    annotations.check()?;
    if !r.id.is_empty() {
        validate::slug("id", &r.id)?;
    }
    validate::actor_type("actor_type", &r.actor_type)?;
    validate::name("name", &r.name)?;
    let now = now_ms();
    let id = if r.id.is_empty() {
        format!("actor-{}", &uuid::Uuid::new_v4().simple().to_string()[..12])
    } else {
        r.id.clone()
    };
    let (token, token_record) = new_token(&id, now);
    let a = svc
        .mutate(|d| {
            let p = project(d, &r.project_id)?;
            if d.actors.contains_key(&id) {
                return Err(Error::already_exists(format!("actor {id:?} already exists")));
            }
            let count = d.actors.values().filter(|a| a.project == p.id).count();
            below_cap(
                format_args!("project {:?}", p.id),
                count,
                "actors",
                svc.limits.max_actors_per_project,
                &"max_actors_per_project",
            )?;
            let a = ActorRecord {
                project: p.id.clone(),
                id: id.clone(),
                actor_type: r.actor_type.clone(),
                name: name_or(&r.name, &id),
                active: true,
                rate_limit: Some(r.rate_limit).filter(|n| *n > 0),
                disconnect_before_ms: None,
                created_at_ms: now,
                scope: None,
                annotations: annotations.record(),
            };
            Ok((vec![Change::Put(Object::Actor(a.clone())), Change::Put(Object::Token(token_record.clone()))], a))
        })
        .await?;
    Ok(issued(svc, &a, token, &token_record.key_id))
}

pub(crate) async fn get(svc: &ControlService, r: pb::GetActorRequest) -> Result<pb::Actor, Error> {
    let snap = svc.read().await;
    Ok(convert::actor(&snap.data, actor(&snap.data, &r.actor_id)?))
}

pub(crate) async fn list(svc: &ControlService, r: pb::ListActorsRequest) -> Result<pb::ListActorsResponse, Error> {
    list_where(svc, r, |_| true).await
}

/// As [`list`], of the actors `keep` accepts: the filter runs before paging, so the page token
/// continues the filtered list (the dashboard's search).
pub(crate) async fn list_where(
    svc: &ControlService,
    r: pb::ListActorsRequest,
    keep: impl Fn(&ActorRecord) -> bool,
) -> Result<pb::ListActorsResponse, Error> {
    let snap = svc.read().await;
    let d = &snap.data;
    let p = project(d, &r.project_id)?;
    let items = d.actors.iter().filter(|(_, a)| a.project == p.id && keep(a)).map(|(id, a)| (id.as_str(), a));
    let (page, next) = page_after(items, &r.page_token, svc.page_size(r.page_size))?;
    Ok(pb::ListActorsResponse {
        actors: page.into_iter().map(|a| convert::actor(d, a)).collect(),
        next_page_token: next,
    })
}

pub(crate) async fn deactivate(svc: &ControlService, r: pb::ActorRef) -> Result<pb::Actor, Error> {
    set_active(svc, &r.actor_id, false).await
}

pub(crate) async fn activate(svc: &ControlService, r: pb::ActorRef) -> Result<pb::Actor, Error> {
    set_active(svc, &r.actor_id, true).await
}

/// Renames an actor (the REST API's `PATCH /actors/{id}`).
pub(crate) async fn rename(svc: &ControlService, id: &str, name: &str) -> Result<pb::Actor, Error> {
    validate::name("name", name)?;
    let a = svc
        .mutate(|d| {
            let mut a = actor(d, id)?.clone();
            let name = name_or(name, &a.id);
            if a.name == name {
                return Ok((Vec::new(), a));
            }
            a.name = name;
            Ok((vec![Change::Put(Object::Actor(a.clone()))], a))
        })
        .await?;
    Ok(convert::actor(&svc.sync.snapshot().data, &a))
}

/// Changes an actor's description, external id or metadata (the REST API's `PATCH`).
pub(crate) async fn annotate(svc: &ControlService, id: &str, u: &AnnotationsUpdate) -> Result<pb::Actor, Error> {
    u.check()?;
    let a = svc
        .mutate(|d| {
            let mut a = actor(d, id)?.clone();
            u.apply(&mut a.annotations);
            Ok((vec![Change::Put(Object::Actor(a.clone()))], a))
        })
        .await?;
    Ok(convert::actor(&svc.sync.snapshot().data, &a))
}

async fn set_active(svc: &ControlService, id: &str, active: bool) -> Result<pb::Actor, Error> {
    let a = svc
        .mutate(|d| {
            let mut a = actor(d, id)?.clone();
            if a.active == active {
                return Ok((Vec::new(), a));
            }
            a.active = active;
            Ok((vec![Change::Put(Object::Actor(a.clone()))], a))
        })
        .await?;
    Ok(convert::actor(&svc.sync.snapshot().data, &a))
}

pub(crate) async fn delete(svc: &ControlService, r: pb::ActorRef) -> Result<pb::DeleteResponse, Error> {
    let n = svc
        .mutate(|d| {
            let a = actor(d, &r.actor_id)?;
            let mut out = Vec::new();
            delete_actor_changes(d, a, &mut out);
            let n = deletes(&out);
            Ok((out, n))
        })
        .await?;
    Ok(deleted(n))
}

pub(crate) async fn rotate_token(svc: &ControlService, r: pb::ActorRef) -> Result<pb::CreateActorResponse, Error> {
    validate::slug("actor_id", &r.actor_id)?;
    let (token, record) = new_token(&r.actor_id, now_ms());
    let a = svc
        .mutate(|d| {
            let a = actor(d, &r.actor_id)?;
            let mut out: Vec<Change> = d
                .tokens
                .values()
                .filter(|t| t.actor == a.id)
                .map(|t| del(ObjectKind::Token, t.key_id.clone()))
                .collect();
            out.push(Change::Put(Object::Token(record.clone())));
            Ok((out, a.clone()))
        })
        .await?;
    Ok(issued(svc, &a, token, &record.key_id))
}

/// The reply carrying `a` and its new access `token` (shown this once).
fn issued(svc: &ControlService, a: &ActorRecord, token: String, key_id: &str) -> pb::CreateActorResponse {
    pb::CreateActorResponse {
        actor: Some(convert::actor(&svc.sync.snapshot().data, a)),
        access_token: token,
        token_key_id: key_id.to_owned(),
    }
}
