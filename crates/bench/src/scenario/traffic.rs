//! `fanout`, `pairs` and `logged`: publishers at a fixed rate on some topics, subscribers that
//! check every sequence number and time every delivery.
//!
//! Timeline: every connection is set up first; then publishers start (phases spread evenly
//! over one period), the warm-up passes, the measured window runs, publishers stop at its end,
//! and subscribers get up to `drain` to receive what is still in flight. Rates, latencies and
//! CPU are taken over the window; lost/duplicated/reordered over the whole run.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use hdrhistogram::Histogram;
use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior, interval_at, sleep, sleep_until};

use super::{Ctx, all_or_bail, client_cpu, connect_all, cpu_pct, machine_cpu, set_machine, used};
use crate::conn::{Conn, ConnOptions};
use crate::payload::{self, Stamp};
use crate::summary::Summary;
use crate::track::{RecvStats, Window, histogram};
use crate::wire::{Event, HEARTBEAT_EVERY, Role, TopicKey, Wire};

/// What a traffic run does.
#[derive(Debug, Clone)]
pub struct Plan {
    /// `fanout`, `pairs` or `logged`.
    pub scenario: &'static str,
    /// The case name in results, e.g. `fanout S=100 R=10000 P=100`.
    pub case: String,
    /// Number of topics.
    pub topics: usize,
    /// Subscribers on each topic.
    pub subs_per_topic: usize,
    /// Publisher connections on each topic.
    pub pubs_per_topic: usize,
    /// Messages per second of each publisher connection.
    pub rate_per_pub: f64,
    /// Payload bytes per message.
    pub payload: usize,
    /// Topic `i` of the run.
    pub topic: fn(usize) -> TopicKey,
    /// Ask for acceptance receipts and time them (NoLag `msgRef` → `published`).
    pub acks: bool,
    /// Subscribers acknowledge the stored deliveries they get (NoLag `batchAck`, one per read).
    pub ack_stored: bool,
    /// Read the server's store operation counts (`/metrics` on the target's address) at the
    /// window's edges and report them per delivered message.
    pub store_ops: bool,
}

impl Plan {
    fn total_rate(&self) -> f64 {
        self.rate_per_pub * (self.topics * self.pubs_per_topic) as f64
    }
}

/// What one WebSocket subscriber saw (shared with `devices`).
pub(super) struct SubOutcome {
    pub(super) stats: RecvStats,
    pub(super) rejected: u64,
    pub(super) error: Option<String>,
}

struct PubOutcome {
    sent: u64,
    sent_in_window: u64,
    rejected: u64,
    first_rejection: Option<String>,
    acks: Histogram<u64>,
    /// `published` receipts that arrived inside the measured window.
    acked_in_window: u64,
    error: Option<String>,
}

