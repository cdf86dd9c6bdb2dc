//! The project API keys: their list, the create form (the secret shown once) and deletion.
//! Each create, edit or delete calls the service function the gRPC and REST APIs call, and
//! shows its error message when it refuses.

use std::fmt::Write as _;

use axum::http::StatusCode;
use axum::response::Response;

use super::common::{chooser, current_project, done, done_redirect, refused};
use super::html::{self, Notice, button_form, csrf_input, esc, field, q, time};
use super::search::Search;
use super::{Authed, Dashboard};
use crate::pb;
use crate::service::api_keys;

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
        Err(s) => refused(api_keys_page(d, &a, Some(Notice::Error(s.message()))).await, &s),
    }
}

/// `POST /admin/api-keys/delete`.
pub(crate) async fn delete_api_key(d: &Dashboard, a: Authed) -> Response {
    let (project, key) = (a.form.get("project").to_owned(), a.form.get("key").to_owned());
    match api_keys::revoke(&d.svc, pb::RevokeApiKeyRequest { project_id: project.clone(), key_id: key.clone() }).await {
        Ok(_) => done_redirect(&format!("/admin/api-keys?project={}", q(&project)), &format!("API key {key} revoked.")),
        Err(s) => refused(api_keys_page(d, &a, Some(Notice::Error(s.message()))).await, &s),
    }
}
