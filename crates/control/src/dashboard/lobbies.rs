//! The lobbies of a project: their list with the create form, deletion, and a lobby's edit page.
//! Each create, edit or delete calls the service function the gRPC and REST APIs call, and
//! shows its error message when it refuses.

use std::fmt::Write as _;

use axum::http::StatusCode;
use axum::response::Response;

use super::common::{
    chooser, current_app, current_project, done, done_redirect, error_page, names, param, refused, status_of,
};
use super::html::{self, Notice, button_form, csrf_input, esc, field, q};
use super::search::Search;
use super::{Authed, Dashboard};
use crate::pb;
use crate::service::lobbies;

/// `GET /admin/lobbies?project=`.
pub(crate) async fn lobbies(d: &Dashboard, a: Authed) -> Response {
    lobbies_page(d, &a, done(&a)).await
}

async fn lobbies_page(d: &Dashboard, a: &Authed, notice: Option<Notice<'_>>) -> Response {
    let (projects, project) = current_project(d, a).await;
    let (apps, app) = current_app(d, a, &project).await;
    let keep = [("project", project.as_str())];
    let search = match Search::of(d, a, "/admin/lobbies", "Lobbies", "Lobbies", &keep) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let mut list = lobbies::list(&d.svc, pb::ListLobbiesRequest { project_id: project.clone() })
        .await
        .map(|r| r.lobbies)
        .unwrap_or_default();
    list.retain(|l| {
        let app = apps.iter().find(|x| x.id == l.app_id).map_or(l.app_id.as_str(), |x| x.slug.as_str());
        search.matches([l.slug.as_str(), app].into_iter().chain(l.rooms.iter().map(String::as_str)))
    });
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|l| {
            let app = apps.iter().find(|x| x.id == l.app_id).map_or(l.app_id.as_str(), |x| x.slug.as_str());
            let mut who: Vec<String> = l.allowed_actors.clone();
            who.extend(l.allowed_actor_types.iter().map(|t| format!("type {t}")));
            vec![
                format!(
                    "{s} (<a href=\"/admin/lobbies/edit?project={p}&amp;lobby={l}\" aria-label=\"Edit the rooms of lobby {s}\">edit</a>)",
                    s = esc(&l.slug),
                    p = q(&project),
                    l = q(&l.slug)
                ),
                esc(app),
                esc(&l.rooms.join(", ")),
                if who.is_empty() { "every actor".into() } else { esc(&who.join(", ")) },
                button_form(
                    "/admin/lobbies/delete",
                    &a.csrf,
                    &[("project", &project), ("lobby", &l.slug)],
                    &format!("Delete lobby {}", l.slug),
                    true,
                ),
            ]
        })
        .collect();
    let mut body = chooser("/admin/lobbies", &projects, &project, None, None);
    let mut options = String::new();
    for x in &apps {
        let sel = if x.slug == app { " selected" } else { "" };
        let _ = write!(options, "<option value=\"{0}\"{sel}>{0}</option>", esc(&x.slug));
    }
    let _ = write!(
        body,
        "<h2>New lobby in {}</h2><form method=\"post\" action=\"/admin/lobbies\" class=\"create\">{}\
         <input type=\"hidden\" name=\"project\" value=\"{}\">{}\
         <div class=\"field\"><label for=\"f-app\">App</label><select id=\"f-app\" name=\"app\">{options}</select></div>{}{}{}\
         <button type=\"submit\">Create lobby</button></form>",
        esc(&project),
        csrf_input(&a.csrf),
        esc(&project),
        field("lobby", "Slug", a.form.get("lobby"), true, "letters, digits, - and _"),
        field("rooms", "Rooms", a.form.get("rooms"), false, "comma-separated room slugs of the app"),
        field("allowed_actors", "Allowed actors", a.form.get("allowed_actors"), false, "comma-separated ids"),
        field(
            "allowed_actor_types",
            "Allowed actor types",
            a.form.get("allowed_actor_types"),
            false,
            "comma-separated; both empty: every actor"
        ),
    );
    body.push_str(&search.form("/admin/lobbies", "lobbies", "slug, app or a room", &keep, d.config.search_max_chars));
    body.push_str(&search.table(
        "Lobbies",
        &["Slug", "App", "Rooms", "Allowed", ""],
        &rows,
        "No lobbies in this project.",
    ));
    html::respond(StatusCode::OK, html::page("Lobbies", "Lobbies", &a.csrf, notice, &body))
}

