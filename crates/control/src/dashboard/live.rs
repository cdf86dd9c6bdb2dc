//! The live topic view: the node watches `app/room/topic` through its own bus subscription
//! (`NodeAdmin::watch_topic`), keeps the last `live_buffer` messages of each view in memory,
//! and the page polls them once a second. MessagePack data is shown as JSON; data that is not
//! one MessagePack value, and binary values, as size and hex. A test publish goes through the
//! server-side publish of the gRPC and REST APIs (the node's publish pipeline).

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use tokio_util::sync::CancellationToken;

use super::html::{self, Notice, csrf_input, esc, field, q};
use super::{Authed, Dashboard, lock, redirect};
use crate::pb;
use crate::service::publish as svc_publish;

/// Most bytes of binary data shown in hex.
const HEX_SHOWN: usize = 256;

/// One message as the page shows it.
#[derive(Debug, Clone, serde::Serialize)]
struct Row {
    seq: u64,
    time: String,
    from: String,
    filter: Option<String>,
    size: usize,
    text: String,
}

#[derive(Debug)]
struct Buffer {
    rows: VecDeque<Row>,
    seq: u64,
    last_poll: Instant,
}

/// One open live view.
#[derive(Debug)]
struct View {
    project: String,
    topic: String,
    buffer: Mutex<Buffer>,
    stop: CancellationToken,
}

/// The node's open live views, by id.
#[derive(Debug, Default)]
pub(crate) struct Views {
    map: Mutex<HashMap<u64, Arc<View>>>,
    next: AtomicU64,
}

impl Views {
    /// Closes the views nobody polled for `idle`.
    pub(crate) fn close_idle(&self, idle: Duration) {
        let now = Instant::now();
        lock(&self.map).retain(|_, v| {
            let keep = now.duration_since(lock(&v.buffer).last_poll) < idle;
            if !keep {
                v.stop.cancel();
            }
            keep
        });
    }

    fn get(&self, id: u64) -> Option<Arc<View>> {
        lock(&self.map).get(&id).cloned()
    }
}

/// `data` for people: one MessagePack value as JSON, else size and hex.
pub(crate) fn show(data: &[u8]) -> String {
    let mut rest = data;
    match rmpv::decode::read_value(&mut rest) {
        Ok(v) if rest.is_empty() => serde_json::to_string_pretty(&to_json(v)).unwrap_or_default(),
        _ => hex(data),
    }
}

fn hex(data: &[u8]) -> String {
    let mut s = format!("{} bytes: ", data.len());
    for b in data.iter().take(HEX_SHOWN) {
        let _ = write!(s, "{b:02x}");
    }
    if data.len() > HEX_SHOWN {
        s.push('…');
    }
    s
}

/// A MessagePack value as JSON; binary and extension values as size + hex strings.
fn to_json(v: rmpv::Value) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        rmpv::Value::Nil => J::Null,
        rmpv::Value::Boolean(b) => J::Bool(b),
        rmpv::Value::Integer(i) => i.as_u64().map(J::from).or_else(|| i.as_i64().map(J::from)).unwrap_or(J::Null),
        rmpv::Value::F32(f) => serde_json::Number::from_f64(f64::from(f)).map_or(J::Null, J::Number),
        rmpv::Value::F64(f) => serde_json::Number::from_f64(f).map_or(J::Null, J::Number),
        rmpv::Value::String(s) => match s.into_str() {
            Some(s) => J::String(s),
            None => J::String("(invalid UTF-8)".into()),
        },
        rmpv::Value::Binary(b) => J::String(format!("<binary {}>", hex(&b))),
        rmpv::Value::Array(a) => J::Array(a.into_iter().map(to_json).collect()),
        rmpv::Value::Map(m) => J::Object(
            m.into_iter()
                .map(|(k, v)| {
                    let key = match k {
                        rmpv::Value::String(s) => s.into_str().unwrap_or_default(),
                        other => other.to_string(),
                    };
                    (key, to_json(v))
                })
                .collect(),
        ),
        rmpv::Value::Ext(t, b) => J::String(format!("<ext {t}: {}>", hex(&b))),
    }
}

/// JSON as the MessagePack value a test publish sends.
fn to_msgpack(v: &serde_json::Value) -> rmpv::Value {
    use serde_json::Value as J;
    match v {
        J::Null => rmpv::Value::Nil,
        J::Bool(b) => rmpv::Value::Boolean(*b),
        J::Number(n) => n
            .as_u64()
            .map(rmpv::Value::from)
            .or_else(|| n.as_i64().map(rmpv::Value::from))
            .unwrap_or_else(|| rmpv::Value::F64(n.as_f64().unwrap_or(0.0))),
        J::String(s) => rmpv::Value::from(s.as_str()),
        J::Array(a) => rmpv::Value::Array(a.iter().map(to_msgpack).collect()),
        J::Object(o) => {
            rmpv::Value::Map(o.iter().map(|(k, v)| (rmpv::Value::from(k.as_str()), to_msgpack(v))).collect())
        }
    }
}

