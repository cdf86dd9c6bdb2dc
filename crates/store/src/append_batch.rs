//! Group commit of the message log's appends, for both SQL stores.
//!
//! One transaction (one commit, one WAL flush) per logged publish capped a publisher at about
//! 1 500 publishes/s on Postgres. An [`Appender`] task instead takes every append that is
//! waiting, up to [`MAX_BATCH`] messages or [`MAX_BATCH_BYTES`] of data, and writes them in one
//! transaction: on Postgres one statement (the messages `UNNEST`ed from arrays, their pending
//! rows and trigger outbox rows in data-modifying CTEs), on SQLite the usual statements per
//! message inside one transaction. Each caller still returns only once its message is
//! committed, so `published` still follows the commit (N24) and a trigger's outbox row is still
//! written with its message (N45); a lone append waits for no one. Messages are written in the
//! order they were queued, so each connection's messages keep their order in the log. When a
//! batch fails (the transaction is rolled back), every append of the batch gets the error.
//!
//! The queue holds [`QUEUE`] appends; callers beyond it wait for room (backpressure onto the
//! publishing connections).

use std::future::Future;

use skua_core::{AppendCommit, NewMessage, StoreError};
use sqlx::pool::CloseEvent;
use tokio::sync::{mpsc, oneshot};

/// Most messages in one transaction. Where commits are slow (a busy disk or CPU), rows per
/// commit carry one connection's rate: at 256, a lane's ~40 ms commit cycle held one
/// connection to ~4 500 publishes/s on Postgres; at 1024 it took 20 000/s (docs/benchmarks.md,
/// issue 36). Connections pipeline four batches' worth (`publish_pipeline`).
pub(crate) const MAX_BATCH: usize = 1024;
/// A batch stops growing once its messages' data reach this many bytes (it may pass it by one
/// message).
pub(crate) const MAX_BATCH_BYTES: usize = 4 << 20;
/// Appends waiting for the writer; callers beyond it wait for room.
pub(crate) const QUEUE: usize = 8192;

/// An append, owned, as the writer task holds it.
#[derive(Debug)]
pub(crate) struct Append {
    pub msg_id: String,
    pub topic: String,
    pub filter: Option<String>,
    pub publisher: String,
    pub timestamp_ms: i64,
    pub qos: i16,
    pub data: Vec<u8>,
    /// Unix seconds of the append (`created_at`, and the consumers' expiry cut-off).
    pub now: i64,
    /// The trigger's (owner, lease until in unix ms), written to the outbox with the message.
    pub trigger: Option<(String, i64)>,
}

impl Append {
    fn of(m: &NewMessage<'_>, now_unix_s: u64) -> Self {
        use crate::sql::unix_to_sql;
        Self {
            msg_id: m.msg_id.to_owned(),
            topic: m.topic.to_owned(),
            filter: m.filter.map(str::to_owned),
            publisher: m.publisher.to_owned(),
            timestamp_ms: unix_to_sql(m.timestamp_ms),
            qos: i16::from(m.qos),
            data: m.data.to_vec(),
            now: unix_to_sql(now_unix_s),
            trigger: m.trigger.map(|t| (t.owner.to_owned(), unix_to_sql(t.lease_until_ms))),
        }
    }
}

type Job = (Append, oneshot::Sender<Result<i64, String>>);

/// The sending side of a store's append writers; the writers stop when the store's pool closes.
#[derive(Debug, Clone)]
pub(crate) struct Appender {
    /// One queue per writer ("lane"); a connection's appends always go to the same lane.
    lanes: Vec<mpsc::Sender<Job>>,
    backend: &'static str,
}

/// The lane of the appends of `publisher`'s `stream` (its connection) among `lanes`.
fn lane_of(publisher: &str, stream: u64, lanes: usize) -> usize {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    let h = BuildHasherDefault::<DefaultHasher>::default().hash_one((publisher, stream));
    usize::try_from(h % lanes.max(1) as u64).unwrap_or(0)
}

