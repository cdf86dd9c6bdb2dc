//! The overview and the registry pages: projects, apps, rooms, actors, grants, lobbies, access
//! scopes, webhook dead letters. Each list page has its create form (apps, rooms, topics and
//! lobbies an edit form too; projects, actors and scopes have theirs in `edit`); each create, edit or delete calls the service function the gRPC and REST APIs call, and
//! shows its error message when it refuses.

use std::fmt::Write as _;

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use skua_core::webhook::WebhookKind;
use tonic::Status;

use super::common::{chooser, done, done_redirect, error_page, param, status_of};
use super::html::{self, Notice, button_form, csrf_input, esc, field, q, table, time};
use super::search::Search;
use super::{Authed, Dashboard, redirect};
use crate::pb;
use crate::service::{actors, api_keys, apps, connections, grants, lobbies, projects, rooms, scopes, webhooks};

fn uptime(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    if d > 0 { format!("{d}d {h}h {m}m") } else { format!("{h}h {m}m {s}s") }
}

/// The overview's figures as JSON (the page's script refreshes from it).
fn stats_value(d: &Dashboard) -> serde_json::Value {
    let s = d.svc.sync.node().stats();
    let samples = d.samples();
    let last = samples.last().copied().unwrap_or_default();
    serde_json::json!({
        "node": d.svc.sync.node().node_id(),
        "version": env!("CARGO_PKG_VERSION"),
        "uptime": uptime(d.started.elapsed().as_secs()),
        "connections": s.connections,
        "messages_in": s.messages_in,
        "messages_out": s.messages_out,
        "in_per_s": format!("{:.1}", last.in_per_s),
        "out_per_s": format!("{:.1}", last.out_per_s),
        "outbound_frames": s.outbound_frames,
        "outbound_bytes": s.outbound_bytes,
        "bus_queued": s.bus_queued,
        "triggers_queued": s.triggers_queued.map_or_else(|| "no triggers".to_owned(), |(q, _)| q.to_string()),
        "trigger_overflow": s.triggers_queued.map_or_else(|| "no triggers".to_owned(), |(_, o)| o.to_string()),
        "samples": samples,
    })
}

/// `GET /admin/stats`.
pub(crate) async fn stats_json(d: &Dashboard, _a: Authed) -> Response {
    ([(header::CONTENT_TYPE, "application/json"), (header::CACHE_CONTROL, "no-store")], stats_value(d).to_string())
        .into_response()
}

