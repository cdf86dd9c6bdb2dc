//! The connections page: a project's open connections, devices included, each with how it came
//! (`ws`, `mqtt`, `mqtt-ws`).

use std::fmt::Write as _;

use axum::http::StatusCode;
use axum::response::Response;

use super::common::{chooser, current_project, status_of};
use super::html::{self, esc, table, time};
use super::{Authed, Dashboard};
use crate::pb;
use crate::service::connections;

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
