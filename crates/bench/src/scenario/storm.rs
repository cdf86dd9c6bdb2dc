//! `storm` (issue 36): a reconnect storm across a two-node cluster. N clients, each its own
//! actor (the bench fixtures' churn actors, `bench-token-churn-<i>`: restore records are per
//! actor), log in on node A and subscribe to two topics; then the bench sends SIGTERM to A.
//! Every client, on its close (1012 from the drain), reconnects to node B at once with
//! `reconnect: true` and checks that the `auth` reply's `restoredSubscriptions` holds both its
//! topics. Reported: the time from the SIGTERM until the last client had its subscriptions
//! back, the restored / partial / failed clients and the errors, and what the store did per
//! reconnect: Postgres' transactions and rows written (`pg_stat_database`,
//! `pg_stat_user_tables`, with `--pg-url`) and node B's store operations by name (its
//! `/metrics`). Node A's share is the rest (A's metrics end with its drain): its restore record
//! writes are the `restore_records` rows B did not write.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use bytes::Bytes;
use skua_protocol::msgpack::{Reader, Writer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Semaphore, mpsc};
use tokio::time::{Instant, MissedTickBehavior, interval, timeout};

use super::{Ctx, client_cpu, cpu_pct, used};
use crate::conn::{self, ConnOptions, SETUP_TIMEOUT};
use crate::summary::Summary;
use crate::target::Target;
use crate::track::{MAX_LATENCY_US, histogram};
use crate::ws::{Closed, WsClient};

/// The two topics every client subscribes to (demo fixtures: plain topics, no history, so a
/// release is one statement).
pub const TOPICS: [&str; 2] = ["demo/general/messages", "demo/random/messages"];

/// How a storm run goes.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Clients (N); the server's fixtures need as many churn actors (`fixtures --churn-actors N`).
    pub connections: usize,
    /// Node B, where the clients reconnect.
    pub node_b: Target,
    /// Node B's process, for its CPU.
    pub node_b_pid: Option<u32>,
    /// Node A's process: the bench sends it SIGTERM. `None`: someone else stops A, and the
    /// time counts from the first close.
    pub kill_pid: Option<u32>,
    /// Connections set up per second on A (the per-address limits stay out of the way).
    pub setup_rate: f64,
    /// How long a client keeps trying to restore on B after its close.
    pub restore_timeout: Duration,
    /// Postgres URL of the nodes' store, for `pg_stat_database` (read with `psql`).
    pub pg_url: Option<String>,
}

/// What one client saw.
#[derive(Debug, Default)]
struct Outcome {
    /// Set up on A (logged in, both subscriptions acknowledged).
    set_up: bool,
    /// Error during setup.
    setup_error: Option<String>,
    /// Close code from A (1012 expected), when a close frame came.
    close_code: Option<u16>,
    /// When the connection to A ended.
    closed_at: Option<Instant>,
    /// When B's `auth` reply came with the restored subscriptions.
    restored_at: Option<Instant>,
    /// The topics B restored.
    restored: Vec<String>,
    /// Failed reconnect attempts (each an error), with the first error.
    errors: u64,
    first_error: Option<String>,
}

/// One decoded frame of interest.
#[derive(Debug, PartialEq)]
pub enum Frame {
    /// `auth` success with the `pattern`s of `restoredSubscriptions`.
    AuthOk(Vec<String>),
    /// `auth` failure or an `error` frame.
    Refused(String),
    /// `subscribed` for a topic.
    Subscribed,
    /// Anything else (messages, presence…).
    Other,
}

/// Decodes the frames the storm waits for.
///
/// # Errors
/// Not a MessagePack map.
pub fn decode(frame: &[u8]) -> anyhow::Result<Frame> {
    if frame.is_empty() {
        return Ok(Frame::Other);
    }
    let mut r = Reader::new(frame);
    let n = r.read_map_len()?;
    let (mut ty, mut success, mut error, mut restored) = ("", false, None, Vec::new());
    for _ in 0..n {
        let key = r.read_str()?;
        let value = r.skip_value()?;
        match key {
            "type" => ty = Reader::new(value).read_str()?,
            "success" => success = Reader::new(value).read_bool().unwrap_or(false),
            "error" => error = Reader::new(value).read_str().ok(),
            "restoredSubscriptions" => {
                let mut a = Reader::new(value);
                for _ in 0..a.read_array_len()? {
                    let mut e = Reader::new(a.skip_value()?);
                    for _ in 0..e.read_map_len()? {
                        let k = e.read_str()?;
                        let v = e.skip_value()?;
                        if k == "pattern" {
                            restored.push(Reader::new(v).read_str()?.to_owned());
                        }
                    }
                }
            }
            _ => {}
        }
    }
    Ok(match ty {
        "auth" if success => Frame::AuthOk(restored),
        "auth" | "error" => Frame::Refused(error.unwrap_or(ty).to_owned()),
        "subscribed" => Frame::Subscribed,
        _ => Frame::Other,
    })
}

