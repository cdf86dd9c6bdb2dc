//! The overview page (the node's counters, its chart and the cluster's nodes), its JSON
//! samples, and the presence page.

use std::fmt::Write as _;

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::common::{chooser, current_app, current_project, done, status_of};
use super::html::{self, esc, table, time};
use super::{Authed, Dashboard};

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
            bus_up: at.map(|_| true),
            version: at.map(|_| "1.2.3".to_owned()),
        };
        let now = 1_700_000_100_000;
        let me = node_row(&seen("n1", true, Some(now - 2_500)), "n1", now);
        assert_eq!(me[..3], ["n1 <small>(this node)</small>", "up", "1.2.3"]);
        assert_eq!(me[3], "2s ago <small>(2023-11-14 22:14:57 UTC)</small>");
        let gone = node_row(&seen("n2", false, None), "n1", now);
        assert_eq!(gone, ["n2", "<strong>lapsed</strong>", "unknown", "unknown"]);
    }
}
