//! The rooms of an app: their list with the create form, deletion, and a room's edit page.
//! Each create, edit or delete calls the service function the gRPC and REST APIs call, and
//! shows its error message when it refuses.

use std::fmt::Write as _;

use axum::http::StatusCode;
use axum::response::Response;

use super::common::{
    chooser, current_app, current_project, done, done_redirect, error_page, param, refused, status_of,
};
use super::html::{self, Notice, button_form, csrf_input, esc, field, q};
use super::search::Search;
use super::{Authed, Dashboard};
use crate::pb;
use crate::service::rooms;

/// `GET /admin/rooms?project=&app=`.
pub(crate) async fn rooms(d: &Dashboard, a: Authed) -> Response {
    rooms_page(d, &a, done(&a)).await
}

async fn rooms_page(d: &Dashboard, a: &Authed, notice: Option<Notice<'_>>) -> Response {
    let (projects, project) = current_project(d, a).await;
    let (apps, app) = current_app(d, a, &project).await;
    let keep = [("project", project.as_str()), ("app", app.as_str())];
    let search = match Search::of(d, a, "/admin/rooms", "Rooms", "Rooms", &keep) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let (list, next) = if app.is_empty() {
        (Vec::new(), String::new())
    } else {
        let r = pb::ListRoomsRequest {
            project_id: project.clone(),
            app: app.clone(),
            page_size: u32::try_from(d.config.page_size).unwrap_or(u32::MAX),
            page_token: a.query.get("page").to_owned(),
        };
        rooms::list_where(&d.svc, r, |r| search.matches([r.slug.as_str(), r.name.as_str()]))
            .await
            .map(|r| (r.rooms, r.next_page_token))
            .unwrap_or_default()
    };
    let topic =
        apps.iter().find(|x| x.slug == app).and_then(|x| x.topics.first()).map(|t| t.name.clone()).unwrap_or_default();
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|r| {
            let live = format!("{app}/{}/{topic}", r.slug);
            vec![
                esc(&r.slug),
                esc(&r.name),
                if r.private { "private (grants)".into() } else { "open".into() },
                if r.dynamic { "dynamic".into() } else { "static".into() },
                format!(
                    "<a href=\"/admin/grants?project={p}&amp;app={a}&amp;room={r}\">Grants</a> · \
                     <a href=\"/admin/presence?project={p}&amp;app={a}&amp;room={r}\">Presence</a> · \
                     <a href=\"/admin/live?project={p}&amp;topic={t}\">Live</a> · \
                     <a href=\"/admin/rooms/edit?project={p}&amp;app={a}&amp;room={r}\">Edit</a>",
                    p = q(&project),
                    a = q(&app),
                    r = q(&r.slug),
                    t = q(&live)
                ),
                button_form(
                    "/admin/rooms/delete",
                    &a.csrf,
                    &[("project", &project), ("app", &app), ("room", &r.slug)],
                    &format!("Delete room {}", r.slug),
                    true,
                ),
            ]
        })
        .collect();
    let mut body = chooser("/admin/rooms", &projects, &project, Some((&apps, &app)), None);
    let _ = write!(
        body,
        "<h2>New room in {}/{}</h2><form method=\"post\" action=\"/admin/rooms\" class=\"create\">{}\
         <input type=\"hidden\" name=\"project\" value=\"{}\"><input type=\"hidden\" name=\"app\" value=\"{}\">{}{}\
         <button type=\"submit\">Create room</button></form>",
        esc(&project),
        esc(&app),
        csrf_input(&a.csrf),
        esc(&project),
        esc(&app),
        field("room", "Slug", a.form.get("room"), true, "letters, digits, - and _"),
        field("name", "Name", a.form.get("name"), false, "defaults to the slug"),
    );
    body.push_str(&search.form("/admin/rooms", "rooms", "slug or name", &keep, d.config.search_max_chars));
    body.push_str(&search.table(
        "Rooms",
        &["Slug", "Name", "Access", "Kind", "Open", ""],
        &rows,
        "No rooms in this app.",
    ));
    if !next.is_empty() {
        let _ = write!(
            body,
            "<p><a href=\"/admin/rooms?project={}&amp;app={}&amp;page={}{}\" rel=\"next\">Next page</a></p>",
            q(&project),
            q(&app),
            q(&next),
            esc(&search.link_param())
        );
    }
    html::respond(StatusCode::OK, html::page("Rooms", "Rooms", &a.csrf, notice, &body))
}

