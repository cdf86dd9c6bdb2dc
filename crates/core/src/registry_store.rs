//! The registry's durable form: the records the control plane writes, the [`RegistryStore`]
//! slot that keeps them (SQLite embedded, Postgres in a cluster), and the one conversion from
//! records to the [`Registry`] snapshot edges read. Fixtures files and the gRPC API both end up
//! as [`RegistryData`], so both go through [`RegistryData::build`] (issue 5).

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::ids::{ActorId, ActorType, AppId, ProjectId};
use crate::registry::{
    Actor, ActorScope, App, Grant, GrantSubject, Lobby, Permission, Project, ProjectLimits, Registry, RegistryError,
    Room, ScopeInfo, TopicConfig,
};
use crate::store::error::StoreError;
use crate::webhook::{TopicWebhooks, WebhookSecret, WebhookTarget};

/// Per-project limits as stored; `None` falls back to the node's configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitsRecord {
    /// Most concurrent connections per node.
    pub max_connections: Option<u32>,
    /// Publishes per calendar month (UTC) over the project.
    pub monthly_message_quota: Option<u64>,
    /// Publishes per second per connection.
    pub rate_limit: Option<u32>,
    /// Largest publish payload in bytes.
    pub max_message_size: Option<u32>,
}

/// A project.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectRecord {
    /// Slug id.
    pub id: String,
    /// Display name.
    pub name: String,
    /// HS256 secret of the project's client tokens (JWTs).
    pub jwt_secret: Option<String>,
    /// The secret wake requests are signed with (N47); shown once when generated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_secret: Option<String>,
    /// Limits.
    pub limits: LimitsRecord,
    /// Unix ms of creation.
    pub created_at_ms: u64,
}

impl std::fmt::Debug for ProjectRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProjectRecord")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("jwt_secret", &self.jwt_secret.as_ref().map(|_| "<redacted>"))
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// The legacy per-topic webhook record (`url` + event names): stored and listed, never called;
/// the delivered webhooks are [`TopicWebhooksRecord`] and the app's (N41).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookRecord {
    /// Where events would be POSTed.
    pub url: String,
    /// Which events (free-form names, e.g. `message`).
    pub events: Vec<String>,
}

/// One webhook endpoint as stored: `{url, headers?, timeoutMs?}` (N41).
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookTargetRecord {
    /// http(s) URL.
    pub url: String,
    /// Extra request headers, by name.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Timeout of one call; `None` = the kind's default.
    #[serde(default)]
    pub timeout_ms: Option<u32>,
}

// Not derived: header values often carry credentials.
impl std::fmt::Debug for WebhookTargetRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookTargetRecord")
            .field("url", &self.url)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("timeout_ms", &self.timeout_ms)
            .finish()
    }
}

impl WebhookTargetRecord {
    fn target(&self) -> Arc<WebhookTarget> {
        Arc::new(WebhookTarget {
            url: self.url.clone(),
            headers: self.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            timeout_ms: self.timeout_ms,
        })
    }
}

/// A topic's own webhooks (`topicConfigs.<topic>.webhooks`), each winning over the app's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicWebhooksRecord {
    /// `onSubscribe`: the topic's hydration webhook.
    #[serde(default)]
    pub on_subscribe: Option<WebhookTargetRecord>,
    /// `onPublish`: the topic's trigger webhook.
    #[serde(default)]
    pub on_publish: Option<WebhookTargetRecord>,
}

/// One topic of an app.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicRecord {
    /// Topic name (slug).
    pub name: String,
    /// Messages are stored (N24).
    pub logged: bool,
    /// Legacy webhook settings, if any (stored, never called).
    pub webhook: Option<WebhookRecord>,
    /// The topic's own webhooks (N41).
    #[serde(default)]
    pub webhooks: TopicWebhooksRecord,
    /// The topic's history (`topicConfigs.<topic>.history`, issue 19).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<HistoryRecord>,
}

/// A topic's history settings as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryRecord {
    /// Messages kept per room.
    pub size: u32,
    /// How long each is kept, in milliseconds.
    pub ttl_ms: u64,
}

impl HistoryRecord {
    /// The registry's form.
    pub fn config(&self) -> crate::history::HistoryConfig {
        crate::history::HistoryConfig { size: self.size.max(1), ttl_ms: self.ttl_ms.max(1) }
    }
}

