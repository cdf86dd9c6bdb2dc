//! The durable delivery page: per load-balanced group on a logged topic (N26), its backlog
//! (messages pending, not acked), how many a member holds now, its oldest unacked message's
//! age, and the members connected to this node. Backlogs come from the store (every node sees
//! the same), a page of `dashboard_page_size` groups at a time; members are what this node
//! knows (its own connections).

use std::collections::HashMap;
use std::fmt::Write as _;

use axum::http::StatusCode;
use axum::response::Response;
use skua_core::{ConsumerBacklog, ConsumerId, ConsumerOf, GroupKey, ProjectId};

use super::html::{self, Notice, age, esc, q, table, time};
use super::{Authed, Dashboard};
use crate::pb;
use crate::service::{apps, projects};

/// One row of the table: the group's address, its backlog, the local members.
fn row(d: &Dashboard, c: &ConsumerBacklog, group: &GroupKey, app: &str, project: &str, now_ms: u64) -> Vec<String> {
    let oldest = c.oldest_timestamp_ms.map_or_else(
        || "none".to_owned(),
        |t| format!("{} <small>({} UTC)</small>", esc(&age(now_ms.saturating_sub(t) / 1000)), esc(&time(t))),
    );
    let mut members: Vec<String> = d
        .svc
        .sync
        .node()
        .local_group_members(group)
        .into_iter()
        .map(|(actor, client)| match client {
            Some(c) => format!("{} ({})", esc(actor.as_str()), esc(&c)),
            None => esc(actor.as_str()),
        })
        .collect();
    members.sort();
    let topic = format!("{app}/{}/{}", group.topic.room.room, group.topic.topic);
    vec![
        format!(
            "<a href=\"/admin/live?project={}&amp;topic={}\" aria-label=\"Watch {t}\">{t}</a>",
            q(project),
            q(&topic),
            t = esc(&topic)
        ),
        esc(&group.group),
        format!("<b>{}</b>", c.pending),
        c.held.to_string(),
        oldest,
        if members.is_empty() { "<span class=\"empty\">none here</span>".to_owned() } else { members.join(", ") },
        time(c.expires_at_unix_s.saturating_mul(1000)),
    ]
}

/// `GET /admin/durable?project=&after=`: a page of the project's durable groups.
pub(crate) async fn page(d: &Dashboard, a: Authed) -> Response {
    let mut list = projects::list(&d.svc, pb::ListProjectsRequest {}).await.map(|r| r.projects).unwrap_or_default();
    list.sort_by(|x, y| x.id.cmp(&y.id));
    let want = a.query.get("project");
    let project =
        if want.is_empty() { list.first().map(|p| p.id.clone()).unwrap_or_default() } else { want.to_owned() };
    let after = a.query.get("after");
    let mut body = super::common::chooser("/admin/durable", &list, &project, None, None);
    let node = d.svc.sync.node().node_id();
    let _ = write!(
        body,
        "<p>Load-balanced groups of persistent sessions on logged topics. <b>Backlog</b>: messages kept \
         for the group and not acked yet; <b>in flight</b>: of those, what a member holds now (delivered, \
         awaiting its ack). Backlogs are the store's (the same on every node); <b>members</b> are the \
         ones connected to this node (<code>{}</code>) only: a member on another node shows there.</p>",
        esc(&node)
    );
    let limit = u32::try_from(d.config.page_size).unwrap_or(u32::MAX);
    let found = match ProjectId::parse(&project) {
        _ if project.is_empty() => Ok(Vec::new()),
        Ok(p) => {
            d.svc.sync.node().durable_groups(&p, after, limit).await.map_err(|m| (StatusCode::SERVICE_UNAVAILABLE, m))
        }
        Err(e) => Err((StatusCode::BAD_REQUEST, e.to_string())),
    };
    let groups = match found {
        Ok(g) => g,
        Err((status, m)) => {
            let _ = write!(body, "<p class=\"notice error\" role=\"alert\">{}</p>", esc(&m));
            return html::respond(status, html::page("Durable delivery", "Durable", &a.csrf, None, &body));
        }
    };
    let slugs: HashMap<String, String> = apps::list(&d.svc, pb::ListAppsRequest { project_id: project.clone() })
        .await
        .map(|r| r.apps.into_iter().map(|x| (x.id, x.slug)).collect())
        .unwrap_or_default();
    let now = crate::sync::now_ms();
    let rows: Vec<Vec<String>> = groups
        .iter()
        .filter_map(|c| match ConsumerId::parse(&c.id).ok()?.of() {
            ConsumerOf::Group(g) => {
                let app = slugs.get(g.topic.room.app.as_str()).map_or(g.topic.room.app.as_str(), String::as_str);
                Some(row(d, c, g, app, &project, now))
            }
            ConsumerOf::Session { .. } => None,
        })
        .collect();
    let caption = if after.is_empty() { "Durable groups".to_owned() } else { "Durable groups (continued)".to_owned() };
    body.push_str(&table(
        &caption,
        &["Topic", "Group", "Backlog", "In flight", "Oldest unacked", "Members on this node", "Kept until (UTC)"],
        &rows,
        "No durable groups in this project.",
    ));
    let mut pager = Vec::new();
    if !after.is_empty() {
        pager.push(format!("<a href=\"/admin/durable?project={}\">First page</a>", q(&project)));
    }
    if let Some(last) = groups.last().filter(|_| groups.len() >= d.config.page_size) {
        pager.push(format!(
            "<a href=\"/admin/durable?project={}&amp;after={}\" rel=\"next\">Next {} groups</a>",
            q(&project),
            q(&last.id),
            d.config.page_size
        ));
    }
    if !pager.is_empty() {
        let _ = write!(body, "<nav aria-label=\"Pages\"><p>{}</p></nav>", pager.join(" · "));
    }
    html::respond(StatusCode::OK, html::page("Durable delivery", "Durable", &a.csrf, None::<Notice<'_>>, &body))
}
