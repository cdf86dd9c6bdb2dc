//! The access scopes of a project: their list with the create form, state, deletion, and the
//! edit page of a scope's name.
//! Each create, edit or delete calls the service function the gRPC and REST APIs call, and
//! shows its error message when it refuses.

use std::fmt::Write as _;

use axum::http::StatusCode;
use axum::response::Response;

use super::common::{chooser, current_project, done, done_redirect, error_page, param, refused};
use super::html::{self, Notice, button_form, csrf_input, esc, field, q, time};
use super::search::Search;
use super::{Authed, Dashboard};
use crate::pb;
use crate::service::scopes;

/// `GET /admin/scopes?project=`: the project's access scopes.
pub(crate) async fn scopes(d: &Dashboard, a: Authed) -> Response {
    scopes_page(d, &a, done(&a)).await
}

async fn scopes_page(d: &Dashboard, a: &Authed, notice: Option<Notice<'_>>) -> Response {
    let (projects, project) = current_project(d, a).await;
    let keep = [("project", project.as_str())];
    let search = match Search::of(d, a, "/admin/scopes", "Access scopes", "Scopes", &keep) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let mut list = scopes::list(&d.svc, pb::ListScopesRequest { project_id: project.clone() })
        .await
        .map(|r| r.scopes)
        .unwrap_or_default();
    list.retain(|x| search.matches([x.slug.as_str(), x.name.as_str()]));
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|x| {
            vec![
                format!(
                    "{s} (<a href=\"/admin/scopes/edit?project={p}&amp;scope={sl}\" aria-label=\"Edit scope {s}\">edit</a>)",
                    s = esc(&x.slug),
                    p = q(&project),
                    sl = q(&x.slug)
                ),
                esc(&x.name),
                format!(
                    "{} {}",
                    if x.active { "active" } else { "<strong>deactivated</strong>" },
                    button_form(
                        "/admin/scopes/state",
                        &a.csrf,
                        &[("project", &project), ("scope", &x.slug), ("active", if x.active { "0" } else { "1" })],
                        &format!("{} {}", if x.active { "Deactivate" } else { "Activate" }, x.slug),
                        false,
                    )
                ),
                x.actor_count.to_string(),
                time(x.created_at_ms),
                button_form(
                    "/admin/scopes/delete",
                    &a.csrf,
                    &[("project", &project), ("scope", &x.slug)],
                    &format!("Delete scope {}", x.slug),
                    true,
                ),
            ]
        })
        .collect();
    let mut body = chooser("/admin/scopes", &projects, &project, None, None);
    let _ = write!(
        body,
        "<h2>New access scope in {}</h2><form method=\"post\" action=\"/admin/scopes\" class=\"create\">{}\
         <input type=\"hidden\" name=\"project\" value=\"{}\">{}{}<button type=\"submit\">Create scope</button></form>",
        esc(&project),
        csrf_input(&a.csrf),
        esc(&project),
        field("scope", "Slug", a.form.get("scope"), true, "letters, digits, - and _"),
        field("name", "Name", a.form.get("name"), false, "defaults to the slug"),
    );
    body.push_str(&search.form("/admin/scopes", "access scopes", "slug or name", &keep, d.config.search_max_chars));
    body.push_str(&search.table(
        "Access scopes",
        &["Slug", "Name", "State", "Actors", "Created (UTC)", ""],
        &rows,
        "No access scopes in this project.",
    ));
    html::respond(StatusCode::OK, html::page("Access scopes", "Scopes", &a.csrf, notice, &body))
}

/// `POST /admin/scopes`.
pub(crate) async fn create_scope(d: &Dashboard, a: Authed) -> Response {
    let project = a.form.get("project").to_owned();
    let r = pb::CreateScopeRequest {
        project_id: project.clone(),
        slug: a.form.get("scope").to_owned(),
        name: a.form.get("name").to_owned(),
    };
    match scopes::create(&d.svc, r).await {
        Ok(x) => {
            done_redirect(&format!("/admin/scopes?project={}", q(&project)), &format!("Scope {} created.", x.slug))
        }
        Err(s) => refused(scopes_page(d, &a, Some(Notice::Error(s.message()))).await, &s),
    }
}