/// `GET /admin`: node id, version, uptime, connections, message rates and their chart.
pub(crate) async fn overview(d: &Dashboard, a: Authed) -> Response {
    let v = stats_value(d);
    let s = d.svc.sync.node().stats();
    let text = |k: &str| match &v[k] {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let mut body = String::from(
        "<section id=\"stats\" aria-labelledby=\"h-node\"><h2 id=\"h-node\">This node</h2><div class=\"cards\">",
    );
    for (k, label) in [
        ("node", "Node id"),
        ("version", "Version"),
        ("uptime", "Uptime"),
        ("connections", "Connections"),
        ("in_per_s", "Messages in / s"),
        ("out_per_s", "Messages out / s"),
        ("messages_in", "Messages in (total)"),
        ("messages_out", "Messages out (total)"),
    ] {
        let _ = write!(body, "<div class=\"card\">{label}<b id=\"v-{k}\">{}</b></div>", esc(&text(k)));
    }
    body.push_str("</div>");
    let secs = d.config.sample_interval.as_secs_f64() * d.config.history as f64;
    let span = if secs >= 120.0 { format!("{:.0} minutes", secs / 60.0) } else { format!("{secs:.0} seconds") };
    let _ = write!(
        body,
        "<h2 id=\"h-chart\">Last {span}</h2>\
         <svg class=\"chart\" viewBox=\"0 0 600 180\" preserveAspectRatio=\"none\" role=\"img\" aria-labelledby=\"h-chart chart-desc\">\
         <desc id=\"chart-desc\">Messages in and out per second and open connections, sampled every {}s; top of the chart: <tspan id=\"chart-max\">1</tspan>.</desc>\
         <polyline id=\"p-in\" fill=\"none\" stroke=\"#0b5cad\" stroke-width=\"2\" points=\"\"/>\
         <polyline id=\"p-out\" fill=\"none\" stroke=\"#bc4c00\" stroke-width=\"2\" points=\"\"/>\
         <polyline id=\"p-conns\" fill=\"none\" stroke=\"#116329\" stroke-width=\"2\" stroke-dasharray=\"4 3\" points=\"\"/></svg>\
         <p class=\"legend\"><span class=\"in\">━ in / s</span><span class=\"out\">━ out / s</span><span class=\"conns\">┅ connections</span></p>",
        d.config.sample_interval.as_secs().max(1)
    );
    let backends: Vec<Vec<String>> = s
        .backends
        .iter()
        .map(|(slot, up)| vec![esc(slot), if *up { "up".into() } else { "<strong>down</strong>".into() }])
        .collect();
    body.push_str(&table("Backends", &["Backend", "State"], &backends, "No backend information."));
    let _ = write!(body, "<p>Refused publishes: {} · retained bytes: {}</p>", s.refused, s.retained_bytes);
    body.push_str("<h2 id=\"h-queues\">Queues of this node</h2><div class=\"cards\" aria-labelledby=\"h-queues\">");
    for (k, label) in [
        ("outbound_frames", "Outbound frames queued"),
        ("outbound_bytes", "Outbound bytes queued"),
        ("bus_queued", "Bus deliveries waiting"),
        ("triggers_queued", "Triggers queued"),
        ("trigger_overflow", "Trigger overflow"),
    ] {
        let _ = write!(body, "<div class=\"card\">{label}<b id=\"v-{k}\">{}</b></div>", esc(&text(k)));
    }
    body.push_str("</div></section>");
    body.push_str(&nodes_section(d).await);
    html::respond(StatusCode::OK, html::page("Overview", "Overview", &a.csrf, done(&a), &body))
}

/// One row of the nodes table: id (this node marked), state, version, last seen.
fn node_row(n: &skua_core::NodeSeen, me: &str, now_ms: u64) -> Vec<String> {
    let id = n.node.to_string();
    let name = if id == me { format!("{} <small>(this node)</small>", esc(&id)) } else { esc(&id) };
    let seen = n.last_seen_unix_ms.map_or_else(
        || "unknown".to_owned(),
        |t| format!("{} ago <small>({} UTC)</small>", html::age(now_ms.saturating_sub(t) / 1000), time(t)),
    );
    vec![
        name,
        if n.alive { "up".to_owned() } else { "<strong>lapsed</strong>".to_owned() },
        esc(n.version.as_deref().unwrap_or("unknown")),
        seen,
    ]
}

/// The cluster's nodes from their liveness registrations in the presence backend: id, state,
/// version and when each last refreshed its registration (refreshed every 5 s by the page).
async fn nodes_section(d: &Dashboard) -> String {
    let me = d.svc.sync.node().node_id();
    let mut s = String::from(
        "<section id=\"nodes\" data-refresh=\"5\" aria-labelledby=\"h-nodes\"><h2 id=\"h-nodes\">Nodes</h2>",
    );
    match d.svc.sync.node().cluster_nodes().await {
        Err(m) => {
            let _ = write!(s, "<p class=\"notice error\" role=\"alert\">{}</p>", esc(&m));
        }
        Ok(mut nodes) => {
            nodes.sort_by(|a, b| b.alive.cmp(&a.alive).then_with(|| a.node.cmp(&b.node)));
            let now = crate::sync::now_ms();
            let rows: Vec<Vec<String>> = nodes.iter().map(|n| node_row(n, &me, now)).collect();
            s.push_str(&table(
                "Nodes registered in the presence backend",
                &["Node", "State", "Version", "Last seen"],
                &rows,
                "No node has registered yet.",
            ));
            s.push_str(
                "<p><small>Each node refreshes its registration every <code>node_refresh</code>; one that stops \
                 is lapsed after <code>node_ttl</code> and removed by the next node to notice.</small></p>",
            );
        }
    }
    s.push_str("</section>");
    s
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
async fn current_app(d: &Dashboard, a: &Authed, project: &str) -> (Vec<pb::App>, String) {
    let list = apps::list(&d.svc, pb::ListAppsRequest { project_id: project.to_owned() })
        .await
        .map(|r| r.apps)
        .unwrap_or_default();
    let want = if a.query.get("app").is_empty() { a.form.get("app") } else { a.query.get("app") };
    let chosen =
        if want.is_empty() { list.first().map(|x| x.slug.clone()).unwrap_or_default() } else { want.to_owned() };
    (list, chosen)
}

/// Renders a page after a refused change: its list with the error, the refusal's status.
async fn refused(d: &Dashboard, a: Authed, path: &str, s: &Status) -> Response {
    let status = status_of(s);
    let mut r = match path {
        "/admin/projects" => projects_page(d, &a, Some(Notice::Error(s.message()))).await,
        "/admin/apps" => apps_page(d, &a, Some(Notice::Error(s.message()))).await,
        "/admin/rooms" => rooms_page(d, &a, Some(Notice::Error(s.message()))).await,
        "/admin/actors" => actors_page(d, &a, Some(Notice::Error(s.message()))).await,
        "/admin/api-keys" => api_keys_page(d, &a, Some(Notice::Error(s.message()))).await,
        "/admin/lobbies" => lobbies_page(d, &a, Some(Notice::Error(s.message()))).await,
        "/admin/scopes" => scopes_page(d, &a, Some(Notice::Error(s.message()))).await,
        _ => grants_page(d, &a, Some(Notice::Error(s.message()))).await,
    };
    *r.status_mut() = status;
    r
}

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
                esc(&super::edit::limits_summary(p.limits.as_ref())),
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
        Err(s) => refused(d, a, "/admin/projects", &s).await,
    }
}

/// `POST /admin/projects/delete` (with everything in it).
pub(crate) async fn delete_project(d: &Dashboard, a: Authed) -> Response {
    let id = a.form.get("project").to_owned();
    match projects::delete(&d.svc, pb::DeleteProjectRequest { project_id: id.clone(), force: true }).await {
        Ok(n) => done_redirect("/admin/projects", &format!("Project {id} deleted ({} objects).", n.deleted)),
        Err(s) => refused(d, a, "/admin/projects", &s).await,
    }
}

/// `GET /admin/apps?project=`.
pub(crate) async fn apps(d: &Dashboard, a: Authed) -> Response {
    apps_page(d, &a, done(&a)).await
}