/// Runs the plan and summarises it.
///
/// # Errors
/// A connection could not be set up (nothing is measured then).
pub async fn run(ctx: &Ctx, plan: &Plan) -> anyhow::Result<Summary> {
    let wire = ctx.wire.clone();
    let topics: Vec<String> = (0..plan.topics).map(|i| wire.topic((plan.topic)(i))).collect();
    let (n_sub, n_pub) = (plan.topics * plan.subs_per_topic, plan.topics * plan.pubs_per_topic);
    let sub_topic = |j: usize| j / plan.subs_per_topic;
    let pub_topic = |i: usize| i / plan.pubs_per_topic;

    let (subs, failed) =
        connect_all(ctx, n_sub, Role::Subscriber, |j| Some(topics[sub_topic(j)].clone()), ConnOptions::default()).await;
    all_or_bail("subscriber", n_sub, failed)?;
    let pub_opts = ConnOptions { read_buffer: 4096, ..ConnOptions::default() };
    let (pubs, failed) = connect_all(ctx, n_pub, Role::Publisher, |_| None, pub_opts).await;
    all_or_bail("publisher", n_pub, failed)?;

    let t0 = Instant::now() + Duration::from_millis(300);
    let window = Window { start: (t0 + ctx.warmup).into_std(), end: (t0 + ctx.warmup + ctx.duration).into_std() };
    let (stop_tx, stop_rx) = watch::channel(false);
    let unique: Arc<[AtomicU64]> = (0..n_sub).map(|_| AtomicU64::new(0)).collect();
    let sent: Arc<[AtomicU64]> = (0..n_pub).map(|_| AtomicU64::new(0)).collect();
    let done = Arc::new(AtomicUsize::new(0));

    let sub_tasks: Vec<_> = subs
        .into_iter()
        .enumerate()
        .map(|(j, c)| {
            let acks = plan.ack_stored.then(|| wire.clone());
            tokio::spawn(subscriber(c, wire.heartbeat(), acks, window, unique.clone(), j, stop_rx.clone()))
        })
        .collect();
    let period = Duration::from_secs_f64(1.0 / plan.rate_per_pub);
    let pub_tasks: Vec<_> = pubs
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let p = PubParams {
                wire: wire.clone(),
                topic: topics[pub_topic(i)].clone(),
                id: i as u32,
                period,
                // Spread the publishers' phases over one period so the offered load is smooth.
                first: t0 + period.mul_f64(i as f64 / n_pub as f64),
                window,
                payload: plan.payload,
                acks: plan.acks,
            };
            tokio::spawn(publisher(c, p, sent.clone(), done.clone(), stop_rx.clone()))
        })
        .collect();

    let triggers = || ctx.triggers.as_ref().map(|c| c.requests());
    sleep_until(window.start.into()).await;
    let ops = || async { if plan.store_ops { crate::metrics::store_ops(&ctx.target).await } else { None } };
    let ops0 = ops().await;
    let (srv0, cli0, m0, cl0) = (ctx.server_cpu(), client_cpu(), machine_cpu(), ctx.cluster_cpu());
    let trig0 = triggers();
    ctx.mark_window("start").await;
    sleep_until(window.end.into()).await;
    ctx.mark_window("end").await;
    let (srv1, cli1, m1, cl1) = (ctx.server_cpu(), client_cpu(), machine_cpu(), ctx.cluster_cpu());
    let trig1 = triggers();
    let ops1 = ops().await;

    // Publishers stop at the window's end; wait until each has (bounded, in case one is stuck).
    let give_up = Instant::now() + Duration::from_secs(5);
    while done.load(Ordering::Acquire) < n_pub && Instant::now() < give_up {
        sleep(Duration::from_millis(10)).await;
    }
    let mut expected_per_topic = vec![0u64; plan.topics];
    for (i, s) in sent.iter().enumerate() {
        expected_per_topic[pub_topic(i)] += s.load(Ordering::Acquire);
    }
    let expected: Vec<u64> = (0..n_sub).map(|j| expected_per_topic[sub_topic(j)]).collect();
    let drain_end = Instant::now() + ctx.drain;
    while Instant::now() < drain_end && (0..n_sub).any(|j| unique[j].load(Ordering::Relaxed) < expected[j]) {
        sleep(Duration::from_millis(20)).await;
    }
    // One trigger per accepted publish (N44); they arrive asynchronously, within the same drain.
    let published_so_far: u64 = sent.iter().map(|s| s.load(Ordering::Acquire)).sum();
    while Instant::now() < drain_end && triggers().is_some_and(|n| n < published_so_far) {
        sleep(Duration::from_millis(20)).await;
    }
    let _ = stop_tx.send(true);

    let mut recv = RecvStats::default();
    let (mut sub_rejected, mut conn_errors, mut first_error, mut lost) = (0u64, 0u64, None, 0u64);
    for (j, t) in sub_tasks.into_iter().enumerate() {
        let o = t.await?;
        lost += expected[j].saturating_sub(o.stats.unique);
        recv.merge(&o.stats);
        sub_rejected += o.rejected;
        if let Some(e) = o.error {
            conn_errors += 1;
            first_error.get_or_insert(format!("subscriber {j}: {e}"));
        }
    }
    let (mut published, mut published_in_window, mut rejected, mut first_rejection) = (0u64, 0u64, 0u64, None);
    let mut acks = histogram();
    let mut acked_in_window = 0u64;
    for (i, t) in pub_tasks.into_iter().enumerate() {
        let o = t.await?;
        published += o.sent;
        published_in_window += o.sent_in_window;
        rejected += o.rejected;
        let _ = acks.add(&o.acks);
        acked_in_window += o.acked_in_window;
        if first_rejection.is_none() {
            first_rejection = o.first_rejection;
        }
        if let Some(e) = o.error {
            conn_errors += 1;
            first_error.get_or_insert(format!("publisher {i}: {e}"));
        }
    }

    let secs = window.secs();
    let srv_used = used(srv0, srv1);
    let mut s = ctx.summary(plan.scenario, plan.case.clone());
    s.set("topics", plan.topics);
    s.set("subscribers", n_sub);
    s.set("publishers", n_pub);
    s.set("rate_target", plan.total_rate());
    s.set("rate_per_publisher", plan.rate_per_pub);
    s.set("payload_bytes", plan.payload);
    s.set("warmup_s", ctx.warmup.as_secs_f64());
    s.set("duration_s", secs);
    s.set("published", published);
    s.set("published_per_s", published_in_window as f64 / secs);
    s.set("expected_deliveries", expected.iter().sum::<u64>());
    s.set("delivered", recv.unique);
    s.set("delivered_per_s", recv.in_window as f64 / secs);
    s.set("lost", lost);
    s.set("duplicated", recv.duplicated);
    s.set("reordered", recv.reordered);
    s.set("rejected", rejected + sub_rejected);
    s.set("conn_errors", conn_errors);
    s.set("corrupt", recv.corrupt);
    s.set("stored_deliveries", recv.stored);
    s.latency("lat", &recv.latency);
    if plan.acks {
        s.latency("ack", &acks);
        s.set("acked_per_s", acked_in_window as f64 / secs);
    }
    s.set("server_cpu_us", srv_used);
    s.set("server_cpu_pct", cpu_pct(srv_used, secs));
    s.set("server_cpu_us_per_msg", srv_used.filter(|_| recv.in_window > 0).map(|u| u as f64 / recv.in_window as f64));
    s.set("client_cpu_pct", cpu_pct(used(cli0, cli1), secs));
    if plan.store_ops {
        crate::metrics::set_store_ops(&mut s, ops0.as_ref(), ops1.as_ref(), recv.in_window);
    }
    if !ctx.peers.is_empty() {
        // Node 0 is in server_cpu_*; each peer, then the broker, gets its own figures.
        let per_msg = |u: Option<u64>| u.filter(|_| recv.in_window > 0).map(|u| u as f64 / recv.in_window as f64);
        let mut total = srv_used;
        for (k, (a, b)) in cl0.iter().zip(&cl1).enumerate() {
            let u = used(*a, *b);
            total = total.zip(u).map(|(t, u)| t + u);
            let name = if k < ctx.peers.len() { format!("node{}", k + 1) } else { "broker".to_owned() };
            s.set(&format!("{name}_cpu_pct"), cpu_pct(u, secs));
            s.set(&format!("{name}_cpu_us_per_msg"), per_msg(u));
        }
        s.set("nodes", 1 + ctx.peers.len());
        s.set("cluster_cpu_us_per_msg", per_msg(total));
    }
    let mut triggers_missing = 0;
    if let Some(counts) = &ctx.triggers {
        let received = counts.requests();
        triggers_missing = published.saturating_sub(received);
        let in_window = used(trig0, trig1);
        s.set("triggers_received", received);
        s.set("triggers_signed", counts.signed());
        s.set("triggers_missing", triggers_missing);
        s.set("triggers_per_s", in_window.map(|n| n as f64 / secs));
        s.set("trigger_body_bytes", (received > 0).then(|| counts.bytes() as f64 / received as f64));
        s.set(
            "server_cpu_us_per_trigger",
            srv_used.zip(in_window.filter(|&n| n > 0)).map(|(u, n)| u as f64 / n as f64),
        );
        if triggers_missing > 0 {
            s.notes
                .push(format!("{triggers_missing} of {published} publishes' triggers did not arrive within the drain"));
        }
        if received > published {
            s.notes.push(format!("{} more triggers than publishes", received - published));
        }
    }
    set_machine(&mut s, m0, m1, secs);
    let ok = lost == 0
        && recv.duplicated == 0
        && conn_errors == 0
        && rejected == 0
        && recv.corrupt == 0
        && triggers_missing == 0;
    s.set("ok", ok);
    if let Some(r) = first_rejection {
        s.notes.push(format!("{rejected} publishes refused, e.g. {r:?}"));
    }
    if let Some(e) = first_error {
        s.notes.push(format!("{conn_errors} connections failed during the run, e.g. {e}"));
    }
    Ok(s)
}

