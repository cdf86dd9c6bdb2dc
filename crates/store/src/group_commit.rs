//! Group commit of [`SqliteStore`](crate::SqliteStore)'s restore-record writes.
//!
//! Every connect, subscribe and disconnect writes a restore record; one SQLite transaction per
//! write costs a WAL commit each (measured ~300 µs of CPU per connect+auth+subscribe+disconnect
//! cycle). A writer task instead takes every write that is waiting, up to [`MAX_BATCH`], and
//! applies them in one transaction; each caller still returns only once its write is
//! committed, so durability is unchanged and a lone write waits for no one. The batch is folded
//! to its final state per key (a save then a release of one connection is one row) and saves are
//! written [`ROWS_PER_UPSERT`] rows per statement, because each statement is a round trip to
//! sqlx's SQLite worker thread.

use sqlx::pool::CloseEvent;
use sqlx::{Connection, SqliteConnection, SqlitePool};
use tokio::sync::{mpsc, oneshot};

/// Most writes in one transaction.
pub(crate) const MAX_BATCH: usize = 256;
/// Writes waiting for the writer; callers beyond it wait for room (backpressure).
pub(crate) const QUEUE: usize = 4096;

/// One restore-record write: a statement and its binds.
#[derive(Debug)]
pub(crate) enum Write {
    /// `SAVE`: (project, actor, client_id, record, node).
    Save(String, String, String, Vec<u8>, String),
    /// `RELEASE`: (expires_at, released_seq, ended_s, project, actor, client_id).
    Release(i64, i64, i64, String, String, String),
}

type Job = (Write, oneshot::Sender<Result<(), String>>);

/// The sending side; dropping every handle stops the writer.
#[derive(Debug, Clone)]
pub(crate) struct Writer {
    tx: mpsc::Sender<Job>,
}

/// Where the writer's transactions run.
#[derive(Debug)]
pub(crate) enum Target {
    /// A connection of the store's pool per batch: for an in-memory database, whose one
    /// connection the pool must keep sharing.
    Pool(SqlitePool),
    /// A connection of the writer's own (a file database). SQLite drops a connection's page
    /// cache whenever another connection wrote since its last transaction: batches handed to
    /// the pool's connections in turn re-read every page they touch (measured ~20 page reads
    /// and a cache reset per connect+auth+subscribe+close cycle); one connection that does all
    /// these writes keeps its cache.
    Own(Box<SqliteConnection>),
}

impl Writer {
    /// Starts the writer task on `target`; it stops (and later writes fail) once `closed`, the
    /// store pool's close event, fires. `release` is the statement for a lone release (saves go
    /// through the multi-row upsert, which has the same effect as the store's save).
    pub(crate) fn start(target: Target, closed: CloseEvent, release: &'static str) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(run(target, closed, rx, release));
        Self { tx }
    }

    /// Applies `w` and waits until it is committed.
    pub(crate) async fn write(&self, w: Write) -> Result<(), String> {
        let (done, wait) = oneshot::channel();
        self.tx.send((w, done)).await.map_err(|_| "the store's writer stopped".to_owned())?;
        wait.await.map_err(|_| "the store's writer stopped".to_owned())?
    }
}

async fn run(mut target: Target, closed: CloseEvent, mut rx: mpsc::Receiver<Job>, release: &'static str) {
    let mut batch: Vec<Job> = Vec::with_capacity(MAX_BATCH);
    tokio::pin!(closed);
    loop {
        tokio::select! {
            biased;
            () = &mut closed => break,
            n = rx.recv_many(&mut batch, MAX_BATCH) => if n == 0 { break },
        }
        let result = match &mut target {
            Target::Own(conn) => apply(conn, &batch, release).await,
            Target::Pool(pool) => match pool.acquire().await {
                Ok(mut conn) => apply(&mut conn, &batch, release).await,
                Err(e) => Err(e.to_string()),
            },
        };
        for (_, done) in batch.drain(..) {
            let _ = done.send(result.clone());
        }
    }
    if let Target::Own(conn) = target
        && let Err(error) = conn.close().await
    {
        tracing::warn!(error = &error as &dyn std::error::Error, "Closing the store writer's connection failed.");
    }
}

/// Rows in one multi-row upsert; a fixed set of statement shapes keeps sqlx's statement
/// cache small.
const ROWS_PER_UPSERT: usize = 16;

/// What a batch leaves behind for one key, folded in arrival order.
#[derive(Debug, PartialEq)]
enum Final<'a> {
    /// The record is upserted, held by this node, with this (expiry, release order) (`None`:
    /// held by a live connection).
    Upsert(&'a [u8], &'a str, Option<Ended>),
    /// Only a release: the existing row, if any, gets this expiry, release order and end.
    Release(i64, i64, i64),
}

type Key<'a> = (&'a str, &'a str, &'a str);

/// A release's columns: (expires_at, released_seq, ended_s).
type Ended = (i64, i64, i64);

