//! Node liveness and presence healing (cluster issue, item 4).
//!
//! Every `node_refresh` the node refreshes its registration in the presence backend. When the
//! backend reports it had no live registration (it restarted and lost its data, or this node
//! stalled past its ttl), the node re-announces every local presence entry, silently: the
//! clients already saw those joins. Then it removes the entries of nodes whose registration
//! lapsed and publishes their `leave` events; the backend hands each entry to exactly one
//! remover, so each leave goes out once.

use std::sync::Arc;

use bytes::Bytes;
use skua_core::{ConnRef, Envelope, PresenceChange, PresenceEvent};
use tokio_util::sync::CancellationToken;

use crate::state::{EdgeState, now_unix_s};

/// Runs until `cancel` fires.
pub async fn run(st: Arc<EdgeState>, cancel: CancellationToken) {
    let mut tick = tokio::time::interval(st.config.node_refresh);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut first = true;
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        refresh(&st, first).await;
        first = false;
        retry_removals(&st).await;
        reap(&st).await;
    }
}

async fn refresh(st: &EdgeState, first: bool) {
    let ttl = st.config.node_ttl.as_secs().max(1);
    match st.presence.refresh_node(&st.node, now_unix_s(), ttl).await {
        Ok(true) if !first => {
            let local = st.hub.local_presence();
            tracing::warn!(entries = local.len(), "Presence backend lost this node's registration; re-announcing.");
            for (room, actor, conn, data) in local {
                let conn = ConnRef { node: st.node.clone(), conn };
                if let Err(e) = st.presence.announce(&room, &actor, &conn, data, now_unix_s()).await {
                    tracing::warn!(error = %e, "Re-announcing presence failed; retrying at the next refresh.");
                    return;
                }
            }
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "Presence backend unreachable; node registration not refreshed."),
    }
}

/// Retries presence removals that failed while the backend was unreachable.
async fn retry_removals(st: &EdgeState) {
    let pending = st.take_deferred_removals();
    for (i, (room, actor, conn)) in pending.iter().enumerate() {
        match st.presence.remove(room, actor, conn).await {
            Ok(true) => publish_leave(st, room.clone(), actor.clone()).await,
            Ok(false) => {}
            Err(_) => {
                // Still down: keep this one and the rest for the next round.
                for (room, actor, conn) in pending.into_iter().skip(i) {
                    st.defer_presence_removal(room, actor, conn);
                }
                return;
            }
        }
    }
}

async fn publish_leave(st: &EdgeState, room: skua_core::RoomKey, actor: skua_core::ActorId) {
    let ev = PresenceEvent { room, actor, change: PresenceChange::Leave, data: Bytes::new(), node: st.node.clone() };
    if let Err(e) = st.hub.bus().publish(Arc::new(Envelope::Presence(ev))).await {
        tracing::warn!(error = %e, "A leave event could not be published.");
    }
}

async fn reap(st: &EdgeState) {
    let dead = match st.presence.expired_nodes(now_unix_s()).await {
        Ok(d) => d,
        Err(e) => {
            tracing::debug!(error = %e, "Could not list lapsed nodes.");
            return;
        }
    };
    for node in dead.into_iter().filter(|n| *n != st.node) {
        // Logged messages its connections held go back to their consumers (N26).
        crate::durable::release_node(st, &node).await;
        // Its connections' restore records end, so their clients' reconnects can claim them (N23).
        match st.store.release_node_restores(&node, now_unix_s(), st.config.restore_ttl.as_secs()).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(%node, records = n, "Released the restore records of a lapsed node."),
            Err(e) => tracing::warn!(error = %e, %node, "Releasing a lapsed node's restore records failed."),
        }
        match st.presence.remove_node(&node).await {
            Ok(gone) => {
                tracing::info!(%node, entries = gone.len(), "Removed the presence of a lapsed node.");
                for (room, actor) in gone {
                    publish_leave(st, room, actor).await;
                }
            }
            Err(e) => tracing::warn!(error = %e, %node, "Removing a lapsed node's presence failed."),
        }
    }
}
