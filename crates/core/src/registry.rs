//! The registry: projects, apps, rooms, grants, lobbies and actors, and the access checks
//! over them. Built from fixtures today and from the control plane's store later; edges read
//! it through a [`SharedRegistry`] so a new snapshot takes effect at once (N15).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, RwLock};

use sha2::{Digest, Sha256};

use crate::address::{RoomKey, TopicAddress};
use crate::ids::{ActorId, ActorType, AppId, ProjectId};
use crate::webhook::{TopicWebhooks, WebhookCall, WebhookKind, WebhookSecret, WebhookTarget};

/// Hint for an address whose app or room is not provisioned (reference wording).
pub const HINT_ROOM_NOT_CONFIGURED: &str =
    "room is not configured. Provision it via the control-plane rooms API before use.";
/// Hint for a topic that is not in the app's topic list.
pub const HINT_TOPIC_NOT_CONFIGURED: &str =
    "topic is not configured for this app. Add it to the app's topic list before use.";
/// Hint for a malformed address.
pub const HINT_BAD_ADDRESS: &str = "topics are addressed as app/room/topic";
/// Hint for a room the actor has no grant for.
pub const HINT_NO_GRANT: &str = "this actor has no grant for the room";
/// Hint for a publish the actor may not make.
pub const HINT_NO_PUBLISH: &str = "this actor may not publish to this topic";

/// What an actor wants to do with a topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// Subscribe, or read presence.
    Subscribe,
    /// Publish, or announce presence.
    Publish,
}

/// A permission a grant gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permission {
    /// Subscribe only.
    Subscribe,
    /// Publish only.
    Publish,
    /// Both.
    PubSub,
}

impl Permission {
    /// Whether this permission allows `op`.
    pub fn allows(self, op: Operation) -> bool {
        matches!(
            (self, op),
            (Self::PubSub, _) | (Self::Subscribe, Operation::Subscribe) | (Self::Publish, Operation::Publish)
        )
    }
}

/// Who a grant is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GrantSubject {
    /// One actor.
    Actor(ActorId),
    /// Every actor of a type.
    ActorType(ActorType),
}

/// Access to a private room.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// Who.
    pub subject: GrantSubject,
    /// What.
    pub permission: Permission,
    /// Only these topics of the room, when set.
    pub topics: Option<Vec<String>>,
    /// Unix seconds after which the grant no longer applies.
    pub expires_at: Option<u64>,
}

impl Grant {
    fn applies(&self, actor: &Actor, topic: Option<&str>, op: Operation, now_s: u64) -> bool {
        let subject = match &self.subject {
            GrantSubject::Actor(a) => *a == actor.id,
            GrantSubject::ActorType(t) => *t == actor.actor_type,
        };
        subject
            && self.permission.allows(op)
            && self.expires_at.is_none_or(|e| now_s < e)
            && match (topic, &self.topics) {
                (Some(t), Some(list)) => list.iter().any(|x| x == t),
                _ => true,
            }
    }
}

/// Settings of one topic of an app.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicConfig {
    /// Messages are stored and delivered with `msgId` (N24).
    pub logged: bool,
    /// Each room's last messages are kept for recovery (issue 19).
    pub history: Option<crate::history::HistoryConfig>,
}

/// A room. With no grants it is public to every actor of the project.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Room {
    /// Slug, unique within the app.
    pub slug: Arc<str>,
    /// Display name (`roomName` of webhook payloads).
    pub name: Arc<str>,
    /// Grants; the first grant makes the room private.
    pub grants: Vec<Grant>,
}

/// An app: a topic list and its rooms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct App {
    /// Internal id.
    pub id: AppId,
    /// The slug clients address it by.
    pub slug: String,
    /// Topics by name.
    pub topics: BTreeMap<String, TopicConfig>,
    /// Rooms by slug.
    pub rooms: BTreeMap<String, Room>,
    /// Webhooks of the topics that have any, per-topic entries over the app's (N41).
    pub webhooks: BTreeMap<String, TopicWebhooks>,
    /// The secret webhook requests are signed with (N42).
    pub webhook_secret: Option<WebhookSecret>,
}

