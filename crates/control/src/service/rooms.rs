//! Rooms of an app: create, ensure (auto-provisioning), get, list, update, delete (with
//! their grants, and out of every lobby).

use crate::service::Error;
use skua_core::RegistryData;
use skua_core::registry_store::{AppRecord, Change, Object, ProjectRecord, RoomRecord};

use super::annotations::AnnotationsUpdate;
use super::shared::{app, below_cap, delete_room_changes, deleted, deletes, name_or, page_after, project, room};
use super::{ControlService, convert};
use crate::pb;
use crate::sync::now_ms;
use crate::validate;

/// `app` may take one more room: its own cap, else `max_rooms_per_app`.
fn check_room_cap(svc: &ControlService, d: &RegistryData, a: &AppRecord) -> Result<(), Error> {
    let cap = a.max_rooms.unwrap_or(svc.limits.max_rooms_per_app);
    let count = d.rooms.range((a.id.clone(), String::new())..).take_while(|((app, _), _)| *app == a.id).count();
    below_cap(format_args!("app {:?}", a.slug), count, "rooms", cap, &cap)
}

/// What a new room is: its slug, display name (empty: the slug), kind and annotations.
struct NewRoom<'a> {
    slug: &'a str,
    name: &'a str,
    dynamic: bool,
    annotations: &'a AnnotationsUpdate,
}

/// The new room `n` of `a`.
fn new_room(p: &ProjectRecord, a: &AppRecord, n: &NewRoom<'_>, now: u64) -> RoomRecord {
    RoomRecord {
        project: p.id.clone(),
        app: a.id.clone(),
        slug: n.slug.to_owned(),
        name: name_or(n.name, n.slug),
        dynamic: n.dynamic,
        created_at_ms: now,
        annotations: n.annotations.record(),
    }
}

/// The reply for `room`, private when any grant names it.
fn reply(d: &RegistryData, room: &RoomRecord) -> pb::Room {
    convert::room(d, room, convert::is_private(d, room))
}

pub(crate) async fn create(svc: &ControlService, r: pb::CreateRoomRequest) -> Result<pb::Room, Error> {
    create_as(svc, r, false, &AnnotationsUpdate::default()).await
}

/// Creates a room, `dynamic` (the REST API's rooms, which may be deleted there) or static,
/// with `annotations`.
pub(crate) async fn create_as(
    svc: &ControlService,
    r: pb::CreateRoomRequest,
    dynamic: bool,
    annotations: &AnnotationsUpdate,
) -> Result<pb::Room, Error> {
    annotations.check()?;
    validate::slug("slug", &r.slug)?;
    validate::name("name", &r.name)?;
    let now = now_ms();
    let room = svc
        .mutate(|d| {
            let p = project(d, &r.project_id)?;
            let a = app(d, &p.id, &r.app)?;
            if d.rooms.contains_key(&(a.id.clone(), r.slug.clone())) {
                return Err(Error::already_exists(format!("room {:?} already exists in app {:?}", r.slug, a.slug)));
            }
            check_room_cap(svc, d, a)?;
            let room = new_room(p, a, &NewRoom { slug: &r.slug, name: &r.name, dynamic, annotations }, now);
            Ok((vec![Change::Put(Object::Room(room.clone()))], room))
        })
        .await?;
    Ok(convert::room(&svc.sync.snapshot().data, &room, false))
}

pub(crate) async fn ensure(svc: &ControlService, r: pb::EnsureRoomRequest) -> Result<pb::EnsureRoomResponse, Error> {
    ensure_annotated(svc, r, &AnnotationsUpdate::default()).await
}

/// [`ensure`], a room it creates getting `annotations` (an existing room keeps its own).
pub(crate) async fn ensure_annotated(
    svc: &ControlService,
    r: pb::EnsureRoomRequest,
    annotations: &AnnotationsUpdate,
) -> Result<pb::EnsureRoomResponse, Error> {
    annotations.check()?;
    validate::slug("slug", &r.slug)?;
    validate::name("name", &r.name)?;
    let now = now_ms();
    let (room, created) = svc
        .mutate(|d| {
            let p = project(d, &r.project_id)?;
            let a = app(d, &p.id, &r.app)?;
            if let Some(existing) = d.rooms.get(&(a.id.clone(), r.slug.clone())) {
                return Ok((Vec::new(), (existing.clone(), false)));
            }
            if !a.auto_provision_rooms {
                return Err(Error::failed_precondition(format!(
                    "app {:?} does not allow auto-provisioning rooms (auto_provision_rooms is off)",
                    a.slug
                )));
            }
            check_room_cap(svc, d, a)?;
            let room = new_room(p, a, &NewRoom { slug: &r.slug, name: &r.name, dynamic: true, annotations }, now);
            Ok((vec![Change::Put(Object::Room(room.clone()))], (room, true)))
        })
        .await?;
    Ok(pb::EnsureRoomResponse { room: Some(reply(&svc.sync.snapshot().data, &room)), created })
}

