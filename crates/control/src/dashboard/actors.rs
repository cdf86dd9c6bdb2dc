//! The actors of a project: their list with the create form, deletion, and the edit page of
//! an actor's name, state and access scope (and a new access token).
//! Each create, edit or delete calls the service function the gRPC and REST APIs call, and
//! shows its error message when it refuses.

use std::fmt::Write as _;

use crate::service::Error;
use axum::http::StatusCode;
use axum::response::Response;

use super::common::{chooser, current_project, done, done_redirect, error_page, param, refused};
use super::html::{self, Notice, button_form, checkbox, csrf_input, esc, field, q};
use super::search::Search;
use super::{Authed, Dashboard, Form};
use crate::pb;
use crate::service::{actors, scopes};

/// `GET /admin/actors?project=`.
pub(crate) async fn actors(d: &Dashboard, a: Authed) -> Response {
    actors_page(d, &a, done(&a)).await
}

async fn actors_page(d: &Dashboard, a: &Authed, notice: Option<Notice<'_>>) -> Response {
    let (projects, project) = current_project(d, a).await;
    let keep = [("project", project.as_str())];
    let search = match Search::of(d, a, "/admin/actors", "Actors", "Actors", &keep) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let r = pb::ListActorsRequest {
        project_id: project.clone(),
        page_size: u32::try_from(d.config.page_size).unwrap_or(u32::MAX),
        page_token: a.query.get("page").to_owned(),
    };
    let list =
        actors::list_where(&d.svc, r, |x| search.matches([x.id.as_str(), x.name.as_str(), x.actor_type.as_str()]))
            .await
            .unwrap_or_default();
    let scopes = scopes::list(&d.svc, pb::ListScopesRequest { project_id: project.clone() })
        .await
        .map(|r| r.scopes)
        .unwrap_or_default();
    let rows: Vec<Vec<String>> = list
        .actors
        .iter()
        .map(|x| {
            let scope = scopes.iter().find(|s| s.id == x.scope_id).map_or(x.scope_id.as_str(), |s| s.slug.as_str());
            vec![
                format!(
                    "{s} (<a href=\"/admin/actors/edit?project={p}&amp;actor={a}\" aria-label=\"Edit actor {s}\">edit</a>)",
                    s = esc(&x.id),
                    p = q(&project),
                    a = q(&x.id)
                ),
                esc(&x.actor_type),
                esc(&x.name),
                if x.active { "active".into() } else { "deactivated".into() },
                if scope.is_empty() { "none".into() } else { esc(scope) },
                button_form(
                    "/admin/actors/delete",
                    &a.csrf,
                    &[("project", &project), ("actor", &x.id)],
                    &format!("Delete actor {}", x.id),
                    true,
                ),
            ]
        })
        .collect();
    let mut body = chooser("/admin/actors", &projects, &project, None, None);
    let _ = write!(
        body,
        "<h2>New actor in {}</h2><form method=\"post\" action=\"/admin/actors\" class=\"create\">{}\
         <input type=\"hidden\" name=\"project\" value=\"{}\">{}{}{}<button type=\"submit\">Create actor</button></form>",
        esc(&project),
        csrf_input(&a.csrf),
        esc(&project),
        field("id", "Id", a.form.get("id"), false, "optional: generated when empty"),
        field("actor_type", "Type", a.form.get("actor_type"), true, "user, device, agent, orchestrator or observer"),
        field("name", "Name", a.form.get("name"), false, ""),
    );
    body.push_str(&search.form("/admin/actors", "actors", "id, name or type", &keep, d.config.search_max_chars));
    body.push_str(&search.table(
        "Actors",
        &["Id", "Type", "Name", "State", "Scope", ""],
        &rows,
        "No actors in this project.",
    ));
    if !list.next_page_token.is_empty() {
        let _ = write!(
            body,
            "<p><a href=\"/admin/actors?project={}&amp;page={}{}\" rel=\"next\">Next page</a></p>",
            q(&project),
            q(&list.next_page_token),
            esc(&search.link_param())
        );
    }
    html::respond(StatusCode::OK, html::page("Actors", "Actors", &a.csrf, notice, &body))
}