impl Appender {
    /// Starts `lanes` writer tasks (at least one), each with its own share of [`QUEUE`]:
    /// `apply` writes one batch in one transaction and returns each message's `seq`, in
    /// order. The lanes' batches are in flight at the same time (so one commit's latency does
    /// not cap the store's appends); a connection's appends all go to one lane, so they commit
    /// in the order they were queued. The tasks stop once `closed` (the pool's close event)
    /// fires.
    pub(crate) fn start<F, Fut>(backend: &'static str, lanes: usize, closed: impl Fn() -> CloseEvent, apply: F) -> Self
    where
        F: Fn(Vec<Append>) -> Fut + Clone + Send + 'static,
        Fut: Future<Output = Result<Vec<i64>, sqlx::Error>> + Send + 'static,
    {
        let lanes = lanes.max(1);
        let senders = (0..lanes)
            .map(|_| {
                let (tx, rx) = mpsc::channel((QUEUE / lanes).max(MAX_BATCH));
                tokio::spawn(run(closed(), rx, apply.clone()));
                tx
            })
            .collect();
        Self { lanes: senders, backend }
    }

    /// Appends `m` and waits until it is committed; returns its `seq`.
    pub(crate) async fn append(&self, m: &NewMessage<'_>, now_unix_s: u64) -> Result<u64, StoreError> {
        self.enqueue(m, now_unix_s).await?.await
    }

    /// Queues `m` (waiting only for room in its lane's queue); the returned future resolves
    /// once it is committed.
    pub(crate) async fn enqueue(&self, m: &NewMessage<'_>, now_unix_s: u64) -> Result<AppendCommit, StoreError> {
        let backend = self.backend;
        let fail = move |why: String| crate::error::failed(backend, "append", why);
        let (done, wait) = oneshot::channel();
        let lane = &self.lanes[lane_of(m.publisher, m.stream, self.lanes.len())];
        lane.send((Append::of(m, now_unix_s), done)).await.map_err(|_| fail("the store's writer stopped".into()))?;
        Ok(Box::pin(async move {
            let seq = wait.await.map_err(|_| fail("the store's writer stopped".into()))?.map_err(fail)?;
            Ok(u64::try_from(seq).unwrap_or(0))
        }))
    }
}

async fn run<F, Fut>(closed: CloseEvent, mut rx: mpsc::Receiver<Job>, apply: F)
where
    F: Fn(Vec<Append>) -> Fut,
    Fut: Future<Output = Result<Vec<i64>, sqlx::Error>>,
{
    tokio::pin!(closed);
    loop {
        let first = tokio::select! {
            biased;
            () = &mut closed => break,
            j = rx.recv() => match j { Some(j) => j, None => break },
        };
        let mut bytes = first.0.data.len();
        let mut messages = vec![first.0];
        let mut waiting = vec![first.1];
        while messages.len() < MAX_BATCH && bytes < MAX_BATCH_BYTES {
            let Ok((m, done)) = rx.try_recv() else { break };
            bytes += m.data.len();
            messages.push(m);
            waiting.push(done);
        }
        let n = messages.len();
        match apply(messages).await {
            Ok(seqs) if seqs.len() == n => {
                for (done, seq) in waiting.into_iter().zip(seqs) {
                    let _ = done.send(Ok(seq));
                }
            }
            Ok(seqs) => {
                let why = format!("the batch returned {} sequence numbers for {n} messages", seqs.len());
                tracing::error!(%why, "Appending logged messages failed.");
                for done in waiting {
                    let _ = done.send(Err(why.clone()));
                }
            }
            Err(e) => {
                let why = e.to_string();
                for done in waiting {
                    let _ = done.send(Err(why.clone()));
                }
            }
        }
    }
}

/// Postgres: the whole batch in one statement (its own transaction, one round trip). Rows go
/// in array order (`WITH ORDINALITY … ORDER BY`), so `seq` follows the queue's order.
pub(crate) const PG_APPEND_BATCH: &str = "WITH u AS ( \
         SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::int8[], $6::int2[], \
                              $7::bytea[], $8::int8[], $9::text[], $10::int8[]) WITH ORDINALITY \
             AS u(msg_id, topic, filter_key, publisher, timestamp_ms, qos, data, created_at, owner, lease_until, ord)), \
     m AS ( \
         INSERT INTO log_messages (msg_id, topic, filter_key, publisher, timestamp_ms, qos, data, created_at) \
         SELECT msg_id, topic, filter_key, publisher, timestamp_ms, qos, data, created_at FROM u ORDER BY ord \
         RETURNING seq, msg_id, topic, filter_key, publisher, created_at), \
     p AS ( \
         INSERT INTO log_pending (consumer_id, seq, msg_id) \
         SELECT c.id, m.seq, m.msg_id FROM m JOIN log_consumers c ON c.topic = m.topic \
         WHERE c.expires_at > m.created_at AND c.actor <> m.publisher \
         AND (c.wildcard OR EXISTS (SELECT 1 FROM log_consumer_filters f \
                                    WHERE f.consumer_id = c.id AND f.filter_key = m.filter_key))), \
     o AS ( \
         INSERT INTO trigger_outbox (seq, msg_id, owner, lease_until) \
         SELECT m.seq, m.msg_id, u.owner, u.lease_until FROM m JOIN u ON u.msg_id = m.msg_id \
         WHERE u.owner IS NOT NULL) \
     SELECT m.seq FROM m JOIN u ON u.msg_id = m.msg_id ORDER BY u.ord";

/// Writes a batch on Postgres with [`PG_APPEND_BATCH`].
pub(crate) async fn apply_postgres(pool: &sqlx::PgPool, batch: Vec<Append>) -> Result<Vec<i64>, sqlx::Error> {
    let n = batch.len();
    let mut cols = Columns::with_capacity(n);
    for a in batch {
        cols.msg_id.push(a.msg_id);
        cols.topic.push(a.topic);
        cols.filter.push(a.filter);
        cols.publisher.push(a.publisher);
        cols.timestamp_ms.push(a.timestamp_ms);
        cols.qos.push(a.qos);
        cols.data.push(a.data);
        cols.now.push(a.now);
        let (owner, lease) = a.trigger.unzip();
        cols.owner.push(owner);
        cols.lease.push(lease);
    }
    sqlx::query_scalar(PG_APPEND_BATCH)
        .bind(cols.msg_id)
        .bind(cols.topic)
        .bind(cols.filter)
        .bind(cols.publisher)
        .bind(cols.timestamp_ms)
        .bind(cols.qos)
        .bind(cols.data)
        .bind(cols.now)
        .bind(cols.owner)
        .bind(cols.lease)
        .fetch_all(pool)
        .await
}

/// A batch as one array per column.
#[derive(Default)]
struct Columns {
    msg_id: Vec<String>,
    topic: Vec<String>,
    filter: Vec<Option<String>>,
    publisher: Vec<String>,
    timestamp_ms: Vec<i64>,
    qos: Vec<i16>,
    data: Vec<Vec<u8>>,
    now: Vec<i64>,
    owner: Vec<Option<String>>,
    lease: Vec<Option<i64>>,
}

impl Columns {
    fn with_capacity(n: usize) -> Self {
        Self {
            msg_id: Vec::with_capacity(n),
            topic: Vec::with_capacity(n),
            filter: Vec::with_capacity(n),
            publisher: Vec::with_capacity(n),
            timestamp_ms: Vec::with_capacity(n),
            qos: Vec::with_capacity(n),
            data: Vec::with_capacity(n),
            now: Vec::with_capacity(n),
            owner: Vec::with_capacity(n),
            lease: Vec::with_capacity(n),
        }
    }
}

/// Messages in one multi-row insert on SQLite; a fixed set of statement shapes keeps sqlx's
/// statement cache small.
const SQLITE_ROWS_PER_INSERT: usize = 32;

/// The message insert for 1, 2, … [`SQLITE_ROWS_PER_INSERT`] rows (index `rows - 1`), built once.
static SQLITE_INSERTS: std::sync::LazyLock<Vec<&'static str>> = std::sync::LazyLock::new(|| {
    (1..=SQLITE_ROWS_PER_INSERT).map(|n| &*Box::leak(sqlite_insert_sql(n).into_boxed_str())).collect()
});

