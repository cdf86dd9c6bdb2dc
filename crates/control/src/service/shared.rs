//! What several resources' RPCs share: looking records up (each miss a `NOT_FOUND` naming
//! it), the checks more than one RPC makes, the cascades a delete applies, and paging.

use crate::service::Error;
use skua_core::RegistryData;
use skua_core::registry_store::{
    ActorRecord, AppRecord, Change, LobbyRecord, Object, ObjectKey, ObjectKind, ProjectRecord, RoomRecord,
    SubjectRecord, TokenRecord,
};

use crate::pb;
use crate::validate;

/// The project a request names; empty = the only project.
pub(super) fn project<'a>(d: &'a RegistryData, id: &str) -> Result<&'a ProjectRecord, Error> {
    if id.is_empty() {
        let mut it = d.projects.values();
        return match (it.next(), it.next()) {
            (Some(p), None) => Ok(p),
            (None, _) => Err(Error::failed_precondition("no project exists yet; create one first")),
            _ => Err(Error::invalid_argument("project_id is required: there are several projects")),
        };
    }
    validate::slug("project_id", id)?;
    d.projects.get(id).ok_or_else(|| Error::not_found(format!("project {id:?} not found")))
}

/// An app of `project` by id or slug.
pub(super) fn app<'a>(d: &'a RegistryData, project: &str, app: &str) -> Result<&'a AppRecord, Error> {
    validate::slug("app", app)?;
    d.apps
        .get(app)
        .filter(|a| a.project == project)
        .or_else(|| d.apps.values().find(|a| a.project == project && a.slug == app))
        .ok_or_else(|| Error::not_found(format!("app {app:?} not found in project {project:?}")))
}

/// A room of `app`.
pub(super) fn room<'a>(d: &'a RegistryData, app: &AppRecord, slug: &str) -> Result<&'a RoomRecord, Error> {
    validate::slug("slug", slug)?;
    d.rooms
        .get(&(app.id.clone(), slug.to_owned()))
        .ok_or_else(|| Error::not_found(format!("room {slug:?} not found in app {:?}", app.slug)))
}

/// An actor by id.
pub(super) fn actor<'a>(d: &'a RegistryData, id: &str) -> Result<&'a ActorRecord, Error> {
    validate::slug("actor_id", id)?;
    d.actors.get(id).ok_or_else(|| Error::not_found(format!("actor {id:?} not found")))
}

/// A lobby of `project` (its slug already validated).
pub(super) fn lobby<'a>(d: &'a RegistryData, project: &str, slug: &str) -> Result<&'a LobbyRecord, Error> {
    d.lobbies
        .get(&(project.to_owned(), slug.to_owned()))
        .ok_or_else(|| Error::not_found(format!("lobby {slug:?} not found in project {project:?}")))
}

/// Every actor `subjects` names must exist in `project`.
pub(super) fn actors_in_project(d: &RegistryData, project: &str, subjects: &[SubjectRecord]) -> Result<(), Error> {
    for s in subjects {
        if let SubjectRecord::Actor(id) = s
            && d.actors.get(id).is_none_or(|a| a.project != project)
        {
            return Err(Error::not_found(format!("actor {id:?} not found in project {project:?}")));
        }
    }
    Ok(())
}

/// `FAILED_PRECONDITION` when `owner` already has `count` `what`, `cap` or more; `setting`
/// is how the message names the cap.
pub(super) fn below_cap(
    owner: std::fmt::Arguments<'_>,
    count: usize,
    what: &str,
    cap: u32,
    setting: &dyn std::fmt::Display,
) -> Result<(), Error> {
    if count >= cap as usize {
        return Err(Error::failed_precondition(format!("{owner} has {count} {what}, the most allowed ({setting})")));
    }
    Ok(())
}

/// A `jwt_secret` must fit in [`validate::MAX_SECRET_LEN`] bytes.
pub(super) fn check_secret(secret: &str) -> Result<(), Error> {
    if secret.len() > validate::MAX_SECRET_LEN {
        return Err(Error::invalid_argument(format!("jwt_secret is longer than {} bytes", validate::MAX_SECRET_LEN)));
    }
    Ok(())
}

/// `name`, or `fallback` when it is empty.
pub(super) fn name_or(name: &str, fallback: &str) -> String {
    if name.is_empty() { fallback } else { name }.to_owned()
}

/// `INTERNAL` for a record that no longer parses as the typed id it was stored as.
pub(super) fn internal(e: impl std::fmt::Display) -> Error {
    Error::internal(e.to_string())
}