/// `POST /admin/actors`: shows the new actor's access token once.
pub(crate) async fn create_actor(d: &Dashboard, a: Authed) -> Response {
    let project = a.form.get("project").to_owned();
    let r = pb::CreateActorRequest {
        project_id: project.clone(),
        id: a.form.get("id").to_owned(),
        actor_type: a.form.get("actor_type").to_owned(),
        name: a.form.get("name").to_owned(),
        rate_limit: 0,
    };
    match actors::create(&d.svc, r).await {
        Ok(c) => {
            let id = c.actor.map(|x| x.id).unwrap_or_default();
            let msg = format!("Actor {id} created. Its access token (shown once): {}", c.access_token);
            let fresh = Authed { csrf: a.csrf.clone(), form: super::Form::default(), query: a.query };
            actors_page(
                d,
                &Authed { query: super::Form::parse(format!("project={}", q(&project)).as_bytes()), ..fresh },
                Some(Notice::Ok(&msg)),
            )
            .await
        }
        Err(s) => refused(actors_page(d, &a, Some(Notice::Error(s.message()))).await, &s),
    }
}

/// `POST /admin/actors/delete`.
pub(crate) async fn delete_actor(d: &Dashboard, a: Authed) -> Response {
    let (project, actor) = (a.form.get("project").to_owned(), a.form.get("actor").to_owned());
    match actors::delete(&d.svc, pb::ActorRef { actor_id: actor.clone() }).await {
        Ok(_) => done_redirect(&format!("/admin/actors?project={}", q(&project)), &format!("Actor {actor} deleted.")),
        Err(s) => refused(actors_page(d, &a, Some(Notice::Error(s.message()))).await, &s),
    }
}

/// The actor `id` when it belongs to `project` (404 otherwise, as missing: the REST API's rule).
async fn owned_actor(d: &Dashboard, project: &str, id: &str) -> Result<pb::Actor, Error> {
    let x = actors::get(&d.svc, pb::GetActorRequest { actor_id: id.to_owned() }).await?;
    if x.project_id != project {
        return Err(Error::not_found(format!("actor {id:?} not found in project {project:?}")));
    }
    Ok(x)
}

/// `GET /admin/actors/edit?project=&actor=`: an actor's name, state and access scope.
pub(crate) async fn edit_actor(d: &Dashboard, a: Authed) -> Response {
    edit_actor_page(d, &a, done(&a)).await
}

async fn edit_actor_page(d: &Dashboard, a: &Authed, notice: Option<Notice<'_>>) -> Response {
    let (project, id) = (param(a, "project").to_owned(), param(a, "actor").to_owned());
    let x = match owned_actor(d, &project, &id).await {
        Ok(x) => x,
        Err(s) => return error_page(a, "Edit actor", "Actors", &s),
    };
    let scopes = scopes::list(&d.svc, pb::ListScopesRequest { project_id: project.clone() })
        .await
        .map(|r| r.scopes)
        .unwrap_or_default();
    let posted = a.form.has("name");
    let name = if posted { a.form.get("name").to_owned() } else { x.name.clone() };
    let active = if posted { !a.form.get("active").is_empty() } else { x.active };
    let chosen = if posted { a.form.get("scope").to_owned() } else { x.scope_id.clone() };
    let mut options = format!("<option value=\"\"{}>none</option>", if chosen.is_empty() { " selected" } else { "" });
    for s in &scopes {
        let sel = if s.id == chosen || s.slug == chosen { " selected" } else { "" };
        let state = if s.active { "" } else { ", deactivated" };
        let _ = write!(
            options,
            "<option value=\"{}\"{sel}>{} ({}{state})</option>",
            esc(&s.id),
            esc(&s.slug),
            esc(&s.name)
        );
    }
    let mut body = String::new();
    let _ = write!(
        body,
        "<p><a href=\"/admin/actors?project={pq}\">All actors</a></p>\
         <p>Type {}; created {} UTC; {} access token(s).</p>\
         <form method=\"post\" action=\"/admin/actors/edit\" class=\"create\">{csrf}\
         <input type=\"hidden\" name=\"project\" value=\"{pe}\"><input type=\"hidden\" name=\"actor\" value=\"{ie}\">{}{}\
         <div class=\"field\"><label for=\"f-scope\">Access scope</label><select id=\"f-scope\" name=\"scope\">{options}</select></div>\
         <button type=\"submit\">Save actor</button></form>\
         <p>Deactivating closes its connections (4001 <code>token_revoked</code>) until it is activated again; \
         moving it into or out of a scope closes them so that they reconnect under the new addresses.</p>\
         <h2>Access token</h2><p>A new token replaces every token the actor has (their connections close 4001 \
         <code>token_revoked</code>); it is shown once.</p>{}",
        esc(&x.actor_type),
        html::time(x.created_at_ms),
        x.token_key_ids.len(),
        field("name", "Name", &name, false, "defaults to the id"),
        checkbox("active", "Active (may connect)", active),
        button_form(
            "/admin/actors/rotate",
            &a.csrf,
            &[("project", &project), ("actor", &x.id)],
            &format!("New access token for {}", x.id),
            false
        ),
        pq = q(&project),
        pe = esc(&project),
        ie = esc(&x.id),
        csrf = csrf_input(&a.csrf),
    );
    let title = format!("Edit actor {}", x.id);
    html::respond(StatusCode::OK, html::page(&title, "Actors", &a.csrf, notice, &body))
}

