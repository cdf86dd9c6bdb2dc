//! Projects: create, get, list, update, delete (with `force`, everything in them), and each
//! project's usage this month.

use crate::service::Error;
use skua_core::registry_store::{ActorRecord, AppRecord, Change, Object, ObjectKind, ProjectRecord, month_of};

use super::shared::{check_secret, del, delete_actor_changes, delete_app_changes, deleted, name_or, project, room_key};
use super::{ControlService, convert, unavailable};
use crate::pb;
use crate::sync::now_ms;
use crate::validate;

/// Per-project limits a request sets must be usable.
fn check_limits(l: &pb::ProjectLimits) -> Result<(), Error> {
    if l.max_message_size.is_some_and(|n| n == 0 || n as usize > skua_core_frame_cap()) {
        return Err(Error::invalid_argument(format!(
            "limits.max_message_size must be 1..={} bytes",
            skua_core_frame_cap()
        )));
    }
    if l.rate_limit == Some(0) {
        return Err(Error::invalid_argument("limits.rate_limit must be at least 1"));
    }
    Ok(())
}

/// The largest payload any frame may carry (as `--max-message-size`): the outbound frame
/// cap minus room for the frame's other fields (issue 12).
fn skua_core_frame_cap() -> usize {
    skua_protocol::MAX_PAYLOAD_CEILING_BYTES
}

/// A request naming a project by id must name one.
fn required(project_id: &str) -> Result<(), Error> {
    if project_id.is_empty() {
        return Err(Error::invalid_argument("project_id is required"));
    }
    Ok(())
}

/// Messages `project` has published this month.
async fn usage(svc: &ControlService, project: &str) -> Result<u64, Error> {
    svc.sync.store().usage(project, &month_of(now_ms() / 1000)).await.map_err(|e| unavailable(&e))
}

pub(crate) async fn create(svc: &ControlService, r: pb::CreateProjectRequest) -> Result<pb::Project, Error> {
    validate::slug("id", &r.id)?;
    validate::name("name", &r.name)?;
    check_secret(&r.jwt_secret)?;
    if let Some(l) = &r.limits {
        check_limits(l)?;
    }
    let now = now_ms();
    let record = ProjectRecord {
        id: r.id.clone(),
        name: name_or(&r.name, &r.id),
        jwt_secret: Some(r.jwt_secret.clone()).filter(|s| !s.is_empty()),
        wake_secret: None,
        limits: convert::limits_record(r.limits.as_ref()),
        created_at_ms: now,
    };
    let p = svc
        .mutate(|d| {
            if d.projects.contains_key(&r.id) {
                return Err(Error::already_exists(format!("project {:?} already exists", r.id)));
            }
            Ok((vec![Change::Put(Object::Project(record.clone()))], record.clone()))
        })
        .await?;
    Ok(convert::project(&p, 0))
}

pub(crate) async fn get(svc: &ControlService, r: pb::GetProjectRequest) -> Result<pb::Project, Error> {
    required(&r.project_id)?;
    let snap = svc.read().await;
    let p = project(&snap.data, &r.project_id)?;
    Ok(convert::project(p, usage(svc, &p.id).await?))
}

pub(crate) async fn list(svc: &ControlService, _r: pb::ListProjectsRequest) -> Result<pb::ListProjectsResponse, Error> {
    let snap = svc.read().await;
    let period = month_of(now_ms() / 1000);
    let mut projects = Vec::with_capacity(snap.data.projects.len());
    for p in snap.data.projects.values() {
        let used = svc.sync.store().usage(&p.id, &period).await.map_err(|e| unavailable(&e))?;
        projects.push(convert::project(p, used));
    }
    Ok(pb::ListProjectsResponse { projects })
}

pub(crate) async fn update(svc: &ControlService, r: pb::UpdateProjectRequest) -> Result<pb::Project, Error> {
    required(&r.project_id)?;
    if let Some(n) = &r.name {
        validate::name("name", n)?;
    }
    if let Some(s) = &r.jwt_secret {
        check_secret(s)?;
    }
    if let Some(l) = &r.limits {
        check_limits(l)?;
    }
    let p = svc
        .mutate(|d| {
            let mut p = project(d, &r.project_id)?.clone();
            if let Some(n) = &r.name {
                p.name.clone_from(n);
            }
            if let Some(s) = &r.jwt_secret {
                p.jwt_secret = Some(s.clone()).filter(|s| !s.is_empty());
            }
            if let Some(l) = &r.limits {
                p.limits = convert::limits_record(Some(l));
            }
            Ok((vec![Change::Put(Object::Project(p.clone()))], p))
        })
        .await?;
    Ok(convert::project(&p, usage(svc, &p.id).await?))
}

pub(crate) async fn delete(svc: &ControlService, r: pb::DeleteProjectRequest) -> Result<pb::DeleteResponse, Error> {
    required(&r.project_id)?;
    let n = svc
        .mutate(|d| {
            let p = project(d, &r.project_id)?;
            let apps: Vec<&AppRecord> = d.apps.values().filter(|a| a.project == p.id).collect();
            let actors: Vec<&ActorRecord> = d.actors.values().filter(|a| a.project == p.id).collect();
            if !r.force && (!apps.is_empty() || !actors.is_empty()) {
                return Err(Error::failed_precondition(format!(
                    "project {:?} still has {} apps and {} actors; delete them first or pass force",
                    p.id,
                    apps.len(),
                    actors.len()
                )));
            }
            let mut out = vec![del(ObjectKind::Project, p.id.clone())];
            for a in apps {
                delete_app_changes(d, a, &mut out);
            }
            for a in actors {
                delete_actor_changes(d, a, &mut out);
            }
            for l in d.lobbies.values().filter(|l| l.project == p.id) {
                out.push(del(ObjectKind::Lobby, room_key(&l.project, &l.slug)));
            }
            for k in d.api_keys.values().filter(|k| k.project == p.id) {
                out.push(del(ObjectKind::ApiKey, k.key_id.clone()));
            }
            // After the actors that named them.
            for s in d.scopes.values().filter(|s| s.project == p.id) {
                out.push(del(ObjectKind::Scope, s.id.clone()));
            }
            // Applied in order: lobbies re-written when an actor goes are deleted last.
            let n = out
                .iter()
                .filter_map(|c| if let Change::Delete(k) = c { Some(k) } else { None })
                .collect::<std::collections::BTreeSet<_>>()
                .len();
            Ok((out, n))
        })
        .await?;
    Ok(deleted(n))
}

/// Replaces the project's wake secret (N47) and returns it, this once.
pub(crate) async fn rotate_wake_secret(
    svc: &ControlService,
    r: pb::RotateWakeSecretRequest,
) -> Result<pb::Project, Error> {
    let secret = crate::webhooks::new_secret();
    let p = svc
        .mutate(|d| {
            let mut p = project(d, &r.project_id)?.clone();
            p.wake_secret = Some(secret.clone());
            Ok((vec![Change::Put(Object::Project(p.clone()))], p))
        })
        .await?;
    tracing::info!(project = %p.id, "Wake secret rotated.");
    let used = usage(svc, &p.id).await.unwrap_or(0);
    Ok(pb::Project { wake_secret: secret, ..convert::project(&p, used) })
}