/// `GET /admin/live?project=&topic=&view=`: the watch form, the messages of `view`, the test
/// publish form.
pub(crate) async fn page(d: &Dashboard, a: Authed) -> Response {
    let notice = Some(a.query.get("done")).filter(|m| !m.is_empty()).map(Notice::Ok);
    render(d, &a, notice, StatusCode::OK).await
}

async fn render(d: &Dashboard, a: &Authed, notice: Option<Notice<'_>>, status: StatusCode) -> Response {
    let pick = |k: &str| if a.form.get(k).is_empty() { a.query.get(k) } else { a.form.get(k) };
    let view = pick("view").parse::<u64>().ok().and_then(|id| d.live.get(id).map(|v| (id, v)));
    let (project, topic) = match &view {
        Some((_, v)) => (v.project.clone(), v.topic.clone()),
        None => (pick("project").to_owned(), pick("topic").to_owned()),
    };
    let project = if project.is_empty() {
        let mut list = crate::service::projects::list(&d.svc, pb::ListProjectsRequest {})
            .await
            .map(|r| r.projects)
            .unwrap_or_default();
        list.sort_by(|x, y| x.id.cmp(&y.id));
        list.first().map(|p| p.id.clone()).unwrap_or_default()
    } else {
        project
    };
    let mut body = format!(
        "<h2>Watch a topic</h2><form method=\"post\" action=\"/admin/live\" class=\"create\">{}{}{}\
         <button type=\"submit\">Watch</button></form>",
        csrf_input(&a.csrf),
        field("project", "Project", &project, true, ""),
        field("topic", "Topic", &topic, true, "app/room/topic, e.g. demo/general/chat"),
    );
    if let Some((id, v)) = &view {
        let _ = write!(
            body,
            "<h2 id=\"h-live\">Messages on {topic}</h2><p>Error: <span id=\"live-status\">watching</span> \
             (newest first; the last {max} are kept)</p>\
             <p id=\"live-empty\" class=\"empty\">No messages yet: publish one below or from a client.</p>\
             <ol id=\"live-messages\" data-view=\"{id}\" data-after=\"0\" aria-live=\"polite\" aria-labelledby=\"h-live\" reversed></ol>",
            topic = esc(&v.topic),
            max = d.config.live_buffer,
        );
    }
    let _ = write!(
        body,
        "<h2>Publish a test message</h2><form method=\"post\" action=\"/admin/live/publish\" class=\"create\">{}\
         <input type=\"hidden\" name=\"view\" value=\"{}\">{}{}\
         <div class=\"field\"><label for=\"f-data\">Data (JSON, sent as MessagePack)</label>\
         <textarea id=\"f-data\" name=\"data\" required>{}</textarea></div>{}\
         <button type=\"submit\">Publish</button></form>",
        csrf_input(&a.csrf),
        view.as_ref().map(|(id, _)| id.to_string()).unwrap_or_default(),
        field("project", "Project", &project, true, ""),
        field("topic", "Topic", &topic, true, "app/room/topic"),
        esc(if a.form.raw("data").is_empty() {
            "{\"text\": \"hello from the dashboard\"}"
        } else {
            a.form.raw("data")
        }),
        field("filter", "Filter key", a.form.get("filter"), false, "optional"),
    );
    html::respond(status, html::page("Live topic", "Live topic", &a.csrf, notice, &body))
}

/// `POST /admin/live`: opens a view of the form's topic and shows it.
pub(crate) async fn watch(d: &Dashboard, a: Authed) -> Response {
    let (project, topic) = (a.form.get("project").to_owned(), a.form.get("topic").to_owned());
    let address = match svc_publish::address(&d.svc, &project, &topic).await {
        Ok(x) => x,
        Err(s) => {
            return render(d, &a, Some(Notice::Error(s.message())), crate::rest::error::http_status(s.code())).await;
        }
    };
    if lock(&d.live.map).len() >= d.config.max_live_views {
        let msg = format!(
            "{} live views are open on this node (dashboard_max_live_views); one closes {}s after its page is left",
            d.config.max_live_views,
            d.config.live_idle.as_secs()
        );
        return render(d, &a, Some(Notice::Error(&msg)), StatusCode::TOO_MANY_REQUESTS).await;
    }
    let mut rx = match d.svc.sync.node().watch_topic(&address, d.config.live_buffer).await {
        Ok(rx) => rx,
        Err(e) => return render(d, &a, Some(Notice::Error(&e)), StatusCode::SERVICE_UNAVAILABLE).await,
    };
    let id = d.live.next.fetch_add(1, Ordering::Relaxed) + 1;
    let view = Arc::new(View {
        project: project.clone(),
        topic: topic.clone(),
        buffer: Mutex::new(Buffer { rows: VecDeque::new(), seq: 0, last_poll: Instant::now() }),
        stop: CancellationToken::new(),
    });
    lock(&d.live.map).insert(id, view.clone());
    let max = d.config.live_buffer.max(1);
    tokio::spawn(async move {
        loop {
            let env = tokio::select! {
                () = view.stop.cancelled() => break,
                e = rx.next() => match e { Some(e) => e, None => break },
            };
            let skua_core::Envelope::Publication(p) = &*env else { continue };
            let mut b = lock(&view.buffer);
            b.seq += 1;
            let row = Row {
                seq: b.seq,
                time: html::time(p.timestamp_ms),
                from: p.publisher.to_string(),
                filter: p.filter.clone(),
                size: p.data.len(),
                text: show(&p.data),
            };
            b.rows.push_back(row);
            while b.rows.len() > max {
                b.rows.pop_front();
            }
        }
        // Dropping the receiver ends the node's watch and its bus subscription.
    });
    redirect(&format!("/admin/live?view={id}"))
}

