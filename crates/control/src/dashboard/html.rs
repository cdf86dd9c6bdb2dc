//! HTML building blocks: escaping, the page layout with its navigation, forms with the CSRF
//! field, notices, and the embedded stylesheet and script (no build step, no CDN).

use std::fmt::Write as _;

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

/// `s` escaped for HTML text and double-quoted attribute values.
pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `s` escaped for a URL query value.
pub(crate) fn q(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// A message shown above a page's content.
pub(crate) enum Notice<'a> {
    /// Something done.
    Ok(&'a str),
    /// A refusal, with the API's message.
    Error(&'a str),
}

/// A full page: layout, navigation (the current entry marked), `notice`, then `body`.
pub(crate) fn page(title: &str, current: &str, csrf: &str, notice: Option<Notice<'_>>, body: &str) -> String {
    let mut nav = String::new();
    for (href, label) in [
        ("/admin", "Overview"),
        ("/admin/projects", "Projects"),
        ("/admin/apps", "Apps"),
        ("/admin/rooms", "Rooms"),
        ("/admin/actors", "Actors"),
        ("/admin/connections", "Connections"),
        ("/admin/grants", "Grants"),
        ("/admin/lobbies", "Lobbies"),
        ("/admin/scopes", "Scopes"),
        ("/admin/api-keys", "API keys"),
        ("/admin/live", "Live topic"),
        ("/admin/webhooks", "Webhooks"),
        ("/admin/durable", "Durable"),
    ] {
        let cur = if label == current { " aria-current=\"page\"" } else { "" };
        let _ = write!(nav, "<li><a href=\"{href}\"{cur}>{label}</a></li>");
    }
    let notice = match notice {
        None => String::new(),
        Some(Notice::Ok(m)) => format!("<p class=\"notice ok\" role=\"status\">{}</p>", esc(m)),
        Some(Notice::Error(m)) => format!("<p class=\"notice error\" role=\"alert\" id=\"error\">{}</p>", esc(m)),
    };
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title} · Skua admin</title><link rel=\"stylesheet\" href=\"/admin/assets/app.css\">\
         <script src=\"/admin/assets/app.js\" defer></script></head><body>\
         <a class=\"skip\" href=\"#main\">Skip to content</a>\
         <header><span class=\"brand\">Skua admin</span><nav aria-label=\"Main\"><ul>{nav}</ul></nav>\
         <form method=\"post\" action=\"/admin/logout\" class=\"logout\">{csrf_field}\
         <button type=\"submit\">Sign out</button></form></header>\
         <main id=\"main\"><h1>{title}</h1>{notice}{body}</main></body></html>",
        title = esc(title),
        csrf_field = csrf_input(csrf),
    )
}

/// The hidden CSRF field every form carries.
pub(crate) fn csrf_input(csrf: &str) -> String {
    format!("<input type=\"hidden\" name=\"csrf\" value=\"{}\">", esc(csrf))
}

/// One labelled text input (`required` when `req`).
pub(crate) fn field(name: &str, label: &str, value: &str, req: bool, hint: &str) -> String {
    let id = format!("f-{name}");
    let required = if req { " required" } else { "" };
    let hint = if hint.is_empty() { String::new() } else { format!("<small id=\"{id}-hint\">{}</small>", esc(hint)) };
    let described = if hint.is_empty() { String::new() } else { format!(" aria-describedby=\"{id}-hint\"") };
    format!(
        "<div class=\"field\"><label for=\"{id}\">{}</label><input id=\"{id}\" name=\"{name}\" value=\"{}\"{required}{described}>{hint}</div>",
        esc(label),
        esc(value)
    )
}

/// One labelled text area (several lines, e.g. one header per line).
pub(crate) fn textarea(name: &str, label: &str, value: &str, hint: &str) -> String {
    let id = format!("f-{name}");
    format!(
        "<div class=\"field\"><label for=\"{id}\">{}</label><textarea id=\"{id}\" name=\"{name}\" rows=\"3\" \
         aria-describedby=\"{id}-hint\">{}</textarea><small id=\"{id}-hint\">{}</small></div>",
        esc(label),
        esc(value),
        esc(hint)
    )
}

