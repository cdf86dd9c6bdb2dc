//! Why a publish was refused: the one typed refusal of the publish pipeline, whichever door the
//! publish came through (a client's `publish` frame, gRPC `Publish`, `POST /v1/publish`, the
//! admin dashboard). Each door maps it once: to an `error` frame, a `tonic::Status`, an HTTP
//! answer. Nothing of a refused publish was published; only a [`Refused::Bus`] of a logged
//! topic's message leaves it stored (N24: stored first).

use crate::idempotency::IdempotencyError;
use crate::registry::AccessError;
use crate::{BusError, StoreError};

/// Why a publish was refused.
#[derive(Debug)]
pub enum Refused {
    /// The connection's rate limit is used up; no token was taken (N18).
    RateLimited,
    /// `data` is larger than the publisher's limit.
    TooLarge {
        /// The limit, in bytes.
        max_size_bytes: u64,
    },
    /// The project's monthly message quota is used up.
    QuotaExceeded,
    /// The topic does not exist or the actor may not publish there; for a server-side publish,
    /// an address that is not `app/room/topic`.
    Access(AccessError),
    /// A server-side publish names something its project does not have.
    Unknown(Unknown),
    /// A server-side publish's `data` is not exactly one MessagePack value.
    InvalidData,
    /// The filter is invalid: the wire error naming why (`invalid_filter_chars (/, #, +, | not
    /// allowed)`, `filter_too_long …`, `too_many_filters …`; N12).
    Filter(&'static str),
    /// Retaining it would break a retained cap (issue 12).
    RetainedLimit(RetainedRefusal),
    /// The store did not take a logged topic's message (N24).
    Store(StoreError),
    /// The bus did not take the publication.
    Bus(BusError),
    /// The idempotency key is empty or longer than the limit (issue 19).
    InvalidIdempotencyKey {
        /// The longest key accepted, in bytes.
        max_length: usize,
    },
    /// The idempotency backend (Redis in a cluster) could not be asked; nothing was published.
    Idempotency(IdempotencyError),
}

/// What a server-side publish named that its project does not have (each as it was named).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unknown {
    /// The project.
    Project(String),
    /// An app (by id or slug) of `project`.
    App {
        /// The project.
        project: String,
        /// The app as named.
        app: String,
    },
    /// A room of an app.
    Room {
        /// The app's slug.
        app: String,
        /// The room's slug.
        room: String,
    },
    /// A topic that is not one of the app's.
    Topic {
        /// The app's slug.
        app: String,
        /// The topic name.
        topic: String,
    },
    /// The actor to publish as (`from`), in `project`.
    Actor {
        /// The project.
        project: String,
        /// The actor id.
        actor: String,
    },
}

impl std::fmt::Display for Unknown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Project(p) => write!(f, "project {p:?} not found"),
            Self::App { project, app } => write!(f, "app {app:?} not found in project {project:?}"),
            Self::Room { app, room } => write!(f, "room {room:?} not found in app {app:?}"),
            Self::Topic { app, topic } => write!(f, "topic {topic:?} is not one of app {app:?}'s topics"),
            Self::Actor { project, actor } => write!(f, "actor {actor:?} not found in project {project:?}"),
        }
    }
}

/// Which retained cap a retained publish would break (issue 12).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetainedRefusal {
    /// The topic already has `max_retained_per_topic` filter keys.
    Keys,
    /// The topic's retained messages would exceed `max_retained_bytes_per_topic`.
    TopicBytes,
    /// This node's retained messages would exceed `max_retained_bytes`.
    NodeBytes,
    /// The project's retained messages on this node would exceed `max_retained_bytes_per_project`.
    ProjectBytes,
}

impl RetainedRefusal {
    /// The metric label and the start of the client's hint.
    pub fn label(self) -> &'static str {
        match self {
            Self::Keys => "topic_keys",
            Self::TopicBytes => "topic_bytes",
            Self::NodeBytes => "node_bytes",
            Self::ProjectBytes => "project_bytes",
        }
    }

    /// The `hint` of the error frame.
    pub fn hint(self) -> &'static str {
        match self {
            Self::Keys => "the topic has max_retained_per_topic retained filter keys already",
            Self::TopicBytes => "the topic's retained messages would exceed max_retained_bytes_per_topic",
            Self::NodeBytes => "the node's retained messages would exceed max_retained_bytes",
            Self::ProjectBytes => "the project's retained messages would exceed max_retained_bytes_per_project",
        }
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::RateLimited => f.write_str("the publish rate limit is used up"),
            Self::TooLarge { max_size_bytes } => write!(f, "data is too large: at most {max_size_bytes} bytes"),
            Self::QuotaExceeded => f.write_str("the project's monthly message quota is used up"),
            Self::Access(e) => f.write_str(e.hint),
            Self::Unknown(u) => u.fmt(f),
            Self::InvalidData => f.write_str("data must be exactly one MessagePack value"),
            Self::Filter(e) => f.write_str(e),
            Self::RetainedLimit(r) => write!(f, "retained_limit_exceeded: {}", r.hint()),
            Self::Store(e) => {
                f.write_str("the store refused the logged message")?;
                chain(f, e)
            }
            Self::Bus(e) => {
                f.write_str("the message bus refused it")?;
                chain(f, e)
            }
            Self::InvalidIdempotencyKey { max_length } => {
                write!(f, "idempotencyKey must be a string of 1 to {max_length} bytes")
            }
            Self::Idempotency(e) => {
                f.write_str("the idempotency key could not be checked")?;
                chain(f, e)
            }
        }
    }
}

/// `: cause: its cause…` of `e`.
fn chain(f: &mut std::fmt::Formatter<'_>, e: &dyn std::error::Error) -> std::fmt::Result {
    let mut cause = Some(e);
    while let Some(c) = cause {
        write!(f, ": {c}")?;
        cause = c.source();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_cause_and_its_chain() {
        assert_eq!(Refused::TooLarge { max_size_bytes: 10 }.to_string(), "data is too large: at most 10 bytes");
        assert_eq!(
            Refused::RetainedLimit(RetainedRefusal::Keys).to_string(),
            "retained_limit_exceeded: the topic has max_retained_per_topic retained filter keys already"
        );
        let topic = Unknown::Topic { app: "demo".into(), topic: "nope".into() };
        assert_eq!(Refused::Unknown(topic).to_string(), "topic \"nope\" is not one of app \"demo\"'s topics");
        let bus = Refused::Bus(BusError::Backend("socket closed".into()));
        assert_eq!(bus.to_string(), "the message bus refused it: message bus backend error: socket closed");
    }
}
