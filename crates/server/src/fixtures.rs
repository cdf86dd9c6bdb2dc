//! Fixtures files: apps, rooms, grants, lobbies, actors and tokens in TOML (docs/fixtures.md).
//! `--dev` loads the built-in `config/dev-fixtures.toml` through the same code.

use std::collections::BTreeMap;

use serde::Deserialize;
use skua_core::registry::{
    Actor, App, Grant, GrantSubject, Lobby, Permission, Project, ProjectLimits, Registry, Room, TopicConfig,
};
use skua_core::{ActorId, ActorType, AppId, ProjectId};

/// The demo fixtures of `--dev`.
pub const DEV_FIXTURES: &str = include_str!("../../../config/dev-fixtures.toml");

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
    max_message_size: Option<usize>,
    #[serde(default)]
    apps: Vec<AppDef>,
    #[serde(default)]
    lobbies: Vec<LobbyDef>,
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
    rooms: Vec<RoomDef>,
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
    let mut projects = Vec::new();
    let mut actors = Vec::new();
    let mut tokens = Vec::new();
    for (name, text) in sources {
        let err = |message: String| FixturesError { source_name: (*name).to_owned(), message };
        let file: File = toml::from_str(text).map_err(|e| err(e.to_string()))?;
        for p in file.projects {
            projects.push(project(p).map_err(err)?);
        }
        for a in file.actors {
            let id = ActorId::parse(&a.id).map_err(|e| err(e.to_string()))?;
            for t in &a.tokens {
                if t.is_empty() {
                    return Err(err(format!("actor {}: empty token", a.id)));
                }
                tokens.push((t.clone(), id.clone()));
            }
            actors.push(Actor {
                id,
                project: ProjectId::parse(&a.project).map_err(|e| err(e.to_string()))?,
                actor_type: ActorType::parse(&a.actor_type).map_err(|e| err(e.to_string()))?,
                active: a.active,
                rate_limit: a.rate_limit,
            });
        }
    }
    Registry::build(projects, actors, tokens).map_err(|e| FixturesError {
        source_name: sources.iter().map(|s| s.0).collect::<Vec<_>>().join(", "),
        message: e.0,
    })
}

fn slug(kind: &str, s: &str) -> Result<(), String> {
    if skua_core::ids::is_slug(s) { Ok(()) } else { Err(format!("{kind} {s:?}: 1-64 letters, digits, '-' or '_'")) }
}

fn permission(s: &str) -> Result<Permission, String> {
    match s {
        "subscribe" => Ok(Permission::Subscribe),
        "publish" => Ok(Permission::Publish),
        "pubSub" => Ok(Permission::PubSub),
        other => Err(format!("permission {other:?}: one of subscribe, publish, pubSub")),
    }
}

fn project(p: ProjectDef) -> Result<Project, String> {
    let id = ProjectId::parse(&p.id).map_err(|e| e.to_string())?;
    let mut apps = Vec::new();
    for a in p.apps {
        slug("app slug", &a.slug)?;
        let mut topics = BTreeMap::new();
        for t in &a.topics {
            slug("topic", t)?;
            if topics.insert(t.clone(), TopicConfig::default()).is_some() {
                return Err(format!("app {}: topic {t} listed twice", a.slug));
            }
        }
        for t in &a.logged_topics {
            topics.get_mut(t).ok_or_else(|| format!("app {}: logged topic {t} is not in topics", a.slug))?.logged =
                true;
        }
        let mut rooms = BTreeMap::new();
        for r in a.rooms {
            slug("room", &r.slug)?;
            let mut grants = Vec::new();
            for g in r.grants {
                let subject = match (g.actor, g.actor_type) {
                    (Some(a), None) => GrantSubject::Actor(ActorId::parse(&a).map_err(|e| e.to_string())?),
                    (None, Some(t)) => GrantSubject::ActorType(ActorType::parse(&t).map_err(|e| e.to_string())?),
                    _ => return Err(format!("room {}: a grant names exactly one of actor, actor_type", r.slug)),
                };
                if let Some(ts) = &g.topics
                    && let Some(bad) = ts.iter().find(|t| !topics.contains_key(*t))
                {
                    return Err(format!("room {}: grant topic {bad} is not in the app's topics", r.slug));
                }
                grants.push(Grant {
                    subject,
                    permission: permission(&g.permission)?,
                    topics: g.topics,
                    expires_at: g.expires_at,
                });
            }
            if rooms.insert(r.slug.clone(), Room { slug: r.slug.as_str().into(), grants }).is_some() {
                return Err(format!("app {}: room {} defined twice", a.slug, r.slug));
            }
        }
        apps.push(App { id: AppId::parse(&a.id).map_err(|e| e.to_string())?, slug: a.slug, topics, rooms });
    }
    let mut lobbies = BTreeMap::new();
    for l in p.lobbies {
        slug("lobby", &l.slug)?;
        let app =
            apps.iter().find(|a| a.slug == l.app).ok_or_else(|| format!("lobby {}: unknown app {}", l.slug, l.app))?;
        let mut allowed = Vec::new();
        for a in &l.allowed_actors {
            allowed.push(GrantSubject::Actor(ActorId::parse(a).map_err(|e| e.to_string())?));
        }
        for t in &l.allowed_actor_types {
            allowed.push(GrantSubject::ActorType(ActorType::parse(t).map_err(|e| e.to_string())?));
        }
        let lobby = Lobby { slug: l.slug.clone(), app: app.id.clone(), rooms: l.rooms, allowed };
        if lobbies.insert(l.slug.clone(), lobby).is_some() {
            return Err(format!("lobby {} defined twice", l.slug));
        }
    }
    Ok(Project {
        id,
        jwt_secret: p.jwt_secret,
        apps,
        lobbies,
        limits: ProjectLimits {
            max_connections: p.max_connections,
            rate_limit: p.rate_limit,
            max_message_size: p.max_message_size,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use skua_core::registry::Operation;

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
        for t in ["messages", "status", "events", "results", "tasks"] {
            assert!(r.resolve_topic(bob, &format!("demo/general/{t}"), Operation::Publish, 0).is_ok());
        }
        assert!(r.resolve_topic(bob, "demo/general/tasks", Operation::Publish, 0).unwrap().logged);
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