/// The reply to a delete that removed `n` records.
pub(super) fn deleted(n: usize) -> pb::DeleteResponse {
    pb::DeleteResponse { deleted: u32::try_from(n).unwrap_or(u32::MAX) }
}

/// How many records `changes` delete.
pub(super) fn deletes(changes: &[Change]) -> usize {
    changes.iter().filter(|c| matches!(c, Change::Delete(_))).count()
}

/// Deletes the record `key` of `kind`.
pub(super) fn del(kind: ObjectKind, key: impl Into<String>) -> Change {
    Change::Delete(ObjectKey { kind, key: key.into() })
}

/// The store key of a room (`app/slug`) or a lobby (`project/slug`).
pub(super) fn room_key(owner: &str, slug: &str) -> String {
    format!("{owner}/{slug}")
}

/// Deletes a room with its grants and drops it from lobbies.
pub(super) fn delete_room_changes(d: &RegistryData, r: &RoomRecord, out: &mut Vec<Change>) {
    out.push(del(ObjectKind::Room, room_key(&r.app, &r.slug)));
    for g in d.grants.values().filter(|g| g.app == r.app && g.room == r.slug) {
        out.push(del(ObjectKind::Grant, g.id.clone()));
    }
    for l in d.lobbies.values().filter(|l| l.app == r.app && l.rooms.contains(&r.slug)) {
        let mut l = l.clone();
        l.rooms.retain(|x| *x != r.slug);
        out.push(Change::Put(Object::Lobby(l)));
    }
}

/// Deletes an app with its rooms, grants and lobbies.
pub(super) fn delete_app_changes(d: &RegistryData, a: &AppRecord, out: &mut Vec<Change>) {
    out.push(del(ObjectKind::App, a.id.clone()));
    for r in d.rooms.values().filter(|r| r.app == a.id) {
        out.push(del(ObjectKind::Room, room_key(&r.app, &r.slug)));
    }
    for g in d.grants.values().filter(|g| g.app == a.id) {
        out.push(del(ObjectKind::Grant, g.id.clone()));
    }
    for l in d.lobbies.values().filter(|l| l.app == a.id) {
        out.push(del(ObjectKind::Lobby, room_key(&l.project, &l.slug)));
    }
}

/// Deletes an actor with its tokens, its grants and its lobby allowances.
pub(super) fn delete_actor_changes(d: &RegistryData, a: &ActorRecord, out: &mut Vec<Change>) {
    out.push(del(ObjectKind::Actor, a.id.clone()));
    for t in d.tokens.values().filter(|t| t.actor == a.id) {
        out.push(del(ObjectKind::Token, t.key_id.clone()));
    }
    let me = SubjectRecord::Actor(a.id.clone());
    for g in d.grants.values().filter(|g| g.subject == me) {
        out.push(del(ObjectKind::Grant, g.id.clone()));
    }
    for l in d.lobbies.values().filter(|l| l.allowed.contains(&me)) {
        let mut l = l.clone();
        l.allowed.retain(|s| *s != me);
        out.push(Change::Put(Object::Lobby(l)));
    }
}

/// At most `size` of `items` (sorted by key) after the key `token`, and the token of the
/// next page (empty on the last).
pub(super) fn page_after<'a, T: 'a>(
    items: impl Iterator<Item = (&'a str, T)>,
    token: &str,
    size: usize,
) -> Result<(Vec<T>, String), Error> {
    if !token.is_empty() {
        validate::slug("page_token", token)?;
    }
    let mut out = Vec::new();
    let mut last = String::new();
    let mut more = false;
    for (key, item) in items.filter(|(k, _)| token.is_empty() || *k > token) {
        if out.len() == size {
            more = true;
            break;
        }
        last = key.to_owned();
        out.push(item);
    }
    Ok((out, if more { last } else { String::new() }))
}

/// A fresh access token `at_live_<keyId>.<secret>` and its stored record.
pub(super) fn new_token(actor: &str, now_ms: u64) -> (String, TokenRecord) {
    let key_id = uuid::Uuid::new_v4().simple().to_string()[..16].to_owned();
    // Two v4 UUIDs: 244 random bits from the OS generator.
    let secret = format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple());
    let token = format!("at_live_{key_id}.{secret}");
    let sha256 = skua_core::registry_store::hex(&skua_core::registry::digest(&token));
    (token, TokenRecord { key_id, actor: actor.to_owned(), sha256, created_at_ms: now_ms })
}