/// `POST /admin/scopes/state`: deactivates (its actors' connections close 4001
/// `scope_inactive`) or reactivates a scope.
pub(crate) async fn set_scope_state(d: &Dashboard, a: Authed) -> Response {
    let (project, scope) = (a.form.get("project").to_owned(), a.form.get("scope").to_owned());
    let r = pb::UpdateScopeRequest {
        project_id: project.clone(),
        scope: scope.clone(),
        active: Some(a.form.get("active") == "1"),
        ..Default::default()
    };
    match scopes::update(&d.svc, r).await {
        Ok(x) => {
            let what = if x.active { "activated" } else { "deactivated: its actors' connections were closed" };
            done_redirect(&format!("/admin/scopes?project={}", q(&project)), &format!("Scope {} {what}.", x.slug))
        }
        Err(s) => refused(scopes_page(d, &a, Some(Notice::Error(s.message()))).await, &s),
    }
}

/// `POST /admin/scopes/delete`.
pub(crate) async fn delete_scope(d: &Dashboard, a: Authed) -> Response {
    let (project, scope) = (a.form.get("project").to_owned(), a.form.get("scope").to_owned());
    match scopes::delete(&d.svc, pb::ScopeRef { project_id: project.clone(), scope: scope.clone() }).await {
        Ok(_) => done_redirect(&format!("/admin/scopes?project={}", q(&project)), &format!("Scope {scope} deleted.")),
        Err(s) => refused(scopes_page(d, &a, Some(Notice::Error(s.message()))).await, &s),
    }
}

/// `GET /admin/scopes/edit?project=&scope=`: a scope's name.
pub(crate) async fn edit_scope(d: &Dashboard, a: Authed) -> Response {
    edit_scope_page(d, &a, done(&a)).await
}

async fn edit_scope_page(d: &Dashboard, a: &Authed, notice: Option<Notice<'_>>) -> Response {
    let (project, slug) = (param(a, "project").to_owned(), param(a, "scope").to_owned());
    let s = match scopes::get(&d.svc, pb::ScopeRef { project_id: project.clone(), scope: slug.clone() }).await {
        Ok(s) => s,
        Err(s) => return error_page(a, "Edit scope", "Scopes", &s),
    };
    let name = if a.form.has("name") { a.form.get("name").to_owned() } else { s.name.clone() };
    let mut body = String::new();
    let _ = write!(
        body,
        "<p><a href=\"/admin/scopes?project={}\">All scopes</a></p>\
         <form method=\"post\" action=\"/admin/scopes/edit\" class=\"create\">{}\
         <input type=\"hidden\" name=\"project\" value=\"{}\"><input type=\"hidden\" name=\"scope\" value=\"{}\">{}\
         <button type=\"submit\">Save scope</button></form>\
         <p>The slug stays: clients' addresses use it. Deactivate or activate it on the list.</p>",
        q(&project),
        csrf_input(&a.csrf),
        esc(&project),
        esc(&s.slug),
        field("name", "Name", &name, false, "defaults to the slug"),
    );
    let title = format!("Edit scope {}", s.slug);
    html::respond(StatusCode::OK, html::page(&title, "Scopes", &a.csrf, notice, &body))
}

/// `POST /admin/scopes/edit`: the scope's name, through the scope update.
pub(crate) async fn update_scope(d: &Dashboard, a: Authed) -> Response {
    let project = a.form.get("project").to_owned();
    let r = pb::UpdateScopeRequest {
        project_id: project.clone(),
        scope: a.form.get("scope").to_owned(),
        name: Some(a.form.get("name").to_owned()),
        active: None,
    };
    match scopes::update(&d.svc, r).await {
        Ok(x) => done_redirect(&format!("/admin/scopes?project={}", q(&project)), &format!("Scope {} saved.", x.slug)),
        Err(s) => refused(edit_scope_page(d, &a, Some(Notice::Error(s.message()))).await, &s),
    }
}
