//! `skua admin scopes …`: access scopes (tenant isolation inside a project) and moving actors
//! into and out of them.

use clap::Subcommand;
use serde_json::{Value, json};
use skua_control::pb;

use super::{Client, Failure, json::Out};

/// The `scopes` subcommands.
#[derive(Debug, Subcommand)]
pub(super) enum ScopeCmd {
    /// Create a scope.
    Create {
        /// Slug (injected into its actors' room addresses).
        slug: String,
        /// Display name.
        #[arg(long, default_value = "")]
        name: String,
    },
    /// Show a scope.
    Get {
        /// Scope id or slug.
        scope: String,
    },
    /// List the project's scopes.
    List,
    /// Rename, deactivate (its actors close 4001 scope_inactive) or reactivate a scope.
    Update {
        /// Scope id or slug.
        scope: String,
        /// New display name.
        #[arg(long)]
        name: Option<String>,
        /// Activate (true) or deactivate (false).
        #[arg(long)]
        active: Option<bool>,
    },
    /// Delete a scope; its actors become unscoped.
    Delete {
        /// Scope id or slug.
        scope: String,
    },
    /// Move an actor into a scope, or out of any without SCOPE (its connections close 4001).
    SetActor {
        /// Actor id.
        actor: String,
        /// Scope id or slug; omitted: no scope.
        scope: Option<String>,
    },
}

fn scope(s: &pb::Scope) -> Value {
    json!({"id": s.id, "project_id": s.project_id, "slug": s.slug, "name": s.name, "active": s.active,
        "created_at_ms": s.created_at_ms, "actor_count": s.actor_count})
}

fn human(s: &pb::Scope) -> String {
    let state = if s.active { "active" } else { "INACTIVE" };
    format!("scope {} ({}, {}, project {}, {state}, {} actors)", s.slug, s.id, s.name, s.project_id, s.actor_count)
}

pub(super) async fn execute(c: &mut Client, project: String, out: &Out, cmd: ScopeCmd) -> Result<String, Failure> {
    let one = |s: pb::Scope| out.emit(scope(&s), || human(&s));
    Ok(match cmd {
        ScopeCmd::Create { slug, name } => {
            one(c.create_scope(pb::CreateScopeRequest { project_id: project, slug, name }).await?.into_inner())
        }
        ScopeCmd::Get { scope } => one(c.get_scope(pb::ScopeRef { project_id: project, scope }).await?.into_inner()),
        ScopeCmd::List => {
            let l = c.list_scopes(pb::ListScopesRequest { project_id: project }).await?.into_inner().scopes;
            out.emit(Value::Array(l.iter().map(scope).collect()), || l.iter().map(human).collect::<Vec<_>>().join("\n"))
        }
        ScopeCmd::Update { scope, name, active } => {
            let r = pb::UpdateScopeRequest { project_id: project, scope, name, active };
            one(c.update_scope(r).await?.into_inner())
        }
        ScopeCmd::Delete { scope } => {
            out.deleted(&c.delete_scope(pb::ScopeRef { project_id: project, scope }).await?.into_inner())
        }
        ScopeCmd::SetActor { actor, scope } => {
            let r = pb::SetActorScopeRequest { actor_id: actor, scope: scope.unwrap_or_default() };
            out.actor(&c.set_actor_scope(r).await?.into_inner())
        }
    })
}
