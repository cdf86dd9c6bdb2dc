//! A session re-checking itself against a new registry (issue 5, N15): subscriptions and
//! lobbies it may no longer use end with an error frame each, lobbies follow their new room
//! lists, a presence room that became inaccessible is left. Plus the connection's entry in the
//! node's table.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use skua_core::RoomKey;
use skua_core::registry::Operation;
use skua_protocol::ErrorFrame;
use skua_protocol::codes::error;

use super::Session;
use crate::clock::now_unix_s;
use crate::hub::bus_subscription;
use crate::revalidate::{ConnEntry, Registration};

impl Session {
    /// Enters this (just authenticated) connection in the node's table.
    pub(super) fn register(
        &self,
        actor: &skua_core::registry::Actor,
        client_id: Option<&skua_core::ClientId>,
        token_digest: Option<[u8; 32]>,
    ) -> (Registration, Arc<AtomicU32>) {
        let subscriptions = Arc::new(AtomicU32::new(0));
        let entry = ConnEntry {
            project: actor.project.clone(),
            actor: actor.id.clone(),
            client_id: client_id.map(|c| c.as_str().to_owned()),
            protocol: self.protocol,
            token_digest,
            connected_at_ms: 0,
            handle: self.conn.clone(),
            subscriptions: subscriptions.clone(),
        };
        (self.st.register_connection(self.conn.id, entry), subscriptions)
    }

    /// Publishes the subscription count to the node's table (`ListConnections`).
    pub(crate) fn sync_subscription_count(&self) {
        if let Some(a) = &self.auth {
            a.subscriptions.store(u32::try_from(self.subs.len()).unwrap_or(u32::MAX), Ordering::Relaxed);
        }
    }

    /// Re-checks the subscriptions, lobbies and presence room that `delta` touches against the
    /// current registry. Actor-level failures (deleted, deactivated, revoked) are the node's
    /// sweep's: it closes the connection.
    pub(crate) async fn revalidate(&mut self, delta: &skua_core::RegistryDelta) {
        let registry = self.st.registry.load();
        let Some(a) = &mut self.auth else { return };
        let Some(actor) = registry.actor(a.actor.id.as_str()).cloned() else { return };
        a.actor = actor.clone();
        let now = now_unix_s();
        let mut changed = false;

        let lost: Vec<(String, skua_core::registry::AccessError)> = self
            .subs
            .iter()
            .filter(|(_, sub)| delta.touches_room(&sub.address.room))
            .filter_map(|(topic, _)| {
                registry.resolve_topic(&actor, topic, Operation::Subscribe, now).err().map(|e| (topic.clone(), e))
            })
            .collect();
        for (topic, e) in lost {
            if let Some(sub) = self.subs.remove(&topic) {
                self.st.hub.remove(&sub.address, self.conn.id);
                self.st.hub.release(&bus_subscription(&sub.address, sub.group.as_ref())).await;
                self.stop_durable(&sub).await;
                tracing::debug!(%topic, hint = e.hint, "Subscription revoked by revalidation.");
                self.access_error(&topic, None, e);
                changed = true;
            }
        }

        let lobbies: Vec<(String, Vec<RoomKey>)> = if delta.touches_lobbies(&actor.project) {
            self.lobbies.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
        } else {
            Vec::new()
        };
        for (slug, rooms) in lobbies {
            let name: Arc<str> = Arc::from(slug.as_str());
            match registry.resolve_lobby(&actor, &slug) {
                Err(_) => {
                    self.lobbies.remove(&slug);
                    self.st.hub.lobby_unsubscribe(&rooms, self.conn.id, &name).await;
                    // Lobby access errors carry `lobbyId` and no code (N35).
                    self.error(ErrorFrame {
                        error: error::NOT_AUTHORIZED,
                        lobby_id: Some(&slug),
                        ..ErrorFrame::default()
                    });
                    changed = true;
                }
                Ok(l) if l.rooms != rooms => {
                    let added: Vec<RoomKey> = l.rooms.iter().filter(|r| !rooms.contains(r)).cloned().collect();
                    let removed: Vec<RoomKey> = rooms.iter().filter(|r| !l.rooms.contains(r)).cloned().collect();
                    self.st.hub.lobby_unsubscribe(&removed, self.conn.id, &name).await;
                    let kept = if self.st.hub.lobby_subscribe(&added, &self.conn, &name).await.is_ok() {
                        l.rooms
                    } else {
                        tracing::warn!(lobby = %slug, "Lobby rooms could not be added (bus unavailable).");
                        rooms.into_iter().filter(|r| l.rooms.contains(r)).collect()
                    };
                    self.lobbies.insert(slug, kept);
                }
                Ok(_) => {}
            }
        }

        if let Some(room) = &self.presence_room
            && delta.touches_room(room)
            && registry.resolve_room(&actor, room.slug(), now).ok().as_ref() != Some(room)
        {
            self.leave_presence_room().await;
        }

        if changed {
            self.sync_subscription_count();
            self.save_restore().await;
        }
    }
}