async fn apps_page(d: &Dashboard, a: &Authed, notice: Option<Notice<'_>>) -> Response {
    let (projects, project) = current_project(d, a).await;
    let (mut list, _) = current_app(d, a, &project).await;
    let keep = [("project", project.as_str())];
    let search = match Search::of(d, a, "/admin/apps", "Apps", "Apps", &keep) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    list.retain(|x| {
        search.matches([x.slug.as_str(), x.name.as_str()].into_iter().chain(x.topics.iter().map(|t| t.name.as_str())))
    });
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|x| {
            let topics: Vec<String> = x
                .topics
                .iter()
                .map(|t| if t.logged { format!("{} (logged)", t.name) } else { t.name.clone() })
                .collect();
            vec![
                format!(
                    "<a href=\"/admin/rooms?project={p}&amp;app={a}\">{s}</a> (<a href=\"/admin/apps/edit?project={p}&amp;app={a}\" aria-label=\"Edit app {s}\">edit</a>)",
                    p = q(&project),
                    a = q(&x.slug),
                    s = esc(&x.slug)
                ),
                esc(&x.name),
                esc(&topics.join(", ")),
                x.room_count.to_string(),
                if x.auto_provision_rooms { "yes".into() } else { "no".into() },
                button_form(
                    "/admin/apps/delete",
                    &a.csrf,
                    &[("project", &project), ("app", &x.slug)],
                    &format!("Delete app {}", x.slug),
                    true,
                ),
            ]
        })
        .collect();
    let mut body = chooser("/admin/apps", &projects, &project, None, None);
    let _ = write!(
        body,
        "<h2>New app in {}</h2><form method=\"post\" action=\"/admin/apps\" class=\"create\">{}\
         <input type=\"hidden\" name=\"project\" value=\"{}\">{}{}{}{}\
         <div class=\"field\"><label><input type=\"checkbox\" name=\"auto_provision_rooms\" value=\"1\"> Rooms created on first use</label></div>\
         <button type=\"submit\">Create app</button></form>",
        esc(&project),
        csrf_input(&a.csrf),
        esc(&project),
        field("slug", "Slug", a.form.get("slug"), true, "letters, digits, - and _"),
        field("name", "Name", a.form.get("name"), false, "defaults to the slug"),
        field("topics", "Topics", a.form.get("topics"), false, "comma-separated, e.g. chat, events"),
        field(
            "logged",
            "Logged topics",
            a.form.get("logged"),
            false,
            "comma-separated: kept for replay and durable delivery"
        ),
    );
    body.push_str(&search.form("/admin/apps", "apps", "slug, name or a topic", &keep, d.config.search_max_chars));
    body.push_str(&search.table(
        "Apps",
        &["Slug", "Name", "Topics", "Rooms", "Auto rooms", ""],
        &rows,
        "No apps in this project.",
    ));
    html::respond(StatusCode::OK, html::page("Apps", "Apps", &a.csrf, notice, &body))
}

/// Comma- or space-separated names, without empties.
pub(super) fn names(s: &str) -> Vec<String> {
    s.split([',', ' ', '\n']).map(str::trim).filter(|t| !t.is_empty()).map(str::to_owned).collect()
}

/// `POST /admin/apps`.
pub(crate) async fn create_app(d: &Dashboard, a: Authed) -> Response {
    let project = a.form.get("project").to_owned();
    let logged = names(a.form.get("logged"));
    let mut topics: Vec<pb::Topic> =
        names(a.form.get("topics")).into_iter().map(|name| pb::Topic { name, ..Default::default() }).collect();
    for l in &logged {
        match topics.iter_mut().find(|t| &t.name == l) {
            Some(t) => t.logged = true,
            None => topics.push(pb::Topic { name: l.clone(), logged: true, ..Default::default() }),
        }
    }
    let r = pb::CreateAppRequest {
        project_id: project.clone(),
        slug: a.form.get("slug").to_owned(),
        name: a.form.get("name").to_owned(),
        topics,
        auto_provision_rooms: !a.form.get("auto_provision_rooms").is_empty(),
        ..Default::default()
    };
    match apps::create(&d.svc, r).await {
        Ok(x) => done_redirect(&format!("/admin/apps?project={}", q(&project)), &format!("App {} created.", x.slug)),
        Err(s) => refused(d, a, "/admin/apps", &s).await,
    }
}

/// `POST /admin/apps/delete`.
pub(crate) async fn delete_app(d: &Dashboard, a: Authed) -> Response {
    let (project, app) = (a.form.get("project").to_owned(), a.form.get("app").to_owned());
    match apps::delete(&d.svc, pb::DeleteAppRequest { project_id: project.clone(), app: app.clone() }).await {
        Ok(_) => done_redirect(&format!("/admin/apps?project={}", q(&project)), &format!("App {app} deleted.")),
        Err(s) => refused(d, a, "/admin/apps", &s).await,
    }
}

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
        Err(s) => refused(d, a, "/admin/rooms", &s).await,
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
        Err(s) => refused(d, a, "/admin/rooms", &s).await,
    }
}

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
        Err(s) => refused(d, a, "/admin/actors", &s).await,
    }
}

/// `POST /admin/actors/delete`.
pub(crate) async fn delete_actor(d: &Dashboard, a: Authed) -> Response {
    let (project, actor) = (a.form.get("project").to_owned(), a.form.get("actor").to_owned());
    match actors::delete(&d.svc, pb::ActorRef { actor_id: actor.clone() }).await {
        Ok(_) => done_redirect(&format!("/admin/actors?project={}", q(&project)), &format!("Actor {actor} deleted.")),
        Err(s) => refused(d, a, "/admin/actors", &s).await,
    }
}

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
        Err(s) => refused(d, a, "/admin/grants", &s).await,
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
        Err(s) => refused(d, a, "/admin/grants", &s).await,
    }
}

