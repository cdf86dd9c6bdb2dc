//! The grants of a room: their list, the create form and deletion.
//! Each create, edit or delete calls the service function the gRPC and REST APIs call, and
//! shows its error message when it refuses.

use std::fmt::Write as _;

use axum::http::StatusCode;
use axum::response::Response;

use super::common::{chooser, current_app, current_project, done, done_redirect, names, refused};
use super::html::{self, Notice, button_form, csrf_input, esc, field, q, time};
use super::search::Search;
use super::{Authed, Dashboard};
use crate::pb;
use crate::service::grants;

/// `GET /admin/grants?project=&app=&room=`.
pub(crate) async fn grants(d: &Dashboard, a: Authed) -> Response {
    grants_page(d, &a, done(&a)).await
}

async fn grants_page(d: &Dashboard, a: &Authed, notice: Option<Notice<'_>>) -> Response {
    let (projects, project) = current_project(d, a).await;
    let (apps, app) = current_app(d, a, &project).await;
    let room = if a.query.get("room").is_empty() { a.form.get("room") } else { a.query.get("room") }.to_owned();
    let keep = [("project", project.as_str()), ("app", app.as_str()), ("room", room.as_str())];
    let search = match Search::of(d, a, "/admin/grants", "Grants", "Grants", &keep) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let mut list = if app.is_empty() || room.is_empty() {
        Vec::new()
    } else {
        grants::list(
            &d.svc,
            pb::ListGrantsRequest { project_id: project.clone(), app: app.clone(), room: room.clone() },
        )
        .await
        .map(|r| r.grants)
        .unwrap_or_default()
    };
    list.retain(|g| {
        let who = [g.id.as_str(), g.actor_id.as_str(), g.actor_type.as_str(), g.permission.as_str()];
        search.matches(who.into_iter().chain(g.topics.iter().map(String::as_str)))
    });
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|g| {
            let who = if g.actor_id.is_empty() { format!("type {}", g.actor_type) } else { g.actor_id.clone() };
            vec![
                esc(&g.id),
                esc(&who),
                esc(&g.permission),
                if g.topics.is_empty() { "all".into() } else { esc(&g.topics.join(", ")) },
                if g.expires_at == 0 { "never".into() } else { time(g.expires_at * 1000) },
                button_form(
                    "/admin/grants/delete",
                    &a.csrf,
                    &[("project", &project), ("app", &app), ("room", &room), ("grant", &g.id)],
                    &format!("Revoke grant {}", g.id),
                    true,
                ),
            ]
        })
        .collect();
    let mut body = chooser("/admin/grants", &projects, &project, Some((&apps, &app)), Some(&room));
    if room.is_empty() {
        body.push_str("<p class=\"empty\">Choose a room to see and create its grants.</p>");
    } else {
        let _ = write!(
            body,
            "<h2>New grant in {}/{}</h2><form method=\"post\" action=\"/admin/grants\" class=\"create\">{}\
             <input type=\"hidden\" name=\"project\" value=\"{}\"><input type=\"hidden\" name=\"app\" value=\"{}\">\
             <input type=\"hidden\" name=\"room\" value=\"{}\">{}{}\
             <div class=\"field\"><label for=\"f-permission\">Permission</label><select id=\"f-permission\" name=\"permission\">\
             <option>subscribe</option><option>publish</option><option>pubSub</option></select></div>{}\
             <button type=\"submit\">Create grant</button></form>",
            esc(&app),
            esc(&room),
            csrf_input(&a.csrf),
            esc(&project),
            esc(&app),
            esc(&room),
            field("actor_id", "Actor id", a.form.get("actor_id"), false, "one actor…"),
            field("actor_type", "…or actor type", a.form.get("actor_type"), false, "every actor of a type"),
            field("topics", "Topics", a.form.get("topics"), false, "comma-separated; empty: all"),
        );
        body.push_str(&search.form(
            "/admin/grants",
            "grants",
            "actor, topic, permission or grant id",
            &keep,
            d.config.search_max_chars,
        ));
        body.push_str(&search.table(
            "Grants",
            &["Id", "To", "Permission", "Topics", "Expires (UTC)", ""],
            &rows,
            "No grants: the room is open to every actor of the project.",
        ));
    }
    html::respond(StatusCode::OK, html::page("Grants", "Grants", &a.csrf, notice, &body))
}

/// `POST /admin/grants`.
pub(crate) async fn create_grant(d: &Dashboard, a: Authed) -> Response {
    let (project, app, room) =
        (a.form.get("project").to_owned(), a.form.get("app").to_owned(), a.form.get("room").to_owned());
    let r = pb::CreateGrantRequest {
        project_id: project.clone(),
        app: app.clone(),
        room: room.clone(),
        actor_id: a.form.get("actor_id").to_owned(),
        actor_type: a.form.get("actor_type").to_owned(),
        permission: a.form.get("permission").to_owned(),
        topics: names(a.form.get("topics")),
        expires_at: 0,
    };
    match grants::create(&d.svc, r).await {
        Ok(g) => done_redirect(
            &format!("/admin/grants?project={}&app={}&room={}", q(&project), q(&app), q(&room)),
            &format!("Grant {} created.", g.id),
        ),
        Err(s) => refused(grants_page(d, &a, Some(Notice::Error(s.message()))).await, &s),
    }
}

/// `POST /admin/grants/delete`: revokes at once (connections are revalidated).
pub(crate) async fn delete_grant(d: &Dashboard, a: Authed) -> Response {
    let (project, app, room, grant) = (
        a.form.get("project").to_owned(),
        a.form.get("app").to_owned(),
        a.form.get("room").to_owned(),
        a.form.get("grant").to_owned(),
    );
    match grants::delete(&d.svc, pb::DeleteGrantRequest { grant_id: grant.clone() }).await {
        Ok(_) => done_redirect(
            &format!("/admin/grants?project={}&app={}&room={}", q(&project), q(&app), q(&room)),
            &format!("Grant {grant} revoked."),
        ),
        Err(s) => refused(grants_page(d, &a, Some(Notice::Error(s.message()))).await, &s),
    }
}
