//! The edit page of one topic of an app (its trigger webhook and whether it is logged).
//! Each create, edit or delete calls the service function the gRPC and REST APIs call, and
//! shows its error message when it refuses.

use std::fmt::Write as _;

use crate::service::Error;
use axum::http::StatusCode;
use axum::response::Response;
use skua_core::webhook::WebhookKind;

use super::common::{done, done_redirect, error_page, param, status_of};
use super::html::{self, Notice, csrf_input, esc, field, q};
use super::{Authed, Dashboard};
use crate::pb;
use crate::service::apps;

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
        let s = Error::not_found(format!("topic {name:?} not found in app {}", x.slug));
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
        super::targets::target_fields(
            a,
            posted,
            WebhookKind::Hydration,
            "on_subscribe",
            "Hydration webhook (onSubscribe) URL",
            "empty: the app's",
            hooks.on_subscribe.as_ref()
        ),
        super::targets::target_fields(
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
                    Error::invalid_argument(
                        "history size and TTL are whole numbers (messages, seconds), both or neither",
                    ),
                )
                .await;
            }
        },
    };
    let mut topics = x.topics.clone();
    let Some(t) = topics.iter_mut().find(|t| t.name == name) else {
        return topic_refused(d, &a, Error::not_found(format!("topic {name:?} not found in app {}", x.slug))).await;
    };
    // Headers or a timeout the form does not carry are kept; an empty URL removes the entry.
    let now = t.webhooks.clone().unwrap_or_default();
    let posted = super::targets::posted_target(&a.form, "on_subscribe", now.on_subscribe.as_ref()).and_then(|s| {
        Ok(pb::TopicWebhooks {
            on_subscribe: s,
            on_publish: super::targets::posted_target(&a.form, "on_publish", now.on_publish.as_ref())?,
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
async fn topic_refused(d: &Dashboard, a: &Authed, s: Error) -> Response {
    let mut r = edit_topic_page(d, a, Some(Notice::Error(s.message()))).await;
    *r.status_mut() = status_of(&s);
    r
}