/// Applies a posted actor form: name first (the only field with its own checks, so a refused
/// name changes nothing), then the scope, then the state: each through the function the REST
/// API's `PATCH /v1/actors/{id}` calls, and only when it changes.
async fn save_actor(d: &Dashboard, a: &Authed) -> Result<pb::Actor, Error> {
    let (project, id) = (a.form.get("project"), a.form.get("actor"));
    owned_actor(d, project, id).await?;
    let mut x = actors::rename(&d.svc, id, a.form.get("name")).await?;
    let scope = a.form.get("scope");
    if scope != x.scope_id {
        x = scopes::set_actor_scope(
            &d.svc,
            pb::SetActorScopeRequest { actor_id: id.to_owned(), scope: scope.to_owned() },
        )
        .await?;
    }
    let active = !a.form.get("active").is_empty();
    if active != x.active {
        let r = pb::ActorRef { actor_id: id.to_owned() };
        x = if active { actors::activate(&d.svc, r).await? } else { actors::deactivate(&d.svc, r).await? };
    }
    Ok(x)
}

/// `POST /admin/actors/edit`.
pub(crate) async fn update_actor(d: &Dashboard, a: Authed) -> Response {
    match save_actor(d, &a).await {
        Ok(x) => done_redirect(
            &format!("/admin/actors/edit?project={}&actor={}", q(&x.project_id), q(&x.id)),
            &format!("Actor {} saved.", x.id),
        ),
        Err(s) => refused(edit_actor_page(d, &a, Some(Notice::Error(s.message()))).await, &s),
    }
}

/// `POST /admin/actors/rotate`: a new access token (shown once) replacing every other.
pub(crate) async fn rotate_actor_token(d: &Dashboard, a: Authed) -> Response {
    let (project, id) = (a.form.get("project").to_owned(), a.form.get("actor").to_owned());
    let issued = match owned_actor(d, &project, &id).await {
        Ok(_) => actors::rotate_token(&d.svc, pb::ActorRef { actor_id: id.clone() }).await,
        Err(s) => Err(s),
    };
    let page = Authed {
        csrf: a.csrf.clone(),
        form: Form::default(),
        query: Form::parse(format!("project={}&actor={}", q(&project), q(&id)).as_bytes()),
    };
    match issued {
        Ok(c) => {
            let msg = format!("New access token for {id} (shown once): {}", c.access_token);
            edit_actor_page(d, &page, Some(Notice::Ok(&msg))).await
        }
        Err(s) => refused(edit_actor_page(d, &page, Some(Notice::Error(s.message()))).await, &s),
    }
}
