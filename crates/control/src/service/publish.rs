//! Server-side publish: one message to `app/room/topic`, handed as sent to the node's publish
//! pipeline (`Origin::Api`), which resolves it against the registry it serves and checks it
//! (one resolution, one set of checks, no store read). Its typed refusal is mapped here once
//! for gRPC; the REST API and the dashboard map it once for HTTP.

use crate::service::Error;
use skua_core::{AppId, ProjectId, RoomKey, TopicAddress};

use super::ControlService;
use super::shared::{app, internal, project, room};
use crate::node::{PublishRefused, ServerPublish};
use crate::pb;

/// gRPC `Publish`: in `project_id` (empty: the only project).
pub(crate) async fn publish(svc: &ControlService, r: pb::PublishRequest) -> Result<pb::PublishResponse, Error> {
    let project = project_id(svc, &r.project_id)?;
    publish_in(svc, project, r).await.map_err(|e| status(&e))
}

/// The project a publish names: `id`, or the only project when `id` is empty (from the
/// registry this node serves; whether `id` exists is the publish pipeline's check).
pub(crate) fn project_id(svc: &ControlService, id: &str) -> Result<ProjectId, Error> {
    if id.is_empty() {
        let snap = svc.sync.snapshot();
        return ProjectId::parse(&project(&snap.data, "")?.id).map_err(internal);
    }
    crate::validate::slug("project_id", id)?;
    ProjectId::parse(id).map_err(|e| Error::invalid_argument(format!("project_id: {e}")))
}

/// The gRPC door's answer to a refused publish.
fn status(r: &PublishRefused) -> Error {
    use PublishRefused as R;
    let m = r.to_string();
    match r {
        R::Unknown(_) => Error::not_found(m),
        R::Access(_) | R::InvalidData | R::Filter(_) | R::TooLarge { .. } => Error::invalid_argument(m),
        // The pipeline's other refusals are UNAVAILABLE, naming the cause
        // (`retained_limit_exceeded: …`, the store, the bus).
        R::RetainedLimit(_)
        | R::QuotaExceeded
        | R::RateLimited
        | R::InvalidIdempotencyKey { .. }
        | R::Store(_)
        | R::Bus(_)
        | R::Idempotency(_) => Error::unavailable(m),
    }
}

/// Publishes `r` in `project` through the node's pipeline: the one server-side publish of
/// gRPC, REST and the dashboard (`r.project_id` is ignored). The node resolves it against the
/// registry it serves; only when that misses an app, room, topic or actor is the store asked
/// whether the registry moved (a change made through another node, not yet polled), and the
/// publish is tried once more on the fresher registry: read-your-writes across nodes without a
/// store read per publish.
///
/// # Errors
/// [`PublishRefused`] as the pipeline refused it.
pub(crate) async fn publish_in(
    svc: &ControlService,
    project: ProjectId,
    r: pb::PublishRequest,
) -> Result<pb::PublishResponse, PublishRefused> {
    let publish = ServerPublish {
        project,
        topic: r.topic,
        from: Some(r.from_actor).filter(|a| !a.is_empty()),
        filter: r.filter,
        data: bytes::Bytes::from(r.data),
        retain: r.retain,
        idempotency_key: Some(r.idempotency_key).filter(|k| !k.is_empty()),
    };
    let node = svc.sync.node();
    let published = match node.publish(publish.clone()).await {
        Err(PublishRefused::Unknown(u)) => match svc.sync.refresh().await {
            Ok(true) => node.publish(publish).await?,
            _ => return Err(PublishRefused::Unknown(u)),
        },
        other => other?,
    };
    Ok(pb::PublishResponse {
        timestamp_ms: published.timestamp_ms,
        msg_id: published.msg_id.unwrap_or_default(),
        duplicate: published.duplicate,
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
    Error,
> {
    let p = project(d, project_id)?;
    let mut parts = topic.split('/');
    let (Some(app_slug), Some(room_slug), Some(topic), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Error::invalid_argument("topic must be app/room/topic"));
    };
    let a = app(d, &p.id, app_slug)?;
    let room = room(d, a, room_slug)?;
    if !a.topics.iter().any(|t| t.name == topic) {
        return Err(Error::not_found(format!("topic {topic:?} is not one of app {:?}'s topics", a.slug)));
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
) -> Result<RoomKey, Error> {
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
pub(crate) async fn address(svc: &ControlService, project_id: &str, topic: &str) -> Result<TopicAddress, Error> {
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