/// One labelled checkbox sending `1` when checked.
pub(crate) fn checkbox(name: &str, label: &str, checked: bool) -> String {
    format!(
        "<div class=\"field\"><label><input type=\"checkbox\" id=\"f-{name}\" name=\"{name}\" value=\"1\"{}> {}</label></div>",
        if checked { " checked" } else { "" },
        esc(label)
    )
}

/// A small form posting `hidden` fields to `action` behind one button (deletes, retries).
pub(crate) fn button_form(action: &str, csrf: &str, hidden: &[(&str, &str)], label: &str, confirm: bool) -> String {
    let mut f = format!("<form method=\"post\" action=\"{}\" class=\"inline\"", esc(action));
    if confirm {
        f.push_str(" data-confirm=\"Delete? This cannot be undone.\"");
    }
    f.push('>');
    f.push_str(&csrf_input(csrf));
    for (k, v) in hidden {
        let _ = write!(f, "<input type=\"hidden\" name=\"{}\" value=\"{}\">", esc(k), esc(v));
    }
    let _ = write!(f, "<button type=\"submit\">{}</button></form>", esc(label));
    f
}

/// An HTML response.
pub(crate) fn respond(status: StatusCode, body: String) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
            (header::HeaderName::from_static("x-frame-options"), "DENY"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'self'",
            ),
        ],
        body,
    )
        .into_response()
}

/// The sign-in page, with `error` when the last attempt failed.
pub(crate) fn login(error: Option<&str>, status: StatusCode) -> Response {
    let error = error.map_or(String::new(), |e| format!("<p class=\"notice error\" role=\"alert\">{}</p>", esc(e)));
    respond(
        status,
        format!(
            "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
             <title>Sign in · Skua admin</title><link rel=\"stylesheet\" href=\"/admin/assets/app.css\"></head>\
             <body class=\"login\"><main id=\"main\"><h1>Skua admin</h1>{error}\
             <form method=\"post\" action=\"/admin/login\"><div class=\"field\"><label for=\"admin_key\">Admin key</label>\
             <input id=\"admin_key\" name=\"admin_key\" type=\"password\" autocomplete=\"current-password\" required autofocus>\
             </div><button type=\"submit\">Sign in</button></form>\
             <p><small>The node's <code>admin_key</code> (with <code>skua serve --dev</code>: printed in its banner).</small></p>\
             </main></body></html>"
        ),
    )
}

/// An embedded asset.
pub(crate) fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type), (header::CACHE_CONTROL, "max-age=300")], body).into_response()
}

/// A table with `head` columns and `rows` (each cell already HTML), or `empty` when none.
pub(crate) fn table(caption: &str, head: &[&str], rows: &[Vec<String>], empty: &str) -> String {
    if rows.is_empty() {
        return format!("<p class=\"empty\">{}</p>", esc(empty));
    }
    let mut t = format!("<div class=\"scroll\"><table><caption>{}</caption><thead><tr>", esc(caption));
    for h in head {
        let _ = write!(t, "<th scope=\"col\">{}</th>", esc(h));
    }
    t.push_str("</tr></thead><tbody>");
    for r in rows {
        t.push_str("<tr>");
        for c in r {
            let _ = write!(t, "<td>{c}</td>");
        }
        t.push_str("</tr>");
    }
    t.push_str("</tbody></table></div>");
    t
}

/// `secs` as `1d 2h`, `3h 4m`, `5m 6s` or `7s`.
pub(crate) fn age(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) => format!("{m}m {s}s"),
        (0, _, _) => format!("{h}h {m}m"),
        _ => format!("{d}d {h}h"),
    }
}