pub(crate) async fn get(svc: &ControlService, r: pb::GetRoomRequest) -> Result<pb::Room, Error> {
    let snap = svc.read().await;
    let p = project(&snap.data, &r.project_id)?;
    let a = app(&snap.data, &p.id, &r.app)?;
    Ok(reply(&snap.data, room(&snap.data, a, &r.slug)?))
}

pub(crate) async fn list(svc: &ControlService, r: pb::ListRoomsRequest) -> Result<pb::ListRoomsResponse, Error> {
    list_where(svc, r, |_| true).await
}

/// As [`list`], of the rooms `keep` accepts: the filter runs before paging, so the page token
/// continues the filtered list (the dashboard's search).
pub(crate) async fn list_where(
    svc: &ControlService,
    r: pb::ListRoomsRequest,
    keep: impl Fn(&RoomRecord) -> bool,
) -> Result<pb::ListRoomsResponse, Error> {
    let snap = svc.read().await;
    let d = &snap.data;
    let p = project(d, &r.project_id)?;
    let a = app(d, &p.id, &r.app)?;
    let private: std::collections::HashSet<&str> =
        d.grants.values().filter(|g| g.app == a.id).map(|g| g.room.as_str()).collect();
    let items = d
        .rooms
        .range((a.id.clone(), String::new())..)
        .take_while(|((app, _), _)| *app == a.id)
        .filter(|(_, room)| keep(room))
        .map(|((_, slug), room)| (slug.as_str(), room));
    let (page, next) = page_after(items, &r.page_token, svc.page_size(r.page_size))?;
    let rooms = page.into_iter().map(|room| convert::room(d, room, private.contains(room.slug.as_str()))).collect();
    Ok(pb::ListRoomsResponse { rooms, next_page_token: next })
}

/// Changes a room's description, external id or metadata (the REST API's `PATCH`).
pub(crate) async fn annotate(
    svc: &ControlService,
    r: &pb::GetRoomRequest,
    u: &AnnotationsUpdate,
) -> Result<pb::Room, Error> {
    u.check()?;
    let room = svc
        .mutate(|d| {
            let p = project(d, &r.project_id)?;
            let a = app(d, &p.id, &r.app)?;
            let mut room = room(d, a, &r.slug)?.clone();
            u.apply(&mut room.annotations);
            Ok((vec![Change::Put(Object::Room(room.clone()))], room))
        })
        .await?;
    Ok(reply(&svc.sync.snapshot().data, &room))
}

pub(crate) async fn update(svc: &ControlService, r: pb::UpdateRoomRequest) -> Result<pb::Room, Error> {
    if let Some(n) = &r.name {
        validate::name("name", n)?;
    }
    let room = svc
        .mutate(|d| {
            let p = project(d, &r.project_id)?;
            let a = app(d, &p.id, &r.app)?;
            let mut room = room(d, a, &r.slug)?.clone();
            if let Some(n) = &r.name {
                room.name.clone_from(n);
            }
            Ok((vec![Change::Put(Object::Room(room.clone()))], room))
        })
        .await?;
    Ok(reply(&svc.sync.snapshot().data, &room))
}

pub(crate) async fn delete(svc: &ControlService, r: pb::DeleteRoomRequest) -> Result<pb::DeleteResponse, Error> {
    let n = svc
        .mutate(|d| {
            let p = project(d, &r.project_id)?;
            let a = app(d, &p.id, &r.app)?;
            let room = room(d, a, &r.slug)?;
            let mut out = Vec::new();
            delete_room_changes(d, room, &mut out);
            let n = deletes(&out);
            Ok((out, n))
        })
        .await?;
    Ok(deleted(n))
}