/// `GET /admin/webhooks?project=`: the project's webhook dead letters, each with a retry.
pub(crate) async fn webhooks(d: &Dashboard, a: Authed) -> Response {
    webhooks_page(d, &a, done(&a)).await
}

async fn webhooks_page(d: &Dashboard, a: &Authed, notice: Option<Notice<'_>>) -> Response {
    let (projects, project) = current_project(d, a).await;
    let found = webhooks::list_failures(
        &d.svc,
        pb::ListWebhookFailuresRequest { project_id: project.clone(), after_id: 0, limit: 100 },
    )
    .await;
    let mut body = chooser("/admin/webhooks", &projects, &project, None, None);
    body.push_str(
        "<h2>Dead letters</h2><p>Webhook deliveries that failed every attempt, oldest first (at most 100).</p>",
    );
    match found {
        Err(s) => {
            let _ = write!(body, "<p class=\"notice error\" role=\"alert\">{}</p>", esc(s.message()));
        }
        Ok(r) => {
            let rows: Vec<Vec<String>> = r
                .failures
                .iter()
                .map(|f| {
                    vec![
                        time(f.failed_at_ms),
                        esc(&f.kind),
                        esc(&f.topic),
                        esc(&f.target),
                        f.attempts.to_string(),
                        esc(&f.last_error),
                        button_form(
                            "/admin/webhooks/retry",
                            &a.csrf,
                            &[("project", &project), ("delivery", &f.delivery_id)],
                            &format!("Retry {}", f.delivery_id),
                            false,
                        ),
                    ]
                })
                .collect();
            body.push_str(&table(
                "Dead letters",
                &["Failed (UTC)", "Kind", "Topic", "URL", "Attempts", "Last error", ""],
                &rows,
                "No dead letters: every webhook was delivered.",
            ));
        }
    }
    body.push_str(&recent_webhooks(d));
    html::respond(StatusCode::OK, html::page("Webhooks", "Webhooks", &a.csrf, notice, &body))
}

/// The recent deliveries section: the last deliveries this node made, every kind and project.
fn recent_webhooks(d: &Dashboard) -> String {
    let node = d.svc.sync.node();
    let rows: Vec<Vec<String>> = node
        .recent_webhooks()
        .iter()
        .map(|w| {
            let outcome =
                if w.outcome == "ok" { "ok".to_owned() } else { format!("<strong>{}</strong>", esc(w.outcome)) };
            vec![
                time(w.at_unix_ms),
                esc(w.kind),
                esc(&w.host),
                outcome,
                w.status.map_or_else(|| "none".to_owned(), |s| s.to_string()),
                format!("{} ms", w.latency_ms),
            ]
        })
        .collect();
    let mut s = format!(
        "<section id=\"recent\" data-refresh=\"5\" aria-labelledby=\"h-recent\"><h2 id=\"h-recent\">Recent deliveries</h2>\
         <p>The last deliveries node <code>{}</code> made (every project, hydration, trigger and wake), newest \
         first, at most <code>webhook_recent_deliveries</code>; each node keeps its own. The latency runs \
         from the first attempt to the outcome, retries included.</p>",
        esc(&node.node_id())
    );
    s.push_str(&table(
        "Recent deliveries",
        &["Ended (UTC)", "Kind", "Host", "Outcome", "HTTP status", "Latency"],
        &rows,
        "No webhook deliveries from this node since it started.",
    ));
    s.push_str("</section>");
    s
}

/// `POST /admin/webhooks/retry`: posts one dead letter again, now.
pub(crate) async fn retry_webhooks(d: &Dashboard, a: Authed) -> Response {
    let project = a.form.get("project").to_owned();
    let r = pb::RetryWebhookFailuresRequest {
        project_id: project.clone(),
        delivery_ids: vec![a.form.get("delivery").to_owned()],
        all: false,
    };
    let to = format!("/admin/webhooks?project={}", q(&project));
    let msg = match webhooks::retry_failures(&d.svc, r).await {
        Ok(r) => match r.results.first() {
            Some(x) if x.delivered => format!("Delivery {} delivered.", x.delivery_id),
            Some(x) => {
                let msg = format!("Delivery {} failed again: {}", x.delivery_id, x.error);
                return redirect(&format!("{to}&failed={}", q(&msg)));
            }
            None => "No such dead letter (already delivered?).".to_owned(),
        },
        Err(s) => {
            let mut r = webhooks_page(d, &a, Some(Notice::Error(s.message()))).await;
            *r.status_mut() = status_of(&s);
            return r;
        }
    };
    done_redirect(&to, &msg)
}

