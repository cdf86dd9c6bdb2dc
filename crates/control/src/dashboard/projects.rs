//! The projects: their list with the create form, deletion, and the edit page of a project's
//! name, JWT secret and limits.
//! Each create, edit or delete calls the service function the gRPC and REST APIs call, and
//! shows its error message when it refuses.

use std::fmt::Write as _;

use crate::service::Error;
use axum::http::StatusCode;
use axum::response::Response;

use super::common::{current_project, done, done_redirect, error_page, param, refused};
use super::html::{self, Notice, button_form, checkbox, csrf_input, esc, field, q, time};
use super::search::Search;
use super::{Authed, Dashboard, Form};
use crate::pb;
use crate::service::projects;

/// `GET /admin/projects`.
pub(crate) async fn projects(d: &Dashboard, a: Authed) -> Response {
    projects_page(d, &a, done(&a)).await
}

async fn projects_page(d: &Dashboard, a: &Authed, notice: Option<Notice<'_>>) -> Response {
    let (mut list, _) = current_project(d, a).await;
    let search = match Search::of(d, a, "/admin/projects", "Projects", "Projects", &[]) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    list.retain(|p| search.matches([p.id.as_str(), p.name.as_str()]));
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|p| {
            vec![
                format!(
                    "<a href=\"/admin/apps?project={p}\">{s}</a> (<a href=\"/admin/projects/edit?project={p}\" aria-label=\"Edit project {s}\">edit</a>)",
                    p = q(&p.id),
                    s = esc(&p.id)
                ),
                esc(&p.name),
                esc(&limits_summary(p.limits.as_ref())),
                p.messages_this_month.to_string(),
                time(p.created_at_ms),
                button_form(
                    "/admin/projects/delete",
                    &a.csrf,
                    &[("project", &p.id)],
                    &format!("Delete {} and everything in it", p.id),
                    true,
                ),
            ]
        })
        .collect();
    let mut body = format!(
        "<h2>New project</h2><form method=\"post\" action=\"/admin/projects\" class=\"create\">{}{}{}{}<button type=\"submit\">Create project</button></form>",
        csrf_input(&a.csrf),
        field("id", "Id", a.form.get("id"), true, "letters, digits, - and _"),
        field("name", "Name", a.form.get("name"), false, "defaults to the id"),
        field("jwt_secret", "JWT secret", "", false, "optional: HS256 client tokens")
    );
    body.push_str(&search.form("/admin/projects", "projects", "id or name", &[], d.config.search_max_chars));
    body.push_str(&search.table(
        "Projects",
        &["Id", "Name", "Limits", "Messages this month", "Created (UTC)", ""],
        &rows,
        "No projects yet.",
    ));
    html::respond(StatusCode::OK, html::page("Projects", "Projects", &a.csrf, notice, &body))
}

/// `POST /admin/projects`.
pub(crate) async fn create_project(d: &Dashboard, a: Authed) -> Response {
    let r = pb::CreateProjectRequest {
        id: a.form.get("id").to_owned(),
        name: a.form.get("name").to_owned(),
        jwt_secret: a.form.get("jwt_secret").to_owned(),
        ..Default::default()
    };
    match projects::create(&d.svc, r).await {
        Ok(p) => done_redirect(&format!("/admin/projects?project={}", q(&p.id)), &format!("Project {} created.", p.id)),
        Err(s) => refused(projects_page(d, &a, Some(Notice::Error(s.message()))).await, &s),
    }
}

/// `POST /admin/projects/delete` (with everything in it).
pub(crate) async fn delete_project(d: &Dashboard, a: Authed) -> Response {
    let id = a.form.get("project").to_owned();
    match projects::delete(&d.svc, pb::DeleteProjectRequest { project_id: id.clone(), force: true }).await {
        Ok(n) => done_redirect("/admin/projects", &format!("Project {id} deleted ({} objects).", n.deleted)),
        Err(s) => refused(projects_page(d, &a, Some(Notice::Error(s.message()))).await, &s),
    }
}

/// The limit fields of a project: form name, label, hint.
const LIMITS: [(&str, &str, &str); 4] = [
    ("max_connections", "Max connections", "per node; empty: the node's max_connections"),
    ("monthly_message_quota", "Monthly message quota", "publishes per month (UTC); empty: no quota"),
    ("rate_limit", "Rate limit", "publishes per second per connection; empty: the node's rate_limit"),
    ("max_message_size", "Max message size", "bytes of a publish's data; empty: the node's max_message_size"),
];

/// A limit's value as the form shows it (empty: none set).
fn limit_text<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

/// One limit from the form: empty is `None` (the node's setting), else a whole number.
fn limit<T: std::str::FromStr>(form: &Form, k: &str) -> Result<Option<T>, Error> {
    match form.get(k) {
        "" => Ok(None),
        v => v.parse().map(Some).map_err(|_| {
            Error::invalid_argument(format!("limits.{k} must be a whole number (empty: the node's setting)"))
        }),
    }
}

