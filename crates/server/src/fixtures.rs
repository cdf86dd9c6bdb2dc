//! Fixtures files: apps, rooms, grants, lobbies, actors and tokens in TOML (docs/fixtures.md).
//! `--dev` loads the built-in `config/dev-fixtures.toml` through the same code.

use serde::Deserialize;
use skua_core::registry::{Registry, digest};
use skua_core::registry_store::{
    ActorRecord, AnnotationsRecord, AppRecord, GrantRecord, LimitsRecord, LobbyRecord, Object, ProjectRecord,
    RoomRecord, SubjectRecord, TokenRecord, TopicRecord, WebhookTargetRecord, hex,
};
use skua_core::webhook::WebhookKind;
use skua_core::{ActorId, ActorType, AppId, ProjectId, RegistryData};

/// The demo fixtures of `--dev`.
pub const DEV_FIXTURES: &str = include_str!("../../../config/dev-fixtures.toml");

/// The demo project's REST API key (in `config/dev-fixtures.toml`).
pub const DEV_API_KEY: &str = "skua-dev-api-key";

/// The HS256 secret of the demo project's client tokens.
pub const DEV_JWT_SECRET: &str = "skua-dev-secret";

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    projects: Vec<ProjectDef>,
    #[serde(default)]
    actors: Vec<ActorDef>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProjectDef {
    id: String,
    jwt_secret: Option<String>,
    max_connections: Option<u32>,
    rate_limit: Option<u32>,
    max_message_size: Option<u32>,
    monthly_message_quota: Option<u64>,
    #[serde(default)]
    apps: Vec<AppDef>,
    #[serde(default)]
    lobbies: Vec<LobbyDef>,
    /// Project API keys (the REST API's bearer keys), stored as digests.
    #[serde(default)]
    api_keys: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AppDef {
    id: String,
    slug: String,
    #[serde(default)]
    topics: Vec<String>,
    #[serde(default)]
    logged_topics: Vec<String>,
    #[serde(default)]
    auto_provision_rooms: bool,
    #[serde(default)]
    rooms: Vec<RoomDef>,
    /// App-level hydration webhook (N41).
    hydration_webhook: Option<WebhookDef>,
    /// App-level trigger webhook (N41).
    trigger_webhook: Option<WebhookDef>,
    /// The secret webhook requests are signed with (N42).
    webhook_secret: Option<String>,
    /// Per-topic settings: `topic_configs.<topic>.webhooks.on_subscribe` / `.on_publish`.
    #[serde(default)]
    topic_configs: std::collections::BTreeMap<String, TopicConfigDef>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WebhookDef {
    url: String,
    #[serde(default)]
    headers: std::collections::BTreeMap<String, String>,
    timeout_ms: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TopicConfigDef {
    #[serde(default)]
    webhooks: TopicWebhooksDef,
    /// Each room's last messages, kept for recovery (issue 19): `{ size = N, ttl = "10m" }`.
    history: Option<HistoryDef>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HistoryDef {
    size: u32,
    ttl: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TopicWebhooksDef {
    on_subscribe: Option<WebhookDef>,
    on_publish: Option<WebhookDef>,
}

/// A fixtures webhook, checked for form (URL, headers, timeout). Fixtures come from the operator,
/// so the address rules (`webhook_allow_link_local`, `webhook_allow_loopback`, `webhook_allowed_hosts`) apply when a call is
/// made rather than here.
fn webhook(field: &str, kind: WebhookKind, w: Option<WebhookDef>) -> Result<Option<WebhookTargetRecord>, String> {
    let Some(w) = w else { return Ok(None) };
    let r = WebhookTargetRecord { url: w.url, headers: w.headers, timeout_ms: w.timeout_ms };
    let form_only =
        skua_control::WebhookPolicy { allow_link_local: true, allow_loopback: true, allowed_hosts: Vec::new() };
    form_only.check(field, kind, &r).map_err(|e| e.to_string())?;
    Ok(Some(r))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RoomDef {
    slug: String,
    #[serde(default)]
    grants: Vec<GrantDef>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GrantDef {
    actor: Option<String>,
    actor_type: Option<String>,
    permission: String,
    topics: Option<Vec<String>>,
    expires_at: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LobbyDef {
    slug: String,
    app: String,
    rooms: Vec<String>,
    #[serde(default)]
    allowed_actors: Vec<String>,
    #[serde(default)]
    allowed_actor_types: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ActorDef {
    id: String,
    project: String,
    #[serde(rename = "type")]
    actor_type: String,
    #[serde(default)]
    tokens: Vec<String>,
    #[serde(default = "yes")]
    active: bool,
    rate_limit: Option<u32>,
}

fn yes() -> bool {
    true
}

/// Why a fixtures file was refused.
#[derive(Debug, thiserror::Error)]
#[error("fixtures {source_name}: {message}")]
pub struct FixturesError {
    /// Which file.
    pub source_name: String,
    /// What is wrong.
    pub message: String,
}

/// Parses fixtures sources (name, TOML text) into one registry.
///
/// # Errors
/// [`FixturesError`] naming the source and the first problem.
pub fn load(sources: &[(&str, &str)]) -> Result<Registry, FixturesError> {
    let data = load_data(sources)?;
    data.build().map_err(|e| FixturesError {
        source_name: sources.iter().map(|s| s.0).collect::<Vec<_>>().join(", "),
        message: e.0,
    })
}

/// Parses fixtures sources (name, TOML text) into registry records: what `skua serve` writes
/// to the store (the same change sets as the control plane's), checked to form a valid
/// registry on their own.
///
/// # Errors
/// [`FixturesError`] naming the source and the first problem.
pub fn load_data(sources: &[(&str, &str)]) -> Result<RegistryData, FixturesError> {
    let mut data = RegistryData::default();
    // Creation times are the definition order, so reloading unchanged fixtures changes nothing
    // and apps keep the order `resolve_room` relies on.
    let mut seq = 0u64;
    for (name, text) in sources {
        let err = |message: String| FixturesError { source_name: (*name).to_owned(), message };
        let file: File = toml::from_str(text).map_err(|e| err(e.to_string()))?;
        for p in file.projects {
            if data.projects.contains_key(&p.id) {
                return Err(err("duplicate project".into()));
            }
            project(p, &mut data, &mut seq).map_err(err)?;
        }
        for a in file.actors {
            ActorId::parse(&a.id).map_err(|e| err(e.to_string()))?;
            ProjectId::parse(&a.project).map_err(|e| err(e.to_string()))?;
            ActorType::parse(&a.actor_type).map_err(|e| err(e.to_string()))?;
            if data.actors.contains_key(&a.id) {
                return Err(err("duplicate actor id".into()));
            }
            for t in &a.tokens {
                if t.is_empty() {
                    return Err(err(format!("actor {}: empty token", a.id)));
                }
                let sha256 = hex(&digest(t));
                // A stable key id, so that reloading the same file replaces rather than adds.
                let key_id = format!("fx{}", &sha256[..14]);
                if data.tokens.values().any(|x| x.sha256 == sha256) {
                    return Err(err("the same token is given twice".into()));
                }
                data.insert(Object::Token(TokenRecord { key_id, actor: a.id.clone(), sha256, created_at_ms: seq }));
            }
            seq += 1;
            data.insert(Object::Actor(ActorRecord {
                project: a.project,
                id: a.id.clone(),
                actor_type: a.actor_type,
                name: a.id,
                active: a.active,
                rate_limit: a.rate_limit,
                disconnect_before_ms: None,
                created_at_ms: seq,
                scope: None,
                annotations: AnnotationsRecord::default(),
            }));
        }
    }
    data.build().map_err(|e| FixturesError {
        source_name: sources.iter().map(|s| s.0).collect::<Vec<_>>().join(", "),
        message: e.0,
    })?;
    Ok(data)
}

fn slug(kind: &str, s: &str) -> Result<(), String> {
    if skua_core::ids::is_slug(s) { Ok(()) } else { Err(format!("{kind} {s:?}: 1-64 letters, digits, '-' or '_'")) }
}

fn subject(actor: Option<String>, actor_type: Option<String>, room: &str) -> Result<SubjectRecord, String> {
    match (actor, actor_type) {
        (Some(a), None) => {
            ActorId::parse(&a).map_err(|e| e.to_string())?;
            Ok(SubjectRecord::Actor(a))
        }
        (None, Some(t)) => {
            ActorType::parse(&t).map_err(|e| e.to_string())?;
            Ok(SubjectRecord::ActorType(t))
        }
        _ => Err(format!("room {room}: a grant names exactly one of actor, actor_type")),
    }
}

fn project(p: ProjectDef, data: &mut RegistryData, seq: &mut u64) -> Result<(), String> {
    ProjectId::parse(&p.id).map_err(|e| e.to_string())?;
    for k in &p.api_keys {
        if k.len() < 8 {
            return Err(format!("project {}: an API key has fewer than 8 characters", p.id));
        }
        // The key id is derived from the key, so reloading the same file replaces it.
        let key_id = skua_core::registry_store::api_key_id(k);
        if data.api_keys.contains_key(&key_id) {
            return Err(format!("project {}: the same API key is given twice", p.id));
        }
        *seq += 1;
        data.insert(Object::ApiKey(skua_core::registry_store::ApiKeyRecord {
            key_id: key_id.clone(),
            project: p.id.clone(),
            name: format!("fixtures key {key_id}"),
            sha256: hex(&digest(k)),
            created_at_ms: *seq,
        }));
    }
    let mut apps: Vec<AppRecord> = Vec::new();
    for a in p.apps {
        slug("app slug", &a.slug)?;
        AppId::parse(&a.id).map_err(|e| e.to_string())?;
        if apps.iter().any(|x| x.id == a.id || x.slug == a.slug) || data.apps.contains_key(&a.id) {
            return Err(format!("project {}: duplicate app {} ({})", p.id, a.slug, a.id));
        }
        let mut topics: Vec<TopicRecord> = Vec::new();
        for t in &a.topics {
            slug("topic", t)?;
            if topics.iter().any(|x| x.name == *t) {
                return Err(format!("app {}: topic {t} listed twice", a.slug));
            }
            topics.push(TopicRecord {
                name: t.clone(),
                logged: false,
                webhook: None,
                webhooks: Default::default(),
                history: None,
            });
        }
        for t in &a.logged_topics {
            topics
                .iter_mut()
                .find(|x| x.name == *t)
                .ok_or_else(|| format!("app {}: logged topic {t} is not in topics", a.slug))?
                .logged = true;
        }
        for (name, config) in a.topic_configs {
            let topic = topics
                .iter_mut()
                .find(|x| x.name == name)
                .ok_or_else(|| format!("app {}: topic_configs names {name}, which is not in topics", a.slug))?;
            let field = |which: &str| format!("app {} topic_configs.{name}.webhooks.{which}", a.slug);
            topic.webhooks.on_subscribe =
                webhook(&field("on_subscribe"), WebhookKind::Hydration, config.webhooks.on_subscribe)?;
            topic.webhooks.on_publish =
                webhook(&field("on_publish"), WebhookKind::Trigger, config.webhooks.on_publish)?;
            if let Some(h) = config.history {
                let field = format!("app {} topic_configs.{name}.history", a.slug);
                let ttl = crate::duration::parse(&h.ttl).map_err(|e| format!("{field}.ttl: {e}"))?;
                let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
                if h.size == 0 || ttl_ms == 0 {
                    return Err(format!("{field}: size and ttl must be above 0"));
                }
                topic.history = Some(skua_core::registry_store::HistoryRecord { size: h.size, ttl_ms });
            }
        }
        let hydration_webhook =
            webhook(&format!("app {} hydration_webhook", a.slug), WebhookKind::Hydration, a.hydration_webhook)?;
        let trigger_webhook =
            webhook(&format!("app {} trigger_webhook", a.slug), WebhookKind::Trigger, a.trigger_webhook)?;
        if a.webhook_secret.as_deref().is_some_and(|s| s.is_empty() || s.len() > 512) {
            return Err(format!("app {}: webhook_secret must be 1-512 bytes", a.slug));
        }
        for r in a.rooms {
            slug("room", &r.slug)?;
            if data.rooms.contains_key(&(a.id.clone(), r.slug.clone())) {
                return Err(format!("app {}: room {} defined twice", a.slug, r.slug));
            }
            for (i, g) in r.grants.into_iter().enumerate() {
                let subject = subject(g.actor, g.actor_type, &r.slug)?;
                if let Some(ts) = &g.topics
                    && let Some(bad) = ts.iter().find(|t| !topics.iter().any(|x| x.name == **t))
                {
                    return Err(format!("room {}: grant topic {bad} is not in the app's topics", r.slug));
                }
                skua_core::registry_store::permission(&g.permission)?;
                *seq += 1;
                data.insert(Object::Grant(GrantRecord {
                    id: format!("fx-{}-{}-{i}", a.id, r.slug),
                    project: p.id.clone(),
                    app: a.id.clone(),
                    room: r.slug.clone(),
                    subject,
                    permission: g.permission,
                    topics: g.topics,
                    expires_at: g.expires_at,
                    created_at_ms: *seq,
                    role: None,
                    metadata: None,
                }));
            }
            *seq += 1;
            data.insert(Object::Room(RoomRecord {
                project: p.id.clone(),
                app: a.id.clone(),
                slug: r.slug.clone(),
                name: r.slug,
                dynamic: false,
                created_at_ms: *seq,
                annotations: AnnotationsRecord::default(),
            }));
        }
        *seq += 1;
        apps.push(AppRecord {
            project: p.id.clone(),
            id: a.id,
            slug: a.slug.clone(),
            name: a.slug,
            topics,
            auto_provision_rooms: a.auto_provision_rooms,
            max_rooms: None,
            created_at_ms: *seq,
            hydration_webhook,
            trigger_webhook,
            webhook_secret: a.webhook_secret,
            annotations: AnnotationsRecord::default(),
        });
    }
    for l in p.lobbies {
        slug("lobby", &l.slug)?;
        let app =
            apps.iter().find(|a| a.slug == l.app).ok_or_else(|| format!("lobby {}: unknown app {}", l.slug, l.app))?;
        let mut allowed = Vec::new();
        for a in l.allowed_actors {
            ActorId::parse(&a).map_err(|e| e.to_string())?;
            allowed.push(SubjectRecord::Actor(a));
        }
        for t in l.allowed_actor_types {
            ActorType::parse(&t).map_err(|e| e.to_string())?;
            allowed.push(SubjectRecord::ActorType(t));
        }
        if data.lobbies.contains_key(&(p.id.clone(), l.slug.clone())) {
            return Err(format!("lobby {} defined twice", l.slug));
        }
        data.insert(Object::Lobby(LobbyRecord {
            project: p.id.clone(),
            slug: l.slug,
            app: app.id.clone(),
            rooms: l.rooms,
            allowed,
        }));
    }
    for a in apps {
        data.insert(Object::App(a));
    }
    *seq += 1;
    data.insert(Object::Project(ProjectRecord {
        id: p.id.clone(),
        name: p.id,
        jwt_secret: p.jwt_secret,
        wake_secret: None,
        limits: LimitsRecord {
            max_connections: p.max_connections,
            monthly_message_quota: p.monthly_message_quota,
            rate_limit: p.rate_limit,
            max_message_size: p.max_message_size,
        },
        created_at_ms: *seq,
    }));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use skua_core::registry::Operation;

    #[test]
    fn webhooks_load_with_the_topic_s_own_entry_winning() {
        let toml = r#"
[[projects]]
id = "p"
[[projects.apps]]
id = "p-chat"
slug = "chat"
topics = ["messages", "typing"]
hydration_webhook = { url = "https://backend.example.com/hydrate", timeout_ms = 3000 }
trigger_webhook = { url = "https://backend.example.com/events", headers = { "X-Env" = "prod" } }
webhook_secret = "whsec_x"
topic_configs.typing.webhooks.on_subscribe = { url = "https://backend.example.com/typing" }
[[projects.apps.rooms]]
slug = "lobby"
"#;
        let r = load(&[("t", toml)]).unwrap();
        let at = |topic: &str| skua_core::TopicAddress {
            room: skua_core::RoomKey {
                project: ProjectId::parse("p").unwrap(),
                app: AppId::parse("p-chat").unwrap(),
                room: "lobby".into(),
            },
            topic: topic.into(),
        };
        let h = WebhookKind::Hydration;
        assert_eq!(r.webhook(&at("typing"), h).unwrap().target.url, "https://backend.example.com/typing");
        let app = r.webhook(&at("messages"), h).unwrap();
        assert_eq!(
            (app.target.url.as_str(), app.target.timeout_ms),
            ("https://backend.example.com/hydrate", Some(3000))
        );
        assert!(app.secret.is_some());
        let t = r.webhook(&at("typing"), WebhookKind::Trigger).unwrap();
        assert_eq!(t.target.headers, [("X-Env".to_owned(), "prod".to_owned())]);
        let bad = toml.replace("https://backend.example.com/events", "ftp://x");
        assert!(load(&[("t", &bad)]).unwrap_err().message.contains("trigger_webhook.url"));
        let unknown = toml.replace("topic_configs.typing", "topic_configs.nope");
        let no_size = toml.replace(
            "topic_configs.typing.webhooks.on_subscribe",
            "topic_configs.typing.history = { size = 0, ttl = \"1m\" }\ntopic_configs.typing.webhooks.on_subscribe",
        );
        let e = load(&[("t", no_size.as_str())]).unwrap_err().to_string();
        assert!(e.contains("history: size and ttl must be above 0"), "{e}");
        assert!(load(&[("t", &unknown)]).unwrap_err().message.contains("not in topics"));
    }

    #[test]
    fn dev_fixtures_match_the_contract() {
        let r = load(&[("dev", DEV_FIXTURES)]).unwrap();
        for (token, id, ty) in [
            ("dev-token-alice", "alice", "user"),
            ("dev-token-bob", "bob", "user"),
            ("dev-token-carol", "carol", "device"),
            ("dev-token-agent", "agent-1", "agent"),
            ("dev-token-orchestrator", "orch-1", "orchestrator"),
            ("dev-token-viewer", "viewer", "observer"),
        ] {
            let a = r.actor_by_token(token).unwrap();
            assert_eq!((a.id.as_str(), a.actor_type.as_str(), a.project.as_str()), (id, ty, "demo-project"));
        }
        let bob = r.actor("bob").unwrap();
        let alice = r.actor("alice").unwrap();
        for t in ["messages", "status", "events", "results", "tasks", "feed"] {
            assert!(r.resolve_topic(bob, &format!("demo/general/{t}"), Operation::Publish, 0).is_ok());
            assert!(r.resolve_topic(alice, &format!("demo/general/{t}"), Operation::Subscribe, 0).is_ok());
        }
        assert!(r.resolve_topic(bob, "demo/general/tasks", Operation::Publish, 0).unwrap().logged);
        // `feed` keeps 1000 messages for 10 minutes (shared/CONTRACT.md, issue 19); no other does.
        let feed = r.resolve_topic(bob, "demo/general/feed", Operation::Publish, 0).unwrap().address;
        let history = r.history(&feed).unwrap();
        assert_eq!((history.size, history.ttl_ms), (1000, 600_000));
        let messages = r.resolve_topic(bob, "demo/general/messages", Operation::Publish, 0).unwrap().address;
        assert!(r.history(&messages).is_none());
        assert!(r.resolve_topic(bob, "demo/ops/messages", Operation::Subscribe, 0).is_err());
        assert!(r.resolve_topic(alice, "demo/ops/messages", Operation::Publish, 0).is_ok());
        assert_eq!(r.resolve_lobby(bob, "online").unwrap().rooms.len(), 2);
        assert!(r.jwt_projects().any(|p| p.jwt_secret.as_deref() == Some(DEV_JWT_SECRET)));
    }

    #[test]
    fn bad_fixtures_are_refused_with_the_reason() {
        let e = load(&[("f", "[[projects]]\nid = \"p\"\nnope = 1\n")]).unwrap_err();
        assert!(e.to_string().contains("nope"), "{e}");
        let e = load(&[("f", "[[actors]]\nid = \"a\"\nproject = \"missing\"\ntype = \"user\"\n")]).unwrap_err();
        assert!(e.to_string().contains("unknown project"), "{e}");
        let e = load(&[(
            "f",
            "[[projects]]\nid = \"p\"\n[[projects.apps]]\nid = \"a\"\nslug = \"a\"\ntopics = [\"x\"]\nlogged_topics = [\"y\"]\n",
        )])
        .unwrap_err();
        assert!(e.to_string().contains("logged topic y"), "{e}");
    }
}
