//! The edit pages beyond the apps' and rooms': a project's name, JWT secret and limits; an
//! actor's name, state and access scope (and a new access token); a scope's name. And the
//! webhook fields (URL, headers, timeout) the app and topic forms share. Each save calls the
//! service function the gRPC and REST APIs call, so the checks and messages are theirs.

use std::collections::HashMap;
use std::fmt::Write as _;

use axum::http::StatusCode;
use axum::response::Response;
use skua_core::webhook::WebhookKind;
use tonic::Status;

use super::common::{done, done_redirect, error_page, param, status_of};
use super::html::{self, Notice, button_form, checkbox, csrf_input, esc, field, q, textarea};
use super::{Authed, Dashboard, Form};
use crate::pb;
use crate::service::{actors, projects, scopes};

// ---- webhook targets (the app's and each topic's) ----

/// A webhook's extra headers from its form field: one `Name: value` a line, empty lines
/// skipped. Names and values are checked by the node's webhook policy when saved (as over the
/// APIs); here only the field's own format.
pub(crate) fn parse_headers(field: &str, text: &str) -> Result<HashMap<String, String>, Status> {
    let mut out: HashMap<String, String> = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(Status::invalid_argument(format!(
                "{field}.headers: line {} has no ':'; write one `Name: value` a line",
                i + 1
            )));
        };
        let name = name.trim();
        if out.keys().any(|k| k.eq_ignore_ascii_case(name)) {
            return Err(Status::invalid_argument(format!("{field}.headers: header {name} is given twice")));
        }
        out.insert(name.to_owned(), value.trim().to_owned());
    }
    Ok(out)
}

/// The headers field's text: one `Name: value` a line, by name.
pub(crate) fn show_headers(h: &HashMap<String, String>) -> String {
    let mut lines: Vec<String> = h.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    lines.sort();
    lines.join("\n")
}

/// A webhook's timeout from its form field, in ms; empty: 0 (the default).
fn parse_timeout(field: &str, text: &str) -> Result<u32, Status> {
    if text.is_empty() {
        return Ok(0);
    }
    text.parse().map_err(|_| {
        Status::invalid_argument(format!(
            "{field}.timeout_ms must be a whole number of milliseconds (empty: the default)"
        ))
    })
}

/// The webhook of form fields `name` (its URL), `name_headers` and `name_timeout_ms`: `None`
/// when the URL is empty (no webhook); headers or a timeout the form does not carry are kept
/// from `current`.
pub(crate) fn posted_target(
    form: &Form,
    name: &str,
    current: Option<&pb::WebhookTarget>,
) -> Result<Option<pb::WebhookTarget>, Status> {
    let url = form.get(name);
    if url.is_empty() {
        return Ok(None);
    }
    let now = current.cloned().unwrap_or_default();
    let (hk, tk) = (format!("{name}_headers"), format!("{name}_timeout_ms"));
    let headers = if form.has(&hk) { parse_headers(name, form.get(&hk))? } else { now.headers };
    let timeout_ms = if form.has(&tk) { parse_timeout(name, form.get(&tk))? } else { now.timeout_ms };
    Ok(Some(pb::WebhookTarget { url: url.to_owned(), headers, timeout_ms }))
}

/// The fields of webhook `name` of `kind`: its URL (labelled `url_label`), headers and
/// timeout, with what was posted after a refused change, else `current`.
pub(crate) fn target_fields(
    a: &Authed,
    posted: bool,
    kind: WebhookKind,
    name: &str,
    url_label: &str,
    hint: &str,
    current: Option<&pb::WebhookTarget>,
) -> String {
    let (hk, tk) = (format!("{name}_headers"), format!("{name}_timeout_ms"));
    let now = current.cloned().unwrap_or_default();
    let pick = |k: &str, v: String| if posted && a.form.has(k) { a.form.get(k).to_owned() } else { v };
    let timeout = if now.timeout_ms == 0 { String::new() } else { now.timeout_ms.to_string() };
    let short = url_label.replace(" URL", "");
    format!(
        "<fieldset class=\"webhook\"><legend>{}</legend>{}{}{}</fieldset>",
        esc(&short),
        field(name, url_label, &pick(name, now.url.clone()), false, hint),
        textarea(
            &hk,
            &format!("{short}: headers"),
            &pick(&hk, show_headers(&now.headers)),
            "one Name: value a line, sent with every call"
        ),
        field(
            &tk,
            &format!("{short}: timeout (ms)"),
            &pick(&tk, timeout),
            false,
            &format!(
                "empty: the default, {} ms; at most {} ms",
                kind.default_timeout().as_millis(),
                kind.max_timeout().as_millis()
            )
        ),
    )
}

