//! What `skua admin` prints: human-readable lines, or JSON documents with `--json` (the field
//! names of the proto messages, snake_case).

use serde_json::{Value, json};
use skua_control::pb;

/// The chosen output form.
pub(super) struct Out {
    pub(super) json: bool,
}

fn limits(l: Option<&pb::ProjectLimits>) -> Value {
    let l = l.copied().unwrap_or_default();
    json!({
        "max_connections": l.max_connections,
        "monthly_message_quota": l.monthly_message_quota,
        "rate_limit": l.rate_limit,
        "max_message_size": l.max_message_size,
    })
}

fn project(p: &pb::Project) -> Value {
    let mut v = json!({
        "id": p.id, "name": p.name, "has_jwt_secret": p.has_jwt_secret, "limits": limits(p.limits.as_ref()),
        "created_at_ms": p.created_at_ms, "messages_this_month": p.messages_this_month,
        "has_wake_secret": p.has_wake_secret,
    });
    if !p.wake_secret.is_empty() {
        v["wake_secret"] = json!(p.wake_secret);
    }
    v
}

fn target(w: Option<&pb::WebhookTarget>) -> Value {
    w.map_or(Value::Null, |w| {
        let headers: std::collections::BTreeMap<&String, &String> = w.headers.iter().collect();
        json!({"url": w.url, "headers": headers, "timeout_ms": w.timeout_ms})
    })
}

fn app(a: &pb::App) -> Value {
    let topics: Vec<Value> = a
        .topics
        .iter()
        .map(|t| {
            let hooks = t.webhooks.as_ref();
            json!({
                "name": t.name, "logged": t.logged,
                "webhook": t.webhook.as_ref().map(|w| json!({"url": w.url, "events": w.events})),
                "webhooks": hooks.map(|h| json!({
                    "on_subscribe": target(h.on_subscribe.as_ref()), "on_publish": target(h.on_publish.as_ref()),
                })),
                "history": t.history.map(|h| json!({"size": h.size, "ttl_ms": h.ttl_ms})),
            })
        })
        .collect();
    let mut v = json!({
        "id": a.id, "project_id": a.project_id, "slug": a.slug, "name": a.name, "topics": topics,
        "auto_provision_rooms": a.auto_provision_rooms, "max_rooms": a.max_rooms, "room_count": a.room_count,
        "created_at_ms": a.created_at_ms, "hydration_webhook": target(a.hydration_webhook.as_ref()),
        "trigger_webhook": target(a.trigger_webhook.as_ref()), "has_webhook_secret": a.has_webhook_secret,
    });
    if !a.webhook_secret.is_empty() {
        v["webhook_secret"] = json!(a.webhook_secret);
    }
    v
}

fn room(r: &pb::Room) -> Value {
    json!({
        "project_id": r.project_id, "app_id": r.app_id, "app_slug": r.app_slug, "slug": r.slug, "name": r.name,
        "dynamic": r.dynamic, "private": r.private, "created_at_ms": r.created_at_ms,
    })
}

fn actor(a: &pb::Actor) -> Value {
    json!({
        "id": a.id, "project_id": a.project_id, "actor_type": a.actor_type, "name": a.name, "active": a.active,
        "rate_limit": a.rate_limit, "token_key_ids": a.token_key_ids, "created_at_ms": a.created_at_ms,
        "scope_id": a.scope_id,
    })
}

fn grant(g: &pb::Grant) -> Value {
    json!({
        "id": g.id, "project_id": g.project_id, "app_id": g.app_id, "room": g.room, "actor_id": g.actor_id,
        "actor_type": g.actor_type, "permission": g.permission, "topics": g.topics, "expires_at": g.expires_at,
        "created_at_ms": g.created_at_ms,
    })
}

fn lobby(l: &pb::Lobby) -> Value {
    json!({
        "project_id": l.project_id, "slug": l.slug, "app_id": l.app_id, "rooms": l.rooms,
        "allowed_actors": l.allowed_actors, "allowed_actor_types": l.allowed_actor_types,
    })
}

fn connection(c: &pb::Connection) -> Value {
    json!({
        "node_id": c.node_id, "connection_id": c.connection_id, "actor_id": c.actor_id, "client_id": c.client_id,
        "connected_at_ms": c.connected_at_ms, "subscriptions": c.subscriptions, "protocol": c.protocol,
    })
}

fn webhook_failure(f: &pb::WebhookFailure) -> Value {
    json!({
        "id": f.id,
        "delivery_id": f.delivery_id,
        "project_id": f.project_id,
        "kind": f.kind,
        "topic": f.topic,
        "target": f.target,
        "last_error": f.last_error,
        "attempts": f.attempts,
        "failed_at_ms": f.failed_at_ms,
        "body": String::from_utf8_lossy(&f.body),
    })
}

