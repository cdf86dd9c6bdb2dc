//! The engine as the control plane sees it: [`Engine`] implements [`NodeAdmin`] (registry
//! installs, connection lists and kicks, server-side publishes, usage counts, webhook dead
//! letters, the dashboard's counters and live views), so the control plane needs no adapter.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use skua_core::error::error_chain;
use skua_core::node::{ConnectionInfo, NodeAdmin, NodeStats, ServerPublish, ServerPublished, TopicWatch};
use skua_core::refusal::Refused;
use skua_core::webhook::RecentWebhook;
use skua_core::{
    ActorId, ConsumerBacklog, DeadLetter, DeadLetterFilter, Envelope, GroupKey, NodeSeen, PresenceEntry, ProjectId,
    Registry, RoomKey, TopicAddress,
};
use tokio::sync::mpsc;

use crate::engine::Engine;
use crate::publish::{Origin, PublishRequest};
use crate::revalidate::ConnEntry;

/// A connection as `ListConnections` shows it.
fn info(id: skua_core::ConnId, e: &ConnEntry) -> ConnectionInfo {
    ConnectionInfo {
        connection_id: id.to_string(),
        actor: e.actor.clone(),
        client_id: e.client_id.clone(),
        connected_at_ms: e.connected_at_ms,
        subscriptions: e.subscriptions.load(Relaxed),
        protocol: e.protocol.as_str(),
    }
}

/// A live view's queue ([`NodeAdmin::watch_topic`]).
struct Watch(mpsc::Receiver<Arc<Envelope>>);

#[async_trait::async_trait]
impl TopicWatch for Watch {
    async fn next(&mut self) -> Option<Arc<Envelope>> {
        self.0.recv().await
    }
}

#[async_trait::async_trait]
impl NodeAdmin for Engine {
    fn node_id(&self) -> String {
        self.node.to_string()
    }

    fn registry(&self) -> Arc<Registry> {
        self.registry.load()
    }

    fn install_registry(&self, registry: Registry) {
        Engine::install_registry(self, registry);
    }

    fn connections(&self, project: &ProjectId, actor: Option<&ActorId>) -> Vec<ConnectionInfo> {
        self.connections.list(project, actor).iter().map(|(id, e)| info(*id, e)).collect()
    }

    fn all_connections(&self) -> Vec<(ProjectId, ConnectionInfo)> {
        self.connections.all().iter().map(|(id, e)| (e.project.clone(), info(*id, e))).collect()
    }

    fn disconnect(&self, actor: &ActorId) -> u32 {
        self.connections.disconnect(actor)
    }

    async fn publish(&self, p: ServerPublish) -> Result<ServerPublished, Refused> {
        let req = PublishRequest {
            origin: Origin::Api { project: &p.project, topic: &p.topic, from: p.from.as_deref() },
            filter: skua_protocol::filters::publish_filter_key(&p.filter),
            data: p.data,
            retain: p.retain,
            qos: 0,
            idempotency_key: p.idempotency_key.as_deref(),
            wake_reply: None,
        };
        let a = self.publisher.publish(req).await?;
        Ok(ServerPublished { msg_id: a.msg_id, timestamp_ms: a.timestamp_ms, duplicate: a.duplicate })
    }

    fn take_usage(&self) -> Vec<(ProjectId, u64)> {
        self.connections.take_usage()
    }

    fn return_usage(&self, counts: Vec<(ProjectId, u64)>) {
        self.connections.return_usage(counts);
    }

    fn set_usage(&self, project: &ProjectId, period: &str, total: u64) {
        self.connections.set_usage(project, period, total);
    }

    async fn webhook_failures(
        &self,
        filter: DeadLetterFilter<'_>,
        after: u64,
        limit: u32,
    ) -> Result<Vec<DeadLetter>, String> {
        self.store.list_dead_letters(filter, after, limit).await.map_err(|e| error_chain(&e))
    }

