//! A node's batched claims and acks of durable delivery (issue 36, docs/durable.md): every
//! durable task of the node hands the claims of its live messages and its clients' acks to one
//! writer, which stores whatever is waiting together — of any connections and consumers — with
//! one [`claim_many`](skua_core::MessageLog::claim_many) and one
//! [`ack_many`](skua_core::MessageLog::ack_many) (one statement each per
//! [`MAX_BATCH_IDS`](skua_core::MAX_BATCH_IDS) rows), so a message fanned out to many durable
//! subscribers of a node costs about one claim statement, not one per subscriber. It never
//! waits for more work: a batch is what queued while the previous one was in the store.

use std::sync::Arc;

use skua_core::{Claim, ConsumerId, Holder, LiveClaim, NodeId, Store};
use tokio::sync::{mpsc, oneshot};

// Requests waiting for the writer at most (`durable_writer_queue`): a durable task waits for
// room beyond that. Batches in the store at the same time (`durable_writers`): one writer takes
// what waits while the others are busy, so under light load one batch holds everything (fewest
// statements) and under heavy load the batches overlap; each uses up to two store connections
// (its claims and its acks).

/// What a durable task asks the writer.
#[derive(Debug)]
enum Request {
    /// Hand these live messages to the connection `conn` of session `session`; the reply has
    /// one [`Claim`] per message, or `None` when the store failed.
    Claim { claims: Vec<(ConsumerId, String)>, session: String, conn: u64, reply: oneshot::Sender<Option<Vec<Claim>>> },
    /// Store these acks; the reply says which were pending, or `None` when the store failed.
    Ack { acks: Vec<(ConsumerId, String)>, reply: oneshot::Sender<Option<Vec<bool>>> },
}

impl Request {
    fn rows(&self) -> usize {
        match self {
            Self::Claim { claims, .. } => claims.len(),
            Self::Ack { acks, .. } => acks.len(),
        }
    }
}

/// The node's writer of claims and acks (its task ends when the last handle is dropped).
#[derive(Debug, Clone)]
pub(crate) struct Writer {
    tx: mpsc::Sender<Request>,
}

impl Writer {
    /// Starts the `writers` writers of `node`'s claims and acks in `store`, with room for
    /// `queue` waiting requests.
    pub(crate) fn spawn(store: Arc<dyn Store>, node: NodeId, queue: usize, writers: usize) -> Self {
        let (tx, rx) = mpsc::channel(queue.max(1));
        let rx = Arc::new(tokio::sync::Mutex::new(rx));
        for _ in 0..writers.max(1) {
            tokio::spawn(run(store.clone(), node.clone(), rx.clone()));
        }
        Self { tx }
    }

    /// Claims `claims` for the connection `conn` of session `session` (on this node): one
    /// [`Claim`] per entry, in order; `None` when the store failed.
    pub(crate) async fn claim(
        &self,
        claims: Vec<(ConsumerId, String)>,
        session: &str,
        conn: u64,
    ) -> Option<Vec<Claim>> {
        if claims.is_empty() {
            return Some(Vec::new());
        }
        let (reply, done) = oneshot::channel();
        let req = Request::Claim { claims, session: session.to_owned(), conn, reply };
        self.tx.send(req).await.ok()?;
        done.await.ok().flatten()
    }

    /// Stores `acks`: whether each was pending, in order; `None` when the store failed.
    pub(crate) async fn ack(&self, acks: Vec<(ConsumerId, String)>) -> Option<Vec<bool>> {
        if acks.is_empty() {
            return Some(Vec::new());
        }
        let (reply, done) = oneshot::channel();
        self.tx.send(Request::Ack { acks, reply }).await.ok()?;
        done.await.ok().flatten()
    }
}

/// One writer: takes what waits (up to [`skua_core::MAX_BATCH_IDS`] rows) and stores it, until
/// the queue closes.
async fn run(store: Arc<dyn Store>, node: NodeId, rx: Arc<tokio::sync::Mutex<mpsc::Receiver<Request>>>) {
    loop {
        let batch = {
            let mut rx = rx.lock().await;
            let Some(first) = rx.recv().await else { return };
            // One pass of the scheduler: the other durable tasks woken by the same fan-out
            // queue their claims now and join this batch instead of starting the next one.
            tokio::task::yield_now().await;
            let mut rows = first.rows();
            let mut batch = vec![first];
            while rows < skua_core::MAX_BATCH_IDS {
                match rx.try_recv() {
                    Ok(r) => {
                        rows += r.rows();
                        batch.push(r);
                    }
                    Err(_) => break,
                }
            }
            batch
        };
        let (mut claims, mut acks) = (Vec::new(), Vec::new());
        for r in batch {
            match r {
                Request::Claim { claims: c, session, conn, reply } => claims.push((c, session, conn, reply)),
                Request::Ack { acks: a, reply } => acks.push((a, reply)),
            }
        }
        tokio::join!(write_claims(&*store, &node, claims), write_acks(&*store, acks));
    }
}

type ClaimRequest = (Vec<(ConsumerId, String)>, String, u64, oneshot::Sender<Option<Vec<Claim>>>);

async fn write_claims(store: &dyn Store, node: &NodeId, requests: Vec<ClaimRequest>) {
    if requests.is_empty() {
        return;
    }
    let all: Vec<LiveClaim<'_>> = requests
        .iter()
        .flat_map(|(claims, session, conn, _)| {
            claims.iter().map(move |(c, m)| LiveClaim {
                consumer: c.as_str(),
                msg_id: m,
                holder: Holder { session, node: node.as_str(), conn: *conn },
            })
        })
        .collect();
    let result = store.claim_many(&all).await;
    drop(all);
    let mut outcomes = match result {
        Ok(o) => Some(o.into_iter()),
        Err(e) => {
            tracing::warn!(error = %e, "Claiming logged messages failed; they are delivered untracked.");
            None
        }
    };
    for (claims, _, _, reply) in requests {
        let mine = outcomes.as_mut().map(|o| o.by_ref().take(claims.len()).collect());
        let _ = reply.send(mine);
    }
}

type AckRequest = (Vec<(ConsumerId, String)>, oneshot::Sender<Option<Vec<bool>>>);

async fn write_acks(store: &dyn Store, requests: Vec<AckRequest>) {
    if requests.is_empty() {
        return;
    }
    let all: Vec<(&str, &str)> =
        requests.iter().flat_map(|(acks, _)| acks.iter().map(|(c, m)| (c.as_str(), m.as_str()))).collect();
    let result = store.ack_many(&all).await;
    drop(all);
    let mut outcomes = match result {
        Ok(o) => Some(o.into_iter()),
        Err(e) => {
            tracing::warn!(error = %e, "Storing acks failed; the messages may be delivered again.");
            None
        }
    };
    for (acks, reply) in requests {
        let mine = outcomes.as_mut().map(|o| o.by_ref().take(acks.len()).collect());
        let _ = reply.send(mine);
    }
}