/// Free-form fields of an app, room or actor that the API keeps and returns but never
/// interprets (issue 31): each absent from the stored JSON while unset, so records written
/// before them read back unchanged and an older node ignores them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnnotationsRecord {
    /// `description`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// `externalId`: the caller's own id for the object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_id: Option<String>,
    /// `metadata`: a JSON object, as compact JSON text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<String>,
}

/// An app.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppRecord {
    /// Owning project.
    pub project: String,
    /// Internal id, unique over the registry.
    pub id: String,
    /// Slug clients address, unique in the project.
    pub slug: String,
    /// Display name.
    pub name: String,
    /// Topics in definition order.
    pub topics: Vec<TopicRecord>,
    /// `EnsureRoom` may create rooms of this app.
    pub auto_provision_rooms: bool,
    /// Most rooms of this app; `None` = the node's `max_rooms_per_app`.
    pub max_rooms: Option<u32>,
    /// Unix ms of creation.
    pub created_at_ms: u64,
    /// `hydrationWebhook`: topics without their own `onSubscribe` use it (N41).
    #[serde(default)]
    pub hydration_webhook: Option<WebhookTargetRecord>,
    /// `triggerWebhook`: topics without their own `onPublish` use it (N41).
    #[serde(default)]
    pub trigger_webhook: Option<WebhookTargetRecord>,
    /// The secret webhook requests are signed with (N42); shown once when generated.
    #[serde(default)]
    pub webhook_secret: Option<String>,
    /// Description, external id and metadata.
    #[serde(flatten)]
    pub annotations: AnnotationsRecord,
}

// Not derived: the webhook secret never goes to logs.
impl std::fmt::Debug for AppRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppRecord")
            .field("project", &self.project)
            .field("id", &self.id)
            .field("slug", &self.slug)
            .field("name", &self.name)
            .field("topics", &self.topics)
            .field("auto_provision_rooms", &self.auto_provision_rooms)
            .field("max_rooms", &self.max_rooms)
            .field("created_at_ms", &self.created_at_ms)
            .field("hydration_webhook", &self.hydration_webhook)
            .field("trigger_webhook", &self.trigger_webhook)
            .field("webhook_secret", &self.webhook_secret.as_ref().map(|_| "<redacted>"))
            .field("annotations", &self.annotations)
            .finish()
    }
}

/// A room.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoomRecord {
    /// Owning project.
    pub project: String,
    /// Owning app's id.
    pub app: String,
    /// Slug, unique in the app.
    pub slug: String,
    /// Display name.
    pub name: String,
    /// Created by `EnsureRoom` (dynamic) rather than `CreateRoom` (static).
    pub dynamic: bool,
    /// Unix ms of creation.
    pub created_at_ms: u64,
    /// Description, external id and metadata.
    #[serde(flatten)]
    pub annotations: AnnotationsRecord,
}

/// Who a grant or lobby allowance names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SubjectRecord {
    /// One actor id.
    Actor(String),
    /// Every actor of a type (`user`, `agent`, …).
    ActorType(String),
}

/// A room grant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantRecord {
    /// Grant id, unique over the registry.
    pub id: String,
    /// Owning project.
    pub project: String,
    /// App id.
    pub app: String,
    /// Room slug.
    pub room: String,
    /// Who.
    pub subject: SubjectRecord,
    /// `subscribe`, `publish` or `pubSub`.
    pub permission: String,
    /// Only these topics, when set.
    pub topics: Option<Vec<String>>,
    /// Unix seconds after which the grant no longer applies.
    pub expires_at: Option<u64>,
    /// Unix ms of creation.
    pub created_at_ms: u64,
    /// `role`: free-form, never interpreted (issue 31).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// `metadata`: a JSON object as compact JSON text, never interpreted (issue 31).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<String>,
}

/// A lobby.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LobbyRecord {
    /// Owning project.
    pub project: String,
    /// Slug, unique in the project.
    pub slug: String,
    /// App id whose rooms it covers.
    pub app: String,
    /// Covered room slugs.
    pub rooms: Vec<String>,
    /// Who may use it; empty = every actor of the project.
    pub allowed: Vec<SubjectRecord>,
}

