//! Group commit of [`PostgresStore`](crate::PostgresStore)'s restore-record releases (issue 36).
//!
//! A draining node releases every connection's record before that connection's 1012. One
//! `UPDATE` (one commit) per release put 10 000 of them in the queue of a pool of
//! `store_pool_size` connections at the same instant: behind a few thousand of them a release
//! waited past the pool's acquire timeout (5 s) and failed, its connection's 1012 went out with
//! the record still in use, and the client's reconnect on another node restored nothing
//! (measured by `skua-bench storm`). A writer task instead takes every release that is waiting,
//! up to [`MAX_BATCH`], and applies them in one statement (the keys `UNNEST`ed from arrays):
//! one round trip, one commit, one pool connection per batch. Each caller still returns only
//! once its release is committed, so the 1012 still follows the commit; a lone release waits
//! for no one. When a batch fails, every release of the batch gets the error.

use sqlx::PgPool;
use sqlx::pool::CloseEvent;
use tokio::sync::{mpsc, oneshot};

/// Most releases in one statement.
pub(crate) const MAX_BATCH: usize = 512;
/// Releases waiting for the writer; callers beyond it wait for room (backpressure).
pub(crate) const QUEUE: usize = 4096;

/// One release: (project, actor, client_id, expires_at, ended_s).
pub(crate) type Release = (String, String, String, i64, i64);

type Job = (Release, oneshot::Sender<Result<(), String>>);

/// The batch in one statement: every row of the batch gets its expiry and end, and a release
/// order of its own (`nextval` per row), as a lone release would.
const RELEASE_BATCH: &str = "UPDATE restore_records r SET expires_at = u.expires_at, \
     released_seq = nextval('restore_records_release_seq'), holder_seen_ms = NULL, ended_s = u.ended_s \
     FROM UNNEST($1::text[], $2::text[], $3::text[], $4::int8[], $5::int8[]) \
         AS u(project, actor, client_id, expires_at, ended_s) \
     WHERE r.project = u.project AND r.actor = u.actor AND r.client_id = u.client_id";

/// The sending side; dropping every handle stops the writer.
#[derive(Debug, Clone)]
pub(crate) struct Releaser {
    tx: mpsc::Sender<Job>,
}

impl Releaser {
    /// Starts the writer task on `pool`; it stops (and later releases fail) once `closed`, the
    /// pool's close event, fires.
    pub(crate) fn start(pool: PgPool, closed: CloseEvent) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(run(pool, closed, rx));
        Self { tx }
    }

    /// Applies `r` and waits until it is committed.
    pub(crate) async fn release(&self, r: Release) -> Result<(), String> {
        let (done, wait) = oneshot::channel();
        self.tx.send((r, done)).await.map_err(|_| "the store's release writer stopped".to_owned())?;
        wait.await.map_err(|_| "the store's release writer stopped".to_owned())?
    }
}

async fn run(pool: PgPool, closed: CloseEvent, mut rx: mpsc::Receiver<Job>) {
    let mut batch: Vec<Job> = Vec::with_capacity(MAX_BATCH);
    tokio::pin!(closed);
    loop {
        tokio::select! {
            biased;
            () = &mut closed => break,
            n = rx.recv_many(&mut batch, MAX_BATCH) => if n == 0 { break },
        }
        let result = apply(&pool, &batch).await.map_err(|e| e.to_string());
        for (_, done) in batch.drain(..) {
            let _ = done.send(result.clone());
        }
    }
}

async fn apply(pool: &PgPool, batch: &[Job]) -> Result<(), sqlx::Error> {
    let n = batch.len();
    let (mut project, mut actor, mut client_id) = (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
    let (mut expires_at, mut ended_s) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for ((p, a, c, e, s), _) in batch {
        project.push(p.as_str());
        actor.push(a.as_str());
        client_id.push(c.as_str());
        expires_at.push(*e);
        ended_s.push(*s);
    }
    sqlx::query(RELEASE_BATCH)
        .bind(project)
        .bind(actor)
        .bind(client_id)
        .bind(expires_at)
        .bind(ended_s)
        .execute(pool)
        .await?;
    Ok(())
}
