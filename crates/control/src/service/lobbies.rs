//! Lobbies of a project: create (over rooms of one app, for some actors or actor types),
//! get, list, set their rooms, delete.

use crate::service::Error;
use skua_core::RegistryData;
use skua_core::registry_store::{AppRecord, Change, LobbyRecord, Object, ObjectKind, SubjectRecord};

use super::shared::{actors_in_project, app, below_cap, del, lobby, project, room, room_key};
use super::{ControlService, convert};
use crate::pb;
use crate::validate;

/// The subjects a lobby admits: actors by id and actor types.
fn subjects(actors: &[String], types: &[String]) -> Result<Vec<SubjectRecord>, Error> {
    validate::slug_list("allowed_actors", actors, validate::MAX_LIST_LEN)?;
    validate::slug_list("allowed_actor_types", types, validate::MAX_LIST_LEN)?;
    let mut out: Vec<SubjectRecord> = actors.iter().cloned().map(SubjectRecord::Actor).collect();
    for t in types {
        validate::actor_type("allowed_actor_types", t)?;
        out.push(SubjectRecord::ActorType(t.clone()));
    }
    Ok(out)
}

/// A lobby's rooms: bounded, and each a room of `a`.
fn lobby_rooms(d: &RegistryData, a: &AppRecord, rooms: &[String]) -> Result<(), Error> {
    validate::slug_list("rooms", rooms, validate::MAX_LOBBY_ROOMS)?;
    for r in rooms {
        room(d, a, r)?;
    }
    Ok(())
}

pub(crate) async fn create(svc: &ControlService, r: pb::CreateLobbyRequest) -> Result<pb::Lobby, Error> {
    validate::slug("slug", &r.slug)?;
    let allowed = subjects(&r.allowed_actors, &r.allowed_actor_types)?;
    let l = svc
        .mutate(|d| {
            let p = project(d, &r.project_id)?;
            let a = app(d, &p.id, &r.app)?;
            if d.lobbies.contains_key(&(p.id.clone(), r.slug.clone())) {
                return Err(Error::already_exists(format!("lobby {:?} already exists in project {:?}", r.slug, p.id)));
            }
            let count = d.lobbies.values().filter(|l| l.project == p.id).count();
            below_cap(
                format_args!("project {:?}", p.id),
                count,
                "lobbies",
                svc.limits.max_lobbies_per_project,
                &"max_lobbies_per_project",
            )?;
            lobby_rooms(d, a, &r.rooms)?;
            actors_in_project(d, &p.id, &allowed)?;
            let l = LobbyRecord {
                project: p.id.clone(),
                slug: r.slug.clone(),
                app: a.id.clone(),
                rooms: r.rooms.clone(),
                allowed: allowed.clone(),
            };
            Ok((vec![Change::Put(Object::Lobby(l.clone()))], l))
        })
        .await?;
    Ok(convert::lobby(&l))
}

pub(crate) async fn get(svc: &ControlService, r: pb::GetLobbyRequest) -> Result<pb::Lobby, Error> {
    validate::slug("slug", &r.slug)?;
    let snap = svc.read().await;
    let p = project(&snap.data, &r.project_id)?;
    Ok(convert::lobby(lobby(&snap.data, &p.id, &r.slug)?))
}

pub(crate) async fn list(svc: &ControlService, r: pb::ListLobbiesRequest) -> Result<pb::ListLobbiesResponse, Error> {
    let snap = svc.read().await;
    let p = project(&snap.data, &r.project_id)?;
    let lobbies = snap.data.lobbies.values().filter(|l| l.project == p.id).map(convert::lobby).collect();
    Ok(pb::ListLobbiesResponse { lobbies })
}

pub(crate) async fn set_rooms(svc: &ControlService, r: pb::SetLobbyRoomsRequest) -> Result<pb::Lobby, Error> {
    validate::slug("slug", &r.slug)?;
    let l = svc
        .mutate(|d| {
            let p = project(d, &r.project_id)?;
            let mut l = lobby(d, &p.id, &r.slug)?.clone();
            let a = d.apps.get(&l.app).ok_or_else(|| Error::not_found(format!("app {:?} not found", l.app)))?;
            lobby_rooms(d, a, &r.rooms)?;
            l.rooms.clone_from(&r.rooms);
            Ok((vec![Change::Put(Object::Lobby(l.clone()))], l))
        })
        .await?;
    Ok(convert::lobby(&l))
}

pub(crate) async fn delete(svc: &ControlService, r: pb::DeleteLobbyRequest) -> Result<pb::DeleteResponse, Error> {
    validate::slug("slug", &r.slug)?;
    svc.mutate(|d| {
        let p = project(d, &r.project_id)?;
        lobby(d, &p.id, &r.slug)?;
        Ok((vec![del(ObjectKind::Lobby, room_key(&p.id, &r.slug))], ()))
    })
    .await?;
    Ok(pb::DeleteResponse { deleted: 1 })
}