/// An actor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActorRecord {
    /// Owning project.
    pub project: String,
    /// Id (`actorTokenId`), unique over the registry.
    pub id: String,
    /// Actor type wire string.
    pub actor_type: String,
    /// Display name.
    pub name: String,
    /// Deactivated actors cannot authenticate and their connections close (4001).
    pub active: bool,
    /// Publishes per second per connection.
    pub rate_limit: Option<u32>,
    /// Connections opened before this unix ms are closed (`DisconnectActor`).
    pub disconnect_before_ms: Option<u64>,
    /// Unix ms of creation.
    pub created_at_ms: u64,
    /// The access scope (its id) the actor belongs to, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// Description, external id and metadata.
    #[serde(flatten)]
    pub annotations: AnnotationsRecord,
}

/// An access scope: tenant isolation inside a project. A scoped actor's addresses get the
/// scope's slug injected, so the same room slug in two scopes is two rooms.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScopeRecord {
    /// Owning project.
    pub project: String,
    /// Id (`accessScopeId`), unique over the registry.
    pub id: String,
    /// Slug, unique in the project.
    pub slug: String,
    /// Display name.
    pub name: String,
    /// Deactivated scopes close their actors' connections (4001 `scope_inactive`).
    pub active: bool,
    /// Unix ms of creation.
    pub created_at_ms: u64,
}

/// An access token: only the SHA-256 of the whole token string is kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRecord {
    /// Key id (the `<keyId>` of `at_live_<keyId>.<secret>`), unique over the registry.
    pub key_id: String,
    /// Owning actor.
    pub actor: String,
    /// Hex SHA-256 of the token.
    pub sha256: String,
    /// Unix ms of creation.
    pub created_at_ms: u64,
}

/// A project API key (the REST API's bearer key): only the SHA-256 of the whole key is kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiKeyRecord {
    /// Key id (the `<keyId>` of `nlg_live_<keyId>.<secret>`, or derived from the digest of a
    /// key of another shape: [`api_key_id`]), unique over the registry.
    pub key_id: String,
    /// Owning project.
    pub project: String,
    /// What the key is for (display only).
    pub name: String,
    /// Hex SHA-256 of the key.
    pub sha256: String,
    /// Unix ms of creation.
    pub created_at_ms: u64,
}

/// The key id of an API key: `<keyId>` of `nlg_live_<keyId>.<secret>`, else the first 16 hex
/// digits of the key's SHA-256 (keys of another shape, such as the `--dev` key).
pub fn api_key_id(key: &str) -> String {
    if let Some((id, secret)) = key.strip_prefix("nlg_live_").and_then(|r| r.split_once('.'))
        && !id.is_empty()
        && id.len() <= 64
        && !secret.is_empty()
        && id.bytes().all(|b| b.is_ascii_alphanumeric())
    {
        return id.to_owned();
    }
    hex(&crate::registry::digest(key))[..16].to_owned()
}

/// One stored object of the registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Object {
    /// A project.
    Project(ProjectRecord),
    /// An app.
    App(AppRecord),
    /// A room.
    Room(RoomRecord),
    /// A grant.
    Grant(GrantRecord),
    /// A lobby.
    Lobby(LobbyRecord),
    /// An actor.
    Actor(ActorRecord),
    /// A token.
    Token(TokenRecord),
    /// A project API key.
    ApiKey(ApiKeyRecord),
    /// An access scope.
    Scope(ScopeRecord),
}

/// The kind of a stored object, as kept in the store's `kind` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ObjectKind {
    /// Projects.
    Project,
    /// Apps.
    App,
    /// Rooms.
    Room,
    /// Grants.
    Grant,
    /// Lobbies.
    Lobby,
    /// Actors.
    Actor,
    /// Tokens.
    Token,
    /// Project API keys.
    ApiKey,
    /// Access scopes.
    Scope,
}

impl ObjectKind {
    /// Every kind.
    pub const ALL: [Self; 9] = [
        Self::Project,
        Self::App,
        Self::Room,
        Self::Grant,
        Self::Lobby,
        Self::Actor,
        Self::Token,
        Self::ApiKey,
        Self::Scope,
    ];

    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Project => "project",
            Self::App => "app",
            Self::Room => "room",
            Self::Grant => "grant",
            Self::Lobby => "lobby",
            Self::Actor => "actor",
            Self::Token => "token",
            Self::ApiKey => "api_key",
            Self::Scope => "scope",
        }
    }

    /// Parses a stored name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// Identifies one stored object: its kind and key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// Kind.
    pub kind: ObjectKind,
    /// Key, unique per kind (see [`Object::key`]).
    pub key: String,
}

