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
//! On Postgres a lane's batches overlap (issue 36): a batch's transaction is opened (`BEGIN`)
//! while the one before is written, and its statement runs while the one before waits for its
//! commit's WAL flush, up to [`LANE_DEPTH`] transactions per lane. Measured on a loaded
//! machine, one batch at a time left Postgres idle (waiting for the client) most of the time:
//! a lane's cycle was the round trips one after another, each paying the scheduler's latency,
//! not the store's work. The next batch's statement only starts once the previous one
//! returned, so it takes higher `seq`s, and its `COMMIT` is only sent once the previous commit
//! is over, so a lane's batches become visible in their order; each append is still answered
//! only after its own transaction committed. Batch sizes are counted for `/metrics`
//! (`skua_store_append_batch_messages`).
//!
//! The queue holds [`QUEUE`] appends; callers beyond it wait for room (backpressure onto the
//! publishing connections).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use skua_core::{AppendBatches, AppendCommit, NewMessage, StoreError};
use sqlx::pool::CloseEvent;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};

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

/// Upper bounds of the batch-size histogram's buckets, in messages (up to [`MAX_BATCH`]).
const BATCH_BUCKETS: [u64; 11] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024];

/// Messages per transaction of a store's append writers (all lanes together).
#[derive(Debug, Default)]
struct BatchSizes {
    /// Non-cumulative counts per bucket of [`BATCH_BUCKETS`]; the last one is +Inf.
    buckets: [AtomicU64; BATCH_BUCKETS.len() + 1],
    count: AtomicU64,
    sum: AtomicU64,
}

impl BatchSizes {
    fn observe(&self, n: usize) {
        let n = n as u64;
        let i = BATCH_BUCKETS.iter().position(|b| n <= *b).unwrap_or(BATCH_BUCKETS.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(n, Ordering::Relaxed);
    }

    fn snapshot(&self) -> AppendBatches {
        let mut acc = 0;
        let buckets = BATCH_BUCKETS
            .iter()
            .zip(&self.buckets)
            .map(|(b, c)| {
                acc += c.load(Ordering::Relaxed);
                (*b, acc)
            })
            .collect();
        AppendBatches { buckets, count: self.count.load(Ordering::Relaxed), sum: self.sum.load(Ordering::Relaxed) }
    }
}

/// The sending side of a store's append writers; the writers stop when the store's pool closes.
#[derive(Debug, Clone)]
pub(crate) struct Appender {
    /// One queue per writer ("lane"); a connection's appends always go to the same lane.
    lanes: Vec<mpsc::Sender<Job>>,
    backend: &'static str,
    /// Messages per transaction, every lane's.
    sizes: Arc<BatchSizes>,
}

/// The lane of the appends of `publisher`'s `stream` (its connection) among `lanes`.
fn lane_of(publisher: &str, stream: u64, lanes: usize) -> usize {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    let h = BuildHasherDefault::<DefaultHasher>::default().hash_one((publisher, stream));
    usize::try_from(h % lanes.max(1) as u64).unwrap_or(0)
}

impl Appender {
    /// Starts `lanes` writer tasks (at least one), each with its own share of [`QUEUE`]:
    /// `open` starts a batch's transaction (on Postgres: takes a connection of the pool and
    /// `BEGIN`s), `write` writes one batch in it and returns each message's `seq`, in order,
    /// with its commit ([`Written`]). The lanes' batches are in flight at the same time (so one commit's latency
    /// does not cap the store's appends); a connection's appends all go to one lane, so they
    /// take their `seq`s in the order they were queued. A lane writes its next batch as soon as
    /// the previous one has its `seq`s, while that one's commit is still under way, up to
    /// [`LANE_DEPTH`] transactions, and while a batch is written with more appends waiting, the
    /// next batch's transaction is opened beside it: a busy lane's batches follow each other
    /// one statement apart. At most `connections` transactions (all lanes together) are open.
    /// The tasks stop once `closed` (the pool's close event) fires.
    pub(crate) fn start<T, O, OFut, W, WFut>(
        backend: &'static str,
        lanes: usize,
        connections: usize,
        closed: impl Fn() -> CloseEvent,
        open: O,
        write: W,
    ) -> Self
    where
        T: Send + 'static,
        O: Fn() -> OFut + Clone + Send + Sync + 'static,
        OFut: Future<Output = Result<T, sqlx::Error>> + Send + 'static,
        W: Fn(T, Vec<Append>) -> WFut + Clone + Send + Sync + 'static,
        WFut: Future<Output = Result<Written, sqlx::Error>> + Send + 'static,
    {
        let lanes = lanes.max(1);
        let sizes = Arc::new(BatchSizes::default());
        let store = Arc::new(Semaphore::new(connections.max(1)));
        let senders = (0..lanes)
            .map(|_| {
                let (tx, rx) = mpsc::channel((QUEUE / lanes).max(MAX_BATCH));
                let lane =
                    Lane { sizes: sizes.clone(), store: store.clone(), depth: Arc::new(Semaphore::new(LANE_DEPTH)) };
                tokio::spawn(run(closed(), rx, open.clone(), write.clone(), lane));
                tx
            })
            .collect();
        Self { lanes: senders, backend, sizes }
    }

