//! Where messages and presence go: topic addresses, rooms, load-balancing groups.

use std::fmt;
use std::sync::Arc;

use crate::ids::{AppId, ProjectId};

/// One room of one app: the scope of presence and of topic addresses.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RoomKey {
    /// Owning project.
    pub project: ProjectId,
    /// Owning app (internal id).
    pub app: AppId,
    /// Room slug.
    pub room: Arc<str>,
}

/// Separates an access scope's slug from the room slug in a scoped [`RoomKey::room`]
/// (`<scope>~<room>`); never part of a slug.
pub const SCOPE_SEPARATOR: char = '~';

impl RoomKey {
    /// The room's slug as clients name it (without an access scope).
    pub fn slug(&self) -> &str {
        self.room.split_once(SCOPE_SEPARATOR).map_or(&self.room, |(_, r)| r)
    }

    /// The same room outside any access scope (the registry's room).
    pub fn unscoped(&self) -> Self {
        Self { project: self.project.clone(), app: self.app.clone(), room: Arc::from(self.slug()) }
    }
}

impl fmt::Debug for RoomKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RoomKey({}/{}/{})", self.project, self.app, self.room)
    }
}

/// A resolved topic: project, app, room and topic name, all checked against the registry.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicAddress {
    /// The room.
    pub room: RoomKey,
    /// Topic name within the app's topic list.
    pub topic: Arc<str>,
}

impl TopicAddress {
    /// The internal MQTT-style topic of this address under `namespace`:
    /// `<namespace>/v1/m/<project>/<app>/<room>/<topic>`.
    pub fn internal_topic(&self, namespace: &str) -> String {
        format!("{namespace}/v1/m/{}/{}/{}/{}", self.room.project, self.room.app, self.room.room, self.topic)
    }

    /// The key of this topic in the message log and in consumer ids:
    /// `<project>/<app>/<room>/<topic>`.
    pub fn log_key(&self) -> String {
        format!("{}/{}/{}/{}", self.room.project, self.room.app, self.room.room, self.topic)
    }
}

impl fmt::Debug for TopicAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TopicAddress({}/{}/{}/{})", self.room.project, self.room.app, self.room.room, self.topic)
    }
}

/// A load-balanced group on one topic (N26): scoped per project and app through the address.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupKey {
    /// The topic the group consumes.
    pub topic: TopicAddress,
    /// The group name (`loadBalanceGroup`, default the actor id).
    pub group: Arc<str>,
}