impl Object {
    /// The object's key: the id for projects, apps, grants, actors, tokens; `app/slug` for
    /// rooms; `project/slug` for lobbies.
    pub fn key(&self) -> ObjectKey {
        let (kind, key) = match self {
            Self::Project(p) => (ObjectKind::Project, p.id.clone()),
            Self::App(a) => (ObjectKind::App, a.id.clone()),
            Self::Room(r) => (ObjectKind::Room, format!("{}/{}", r.app, r.slug)),
            Self::Grant(g) => (ObjectKind::Grant, g.id.clone()),
            Self::Lobby(l) => (ObjectKind::Lobby, format!("{}/{}", l.project, l.slug)),
            Self::Actor(a) => (ObjectKind::Actor, a.id.clone()),
            Self::Token(t) => (ObjectKind::Token, t.key_id.clone()),
            Self::ApiKey(k) => (ObjectKind::ApiKey, k.key_id.clone()),
            Self::Scope(s) => (ObjectKind::Scope, s.id.clone()),
        };
        ObjectKey { kind, key }
    }

    /// The owning project's id.
    pub fn project(&self) -> &str {
        match self {
            Self::Project(p) => &p.id,
            Self::App(a) => &a.project,
            Self::Room(r) => &r.project,
            Self::Grant(g) => &g.project,
            Self::Lobby(l) => &l.project,
            Self::Actor(a) => &a.project,
            // Tokens are owned through their actor; the store keeps the actor id here.
            Self::Token(t) => &t.actor,
            Self::ApiKey(k) => &k.project,
            Self::Scope(s) => &s.project,
        }
    }

    /// The attributes as JSON (the store's `spec` column).
    ///
    /// # Errors
    /// Never in practice (records are plain data); reported rather than unwrapped.
    pub fn spec_json(&self) -> Result<String, serde_json::Error> {
        match self {
            Self::Project(v) => serde_json::to_string(v),
            Self::App(v) => serde_json::to_string(v),
            Self::Room(v) => serde_json::to_string(v),
            Self::Grant(v) => serde_json::to_string(v),
            Self::Lobby(v) => serde_json::to_string(v),
            Self::Actor(v) => serde_json::to_string(v),
            Self::Token(v) => serde_json::to_string(v),
            Self::ApiKey(v) => serde_json::to_string(v),
            Self::Scope(v) => serde_json::to_string(v),
        }
    }

    /// Reads an object back from its kind and `spec` JSON.
    ///
    /// # Errors
    /// When the JSON does not match the kind.
    pub fn from_spec(kind: ObjectKind, spec: &str) -> Result<Self, serde_json::Error> {
        Ok(match kind {
            ObjectKind::Project => Self::Project(serde_json::from_str(spec)?),
            ObjectKind::App => Self::App(serde_json::from_str(spec)?),
            ObjectKind::Room => Self::Room(serde_json::from_str(spec)?),
            ObjectKind::Grant => Self::Grant(serde_json::from_str(spec)?),
            ObjectKind::Lobby => Self::Lobby(serde_json::from_str(spec)?),
            ObjectKind::Actor => Self::Actor(serde_json::from_str(spec)?),
            ObjectKind::Token => Self::Token(serde_json::from_str(spec)?),
            ObjectKind::ApiKey => Self::ApiKey(serde_json::from_str(spec)?),
            ObjectKind::Scope => Self::Scope(serde_json::from_str(spec)?),
        })
    }
}

/// One write of a change set.
// Change sets are a handful of objects per control-plane write, never a hot path: boxing the
// large variant would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Insert or replace.
    Put(Object),
    /// Delete (absent keys are ignored).
    Delete(ObjectKey),
}

