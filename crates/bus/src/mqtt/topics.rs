//! The internal topic layout (docs/cluster.md): which MQTT topic an envelope is published on
//! and which MQTT filter a [`BusSubscription`] subscribes.
//!
//! Under namespace `ns`:
//!
//! | what | MQTT topic or filter |
//! |---|---|
//! | publication, unfiltered | `ns/v1/m/<project>/<app>/<room>/<topic>` |
//! | publication with filter key `k` | `ns/v1/m/<project>/<app>/<room>/<topic>/<k>` |
//! | presence event | `ns/v1/p/<project>/<app>/<room>` |
//! | `Topic(a)` | `ns/v1/m/…/<topic>/#` (`x/#` also matches `x`) |
//! | `TopicKey(a, k)` | `ns/v1/m/…/<topic>/<k>` |
//! | `Group(g)` | `$share/<ns>_<project>_<app>_<group>/ns/v1/m/…/<topic>/#` |
//! | `Presence(r)` | `ns/v1/p/<project>/<app>/<room>` |
//! | control message, and `Control(p)` | `ns/v1/c/<project>` |
//!
//! Every level after the namespace is escaped: `%`, `/`, `+`, `#` and NUL become `%25`, `%2F`,
//! `%2B`, `%23`, `%00`. Slugs and filter keys never contain them, so in practice topics read
//! as written; the escaping only guarantees that no name can add a level or a wildcard.

use std::fmt::Write as _;

use skua_core::{BusSubscription, Envelope, GroupKey, ProjectId, RoomKey, TopicAddress};

/// Version level of the layout, right after the namespace.
const VERSION: &str = "v1";

/// Builds topics and filters under one namespace.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    namespace: String,
}

impl Layout {
    /// A layout under `namespace`, which the config checked to be a slug.
    pub fn new(namespace: &str) -> Self {
        Self { namespace: namespace.to_owned() }
    }

    /// The MQTT topic an envelope is published on.
    pub fn topic_of(&self, envelope: &Envelope) -> String {
        match envelope {
            Envelope::Publication(p) => {
                let mut t = self.message_base(&p.topic);
                if let Some(key) = &p.filter {
                    t.push('/');
                    escape_into(&mut t, key);
                }
                t
            }
            Envelope::Presence(e) => self.presence_topic(&e.room),
            Envelope::Control(c) => self.control_topic(c.message.project()),
        }
    }

    /// The MQTT filter of a subscription.
    pub fn filter_of(&self, sub: &BusSubscription) -> String {
        match sub {
            BusSubscription::Topic(a) => {
                let mut f = self.message_base(a);
                f.push_str("/#");
                f
            }
            BusSubscription::TopicKey(a, key) => {
                let mut f = self.message_base(a);
                f.push('/');
                escape_into(&mut f, key);
                f
            }
            BusSubscription::Group(g) => self.group_filter(g),
            BusSubscription::Presence(room) => self.presence_topic(room),
            BusSubscription::Control(project) => self.control_topic(project),
        }
    }

    /// One topic per project for control messages: a plain subscription (never shared, never
    /// retained), so every node with that project's sessions hears each one.
    fn control_topic(&self, project: &ProjectId) -> String {
        format!("{}/{VERSION}/c/{project}", self.namespace)
    }

    fn group_filter(&self, g: &GroupKey) -> String {
        let room = &g.topic.room;
        let mut f = String::with_capacity(96);
        // A shared subscription is identified by (share name, filter); the filter already holds
        // namespace, project, app, room and topic. The share name repeats namespace, project and
        // app so that operators can read it and two namespaces never share a group by accident.
        let _ = write!(f, "$share/{}_{}_{}_", self.namespace, room.project, room.app);
        escape_into(&mut f, &g.group);
        f.push('/');
        f.push_str(&self.message_base(&g.topic));
        f.push_str("/#");
        f
    }

    fn message_base(&self, a: &TopicAddress) -> String {
        let mut t = String::with_capacity(64 + a.room.room.len() + a.topic.len());
        let _ = write!(t, "{}/{VERSION}/m/{}/{}/", self.namespace, a.room.project, a.room.app);
        escape_into(&mut t, &a.room.room);
        t.push('/');
        escape_into(&mut t, &a.topic);
        t
    }

    fn presence_topic(&self, room: &RoomKey) -> String {
        let mut t = String::with_capacity(48 + room.room.len());
        let _ = write!(t, "{}/{VERSION}/p/{}/{}/", self.namespace, room.project, room.app);
        escape_into(&mut t, &room.room);
        t
    }
}

/// Appends `level` with the characters that structure MQTT topics percent-escaped.
fn escape_into(out: &mut String, level: &str) {
    for c in level.chars() {
        match c {
            '%' => out.push_str("%25"),
            '/' => out.push_str("%2F"),
            '+' => out.push_str("%2B"),
            '#' => out.push_str("%23"),
            '\0' => out.push_str("%00"),
            c => out.push(c),
        }
    }
}