/// The `auth` frame of client `i`.
fn auth(token: &str, reconnect: bool) -> Bytes {
    let mut w = Writer::with_capacity(96);
    w.map(if reconnect { 4 } else { 3 }).str("type").str("auth").str("token").str(token).str("protocolVersion").uint(2);
    if reconnect {
        w.str("reconnect").bool(true);
    }
    Bytes::from(w.into_vec())
}

fn subscribe(topic: &str) -> Bytes {
    let mut w = Writer::with_capacity(64);
    w.map(3).str("type").str("subscribe").str("topic").str(topic).str("qos").uint(0);
    Bytes::from(w.into_vec())
}

/// A connection with the frames read but not yet looked at.
struct Link {
    ws: WsClient,
    pending: VecDeque<Vec<u8>>,
    closed: Option<Closed>,
}

impl Link {
    async fn open(target: &Target) -> anyhow::Result<Self> {
        let wire = crate::wire::nolag::Nolag::default();
        let ws = conn::open(target, &wire, ConnOptions { read_buffer: 4096, source: None }).await?;
        Ok(Self { ws, pending: VecDeque::new(), closed: None })
    }

    /// The next data frame, or the server's close (`Err` of the inner result).
    ///
    /// # Cancel safety
    /// Cancel safe: frames read are kept in `pending`.
    async fn next(&mut self) -> anyhow::Result<Result<Vec<u8>, Closed>> {
        loop {
            if let Some(f) = self.pending.pop_front() {
                return Ok(Ok(f));
            }
            if let Some(c) = self.closed.take() {
                return Ok(Err(c));
            }
            if self.ws.fill().await? == 0 {
                return Ok(Err(Closed { code: None, reason: "end of stream".into() }));
            }
            let pending = &mut self.pending;
            self.closed = self.ws.drain(&mut |f| pending.push_back(f.to_vec()))?;
            self.ws.flush().await?;
        }
    }

    /// Sends `frame` and waits (bounded) for the first frame `want` accepts.
    async fn ask<T>(&mut self, frame: &[u8], want: impl Fn(Frame) -> Option<anyhow::Result<T>>) -> anyhow::Result<T> {
        self.ws.send(frame).await?;
        timeout(SETUP_TIMEOUT, async {
            loop {
                match self.next().await? {
                    Ok(f) => {
                        if let Some(r) = want(decode(&f)?) {
                            return r;
                        }
                    }
                    Err(c) => bail!("{c}"),
                }
            }
        })
        .await
        .map_err(|_| anyhow!("no answer within {SETUP_TIMEOUT:?}"))?
    }
}

fn auth_reply(f: Frame) -> Option<anyhow::Result<Vec<String>>> {
    match f {
        Frame::AuthOk(r) => Some(Ok(r)),
        Frame::Refused(e) => Some(Err(anyhow!("refused: {e}"))),
        _ => None,
    }
}

async fn set_up(a: &Target, token: &str) -> anyhow::Result<Link> {
    let mut l = Link::open(a).await?;
    l.ask(&auth(token, false), auth_reply).await.context("while logging in on A")?;
    for t in TOPICS {
        l.ask(&subscribe(t), |f| match f {
            Frame::Subscribed => Some(Ok(())),
            Frame::Refused(e) => Some(Err(anyhow!("refused: {e}"))),
            _ => None,
        })
        .await
        .with_context(|| format!("while subscribing to {t} on A"))?;
    }
    Ok(l)
}

/// Waits on A until the connection ends (sending heartbeats meanwhile); the close code.
async fn wait_close(l: &mut Link) -> anyhow::Result<Option<u16>> {
    let mut hb = interval(crate::wire::HEARTBEAT_EVERY);
    hb.set_missed_tick_behavior(MissedTickBehavior::Delay);
    hb.tick().await;
    loop {
        tokio::select! {
            r = l.next() => match r? {
                Ok(_) => {}
                Err(c) => return Ok(c.code),
            },
            _ = hb.tick() => l.ws.send(&[]).await?,
        }
    }
}