/// A lobby: presence aggregated over rooms of one app (N22).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lobby {
    /// Slug, unique within the project.
    pub slug: String,
    /// The app whose rooms it covers.
    pub app: AppId,
    /// Covered room slugs.
    pub rooms: Vec<String>,
    /// Who may use it; empty means every actor of the project.
    pub allowed: Vec<GrantSubject>,
}

/// Per-project limits; `None` falls back to the node's configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProjectLimits {
    /// Most concurrent connections of the project (per node until cluster accounting lands).
    pub max_connections: Option<u32>,
    /// Publishes per second per connection.
    pub rate_limit: Option<u32>,
    /// Largest publish payload in bytes.
    pub max_message_size: Option<usize>,
    /// Publishes per calendar month (UTC) over the whole project; beyond it 42920.
    pub monthly_message_quota: Option<u64>,
}

/// A project.
#[derive(Clone, PartialEq, Eq)]
pub struct Project {
    /// Id.
    pub id: ProjectId,
    /// HS256 secret for client tokens (JWTs), if the project issues them.
    pub jwt_secret: Option<String>,
    /// The secret wake requests of its persistent members are signed with (N47).
    pub wake_secret: Option<WebhookSecret>,
    /// Apps in definition order.
    pub apps: Vec<App>,
    /// Lobbies by slug.
    pub lobbies: BTreeMap<String, Lobby>,
    /// Limits.
    pub limits: ProjectLimits,
}

impl std::fmt::Debug for Project {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Project")
            .field("id", &self.id)
            .field("jwt_secret", &self.jwt_secret.as_ref().map(|_| "<redacted>"))
            .field("wake_secret", &self.wake_secret.as_ref().map(|_| "<redacted>"))
            .field("apps", &self.apps)
            .field("lobbies", &self.lobbies)
            .field("limits", &self.limits)
            .finish()
    }
}

/// An actor: an identity that connects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    /// Id (`actorTokenId`).
    pub id: ActorId,
    /// Project.
    pub project: ProjectId,
    /// Type.
    pub actor_type: ActorType,
    /// Deactivated actors cannot authenticate.
    pub active: bool,
    /// Publishes per second per connection, overriding project and node.
    pub rate_limit: Option<u32>,
    /// Connections opened before this instant (unix ms) are closed: `DisconnectActor`.
    pub disconnect_before_ms: Option<u64>,
    /// The access scope the actor belongs to, if any.
    pub scope: Option<ActorScope>,
}

/// An actor's access scope: its slug is injected into the actor's room addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActorScope {
    /// The scope's slug.
    pub slug: Arc<str>,
    /// Deactivated scopes refuse their actors (4001 `scope_inactive`).
    pub active: bool,
}

impl Actor {
    /// The internal room of `slug` for this actor: the slug itself, or `<scope>~<slug>` for a
    /// scoped actor (the same room slug in two scopes is two rooms).
    pub fn room_in_scope(&self, slug: &Arc<str>) -> Arc<str> {
        match &self.scope {
            None => slug.clone(),
            Some(s) => Arc::from(format!("{}{}{slug}", s.slug, crate::address::SCOPE_SEPARATOR)),
        }
    }

    /// Whether the actor's scope (if any) is active.
    pub fn scope_active(&self) -> bool {
        self.scope.as_ref().is_none_or(|s| s.active)
    }
}

/// Why an access check failed; `hint` goes to v2 clients (N7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccessError {
    /// Human-readable reason.
    pub hint: &'static str,
}

/// A topic the actor may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedTopic {
    /// The address.
    pub address: TopicAddress,
    /// Whether it is logged (N24).
    pub logged: bool,
}

/// A lobby the actor may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedLobby {
    /// The covered rooms that exist, in definition order.
    pub rooms: Vec<RoomKey>,
}

/// Why a registry could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RegistryError(pub String);

/// An immutable snapshot of everything the edges need to authorise clients.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    projects: HashMap<ProjectId, Arc<Project>>,
    actors: HashMap<ActorId, Arc<Actor>>,
    /// SHA-256 of each static token → actor. Lookup by digest keeps token comparison
    /// independent of how much of a guess matches.
    tokens: HashMap<[u8; 32], ActorId>,
    /// Access scopes per project, by slug (webhook payloads name them).
    scopes: HashMap<ProjectId, HashMap<Arc<str>, Arc<ScopeInfo>>>,
}