/// `POST /admin/lobbies`.
pub(crate) async fn create_lobby(d: &Dashboard, a: Authed) -> Response {
    let project = a.form.get("project").to_owned();
    let r = pb::CreateLobbyRequest {
        project_id: project.clone(),
        slug: a.form.get("lobby").to_owned(),
        app: a.form.get("app").to_owned(),
        rooms: names(a.form.get("rooms")),
        allowed_actors: names(a.form.get("allowed_actors")),
        allowed_actor_types: names(a.form.get("allowed_actor_types")),
    };
    match lobbies::create(&d.svc, r).await {
        Ok(l) => {
            done_redirect(&format!("/admin/lobbies?project={}", q(&project)), &format!("Lobby {} created.", l.slug))
        }
        Err(s) => refused(lobbies_page(d, &a, Some(Notice::Error(s.message()))).await, &s),
    }
}

/// `GET /admin/lobbies/edit?project=&lobby=`: the rooms a lobby covers.
pub(crate) async fn edit_lobby(d: &Dashboard, a: Authed) -> Response {
    edit_lobby_page(d, &a, done(&a)).await
}

async fn edit_lobby_page(d: &Dashboard, a: &Authed, notice: Option<Notice<'_>>) -> Response {
    let (project, slug) = (param(a, "project").to_owned(), param(a, "lobby").to_owned());
    let l = match lobbies::get(&d.svc, pb::GetLobbyRequest { project_id: project.clone(), slug: slug.clone() }).await {
        Ok(l) => l,
        Err(s) => return error_page(a, "Edit lobby", "Lobbies", &s),
    };
    // After a refused change the form shows what was sent, so it can be corrected.
    let rooms = if a.form.has("rooms") { a.form.get("rooms").to_owned() } else { l.rooms.join(", ") };
    let mut body = String::new();
    let _ = write!(
        body,
        "<p><a href=\"/admin/lobbies?project={p}\">All lobbies</a></p>\
         <form method=\"post\" action=\"/admin/lobbies/edit\" class=\"create\">{}\
         <input type=\"hidden\" name=\"project\" value=\"{pe}\"><input type=\"hidden\" name=\"lobby\" value=\"{}\">{}\
         <button type=\"submit\">Save rooms</button></form>\
         <p>Who may join is kept (set it with the API); clients subscribed to the lobby follow the new rooms.</p>",
        csrf_input(&a.csrf),
        esc(&l.slug),
        field("rooms", "Rooms", &rooms, false, "comma-separated room slugs of the lobby's app"),
        p = q(&project),
        pe = esc(&project),
    );
    let title = format!("Edit lobby {}", l.slug);
    html::respond(StatusCode::OK, html::page(&title, "Lobbies", &a.csrf, notice, &body))
}

/// `POST /admin/lobbies/edit`: replaces the lobby's rooms.
pub(crate) async fn update_lobby(d: &Dashboard, a: Authed) -> Response {
    let (project, slug) = (a.form.get("project").to_owned(), a.form.get("lobby").to_owned());
    let r =
        pb::SetLobbyRoomsRequest { project_id: project.clone(), slug: slug.clone(), rooms: names(a.form.get("rooms")) };
    match lobbies::set_rooms(&d.svc, r).await {
        Ok(l) => done_redirect(
            &format!("/admin/lobbies?project={}", q(&project)),
            &format!("Lobby {} saved: {} rooms.", l.slug, l.rooms.len()),
        ),
        Err(s) => {
            let mut r = edit_lobby_page(d, &a, Some(Notice::Error(s.message()))).await;
            *r.status_mut() = status_of(&s);
            r
        }
    }
}

/// `POST /admin/lobbies/delete`.
pub(crate) async fn delete_lobby(d: &Dashboard, a: Authed) -> Response {
    let (project, lobby) = (a.form.get("project").to_owned(), a.form.get("lobby").to_owned());
    match lobbies::delete(&d.svc, pb::DeleteLobbyRequest { project_id: project.clone(), slug: lobby.clone() }).await {
        Ok(_) => done_redirect(&format!("/admin/lobbies?project={}", q(&project)), &format!("Lobby {lobby} deleted.")),
        Err(s) => refused(lobbies_page(d, &a, Some(Notice::Error(s.message()))).await, &s),
    }
}
