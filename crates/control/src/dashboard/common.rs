//! What the pages share, below every page module: the notice a redirect carries, the status of
//! a refusal and the page re-rendered with it, a page's parameters, the error page, the
//! project/app/room chooser and the project and app a page is about.

use std::fmt::Write as _;

use crate::service::Error;
use axum::http::StatusCode;
use axum::response::Response;

use super::html::{self, Notice, esc, field, q};
use super::{Authed, Dashboard, redirect};
use crate::pb;
use crate::service::{apps, projects};

/// The HTTP status of a refused request, as the REST API maps it.
pub(super) fn status_of(s: &Error) -> StatusCode {
    crate::rest::error::http_status(s.code())
}

/// The notice carried by a redirect after a change (`?done=`), or after an action that ran
/// but failed (`?failed=`, shown as an error).
pub(super) fn done(a: &Authed) -> Option<Notice<'_>> {
    let failed = Some(a.query.get("failed")).filter(|m| !m.is_empty()).map(Notice::Error);
    failed.or_else(|| Some(a.query.get("done")).filter(|m| !m.is_empty()).map(Notice::Ok))
}

/// A redirect to `path` (with its query) saying `msg`.
pub(super) fn done_redirect(path: &str, msg: &str) -> Response {
    let sep = if path.contains('?') { '&' } else { '?' };
    redirect(&format!("{path}{sep}done={}", q(msg)))
}

/// A field of the page: the posted value after a refused change, else the query's.
pub(super) fn param<'a>(a: &'a Authed, k: &str) -> &'a str {
    if a.form.get(k).is_empty() { a.query.get(k) } else { a.form.get(k) }
}

/// An error page with `s`'s message and the REST API's status for it.
pub(super) fn error_page(a: &Authed, title: &str, current: &str, s: &Error) -> Response {
    html::respond(status_of(s), html::page(title, current, &a.csrf, Some(Notice::Error(s.message())), ""))
}

/// A GET form choosing the project (and app, and room) a page shows.
pub(super) fn chooser(
    path: &str,
    projects: &[pb::Project],
    project: &str,
    apps: Option<(&[pb::App], &str)>,
    room: Option<&str>,
) -> String {
    let mut f = format!("<form method=\"get\" action=\"{path}\" class=\"create\" aria-label=\"Choose what to show\">");
    f.push_str(
        "<div class=\"field\"><label for=\"c-project\">Project</label><select id=\"c-project\" name=\"project\">",
    );
    for p in projects {
        let sel = if p.id == project { " selected" } else { "" };
        let _ = write!(f, "<option value=\"{0}\"{sel}>{0}</option>", esc(&p.id));
    }
    f.push_str("</select></div>");
    if let Some((apps, app)) = apps {
        f.push_str("<div class=\"field\"><label for=\"c-app\">App</label><select id=\"c-app\" name=\"app\">");
        for x in apps {
            let sel = if x.slug == app { " selected" } else { "" };
            let _ = write!(f, "<option value=\"{0}\"{sel}>{0}</option>", esc(&x.slug));
        }
        f.push_str("</select></div>");
    }
    if let Some(room) = room {
        f.push_str(&field("room", "Room", room, false, "room slug"));
    }
    f.push_str("<button type=\"submit\">Show</button></form>");
    f
}

/// The project the page is about: `?project=`, else the first one.
pub(super) async fn current_project(d: &Dashboard, a: &Authed) -> (Vec<pb::Project>, String) {
    let mut list = projects::list(&d.svc, pb::ListProjectsRequest {}).await.map(|r| r.projects).unwrap_or_default();
    list.sort_by(|x, y| x.id.cmp(&y.id));
    let want = a.query.get("project");
    let chosen = if !want.is_empty() {
        want.to_owned()
    } else if !a.form.get("project").is_empty() {
        a.form.get("project").to_owned()
    } else {
        list.first().map(|p| p.id.clone()).unwrap_or_default()
    };
    (list, chosen)
}

/// The app the page is about within `project`: `?app=`, else the first one.
pub(super) async fn current_app(d: &Dashboard, a: &Authed, project: &str) -> (Vec<pb::App>, String) {
    let list = apps::list(&d.svc, pb::ListAppsRequest { project_id: project.to_owned() })
        .await
        .map(|r| r.apps)
        .unwrap_or_default();
    let want = if a.query.get("app").is_empty() { a.form.get("app") } else { a.query.get("app") };
    let chosen =
        if want.is_empty() { list.first().map(|x| x.slug.clone()).unwrap_or_default() } else { want.to_owned() };
    (list, chosen)
}

/// Comma- or space-separated names, without empties.
pub(super) fn names(s: &str) -> Vec<String> {
    s.split([',', ' ', '\n']).map(str::trim).filter(|t| !t.is_empty()).map(str::to_owned).collect()
}

/// `r` with the status of the refusal `s` (a page re-rendered with the refusal's message).
pub(super) fn refused(mut r: Response, s: &Error) -> Response {
    *r.status_mut() = status_of(s);
    r
}