    async fn retry_webhook_failures(
        &self,
        filter: DeadLetterFilter<'_>,
        limit: u32,
    ) -> Result<Vec<(String, Option<String>)>, String> {
        let Some(t) = &self.triggers else {
            return Err("this node posts no webhooks (no webhook engine configured)".into());
        };
        let done = t.retry_dead_letters(filter, limit).await.map_err(|e| error_chain(&e))?;
        Ok(done.into_iter().map(|o| (o.delivery_id, o.error)).collect())
    }

    async fn purge_webhook_failures(&self, filter: DeadLetterFilter<'_>) -> Result<u64, String> {
        self.store.delete_dead_letters(filter).await.map_err(|e| error_chain(&e))
    }

    fn stats(&self) -> NodeStats {
        let m = &self.metrics;
        let opened = m.connections_opened.load(Relaxed);
        // Summed over the authenticated connections now, as the Prometheus gauges are.
        let (frames, bytes) = self
            .connections
            .all()
            .iter()
            .fold((0usize, 0usize), |(f, b), (_, e)| (f + e.handle.queued_frames(), b + e.handle.queued_bytes()));
        NodeStats {
            connections: opened.saturating_sub(m.connections_closed.load(Relaxed)),
            messages_in: m.publishes_accepted.load(Relaxed),
            messages_out: m.deliveries.load(Relaxed),
            refused: m.publishes_refused.load(Relaxed),
            retained_bytes: self.hub.retained_bytes() as u64,
            backends: self.backends_up().to_vec(),
            outbound_frames: frames as u64,
            outbound_bytes: bytes as u64,
            bus_queued: self.hub.queued_deliveries() as u64,
            triggers_queued: self.triggers.as_ref().map(|t| {
                let (queued, overflow) = t.queued();
                (queued as u64, overflow as u64)
            }),
        }
    }

    async fn room_presence(&self, room: &RoomKey) -> Result<Vec<PresenceEntry>, String> {
        self.presence.list(room).await.map_err(|e| error_chain(&e))
    }

    fn recent_webhooks(&self) -> Vec<RecentWebhook> {
        self.webhooks.as_ref().map_or_else(Vec::new, |w| w.recent())
    }

    async fn cluster_nodes(&self) -> Result<Vec<NodeSeen>, String> {
        let now = crate::clock::now_unix_s();
        self.presence.nodes(now).await.map_err(|e| error_chain(&e))
    }

    async fn durable_groups(
        &self,
        project: &ProjectId,
        after: &str,
        limit: u32,
    ) -> Result<Vec<ConsumerBacklog>, String> {
        let prefix = skua_core::ConsumerId::group_prefix(project);
        self.store.list_consumers(&prefix, after, limit).await.map_err(|e| error_chain(&e))
    }

    fn local_group_members(&self, group: &GroupKey) -> Vec<(ActorId, Option<String>)> {
        let members = self.hub.group_members(group);
        if members.is_empty() {
            return Vec::new();
        }
        let conns: std::collections::HashMap<_, _> =
            self.connections.list(&group.topic.room.project, None).into_iter().collect();
        members
            .into_iter()
            .map(|(actor, conn)| {
                let client = conns.get(&conn).and_then(|e| e.client_id.clone());
                (actor, client)
            })
            .collect()
    }

    async fn watch_topic(&self, topic: &TopicAddress, capacity: usize) -> Result<Box<dyn TopicWatch>, String> {
        let mut tap = self.hub.tap(topic, capacity).await.map_err(|e| e.to_string())?;
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let hub = self.hub.clone();
        // Forwards until the dashboard drops its watch (or the node stops), then ends the
        // watch and its bus subscription.
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = tx.closed() => break,
                    e = tap.rx.recv() => match e {
                        Some(e) => {
                            let _ = tx.try_send(e);
                        }
                        None => break,
                    },
                }
            }
            hub.untap(tap).await;
        });
        Ok(Box::new(Watch(rx)))
    }
}