/// `GET /admin/live/poll?view=&after=`: the view's messages after `after`, as JSON.
pub(crate) async fn poll(d: &Dashboard, a: Authed) -> Response {
    let after: u64 = a.query.get("after").parse().unwrap_or(0);
    let body = match a.query.get("view").parse::<u64>().ok().and_then(|id| d.live.get(id)) {
        None => serde_json::json!({"status": "closed: open the view again", "closed": true, "messages": []}),
        Some(v) => {
            let mut b = lock(&v.buffer);
            b.last_poll = Instant::now();
            let rows: Vec<&Row> = b.rows.iter().filter(|r| r.seq > after).collect();
            serde_json::json!({"status": "watching", "closed": false, "messages": rows})
        }
    };
    ([(header::CONTENT_TYPE, "application/json"), (header::CACHE_CONTROL, "no-store")], body.to_string())
        .into_response()
}

/// `POST /admin/live/publish`: the form's JSON as MessagePack through the server-side publish.
pub(crate) async fn publish(d: &Dashboard, a: Authed) -> Response {
    let json: serde_json::Value = match serde_json::from_str(a.form.raw("data")) {
        Ok(v) => v,
        Err(e) => {
            let msg = format!("data is not JSON: {e}");
            return render(d, &a, Some(Notice::Error(&msg)), StatusCode::BAD_REQUEST).await;
        }
    };
    let mut data = Vec::new();
    if let Err(e) = rmpv::encode::write_value(&mut data, &to_msgpack(&json)) {
        let msg = format!("data could not be encoded: {e}");
        return render(d, &a, Some(Notice::Error(&msg)), StatusCode::BAD_REQUEST).await;
    }
    let r = pb::PublishRequest {
        project_id: a.form.get("project").to_owned(),
        topic: a.form.get("topic").to_owned(),
        data,
        filter: a.form.get("filter").to_owned(),
        from_actor: String::new(),
        retain: false,
        idempotency_key: String::new(),
    };
    let project = match svc_publish::project_id(&d.svc, &r.project_id) {
        Ok(p) => p,
        Err(s) => {
            return render(d, &a, Some(Notice::Error(s.message())), crate::rest::error::http_status(s.code())).await;
        }
    };
    match svc_publish::publish_in(&d.svc, project, r).await {
        Ok(p) => {
            let view = a.form.get("view");
            let msg =
                if p.msg_id.is_empty() { "Published.".to_owned() } else { format!("Published (msgId {}).", p.msg_id) };
            let to = if view.is_empty() {
                format!("/admin/live?project={}&topic={}", q(a.form.get("project")), q(a.form.get("topic")))
            } else {
                format!("/admin/live?view={}", q(view))
            };
            redirect(&format!("{to}&done={}", q(&msg)))
        }
        Err(r) => render(d, &a, Some(Notice::Error(&r.to_string())), crate::rest::publish::http_status(&r)).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn msgpack_is_shown_as_json_and_other_bytes_as_hex() {
        let mut data = Vec::new();
        let v = rmpv::Value::Map(vec![(rmpv::Value::from("text"), rmpv::Value::from("hi"))]);
        rmpv::encode::write_value(&mut data, &v).unwrap();
        assert_eq!(show(&data), "{\n  \"text\": \"hi\"\n}");
        // A truncated map: not one value.
        assert_eq!(show(&[0x81, 0xa1]), "2 bytes: 81a1");
        let mut bin = Vec::new();
        rmpv::encode::write_value(&mut bin, &rmpv::Value::Binary(vec![1, 2, 255])).unwrap();
        assert_eq!(show(&bin), "\"<binary 3 bytes: 0102ff>\"");
    }

    #[test]
    fn json_round_trips_through_msgpack() {
        let j = serde_json::json!({"a": [1, -2, 2.5, true, null, "x"]});
        let mut data = Vec::new();
        rmpv::encode::write_value(&mut data, &to_msgpack(&j)).unwrap();
        let back: serde_json::Value = serde_json::from_str(&show(&data)).unwrap();
        assert_eq!(back, j);
    }
}
