//! Typed keys of durable delivery: whose messages a consumer keeps ([`ConsumerId`]) and which
//! session holds them ([`SessionKey::holder_key`]). Their string forms are what the store keeps,
//! so they are written here once and parsed back only here.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::address::{GroupKey, RoomKey, TopicAddress};
use crate::ids::{ActorId, AppId, ClientId, IdError, ProjectId};
use crate::store::SessionKey;

/// Whose consumer a [`ConsumerId`] names.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ConsumerOf {
    /// A persistent session's own subscription to a logged topic (N25).
    Session {
        /// The logged topic.
        topic: TopicAddress,
        /// The session's actor.
        actor: ActorId,
        /// The session's clientId.
        client_id: Option<ClientId>,
    },
    /// A load-balanced group on a logged topic (N26).
    Group(GroupKey),
}

/// A consumer of a logged topic. Compared and hashed by its stored form; cloning is one
/// reference count.
#[derive(Clone)]
pub struct ConsumerId(Arc<Inner>);

struct Inner {
    of: ConsumerOf,
    /// `s/<topic key>/<actor>/<clientId>` or `g/<topic key>/<group>` (docs/durable.md).
    key: Box<str>,
}

impl ConsumerId {
    /// The consumer of session `key`'s own subscription to `topic`.
    pub fn session(topic: &TopicAddress, key: &SessionKey) -> Self {
        Self::new(ConsumerOf::Session {
            topic: topic.clone(),
            actor: key.actor.clone(),
            client_id: key.client_id.clone(),
        })
    }

    /// The consumer of a load-balanced group.
    pub fn group(group: &GroupKey) -> Self {
        Self::new(ConsumerOf::Group(group.clone()))
    }

    /// The start of the stored form of every group consumer of `project` (for
    /// [`crate::MessageLog::list_consumers`]).
    pub fn group_prefix(project: &ProjectId) -> String {
        format!("g/{project}/")
    }

    fn new(of: ConsumerOf) -> Self {
        let key = match &of {
            ConsumerOf::Session { topic, actor, client_id } => {
                let client = client_id.as_ref().map_or("", ClientId::as_str);
                format!("s/{}/{actor}/{client}", topic.log_key())
            }
            ConsumerOf::Group(g) => format!("g/{}/{}", g.topic.log_key(), g.group),
        };
        Self(Arc::new(Inner { of, key: key.into_boxed_str() }))
    }

    /// Reads a consumer id back from its stored form ([`Self::as_str`]).
    ///
    /// # Errors
    /// [`IdError`] when `s` is not a consumer id.
    pub fn parse(s: &str) -> Result<Self, IdError> {
        let refuse = |rule| IdError { kind: "consumer id", value: s.to_owned(), rule };
        let parts: Vec<&str> = s.split('/').collect();
        let name = |p: &str| (!p.is_empty()).then(|| Arc::<str>::from(p)).ok_or_else(|| refuse("empty name"));
        let topic = |p: &[&str]| -> Result<TopicAddress, IdError> {
            Ok(TopicAddress {
                room: RoomKey { project: ProjectId::parse(p[0])?, app: AppId::parse(p[1])?, room: name(p[2])? },
                topic: name(p[3])?,
            })
        };
        let of = match parts.as_slice() {
            ["s", rest @ .., actor, client] if rest.len() == 4 => ConsumerOf::Session {
                topic: topic(rest)?,
                actor: ActorId::parse(actor)?,
                client_id: if client.is_empty() { None } else { Some(ClientId::parse(client)?) },
            },
            ["g", rest @ .., group] if rest.len() == 4 => {
                ConsumerOf::Group(GroupKey { topic: topic(rest)?, group: name(group)? })
            }
            _ => return Err(refuse("s/<project>/<app>/<room>/<topic>/<actor>/<clientId> or g/…/<group>")),
        };
        Ok(Self::new(of))
    }

    /// Whose consumer it is.
    pub fn of(&self) -> &ConsumerOf {
        &self.0.of
    }

    /// The project it belongs to.
    pub fn project(&self) -> &ProjectId {
        match &self.0.of {
            ConsumerOf::Session { topic, .. } => &topic.room.project,
            ConsumerOf::Group(g) => &g.topic.room.project,
        }
    }

    /// The stored form, as the store's `consumer` arguments take it.
    pub fn as_str(&self) -> &str {
        &self.0.key
    }
}

impl PartialEq for ConsumerId {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.key == other.0.key
    }
}

impl Eq for ConsumerId {}

impl Hash for ConsumerId {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.key.hash(state);
    }
}

impl fmt::Display for ConsumerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.key)
    }
}

impl fmt::Debug for ConsumerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ConsumerId({:?})", &*self.0.key)
    }
}

impl SessionKey {
    /// The session as the store records a holder of pending messages:
    /// `<project>/<actor>/<clientId>` (empty clientId when none).
    pub fn holder_key(&self) -> String {
        let client = self.client_id.as_ref().map_or("", ClientId::as_str);
        format!("{}/{}/{client}", self.project, self.actor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address() -> TopicAddress {
        TopicAddress {
            room: RoomKey {
                project: ProjectId::parse("p1").unwrap(),
                app: AppId::parse("app").unwrap(),
                room: Arc::from("r"),
            },
            topic: Arc::from("jobs"),
        }
    }

    fn key(client: Option<&str>) -> SessionKey {
        SessionKey {
            project: ProjectId::parse("p1").unwrap(),
            actor: ActorId::parse("w").unwrap(),
            client_id: client.map(|c| ClientId::parse(c).unwrap()),
        }
    }

    #[test]
    fn stored_forms_are_pinned() {
        let a = address();
        assert_eq!(ConsumerId::session(&a, &key(Some("c1"))).as_str(), "s/p1/app/r/jobs/w/c1");
        assert_eq!(ConsumerId::session(&a, &key(None)).as_str(), "s/p1/app/r/jobs/w/");
        let g = GroupKey { topic: a, group: Arc::from("g") };
        assert_eq!(ConsumerId::group(&g).as_str(), "g/p1/app/r/jobs/g");
        assert!(ConsumerId::group(&g).as_str().starts_with(&ConsumerId::group_prefix(&g.topic.room.project)));
        assert_eq!(key(Some("c1")).holder_key(), "p1/w/c1");
        assert_eq!(key(None).holder_key(), "p1/w/");
    }

    #[test]
    fn stored_forms_parse_back_to_the_same_consumer() {
        let a = address();
        let g = GroupKey { topic: a.clone(), group: Arc::from("workers") };
        for id in
            [ConsumerId::session(&a, &key(Some("c1"))), ConsumerId::session(&a, &key(None)), ConsumerId::group(&g)]
        {
            let back = ConsumerId::parse(id.as_str()).unwrap();
            assert_eq!(back, id);
            assert_eq!(back.of(), id.of());
            assert_eq!(back.project().as_str(), "p1");
        }
    }

    #[test]
    fn other_strings_are_refused() {
        for bad in [
            "",
            "s",
            "x/p1/app/r/jobs/g",
            "g/p1/app/r/jobs",
            "g/p1/app/r/jobs/g/extra",
            "g/p1/app//jobs/g",
            "g/p 1/app/r/jobs/g",
            "s/p1/app/r/jobs/w",
            "s/p1/app/r/jobs//c1",
            "s/p1/app/r/jobs/w/c 1",
        ] {
            assert!(ConsumerId::parse(bad).is_err(), "{bad:?}");
        }
    }
}