/// An access scope as webhook payloads name it: `{accessScopeId, slug, name}` (N43, N44).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeInfo {
    /// Owning project.
    pub project: ProjectId,
    /// `accessScopeId`.
    pub id: Arc<str>,
    /// The slug injected into its actors' rooms.
    pub slug: Arc<str>,
    /// Display name.
    pub name: Arc<str>,
}

impl ScopeInfo {
    /// The `scope` value of a webhook payload for a room in `scope` (`null` outside any). A
    /// scope deleted since (an outbox trigger sent later) is named by its slug alone:
    /// `{accessScopeId: null, slug, name: slug}`.
    pub fn payload(scope: Option<RoomScope<'_>>) -> serde_json::Value {
        match scope {
            None => serde_json::Value::Null,
            Some(RoomScope::Known(s)) => {
                serde_json::json!({ "accessScopeId": &*s.id, "slug": &*s.slug, "name": &*s.name })
            }
            Some(RoomScope::Gone(slug)) => serde_json::json!({ "accessScopeId": null, "slug": slug, "name": slug }),
        }
    }
}

/// The access scope of a scoped room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoomScope<'a> {
    /// A scope of the registry.
    Known(&'a ScopeInfo),
    /// A slug no scope of the project has (any more).
    Gone(&'a str),
}

/// The SHA-256 digest a token is looked up (and stored) by.
pub fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl Registry {
    /// Builds a registry, checking cross references.
    ///
    /// # Errors
    /// [`RegistryError`] naming every dangling reference or duplicate found first.
    pub fn build(
        projects: Vec<Project>,
        actors: Vec<Actor>,
        tokens: Vec<(String, ActorId)>,
    ) -> Result<Self, RegistryError> {
        Self::build_hashed(projects, actors, tokens.into_iter().map(|(t, a)| (digest(&t), a)).collect())
    }

    /// [`Self::build`] with tokens given by their SHA-256 digests (the stored form).
    ///
    /// # Errors
    /// As [`Self::build`].
    pub fn build_hashed(
        projects: Vec<Project>,
        actors: Vec<Actor>,
        tokens: Vec<([u8; 32], ActorId)>,
    ) -> Result<Self, RegistryError> {
        let mut r = Self::default();
        for p in projects {
            let mut app_ids = std::collections::HashSet::new();
            for app in &p.apps {
                if app.id.as_str().starts_with('_') {
                    return Err(RegistryError(format!(
                        "project {}: app id {} is reserved (ids starting _)",
                        p.id, app.id
                    )));
                }
                if !app_ids.insert(app.id.clone()) || p.apps.iter().filter(|a| a.slug == app.slug).count() > 1 {
                    return Err(RegistryError(format!("project {}: duplicate app {} ({})", p.id, app.slug, app.id)));
                }
            }
            for l in p.lobbies.values() {
                let Some(app) = p.apps.iter().find(|a| a.id == l.app) else {
                    return Err(RegistryError(format!("lobby {}: unknown app {}", l.slug, l.app)));
                };
                if let Some(missing) = l.rooms.iter().find(|room| !app.rooms.contains_key(*room)) {
                    return Err(RegistryError(format!("lobby {}: unknown room {missing} in app {}", l.slug, app.slug)));
                }
            }
            if r.projects.insert(p.id.clone(), Arc::new(p)).is_some() {
                return Err(RegistryError("duplicate project".into()));
            }
        }
        for a in actors {
            if !r.projects.contains_key(&a.project) {
                return Err(RegistryError(format!("actor {}: unknown project {}", a.id, a.project)));
            }
            if r.actors.insert(a.id.clone(), Arc::new(a)).is_some() {
                return Err(RegistryError("duplicate actor id".into()));
            }
        }
        for (token, actor) in tokens {
            if !r.actors.contains_key(&actor) {
                return Err(RegistryError(format!("token for unknown actor {actor}")));
            }
            if r.tokens.insert(token, actor).is_some() {
                return Err(RegistryError("the same token is given twice".into()));
            }
        }
        Ok(r)
    }

    /// This registry with the access scopes `scopes` (their projects must exist).
    ///
    /// # Errors
    /// [`RegistryError`] for a scope of an unknown project or a slug given twice in a project.
    pub fn with_scopes(mut self, scopes: impl IntoIterator<Item = ScopeInfo>) -> Result<Self, RegistryError> {
        for s in scopes {
            if !self.projects.contains_key(&s.project) {
                return Err(RegistryError(format!("scope {}: unknown project {}", s.id, s.project)));
            }
            let slug = s.slug.clone();
            let id = s.id.clone();
            if self.scopes.entry(s.project.clone()).or_default().insert(slug, Arc::new(s)).is_some() {
                return Err(RegistryError(format!("scope {id}: its slug is taken twice in the project")));
            }
        }
        Ok(self)
    }

    /// The access scope of `room` (`None` for a room outside any scope).
    pub fn room_scope<'a>(&'a self, room: &'a RoomKey) -> Option<RoomScope<'a>> {
        let (slug, _) = room.room.split_once(crate::address::SCOPE_SEPARATOR)?;
        Some(
            self.scopes
                .get(&room.project)
                .and_then(|by_slug| by_slug.get(slug))
                .map_or(RoomScope::Gone(slug), |s| RoomScope::Known(s)),
        )
    }

    /// The actor a static token belongs to.
    pub fn actor_by_token(&self, token: &str) -> Option<&Arc<Actor>> {
        self.tokens.get(&digest(token)).and_then(|id| self.actors.get(id))
    }

    /// Whether a token with this digest still exists (revalidation, 4001 `token_revoked`).
    pub fn has_token_digest(&self, digest: &[u8; 32]) -> bool {
        self.tokens.contains_key(digest)
    }

    /// An actor by id.
    pub fn actor(&self, id: &str) -> Option<&Arc<Actor>> {
        ActorId::parse(id).ok().and_then(|id| self.actors.get(&id))
    }

    /// A project by id.
    pub fn project(&self, id: &ProjectId) -> Option<&Arc<Project>> {
        self.projects.get(id)
    }

    /// Projects that issue client tokens.
    pub fn jwt_projects(&self) -> impl Iterator<Item = &Arc<Project>> {
        self.projects.values().filter(|p| p.jwt_secret.is_some())
    }

    fn room_access(
        &self,
        actor: &Actor,
        app: &App,
        room: &Room,
        topic: Option<&str>,
        op: Operation,
        now_s: u64,
    ) -> Result<(), AccessError> {
        if op == Operation::Publish && !actor.actor_type.may_publish() {
            return Err(AccessError { hint: HINT_NO_PUBLISH });
        }
        let _ = app;
        if room.grants.is_empty() {
            return Ok(());
        }
        if room.grants.iter().any(|g| g.applies(actor, topic, op, now_s)) {
            return Ok(());
        }
        // Distinguish "can read but not write" (N29) from "cannot see the room at all".
        let readable = room.grants.iter().any(|g| g.applies(actor, topic, Operation::Subscribe, now_s));
        Err(AccessError { hint: if readable { HINT_NO_PUBLISH } else { HINT_NO_GRANT } })
    }

    /// Resolves `app/room/topic` for `actor` and checks that it may perform `op` there.
    ///
    /// # Errors
    /// [`AccessError`] with the hint for v2 clients.
    pub fn resolve_topic(
        &self,
        actor: &Actor,
        address: &str,
        op: Operation,
        now_s: u64,
    ) -> Result<ResolvedTopic, AccessError> {
        let mut parts = address.split('/');
        let (Some(app_slug), Some(room_slug), Some(topic), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(AccessError { hint: HINT_BAD_ADDRESS });
        };
        let project = self.projects.get(&actor.project).ok_or(AccessError { hint: HINT_ROOM_NOT_CONFIGURED })?;
        let app =
            project.apps.iter().find(|a| a.slug == app_slug).ok_or(AccessError { hint: HINT_ROOM_NOT_CONFIGURED })?;
        let room = app.rooms.get(room_slug).ok_or(AccessError { hint: HINT_ROOM_NOT_CONFIGURED })?;
        let config = app.topics.get(topic).ok_or(AccessError { hint: HINT_TOPIC_NOT_CONFIGURED })?;
        self.room_access(actor, app, room, Some(topic), op, now_s)?;
        Ok(ResolvedTopic {
            address: TopicAddress {
                room: RoomKey {
                    project: project.id.clone(),
                    app: app.id.clone(),
                    room: actor.room_in_scope(&room.slug),
                },
                topic: Arc::from(topic),
            },
            logged: config.logged,
        })
    }

    /// The `kind` webhook target of `address` (as in [`Self::webhook`]: its room must exist) and
    /// its app's secret, borrowed: the look-up of a trigger on every publish and every attempt.
    pub fn webhook_target(
        &self,
        address: &TopicAddress,
        kind: WebhookKind,
    ) -> Option<(&Arc<WebhookTarget>, Option<&WebhookSecret>)> {
        let project = self.projects.get(&address.room.project)?;
        let app = project.apps.iter().find(|a| a.id == address.room.app)?;
        let target = app.webhooks.get(&*address.topic)?.get(kind)?;
        app.rooms.get(address.room.slug())?;
        Some((target, app.webhook_secret.as_ref()))
    }

    /// The history settings of a topic, if it has history (issue 19).
    pub fn history(&self, address: &TopicAddress) -> Option<crate::history::HistoryConfig> {
        let project = self.projects.get(&address.room.project)?;
        let app = project.apps.iter().find(|a| a.id == address.room.app)?;
        app.topics.get(&*address.topic)?.history
    }

    /// The webhook of `kind` for a topic, with the app's secret and the names its payload
    /// carries; `None` when the topic (or its app, room) has none or is gone (N41). The
    /// configuration is per app and topic: a room in an access scope has its room's webhooks.
    pub fn webhook(&self, address: &TopicAddress, kind: WebhookKind) -> Option<WebhookCall> {
        let project = self.projects.get(&address.room.project)?;
        let app = project.apps.iter().find(|a| a.id == address.room.app)?;
        let target = app.webhooks.get(&*address.topic)?.get(kind)?.clone();
        let room = app.rooms.get(address.room.slug())?;
        Some(WebhookCall {
            kind,
            target,
            secret: app.webhook_secret.clone(),
            app_slug: app.slug.as_str().into(),
            room_name: room.name.clone(),
        })
    }

    /// Resolves a room slug (presence frames carry no app) for `actor`: the first app of the
    /// project, in definition order, that has a room with that slug.
    ///
    /// # Errors
    /// [`AccessError`] when no such room exists or the actor cannot read it.
    pub fn resolve_room(&self, actor: &Actor, slug: &str, now_s: u64) -> Result<RoomKey, AccessError> {
        let project = self.projects.get(&actor.project).ok_or(AccessError { hint: HINT_ROOM_NOT_CONFIGURED })?;
        let (app, room) = project
            .apps
            .iter()
            .find_map(|a| a.rooms.get(slug).map(|r| (a, r)))
            .ok_or(AccessError { hint: HINT_ROOM_NOT_CONFIGURED })?;
        self.room_access(actor, app, room, None, Operation::Subscribe, now_s)?;
        Ok(RoomKey { project: project.id.clone(), app: app.id.clone(), room: actor.room_in_scope(&room.slug) })
    }

    /// Resolves a lobby slug for `actor`.
    ///
    /// # Errors
    /// [`AccessError`] when the lobby does not exist or the actor may not use it.
    pub fn resolve_lobby(&self, actor: &Actor, slug: &str) -> Result<ResolvedLobby, AccessError> {
        const HINT: &str = "lobby is not configured or not accessible";
        let project = self.projects.get(&actor.project).ok_or(AccessError { hint: HINT })?;
        let lobby = project.lobbies.get(slug).ok_or(AccessError { hint: HINT })?;
        let allowed = lobby.allowed.is_empty()
            || lobby.allowed.iter().any(|s| match s {
                GrantSubject::Actor(a) => *a == actor.id,
                GrantSubject::ActorType(t) => *t == actor.actor_type,
            });
        if !allowed {
            return Err(AccessError { hint: HINT });
        }
        let app = project.apps.iter().find(|a| a.id == lobby.app).ok_or(AccessError { hint: HINT })?;
        let rooms = lobby
            .rooms
            .iter()
            .filter_map(|r| app.rooms.get(r))
            .map(|r| RoomKey { project: project.id.clone(), app: app.id.clone(), room: actor.room_in_scope(&r.slug) })
            .collect();
        Ok(ResolvedLobby { rooms })
    }
}

/// Where access may have narrowed between two registry snapshots: what open connections must
/// re-check (issue 5). Additions (a new room, a new grant) need no re-check: they take effect at
/// the next subscribe or publish.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegistryDelta {
    /// Re-check everything (a project went, or time passed: grants may have expired).
    pub all: bool,
    /// Rooms whose grants changed or that are gone.
    pub rooms: HashSet<RoomKey>,
    /// Apps whose topics changed or that are gone.
    pub apps: HashSet<AppId>,
    /// Projects whose lobbies changed.
    pub lobby_projects: HashSet<ProjectId>,
}