/// `INSERT INTO log_messages … VALUES (…), (…) … RETURNING seq, msg_id` for `rows` rows.
fn sqlite_insert_sql(rows: usize) -> String {
    let mut sql = String::from(
        "INSERT INTO log_messages (msg_id, topic, filter_key, publisher, timestamp_ms, qos, data, created_at) VALUES ",
    );
    for i in 0..rows {
        sql.push_str(if i == 0 { "(?, ?, ?, ?, ?, ?, ?, ?)" } else { ", (?, ?, ?, ?, ?, ?, ?, ?)" });
    }
    sql.push_str(" RETURNING seq, msg_id");
    sql
}

/// The pending rows of every message with `seq` in `$1..=$2` (one insert's rows: the
/// transaction holds SQLite's write lock, so no other writer's rows are in that range), as
/// Postgres' [`PG_APPEND_BATCH`] makes them: consumers of the topic, live at the message's
/// time, not the publisher's, whose filters match.
const SQLITE_PENDING_RANGE: &str = "INSERT INTO log_pending (consumer_id, seq, msg_id) \
     SELECT c.id, m.seq, m.msg_id FROM log_messages m JOIN log_consumers c ON c.topic = m.topic \
     WHERE m.seq BETWEEN ?1 AND ?2 AND c.expires_at > m.created_at AND c.actor <> m.publisher \
     AND (c.wildcard OR EXISTS (SELECT 1 FROM log_consumer_filters f \
                                WHERE f.consumer_id = c.id AND f.filter_key = m.filter_key))";