/// `GET /admin/presence?project=&app=&room=`: who is in the room now (the page refreshes the
/// table every 5 s).
pub(crate) async fn presence(d: &Dashboard, a: Authed) -> Response {
    let (projects, project) = current_project(d, &a).await;
    let (apps, app) = current_app(d, &a, &project).await;
    let room = a.query.get("room").to_owned();
    let mut body = chooser("/admin/presence", &projects, &project, Some((&apps, &app)), Some(&room));
    if room.is_empty() {
        body.push_str("<p class=\"empty\">Choose a room to see who is in it.</p>");
        return html::respond(StatusCode::OK, html::page("Presence", "Rooms", &a.csrf, None, &body));
    }
    let listed = match crate::service::publish::room_key(&d.svc, &project, &app, &room).await {
        Ok(key) => d.svc.sync.node().room_presence(&key).await.map_err(|e| (StatusCode::SERVICE_UNAVAILABLE, e)),
        Err(s) => Err((status_of(&s), s.message().to_owned())),
    };
    let (status, section) = match listed {
        Ok(mut members) => {
            members.sort_by(|x, y| x.actor.as_str().cmp(y.actor.as_str()));
            let rows: Vec<Vec<String>> = members
                .iter()
                .map(|m| {
                    vec![
                        esc(m.actor.as_str()),
                        time(m.joined_at.saturating_mul(1000)),
                        format!("<code>{}</code>", esc(&super::live::show(&m.data))),
                    ]
                })
                .collect();
            let caption = format!("In {app}/{room}: {}", members.len());
            (StatusCode::OK, table(&caption, &["Actor", "Joined (UTC)", "Presence"], &rows, "Nobody is in this room."))
        }
        Err((status, m)) => (status, format!("<p class=\"notice error\" role=\"alert\">{}</p>", esc(&m))),
    };
    let _ = write!(body, "<section id=\"presence\" data-refresh=\"5\" aria-live=\"polite\">{section}</section>");
    html::respond(status, html::page("Presence", "Rooms", &a.csrf, None, &body))
}

/// `GET /admin/connections?project=`: the project's open connections, devices included, each
/// with how it came (`ws`, `mqtt`, `mqtt-ws`; the page refreshes the table every 5 s).
pub(crate) async fn connections(d: &Dashboard, a: Authed) -> Response {
    let (projects, project) = current_project(d, &a).await;
    let mut body = chooser("/admin/connections", &projects, &project, None, None);
    let req = pb::ListConnectionsRequest { project_id: project.clone(), ..Default::default() };
    let (status, section) = match connections::list(&d.svc, req).await {
        Ok(r) => {
            let rows: Vec<Vec<String>> = r
                .connections
                .iter()
                .map(|c| {
                    vec![
                        esc(&c.actor_id),
                        esc(&c.protocol),
                        esc(if c.client_id.is_empty() { "-" } else { &c.client_id }),
                        c.subscriptions.to_string(),
                        time(c.connected_at_ms),
                        esc(&c.node_id),
                        esc(&c.connection_id),
                    ]
                })
                .collect();
            let caption = format!("Open connections of {project}: {}", rows.len());
            let head = ["Actor", "Protocol", "Client id", "Subscriptions", "Connected (UTC)", "Node", "Connection"];
            (StatusCode::OK, table(&caption, &head, &rows, "No open connections."))
        }
        Err(s) => (status_of(&s), format!("<p class=\"notice error\" role=\"alert\">{}</p>", esc(s.message()))),
    };
    let _ = write!(body, "<section id=\"connections\" data-refresh=\"5\" aria-live=\"polite\">{section}</section>");
    html::respond(status, html::page("Connections", "Connections", &a.csrf, None, &body))
}

/// `GET /admin/api-keys?project=`: the project's REST API keys (never the keys themselves).
pub(crate) async fn api_keys(d: &Dashboard, a: Authed) -> Response {
    api_keys_page(d, &a, done(&a)).await
}

async fn api_keys_page(d: &Dashboard, a: &Authed, notice: Option<Notice<'_>>) -> Response {
    let (projects, project) = current_project(d, a).await;
    let keep = [("project", project.as_str())];
    let search = match Search::of(d, a, "/admin/api-keys", "API keys", "API keys", &keep) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let mut list = api_keys::list(&d.svc, pb::ListApiKeysRequest { project_id: project.clone() })
        .await
        .map(|r| r.api_keys)
        .unwrap_or_default();
    // The key id (the key's public prefix) and the name: the list never carries a key itself.
    list.retain(|k| search.matches([k.key_id.as_str(), k.name.as_str()]));
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|k| {
            vec![
                format!("<code>{}</code>", esc(&k.key_id)),
                esc(&k.name),
                time(k.created_at_ms),
                button_form(
                    "/admin/api-keys/delete",
                    &a.csrf,
                    &[("project", &project), ("key", &k.key_id)],
                    &format!("Revoke key {}", k.key_id),
                    true,
                ),
            ]
        })
        .collect();
    let mut body = chooser("/admin/api-keys", &projects, &project, None, None);
    let _ = write!(
        body,
        "<h2>New API key in {}</h2><p>The REST API's bearer keys (<code>/v1</code>), scoped to this project; \
         a key is shown once, when it is created.</p><form method=\"post\" action=\"/admin/api-keys\" class=\"create\">{}\
         <input type=\"hidden\" name=\"project\" value=\"{}\">{}<button type=\"submit\">Create key</button></form>",
        esc(&project),
        csrf_input(&a.csrf),
        esc(&project),
        field("name", "Name", a.form.get("name"), false, "what it is for"),
    );
    body.push_str(&search.form("/admin/api-keys", "API keys", "key id or name", &keep, d.config.search_max_chars));
    body.push_str(&search.table(
        "API keys",
        &["Key id", "Name", "Created (UTC)", ""],
        &rows,
        "No API keys in this project.",
    ));
    html::respond(StatusCode::OK, html::page("API keys", "API keys", &a.csrf, notice, &body))
}