/// Every registry object, keyed, as loaded from the store at one version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegistryData {
    /// Projects by id.
    pub projects: BTreeMap<String, ProjectRecord>,
    /// Apps by id.
    pub apps: BTreeMap<String, AppRecord>,
    /// Rooms by (app id, slug).
    pub rooms: BTreeMap<(String, String), RoomRecord>,
    /// Grants by id.
    pub grants: BTreeMap<String, GrantRecord>,
    /// Lobbies by (project, slug).
    pub lobbies: BTreeMap<(String, String), LobbyRecord>,
    /// Actors by id.
    pub actors: BTreeMap<String, ActorRecord>,
    /// Tokens by key id.
    pub tokens: BTreeMap<String, TokenRecord>,
    /// Project API keys by key id.
    pub api_keys: BTreeMap<String, ApiKeyRecord>,
    /// Access scopes by id.
    pub scopes: BTreeMap<String, ScopeRecord>,
}

/// A consistent read of the registry.
#[derive(Debug, Clone, Default)]
pub struct RegistrySnapshot {
    /// Version of the data: every applied change set increments it.
    pub version: u64,
    /// The data.
    pub data: RegistryData,
}

impl RegistryData {
    /// Adds (or replaces) one object.
    pub fn insert(&mut self, o: Object) {
        match o {
            Object::Project(p) => {
                self.projects.insert(p.id.clone(), p);
            }
            Object::App(a) => {
                self.apps.insert(a.id.clone(), a);
            }
            Object::Room(r) => {
                self.rooms.insert((r.app.clone(), r.slug.clone()), r);
            }
            Object::Grant(g) => {
                self.grants.insert(g.id.clone(), g);
            }
            Object::Lobby(l) => {
                self.lobbies.insert((l.project.clone(), l.slug.clone()), l);
            }
            Object::Actor(a) => {
                self.actors.insert(a.id.clone(), a);
            }
            Object::Token(t) => {
                self.tokens.insert(t.key_id.clone(), t);
            }
            Object::ApiKey(k) => {
                self.api_keys.insert(k.key_id.clone(), k);
            }
            Object::Scope(s) => {
                self.scopes.insert(s.id.clone(), s);
            }
        }
    }

    /// Removes one object by key.
    pub fn remove(&mut self, k: &ObjectKey) {
        let split = |s: &str| s.split_once('/').map(|(a, b)| (a.to_owned(), b.to_owned()));
        match k.kind {
            ObjectKind::Project => {
                self.projects.remove(&k.key);
            }
            ObjectKind::App => {
                self.apps.remove(&k.key);
            }
            ObjectKind::Room => {
                if let Some(key) = split(&k.key) {
                    self.rooms.remove(&key);
                }
            }
            ObjectKind::Grant => {
                self.grants.remove(&k.key);
            }
            ObjectKind::Lobby => {
                if let Some(key) = split(&k.key) {
                    self.lobbies.remove(&key);
                }
            }
            ObjectKind::Actor => {
                self.actors.remove(&k.key);
            }
            ObjectKind::Token => {
                self.tokens.remove(&k.key);
            }
            ObjectKind::ApiKey => {
                self.api_keys.remove(&k.key);
            }
            ObjectKind::Scope => {
                self.scopes.remove(&k.key);
            }
        }
    }

    /// Applies a change set in order.
    pub fn apply(&mut self, changes: &[Change]) {
        for c in changes {
            match c {
                Change::Put(o) => self.insert(o.clone()),
                Change::Delete(k) => self.remove(k),
            }
        }
    }

    /// Every object, projects first (the order fixtures are written in).
    pub fn objects(&self) -> Vec<Object> {
        let mut out: Vec<Object> = self.projects.values().cloned().map(Object::Project).collect();
        // Scopes before the actors that name them.
        out.extend(self.scopes.values().cloned().map(Object::Scope));
        out.extend(self.apps.values().cloned().map(Object::App));
        out.extend(self.rooms.values().cloned().map(Object::Room));
        out.extend(self.grants.values().cloned().map(Object::Grant));
        out.extend(self.lobbies.values().cloned().map(Object::Lobby));
        out.extend(self.actors.values().cloned().map(Object::Actor));
        out.extend(self.tokens.values().cloned().map(Object::Token));
        out.extend(self.api_keys.values().cloned().map(Object::ApiKey));
        out
    }