/// One WebSocket subscriber until `stop`: records every delivery, stores its count of distinct
/// deliveries in `unique[idx]`, heartbeats, and acks stored deliveries when `acks` is given.
pub(super) async fn subscriber(
    mut c: Conn,
    heartbeat: Bytes,
    acks: Option<Arc<dyn Wire>>,
    window: Window,
    unique: Arc<[AtomicU64]>,
    idx: usize,
    mut stop: watch::Receiver<bool>,
) -> SubOutcome {
    let mut stats = RecvStats::default();
    let (mut rejected, mut error, mut replies) = (0u64, None::<String>, Vec::<Bytes>::new());
    let mut to_ack: Vec<String> = Vec::new();
    let mut beat = interval_at(Instant::now() + HEARTBEAT_EVERY, HEARTBEAT_EVERY);
    let Conn { ws, decoder } = &mut c;
    loop {
        tokio::select! {
            biased;
            _ = stop.changed() => break,
            r = ws.fill() => match r {
                Ok(0) => { error = Some("connection ended".into()); break }
                Ok(_) => {}
                Err(e) => { error = Some(e.to_string()); break }
            },
            _ = beat.tick() => ws.queue(&heartbeat),
        }
        // One receive time per read: every message in it was in our socket at this instant.
        let now = std::time::Instant::now();
        let mut bad = None;
        let drained = ws.drain(&mut |frame| {
            let r = decoder.feed(frame, &mut |e| match e {
                Event::Payload(p) => stats.record(p, now, &window),
                Event::Stored(id) => {
                    stats.stored += 1;
                    if acks.is_some() {
                        to_ack.push(id.to_owned());
                    }
                }
                Event::Reply(r) => replies.push(r),
                Event::Rejected(_) => rejected += 1,
                _ => {}
            });
            if let Err(e) = r {
                bad.get_or_insert(e);
            }
        });
        unique[idx].store(stats.unique, Ordering::Relaxed);
        match (drained, bad) {
            (Err(e), _) | (_, Some(e)) => {
                error = Some(format!("{e:#}"));
                break;
            }
            (Ok(Some(closed)), None) => {
                error = Some(closed.to_string());
                break;
            }
            (Ok(None), None) => {}
        }
        for r in replies.drain(..) {
            ws.queue(&r);
        }
        if let Some(frame) = acks.as_ref().filter(|_| !to_ack.is_empty()).and_then(|w| w.ack(&to_ack)) {
            ws.queue(&frame);
            to_ack.clear();
        }
        if ws.has_pending()
            && let Err(e) = ws.flush().await
        {
            error = Some(e.to_string());
            break;
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(1), c.ws.close()).await;
    SubOutcome { stats, rejected, error }
}

struct PubParams {
    wire: Arc<dyn Wire>,
    topic: String,
    id: u32,
    period: Duration,
    first: Instant,
    window: Window,
    payload: usize,
    acks: bool,
}

async fn publisher(
    mut c: Conn,
    p: PubParams,
    sent: Arc<[AtomicU64]>,
    done: Arc<AtomicUsize>,
    mut stop: watch::Receiver<bool>,
) -> PubOutcome {
    let mut o = PubOutcome {
        sent: 0,
        sent_in_window: 0,
        rejected: 0,
        first_rejection: None,
        acks: histogram(),
        acked_in_window: 0,
        error: None,
    };
    let mut tick = interval_at(p.first, p.period);
    // Burst keeps the average rate when the machine stalls briefly; a stall longer than the
    // server's rate-limit burst (50 on Skua) would show up as `rejected`.
    tick.set_missed_tick_behavior(MissedTickBehavior::Burst);
    let mut buf = payload::buffer(p.payload);
    let mut sent_at: Vec<u64> = Vec::new();
    let mut replies = Vec::new();
    let mut sending = true;
    let Conn { ws, decoder } = &mut c;
    loop {
        tokio::select! {
            biased;
            _ = stop.changed() => break,
            r = ws.fill() => {
                match r {
                    Ok(0) => { o.error = Some("connection ended".into()); break }
                    Ok(_) => {}
                    Err(e) => { o.error = Some(e.to_string()); break }
                }
                let now = std::time::Instant::now();
                let mut bad = None;
                let drained = ws.drain(&mut |frame| {
                    let r = decoder.feed(frame, &mut |e| match e {
                        Event::Acked(seq) => {
                            if let Some(&t) = sent_at.get(seq as usize)
                                && p.window.contains(now)
                            {
                                let us = payload::instant_ns(now).saturating_sub(t) / 1000;
                                let _ = o.acks.record(us.clamp(1, crate::track::MAX_LATENCY_US));
                                o.acked_in_window += 1;
                            }
                        }
                        Event::Rejected(why) => {
                            o.rejected += 1;
                            o.first_rejection.get_or_insert_with(|| why.to_owned());
                        }
                        Event::Reply(r) => replies.push(r),
                        _ => {}
                    });
                    if let Err(e) = r {
                        bad.get_or_insert(e);
                    }
                });
                match (drained, bad) {
                    (Err(e), _) | (_, Some(e)) => { o.error = Some(format!("{e:#}")); break }
                    (Ok(Some(closed)), None) => { o.error = Some(closed.to_string()); break }
                    (Ok(None), None) => {}
                }
                for r in replies.drain(..) {
                    ws.queue(&r);
                }
                if ws.has_pending() && ws.flush().await.is_err() {
                    break;
                }
            }
            _ = tick.tick(), if sending => {
                let now = std::time::Instant::now();
                if now >= p.window.end {
                    sending = false;
                    done.fetch_add(1, Ordering::AcqRel);
                    continue;
                }
                let ns = payload::instant_ns(now);
                payload::write(&mut buf, Stamp { publisher: p.id, seq: o.sent, sent_ns: ns });
                if p.acks {
                    sent_at.push(ns);
                }
                ws.queue(&p.wire.publish(&p.topic, &buf, p.acks.then_some(o.sent)));
                if let Err(e) = ws.flush().await {
                    o.error = Some(e.to_string());
                    break;
                }
                o.sent += 1;
                if p.window.contains(now) {
                    o.sent_in_window += 1;
                }
                sent[p.id as usize].store(o.sent, Ordering::Release);
            }
        }
    }
    if sending {
        done.fetch_add(1, Ordering::AcqRel);
    }
    let _ = tokio::time::timeout(Duration::from_secs(1), c.ws.close()).await;
    o
}