impl RegistryDelta {
    /// A delta that re-checks everything.
    pub fn everything() -> Self {
        Self { all: true, ..Self::default() }
    }

    /// Adds `other` to this delta.
    pub fn merge(&mut self, other: &Self) {
        self.all |= other.all;
        self.rooms.extend(other.rooms.iter().cloned());
        self.apps.extend(other.apps.iter().cloned());
        self.lobby_projects.extend(other.lobby_projects.iter().cloned());
    }

    /// Whether a subscription in `room` may have lost access.
    pub fn touches_room(&self, room: &RoomKey) -> bool {
        self.all || self.apps.contains(&room.app) || self.rooms.contains(&room.unscoped())
    }

    /// Whether lobbies of `project` may have changed.
    pub fn touches_lobbies(&self, project: &ProjectId) -> bool {
        // Deleting a room or an app rewrites or deletes the lobbies that covered it.
        self.all || self.lobby_projects.contains(project)
    }
}

impl Registry {
    /// Where access may have narrowed from `self` to `newer`.
    pub fn delta(&self, newer: &Self) -> RegistryDelta {
        let mut d = RegistryDelta::default();
        for (id, old) in &self.projects {
            let Some(new) = newer.projects.get(id) else {
                d.all = true;
                continue;
            };
            if old.lobbies != new.lobbies {
                d.lobby_projects.insert(id.clone());
            }
            for app in &old.apps {
                let Some(new_app) = new.apps.iter().find(|a| a.id == app.id) else {
                    d.apps.insert(app.id.clone());
                    continue;
                };
                if new_app.slug != app.slug || new_app.topics != app.topics {
                    d.apps.insert(app.id.clone());
                    continue;
                }
                for (slug, room) in &app.rooms {
                    if new_app.rooms.get(slug).is_none_or(|r| r.grants != room.grants) {
                        d.rooms.insert(RoomKey { project: id.clone(), app: app.id.clone(), room: room.slug.clone() });
                    }
                }
            }
        }
        d
    }
}

