//! The apps of a project: their list with the create form, deletion, and the edit page of an
//! app (its webhooks and topics).
//! Each create, edit or delete calls the service function the gRPC and REST APIs call, and
//! shows its error message when it refuses.

use std::fmt::Write as _;

use crate::service::Error;
use axum::http::StatusCode;
use axum::response::Response;
use skua_core::webhook::WebhookKind;

use super::common::{
    chooser, current_app, current_project, done, done_redirect, error_page, names, param, refused, status_of,
};
use super::html::{self, Notice, button_form, csrf_input, esc, field, q};
use super::search::Search;
use super::{Authed, Dashboard};
use crate::pb;
use crate::service::apps;

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
        Err(s) => refused(apps_page(d, &a, Some(Notice::Error(s.message()))).await, &s),
    }
}

/// `POST /admin/apps/delete`.
pub(crate) async fn delete_app(d: &Dashboard, a: Authed) -> Response {
    let (project, app) = (a.form.get("project").to_owned(), a.form.get("app").to_owned());
    match apps::delete(&d.svc, pb::DeleteAppRequest { project_id: project.clone(), app: app.clone() }).await {
        Ok(_) => done_redirect(&format!("/admin/apps?project={}", q(&project)), &format!("App {app} deleted.")),
        Err(s) => refused(apps_page(d, &a, Some(Notice::Error(s.message()))).await, &s),
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
        super::targets::target_fields(
            a,
            posted,
            WebhookKind::Hydration,
            "hydration_webhook",
            "Hydration webhook URL",
            "called on subscribe; empty: none",
            x.hydration_webhook.as_ref()
        ),
        super::targets::target_fields(
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
) -> Result<Option<pb::WebhookTarget>, Error> {
    let wanted = super::targets::posted_target(&a.form, name, current)?;
    Ok(match (wanted, current) {
        (None, None) => None,
        (None, Some(_)) => Some(pb::WebhookTarget::default()),
        (Some(w), now) => (Some(&w) != now).then_some(w),
    })
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