fn or_dash(s: &str) -> &str {
    if s.is_empty() { "-" } else { s }
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "default".to_owned(), |v| v.to_string())
}

/// Pads columns of `rows` (the first is the header) to a table.
pub(super) fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> =
        (0..cols).map(|i| rows.iter().map(|r| r.get(i).map_or(0, |c| c.chars().count())).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for r in rows {
        let line: Vec<String> = r.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out.trim_end().to_owned()
}

impl Out {
    pub(super) fn emit(&self, value: Value, human: impl FnOnce() -> String) -> String {
        if self.json { value.to_string() } else { human() }
    }

    pub(super) fn project(&self, p: &pb::Project) -> String {
        self.emit(project(p), || {
            let l = p.limits.unwrap_or_default();
            let mut s = format!(
                "project {} ({})\n  jwt secret: {}\n  max connections: {}\n  monthly quota: {}\n  rate limit: {}\n  max message size: {}\n  messages this month: {}\n  wake secret: {}",
                p.id,
                p.name,
                if p.has_jwt_secret { "set" } else { "none" },
                opt(l.max_connections),
                opt(l.monthly_message_quota),
                opt(l.rate_limit),
                opt(l.max_message_size),
                p.messages_this_month,
                if p.has_wake_secret { "set" } else { "none" },
            );
            if !p.wake_secret.is_empty() {
                s.push_str(&format!("\nwake secret (shown once, store it now):\n{}", p.wake_secret));
            }
            s
        })
    }

    pub(super) fn projects(&self, ps: &[pb::Project]) -> String {
        self.emit(Value::Array(ps.iter().map(project).collect()), || {
            let mut rows = vec![vec!["ID".into(), "NAME".into(), "MESSAGES THIS MONTH".into()]];
            rows.extend(ps.iter().map(|p| vec![p.id.clone(), p.name.clone(), p.messages_this_month.to_string()]));
            table(&rows)
        })
    }

    pub(super) fn app(&self, a: &pb::App) -> String {
        self.emit(app(a), || {
            let topics: Vec<String> = a
                .topics
                .iter()
                .map(|t| {
                    let mut s = t.name.clone();
                    if t.logged {
                        s.push_str(" (logged)");
                    }
                    if let Some(h) = t.history {
                        s.push_str(&format!(" (history {} / {} ms)", h.size, h.ttl_ms));
                    }
                    s
                })
                .collect();
            let url = |w: Option<&pb::WebhookTarget>| w.map_or_else(|| "-".to_owned(), |w| w.url.clone());
            let mut s = format!(
                "app {} (id {}, project {})\n  topics: {}\n  auto-provision rooms: {}\n  rooms: {}{}\n  hydration webhook: {}\n  trigger webhook: {}\n  webhook secret: {}",
                a.slug,
                a.id,
                a.project_id,
                if topics.is_empty() { "-".into() } else { topics.join(", ") },
                if a.auto_provision_rooms { "yes" } else { "no" },
                a.room_count,
                if a.max_rooms > 0 { format!(" (cap {})", a.max_rooms) } else { String::new() },
                url(a.hydration_webhook.as_ref()),
                url(a.trigger_webhook.as_ref()),
                if a.has_webhook_secret { "set" } else { "none" },
            );
            for t in &a.topics {
                if let Some(h) = &t.webhooks {
                    s.push_str(&format!(
                        "\n  topic {}: on subscribe {}, on publish {}",
                        t.name,
                        url(h.on_subscribe.as_ref()),
                        url(h.on_publish.as_ref())
                    ));
                }
            }
            if !a.webhook_secret.is_empty() {
                s.push_str(&format!("\nwebhook secret (shown once, store it now):\n{}", a.webhook_secret));
            }
            s
        })
    }

    pub(super) fn apps(&self, apps: &[pb::App]) -> String {
        self.emit(Value::Array(apps.iter().map(app).collect()), || {
            let mut rows = vec![vec!["SLUG".into(), "ID".into(), "TOPICS".into(), "ROOMS".into()]];
            rows.extend(apps.iter().map(|a| {
                vec![
                    a.slug.clone(),
                    a.id.clone(),
                    a.topics.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(","),
                    a.room_count.to_string(),
                ]
            }));
            table(&rows)
        })
    }

    pub(super) fn room(&self, r: &pb::Room) -> String {
        self.emit(room(r), || {
            format!(
                "room {}/{} ({}, {})",
                r.app_slug,
                r.slug,
                if r.dynamic { "dynamic" } else { "static" },
                if r.private { "private" } else { "public" }
            )
        })
    }

    pub(super) fn ensured(&self, e: &pb::EnsureRoomResponse) -> String {
        let r = e.room.clone().unwrap_or_default();
        self.emit(json!({"room": room(&r), "created": e.created}), || {
            format!("{} room {}/{}", if e.created { "created" } else { "existing" }, r.app_slug, r.slug)
        })
    }

    pub(super) fn rooms(&self, l: &pb::ListRoomsResponse) -> String {
        self.emit(
            json!({"rooms": l.rooms.iter().map(room).collect::<Vec<_>>(), "next_page_token": l.next_page_token}),
            || {
                let mut rows = vec![vec!["SLUG".into(), "KIND".into(), "ACCESS".into(), "NAME".into()]];
                rows.extend(l.rooms.iter().map(|r| {
                    vec![
                        r.slug.clone(),
                        (if r.dynamic { "dynamic" } else { "static" }).into(),
                        (if r.private { "private" } else { "public" }).into(),
                        r.name.clone(),
                    ]
                }));
                let mut s = table(&rows);
                if !l.next_page_token.is_empty() {
                    s.push_str(&format!("\nmore: --page-token {}", l.next_page_token));
                }
                s
            },
        )
    }

    pub(super) fn actor(&self, a: &pb::Actor) -> String {
        self.emit(actor(a), || {
            format!(
                "actor {} ({}, project {}){}{}\n  tokens: {}",
                a.id,
                a.actor_type,
                a.project_id,
                if a.scope_id.is_empty() { String::new() } else { format!(", scope {}", a.scope_id) },
                if a.active { "" } else { " DEACTIVATED" },
                if a.token_key_ids.is_empty() { "-".into() } else { a.token_key_ids.join(", ") }
            )
        })
    }

    pub(super) fn created_actor(&self, r: &pb::CreateActorResponse) -> String {
        let a = r.actor.clone().unwrap_or_default();
        self.emit(json!({"actor": actor(&a), "access_token": r.access_token, "token_key_id": r.token_key_id}), || {
            format!(
                "actor {} ({}, project {})\naccess token (shown once, store it now):\n{}",
                a.id, a.actor_type, a.project_id, r.access_token
            )
        })
    }

    pub(super) fn actors(&self, l: &pb::ListActorsResponse) -> String {
        self.emit(
            json!({"actors": l.actors.iter().map(actor).collect::<Vec<_>>(), "next_page_token": l.next_page_token}),
            || {
                let mut rows = vec![vec!["ID".into(), "TYPE".into(), "ACTIVE".into(), "TOKENS".into()]];
                rows.extend(l.actors.iter().map(|a| {
                    vec![
                        a.id.clone(),
                        a.actor_type.clone(),
                        (if a.active { "yes" } else { "no" }).into(),
                        a.token_key_ids.len().to_string(),
                    ]
                }));
                let mut s = table(&rows);
                if !l.next_page_token.is_empty() {
                    s.push_str(&format!("\nmore: --page-token {}", l.next_page_token));
                }
                s
            },
        )
    }

    pub(super) fn grant(&self, g: &pb::Grant) -> String {
        self.emit(grant(g), || {
            let who =
                if g.actor_id.is_empty() { format!("type {}", g.actor_type) } else { format!("actor {}", g.actor_id) };
            format!("grant {}: {who} may {} in room {}", g.id, g.permission, g.room)
        })
    }

    pub(super) fn grants(&self, gs: &[pb::Grant]) -> String {
        self.emit(Value::Array(gs.iter().map(grant).collect()), || {
            let mut rows = vec![vec!["ID".into(), "ACTOR".into(), "TYPE".into(), "PERMISSION".into(), "TOPICS".into()]];
            rows.extend(gs.iter().map(|g| {
                vec![
                    g.id.clone(),
                    or_dash(&g.actor_id).into(),
                    or_dash(&g.actor_type).into(),
                    g.permission.clone(),
                    if g.topics.is_empty() { "all".into() } else { g.topics.join(",") },
                ]
            }));
            table(&rows)
        })
    }

    pub(super) fn lobby(&self, l: &pb::Lobby) -> String {
        self.emit(lobby(l), || format!("lobby {} (app {}): rooms {}", l.slug, l.app_id, l.rooms.join(", ")))
    }

    pub(super) fn lobbies(&self, ls: &[pb::Lobby]) -> String {
        self.emit(Value::Array(ls.iter().map(lobby).collect()), || {
            let mut rows = vec![vec!["SLUG".into(), "APP".into(), "ROOMS".into()]];
            rows.extend(ls.iter().map(|l| vec![l.slug.clone(), l.app_id.clone(), l.rooms.join(",")]));
            table(&rows)
        })
    }

    pub(super) fn deleted(&self, d: &pb::DeleteResponse) -> String {
        self.emit(json!({"deleted": d.deleted}), || format!("deleted ({} objects)", d.deleted))
    }

    pub(super) fn disconnected(&self, d: &pb::DisconnectActorResponse) -> String {
        self.emit(json!({"closed_on_this_node": d.closed_on_this_node}), || {
            format!(
                "disconnected: {} connections closed on this node; other nodes follow within 1s",
                d.closed_on_this_node
            )
        })
    }

    pub(super) fn published(&self, p: &pb::PublishResponse) -> String {
        if p.duplicate {
            return self.emit(json!({"timestamp_ms": p.timestamp_ms, "duplicate": true}), || {
                format!("duplicate of the publish at {} (not published again)", p.timestamp_ms)
            });
        }
        self.emit(json!({"timestamp_ms": p.timestamp_ms}), || format!("published at {}", p.timestamp_ms))
    }

    pub(super) fn webhook_failures(&self, fs: &[pb::WebhookFailure]) -> String {
        self.emit(Value::Array(fs.iter().map(webhook_failure).collect()), || {
            let mut rows = vec![vec![
                "ID".into(),
                "DELIVERY".into(),
                "KIND".into(),
                "TOPIC".into(),
                "ATTEMPTS".into(),
                "FAILED_AT_MS".into(),
                "LAST_ERROR".into(),
            ]];
            rows.extend(fs.iter().map(|f| {
                vec![
                    f.id.to_string(),
                    f.delivery_id.clone(),
                    f.kind.clone(),
                    f.topic.clone(),
                    f.attempts.to_string(),
                    f.failed_at_ms.to_string(),
                    f.last_error.clone(),
                ]
            }));
            table(&rows)
        })
    }

    pub(super) fn webhook_retries(&self, rs: &[pb::WebhookRetry]) -> String {
        let value = Value::Array(
            rs.iter()
                .map(|r| json!({"delivery_id": r.delivery_id, "delivered": r.delivered, "error": r.error}))
                .collect(),
        );
        self.emit(value, || {
            let mut rows = vec![vec!["DELIVERY".into(), "RESULT".into()]];
            rows.extend(rs.iter().map(|r| {
                let result = if r.delivered { "delivered".to_owned() } else { format!("failed: {}", r.error) };
                vec![r.delivery_id.clone(), result]
            }));
            table(&rows)
        })
    }

    pub(super) fn webhook_purged(&self, p: &pb::PurgeWebhookFailuresResponse) -> String {
        self.emit(json!({"purged": p.purged}), || format!("purged {} webhook failures", p.purged))
    }

    pub(super) fn connections(&self, cs: &[pb::Connection]) -> String {
        self.emit(Value::Array(cs.iter().map(connection).collect()), || {
            let mut rows = vec![vec![
                "NODE".into(),
                "CONN".into(),
                "ACTOR".into(),
                "CLIENT".into(),
                "PROTOCOL".into(),
                "SUBS".into(),
            ]];
            rows.extend(cs.iter().map(|c| {
                vec![
                    c.node_id.clone(),
                    c.connection_id.clone(),
                    c.actor_id.clone(),
                    or_dash(&c.client_id).into(),
                    or_dash(&c.protocol).into(),
                    c.subscriptions.to_string(),
                ]
            }));
            table(&rows)
        })
    }
}

/// Packs a JSON document as MessagePack (integers stay integers, strings `str`).
pub(super) fn msgpack_of_json(text: &str) -> Result<Vec<u8>, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("--data is not JSON: {e}"))?;
    let mut out = Vec::new();
    rmpv::encode::write_value(&mut out, &to_rmpv(&v)).map_err(|e| format!("packing --data: {e}"))?;
    Ok(out)
}