/// Whether MQTT `filter` (possibly `$share/<name>/…`) matches `topic`. Used only when a broker
/// sends no subscription identifiers.
pub(crate) fn filter_matches(filter: &str, topic: &str) -> bool {
    let filter = match filter.strip_prefix("$share/") {
        Some(rest) => match rest.split_once('/') {
            Some((_, f)) => f,
            None => return false,
        },
        None => filter,
    };
    let mut levels = topic.split('/');
    for f in filter.split('/') {
        match (f, levels.next()) {
            ("#", _) => return true,
            (_, None) => return false,
            ("+", Some(_)) => {}
            (f, Some(t)) if f == t => {}
            _ => return false,
        }
    }
    levels.next().is_none()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;
    use skua_core::{
        ActorId, AppId, ConnId, Control, ControlMessage, EnvelopeId, NodeId, PresenceChange, PresenceEvent,
        Publication, SessionKey,
    };

    use super::*;

    fn address(room: &str, topic: &str) -> TopicAddress {
        TopicAddress {
            room: RoomKey {
                project: ProjectId::parse("p1").unwrap(),
                app: AppId::parse("app").unwrap(),
                room: Arc::from(room),
            },
            topic: Arc::from(topic),
        }
    }

    fn publication(a: &TopicAddress, filter: Option<&str>) -> Envelope {
        Envelope::Publication(Publication {
            history: None,
            id: EnvelopeId(1),
            topic: a.clone(),
            filter: filter.map(str::to_owned),
            publisher: ActorId::parse("alice").unwrap(),
            publisher_conn: ConnId(1),
            node: NodeId::parse("n1").unwrap(),
            timestamp_ms: 0,
            msg_id: None,
            retain: false,
            qos: 0,
            data: Bytes::new(),
        })
    }

    #[test]
    fn layout_matches_the_documented_table() {
        let l = Layout::new("ns");
        let a = address("lobby", "chat");
        assert_eq!(l.topic_of(&publication(&a, None)), "ns/v1/m/p1/app/lobby/chat");
        assert_eq!(l.topic_of(&publication(&a, Some("red|big"))), "ns/v1/m/p1/app/lobby/chat/red|big");
        let presence = Envelope::Presence(PresenceEvent {
            room: a.room.clone(),
            actor: ActorId::parse("alice").unwrap(),
            change: PresenceChange::Join,
            data: Bytes::new(),
            node: NodeId::parse("n1").unwrap(),
            persistent: None,
        });
        assert_eq!(l.topic_of(&presence), "ns/v1/p/p1/app/lobby");
        assert_eq!(l.filter_of(&BusSubscription::Topic(a.clone())), "ns/v1/m/p1/app/lobby/chat/#");
        assert_eq!(l.filter_of(&BusSubscription::TopicKey(a.clone(), "k".into())), "ns/v1/m/p1/app/lobby/chat/k");
        let g = GroupKey { topic: a.clone(), group: Arc::from("workers") };
        assert_eq!(l.filter_of(&BusSubscription::Group(g)), "$share/ns_p1_app_workers/ns/v1/m/p1/app/lobby/chat/#");
        assert_eq!(l.filter_of(&BusSubscription::Presence(a.room.clone())), "ns/v1/p/p1/app/lobby");
        let session =
            SessionKey { project: a.room.project.clone(), actor: ActorId::parse("w").unwrap(), client_id: None };
        let takeover = Envelope::Control(Control {
            id: EnvelopeId(1),
            node: NodeId::parse("n1").unwrap(),
            message: ControlMessage::Takeover { session, conn: ConnId(1) },
        });
        assert_eq!(l.topic_of(&takeover), "ns/v1/c/p1");
        assert_eq!(l.filter_of(&BusSubscription::Control(a.room.project.clone())), "ns/v1/c/p1");
    }

    #[test]
    fn names_cannot_add_levels_or_wildcards() {
        let l = Layout::new("ns");
        let a = address("r/1", "a+b#%");
        assert_eq!(l.topic_of(&publication(&a, Some("x/y"))), "ns/v1/m/p1/app/r%2F1/a%2Bb%23%25/x%2Fy");
        let g = GroupKey { topic: a, group: Arc::from("g/+") };
        assert!(l.filter_of(&BusSubscription::Group(g)).starts_with("$share/ns_p1_app_g%2F%2B/"));
    }

    #[test]
    fn fallback_matching_follows_mqtt_rules() {
        assert!(filter_matches("a/b/#", "a/b"));
        assert!(filter_matches("a/b/#", "a/b/c"));
        assert!(!filter_matches("a/b/#", "a/bc"));
        assert!(filter_matches("a/+/c", "a/x/c"));
        assert!(!filter_matches("a/+/c", "a/x/c/d"));
        assert!(filter_matches("a/b", "a/b"));
        assert!(!filter_matches("a/b", "a/b/c"));
        assert!(!filter_matches("a/b/c", "a/b"));
        assert!(filter_matches("$share/g/a/#", "a/z"));
        assert!(!filter_matches("$share/g", "a"));
    }
}