/// Writes a batch on SQLite in one transaction: the messages [`SQLITE_ROWS_PER_INSERT`] at a
/// time, each insert's pending rows in one statement, and the outbox row of each message with
/// a trigger. Every statement is a round trip to sqlx's SQLite worker thread, which costs more
/// than the statement itself (docs/benchmarks.md), hence the multi-row statements.
pub(crate) async fn apply_sqlite(pool: &sqlx::SqlitePool, batch: Vec<Append>) -> Result<Vec<i64>, sqlx::Error> {
    use crate::log::INSERT_OUTBOX;
    let mut tx = pool.begin().await?;
    let mut seqs = Vec::with_capacity(batch.len());
    for chunk in batch.chunks(SQLITE_ROWS_PER_INSERT) {
        let mut q = sqlx::query_as::<_, (i64, String)>(SQLITE_INSERTS[chunk.len() - 1]);
        for a in chunk {
            q = q
                .bind(&a.msg_id)
                .bind(&a.topic)
                .bind(&a.filter)
                .bind(&a.publisher)
                .bind(a.timestamp_ms)
                .bind(a.qos)
                .bind(&a.data)
                .bind(a.now);
        }
        let rows = q.fetch_all(&mut *tx).await?;
        // RETURNING's row order is not promised: match the seqs to the chunk by msgId.
        let by_id: std::collections::HashMap<&str, i64> = rows.iter().map(|(seq, id)| (id.as_str(), *seq)).collect();
        let chunk_seqs: Vec<i64> = chunk.iter().map(|a| by_id.get(a.msg_id.as_str()).copied().unwrap_or(0)).collect();
        let (lo, hi) = chunk_seqs.iter().fold((i64::MAX, i64::MIN), |(lo, hi), s| (lo.min(*s), hi.max(*s)));
        sqlx::query(SQLITE_PENDING_RANGE).bind(lo).bind(hi).execute(&mut *tx).await?;
        for (a, seq) in chunk.iter().zip(&chunk_seqs) {
            if let Some((owner, lease)) = &a.trigger {
                sqlx::query(INSERT_OUTBOX).bind(seq).bind(&a.msg_id).bind(owner).bind(lease).execute(&mut *tx).await?;
            }
        }
        seqs.extend(chunk_seqs);
    }
    tx.commit().await?;
    Ok(seqs)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_sqlite_insert_has_one_placeholder_group_per_row() {
        let sql = super::sqlite_insert_sql(3);
        assert_eq!(sql.matches("(?, ?, ?, ?, ?, ?, ?, ?)").count(), 3);
    }

    #[test]
    fn a_publishers_connection_always_gets_the_same_lane() {
        let a = super::lane_of("alice", 7, 4);
        assert!((0..10).all(|_| super::lane_of("alice", 7, 4) == a));
        assert!(a < 4);
        assert_eq!(super::lane_of("alice", 7, 1), 0);
        // One actor's connections spread over the lanes.
        let used: std::collections::BTreeSet<usize> = (0..64).map(|c| super::lane_of("alice", c, 4)).collect();
        assert!(used.len() > 1, "{used:?}");
    }
}