/// `POST /admin/api-keys`: shows the new key once.
pub(crate) async fn create_api_key(d: &Dashboard, a: Authed) -> Response {
    let project = a.form.get("project").to_owned();
    let r = pb::CreateApiKeyRequest { project_id: project.clone(), name: a.form.get("name").to_owned() };
    match api_keys::create(&d.svc, r).await {
        Ok(k) => {
            let msg = format!("API key created. The key (shown once): {}", k.key);
            let shown = Authed {
                csrf: a.csrf.clone(),
                form: super::Form::default(),
                query: super::Form::parse(format!("project={}", q(&project)).as_bytes()),
            };
            api_keys_page(d, &shown, Some(Notice::Ok(&msg))).await
        }
        Err(s) => refused(d, a, "/admin/api-keys", &s).await,
    }
}

/// `POST /admin/api-keys/delete`.
pub(crate) async fn delete_api_key(d: &Dashboard, a: Authed) -> Response {
    let (project, key) = (a.form.get("project").to_owned(), a.form.get("key").to_owned());
    match api_keys::revoke(&d.svc, pb::RevokeApiKeyRequest { project_id: project.clone(), key_id: key.clone() }).await {
        Ok(_) => done_redirect(&format!("/admin/api-keys?project={}", q(&project)), &format!("API key {key} revoked.")),
        Err(s) => refused(d, a, "/admin/api-keys", &s).await,
    }
}

/// `GET /admin/apps/edit?project=&app=`: an app's name, room auto-provisioning and app-level
/// webhook URLs.
pub(crate) async fn edit_app(d: &Dashboard, a: Authed) -> Response {
    edit_app_page(d, &a, done(&a)).await
}