/// `POST /admin/rooms`.
pub(crate) async fn create_room(d: &Dashboard, a: Authed) -> Response {
    let (project, app) = (a.form.get("project").to_owned(), a.form.get("app").to_owned());
    let r = pb::CreateRoomRequest {
        project_id: project.clone(),
        app: app.clone(),
        slug: a.form.get("room").to_owned(),
        name: a.form.get("name").to_owned(),
    };
    match rooms::create(&d.svc, r).await {
        Ok(r) => done_redirect(
            &format!("/admin/rooms?project={}&app={}", q(&project), q(&app)),
            &format!("Room {} created.", r.slug),
        ),
        Err(s) => refused(rooms_page(d, &a, Some(Notice::Error(s.message()))).await, &s),
    }
}

/// `POST /admin/rooms/delete`.
pub(crate) async fn delete_room(d: &Dashboard, a: Authed) -> Response {
    let (project, app, room) =
        (a.form.get("project").to_owned(), a.form.get("app").to_owned(), a.form.get("room").to_owned());
    let r = pb::DeleteRoomRequest { project_id: project.clone(), app: app.clone(), slug: room.clone() };
    match rooms::delete(&d.svc, r).await {
        Ok(_) => done_redirect(
            &format!("/admin/rooms?project={}&app={}", q(&project), q(&app)),
            &format!("Room {room} deleted."),
        ),
        Err(s) => refused(rooms_page(d, &a, Some(Notice::Error(s.message()))).await, &s),
    }
}

/// `GET /admin/rooms/edit?project=&app=&room=`: a room's name.
pub(crate) async fn edit_room(d: &Dashboard, a: Authed) -> Response {
    edit_room_page(d, &a, done(&a)).await
}

async fn edit_room_page(d: &Dashboard, a: &Authed, notice: Option<Notice<'_>>) -> Response {
    let (project, app, slug) =
        (param(a, "project").to_owned(), param(a, "app").to_owned(), param(a, "room").to_owned());
    let r = pb::GetRoomRequest { project_id: project.clone(), app: app.clone(), slug: slug.clone() };
    let room = match rooms::get(&d.svc, r).await {
        Ok(r) => r,
        Err(s) => return error_page(a, "Edit room", "Rooms", &s),
    };
    let name = if a.form.get("room").is_empty() { room.name.clone() } else { a.form.get("name").to_owned() };
    let mut body = String::new();
    let _ = write!(
        body,
        "<p><a href=\"/admin/rooms?project={p}&amp;app={a}\">Rooms of {ae}</a></p>\
         <form method=\"post\" action=\"/admin/rooms/edit\" class=\"create\">{}\
         <input type=\"hidden\" name=\"project\" value=\"{pe}\"><input type=\"hidden\" name=\"app\" value=\"{ae}\">\
         <input type=\"hidden\" name=\"room\" value=\"{}\">{}<button type=\"submit\">Save room</button></form>",
        csrf_input(&a.csrf),
        esc(&room.slug),
        field("name", "Name", &name, true, "display name"),
        p = q(&project),
        a = q(&room.app_slug),
        ae = esc(&room.app_slug),
        pe = esc(&project),
    );
    let title = format!("Edit room {}/{}", room.app_slug, room.slug);
    html::respond(StatusCode::OK, html::page(&title, "Rooms", &a.csrf, notice, &body))
}

/// `POST /admin/rooms/edit`.
pub(crate) async fn update_room(d: &Dashboard, a: Authed) -> Response {
    let (project, app, slug) =
        (a.form.get("project").to_owned(), a.form.get("app").to_owned(), a.form.get("room").to_owned());
    let r = pb::UpdateRoomRequest {
        project_id: project.clone(),
        app: app.clone(),
        slug: slug.clone(),
        name: Some(a.form.get("name").to_owned()),
    };
    match rooms::update(&d.svc, r).await {
        Ok(room) => done_redirect(
            &format!("/admin/rooms?project={}&app={}", q(&project), q(&app)),
            &format!("Room {} saved.", room.slug),
        ),
        Err(s) => {
            let mut r = edit_room_page(d, &a, Some(Notice::Error(s.message()))).await;
            *r.status_mut() = status_of(&s);
            r
        }
    }
}
