//! Live connections: listing a project's (this node's from the node, the others' from the
//! store's shared table), and disconnecting an actor everywhere.

use crate::service::Error;
use skua_core::registry_store::{Change, Object};
use skua_core::{ActorId, ProjectId};

use super::shared::{actor, internal, project};
use super::{ControlService, unavailable};
use crate::pb;
use crate::sync::now_ms;

/// `ListConnections`: the project's connections (of an actor, when named), oldest first.
pub(crate) async fn list(
    svc: &ControlService,
    r: pb::ListConnectionsRequest,
) -> Result<pb::ListConnectionsResponse, Error> {
    let snap = svc.read().await;
    let p = project(&snap.data, &r.project_id)?;
    let actor_id = if r.actor_id.is_empty() {
        None
    } else {
        let a = actor(&snap.data, &r.actor_id)?;
        Some(ActorId::parse(&a.id).map_err(internal)?)
    };
    let project_id = ProjectId::parse(&p.id).map_err(internal)?;
    let node = svc.sync.node();
    let node_id = node.node_id();
    let limit = svc.limits.max_page_size as usize;
    // This node's own connections always come live from the node.
    let mut connections: Vec<pb::Connection> = node
        .connections(&project_id, actor_id.as_ref())
        .into_iter()
        .map(|c| pb::Connection {
            node_id: node_id.clone(),
            connection_id: c.connection_id,
            actor_id: c.actor.to_string(),
            client_id: c.client_id.unwrap_or_default(),
            connected_at_ms: c.connected_at_ms,
            subscriptions: c.subscriptions,
            protocol: c.protocol.to_owned(),
        })
        .collect();
    if svc.sync.shares_connections() {
        let since = now_ms().saturating_sub(u64::try_from(crate::sync::CONNECTIONS_STALE.as_millis()).unwrap_or(0));
        let others = svc
            .sync
            .store()
            .list_connections(&p.id, actor_id.as_ref().map(ActorId::as_str), since, svc.limits.max_page_size)
            .await
            .map_err(|e| unavailable(&e))?;
        connections.extend(others.into_iter().filter(|c| c.node != node_id).map(|c| pb::Connection {
            node_id: c.node,
            connection_id: c.conn,
            actor_id: c.actor,
            client_id: c.client_id,
            connected_at_ms: c.connected_at_ms,
            subscriptions: c.subscriptions,
            protocol: c.protocol,
        }));
    }
    connections.sort_by(|a, b| {
        (a.connected_at_ms, &a.node_id, &a.connection_id).cmp(&(b.connected_at_ms, &b.node_id, &b.connection_id))
    });
    connections.truncate(limit);
    Ok(pb::ListConnectionsResponse { connections })
}

pub(crate) async fn disconnect_actor(
    svc: &ControlService,
    r: pb::ActorRef,
) -> Result<pb::DisconnectActorResponse, Error> {
    let id = {
        let snap = svc.read().await;
        ActorId::parse(&actor(&snap.data, &r.actor_id)?.id).map_err(internal)?
    };
    let closed = svc.sync.node().disconnect(&id);
    // Other nodes close the actor's connections older than this instant when the change
    // reaches them; later connections are unaffected.
    let before = now_ms() + 1;
    svc.mutate(|d| {
        let mut a = actor(d, &r.actor_id)?.clone();
        a.disconnect_before_ms = Some(before);
        Ok((vec![Change::Put(Object::Actor(a))], ()))
    })
    .await?;
    Ok(pb::DisconnectActorResponse { closed_on_this_node: closed })
}