    /// The registry snapshot edges read. Grants past their expiry stay in (the access check
    /// ignores them) so that `ListGrants` shows them until deleted.
    ///
    /// # Errors
    /// [`RegistryError`] naming the first dangling reference or invalid value.
    pub fn build(&self) -> Result<Registry, RegistryError> {
        let err = |m: String| RegistryError(m);
        let mut apps_by_project: BTreeMap<&str, Vec<&AppRecord>> = BTreeMap::new();
        for a in self.apps.values() {
            apps_by_project.entry(a.project.as_str()).or_default().push(a);
        }
        let mut projects = Vec::with_capacity(self.projects.len());
        for p in self.projects.values() {
            let id = ProjectId::parse(&p.id).map_err(|e| err(e.to_string()))?;
            let mut apps = Vec::new();
            let mut own = apps_by_project.remove(p.id.as_str()).unwrap_or_default();
            own.sort_by_key(|a| (a.created_at_ms, a.id.clone()));
            for a in own {
                let mut topics = BTreeMap::new();
                let mut webhooks = BTreeMap::new();
                let (app_hydration, app_trigger) =
                    (a.hydration_webhook.as_ref().map(|w| w.target()), a.trigger_webhook.as_ref().map(|w| w.target()));
                for t in &a.topics {
                    topics.insert(
                        t.name.clone(),
                        TopicConfig { logged: t.logged, history: t.history.map(|h| h.config()) },
                    );
                    let hooks = TopicWebhooks {
                        hydration: t
                            .webhooks
                            .on_subscribe
                            .as_ref()
                            .map(|w| w.target())
                            .or_else(|| app_hydration.clone()),
                        trigger: t.webhooks.on_publish.as_ref().map(|w| w.target()).or_else(|| app_trigger.clone()),
                    };
                    if hooks != TopicWebhooks::default() {
                        webhooks.insert(t.name.clone(), hooks);
                    }
                }
                let mut rooms = BTreeMap::new();
                for ((app, slug), r) in self.rooms.range((a.id.clone(), String::new())..) {
                    if *app != a.id {
                        break;
                    }
                    rooms.insert(
                        slug.clone(),
                        Room { slug: slug.as_str().into(), name: r.name.as_str().into(), grants: Vec::new() },
                    );
                }
                apps.push(App {
                    id: AppId::parse(&a.id).map_err(|e| err(e.to_string()))?,
                    slug: a.slug.clone(),
                    topics,
                    rooms,
                    webhooks,
                    webhook_secret: a.webhook_secret.as_deref().map(|s| WebhookSecret(s.into())),
                });
            }
            let mut lobbies = BTreeMap::new();
            for ((project, slug), l) in &self.lobbies {
                if *project != p.id {
                    continue;
                }
                let allowed = l.allowed.iter().map(subject).collect::<Result<Vec<_>, _>>()?;
                let app = AppId::parse(&l.app).map_err(|e| err(e.to_string()))?;
                lobbies.insert(slug.clone(), Lobby { slug: slug.clone(), app, rooms: l.rooms.clone(), allowed });
            }
            let limits = ProjectLimits {
                max_connections: p.limits.max_connections,
                rate_limit: p.limits.rate_limit,
                max_message_size: p.limits.max_message_size.map(|n| n as usize),
                monthly_message_quota: p.limits.monthly_message_quota,
            };
            let wake_secret = p.wake_secret.as_deref().map(|s| WebhookSecret(Arc::from(s)));
            projects.push(Project { id, jwt_secret: p.jwt_secret.clone(), wake_secret, apps, lobbies, limits });
        }
        if let Some((project, apps)) = apps_by_project.into_iter().next() {
            return Err(err(format!("app {}: unknown project {project}", apps[0].id)));
        }
        for g in self.grants.values() {
            let project = projects
                .iter_mut()
                .find(|p| p.id.as_str() == g.project)
                .ok_or_else(|| err(format!("grant {}: unknown project {}", g.id, g.project)))?;
            let room = project
                .apps
                .iter_mut()
                .find(|a| a.id.as_str() == g.app)
                .and_then(|a| a.rooms.get_mut(&g.room))
                .ok_or_else(|| err(format!("grant {}: unknown room {} of app {}", g.id, g.room, g.app)))?;
            room.grants.push(Grant {
                subject: subject(&g.subject)?,
                permission: permission(&g.permission).map_err(err)?,
                topics: g.topics.clone(),
                expires_at: g.expires_at,
            });
        }
        let mut actors = Vec::with_capacity(self.actors.len());
        for a in self.actors.values() {
            let scope = match &a.scope {
                None => None,
                Some(id) => {
                    let s = self
                        .scopes
                        .get(id)
                        .filter(|s| s.project == a.project)
                        .ok_or_else(|| err(format!("actor {}: unknown scope {id}", a.id)))?;
                    Some(ActorScope { slug: Arc::from(s.slug.as_str()), active: s.active })
                }
            };
            actors.push(Actor {
                scope,
                id: ActorId::parse(&a.id).map_err(|e| err(e.to_string()))?,
                project: ProjectId::parse(&a.project).map_err(|e| err(e.to_string()))?,
                actor_type: ActorType::parse(&a.actor_type).map_err(|e| err(e.to_string()))?,
                active: a.active,
                rate_limit: a.rate_limit,
                disconnect_before_ms: a.disconnect_before_ms,
            });
        }
        let mut tokens = Vec::with_capacity(self.tokens.len());
        for t in self.tokens.values() {
            let digest = parse_hex32(&t.sha256).ok_or_else(|| err(format!("token {}: bad digest", t.key_id)))?;
            tokens.push((digest, ActorId::parse(&t.actor).map_err(|e| err(e.to_string()))?));
        }
        let mut scopes = Vec::with_capacity(self.scopes.len());
        for s in self.scopes.values() {
            scopes.push(ScopeInfo {
                project: ProjectId::parse(&s.project).map_err(|e| err(e.to_string()))?,
                id: s.id.as_str().into(),
                slug: s.slug.as_str().into(),
                name: s.name.as_str().into(),
            });
        }
        Registry::build_hashed(projects, actors, tokens)?.with_scopes(scopes)
    }
}