/// The registry snapshot an edge reads, swappable at run time (N15).
#[derive(Debug, Default)]
pub struct SharedRegistry {
    // std RwLock: held only to clone or swap an Arc, never across an await.
    current: RwLock<Arc<Registry>>,
}

impl SharedRegistry {
    /// Wraps a first snapshot.
    pub fn new(registry: Registry) -> Self {
        Self { current: RwLock::new(Arc::new(registry)) }
    }

    /// The current snapshot.
    pub fn load(&self) -> Arc<Registry> {
        self.current.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Replaces the snapshot; connections see it from their next check.
    pub fn store(&self, registry: Registry) {
        *self.current.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(registry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> (Registry, Arc<Actor>, Arc<Actor>, Arc<Actor>) {
        let p = ProjectId::parse("p").unwrap();
        let alice = ActorId::parse("alice").unwrap();
        let mut rooms = BTreeMap::new();
        rooms.insert("general".into(), Room { slug: "general".into(), name: "General".into(), grants: vec![] });
        rooms.insert(
            "ops".into(),
            Room {
                slug: "ops".into(),
                name: "ops".into(),
                grants: vec![Grant {
                    subject: GrantSubject::Actor(alice.clone()),
                    permission: Permission::PubSub,
                    topics: None,
                    expires_at: None,
                }],
            },
        );
        let mut topics = BTreeMap::new();
        topics.insert("messages".into(), TopicConfig::default());
        topics.insert("tasks".into(), TopicConfig { logged: true, history: None });
        let app = App {
            id: AppId::parse("demo-app").unwrap(),
            slug: "demo".into(),
            topics,
            rooms,
            webhooks: BTreeMap::new(),
            webhook_secret: None,
        };
        let project = Project {
            id: p.clone(),
            jwt_secret: None,
            wake_secret: None,
            apps: vec![app],
            lobbies: BTreeMap::new(),
            limits: ProjectLimits::default(),
        };
        let actor = |id: &str, t| Actor {
            id: ActorId::parse(id).unwrap(),
            project: p.clone(),
            actor_type: t,
            active: true,
            rate_limit: None,
            disconnect_before_ms: None,
            scope: None,
        };
        let r = Registry::build(
            vec![project],
            vec![actor("alice", ActorType::User), actor("bob", ActorType::User), actor("viewer", ActorType::Observer)],
            vec![("tok-a".into(), alice)],
        )
        .unwrap();
        let (a, b, v) =
            (r.actor("alice").unwrap().clone(), r.actor("bob").unwrap().clone(), r.actor("viewer").unwrap().clone());
        (r, a, b, v)
    }

    #[test]
    fn access_rules() {
        let (r, alice, bob, viewer) = fixture();
        assert!(r.resolve_topic(&bob, "demo/general/messages", Operation::Publish, 0).is_ok());
        assert!(r.resolve_topic(&bob, "demo/general/tasks", Operation::Subscribe, 0).unwrap().logged);
        assert_eq!(
            r.resolve_topic(&bob, "demo/ops/messages", Operation::Subscribe, 0).unwrap_err().hint,
            HINT_NO_GRANT
        );
        assert!(r.resolve_topic(&alice, "demo/ops/messages", Operation::Publish, 0).is_ok());
        assert_eq!(
            r.resolve_topic(&bob, "demo/nope/messages", Operation::Subscribe, 0).unwrap_err().hint,
            HINT_ROOM_NOT_CONFIGURED
        );
        assert_eq!(
            r.resolve_topic(&bob, "other/general/messages", Operation::Subscribe, 0).unwrap_err().hint,
            HINT_ROOM_NOT_CONFIGURED
        );
        assert_eq!(
            r.resolve_topic(&bob, "demo/general/nope", Operation::Subscribe, 0).unwrap_err().hint,
            HINT_TOPIC_NOT_CONFIGURED
        );
        assert_eq!(r.resolve_topic(&bob, "demo/general", Operation::Subscribe, 0).unwrap_err().hint, HINT_BAD_ADDRESS);
        assert_eq!(
            r.resolve_topic(&bob, "demo/general/messages/x", Operation::Subscribe, 0).unwrap_err().hint,
            HINT_BAD_ADDRESS
        );
        assert!(r.resolve_topic(&viewer, "demo/general/messages", Operation::Subscribe, 0).is_ok());
        assert_eq!(
            r.resolve_topic(&viewer, "demo/general/messages", Operation::Publish, 0).unwrap_err().hint,
            HINT_NO_PUBLISH
        );
        assert_eq!(r.actor_by_token("tok-a").map(|a| a.id.as_str()), Some("alice"));
        assert!(r.actor_by_token("tok-b").is_none());
    }

    #[test]
    fn delta_names_what_narrowed_and_ignores_additions() {
        let (r, ..) = fixture();
        assert_eq!(r.delta(&r), RegistryDelta::default());
        let project = r.projects.values().next().unwrap().as_ref().clone();
        let rebuild = |p: Project| {
            let actors = r.actors.values().map(|a| a.as_ref().clone()).collect();
            let tokens = r.tokens.iter().map(|(d, a)| (*d, a.clone())).collect();
            Registry::build_hashed(vec![p], actors, tokens).unwrap()
        };
        let mut added = project.clone();
        added.apps[0].rooms.insert("new".into(), Room { slug: "new".into(), name: "new".into(), grants: vec![] });
        assert_eq!(r.delta(&rebuild(added)), RegistryDelta::default(), "a new room narrows nothing");
        let mut revoked = project.clone();
        revoked.apps[0].rooms.get_mut("ops").unwrap().grants.clear();
        let d = r.delta(&rebuild(revoked));
        assert_eq!(d.rooms.iter().map(|k| &*k.room).collect::<Vec<_>>(), ["ops"]);
        assert!(!d.all && d.apps.is_empty());
        let mut topics = project;
        topics.apps[0].topics.remove("tasks");
        let d = r.delta(&rebuild(topics));
        assert!(d.apps.contains(&AppId::parse("demo-app").unwrap()));
        let key = RoomKey {
            project: ProjectId::parse("p").unwrap(),
            app: AppId::parse("demo-app").unwrap(),
            room: "general".into(),
        };
        assert!(d.touches_room(&key));
        let empty = Registry::default();
        assert!(r.delta(&empty).all, "a project that went touches everything");
    }

    #[test]
    fn scoped_rooms_name_their_scope_and_share_the_room_s_webhooks() {
        use crate::webhook::{TopicWebhooks, WebhookTarget};
        let (r, ..) = fixture();
        let mut project = r.projects.values().next().unwrap().as_ref().clone();
        let hook = Arc::new(WebhookTarget { url: "http://hooks.example/t".into(), headers: vec![], timeout_ms: None });
        project.apps[0]
            .webhooks
            .insert("messages".into(), TopicWebhooks { hydration: None, trigger: Some(hook.clone()) });
        let actors = r.actors.values().map(|a| a.as_ref().clone()).collect();
        let p = ProjectId::parse("p").unwrap();
        let red = ScopeInfo { project: p.clone(), id: "scope-1".into(), slug: "red".into(), name: "Red".into() };
        let r = Registry::build_hashed(vec![project], actors, vec![]).unwrap().with_scopes([red.clone()]).unwrap();
        let at = |room: &str| TopicAddress {
            room: RoomKey { project: p.clone(), app: AppId::parse("demo-app").unwrap(), room: room.into() },
            topic: "messages".into(),
        };
        let scoped = at("red~general");
        assert_eq!(r.webhook(&scoped, WebhookKind::Trigger).map(|c| c.target), Some(hook), "per app and topic");
        assert_eq!(r.webhook(&scoped, WebhookKind::Trigger).unwrap().room_name.as_ref(), "General");
        assert_eq!(r.room_scope(&scoped.room), Some(RoomScope::Known(&red)));
        assert_eq!(r.room_scope(&at("general").room), None);
        assert_eq!(r.room_scope(&at("blue~general").room), Some(RoomScope::Gone("blue")));
        assert_eq!(
            ScopeInfo::payload(r.room_scope(&scoped.room)),
            serde_json::json!({"accessScopeId": "scope-1", "slug": "red", "name": "Red"})
        );
        assert_eq!(ScopeInfo::payload(None), serde_json::Value::Null);
        let twice = r.clone().with_scopes([ScopeInfo { id: "scope-2".into(), ..red.clone() }]);
        assert!(twice.unwrap_err().0.contains("scope-2"));
        let elsewhere = ScopeInfo { project: ProjectId::parse("q").unwrap(), ..red };
        assert!(r.with_scopes([elsewhere]).unwrap_err().0.contains("unknown project"));
    }

    #[test]
    fn grants_expire_and_narrow() {
        let g = Grant {
            subject: GrantSubject::ActorType(ActorType::User),
            permission: Permission::Subscribe,
            topics: Some(vec!["messages".into()]),
            expires_at: Some(100),
        };
        let a = Actor {
            id: ActorId::parse("x").unwrap(),
            project: ProjectId::parse("p").unwrap(),
            actor_type: ActorType::User,
            active: true,
            rate_limit: None,
            disconnect_before_ms: None,
            scope: None,
        };
        assert!(g.applies(&a, Some("messages"), Operation::Subscribe, 99));
        assert!(!g.applies(&a, Some("messages"), Operation::Subscribe, 100));
        assert!(!g.applies(&a, Some("tasks"), Operation::Subscribe, 0));
        assert!(!g.applies(&a, Some("messages"), Operation::Publish, 0));
    }
}
