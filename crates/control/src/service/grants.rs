//! Grants of a room: create (to one actor or an actor type, optionally for some topics and
//! until a time), list, delete. A room with any grant is private.

use crate::service::Error;
use skua_core::registry_store::{Change, GrantRecord, Object, ObjectKind, SubjectRecord, permission};

use super::shared::{actors_in_project, app, below_cap, del, project, room};
use super::{ControlService, convert};
use crate::pb;
use crate::sync::now_ms;
use crate::validate;

pub(crate) async fn create(svc: &ControlService, r: pb::CreateGrantRequest) -> Result<pb::Grant, Error> {
    create_with(svc, r, None, None).await
}

/// [`create`] with a free-form `role` and `metadata` (a JSON object as text; the REST API's).
pub(crate) async fn create_with(
    svc: &ControlService,
    r: pb::CreateGrantRequest,
    role: Option<String>,
    metadata: Option<String>,
) -> Result<pb::Grant, Error> {
    if let Some(role) = &role {
        validate::short_text("role", role, validate::MAX_ROLE_BYTES)?;
    }
    if let Some(m) = &metadata {
        validate::metadata("metadata", m)?;
    }
    validate::slug("room", &r.room)?;
    let subject = match (r.actor_id.is_empty(), r.actor_type.is_empty()) {
        (false, true) => {
            validate::slug("actor_id", &r.actor_id)?;
            SubjectRecord::Actor(r.actor_id.clone())
        }
        (true, false) => {
            validate::actor_type("actor_type", &r.actor_type)?;
            SubjectRecord::ActorType(r.actor_type.clone())
        }
        _ => return Err(Error::invalid_argument("give exactly one of actor_id and actor_type")),
    };
    if r.permission.is_empty() {
        return Err(Error::invalid_argument("permission is required: subscribe, publish or pubSub"));
    }
    permission(&r.permission).map_err(Error::invalid_argument)?;
    validate::slug_list("topics", &r.topics, validate::MAX_LIST_LEN)?;
    let now = now_ms();
    if r.expires_at != 0 && r.expires_at <= now / 1000 {
        return Err(Error::invalid_argument("expires_at is in the past"));
    }
    let id = format!("grant-{}", &uuid::Uuid::new_v4().simple().to_string()[..16]);
    let g = svc
        .mutate(|d| {
            let p = project(d, &r.project_id)?;
            let a = app(d, &p.id, &r.app)?;
            room(d, a, &r.room)?;
            actors_in_project(d, &p.id, std::slice::from_ref(&subject))?;
            if let Some(t) = r.topics.iter().find(|t| !a.topics.iter().any(|x| x.name == **t)) {
                return Err(Error::invalid_argument(format!("topic {t:?} is not one of app {:?}'s topics", a.slug)));
            }
            let count = d.grants.values().filter(|g| g.app == a.id && g.room == r.room).count();
            below_cap(
                format_args!("room {:?}", r.room),
                count,
                "grants",
                svc.limits.max_grants_per_room,
                &"max_grants_per_room",
            )?;
            let g = GrantRecord {
                id: id.clone(),
                project: p.id.clone(),
                app: a.id.clone(),
                room: r.room.clone(),
                subject: subject.clone(),
                permission: r.permission.clone(),
                topics: Some(r.topics.clone()).filter(|t| !t.is_empty()),
                expires_at: Some(r.expires_at).filter(|e| *e > 0),
                created_at_ms: now,
                role: role.clone().filter(|r| !r.is_empty()),
                metadata: metadata.clone(),
            };
            Ok((vec![Change::Put(Object::Grant(g.clone()))], g))
        })
        .await?;
    Ok(convert::grant(&g))
}

pub(crate) async fn list(svc: &ControlService, r: pb::ListGrantsRequest) -> Result<pb::ListGrantsResponse, Error> {
    let snap = svc.read().await;
    let d = &snap.data;
    let p = project(d, &r.project_id)?;
    let a = app(d, &p.id, &r.app)?;
    room(d, a, &r.room)?;
    let mut grants: Vec<&GrantRecord> = d.grants.values().filter(|g| g.app == a.id && g.room == r.room).collect();
    grants.sort_by_key(|g| (g.created_at_ms, g.id.clone()));
    Ok(pb::ListGrantsResponse { grants: grants.into_iter().map(convert::grant).collect() })
}

pub(crate) async fn delete(svc: &ControlService, r: pb::DeleteGrantRequest) -> Result<pb::DeleteResponse, Error> {
    validate::slug("grant_id", &r.grant_id)?;
    svc.mutate(|d| {
        if !d.grants.contains_key(&r.grant_id) {
            return Err(Error::not_found(format!("grant {:?} not found", r.grant_id)));
        }
        Ok((vec![del(ObjectKind::Grant, r.grant_id.clone())], ()))
    })
    .await?;
    Ok(pb::DeleteResponse { deleted: 1 })
}
