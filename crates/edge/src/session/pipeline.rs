//! A connection's publish pipeline (issue 36): the connection keeps reading and submitting its
//! publishes while earlier logged ones commit.
//!
//! A publish to a logged topic is checked and its message queued in the store's append order
//! at once ([`Publisher::begin`](crate::publish::Publisher::begin)); what waits for the commit —
//! the bus publish and the `published` receipt — waits here, in a FIFO of at most
//! `publish_pipeline` publishes and `publish_pipeline_bytes` of data. The read loop takes the
//! next frame only while there is room (backpressure: the socket is not read, nothing is
//! dropped) and finishes the publishes in the order they came as their commits land, so
//! receipts, error frames and bus publishes keep the connection's order, each exactly once, and
//! `published` still follows the commit (N24). While anything is in flight, a later publish
//! (even to a plain topic, or one refused at once) queues behind it, and any other frame first
//! waits until the pipeline is empty: everything else sees the connection's frames handled one
//! after another, as before.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;

use futures_util::stream::{FuturesOrdered, StreamExt};
use skua_protocol::{PublishFrame, ServerFrame};

use super::Session;
use crate::publish::{Accepted, Begun, Committed, Origin, PublishRequest, Refused};

/// What a finished wait hands back: the publish's outcome so far.
pub(crate) enum Outcome {
    /// Refused at once, or a duplicate's answer.
    Done(Result<Accepted, Refused>),
    /// Its commit is over; the publisher finishes it.
    Committed(Committed),
}

type Waiting = Pin<Box<dyn Future<Output = Outcome> + Send>>;

/// The reply-side facts of a publish in flight, in the same order as the waits.
struct Reply {
    topic: String,
    msg_ref: Option<String>,
    bytes: usize,
}

/// The connection's publishes in flight, oldest first.
#[derive(Default)]
pub(crate) struct Pipeline {
    /// Only ever used through `&mut` (`get_mut`, no locking): the mutex makes the session
    /// `Sync` although the waits are not.
    waits: std::sync::Mutex<FuturesOrdered<Waiting>>,
    replies: VecDeque<Reply>,
    bytes: usize,
}

impl Pipeline {
    fn is_empty(&self) -> bool {
        self.replies.is_empty()
    }

