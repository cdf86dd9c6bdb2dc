//! Server-side publish: one message to `app/room/topic`, checked here and handed to the
//! node's own publish path.

use skua_core::{ActorId, AppId, ProjectId, RoomKey, TopicAddress};
use tonic::Status;

use super::ControlService;
use super::shared::{actor, app, internal, project, room};
use crate::pb;
use crate::sync::{PublishRefused, ServerPublish, now_ms};

/// Whether `filter` may be a publish filter key (N12: non-empty, none of `/ # + |`).
fn valid_filter(filter: &str) -> bool {
    !filter.is_empty() && filter.len() <= 256 && !filter.chars().any(|c| matches!(c, '/' | '#' | '+' | '|'))
}

/// Whether `data` is exactly one MessagePack value (it is forwarded verbatim inside frames).
fn is_one_msgpack_value(data: &[u8]) -> bool {
    let mut rest = data;
    rmpv::decode::read_value(&mut rest).is_ok() && rest.is_empty()
}

/// Why a server-side publish failed: a check of the request (a gRPC status, mapped by each
/// façade) or the publish pipeline's refusal.
#[derive(Debug)]
pub(crate) enum PublishError {
    /// The request failed a check before the pipeline.
    Rejected(Status),
    /// The node's publish pipeline refused it.
    Refused(PublishRefused),
}

impl From<Status> for PublishError {
    fn from(s: Status) -> Self {
        Self::Rejected(s)
    }
}

pub(crate) async fn publish(svc: &ControlService, r: pb::PublishRequest) -> Result<pb::PublishResponse, Status> {
    publish_checked(svc, r).await.map_err(|e| match e {
        PublishError::Rejected(s) => s,
        PublishError::Refused(PublishRefused::TooLarge(m)) => Status::invalid_argument(m),
        // As before the typed refusal: the pipeline's other refusals are UNAVAILABLE over gRPC,
        // naming the cause (`retained_limit_exceeded: …`).
        PublishError::Refused(
            PublishRefused::Invalid(m) | PublishRefused::Limit(m) | PublishRefused::Unavailable(m),
        ) => Status::unavailable(m),
    })
}

/// The project, app, room and topic name of `topic` (`app/room/topic`) in `project_id`.
fn lookup<'a, 't>(
    d: &'a skua_core::RegistryData,
    project_id: &str,
    topic: &'t str,
) -> Result<
    (
        &'a skua_core::registry_store::ProjectRecord,
        &'a skua_core::registry_store::AppRecord,
        &'a skua_core::registry_store::RoomRecord,
        &'t str,
    ),
    Status,
> {
    let p = project(d, project_id)?;
    let mut parts = topic.split('/');
    let (Some(app_slug), Some(room_slug), Some(topic), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Status::invalid_argument("topic must be app/room/topic"));
    };
    let a = app(d, &p.id, app_slug)?;
    let room = room(d, a, room_slug)?;
    if !a.topics.iter().any(|t| t.name == topic) {
        return Err(Status::not_found(format!("topic {topic:?} is not one of app {:?}'s topics", a.slug)));
    }
    Ok((p, a, room, topic))
}

/// The internal key of `room` of `app` (slugs) in `project_id`, checked to exist (the
/// dashboard's presence view).
pub(crate) async fn room_key(
    svc: &ControlService,
    project_id: &str,
    app_slug: &str,
    slug: &str,
) -> Result<RoomKey, Status> {
    let snap = svc.read().await;
    let p = project(&snap.data, project_id)?;
    let a = app(&snap.data, &p.id, app_slug)?;
    let r = room(&snap.data, a, slug)?;
    Ok(RoomKey {
        project: ProjectId::parse(&p.id).map_err(internal)?,
        app: AppId::parse(&a.id).map_err(internal)?,
        room: r.slug.as_str().into(),
    })
}

/// The internal address of `topic` (`app/room/topic`) in `project_id`, checked as a publish
/// checks it (the dashboard's live view watches it).
pub(crate) async fn address(svc: &ControlService, project_id: &str, topic: &str) -> Result<TopicAddress, Status> {
    let snap = svc.read().await;
    let (p, a, room, topic) = lookup(&snap.data, project_id, topic)?;
    Ok(TopicAddress {
        room: RoomKey {
            project: ProjectId::parse(&p.id).map_err(internal)?,
            app: AppId::parse(&a.id).map_err(internal)?,
            room: room.slug.as_str().into(),
        },
        topic: topic.into(),
    })
}

/// Checks `r` against the registry (topic, size, MessagePack data, filter, publisher) and
/// hands it to the node's publish pipeline: the one server-side publish of gRPC and REST.
pub(crate) async fn publish_checked(
    svc: &ControlService,
    r: pb::PublishRequest,
) -> Result<pb::PublishResponse, PublishError> {
    let snap = svc.read().await;
    let d = &snap.data;
    let (p, a, room, topic) = lookup(d, &r.project_id, &r.topic)?;
    let max = p.limits.max_message_size.unwrap_or(svc.limits.max_message_size) as usize;
    if r.data.len() > max {
        return Err(PublishError::Refused(PublishRefused::TooLarge(format!(
            "data is {} bytes; at most {max}",
            r.data.len()
        ))));
    }
    if !is_one_msgpack_value(&r.data) {
        return Err(Status::invalid_argument("data must be exactly one MessagePack value").into());
    }
    if !r.filter.is_empty() && !valid_filter(&r.filter) {
        return Err(Status::invalid_argument("filter must be 1-256 characters without / # + |").into());
    }
    let from = if r.from_actor.is_empty() {
        ActorId::parse("server").map_err(internal)?
    } else {
        let a = actor(d, &r.from_actor)?;
        if a.project != p.id {
            return Err(Status::not_found(format!("actor {:?} not found in project {:?}", r.from_actor, p.id)).into());
        }
        ActorId::parse(&a.id).map_err(internal)?
    };
    let address = TopicAddress {
        room: RoomKey {
            project: ProjectId::parse(&p.id).map_err(internal)?,
            app: AppId::parse(&a.id).map_err(internal)?,
            room: room.slug.as_str().into(),
        },
        topic: topic.into(),
    };
    let timestamp_ms = now_ms();
    let publish = ServerPublish {
        topic: address,
        filter: Some(r.filter.clone()).filter(|f| !f.is_empty()),
        from,
        data: bytes::Bytes::from(r.data),
        retain: r.retain,
        timestamp_ms,
        idempotency_key: Some(r.idempotency_key).filter(|k| !k.is_empty()),
    };
    let published = svc.sync.node().publish(publish).await.map_err(PublishError::Refused)?;
    Ok(pb::PublishResponse {
        timestamp_ms: published.timestamp_ms,
        msg_id: published.msg_id.unwrap_or_default(),
        duplicate: published.duplicate,
    })
}