async fn edit_app_page(d: &Dashboard, a: &Authed, notice: Option<Notice<'_>>) -> Response {
    let (project, slug) = (param(a, "project").to_owned(), param(a, "app").to_owned());
    let x = match apps::get(&d.svc, pb::GetAppRequest { project_id: project.clone(), app: slug.clone() }).await {
        Ok(x) => x,
        Err(s) => return error_page(a, "Edit app", "Apps", &s),
    };
    // After a refused change the form shows what was sent, so it can be corrected.
    let posted = !a.form.get("app").is_empty();
    let value = |k: &str, current: &str| if posted { a.form.get(k).to_owned() } else { current.to_owned() };
    let auto = if posted { !a.form.get("auto_provision_rooms").is_empty() } else { x.auto_provision_rooms };
    let mut body = String::new();
    let _ = write!(
        body,
        "<p><a href=\"/admin/apps?project={p}\">All apps</a> · <a href=\"/admin/rooms?project={p}&amp;app={a}\">Rooms of {s}</a></p>\
         <form method=\"post\" action=\"/admin/apps/edit\" class=\"create\">{csrf}\
         <input type=\"hidden\" name=\"project\" value=\"{pe}\"><input type=\"hidden\" name=\"app\" value=\"{s}\">{}{}{}\
         <div class=\"field\"><label><input type=\"checkbox\" name=\"auto_provision_rooms\" value=\"1\"{}> Rooms created on first use</label></div>{}{}\
         <button type=\"submit\">Save app</button></form>\
         <p>A topic removed from the list ends its subscriptions; a topic kept keeps its own webhooks and history. \
         An empty URL removes its webhook (with its headers and timeout).</p>\
         <h2>Each topic's webhooks and history</h2><ul class=\"topics\">{}</ul>",
        field("name", "Name", &value("name", &x.name), true, "display name"),
        super::edit::target_fields(
            a,
            posted,
            WebhookKind::Hydration,
            "hydration_webhook",
            "Hydration webhook URL",
            "called on subscribe; empty: none",
            x.hydration_webhook.as_ref()
        ),
        super::edit::target_fields(
            a,
            posted,
            WebhookKind::Trigger,
            "trigger_webhook",
            "Trigger webhook URL",
            "called on publish; empty: none",
            x.trigger_webhook.as_ref()
        ),
        if auto { " checked" } else { "" },
        field(
            "topics",
            "Topics",
            &value("topics", &x.topics.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ")),
            false,
            "comma-separated"
        ),
        field(
            "logged",
            "Logged topics",
            &value(
                "logged",
                &x.topics.iter().filter(|t| t.logged).map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ")
            ),
            false,
            "comma-separated: kept for replay and durable delivery"
        ),
        x.topics
            .iter()
            .map(|t| {
                let mut what = Vec::new();
                if t.history.is_some() {
                    what.push("history");
                }
                if t.webhooks.as_ref().is_some_and(|w| w.on_subscribe.is_some() || w.on_publish.is_some()) {
                    what.push("own webhooks");
                }
                format!(
                    "<li><a href=\"/admin/apps/topic?project={}&amp;app={}&amp;topic={}\">{}</a>{}</li>",
                    q(&project),
                    q(&x.slug),
                    q(&t.name),
                    esc(&t.name),
                    if what.is_empty() { String::new() } else { format!(" ({})", what.join(", ")) }
                )
            })
            .collect::<String>(),
        p = q(&project),
        a = q(&x.slug),
        s = esc(&x.slug),
        pe = esc(&project),
        csrf = csrf_input(&a.csrf),
    );
    let title = format!("Edit app {}", x.slug);
    html::respond(StatusCode::OK, html::page(&title, "Apps", &a.csrf, notice, &body))
}

/// The update of an app-level webhook from its form fields (URL, headers, timeout): none when
/// nothing changed; an empty URL removes the webhook.
fn webhook_update(
    a: &Authed,
    name: &str,
    current: Option<&pb::WebhookTarget>,
) -> Result<Option<pb::WebhookTarget>, Status> {
    let wanted = super::edit::posted_target(&a.form, name, current)?;
    Ok(match (wanted, current) {
        (None, None) => None,
        (None, Some(_)) => Some(pb::WebhookTarget::default()),
        (Some(w), now) => (Some(&w) != now).then_some(w),
    })
}

/// `GET /admin/apps/topic?project=&app=&topic=`: one topic's own webhooks (over the app's) and
/// history.
pub(crate) async fn edit_topic(d: &Dashboard, a: Authed) -> Response {
    edit_topic_page(d, &a, done(&a)).await
}

async fn edit_topic_page(d: &Dashboard, a: &Authed, notice: Option<Notice<'_>>) -> Response {
    let (project, slug, name) =
        (param(a, "project").to_owned(), param(a, "app").to_owned(), param(a, "topic").to_owned());
    let x = match apps::get(&d.svc, pb::GetAppRequest { project_id: project.clone(), app: slug.clone() }).await {
        Ok(x) => x,
        Err(s) => return error_page(a, "Edit topic", "Apps", &s),
    };
    let Some(t) = x.topics.iter().find(|t| t.name == name) else {
        let s = Status::not_found(format!("topic {name:?} not found in app {}", x.slug));
        return error_page(a, "Edit topic", "Apps", &s);
    };
    let posted = a.form.has("history_size");
    let value = |k: &str, current: String| if posted { a.form.get(k).to_owned() } else { current };
    let hooks = t.webhooks.clone().unwrap_or_default();
    let (size, ttl) = t
        .history
        .as_ref()
        .map_or((String::new(), String::new()), |h| (h.size.to_string(), (h.ttl_ms / 1000).to_string()));
    let mut body = String::new();
    let _ = write!(
        body,
        "<p><a href=\"/admin/apps/edit?project={p}&amp;app={ap}\">Edit app {s}</a></p>\
         <form method=\"post\" action=\"/admin/apps/topic\" class=\"create\">{}\
         <input type=\"hidden\" name=\"project\" value=\"{pe}\"><input type=\"hidden\" name=\"app\" value=\"{s}\">\
         <input type=\"hidden\" name=\"topic\" value=\"{}\">{}{}{}{}\
         <button type=\"submit\">Save topic</button></form>\
         <p>A topic's own webhook wins over the app's (empty: the app's, if any). History keeps each room's last \
         messages for recovery on reconnect (both empty: none; the node's <code>history_max_size</code> caps the size).</p>",
        csrf_input(&a.csrf),
        esc(&t.name),
        super::edit::target_fields(
            a,
            posted,
            WebhookKind::Hydration,
            "on_subscribe",
            "Hydration webhook (onSubscribe) URL",
            "empty: the app's",
            hooks.on_subscribe.as_ref()
        ),
        super::edit::target_fields(
            a,
            posted,
            WebhookKind::Trigger,
            "on_publish",
            "Trigger webhook (onPublish) URL",
            "empty: the app's",
            hooks.on_publish.as_ref()
        ),
        field(
            "history_size",
            "History size",
            &value("history_size", size),
            false,
            "messages kept per room; empty: no history"
        ),
        field(
            "history_ttl",
            "History TTL (seconds)",
            &value("history_ttl", ttl),
            false,
            "how long each message is kept"
        ),
        p = q(&project),
        ap = q(&x.slug),
        s = esc(&x.slug),
        pe = esc(&project),
    );
    let title = format!("Edit topic {}/{}", x.slug, t.name);
    html::respond(StatusCode::OK, html::page(&title, "Apps", &a.csrf, notice, &body))
}

/// `POST /admin/apps/topic`: one topic's own webhook URLs and history, through the app update
/// (the same validation as the APIs).
pub(crate) async fn update_topic(d: &Dashboard, a: Authed) -> Response {
    let (project, slug, name) =
        (a.form.get("project").to_owned(), a.form.get("app").to_owned(), a.form.get("topic").to_owned());
    let x = match apps::get(&d.svc, pb::GetAppRequest { project_id: project.clone(), app: slug.clone() }).await {
        Ok(x) => x,
        Err(s) => return error_page(&a, "Edit topic", "Apps", &s),
    };
    let history = match (a.form.get("history_size"), a.form.get("history_ttl")) {
        ("", "") => None,
        (size, ttl) => match (size.parse::<u32>(), ttl.parse::<u64>()) {
            (Ok(size), Ok(ttl)) => Some(pb::TopicHistory { size, ttl_ms: ttl.saturating_mul(1000) }),
            _ => {
                return topic_refused(
                    d,
                    &a,
                    Status::invalid_argument(
                        "history size and TTL are whole numbers (messages, seconds), both or neither",
                    ),
                )
                .await;
            }
        },
    };
    let mut topics = x.topics.clone();
    let Some(t) = topics.iter_mut().find(|t| t.name == name) else {
        return topic_refused(d, &a, Status::not_found(format!("topic {name:?} not found in app {}", x.slug))).await;
    };
    // Headers or a timeout the form does not carry are kept; an empty URL removes the entry.
    let now = t.webhooks.clone().unwrap_or_default();
    let posted = super::edit::posted_target(&a.form, "on_subscribe", now.on_subscribe.as_ref()).and_then(|s| {
        Ok(pb::TopicWebhooks {
            on_subscribe: s,
            on_publish: super::edit::posted_target(&a.form, "on_publish", now.on_publish.as_ref())?,
        })
    });
    let hooks = match posted {
        Ok(h) => h,
        Err(s) => return topic_refused(d, &a, s).await,
    };
    t.webhooks = (hooks.on_subscribe.is_some() || hooks.on_publish.is_some()).then_some(hooks);
    t.history = history;
    let r = pb::UpdateAppRequest {
        project_id: project.clone(),
        app: slug.clone(),
        topics: Some(pb::TopicList { topics }),
        ..Default::default()
    };
    match apps::update(&d.svc, r).await {
        Ok(x) => done_redirect(
            &format!("/admin/apps/topic?project={}&app={}&topic={}", q(&project), q(&x.slug), q(&name)),
            &format!("Topic {name} saved."),
        ),
        Err(s) => topic_refused(d, &a, s).await,
    }
}

/// The topic page again with `s`'s message and status.
async fn topic_refused(d: &Dashboard, a: &Authed, s: Status) -> Response {
    let mut r = edit_topic_page(d, a, Some(Notice::Error(s.message()))).await;
    *r.status_mut() = status_of(&s);
    r
}

/// The new topic list from the topics and logged fields, `None` when it is unchanged. A topic
/// kept keeps its own webhooks and history; a logged topic not in the topics field is added.
fn topics_update(current: &[pb::Topic], topics: &str, logged: &str) -> Option<pb::TopicList> {
    let logged = names(logged);
    let mut list: Vec<String> = names(topics);
    for l in &logged {
        if !list.contains(l) {
            list.push(l.clone());
        }
    }
    let new: Vec<pb::Topic> = list
        .into_iter()
        .map(|name| {
            let mut t = current.iter().find(|t| t.name == name).cloned().unwrap_or_default();
            t.logged = logged.contains(&name);
            t.name = name;
            t
        })
        .collect();
    (new != current).then_some(pb::TopicList { topics: new })
}

/// `POST /admin/apps/edit`.
pub(crate) async fn update_app(d: &Dashboard, a: Authed) -> Response {
    let (project, slug) = (a.form.get("project").to_owned(), a.form.get("app").to_owned());
    let x = match apps::get(&d.svc, pb::GetAppRequest { project_id: project.clone(), app: slug.clone() }).await {
        Ok(x) => x,
        Err(s) => return error_page(&a, "Edit app", "Apps", &s),
    };
    let hooks = webhook_update(&a, "hydration_webhook", x.hydration_webhook.as_ref())
        .and_then(|h| Ok((h, webhook_update(&a, "trigger_webhook", x.trigger_webhook.as_ref())?)));
    let (hydration_webhook, trigger_webhook) = match hooks {
        Ok(h) => h,
        Err(s) => {
            let mut r = edit_app_page(d, &a, Some(Notice::Error(s.message()))).await;
            *r.status_mut() = status_of(&s);
            return r;
        }
    };
    let r = pb::UpdateAppRequest {
        project_id: project.clone(),
        app: slug.clone(),
        name: Some(a.form.get("name").to_owned()),
        auto_provision_rooms: Some(!a.form.get("auto_provision_rooms").is_empty()),
        hydration_webhook,
        trigger_webhook,
        topics: a
            .form
            .has("topics")
            .then(|| topics_update(&x.topics, a.form.get("topics"), a.form.get("logged")))
            .flatten(),
        ..Default::default()
    };
    match apps::update(&d.svc, r).await {
        Ok(x) => done_redirect(
            &format!("/admin/apps/edit?project={}&app={}", q(&project), q(&x.slug)),
            &format!("App {} saved.", x.slug),
        ),
        Err(s) => {
            let mut r = edit_app_page(d, &a, Some(Notice::Error(s.message()))).await;
            *r.status_mut() = status_of(&s);
            r
        }
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
        Err(s) => refused(d, a, "/admin/lobbies", &s).await,
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
        Err(s) => refused(d, a, "/admin/lobbies", &s).await,
    }
}

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
        Err(s) => refused(d, a, "/admin/scopes", &s).await,
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
        Err(s) => refused(d, a, "/admin/scopes", &s).await,
    }
}