/// The project's limits in a few words, for the projects table.
pub(crate) fn limits_summary(l: Option<&pb::ProjectLimits>) -> String {
    let l = l.copied().unwrap_or_default();
    let mut parts = Vec::new();
    if let Some(n) = l.max_connections {
        parts.push(format!("{n} connections"));
    }
    if let Some(n) = l.monthly_message_quota {
        parts.push(format!("{n} messages/month"));
    }
    if let Some(n) = l.rate_limit {
        parts.push(format!("{n}/s per connection"));
    }
    if let Some(n) = l.max_message_size {
        parts.push(format!("{n} bytes a message"));
    }
    if parts.is_empty() { "the node's".to_owned() } else { parts.join(", ") }
}

/// `GET /admin/projects/edit?project=`: a project's name, JWT secret and limits.
pub(crate) async fn edit_project(d: &Dashboard, a: Authed) -> Response {
    edit_project_page(d, &a, done(&a)).await
}

async fn edit_project_page(d: &Dashboard, a: &Authed, notice: Option<Notice<'_>>) -> Response {
    let id = param(a, "project").to_owned();
    let p = match projects::get(&d.svc, pb::GetProjectRequest { project_id: id.clone() }).await {
        Ok(p) => p,
        Err(s) => return error_page(a, "Edit project", "Projects", &s),
    };
    // After a refused change the form shows what was sent, so it can be corrected.
    let posted = a.form.has("name");
    let l = p.limits.unwrap_or_default();
    let current = [
        limit_text(l.max_connections),
        limit_text(l.monthly_message_quota),
        limit_text(l.rate_limit),
        limit_text(l.max_message_size),
    ];
    let mut limits = String::new();
    for ((k, label, hint), now) in LIMITS.iter().zip(current) {
        let v = if posted { a.form.get(k).to_owned() } else { now };
        limits.push_str(&field(k, label, &v, false, hint));
    }
    let name = if posted { a.form.get("name").to_owned() } else { p.name.clone() };
    let secret = if p.has_jwt_secret { "set (never shown)" } else { "none" };
    let mut body = String::new();
    let _ = write!(
        body,
        "<p><a href=\"/admin/projects\">All projects</a> · <a href=\"/admin/apps?project={pq}\">Apps of {pe}</a></p>\
         <form method=\"post\" action=\"/admin/projects/edit\" class=\"create\">{}\
         <input type=\"hidden\" name=\"project\" value=\"{pe}\">{}{}{}{}\
         <button type=\"submit\">Save project</button></form>\
         <p>JWT secret: {secret}. Limits replace all four at once, as over the API; an empty limit falls back \
         to the node's setting. Lowering max connections closes the newest excess connections (4002).</p>",
        csrf_input(&a.csrf),
        field("name", "Name", &name, true, "display name"),
        limits,
        field("jwt_secret", "New JWT secret", "", false, "HS256 client tokens; empty: keep the current one"),
        checkbox("remove_jwt_secret", "Remove the JWT secret", false),
        pq = q(&p.id),
        pe = esc(&p.id),
    );
    let title = format!("Edit project {}", p.id);
    html::respond(StatusCode::OK, html::page(&title, "Projects", &a.csrf, notice, &body))
}

/// The update a posted project form asks for.
fn project_update(a: &Authed) -> Result<pb::UpdateProjectRequest, Error> {
    let jwt_secret = if a.form.get("remove_jwt_secret").is_empty() {
        Some(a.form.get("jwt_secret").to_owned()).filter(|s| !s.is_empty())
    } else {
        Some(String::new())
    };
    Ok(pb::UpdateProjectRequest {
        project_id: a.form.get("project").to_owned(),
        name: Some(a.form.get("name").to_owned()),
        jwt_secret,
        limits: Some(pb::ProjectLimits {
            max_connections: limit(&a.form, "max_connections")?,
            monthly_message_quota: limit(&a.form, "monthly_message_quota")?,
            rate_limit: limit(&a.form, "rate_limit")?,
            max_message_size: limit(&a.form, "max_message_size")?,
        }),
    })
}

/// `POST /admin/projects/edit`: name, JWT secret and limits, through the project update.
pub(crate) async fn update_project(d: &Dashboard, a: Authed) -> Response {
    let saved = match project_update(&a) {
        Ok(r) => projects::update(&d.svc, r).await,
        Err(s) => Err(s),
    };
    match saved {
        Ok(p) => {
            done_redirect(&format!("/admin/projects/edit?project={}", q(&p.id)), &format!("Project {} saved.", p.id))
        }
        Err(s) => refused(edit_project_page(d, &a, Some(Notice::Error(s.message()))).await, &s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_summarised() {
        assert_eq!(limits_summary(None), "the node's");
        let l = pb::ProjectLimits { max_connections: Some(10), rate_limit: Some(5), ..Default::default() };
        assert_eq!(limits_summary(Some(&l)), "10 connections, 5/s per connection");
    }
}