    /// Messages per transaction so far (every lane's batches, failed ones included).
    pub(crate) fn batches(&self) -> AppendBatches {
        self.sizes.snapshot()
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

/// Transactions one lane has open: one whose commit is under way, one whose batch is being
/// written, and one opening for the batch after (each step a round trip to the store).
const LANE_DEPTH: usize = 3;

/// Commits a written batch's transaction.
pub(crate) type Commit = std::pin::Pin<Box<dyn Future<Output = Result<(), sqlx::Error>> + Send>>;

/// A batch written, its commit maybe still to come.
pub(crate) struct Written {
    /// Each message's `seq`, in the batch's order.
    pub seqs: Vec<i64>,
    /// Commits the batch's transaction; `None`: committed already.
    pub commit: Option<Commit>,
}

/// What a lane's writer shares.
struct Lane {
    sizes: Arc<BatchSizes>,
    /// The store's transactions for appends, every lane's.
    store: Arc<Semaphore>,
    /// This lane's transactions ([`LANE_DEPTH`]).
    depth: Arc<Semaphore>,
}

/// Answers every append of a batch with `result` (its `seq`s, in order, or the error).
fn answer(waiting: Vec<oneshot::Sender<Result<i64, String>>>, result: Result<Vec<i64>, String>) {
    match result {
        Ok(seqs) => {
            for (done, seq) in waiting.into_iter().zip(seqs) {
                let _ = done.send(Ok(seq));
            }
        }
        Err(why) => {
            for done in waiting {
                let _ = done.send(Err(why.clone()));
            }
        }
    }
}

/// A transaction opened for a lane's next batch, with the permits it holds.
type Opened<T> = (T, OwnedSemaphorePermit, OwnedSemaphorePermit);

/// Takes a transaction of the lane and of the store, and opens it.
async fn open_one<T, O, OFut>(lane: &Lane, open: &O) -> Result<Opened<T>, sqlx::Error>
where
    O: Fn() -> OFut,
    OFut: Future<Output = Result<T, sqlx::Error>>,
{
    let closed = || sqlx::Error::PoolClosed;
    let mine = lane.depth.clone().acquire_owned().await.map_err(|_| closed())?;
    let store = lane.store.clone().acquire_owned().await.map_err(|_| closed())?;
    Ok((open().await?, mine, store))
}

async fn run<T, O, OFut, W, WFut>(closed: CloseEvent, mut rx: mpsc::Receiver<Job>, open: O, write: W, lane: Lane)
where
    O: Fn() -> OFut,
    OFut: Future<Output = Result<T, sqlx::Error>>,
    W: Fn(T, Vec<Append>) -> WFut,
    WFut: Future<Output = Result<Written, sqlx::Error>> + Send + 'static,
{
    tokio::pin!(closed);
    // A transaction opened beside the previous batch, for appends that were already waiting.
    let mut ready: Option<Result<Opened<T>, sqlx::Error>> = None;
    // Fires (is dropped) once the lane's latest batch is over.
    let mut last_commit: Option<oneshot::Receiver<()>> = None;
    loop {
        if rx.is_empty() {
            // Nothing waits: an idle lane holds no open transaction (dropping it rolls back).
            ready = None;
        }
        let first = tokio::select! {
            biased;
            () = &mut closed => break,
            j = rx.recv() => match j { Some(j) => j, None => break },
        };
        let opened = match ready.take() {
            Some(r) => r,
            None => tokio::select! {
                biased;
                () = &mut closed => break,
                r = open_one(&lane, &open) => r,
            },
        };
        // Meanwhile the batch kept growing.
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
        lane.sizes.observe(n);
        let (tx, mine, store) = match opened {
            Ok(o) => o,
            Err(e) => {
                answer(waiting, Err(e.to_string()));
                continue;
            }
        };
        // Answers the batch's appends once it committed. Its commit is under way (holding its
        // permits) as soon as the statement returned, whatever the next transaction waits for;
        // it is sent only once the lane's previous commit is over, so a lane's batches become
        // visible in their order (a connection's messages are never seen out of order).
        let (committed, next) = oneshot::channel::<()>();
        let previous = last_commit.replace(next);
        let written = write(tx, messages);
        let batch = async move {
            let outcome = written.await;
            tokio::spawn(async move {
                if let Some(p) = previous {
                    let _ = p.await;
                }
                let result = match outcome {
                    Ok(Written { seqs, .. }) if seqs.len() != n => {
                        // Dropping the commit rolls the transaction back.
                        let why = format!("the batch returned {} sequence numbers for {n} messages", seqs.len());
                        tracing::error!(%why, "Appending logged messages failed.");
                        Err(why)
                    }
                    Ok(Written { seqs, commit: None }) => Ok(seqs),
                    Ok(Written { seqs, commit: Some(commit) }) => {
                        commit.await.map(|()| seqs).map_err(|e| e.to_string())
                    }
                    Err(e) => Err(e.to_string()),
                };
                drop((mine, store, committed));
                answer(waiting, result);
            });
        };
        if rx.is_empty() {
            batch.await;
        } else {
            // More appends wait: the next transaction opens while this batch is written.
            let ((), next) = tokio::join!(batch, open_one(&lane, &open));
            ready = Some(next);
        }
    }
}

/// Postgres: the whole batch in one statement (one round trip, inside the batch's transaction).
/// Rows go in array order (`WITH ORDINALITY … ORDER BY`), so `seq` follows the queue's order.
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

/// Writes a batch on Postgres with [`PG_APPEND_BATCH`] in `tx`, a transaction of its own, and
/// hands back its commit: once the statement returned, the batch's `seq`s are taken, and the lane's
/// next batch (written on another connection) gets higher ones, while this transaction's
/// commit waits for its WAL flush (`synchronous_commit` unchanged).
pub(crate) async fn apply_postgres(
    mut tx: sqlx::Transaction<'static, sqlx::Postgres>,
    batch: Vec<Append>,
) -> Result<Written, sqlx::Error> {
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
    let q = sqlx::query_scalar(PG_APPEND_BATCH)
        .bind(cols.msg_id)
        .bind(cols.topic)
        .bind(cols.filter)
        .bind(cols.publisher)
        .bind(cols.timestamp_ms)
        .bind(cols.qos)
        .bind(cols.data)
        .bind(cols.now)
        .bind(cols.owner)
        .bind(cols.lease);
    let seqs = q.fetch_all(&mut *tx).await?;
    Ok(Written { seqs, commit: Some(Box::pin(tx.commit())) })
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
pub(crate) async fn apply_sqlite(pool: &sqlx::SqlitePool, batch: Vec<Append>) -> Result<Written, sqlx::Error> {
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
    Ok(Written { seqs, commit: None })
}

#[cfg(test)]
mod tests {
    #[test]
    fn batch_sizes_are_counted_in_cumulative_buckets() {
        let h = super::BatchSizes::default();
        for n in [1, 3, 3, 1024, 5000] {
            h.observe(n);
        }
        let s = h.snapshot();
        assert_eq!(s.count, 5);
        assert_eq!(s.sum, 1 + 3 + 3 + 1024 + 5000);
        assert_eq!(s.buckets.first(), Some(&(1, 1)));
        assert_eq!(s.buckets.iter().find(|(le, _)| *le == 4), Some(&(4, 3)));
        assert_eq!(s.buckets.last(), Some(&(1024, 4)), "5000 is only in +Inf");
    }

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
