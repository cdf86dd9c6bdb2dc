//! Identifier newtypes. Each is checked once, where it enters the system, by `parse`.

use std::fmt;
use std::sync::Arc;

/// Why an identifier was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {kind} {value:?}: {rule}")]
pub struct IdError {
    /// What kind of identifier.
    pub kind: &'static str,
    /// The refused value.
    pub value: String,
    /// The rule it broke.
    pub rule: &'static str,
}

/// Whether `s` is a slug: 1–64 of `a-z`, `A-Z`, `0-9`, `-`, `_`.
pub fn is_slug(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

macro_rules! slug_id {
    ($(#[$doc:meta])* $name:ident, $kind:literal) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(Arc<str>);

        impl $name {
            /// Checks `s` (1–64 of letters, digits, `-`, `_`).
            ///
            /// # Errors
            /// [`IdError`] when `s` is not a slug.
            pub fn parse(s: &str) -> Result<Self, IdError> {
                if is_slug(s) {
                    Ok(Self(Arc::from(s)))
                } else {
                    Err(IdError { kind: $kind, value: s.to_owned(), rule: "1-64 letters, digits, '-' or '_'" })
                }
            }

            /// The identifier as a string.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), &*self.0)
            }
        }
    };
}

slug_id!(
    /// A project: the tenant that owns apps, actors and limits.
    ProjectId, "project id"
);
slug_id!(
    /// An app inside a project (its internal id, not its slug).
    AppId, "app id"
);
slug_id!(
    /// An actor (the `actorTokenId` clients see).
    ActorId, "actor id"
);
slug_id!(
    /// A client instance of a persistent actor (N9).
    ClientId, "clientId"
);
slug_id!(
    /// A node of the cluster.
    NodeId, "node id"
);
slug_id!(
    /// One connection's restore record (N23), for an actor without clientId: picked by the edge
    /// when the connection authenticates, or taken over from the record it claimed.
    RecordId, "restore record id"
);

/// A connection, unique within its node for the node's lifetime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u64);

impl fmt::Display for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "c{}", self.0)
    }
}

/// The kind of actor, which decides session persistence and publish rights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ActorType {
    /// A person using an app.
    User,
    /// A device.
    Device,
    /// An AI agent or worker: persistent sessions with a clientId.
    Agent,
    /// Coordinates agents: persistent sessions with a clientId.
    Orchestrator,
    /// Reads only: may subscribe and read presence, never publish.
    Observer,
    /// A backend service.
    Server,
    /// A service actor created through the REST API (NoLag's `service`): as `user`.
    Service,
    /// A short-lived session actor (NoLag's `session`): as `user`.
    Session,
}

impl ActorType {
    /// Every actor type.
    pub const ALL: [Self; 8] = [
        Self::User,
        Self::Device,
        Self::Agent,
        Self::Orchestrator,
        Self::Observer,
        Self::Server,
        Self::Service,
        Self::Session,
    ];

    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Device => "device",
            Self::Agent => "agent",
            Self::Orchestrator => "orchestrator",
            Self::Observer => "observer",
            Self::Server => "server",
            Self::Service => "service",
            Self::Session => "session",
        }
    }

    /// Parses the wire string.
    ///
    /// # Errors
    /// [`IdError`] for an unknown type.
    pub fn parse(s: &str) -> Result<Self, IdError> {
        Self::ALL.into_iter().find(|t| t.as_str() == s).ok_or_else(|| IdError {
            kind: "actor type",
            value: s.to_owned(),
            rule: "one of user, device, agent, orchestrator, observer, server, service, session",
        })
    }

    /// Whether sessions of this type persist per clientId (N25).
    pub fn has_persistent_sessions(self) -> bool {
        matches!(self, Self::Agent | Self::Orchestrator)
    }

    /// Whether this type may ever publish (observers may not).
    pub fn may_publish(self) -> bool {
        self != Self::Observer
    }

    /// Whether a persistent presence of this type may carry a `wake` (N47; issue 33): the types
    /// that are woken, `agent`, `orchestrator` and `device`.
    pub fn may_be_woken(self) -> bool {
        matches!(self, Self::Agent | Self::Orchestrator | Self::Device)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs() {
        assert!(ClientId::parse("worker-1_A").is_ok());
        assert!(ClientId::parse(&"a".repeat(64)).is_ok());
        assert!(ClientId::parse(&"a".repeat(65)).is_err());
        for bad in ["", "a b", "a/b", "é", "a.b"] {
            assert!(ClientId::parse(bad).is_err(), "{bad}");
        }
    }
}