    fn waits(&mut self) -> &mut FuturesOrdered<Waiting> {
        self.waits.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Session {
    /// Whether publishes are in flight (the read loop then waits for the next one to finish).
    pub(crate) fn publishing(&self) -> bool {
        !self.pipeline.is_empty()
    }

    /// Whether the pipeline is full: the read loop takes no frame until a publish finished.
    pub(crate) fn pipeline_full(&self) -> bool {
        let c = &self.st.config;
        self.pipeline.replies.len() >= c.publish_pipeline.max(1)
            || (self.pipeline.bytes >= c.publish_pipeline_bytes && !self.pipeline.is_empty())
    }

    /// Waits for the oldest publish in flight to be ready to finish (cancel safe: nothing is
    /// taken until it is); hand it to [`finish_publish`](Self::finish_publish). Never resolves
    /// while nothing is in flight.
    pub(crate) async fn next_publish(&mut self) -> Outcome {
        match self.pipeline.waits().next().await {
            Some(outcome) => outcome,
            None => std::future::pending().await,
        }
    }

    /// Finishes every publish in flight, in order.
    pub(crate) async fn drain_publishes(&mut self) {
        while let Some(outcome) = self.pipeline.waits().next().await {
            self.finish_publish(outcome).await;
        }
    }

    /// Finishes every publish in flight, in order, as the connection ends: the receipts are
    /// queued without waiting for room (nobody may read them any more; the writer drops what
    /// it cannot send), so a client that stopped reading cannot hold the cleanup.
    pub(crate) async fn drain_publishes_closing(&mut self) {
        while let Some(outcome) = self.pipeline.waits().next().await {
            self.finish_one(outcome, false).await;
        }
    }

    /// Finishes a publish [`next_publish`](Self::next_publish) handed out: its bus publish,
    /// then its receipt or error frame.
    pub(crate) async fn finish_publish(&mut self, outcome: Outcome) {
        self.finish_one(outcome, true).await;
    }

    async fn finish_one(&mut self, outcome: Outcome, wait_for_room: bool) {
        let Some(reply) = self.pipeline.replies.pop_front() else { return };
        self.pipeline.bytes = self.pipeline.bytes.saturating_sub(reply.bytes);
        let result = match outcome {
            Outcome::Done(r) => r,
            Outcome::Committed(c) => self.st.publisher.finish(c).await,
        };
        // A group commit makes many receipts ready at once: each waits until the connection's
        // own outbound queue is at most half full (or the connection closes) instead of
        // overflowing it, which closed the publisher 4008 as a slow consumer of its own
        // receipts. The read loop waits meanwhile: backpressure on the publisher.
        if wait_for_room {
            self.conn.room().await;
        }
        self.publish_result(result, &reply.topic, reply.msg_ref.as_deref());
    }

    pub(super) async fn on_publish(&mut self, p: PublishFrame) {
        let v2 = self.v2();
        let Some(a) = &mut self.auth else { return };
        let msg_ref = if v2 { p.msg_ref.as_deref() } else { None };
        // A v2 publisher hears of a failed wake of the room's offline members (N47).
        let wake_reply = v2.then(|| crate::members::WakeReply {
            conn: std::sync::Arc::downgrade(&self.conn),
            topic: p.topic.clone(),
            msg_ref: msg_ref.map(str::to_owned),
        });
        let req = PublishRequest {
            origin: Origin::Connection {
                actor: &a.actor,
                conn: self.conn.id,
                topic: &p.topic,
                topics: &mut a.topics,
                bucket: &mut a.bucket,
                max_message_size: a.max_message_size,
            },
            filter: p.filter,
            data: p.data,
            retain: p.retain,
            qos: p.qos,
            idempotency_key: p.idempotency_key.as_deref(),
            wake_reply,
        };
        let begun = self.st.publisher.begin(req).await;
        // Nothing in flight and nothing to wait for: finished here, as before pipelining.
        let wait: Waiting = match begun {
            Begun::Done(r) if self.pipeline.is_empty() => return self.publish_result(r, &p.topic, msg_ref),
            Begun::Staged(s) if self.pipeline.is_empty() && !s.waits() => {
                let r = self.st.publisher.finish(s.committed().await).await;
                return self.publish_result(r, &p.topic, msg_ref);
            }
            Begun::Done(r) => Box::pin(std::future::ready(Outcome::Done(r))),
            Begun::Staged(s) => {
                let bytes = s.data_len();
                self.pipeline.bytes += bytes;
                self.pipeline.replies.push_back(Reply { topic: p.topic, msg_ref: msg_ref.map(str::to_owned), bytes });
                self.pipeline.waits().push_back(Box::pin(async move { Outcome::Committed(s.committed().await) }));
                return;
            }
        };
        self.pipeline.replies.push_back(Reply { topic: p.topic, msg_ref: msg_ref.map(str::to_owned), bytes: 0 });
        self.pipeline.waits().push_back(wait);
    }

    /// The receipt (or error frame) of a finished publish (the publisher woke the room's offline
    /// members, N47).
    fn publish_result(&mut self, result: Result<Accepted, Refused>, topic: &str, msg_ref: Option<&str>) {
        match result {
            // A repeated idempotency key: acknowledged, nothing published, nobody woken.
            Ok(accepted) if accepted.duplicate => {
                if let Some(r) = msg_ref {
                    self.push(&ServerFrame::Published { topic, msg_ref: r, duplicate: true });
                }
            }
            // `published` only for v2 publishes that carried a msgRef (N7).
            Ok(_) => {
                if let Some(r) = msg_ref {
                    self.push(&ServerFrame::Published { topic, msg_ref: r, duplicate: false });
                }
            }
            Err(refused) => self.publish_refused(refused, topic, msg_ref),
        }
    }
}
