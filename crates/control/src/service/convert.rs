//! Records → protobuf messages.

use skua_core::RegistryData;
use skua_core::registry_store::{
    ActorRecord, AppRecord, GrantRecord, HistoryRecord, LimitsRecord, LobbyRecord, ProjectRecord, RoomRecord,
    SubjectRecord, TopicRecord, TopicWebhooksRecord, WebhookRecord, WebhookTargetRecord,
};

use crate::pb;

pub(crate) fn limits(l: &LimitsRecord) -> pb::ProjectLimits {
    pb::ProjectLimits {
        max_connections: l.max_connections,
        monthly_message_quota: l.monthly_message_quota,
        rate_limit: l.rate_limit,
        max_message_size: l.max_message_size,
    }
}

pub(crate) fn limits_record(l: Option<&pb::ProjectLimits>) -> LimitsRecord {
    l.map_or_else(LimitsRecord::default, |l| LimitsRecord {
        max_connections: l.max_connections,
        monthly_message_quota: l.monthly_message_quota,
        rate_limit: l.rate_limit,
        max_message_size: l.max_message_size,
    })
}

pub(crate) fn project(p: &ProjectRecord, messages_this_month: u64) -> pb::Project {
    pb::Project {
        id: p.id.clone(),
        name: p.name.clone(),
        has_jwt_secret: p.jwt_secret.is_some(),
        limits: Some(limits(&p.limits)),
        created_at_ms: p.created_at_ms,
        messages_this_month,
        has_wake_secret: p.wake_secret.is_some(),
        wake_secret: String::new(),
    }
}

pub(crate) fn target(w: &WebhookTargetRecord) -> pb::WebhookTarget {
    pb::WebhookTarget {
        url: w.url.clone(),
        headers: w.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        timeout_ms: w.timeout_ms.unwrap_or(0),
    }
}

/// A target from the API; `None` for an absent one or one with an empty url (removal).
pub(crate) fn target_record(w: Option<&pb::WebhookTarget>) -> Option<WebhookTargetRecord> {
    w.filter(|w| !w.url.is_empty()).map(|w| WebhookTargetRecord {
        url: w.url.clone(),
        headers: w.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        timeout_ms: Some(w.timeout_ms).filter(|ms| *ms > 0),
    })
}

pub(crate) fn topic(t: &TopicRecord) -> pb::Topic {
    let hooks = &t.webhooks;
    pb::Topic {
        name: t.name.clone(),
        logged: t.logged,
        webhook: t.webhook.as_ref().map(|w| pb::Webhook { url: w.url.clone(), events: w.events.clone() }),
        webhooks: (hooks.on_subscribe.is_some() || hooks.on_publish.is_some()).then(|| pb::TopicWebhooks {
            on_subscribe: hooks.on_subscribe.as_ref().map(target),
            on_publish: hooks.on_publish.as_ref().map(target),
        }),
        history: t.history.map(|h| pb::TopicHistory { size: h.size, ttl_ms: h.ttl_ms }),
    }
}

pub(crate) fn topic_record(t: &pb::Topic) -> TopicRecord {
    let hooks = t.webhooks.as_ref();
    TopicRecord {
        name: t.name.clone(),
        logged: t.logged,
        webhook: t.webhook.as_ref().map(|w| WebhookRecord { url: w.url.clone(), events: w.events.clone() }),
        webhooks: TopicWebhooksRecord {
            on_subscribe: target_record(hooks.and_then(|h| h.on_subscribe.as_ref())),
            on_publish: target_record(hooks.and_then(|h| h.on_publish.as_ref())),
        },
        history: t.history.as_ref().map(|h| HistoryRecord { size: h.size, ttl_ms: h.ttl_ms }),
    }
}

pub(crate) fn app(d: &RegistryData, a: &AppRecord) -> pb::App {
    let room_count = d.rooms.range((a.id.clone(), String::new())..).take_while(|((app, _), _)| *app == a.id).count();
    pb::App {
        id: a.id.clone(),
        project_id: a.project.clone(),
        slug: a.slug.clone(),
        name: a.name.clone(),
        topics: a.topics.iter().map(topic).collect(),
        auto_provision_rooms: a.auto_provision_rooms,
        max_rooms: a.max_rooms.unwrap_or(0),
        room_count: u32::try_from(room_count).unwrap_or(u32::MAX),
        created_at_ms: a.created_at_ms,
        hydration_webhook: a.hydration_webhook.as_ref().map(target),
        trigger_webhook: a.trigger_webhook.as_ref().map(target),
        has_webhook_secret: a.webhook_secret.is_some(),
        // Shown once: only the replies of CreateApp and RotateWebhookSecret set it.
        webhook_secret: String::new(),
        annotations: super::annotations::message(&a.annotations),
    }
}

/// Whether a room has grants (is private).
pub(crate) fn is_private(d: &RegistryData, r: &RoomRecord) -> bool {
    d.grants.values().any(|g| g.app == r.app && g.room == r.slug)
}

pub(crate) fn room(d: &RegistryData, r: &RoomRecord, private: bool) -> pb::Room {
    pb::Room {
        project_id: r.project.clone(),
        app_id: r.app.clone(),
        app_slug: d.apps.get(&r.app).map(|a| a.slug.clone()).unwrap_or_default(),
        slug: r.slug.clone(),
        name: r.name.clone(),
        dynamic: r.dynamic,
        private,
        created_at_ms: r.created_at_ms,
        annotations: super::annotations::message(&r.annotations),
    }
}

pub(crate) fn actor(d: &RegistryData, a: &ActorRecord) -> pb::Actor {
    pb::Actor {
        id: a.id.clone(),
        project_id: a.project.clone(),
        actor_type: a.actor_type.clone(),
        name: a.name.clone(),
        active: a.active,
        rate_limit: a.rate_limit.unwrap_or(0),
        token_key_ids: d.tokens.values().filter(|t| t.actor == a.id).map(|t| t.key_id.clone()).collect(),
        created_at_ms: a.created_at_ms,
        scope_id: a.scope.clone().unwrap_or_default(),
        annotations: super::annotations::message(&a.annotations),
    }
}

pub(crate) fn grant(g: &GrantRecord) -> pb::Grant {
    let (actor_id, actor_type) = match &g.subject {
        SubjectRecord::Actor(a) => (a.clone(), String::new()),
        SubjectRecord::ActorType(t) => (String::new(), t.clone()),
    };
    pb::Grant {
        id: g.id.clone(),
        project_id: g.project.clone(),
        app_id: g.app.clone(),
        room: g.room.clone(),
        actor_id,
        actor_type,
        permission: g.permission.clone(),
        topics: g.topics.clone().unwrap_or_default(),
        expires_at: g.expires_at.unwrap_or(0),
        created_at_ms: g.created_at_ms,
        role: g.role.clone().unwrap_or_default(),
        metadata_json: g.metadata.clone().unwrap_or_default(),
    }
}

pub(crate) fn lobby(l: &LobbyRecord) -> pb::Lobby {
    let mut allowed_actors = Vec::new();
    let mut allowed_actor_types = Vec::new();
    for s in &l.allowed {
        match s {
            SubjectRecord::Actor(a) => allowed_actors.push(a.clone()),
            SubjectRecord::ActorType(t) => allowed_actor_types.push(t.clone()),
        }
    }
    pb::Lobby {
        project_id: l.project.clone(),
        slug: l.slug.clone(),
        app_id: l.app.clone(),
        rooms: l.rooms.clone(),
        allowed_actors,
        allowed_actor_types,
    }
}