// ---- projects ----

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
fn limit<T: std::str::FromStr>(form: &Form, k: &str) -> Result<Option<T>, Status> {
    match form.get(k) {
        "" => Ok(None),
        v => v.parse().map(Some).map_err(|_| {
            Status::invalid_argument(format!("limits.{k} must be a whole number (empty: the node's setting)"))
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
fn project_update(a: &Authed) -> Result<pb::UpdateProjectRequest, Status> {
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

/// `r` with the status of the refusal `s`.
fn refused(mut r: Response, s: &Status) -> Response {
    *r.status_mut() = status_of(s);
    r
}

// ---- actors ----

/// The actor `id` when it belongs to `project` (404 otherwise, as missing: the REST API's rule).
async fn owned_actor(d: &Dashboard, project: &str, id: &str) -> Result<pb::Actor, Status> {
    let x = actors::get(&d.svc, pb::GetActorRequest { actor_id: id.to_owned() }).await?;
    if x.project_id != project {
        return Err(Status::not_found(format!("actor {id:?} not found in project {project:?}")));
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
async fn save_actor(d: &Dashboard, a: &Authed) -> Result<pb::Actor, Status> {
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

// ---- scopes ----

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_one_name_value_a_line() {
        let h = parse_headers("trigger_webhook", "X-Token: abc:def\n\n  X-Env :  prod \n").unwrap();
        assert_eq!(h.len(), 2);
        assert_eq!(h["X-Token"], "abc:def");
        assert_eq!(h["X-Env"], "prod");
        assert_eq!(show_headers(&h), "X-Env: prod\nX-Token: abc:def");
        let e = parse_headers("trigger_webhook", "X-A: 1\nno colon").unwrap_err();
        assert_eq!(e.message(), "trigger_webhook.headers: line 2 has no ':'; write one `Name: value` a line");
        let e = parse_headers("f", "X-A: 1\nx-a: 2").unwrap_err();
        assert_eq!(e.message(), "f.headers: header x-a is given twice");
        assert!(parse_headers("f", "").unwrap().is_empty());
    }

    #[test]
    fn a_posted_target_keeps_what_the_form_does_not_carry() {
        let current = pb::WebhookTarget {
            url: "http://a.example/x".into(),
            headers: HashMap::from([("X-K".to_owned(), "v".to_owned())]),
            timeout_ms: 2000,
        };
        let form = Form::parse(b"hook=http%3A%2F%2Fb.example%2Fy");
        let t = posted_target(&form, "hook", Some(&current)).unwrap().unwrap();
        assert_eq!((t.url.as_str(), t.headers.len(), t.timeout_ms), ("http://b.example/y", 1, 2000));
        let form = Form::parse(b"hook=http%3A%2F%2Fb.example%2Fy&hook_headers=&hook_timeout_ms=");
        let t = posted_target(&form, "hook", Some(&current)).unwrap().unwrap();
        assert_eq!((t.headers.len(), t.timeout_ms), (0, 0), "emptied: none and the default");
        let form = Form::parse(b"hook=&hook_headers=X-A%3A+1");
        assert_eq!(posted_target(&form, "hook", Some(&current)).unwrap(), None, "no URL: no webhook");
        let form = Form::parse(b"hook=http%3A%2F%2Fb.example%2F&hook_timeout_ms=soon");
        let e = posted_target(&form, "hook", None).unwrap_err();
        assert!(e.message().starts_with("hook.timeout_ms must be a whole number"), "{}", e.message());
    }

    #[test]
    fn limits_are_summarised() {
        assert_eq!(limits_summary(None), "the node's");
        let l = pb::ProjectLimits { max_connections: Some(10), rate_limit: Some(5), ..Default::default() };
        assert_eq!(limits_summary(Some(&l)), "10 connections, 5/s per connection");
    }
}