fn to_rmpv(v: &Value) -> rmpv::Value {
    match v {
        Value::Null => rmpv::Value::Nil,
        Value::Bool(b) => rmpv::Value::Boolean(*b),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                rmpv::Value::from(i)
            } else if let Some(u) = n.as_u64() {
                rmpv::Value::from(u)
            } else {
                rmpv::Value::F64(n.as_f64().unwrap_or(0.0))
            }
        }
        Value::String(s) => rmpv::Value::from(s.as_str()),
        Value::Array(a) => rmpv::Value::Array(a.iter().map(to_rmpv).collect()),
        Value::Object(o) => {
            rmpv::Value::Map(o.iter().map(|(k, v)| (rmpv::Value::from(k.as_str()), to_rmpv(v))).collect())
        }
    }
}

/// Hex → bytes.
pub(super) fn unhex(s: &str) -> Option<Vec<u8>> {
    let s = s.trim();
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_payloads_pack_as_msgpack() {
        assert_eq!(msgpack_of_json(r#"{"a":1}"#).unwrap(), vec![0x81, 0xa1, b'a', 0x01]);
        assert!(msgpack_of_json("{").is_err());
        assert_eq!(unhex("81a16101"), Some(vec![0x81, 0xa1, b'a', 0x01]));
        assert_eq!(unhex("8"), None);
    }
}
