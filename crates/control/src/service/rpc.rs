//! The RPC handlers of `skua.control.v1.Control`.

use skua_core::registry_store::{
    ActorRecord, AppRecord, Change, GrantRecord, LobbyRecord, Object, ObjectKey, ObjectKind, ProjectRecord, RoomRecord,
    SubjectRecord, month_of, permission,
};
use skua_core::{ActorId, AppId, ProjectId, RegistryData, RoomKey, TopicAddress};
use tonic::{Request, Response, Status};

use super::{ControlService, actor, app, convert, new_token, project, room, unavailable};
use crate::pb;
use crate::sync::{ServerPublish, now_ms};
use crate::validate;

type Reply<T> = Result<Response<T>, Status>;

fn del(kind: ObjectKind, key: impl Into<String>) -> Change {
    Change::Delete(ObjectKey { kind, key: key.into() })
}

fn room_key(app: &str, slug: &str) -> String {
    format!("{app}/{slug}")
}

/// Deletes a room with its grants and drops it from lobbies.
fn delete_room_changes(d: &RegistryData, r: &RoomRecord, out: &mut Vec<Change>) {
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
fn delete_app_changes(d: &RegistryData, a: &AppRecord, out: &mut Vec<Change>) {
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
fn delete_actor_changes(d: &RegistryData, a: &ActorRecord, out: &mut Vec<Change>) {
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

fn check_limits(l: &pb::ProjectLimits) -> Result<(), Status> {
    if l.max_message_size.is_some_and(|n| n == 0 || n as usize > skua_core_frame_cap()) {
        return Err(Status::invalid_argument(format!(
            "limits.max_message_size must be 1..={} bytes",
            skua_core_frame_cap()
        )));
    }
    if l.rate_limit == Some(0) {
        return Err(Status::invalid_argument("limits.rate_limit must be at least 1"));
    }
    Ok(())
}

/// The largest payload any frame may carry (as `--max-message-size`): the outbound frame
/// cap minus room for the frame's other fields (issue 12).
fn skua_core_frame_cap() -> usize {
    skua_protocol::MAX_PAYLOAD_CEILING_BYTES
}

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

fn subjects(actors: &[String], types: &[String]) -> Result<Vec<SubjectRecord>, Status> {
    validate::slug_list("allowed_actors", actors, validate::MAX_LIST_LEN)?;
    validate::slug_list("allowed_actor_types", types, validate::MAX_LIST_LEN)?;
    let mut out: Vec<SubjectRecord> = actors.iter().cloned().map(SubjectRecord::Actor).collect();
    for t in types {
        validate::actor_type("allowed_actor_types", t)?;
        out.push(SubjectRecord::ActorType(t.clone()));
    }
    Ok(out)
}

fn lobby_rooms(d: &RegistryData, a: &AppRecord, rooms: &[String]) -> Result<(), Status> {
    validate::slug_list("rooms", rooms, validate::MAX_LOBBY_ROOMS)?;
    for r in rooms {
        room(d, a, r)?;
    }
    Ok(())
}

fn lobby_actors(d: &RegistryData, project: &str, allowed: &[SubjectRecord]) -> Result<(), Status> {
    for s in allowed {
        if let SubjectRecord::Actor(id) = s
            && d.actors.get(id).is_none_or(|a| a.project != project)
        {
            return Err(Status::not_found(format!("actor {id:?} not found in project {project:?}")));
        }
    }
    Ok(())
}

fn page_after<'a, T: 'a>(
    items: impl Iterator<Item = (&'a str, T)>,
    token: &str,
    size: usize,
) -> Result<(Vec<T>, String), Status> {
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

/// Whether `filter` may be a publish filter key (N12: non-empty, none of `/ # + |`).
fn valid_filter(filter: &str) -> bool {
    !filter.is_empty() && filter.len() <= 256 && !filter.chars().any(|c| matches!(c, '/' | '#' | '+' | '|'))
}

/// Whether `data` is exactly one MessagePack value (it is forwarded verbatim inside frames).
fn is_one_msgpack_value(data: &[u8]) -> bool {
    let mut rest = data;
    rmpv::decode::read_value(&mut rest).is_ok() && rest.is_empty()
}

#[tonic::async_trait]
impl pb::control_server::Control for ControlService {
    async fn create_project(&self, req: Request<pb::CreateProjectRequest>) -> Reply<pb::Project> {
        let r = req.into_inner();
        validate::slug("id", &r.id)?;
        validate::name("name", &r.name)?;
        if r.jwt_secret.len() > validate::MAX_SECRET_LEN {
            return Err(Status::invalid_argument(format!(
                "jwt_secret is longer than {} bytes",
                validate::MAX_SECRET_LEN
            )));
        }
        if let Some(l) = &r.limits {
            check_limits(l)?;
        }
        let now = now_ms();
        let record = ProjectRecord {
            id: r.id.clone(),
            name: if r.name.is_empty() { r.id.clone() } else { r.name.clone() },
            jwt_secret: Some(r.jwt_secret.clone()).filter(|s| !s.is_empty()),
            limits: convert::limits_record(r.limits.as_ref()),
            created_at_ms: now,
        };
        let p = self
            .mutate(|d| {
                if d.projects.contains_key(&r.id) {
                    return Err(Status::already_exists(format!("project {:?} already exists", r.id)));
                }
                Ok((vec![Change::Put(Object::Project(record.clone()))], record.clone()))
            })
            .await?;
        Ok(Response::new(convert::project(&p, 0)))
    }

    async fn get_project(&self, req: Request<pb::GetProjectRequest>) -> Reply<pb::Project> {
        let r = req.into_inner();
        if r.project_id.is_empty() {
            return Err(Status::invalid_argument("project_id is required"));
        }
        let snap = self.read().await;
        let p = project(&snap.data, &r.project_id)?;
        let used = self.sync.store().usage(&p.id, &month_of(now_ms() / 1000)).await.map_err(|e| unavailable(&e))?;
        Ok(Response::new(convert::project(p, used)))
    }

    async fn list_projects(&self, _req: Request<pb::ListProjectsRequest>) -> Reply<pb::ListProjectsResponse> {
        let snap = self.read().await;
        let period = month_of(now_ms() / 1000);
        let mut projects = Vec::with_capacity(snap.data.projects.len());
        for p in snap.data.projects.values() {
            let used = self.sync.store().usage(&p.id, &period).await.map_err(|e| unavailable(&e))?;
            projects.push(convert::project(p, used));
        }
        Ok(Response::new(pb::ListProjectsResponse { projects }))
    }

    async fn update_project(&self, req: Request<pb::UpdateProjectRequest>) -> Reply<pb::Project> {
        let r = req.into_inner();
        if r.project_id.is_empty() {
            return Err(Status::invalid_argument("project_id is required"));
        }
        if let Some(n) = &r.name {
            validate::name("name", n)?;
        }
        if r.jwt_secret.as_ref().is_some_and(|s| s.len() > validate::MAX_SECRET_LEN) {
            return Err(Status::invalid_argument(format!(
                "jwt_secret is longer than {} bytes",
                validate::MAX_SECRET_LEN
            )));
        }
        if let Some(l) = &r.limits {
            check_limits(l)?;
        }
        let p = self
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
        let used = self.sync.store().usage(&p.id, &month_of(now_ms() / 1000)).await.map_err(|e| unavailable(&e))?;
        Ok(Response::new(convert::project(&p, used)))
    }

    async fn delete_project(&self, req: Request<pb::DeleteProjectRequest>) -> Reply<pb::DeleteResponse> {
        let r = req.into_inner();
        if r.project_id.is_empty() {
            return Err(Status::invalid_argument("project_id is required"));
        }
        let deleted = self
            .mutate(|d| {
                let p = project(d, &r.project_id)?;
                let apps: Vec<&AppRecord> = d.apps.values().filter(|a| a.project == p.id).collect();
                let actors: Vec<&ActorRecord> = d.actors.values().filter(|a| a.project == p.id).collect();
                if !r.force && (!apps.is_empty() || !actors.is_empty()) {
                    return Err(Status::failed_precondition(format!(
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
                // Applied in order: lobbies re-written when an actor goes are deleted last.
                let n = out
                    .iter()
                    .filter_map(|c| if let Change::Delete(k) = c { Some(k) } else { None })
                    .collect::<std::collections::BTreeSet<_>>()
                    .len();
                Ok((out, n))
            })
            .await?;
        Ok(Response::new(pb::DeleteResponse { deleted: u32::try_from(deleted).unwrap_or(u32::MAX) }))
    }

    async fn create_app(&self, req: Request<pb::CreateAppRequest>) -> Reply<pb::App> {
        let r = req.into_inner();
        validate::slug("slug", &r.slug)?;
        if !r.id.is_empty() {
            validate::slug("id", &r.id)?;
        }
        validate::name("name", &r.name)?;
        check_topics(&r.topics)?;
        let now = now_ms();
        let (snap, a) = {
            let a = self
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
                        return Err(Status::already_exists(format!(
                            "app {:?} already exists in project {:?}",
                            r.slug, p.id
                        )));
                    }
                    let count = d.apps.values().filter(|a| a.project == p.id).count();
                    if count >= self.limits.max_apps_per_project as usize {
                        return Err(Status::failed_precondition(format!(
                            "project {:?} has {count} apps, the most allowed (max_apps_per_project)",
                            p.id
                        )));
                    }
                    let a = AppRecord {
                        project: p.id.clone(),
                        id,
                        slug: r.slug.clone(),
                        name: if r.name.is_empty() { r.slug.clone() } else { r.name.clone() },
                        topics: r.topics.iter().map(convert::topic_record).collect(),
                        auto_provision_rooms: r.auto_provision_rooms,
                        max_rooms: Some(r.max_rooms).filter(|n| *n > 0),
                        created_at_ms: now,
                    };
                    Ok((vec![Change::Put(Object::App(a.clone()))], a))
                })
                .await?;
            (self.sync.snapshot(), a)
        };
        Ok(Response::new(convert::app(&snap.data, &a)))
    }

    async fn get_app(&self, req: Request<pb::GetAppRequest>) -> Reply<pb::App> {
        let r = req.into_inner();
        let snap = self.read().await;
        let p = project(&snap.data, &r.project_id)?;
        let a = app(&snap.data, &p.id, &r.app)?;
        Ok(Response::new(convert::app(&snap.data, a)))
    }

    async fn list_apps(&self, req: Request<pb::ListAppsRequest>) -> Reply<pb::ListAppsResponse> {
        let r = req.into_inner();
        let snap = self.read().await;
        let p = project(&snap.data, &r.project_id)?;
        let mut apps: Vec<&AppRecord> = snap.data.apps.values().filter(|a| a.project == p.id).collect();
        apps.sort_by_key(|a| (a.created_at_ms, a.id.clone()));
        Ok(Response::new(pb::ListAppsResponse {
            apps: apps.into_iter().map(|a| convert::app(&snap.data, a)).collect(),
        }))
    }

    async fn update_app(&self, req: Request<pb::UpdateAppRequest>) -> Reply<pb::App> {
        let r = req.into_inner();
        if let Some(n) = &r.name {
            validate::name("name", n)?;
        }
        if let Some(t) = &r.topics {
            check_topics(&t.topics)?;
        }
        let a = self
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
        Ok(Response::new(convert::app(&self.sync.snapshot().data, &a)))
    }

    async fn delete_app(&self, req: Request<pb::DeleteAppRequest>) -> Reply<pb::DeleteResponse> {
        let r = req.into_inner();
        let n = self
            .mutate(|d| {
                let p = project(d, &r.project_id)?;
                let a = app(d, &p.id, &r.app)?;
                let mut out = Vec::new();
                delete_app_changes(d, a, &mut out);
                let n = out.len();
                Ok((out, n))
            })
            .await?;
        Ok(Response::new(pb::DeleteResponse { deleted: u32::try_from(n).unwrap_or(u32::MAX) }))
    }

    async fn create_room(&self, req: Request<pb::CreateRoomRequest>) -> Reply<pb::Room> {
        let r = req.into_inner();
        validate::slug("slug", &r.slug)?;
        validate::name("name", &r.name)?;
        let now = now_ms();
        let room = self
            .mutate(|d| {
                let p = project(d, &r.project_id)?;
                let a = app(d, &p.id, &r.app)?;
                if d.rooms.contains_key(&(a.id.clone(), r.slug.clone())) {
                    return Err(Status::already_exists(format!(
                        "room {:?} already exists in app {:?}",
                        r.slug, a.slug
                    )));
                }
                self.check_room_cap(d, a)?;
                let room = RoomRecord {
                    project: p.id.clone(),
                    app: a.id.clone(),
                    slug: r.slug.clone(),
                    name: if r.name.is_empty() { r.slug.clone() } else { r.name.clone() },
                    dynamic: false,
                    created_at_ms: now,
                };
                Ok((vec![Change::Put(Object::Room(room.clone()))], room))
            })
            .await?;
        Ok(Response::new(convert::room(&self.sync.snapshot().data, &room, false)))
    }

    async fn ensure_room(&self, req: Request<pb::EnsureRoomRequest>) -> Reply<pb::EnsureRoomResponse> {
        let r = req.into_inner();
        validate::slug("slug", &r.slug)?;
        validate::name("name", &r.name)?;
        let now = now_ms();
        let (room, created) = self
            .mutate(|d| {
                let p = project(d, &r.project_id)?;
                let a = app(d, &p.id, &r.app)?;
                if let Some(existing) = d.rooms.get(&(a.id.clone(), r.slug.clone())) {
                    return Ok((Vec::new(), (existing.clone(), false)));
                }
                if !a.auto_provision_rooms {
                    return Err(Status::failed_precondition(format!(
                        "app {:?} does not allow auto-provisioning rooms (auto_provision_rooms is off)",
                        a.slug
                    )));
                }
                self.check_room_cap(d, a)?;
                let room = RoomRecord {
                    project: p.id.clone(),
                    app: a.id.clone(),
                    slug: r.slug.clone(),
                    name: if r.name.is_empty() { r.slug.clone() } else { r.name.clone() },
                    dynamic: true,
                    created_at_ms: now,
                };
                Ok((vec![Change::Put(Object::Room(room.clone()))], (room, true)))
            })
            .await?;
        let snap = self.sync.snapshot();
        let private = convert::is_private(&snap.data, &room);
        Ok(Response::new(pb::EnsureRoomResponse { room: Some(convert::room(&snap.data, &room, private)), created }))
    }

    async fn get_room(&self, req: Request<pb::GetRoomRequest>) -> Reply<pb::Room> {
        let r = req.into_inner();
        let snap = self.read().await;
        let p = project(&snap.data, &r.project_id)?;
        let a = app(&snap.data, &p.id, &r.app)?;
        let room = room(&snap.data, a, &r.slug)?;
        Ok(Response::new(convert::room(&snap.data, room, convert::is_private(&snap.data, room))))
    }

    async fn list_rooms(&self, req: Request<pb::ListRoomsRequest>) -> Reply<pb::ListRoomsResponse> {
        let r = req.into_inner();
        let snap = self.read().await;
        let d = &snap.data;
        let p = project(d, &r.project_id)?;
        let a = app(d, &p.id, &r.app)?;
        let private: std::collections::HashSet<&str> =
            d.grants.values().filter(|g| g.app == a.id).map(|g| g.room.as_str()).collect();
        let items = d
            .rooms
            .range((a.id.clone(), String::new())..)
            .take_while(|((app, _), _)| *app == a.id)
            .map(|((_, slug), room)| (slug.as_str(), room));
        let (page, next) = page_after(items, &r.page_token, self.page_size(r.page_size))?;
        let rooms = page.into_iter().map(|room| convert::room(d, room, private.contains(room.slug.as_str()))).collect();
        Ok(Response::new(pb::ListRoomsResponse { rooms, next_page_token: next }))
    }

    async fn update_room(&self, req: Request<pb::UpdateRoomRequest>) -> Reply<pb::Room> {
        let r = req.into_inner();
        if let Some(n) = &r.name {
            validate::name("name", n)?;
        }
        let room = self
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
        let snap = self.sync.snapshot();
        Ok(Response::new(convert::room(&snap.data, &room, convert::is_private(&snap.data, &room))))
    }

    async fn delete_room(&self, req: Request<pb::DeleteRoomRequest>) -> Reply<pb::DeleteResponse> {
        let r = req.into_inner();
        let n = self
            .mutate(|d| {
                let p = project(d, &r.project_id)?;
                let a = app(d, &p.id, &r.app)?;
                let room = room(d, a, &r.slug)?;
                let mut out = Vec::new();
                delete_room_changes(d, room, &mut out);
                let n = out.iter().filter(|c| matches!(c, Change::Delete(_))).count();
                Ok((out, n))
            })
            .await?;
        Ok(Response::new(pb::DeleteResponse { deleted: u32::try_from(n).unwrap_or(u32::MAX) }))
    }

    async fn create_actor(&self, req: Request<pb::CreateActorRequest>) -> Reply<pb::CreateActorResponse> {
        let r = req.into_inner();
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
        let a = self
            .mutate(|d| {
                let p = project(d, &r.project_id)?;
                if d.actors.contains_key(&id) {
                    return Err(Status::already_exists(format!("actor {id:?} already exists")));
                }
                let count = d.actors.values().filter(|a| a.project == p.id).count();
                if count >= self.limits.max_actors_per_project as usize {
                    return Err(Status::failed_precondition(format!(
                        "project {:?} has {count} actors, the most allowed (max_actors_per_project)",
                        p.id
                    )));
                }
                let a = ActorRecord {
                    project: p.id.clone(),
                    id: id.clone(),
                    actor_type: r.actor_type.clone(),
                    name: if r.name.is_empty() { id.clone() } else { r.name.clone() },
                    active: true,
                    rate_limit: Some(r.rate_limit).filter(|n| *n > 0),
                    disconnect_before_ms: None,
                    created_at_ms: now,
                };
                Ok((vec![Change::Put(Object::Actor(a.clone())), Change::Put(Object::Token(token_record.clone()))], a))
            })
            .await?;
        let snap = self.sync.snapshot();
        Ok(Response::new(pb::CreateActorResponse {
            actor: Some(convert::actor(&snap.data, &a)),
            access_token: token,
            token_key_id: token_record.key_id.clone(),
        }))
    }

    async fn get_actor(&self, req: Request<pb::GetActorRequest>) -> Reply<pb::Actor> {
        let r = req.into_inner();
        let snap = self.read().await;
        Ok(Response::new(convert::actor(&snap.data, actor(&snap.data, &r.actor_id)?)))
    }

    async fn list_actors(&self, req: Request<pb::ListActorsRequest>) -> Reply<pb::ListActorsResponse> {
        let r = req.into_inner();
        let snap = self.read().await;
        let d = &snap.data;
        let p = project(d, &r.project_id)?;
        let items = d.actors.iter().filter(|(_, a)| a.project == p.id).map(|(id, a)| (id.as_str(), a));
        let (page, next) = page_after(items, &r.page_token, self.page_size(r.page_size))?;
        Ok(Response::new(pb::ListActorsResponse {
            actors: page.into_iter().map(|a| convert::actor(d, a)).collect(),
            next_page_token: next,
        }))
    }

    async fn deactivate_actor(&self, req: Request<pb::ActorRef>) -> Reply<pb::Actor> {
        self.set_active(&req.into_inner().actor_id, false).await
    }

    async fn activate_actor(&self, req: Request<pb::ActorRef>) -> Reply<pb::Actor> {
        self.set_active(&req.into_inner().actor_id, true).await
    }

    async fn delete_actor(&self, req: Request<pb::ActorRef>) -> Reply<pb::DeleteResponse> {
        let r = req.into_inner();
        let n = self
            .mutate(|d| {
                let a = actor(d, &r.actor_id)?;
                let mut out = Vec::new();
                delete_actor_changes(d, a, &mut out);
                let n = out.iter().filter(|c| matches!(c, Change::Delete(_))).count();
                Ok((out, n))
            })
            .await?;
        Ok(Response::new(pb::DeleteResponse { deleted: u32::try_from(n).unwrap_or(u32::MAX) }))
    }

    async fn rotate_actor_token(&self, req: Request<pb::ActorRef>) -> Reply<pb::CreateActorResponse> {
        let r = req.into_inner();
        validate::slug("actor_id", &r.actor_id)?;
        let (token, record) = new_token(&r.actor_id, now_ms());
        let a = self
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
        let snap = self.sync.snapshot();
        Ok(Response::new(pb::CreateActorResponse {
            actor: Some(convert::actor(&snap.data, &a)),
            access_token: token,
            token_key_id: record.key_id.clone(),
        }))
    }

    async fn create_grant(&self, req: Request<pb::CreateGrantRequest>) -> Reply<pb::Grant> {
        let r = req.into_inner();
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
            _ => return Err(Status::invalid_argument("give exactly one of actor_id and actor_type")),
        };
        if r.permission.is_empty() {
            return Err(Status::invalid_argument("permission is required: subscribe, publish or pubSub"));
        }
        permission(&r.permission).map_err(Status::invalid_argument)?;
        validate::slug_list("topics", &r.topics, validate::MAX_LIST_LEN)?;
        let now = now_ms();
        if r.expires_at != 0 && r.expires_at <= now / 1000 {
            return Err(Status::invalid_argument("expires_at is in the past"));
        }
        let id = format!("grant-{}", &uuid::Uuid::new_v4().simple().to_string()[..16]);
        let g = self
            .mutate(|d| {
                let p = project(d, &r.project_id)?;
                let a = app(d, &p.id, &r.app)?;
                room(d, a, &r.room)?;
                if let SubjectRecord::Actor(id) = &subject
                    && d.actors.get(id).is_none_or(|x| x.project != p.id)
                {
                    return Err(Status::not_found(format!("actor {id:?} not found in project {:?}", p.id)));
                }
                if let Some(t) = r.topics.iter().find(|t| !a.topics.iter().any(|x| x.name == **t)) {
                    return Err(Status::invalid_argument(format!(
                        "topic {t:?} is not one of app {:?}'s topics",
                        a.slug
                    )));
                }
                let count = d.grants.values().filter(|g| g.app == a.id && g.room == r.room).count();
                if count >= self.limits.max_grants_per_room as usize {
                    return Err(Status::failed_precondition(format!(
                        "room {:?} has {count} grants, the most allowed (max_grants_per_room)",
                        r.room
                    )));
                }
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
                };
                Ok((vec![Change::Put(Object::Grant(g.clone()))], g))
            })
            .await?;
        Ok(Response::new(convert::grant(&g)))
    }

    async fn list_grants(&self, req: Request<pb::ListGrantsRequest>) -> Reply<pb::ListGrantsResponse> {
        let r = req.into_inner();
        let snap = self.read().await;
        let d = &snap.data;
        let p = project(d, &r.project_id)?;
        let a = app(d, &p.id, &r.app)?;
        room(d, a, &r.room)?;
        let mut grants: Vec<&GrantRecord> = d.grants.values().filter(|g| g.app == a.id && g.room == r.room).collect();
        grants.sort_by_key(|g| (g.created_at_ms, g.id.clone()));
        Ok(Response::new(pb::ListGrantsResponse { grants: grants.into_iter().map(convert::grant).collect() }))
    }

    async fn delete_grant(&self, req: Request<pb::DeleteGrantRequest>) -> Reply<pb::DeleteResponse> {
        let r = req.into_inner();
        validate::slug("grant_id", &r.grant_id)?;
        self.mutate(|d| {
            if !d.grants.contains_key(&r.grant_id) {
                return Err(Status::not_found(format!("grant {:?} not found", r.grant_id)));
            }
            Ok((vec![del(ObjectKind::Grant, r.grant_id.clone())], ()))
        })
        .await?;
        Ok(Response::new(pb::DeleteResponse { deleted: 1 }))
    }

    async fn create_lobby(&self, req: Request<pb::CreateLobbyRequest>) -> Reply<pb::Lobby> {
        let r = req.into_inner();
        validate::slug("slug", &r.slug)?;
        let allowed = subjects(&r.allowed_actors, &r.allowed_actor_types)?;
        let l = self
            .mutate(|d| {
                let p = project(d, &r.project_id)?;
                let a = app(d, &p.id, &r.app)?;
                if d.lobbies.contains_key(&(p.id.clone(), r.slug.clone())) {
                    return Err(Status::already_exists(format!(
                        "lobby {:?} already exists in project {:?}",
                        r.slug, p.id
                    )));
                }
                let count = d.lobbies.values().filter(|l| l.project == p.id).count();
                if count >= self.limits.max_lobbies_per_project as usize {
                    return Err(Status::failed_precondition(format!(
                        "project {:?} has {count} lobbies, the most allowed (max_lobbies_per_project)",
                        p.id
                    )));
                }
                lobby_rooms(d, a, &r.rooms)?;
                lobby_actors(d, &p.id, &allowed)?;
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
        Ok(Response::new(convert::lobby(&l)))
    }

    async fn get_lobby(&self, req: Request<pb::GetLobbyRequest>) -> Reply<pb::Lobby> {
        let r = req.into_inner();
        validate::slug("slug", &r.slug)?;
        let snap = self.read().await;
        let p = project(&snap.data, &r.project_id)?;
        let l = snap
            .data
            .lobbies
            .get(&(p.id.clone(), r.slug.clone()))
            .ok_or_else(|| Status::not_found(format!("lobby {:?} not found in project {:?}", r.slug, p.id)))?;
        Ok(Response::new(convert::lobby(l)))
    }

    async fn list_lobbies(&self, req: Request<pb::ListLobbiesRequest>) -> Reply<pb::ListLobbiesResponse> {
        let r = req.into_inner();
        let snap = self.read().await;
        let p = project(&snap.data, &r.project_id)?;
        let lobbies = snap.data.lobbies.values().filter(|l| l.project == p.id).map(convert::lobby).collect();
        Ok(Response::new(pb::ListLobbiesResponse { lobbies }))
    }

    async fn set_lobby_rooms(&self, req: Request<pb::SetLobbyRoomsRequest>) -> Reply<pb::Lobby> {
        let r = req.into_inner();
        validate::slug("slug", &r.slug)?;
        let l = self
            .mutate(|d| {
                let p = project(d, &r.project_id)?;
                let mut l = d
                    .lobbies
                    .get(&(p.id.clone(), r.slug.clone()))
                    .ok_or_else(|| Status::not_found(format!("lobby {:?} not found in project {:?}", r.slug, p.id)))?
                    .clone();
                let a = d.apps.get(&l.app).ok_or_else(|| Status::not_found(format!("app {:?} not found", l.app)))?;
                lobby_rooms(d, a, &r.rooms)?;
                l.rooms.clone_from(&r.rooms);
                Ok((vec![Change::Put(Object::Lobby(l.clone()))], l))
            })
            .await?;
        Ok(Response::new(convert::lobby(&l)))
    }

    async fn delete_lobby(&self, req: Request<pb::DeleteLobbyRequest>) -> Reply<pb::DeleteResponse> {
        let r = req.into_inner();
        validate::slug("slug", &r.slug)?;
        self.mutate(|d| {
            let p = project(d, &r.project_id)?;
            if !d.lobbies.contains_key(&(p.id.clone(), r.slug.clone())) {
                return Err(Status::not_found(format!("lobby {:?} not found in project {:?}", r.slug, p.id)));
            }
            Ok((vec![del(ObjectKind::Lobby, room_key(&p.id, &r.slug))], ()))
        })
        .await?;
        Ok(Response::new(pb::DeleteResponse { deleted: 1 }))
    }

    async fn publish(&self, req: Request<pb::PublishRequest>) -> Reply<pb::PublishResponse> {
        let r = req.into_inner();
        let snap = self.read().await;
        let d = &snap.data;
        let p = project(d, &r.project_id)?;
        let mut parts = r.topic.split('/');
        let (Some(app_slug), Some(room_slug), Some(topic), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(Status::invalid_argument("topic must be app/room/topic"));
        };
        let a = app(d, &p.id, app_slug)?;
        let room = room(d, a, room_slug)?;
        if !a.topics.iter().any(|t| t.name == topic) {
            return Err(Status::not_found(format!("topic {topic:?} is not one of app {:?}'s topics", a.slug)));
        }
        let max = p.limits.max_message_size.unwrap_or(self.limits.max_message_size) as usize;
        if r.data.len() > max {
            return Err(Status::invalid_argument(format!("data is {} bytes; at most {max}", r.data.len())));
        }
        if !is_one_msgpack_value(&r.data) {
            return Err(Status::invalid_argument("data must be exactly one MessagePack value"));
        }
        if !r.filter.is_empty() && !valid_filter(&r.filter) {
            return Err(Status::invalid_argument("filter must be 1-256 characters without / # + |"));
        }
        let from = if r.from_actor.is_empty() {
            ActorId::parse("server").map_err(|e| Status::internal(e.to_string()))?
        } else {
            let a = actor(d, &r.from_actor)?;
            if a.project != p.id {
                return Err(Status::not_found(format!("actor {:?} not found in project {:?}", r.from_actor, p.id)));
            }
            ActorId::parse(&a.id).map_err(|e| Status::internal(e.to_string()))?
        };
        let invalid = |e: skua_core::IdError| Status::internal(e.to_string());
        let address = TopicAddress {
            room: RoomKey {
                project: ProjectId::parse(&p.id).map_err(invalid)?,
                app: AppId::parse(&a.id).map_err(invalid)?,
                room: room.slug.as_str().into(),
            },
            topic: topic.into(),
        };
        let timestamp_ms = now_ms();
        let publish = ServerPublish {
            topic: address,
            filter: Some(r.filter.clone()).filter(|f| !f.is_empty()),
            from,
            data: bytes::Bytes::from(r.data),
            retain: r.retain,
            timestamp_ms,
        };
        self.sync.node().publish(publish).await.map_err(Status::unavailable)?;
        Ok(Response::new(pb::PublishResponse { timestamp_ms }))
    }

    async fn list_connections(&self, req: Request<pb::ListConnectionsRequest>) -> Reply<pb::ListConnectionsResponse> {
        let r = req.into_inner();
        let snap = self.read().await;
        let p = project(&snap.data, &r.project_id)?;
        let actor_id = if r.actor_id.is_empty() {
            None
        } else {
            let a = actor(&snap.data, &r.actor_id)?;
            Some(ActorId::parse(&a.id).map_err(|e| Status::internal(e.to_string()))?)
        };
        let project_id = ProjectId::parse(&p.id).map_err(|e| Status::internal(e.to_string()))?;
        let node = self.sync.node();
        let node_id = node.node_id();
        let limit = self.limits.max_page_size as usize;
        // This node's own connections always come live from the node.
        let mut connections: Vec<pb::Connection> = node
            .connections(&project_id, actor_id.as_ref())
            .into_iter()
            .map(|c| pb::Connection {
                node_id: node_id.clone(),
                connection_id: c.connection_id,
                actor_id: c.actor.to_string(),
                client_id: c.client_id.unwrap_or_default(),
                connected_at_ms: c.connected_at_ms,
                subscriptions: c.subscriptions,
            })
            .collect();
        if self.sync.shares_connections() {
            let since = now_ms().saturating_sub(u64::try_from(crate::sync::CONNECTIONS_STALE.as_millis()).unwrap_or(0));
            let others = self
                .sync
                .store()
                .list_connections(&p.id, actor_id.as_ref().map(ActorId::as_str), since, self.limits.max_page_size)
                .await
                .map_err(|e| unavailable(&e))?;
            connections.extend(others.into_iter().filter(|c| c.node != node_id).map(|c| pb::Connection {
                node_id: c.node,
                connection_id: c.conn,
                actor_id: c.actor,
                client_id: c.client_id,
                connected_at_ms: c.connected_at_ms,
                subscriptions: c.subscriptions,
            }));
        }
        connections.sort_by(|a, b| {
            (a.connected_at_ms, &a.node_id, &a.connection_id).cmp(&(b.connected_at_ms, &b.node_id, &b.connection_id))
        });
        connections.truncate(limit);
        Ok(Response::new(pb::ListConnectionsResponse { connections }))
    }

    async fn disconnect_actor(&self, req: Request<pb::ActorRef>) -> Reply<pb::DisconnectActorResponse> {
        let r = req.into_inner();
        let id = {
            let snap = self.read().await;
            ActorId::parse(&actor(&snap.data, &r.actor_id)?.id).map_err(|e| Status::internal(e.to_string()))?
        };
        let closed = self.sync.node().disconnect(&id);
        // Other nodes close the actor's connections older than this instant when the change
        // reaches them; later connections are unaffected.
        let before = now_ms() + 1;
        self.mutate(|d| {
            let mut a = actor(d, &r.actor_id)?.clone();
            a.disconnect_before_ms = Some(before);
            Ok((vec![Change::Put(Object::Actor(a))], ()))
        })
        .await?;
        Ok(Response::new(pb::DisconnectActorResponse { closed_on_this_node: closed }))
    }
}

impl ControlService {
    fn check_room_cap(&self, d: &RegistryData, a: &AppRecord) -> Result<(), Status> {
        let cap = a.max_rooms.unwrap_or(self.limits.max_rooms_per_app);
        let count = d.rooms.range((a.id.clone(), String::new())..).take_while(|((app, _), _)| *app == a.id).count();
        if count >= cap as usize {
            return Err(Status::failed_precondition(format!(
                "app {:?} has {count} rooms, the most allowed ({cap})",
                a.slug
            )));
        }
        Ok(())
    }

    async fn set_active(&self, id: &str, active: bool) -> Reply<pb::Actor> {
        let a = self
            .mutate(|d| {
                let mut a = actor(d, id)?.clone();
                if a.active == active {
                    return Ok((Vec::new(), a));
                }
                a.active = active;
                Ok((vec![Change::Put(Object::Actor(a.clone()))], a))
            })
            .await?;
        Ok(Response::new(convert::actor(&self.sync.snapshot().data, &a)))
    }
}