/// Reconnects to B until its `auth` reply comes (or `deadline`); the restored topics and the
/// connection (kept open until the counters are read: closing it would release the record).
async fn restore(b: &Target, token: &str, deadline: Instant, o: &mut Outcome) -> Option<(Vec<String>, Link)> {
    loop {
        let attempt = async {
            let mut l = Link::open(b).await?;
            let r = l.ask(&auth(token, true), auth_reply).await?;
            anyhow::Ok((r, l))
        };
        match attempt.await {
            Ok(r) => return Some(r),
            Err(e) => {
                o.errors += 1;
                o.first_error.get_or_insert_with(|| format!("reconnect: {e:#}"));
            }
        }
        if Instant::now() + Duration::from_millis(200) >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Where a client reports.
struct Report {
    /// Set up or not, once.
    ready: mpsc::Sender<bool>,
    /// The outcome, once.
    done: mpsc::Sender<Outcome>,
    /// Becomes true when the bench has read the counters: the connections to B may close.
    close: tokio::sync::watch::Receiver<bool>,
}

/// One client: set up on A (reporting on `ready`), wait for A's close, restore on B, report
/// the outcome, then hold the connection to B until `close`.
async fn client(
    i: usize,
    a: Target,
    b: Target,
    permit: tokio::sync::OwnedSemaphorePermit,
    report: Report,
    restore_timeout: Duration,
) {
    let Report { ready, done, mut close } = report;
    let token = crate::fixtures::churn_token(i);
    let mut o = Outcome::default();
    let setup = set_up(&a, &token).await;
    drop(permit);
    let mut l = match setup {
        Ok(l) => l,
        Err(e) => {
            o.setup_error = Some(format!("{e:#}"));
            let _ = ready.send(false).await;
            let _ = done.send(o).await;
            return;
        }
    };
    o.set_up = true;
    let _ = ready.send(true).await;
    drop(ready);
    match wait_close(&mut l).await {
        Ok(code) => o.close_code = code,
        Err(e) => {
            o.errors += 1;
            o.first_error = Some(format!("on A: {e:#}"));
        }
    }
    drop(l);
    let closed = Instant::now();
    o.closed_at = Some(closed);
    let kept = restore(&b, &token, closed + restore_timeout, &mut o).await.map(|(r, l)| {
        o.restored_at = Some(Instant::now());
        o.restored = r;
        l
    });
    let _ = done.send(o).await;
    drop(done);
    if kept.is_some() {
        let _ = close.wait_for(|c| *c).await;
    }
}

/// `GET /metrics` of the node at `t` over HTTP/1.0: its store operation counts by name
/// (`skua_backend_operation_duration_seconds_count{slot="store",op=…}`).
async fn store_ops(t: &Target) -> anyhow::Result<BTreeMap<String, f64>> {
    let mut s = tokio::net::TcpStream::connect(t.addr).await?;
    s.write_all(format!("GET /metrics HTTP/1.0\r\nHost: {}\r\n\r\n", t.addr).as_bytes()).await?;
    let mut body = String::new();
    timeout(Duration::from_secs(10), s.read_to_string(&mut body)).await.context("/metrics timed out")??;
    Ok(parse_store_ops(&body))
}

/// The store operation counts of a `/metrics` text.
pub fn parse_store_ops(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for l in text.lines() {
        let Some(rest) = l.strip_prefix("skua_backend_operation_duration_seconds_count{") else { continue };
        let Some((labels, value)) = rest.split_once("} ") else { continue };
        if !labels.contains("slot=\"store\"") {
            continue;
        }
        let op = labels.split(',').find_map(|kv| kv.strip_prefix("op=\"")?.strip_suffix('"'));
        if let (Some(op), Ok(v)) = (op, value.trim().parse::<f64>()) {
            out.insert(op.to_owned(), v);
        }
    }
    out
}

/// Postgres counters of the store's database (all per database: the transaction id counter
/// is the server's, shared with every other database, so it is not used).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PgStats {
    /// `xact_commit + xact_rollback` of the database: every statement run outside a
    /// transaction block is one, reads included.
    pub xacts: f64,
    /// Rows inserted, updated and deleted in `restore_records`: each restore statement (a
    /// release, a claim, a save) writes one row in a transaction of its own.
    pub restore_rows: f64,
    /// Rows written in the control plane's `registry_*` tables (the nodes' connection lists,
    /// written in one transaction per node and registry poll).
    pub registry_rows: f64,
    /// Rows written in all tables.
    pub all_rows: f64,
}

const PG_QUERY: &str = "SELECT (SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()), \
     (SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0) FROM pg_stat_user_tables WHERE relname = 'restore_records'), \
     (SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0) FROM pg_stat_user_tables WHERE relname LIKE 'registry\\_%'), \
     (SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0) FROM pg_stat_user_tables)";

/// Reads [`PgStats`] with `psql` (one session, one transaction: counted in the next read).
fn pg_stats(url: &str) -> anyhow::Result<PgStats> {
    let out = std::process::Command::new("psql")
        .args([url, "-qtAc", PG_QUERY])
        .output()
        .context("while running psql (Debian package postgresql-client)")?;
    if !out.status.success() {
        bail!("psql: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    parse_pg(&String::from_utf8_lossy(&out.stdout))
}

/// Parses `psql -tA`'s `a|b|c|d` line.
///
/// # Errors
/// Not four numbers.
pub fn parse_pg(line: &str) -> anyhow::Result<PgStats> {
    let v: Vec<f64> = line.trim().split('|').map(str::parse).collect::<Result<_, _>>().context("bad psql output")?;
    let [xacts, restore_rows, registry_rows, all_rows] = v[..] else { bail!("expected 4 columns, got {line:?}") };
    Ok(PgStats { xacts, restore_rows, registry_rows, all_rows })
}

/// Reads [`PgStats`] until two reads 1 s apart show the same `restore_records` rows (backends
/// report their counters when idle, within about a second), at most `tries` times; returns the last read and how many
/// reads were made (each is one transaction of its own).
async fn pg_settled(url: &str, tries: usize) -> anyhow::Result<(PgStats, u32)> {
    let mut last = pg_stats(url)?;
    let mut reads = 1;
    for _ in 1..tries {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = pg_stats(url)?;
        reads += 1;
        // The previous read's own transaction shows up in this one.
        // Restore rows only: the nodes' periodic work (registry heartbeats, polls) never stops.
        let same = now.restore_rows == last.restore_rows;
        last = now;
        if same {
            break;
        }
    }
    Ok((last, reads))
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Runs `storm` against node A (`ctx.target`).
///
/// # Errors
/// A client could not be set up, SIGTERM could not be sent, or a store counter could not be read.
pub async fn run(ctx: &Ctx, plan: &Plan) -> anyhow::Result<Summary> {
    let n = plan.connections;
    let sem = Arc::new(Semaphore::new(super::SETUP_CONCURRENCY));
    let (ready_tx, mut ready_rx) = mpsc::channel(1024);
    // One outcome per client: never full.
    let (done_tx, mut done_rx) = mpsc::channel(n.max(1));
    let (close_tx, close_rx) = tokio::sync::watch::channel(false);
    let mut tick = interval(Duration::from_secs_f64(1.0 / plan.setup_rate));
    tick.set_missed_tick_behavior(MissedTickBehavior::Burst);
    let t_setup = Instant::now();
    let mut handles = Vec::with_capacity(n);
    for i in 0..n {
        tick.tick().await;
        let Ok(permit) = sem.clone().acquire_owned().await else { break };
        handles.push(tokio::spawn(client(
            i,
            ctx.target.clone(),
            plan.node_b.clone(),
            permit,
            Report { ready: ready_tx.clone(), done: done_tx.clone(), close: close_rx.clone() },
            plan.restore_timeout,
        )));
    }
    drop((ready_tx, done_tx, close_rx));
    let (mut up, mut down) = (0usize, 0usize);
    while let Some(ok) = ready_rx.recv().await {
        if ok { up += 1 } else { down += 1 }
    }
    let setup_s = secs(t_setup.elapsed());
    eprintln!("skua-bench: storm: {up} clients set up on A in {setup_s:.1} s ({down} failed)");
    if up == 0 {
        let first = done_rx.recv().await.and_then(|o| o.setup_error);
        bail!("no client could be set up on A: {}", first.unwrap_or_default());
    }

    // The store's counters before the storm, once node A's store work of the setup is done
    // (a subscription's record is saved after its `subscribed` went out) and Postgres'
    // counters settled.
    let quiet = Instant::now();
    let mut a_ops = f64::NAN;
    for _ in 0..60 {
        // The restore record operations only: the node's periodic work (outbox, wakes) never stops.
        let ops = store_ops(&ctx.target).await.context("while reading node A's /metrics")?;
        let now: f64 = ops.iter().filter(|(op, _)| op.contains("restore")).map(|(_, v)| v).sum();
        if now == a_ops {
            break;
        }
        a_ops = now;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let b_ops0 = store_ops(&plan.node_b).await.context("while reading node B's /metrics")?;
    let pg0 = match &plan.pg_url {
        Some(u) => Some(pg_settled(u, 30).await?),
        None => None,
    };
    let (b_cpu0, cli0) = (plan.node_b_pid.and_then(|p| crate::procfs::cpu_us(p).ok()), client_cpu());

    let quiet_s = secs(quiet.elapsed());
    let t0 = Instant::now();
    if let Some(pid) = plan.kill_pid {
        let st = std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status()?;
        if !st.success() {
            bail!("kill -TERM {pid} failed: {st}");
        }
    }
    let mut outcomes = Vec::with_capacity(n);
    while let Some(o) = done_rx.recv().await {
        outcomes.push(o);
        if outcomes.len() == handles.len() {
            break;
        }
    }
    let storm_s = secs(t0.elapsed());
    let (b_cpu1, cli1) = (plan.node_b_pid.and_then(|p| crate::procfs::cpu_us(p).ok()), client_cpu());
    let b_ops1 = store_ops(&plan.node_b).await.context("while reading node B's /metrics")?;
    let pg1 = match &plan.pg_url {
        Some(u) => {
            // A backend whose report met a busy lock reports again only after 10 s idle
            // (PGSTAT_IDLE_INTERVAL): wait that out, or a storm's transactions show short.
            tokio::time::sleep(Duration::from_secs(11)).await;
            Some(pg_settled(u, 12).await?)
        }
        None => None,
    };
    let _ = close_tx.send(true);
    for h in handles {
        let _ = h.await;
    }

    let start =
        if plan.kill_pid.is_some() { t0 } else { outcomes.iter().filter_map(|o| o.closed_at).min().unwrap_or(t0) };
    let mut s = ctx.summary("storm", format!("storm N={n} subs={}", TOPICS.len()));
    s.set("connections", n);
    s.set("connected", up);
    s.set("setup_errors", down);
    s.set("setup_s", setup_s);
    s.set("quiet_wait_s", quiet_s);
    let (mut closed_1012, mut closed_other, mut restored, mut partial, mut failed, mut errors) =
        (0usize, 0usize, 0usize, 0usize, 0usize, 0u64);
    let (mut close_h, mut restore_h, mut gap_h) = (histogram(), histogram(), histogram());
    let mut last_restored = None;
    let mut first_error = None;
    let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX).clamp(1, MAX_LATENCY_US);
    for o in outcomes.iter().filter(|o| o.set_up) {
        if o.close_code == Some(1012) {
            closed_1012 += 1;
        } else {
            closed_other += 1;
            first_error.get_or_insert_with(|| format!("a connection to A ended with {:?}, not 1012", o.close_code));
        }
        errors += o.errors;
        if first_error.is_none() {
            first_error.clone_from(&o.first_error);
        }
        if let Some(c) = o.closed_at {
            let _ = close_h.record(us(c.saturating_duration_since(start)));
        }
        match o.restored_at {
            Some(at) => {
                let _ = restore_h.record(us(at.saturating_duration_since(start)));
                if let Some(c) = o.closed_at {
                    let _ = gap_h.record(us(at.saturating_duration_since(c)));
                }
                last_restored = last_restored.max(Some(at));
                let all = TOPICS.iter().all(|t| o.restored.iter().any(|r| r == t));
                if all && o.restored.len() == TOPICS.len() {
                    restored += 1;
                } else {
                    partial += 1;
                    first_error.get_or_insert_with(|| format!("restored {:?} instead of {TOPICS:?}", o.restored));
                }
            }
            None => failed += 1,
        }
    }
    s.set("closed_1012", closed_1012);
    s.set("closed_other", closed_other);
    s.set("restored", restored);
    s.set("partial", partial);
    s.set("failed", failed);
    s.set("reconnect_errors", errors);
    s.set("sigterm", plan.kill_pid.is_some());
    s.set("restore_all_s", last_restored.map(|t| secs(t.saturating_duration_since(start))));
    s.latency("close", &close_h);
    s.latency("restored", &restore_h);
    s.latency("reconnect", &gap_h);
    s.set("storm_s", storm_s);
    let b_used = used(b_cpu0, b_cpu1);
    s.set("node_b_cpu_us_per_reconnect", b_used.filter(|_| up > 0).map(|u| u as f64 / up as f64));
    s.set("client_cpu_pct", cpu_pct(used(cli0, cli1), storm_s));

    // Node B's store operations per reconnect, by name, and in all.
    let per = |v: f64| v / up as f64;
    let mut b_total = 0.0;
    for (op, v1) in &b_ops1 {
        let d = v1 - b_ops0.get(op).copied().unwrap_or(0.0);
        if d > 0.0 {
            s.set(&format!("b_{op}_per_reconnect"), per(d));
            b_total += d;
        }
    }
    s.set("b_store_ops_per_reconnect", per(b_total));
    // B's restore writes: each claim that found a record updates its row, each save or
    // release writes one; its statements: the operations, plus the claim's second statement
    // (the records that ended together with the claimed one, restore_merge_window).
    let claims_found = outcomes.iter().filter(|o| !o.restored.is_empty()).count() as f64;
    let delta = |op: &str| b_ops1.get(op).copied().unwrap_or(0.0) - b_ops0.get(op).copied().unwrap_or(0.0);
    let b_writes = claims_found + delta("save_restore") + delta("release_restore");
    s.set("b_writes_per_reconnect", per(b_writes));
    s.set("b_statements_per_reconnect", per(b_total + claims_found));
    if let (Some((p0, _)), Some((p1, reads))) = (pg0, pg1) {
        // Every psql read is one transaction, counted by the reads after it.
        let xacts = p1.xacts - p0.xacts - f64::from(reads);
        let restore_rows = p1.restore_rows - p0.restore_rows;
        s.set("pg_xacts_per_reconnect", per(xacts));
        s.set("pg_restore_rows_per_reconnect", per(restore_rows));
        s.set("pg_registry_rows_per_reconnect", per(p1.registry_rows - p0.registry_rows));
        s.set("pg_rows_per_reconnect", per(p1.all_rows - p0.all_rows));
        // A's share: the restore rows B did not write (its releases), and the transactions
        // B's statements do not account for (A's, and both nodes' registry and periodic work).
        s.set("a_writes_per_reconnect", per(restore_rows - b_writes));
        s.set("a_xacts_per_reconnect", per(xacts - b_total - claims_found));
    } else {
        s.notes.push("no --pg-url: Postgres' transactions are not measured".into());
    }
    let ok = down == 0 && failed == 0 && partial == 0 && errors == 0 && closed_other == 0;
    s.set("ok", ok);
    if let Some(e) = first_error {
        s.notes.push(format!("first problem: {e}"));
    }
    if let Some(e) = outcomes.iter().find_map(|o| o.setup_error.as_ref()) {
        s.notes.push(format!("{down} clients failed setup, e.g. {e}"));
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_replies_decode_to_their_restored_patterns() {
        let mut w = Writer::default();
        w.map(3).str("type").str("auth").str("success").bool(true).str("restoredSubscriptions").array(2);
        for p in TOPICS {
            w.map(2).str("pattern").str(p).str("topic").str("x");
        }
        assert_eq!(decode(&w.into_vec()).unwrap(), Frame::AuthOk(TOPICS.map(String::from).to_vec()));
        let mut w = Writer::default();
        w.map(2).str("type").str("auth").str("error").str("invalid_token");
        assert_eq!(decode(&w.into_vec()).unwrap(), Frame::Refused("invalid_token".into()));
        let f = auth("t", true);
        let mut r = Reader::new(&f);
        assert_eq!(r.read_map_len().unwrap(), 4);
    }

    #[test]
    fn metrics_and_psql_lines_parse() {
        let text = "# HELP x\n\
            skua_backend_operation_duration_seconds_count{slot=\"store\",op=\"claim_restore\"} 12\n\
            skua_backend_operation_duration_seconds_count{slot=\"bus\",op=\"publish\"} 7\n\
            skua_backend_operation_duration_seconds_sum{slot=\"store\",op=\"claim_restore\"} 0.5\n";
        let ops = parse_store_ops(text);
        assert_eq!(ops.len(), 1);
        assert_eq!(ops["claim_restore"], 12.0);
        let p = parse_pg("10|1|2|3\n").unwrap();
        assert_eq!(p, PgStats { xacts: 10.0, restore_rows: 1.0, registry_rows: 2.0, all_rows: 3.0 });
        assert!(parse_pg("1|2").is_err());
    }
}