/// `POST /admin/scopes/delete`.
pub(crate) async fn delete_scope(d: &Dashboard, a: Authed) -> Response {
    let (project, scope) = (a.form.get("project").to_owned(), a.form.get("scope").to_owned());
    match scopes::delete(&d.svc, pb::ScopeRef { project_id: project.clone(), scope: scope.clone() }).await {
        Ok(_) => done_redirect(&format!("/admin/scopes?project={}", q(&project)), &format!("Scope {scope} deleted.")),
        Err(s) => refused(d, a, "/admin/scopes", &s).await,
    }
}

#[cfg(test)]
mod tests {
    use super::node_row;
    use skua_core::{NodeId, NodeSeen};

    #[test]
    fn node_rows_mark_this_node_and_lapsed_ones() {
        let seen = |id: &str, alive: bool, at: Option<u64>| NodeSeen {
            node: NodeId::parse(id).unwrap(),
            alive,
            last_seen_unix_ms: at,
            version: at.map(|_| "1.2.3".to_owned()),
            bus_up: at.map(|_| true),
        };
        let now = 1_700_000_100_000;
        let me = node_row(&seen("n1", true, Some(now - 2_500)), "n1", now);
        assert_eq!(me[..3], ["n1 <small>(this node)</small>", "up", "1.2.3"]);
        assert_eq!(me[3], "2s ago <small>(2023-11-14 22:14:57 UTC)</small>");
        let gone = node_row(&seen("n2", false, None), "n1", now);
        assert_eq!(gone, ["n2", "<strong>lapsed</strong>", "unknown", "unknown"]);
    }
}