fn subject(s: &SubjectRecord) -> Result<GrantSubject, RegistryError> {
    match s {
        SubjectRecord::Actor(a) => ActorId::parse(a).map(GrantSubject::Actor),
        SubjectRecord::ActorType(t) => ActorType::parse(t).map(GrantSubject::ActorType),
    }
    .map_err(|e| RegistryError(e.to_string()))
}

/// Parses a permission's wire string.
///
/// # Errors
/// The message for an unknown permission.
pub fn permission(s: &str) -> Result<Permission, String> {
    match s {
        "subscribe" => Ok(Permission::Subscribe),
        "publish" => Ok(Permission::Publish),
        "pubSub" => Ok(Permission::PubSub),
        other => Err(format!("permission {other:?}: one of subscribe, publish, pubSub")),
    }
}

/// Lowercase hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn parse_hex32(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(i * 2..i * 2 + 2)?, 16).ok()?;
    }
    Some(out)
}

/// One authenticated connection as a node advertises it for cluster-wide listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionRecord {
    /// The node holding it.
    pub node: String,
    /// Connection id on that node.
    pub conn: String,
    /// Project.
    pub project: String,
    /// Actor.
    pub actor: String,
    /// `clientId` given at auth, or empty.
    pub client_id: String,
    /// When it authenticated, unix ms.
    pub connected_at_ms: u64,
    /// Topic subscriptions held when last written.
    pub subscriptions: u32,
    /// How it reached its node (`ws`, `mqtt`, `mqtt-ws`).
    pub protocol: String,
}

/// Why a change set was not applied.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApplyError {
    /// The registry changed since `expected_version`: reload and retry.
    #[error("the registry changed concurrently (now at version {current})")]
    Conflict {
        /// The version found.
        current: u64,
    },
    /// The backend failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The control plane's registry in the store. Every implementation guarantees:
///
/// 1. `apply(v, changes)` applies all of `changes` atomically iff the version is still `v`,
///    and then the version is `v + 1`; otherwise nothing changes and it returns
///    [`ApplyError::Conflict`]. So concurrent writers (several control replicas) serialise.
/// 2. `load` returns the objects and the version they belong to, read consistently.
/// 3. `version` is cheap: edges poll it to learn of changes (docs/control-plane.md).
/// 4. `add_usage` adds to a project's per-period message counter and returns the new total;
///    `usage` reads it (0 when absent).
/// 5. `write_connections` records that `node` was alive at `now_ms` and applies its connection
///    changes (all of its rows replaced when `full`); `list_connections` returns the rows of
///    nodes seen since `seen_since_ms`, oldest connection first, at most `limit`;
///    `forget_node` removes a node's rows.
#[async_trait]
pub trait RegistryStore: Send + Sync + std::fmt::Debug + 'static {
    /// The current version (0 for an empty registry).
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed.
    async fn version(&self) -> Result<u64, StoreError>;

    /// Every object and the version they belong to.
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed or a stored object does not decode.
    async fn load(&self) -> Result<RegistrySnapshot, StoreError>;

    /// Applies `changes` if the version is `expected_version`; returns the new version.
    ///
    /// # Errors
    /// [`ApplyError::Conflict`] when the version moved; [`ApplyError::Store`] on failure.
    async fn apply(&self, expected_version: u64, changes: &[Change]) -> Result<u64, ApplyError>;

    /// Adds `messages` to `project`'s counter for `period` (`YYYY-MM`); returns the total.
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed.
    async fn add_usage(&self, project: &str, period: &str, messages: u64) -> Result<u64, StoreError>;

    /// `project`'s counter for `period`.
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed.
    async fn usage(&self, project: &str, period: &str) -> Result<u64, StoreError>;

    /// Applies `node`'s connection changes: `upserts` written, `removed` (connection ids)
    /// deleted, every other row of the node deleted first when `full`.
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed.
    async fn write_connections(
        &self,
        node: &str,
        now_ms: u64,
        full: bool,
        upserts: &[ConnectionRecord],
        removed: &[String],
    ) -> Result<(), StoreError>;

    /// Connections of `project` (of `actor` only, when given) on nodes seen since
    /// `seen_since_ms`, oldest first, at most `limit`.
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed.
    async fn list_connections(
        &self,
        project: &str,
        actor: Option<&str>,
        seen_since_ms: u64,
        limit: u32,
    ) -> Result<Vec<ConnectionRecord>, StoreError>;

    /// Removes `node` and its connections (it shut down).
    ///
    /// # Errors
    /// [`StoreError`] when the backend failed.
    async fn forget_node(&self, node: &str) -> Result<(), StoreError>;
}

/// `YYYY-MM` (UTC) of a unix time in seconds: the quota period.
pub fn month_of(unix_s: u64) -> String {
    // Civil-from-days (Howard Hinnant's algorithm), valid for every u64 day count we meet.
    let days = (unix_s / 86_400) as i64;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn months() {
        assert_eq!(month_of(0), "1970-01");
        assert_eq!(month_of(1_796_083_200), "2026-12"); // 2026-12-01T00:00:00Z
        assert_eq!(month_of(1_796_083_199), "2026-11");
        assert_eq!(month_of(951_782_400), "2000-02"); // 2000-02-29
    }

    #[test]
    fn annotations_are_absent_from_records_without_them_and_round_trip_with_them() {
        // A room as stored before annotations existed reads back with none, and writes back
        // the same JSON (so older nodes and the registry's change detection see no change).
        let before = r#"{"project":"p","app":"a","slug":"r","name":"R","dynamic":true,"created_at_ms":5}"#;
        let Object::Room(room) = Object::from_spec(ObjectKind::Room, before).unwrap() else { panic!("a room") };
        assert_eq!(room.annotations, AnnotationsRecord::default());
        assert_eq!(Object::Room(room.clone()).spec_json().unwrap(), before);
        let noted = RoomRecord {
            annotations: AnnotationsRecord {
                description: Some("d".into()),
                external_id: Some("x-1".into()),
                metadata: Some(r#"{"k":[1]}"#.into()),
            },
            ..room
        };
        let o = Object::Room(noted);
        assert_eq!(Object::from_spec(ObjectKind::Room, &o.spec_json().unwrap()).unwrap(), o);
    }

    #[test]
    fn objects_round_trip_through_json() {
        let o = Object::Grant(GrantRecord {
            id: "g1".into(),
            project: "p".into(),
            app: "a".into(),
            room: "r".into(),
            subject: SubjectRecord::ActorType("agent".into()),
            permission: "pubSub".into(),
            topics: Some(vec!["t".into()]),
            expires_at: None,
            created_at_ms: 5,
            role: Some("host".into()),
            metadata: Some(r#"{"seat":1}"#.into()),
        });
        let back = Object::from_spec(ObjectKind::Grant, &o.spec_json().unwrap()).unwrap();
        assert_eq!(back, o);
        assert_eq!(hex(&[0, 255, 16]), "00ff10");
        assert_eq!(parse_hex32(&hex(&[7; 32])), Some([7; 32]));
    }
}
