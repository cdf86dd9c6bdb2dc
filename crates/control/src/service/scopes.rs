//! Access scopes of a project: create, get, list, update (name, active), delete (members
//! become unscoped), and moving actors in and out of them.

use crate::service::Error;
use skua_core::RegistryData;
use skua_core::registry_store::{ActorRecord, Change, Object, ObjectKind, ScopeRecord};

use super::ControlService;
use super::shared::{actor, del, deleted, name_or, project};
use crate::pb;
use crate::sync::now_ms;
use crate::validate;

/// Most scopes per project (a fixed cap).
pub const MAX_SCOPES_PER_PROJECT: usize = 10_000;

/// A scope of `project` by id or slug.
pub(crate) fn scope<'a>(d: &'a RegistryData, project: &str, scope: &str) -> Result<&'a ScopeRecord, Error> {
    validate::slug("scope", scope)?;
    d.scopes
        .get(scope)
        .filter(|s| s.project == project)
        .or_else(|| d.scopes.values().find(|s| s.project == project && s.slug == scope))
        .ok_or_else(|| Error::not_found(format!("scope {scope:?} not found in project {project:?}")))
}

pub(crate) fn convert(d: &RegistryData, s: &ScopeRecord) -> pb::Scope {
    let members = d.actors.values().filter(|a| a.scope.as_deref() == Some(s.id.as_str())).count();
    pb::Scope {
        id: s.id.clone(),
        project_id: s.project.clone(),
        slug: s.slug.clone(),
        name: s.name.clone(),
        active: s.active,
        created_at_ms: s.created_at_ms,
        actor_count: u32::try_from(members).unwrap_or(u32::MAX),
    }
}

/// `a` moved to `scope`, its open connections closed (they reconnect under the new addresses).
fn moved(a: &ActorRecord, scope: Option<String>, now: u64) -> ActorRecord {
    let mut a = a.clone();
    a.scope = scope;
    a.disconnect_before_ms = Some(now);
    a
}

pub(crate) async fn create(svc: &ControlService, r: pb::CreateScopeRequest) -> Result<pb::Scope, Error> {
    validate::slug("slug", &r.slug)?;
    validate::name("name", &r.name)?;
    let now = now_ms();
    let s = svc
        .mutate(|d| {
            let p = project(d, &r.project_id)?;
            if d.scopes.values().any(|s| s.project == p.id && s.slug == r.slug) {
                return Err(Error::already_exists(format!("scope {:?} already exists in project {:?}", r.slug, p.id)));
            }
            let count = d.scopes.values().filter(|s| s.project == p.id).count();
            if count >= MAX_SCOPES_PER_PROJECT {
                return Err(Error::failed_precondition(format!(
                    "project {:?} has {count} scopes, the most allowed ({MAX_SCOPES_PER_PROJECT})",
                    p.id
                )));
            }
            let s = ScopeRecord {
                project: p.id.clone(),
                id: format!("scope-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]),
                slug: r.slug.clone(),
                name: name_or(&r.name, &r.slug),
                active: true,
                created_at_ms: now,
            };
            Ok((vec![Change::Put(Object::Scope(s.clone()))], s))
        })
        .await?;
    Ok(convert(&svc.sync.snapshot().data, &s))
}

pub(crate) async fn get(svc: &ControlService, r: pb::ScopeRef) -> Result<pb::Scope, Error> {
    let snap = svc.read().await;
    let p = project(&snap.data, &r.project_id)?;
    Ok(convert(&snap.data, scope(&snap.data, &p.id, &r.scope)?))
}

pub(crate) async fn list(svc: &ControlService, r: pb::ListScopesRequest) -> Result<pb::ListScopesResponse, Error> {
    let snap = svc.read().await;
    let p = project(&snap.data, &r.project_id)?;
    let mut scopes: Vec<&ScopeRecord> = snap.data.scopes.values().filter(|s| s.project == p.id).collect();
    scopes.sort_by_key(|s| (s.created_at_ms, s.id.clone()));
    Ok(pb::ListScopesResponse { scopes: scopes.into_iter().map(|s| convert(&snap.data, s)).collect() })
}

pub(crate) async fn update(svc: &ControlService, r: pb::UpdateScopeRequest) -> Result<pb::Scope, Error> {
    if let Some(n) = &r.name {
        validate::name("name", n)?;
    }
    let s = svc
        .mutate(|d| {
            let p = project(d, &r.project_id)?;
            let mut s = scope(d, &p.id, &r.scope)?.clone();
            if let Some(n) = &r.name {
                s.name = name_or(n, &s.slug);
            }
            if let Some(a) = r.active {
                s.active = a;
            }
            Ok((vec![Change::Put(Object::Scope(s.clone()))], s))
        })
        .await?;
    Ok(convert(&svc.sync.snapshot().data, &s))
}

pub(crate) async fn delete(svc: &ControlService, r: pb::ScopeRef) -> Result<pb::DeleteResponse, Error> {
    let now = now_ms();
    let n = svc
        .mutate(|d| {
            let p = project(d, &r.project_id)?;
            let s = scope(d, &p.id, &r.scope)?;
            let mut out: Vec<Change> = d
                .actors
                .values()
                .filter(|a| a.scope.as_deref() == Some(s.id.as_str()))
                .map(|a| Change::Put(Object::Actor(moved(a, None, now))))
                .collect();
            out.push(del(ObjectKind::Scope, s.id.clone()));
            Ok((out, 1))
        })
        .await?;
    Ok(deleted(n))
}

pub(crate) async fn set_actor_scope(svc: &ControlService, r: pb::SetActorScopeRequest) -> Result<pb::Actor, Error> {
    let now = now_ms();
    let a = svc
        .mutate(|d| {
            let a = actor(d, &r.actor_id)?;
            let target = if r.scope.is_empty() { None } else { Some(scope(d, &a.project, &r.scope)?.id.clone()) };
            if a.scope == target {
                return Ok((Vec::new(), a.clone()));
            }
            let a = moved(a, target, now);
            Ok((vec![Change::Put(Object::Actor(a.clone()))], a))
        })
        .await?;
    Ok(super::convert::actor(&svc.sync.snapshot().data, &a))
}