/// Folds the batch into one final write per key, keeping the order in which keys first appear.
/// A save followed by a release (a connection that subscribed and left within one batch)
/// becomes a single upsert with the release's expiry; a release followed by a save is the save.
fn fold(batch: &[Job]) -> Vec<(Key<'_>, Final<'_>)> {
    let mut out: Vec<(Key<'_>, Final<'_>)> = Vec::with_capacity(batch.len());
    let mut at: std::collections::HashMap<Key<'_>, usize> = std::collections::HashMap::with_capacity(batch.len());
    for (w, _) in batch {
        let (key, next) = match w {
            Write::Save(p, a, c, r, n) => ((p.as_str(), a.as_str(), c.as_str()), Final::Upsert(r, n, None)),
            Write::Release(t, n, e, p, a, c) => ((p.as_str(), a.as_str(), c.as_str()), Final::Release(*t, *n, *e)),
        };
        match at.get(&key) {
            None => {
                at.insert(key, out.len());
                out.push((key, next));
            }
            Some(&i) => {
                let slot = &mut out[i].1;
                *slot = match (&*slot, next) {
                    (Final::Upsert(r, node, _), Final::Release(t, n, e)) => Final::Upsert(r, node, Some((t, n, e))),
                    (_, later) => later,
                };
            }
        }
    }
    out
}

/// The upsert for 1, 2, … [`ROWS_PER_UPSERT`] rows (index `rows - 1`), built once.
static UPSERTS: std::sync::LazyLock<Vec<&'static str>> =
    std::sync::LazyLock::new(|| (1..=ROWS_PER_UPSERT).map(|n| &*Box::leak(upsert_sql(n).into_boxed_str())).collect());

/// `INSERT … VALUES (…), (…) … ON CONFLICT DO UPDATE` for `rows` rows.
fn upsert_sql(rows: usize) -> String {
    let mut sql = String::from(
        "INSERT INTO restore_records (project, actor, client_id, record, expires_at, released_seq, node, ended_s) VALUES ",
    );
    for i in 0..rows {
        sql.push_str(if i == 0 { "(?, ?, ?, ?, ?, ?, ?, ?)" } else { ", (?, ?, ?, ?, ?, ?, ?, ?)" });
    }
    sql.push_str(
        " ON CONFLICT (project, actor, client_id) DO UPDATE SET record = excluded.record, \
         expires_at = excluded.expires_at, released_seq = excluded.released_seq, node = excluded.node, \
         holder_seen_ms = NULL, ended_s = COALESCE(excluded.ended_s, restore_records.ended_s)",
    );
    sql
}

async fn apply(conn: &mut SqliteConnection, batch: &[Job], release: &'static str) -> Result<(), String> {
    // Every statement is a round trip to sqlx's SQLite worker thread, which costs as much as
    // the statement itself: the batch is folded per key and upserts go many rows at a time.
    let finals = fold(batch);
    let mut tx = conn.begin().await.map_err(|e| e.to_string())?;
    let upserts: Vec<(Key<'_>, &[u8], &str, Option<Ended>)> = finals
        .iter()
        .filter_map(|(k, f)| match f {
            Final::Upsert(r, node, at) => Some((*k, *r, *node, *at)),
            Final::Release(..) => None,
        })
        .collect();
    for chunk in upserts.chunks(ROWS_PER_UPSERT) {
        let mut q = sqlx::query(UPSERTS[chunk.len() - 1]);
        for ((p, a, c), r, node, at) in chunk {
            q = q
                .bind(*p)
                .bind(*a)
                .bind(*c)
                .bind(*r)
                .bind(at.map(|(t, _, _)| t))
                .bind(at.map(|(_, n, _)| n))
                .bind(*node)
                .bind(at.map(|(_, _, e)| e));
        }
        q.execute(&mut *tx).await.map_err(|e| e.to_string())?;
    }
    for ((p, a, c), f) in &finals {
        if let Final::Release(at, n, e) = f {
            let q = sqlx::query(release).bind(at).bind(n).bind(e).bind(p).bind(a).bind(c);
            q.execute(&mut *tx).await.map_err(|e| e.to_string())?;
        }
    }
    tx.commit().await.map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(w: Write) -> Job {
        (w, oneshot::channel().0)
    }

    fn save(c: &str, r: &[u8]) -> Job {
        job(Write::Save("p".into(), "a".into(), c.into(), r.to_vec(), "n".into()))
    }

    fn release(c: &str, at: i64) -> Job {
        job(Write::Release(at, at + 1, at - 9, "p".into(), "a".into(), c.into()))
    }

    #[test]
    fn a_batch_folds_to_the_last_state_per_key() {
        let batch = vec![
            save("1", b"x"),
            release("1", 50),
            release("2", 60),
            save("2", b"y"),
            release("3", 70),
            save("4", b"z"),
            save("4", b"w"),
        ];
        let f = fold(&batch);
        let got: Vec<(&str, &Final<'_>)> = f.iter().map(|(k, f)| (k.2, f)).collect();
        assert_eq!(
            got,
            [
                ("1", &Final::Upsert(b"x", "n", Some((50, 51, 41)))),
                ("2", &Final::Upsert(b"y", "n", None)),
                ("3", &Final::Release(70, 71, 61)),
                ("4", &Final::Upsert(b"w", "n", None)),
            ]
        );
    }

    #[test]
    fn the_upsert_has_one_placeholder_group_per_row() {
        let sql = upsert_sql(3);
        assert_eq!(sql.matches("(?, ?, ?, ?, ?, ?, ?, ?)").count(), 3);
    }
}