/// Unix ms as `YYYY-MM-DD HH:MM:SS` UTC.
pub(crate) fn time(ms: u64) -> String {
    let Ok(t) = time::OffsetDateTime::from_unix_timestamp(i64::try_from(ms / 1000).unwrap_or(0)) else {
        return ms.to_string();
    };
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

/// The stylesheet: readable at 1280 px and on a phone (tables scroll, navigation wraps).
pub(crate) const CSS: &str = r#"
:root { --fg:#1b1f24; --muted:#57606a; --bg:#fff; --line:#d0d7de; --accent:#0b5cad; --err:#a40e26; --ok:#116329; }
* { box-sizing: border-box; }
body { margin:0; font:16px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color:var(--fg); background:var(--bg); }
.skip { position:absolute; left:-999px; } .skip:focus { left:8px; top:8px; background:#fff; padding:4px; z-index:2; }
header { display:flex; flex-wrap:wrap; align-items:center; gap:8px 16px; padding:8px 16px; border-bottom:1px solid var(--line); background:#f6f8fa; }
.brand { font-weight:700; }
nav ul { display:flex; flex-wrap:wrap; gap:4px 12px; list-style:none; margin:0; padding:0; }
nav a { color:var(--accent); text-decoration:none; padding:4px 2px; }
nav a[aria-current] { font-weight:700; border-bottom:2px solid var(--accent); }
a:focus, button:focus, input:focus, select:focus, textarea:focus { outline:3px solid #ffbf47; outline-offset:1px; }
.logout { margin-left:auto; }
main { padding:16px; max-width:1200px; }
h1 { font-size:1.5rem; margin:8px 0 16px; } h2 { font-size:1.2rem; margin:24px 0 8px; }
.notice { padding:8px 12px; border-radius:4px; } .ok { background:#dafbe1; color:var(--ok); } .error { background:#ffebe9; color:var(--err); }
.cards { display:grid; grid-template-columns:repeat(auto-fit, minmax(160px, 1fr)); gap:12px; }
.card { border:1px solid var(--line); border-radius:6px; padding:12px; } .card b { display:block; font-size:1.4rem; overflow-wrap:anywhere; }
.scroll { overflow-x:auto; } table { border-collapse:collapse; width:100%; } caption { text-align:left; color:var(--muted); padding:4px 0; }
th, td { text-align:left; padding:6px 8px; border-bottom:1px solid var(--line); vertical-align:top; }
td code, pre { white-space:pre-wrap; word-break:break-all; }
form.create { display:grid; grid-template-columns:repeat(auto-fit, minmax(200px, 1fr)); gap:8px 12px; align-items:end; border:1px solid var(--line); border-radius:6px; padding:12px; margin:8px 0 16px; }
form.inline { display:inline; }
form.search { display:flex; flex-wrap:wrap; gap:8px 12px; align-items:end; margin:16px 0 8px; }
fieldset.webhook { grid-column:1 / -1; display:grid; grid-template-columns:repeat(auto-fit, minmax(200px, 1fr)); gap:8px 12px; border:1px solid var(--line); border-radius:6px; margin:0; min-width:0; }
fieldset.webhook legend { color:var(--muted); padding:0 4px; }
.field { display:flex; flex-direction:column; gap:2px; } .field small { color:var(--muted); }
input, select, textarea { font:inherit; padding:6px 8px; border:1px solid #8c959f; border-radius:4px; min-width:0; }
textarea { width:100%; min-height:5em; font-family:ui-monospace, monospace; }
button { font:inherit; padding:6px 12px; border:1px solid var(--accent); background:var(--accent); color:#fff; border-radius:4px; cursor:pointer; }
form.inline button, .logout button { background:#fff; color:var(--accent); }
svg.chart { width:100%; height:180px; border:1px solid var(--line); border-radius:6px; background:#fcfcfd; }
.legend span { margin-right:16px; } .in { color:#0b5cad; } .out { color:#bc4c00; } .conns { color:#116329; }
.empty { color:var(--muted); }
body.login main { max-width:420px; margin:10vh auto; } body.login form { display:grid; gap:12px; }
@media (max-width:600px) { main { padding:8px; } th, td { padding:4px; } header { padding:8px; } }
"#;

/// The script: confirmation of deletes, the overview's refresh, the live view's polling, the
/// presence table's refresh.
/// Plain JavaScript, no framework.
pub(crate) const JS: &str = r#"
"use strict";
document.addEventListener("submit", function (e) {
  var msg = e.target.getAttribute("data-confirm");
  if (msg && !window.confirm(msg)) { e.preventDefault(); }
});
function chartPoints(samples, key, max, w, h) {
  if (samples.length < 2) { return ""; }
  var t0 = samples[0].t, t1 = samples[samples.length - 1].t, span = Math.max(1, t1 - t0);
  return samples.map(function (s) {
    return ((s.t - t0) / span * w).toFixed(1) + "," + (h - (s[key] / max) * (h - 10) - 5).toFixed(1);
  }).join(" ");
}
function refreshStats() {
  var el = document.getElementById("stats");
  if (!el) { return; }
  fetch("/admin/stats", { credentials: "same-origin" }).then(function (r) {
    if (r.status !== 200) { throw new Error("status " + r.status); }
    return r.json();
  }).then(function (s) {
    ["uptime", "connections", "in_per_s", "out_per_s", "messages_in", "messages_out", "outbound_frames",
     "outbound_bytes", "bus_queued", "triggers_queued", "trigger_overflow"].forEach(function (k) {
      var c = document.getElementById("v-" + k);
      if (c) { c.textContent = s[k]; }
    });
    var max = 1;
    s.samples.forEach(function (x) { max = Math.max(max, x.in_per_s, x.out_per_s, x.connections); });
    [["p-in", "in_per_s"], ["p-out", "out_per_s"], ["p-conns", "connections"]].forEach(function (p) {
      var line = document.getElementById(p[0]);
      if (line) { line.setAttribute("points", chartPoints(s.samples, p[1], max, 600, 180)); }
    });
    var m = document.getElementById("chart-max");
    if (m) { m.textContent = max.toFixed(1); }
  }).catch(function () {}).then(function () { setTimeout(refreshStats, 5000); });
}
function pollLive() {
  var list = document.getElementById("live-messages");
  if (!list) { return; }
  var view = list.getAttribute("data-view");
  var after = list.getAttribute("data-after") || "0";
  fetch("/admin/live/poll?view=" + encodeURIComponent(view) + "&after=" + after, { credentials: "same-origin" })
    .then(function (r) {
      if (r.status !== 200) { throw new Error("status " + r.status); }
      return r.json();
    }).then(function (b) {
      var status = document.getElementById("live-status");
      if (status) { status.textContent = b.status; }
      b.messages.forEach(function (m) {
        var li = document.createElement("li");
        li.className = "msg";
        var head = document.createElement("div");
        head.textContent = m.time + " from " + m.from + (m.filter ? " (filter " + m.filter + ")" : "") + " · " + m.size + " bytes";
        var body = document.createElement("pre");
        body.textContent = m.text;
        li.appendChild(head); li.appendChild(body);
        list.insertBefore(li, list.firstChild);
        list.setAttribute("data-after", String(m.seq));
      });
      var empty = document.getElementById("live-empty");
      if (empty && list.firstChild) { empty.hidden = true; }
      if (!b.closed) { setTimeout(pollLive, 1000); }
    }).catch(function () { setTimeout(pollLive, 3000); });
}
function refreshSection() {
  var el = document.querySelector("section[data-refresh]");
  if (!el) { return; }
  setTimeout(function () {
    fetch(location.href, { credentials: "same-origin" }).then(function (r) { return r.text(); }).then(function (t) {
      var fresh = new DOMParser().parseFromString(t, "text/html").getElementById(el.id);
      if (fresh) { el.innerHTML = fresh.innerHTML; }
    }).catch(function () {}).then(refreshSection);
  }, 1000 * Number(el.getAttribute("data-refresh")));
}
document.addEventListener("DOMContentLoaded", function () { refreshStats(); pollLive(); refreshSection(); });
"#;

#[cfg(test)]
mod tests {
    use super::age;

    #[test]
    fn ages_read_at_a_glance() {
        assert_eq!(age(0), "0s");
        assert_eq!(age(59), "59s");
        assert_eq!(age(61), "1m 1s");
        assert_eq!(age(3 * 3600 + 120), "3h 2m");
        assert_eq!(age(2 * 86_400 + 3600), "2d 1h");
    }
}
