//! The webhooks page: dead letters with their retry, and the node's recent deliveries.
//! Each create, edit or delete calls the service function the gRPC and REST APIs call, and
//! shows its error message when it refuses.

use std::fmt::Write as _;

use axum::http::StatusCode;
use axum::response::Response;

use super::common::{chooser, current_project, done, done_redirect, status_of};
use super::html::{self, Notice, button_form, esc, q, table, time};
use super::{Authed, Dashboard, redirect};
use crate::pb;
use crate::service::webhooks;

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
