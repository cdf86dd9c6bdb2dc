//! `devices` (issue 37): N MQTT 3.1.1 devices over plain TCP in R rooms.
//!
//! - fan-in: every device publishes into its room at a fixed rate (QoS 0, or QoS 1 with its
//!   `PUBACK` timed); every room has WebSocket subscribers.
//! - fan-out: every device is subscribed to its room (QoS 0 or 1, each QoS 1 delivery acked);
//!   WebSocket publishers send into every room at the same rate.
//!
//! The WebSocket side is the run's adapter: against Skua NoLag (the bench fixtures' actors,
//! topics `bench/r<k>/t`), each device logging in as its own device actor
//! (`bench-token-device-<i>` as the MQTT password); against Mosquitto MQTT over WebSocket, the
//! devices anonymous. Device `i` is in room `i % R`.
//!
//! Timeline: the WebSocket side is set up, the server's RSS read, then the devices connect (and
//! subscribe) at most [`SETUP_CONCURRENCY`] at a time; after `settle` the RSS is read again (the
//! difference per device is `kib_per_device`). Then as in [`super::traffic`]: load, warm-up,
//! measured window, publishers stop, receivers get up to `drain`.
//!
//! The bench's own memory stays bounded: a device is one task holding its socket, a
//! [`READ_BUF`]-byte read buffer, one payload buffer and (fan-out) a sequence bitmap of a few
//! words; latencies go into [`SHARDS`] shared histograms, not one per device.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use bytes::Bytes;
use hdrhistogram::Histogram;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, watch};
use tokio::time::{Instant, MissedTickBehavior, interval_at, sleep, sleep_until};

use super::traffic::{SubOutcome, subscriber};
use super::{Ctx, SETUP_CONCURRENCY, all_or_bail, client_cpu, connect_all, cpu_pct, machine_cpu, set_machine, used};
use crate::conn::{Conn, ConnOptions, SETUP_TIMEOUT};
use crate::payload::{self, Stamp};
use crate::procfs;
use crate::summary::Summary;
use crate::track::{RecvStats, Seqs, Window, histogram};
use crate::wire::mqtt::{MqttWs, device, packet_id};
use crate::wire::{Decoder, Event, HEARTBEAT_EVERY, Role, TopicKey, Wire};

/// Bytes a device reads at a time (its packets are small: `PUBACK`s, one delivery a second).
pub const READ_BUF: usize = 512;

/// Shared latency histograms; device `i` records into shard `i % SHARDS`.
pub const SHARDS: usize = 16;

/// QoS 1 publishes a device keeps waiting for their `PUBACK`; an older one beyond this counts
/// as unacknowledged.
pub const MAX_PENDING: usize = 32;

/// Which way the messages go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Devices publish, WebSocket clients subscribe.
    FanIn,
    /// WebSocket clients publish, devices subscribe.
    FanOut,
}

impl Mode {
    /// `fan-in` or `fan-out`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::FanIn => "fan-in",
            Mode::FanOut => "fan-out",
        }
    }
}

/// What a `devices` run does.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Fan-in or fan-out.
    pub mode: Mode,
    /// The server's MQTT listener (plain TCP, loopback).
    pub mqtt: SocketAddr,
    /// Device connections (N).
    pub devices: usize,
    /// Rooms (R): topic `k` of the adapter ([`TopicKey::Pair`]).
    pub rooms: usize,
    /// WebSocket subscribers per room (fan-in).
    pub subs_per_room: usize,
    /// Messages per second of each device (fan-in) or into each room (fan-out).
    pub rate: f64,
    /// QoS of the devices' publishes (fan-in) or subscriptions (fan-out): 0 or 1.
    pub qos: u8,
    /// Payload bytes per message.
    pub payload: usize,
    /// Most msg/s per WebSocket publisher connection (fan-out).
    pub max_rate_per_conn: f64,
    /// Device `i` logs in with [`crate::fixtures::device_token`]`(i % n)` when `Some(n)`;
    /// anonymously (no user name or password) when `None`.
    pub device_actors: Option<usize>,
    /// Pause after the last device's setup before reading the server's RSS.
    pub settle: Duration,
}

/// Latency histograms shared by the devices.
struct Shards(Vec<Mutex<Histogram<u64>>>);

impl Shards {
    fn new() -> Self {
        Self((0..SHARDS).map(|_| Mutex::new(histogram())).collect())
    }

    fn record(&self, device: usize, us: u64) {
        if let Ok(mut h) = self.0[device % SHARDS].lock() {
            let _ = h.record(us);
        }
    }

    fn merged(&self) -> Histogram<u64> {
        let mut all = histogram();
        for h in &self.0 {
            if let Ok(h) = h.lock() {
                let _ = all.add(&*h);
            }
        }
        all
    }
}

/// What the devices' tasks share.
struct Shared {
    window: Window,
    rooms: usize,
    qos: u8,
    payload: usize,
    period: Duration,
    /// The topic of each room.
    topics: Vec<String>,
    /// Publishes sent into each room (the expected deliveries of each of its receivers).
    room_sent: Vec<AtomicU64>,
    /// Distinct deliveries each device received so far (fan-out).
    unique: Vec<AtomicU64>,
    /// Fan-out: delivery latencies; fan-in: publish → `PUBACK` (QoS 1).
    latency: Shards,
    /// Publishers (devices or WebSocket) that stopped sending.
    done: AtomicUsize,
}

/// What one device did.
#[derive(Default)]
struct DevOutcome {
    sent: u64,
    sent_in_window: u64,
    acked: u64,
    acked_in_window: u64,
    seqs: Seqs,
    error: Option<String>,
}

/// One device connection: its socket and MQTT decoder.
struct Device {
    sock: TcpStream,
    decoder: Box<dyn Decoder>,
}

impl Device {
    /// Connects to `addr`, sends CONNECT (with `password`) and waits for CONNACK, then
    /// subscribes to `sub` (topic, QoS) and waits for its SUBACK.
    async fn open(addr: SocketAddr, password: Option<String>, sub: Option<(String, u8)>) -> anyhow::Result<Self> {
        let sock = TcpStream::connect(addr).await.context("while connecting")?;
        sock.set_nodelay(true)?;
        let mut d = Self { sock, decoder: MqttWs.decoder() };
        d.exchange(device::connect(password.as_deref()), true).await.context("while connecting (CONNECT)")?;
        if let Some((topic, qos)) = sub {
            d.exchange(device::subscribe(&topic, qos), false)
                .await
                .with_context(|| format!("while subscribing to {topic}"))?;
        }
        Ok(d)
    }

    /// Sends `packet` and reads until CONNACK (`ready`) or SUBACK, within [`SETUP_TIMEOUT`].
    async fn exchange(&mut self, packet: Bytes, ready: bool) -> anyhow::Result<()> {
        self.sock.write_all(&packet).await?;
        let wait = async {
            let mut buf = [0u8; READ_BUF];
            loop {
                let n = self.sock.read(&mut buf).await?;
                if n == 0 {
                    bail!("the server closed the connection during setup");
                }
                let (mut hit, mut refused) = (false, None);
                self.decoder.feed(&buf[..n], &mut |e| match e {
                    Event::Ready if ready => hit = true,
                    Event::Subscribed if !ready => hit = true,
                    Event::Rejected(why) => refused = Some(why.to_owned()),
                    _ => {}
                })?;
                if let Some(why) = refused {
                    bail!("refused during setup: {why}");
                }
                if hit {
                    return Ok(());
                }
            }
        };
        tokio::time::timeout(SETUP_TIMEOUT, wait)
            .await
            .map_err(|_| anyhow!("no acknowledgement within {SETUP_TIMEOUT:?}"))?
    }
}

/// Opens the `n` devices, at most [`SETUP_CONCURRENCY`] at a time; device `i` subscribes to
/// its room's topic when `subscribe`. Returns them in index order, and the failures.
async fn open_devices(plan: &Plan, topics: &[String], subscribe: bool) -> (Vec<Device>, Vec<anyhow::Error>) {
    let sem = Arc::new(Semaphore::new(SETUP_CONCURRENCY));
    let mut handles = Vec::with_capacity(plan.devices);
    for i in 0..plan.devices {
        let Ok(permit) = sem.clone().acquire_owned().await else { break };
        let password = plan.device_actors.map(|n| crate::fixtures::device_token(i % n.max(1)));
        let sub = subscribe.then(|| (topics[i % plan.rooms].clone(), plan.qos));
        let addr = plan.mqtt;
        handles.push(tokio::spawn(async move {
            let _permit = permit;
            Device::open(addr, password, sub).await
        }));
    }
    let (mut ok, mut failed) = (Vec::with_capacity(plan.devices), Vec::new());
    for h in handles {
        match h.await {
            Ok(Ok(d)) => ok.push(d),
            Ok(Err(e)) => failed.push(e),
            Err(e) => failed.push(anyhow!("setup task failed: {e}")),
        }
    }
    (ok, failed)
}

/// Runs the plan and summarises it.
///
/// # Errors
/// A connection could not be set up (nothing is measured then), or a bad plan.
pub async fn run(ctx: &Ctx, plan: &Plan) -> anyhow::Result<Summary> {
    if plan.devices == 0 || plan.rooms == 0 || plan.rooms > plan.devices {
        bail!("devices needs 1 ≤ rooms ≤ devices (got {} rooms, {} devices)", plan.rooms, plan.devices);
    }
    if plan.qos > 1 {
        bail!("devices supports QoS 0 and 1, not {}", plan.qos);
    }
    let wire = ctx.wire.clone();
    let topics: Vec<String> = (0..plan.rooms).map(|k| wire.topic(TopicKey::Pair(k))).collect();
    let fan_in = plan.mode == Mode::FanIn;
    let rss = || ctx.server_pid.and_then(|p| procfs::rss_kib(p).ok());

    // The WebSocket side first: subscribers on every room (fan-in) or the publishers (fan-out).
    let n_sub = if fan_in { plan.rooms * plan.subs_per_room } else { 0 };
    let room_rate = plan.rate * plan.rooms as f64;
    let n_pub = if fan_in { 0 } else { ((room_rate / plan.max_rate_per_conn).ceil() as usize).clamp(1, plan.rooms) };
    let (subs, failed) = connect_all(
        ctx,
        n_sub,
        Role::Subscriber,
        |j| Some(topics[j / plan.subs_per_room].clone()),
        ConnOptions::default(),
    )
    .await;
    all_or_bail("subscriber", n_sub, failed)?;
    let pub_opts = ConnOptions { read_buffer: 4096, ..ConnOptions::default() };
    let (pubs, failed) = connect_all(ctx, n_pub, Role::Publisher, |_| None, pub_opts).await;
    all_or_bail("publisher", n_pub, failed)?;

    let rss_before = rss();
    let (srv_s0, t_setup) = (ctx.server_cpu(), Instant::now());
    let (devices, failed) = open_devices(plan, &topics, !fan_in).await;
    let setup_secs = t_setup.elapsed().as_secs_f64();
    let srv_s1 = ctx.server_cpu();
    all_or_bail("device", plan.devices, failed)?;
    sleep(plan.settle).await;
    let rss_devices = rss();

    let t0 = Instant::now() + Duration::from_millis(300);
    let window = Window { start: (t0 + ctx.warmup).into_std(), end: (t0 + ctx.warmup + ctx.duration).into_std() };
    let sh = Arc::new(Shared {
        window,
        rooms: plan.rooms,
        qos: plan.qos,
        payload: plan.payload,
        period: Duration::from_secs_f64(1.0 / plan.rate),
        topics: topics.clone(),
        room_sent: (0..plan.rooms).map(|_| AtomicU64::new(0)).collect(),
        unique: (0..if fan_in { 0 } else { plan.devices }).map(|_| AtomicU64::new(0)).collect(),
        latency: Shards::new(),
        done: AtomicUsize::new(0),
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    let sub_unique: Arc<[AtomicU64]> = (0..n_sub).map(|_| AtomicU64::new(0)).collect();

    let n_dev = devices.len();
    let dev_tasks: Vec<_> = devices
        .into_iter()
        .enumerate()
        .map(|(i, d)| {
            // Publishing devices' phases spread evenly over one period, so the load is smooth.
            let first = fan_in.then(|| t0 + sh.period.mul_f64(i as f64 / n_dev as f64));
            tokio::spawn(run_device(d, i, sh.clone(), first, stop_rx.clone()))
        })
        .collect();
    let sub_tasks: Vec<_> = subs
        .into_iter()
        .enumerate()
        .map(|(j, c)| {
            tokio::spawn(subscriber(c, wire.heartbeat(), None, window, sub_unique.clone(), j, stop_rx.clone()))
        })
        .collect();
    let pub_period = Duration::from_secs_f64(n_pub as f64 / room_rate.max(f64::MIN_POSITIVE));
    let pub_tasks: Vec<_> = pubs
        .into_iter()
        .enumerate()
        .map(|(p, c)| {
            let rooms: Vec<usize> = (p..plan.rooms).step_by(n_pub).collect();
            let first = t0 + pub_period.mul_f64(p as f64 / n_pub as f64);
            // MQTT delivers at the lower of the publish's and the subscription's QoS: a QoS 1
            // fan-out needs QoS 1 publishes there. Skua delivers at the granted QoS.
            let qos1 = plan.qos == 1 && wire.name() != "nolag";
            tokio::spawn(ws_publisher(
                c,
                wire.clone(),
                p as u32,
                rooms,
                sh.clone(),
                pub_period,
                first,
                qos1,
                stop_rx.clone(),
            ))
        })
        .collect();

    sleep_until(window.start.into()).await;
    let (srv0, cli0, m0) = (ctx.server_cpu(), client_cpu(), machine_cpu());
    ctx.mark_window("start").await;
    sleep_until(window.end.into()).await;
    ctx.mark_window("end").await;
    let (srv1, cli1, m1) = (ctx.server_cpu(), client_cpu(), machine_cpu());
    let rss_load = rss();

    let n_senders = if fan_in { n_dev } else { n_pub };
    let give_up = Instant::now() + Duration::from_secs(5);
    while sh.done.load(Ordering::Acquire) < n_senders && Instant::now() < give_up {
        sleep(Duration::from_millis(10)).await;
    }
    let expected = |room: usize| sh.room_sent[room].load(Ordering::Acquire);
    let drain_end = Instant::now() + ctx.drain;
    let behind = || {
        if fan_in {
            (0..n_sub).any(|j| sub_unique[j].load(Ordering::Relaxed) < expected(j / plan.subs_per_room))
        } else {
            (0..n_dev).any(|i| sh.unique[i].load(Ordering::Relaxed) < expected(i % plan.rooms))
        }
    };
    while Instant::now() < drain_end && behind() {
        sleep(Duration::from_millis(20)).await;
    }
    let _ = stop_tx.send(true);

    let mut recv = RecvStats::default();
    let (mut lost, mut expected_total, mut conn_errors, mut rejected) = (0u64, 0u64, 0u64, 0u64);
    let mut first_error = None;
    for (j, t) in sub_tasks.into_iter().enumerate() {
        let SubOutcome { stats, rejected: r, error } = t.await?;
        let want = expected(j / plan.subs_per_room);
        expected_total += want;
        lost += want.saturating_sub(stats.unique);
        recv.merge(&stats);
        rejected += r;
        if let Some(e) = error {
            conn_errors += 1;
            first_error.get_or_insert(format!("subscriber {j}: {e}"));
        }
    }
    let (mut published, mut published_in_window, mut acked, mut acked_in_window) = (0u64, 0, 0, 0);
    for (i, t) in dev_tasks.into_iter().enumerate() {
        let o = t.await?;
        published += o.sent;
        published_in_window += o.sent_in_window;
        acked += o.acked;
        acked_in_window += o.acked_in_window;
        if !fan_in {
            let want = expected(i % plan.rooms);
            expected_total += want;
            lost += want.saturating_sub(o.seqs.unique);
            recv.merge_seqs(&o.seqs);
        }
        if let Some(e) = o.error {
            conn_errors += 1;
            first_error.get_or_insert(format!("device {i}: {e}"));
        }
    }
    let mut first_rejection = None;
    for (p, t) in pub_tasks.into_iter().enumerate() {
        let o = t.await?;
        published += o.sent;
        published_in_window += o.sent_in_window;
        rejected += o.rejected;
        if first_rejection.is_none() {
            first_rejection = o.first_rejection;
        }
        if let Some(e) = o.error {
            conn_errors += 1;
            first_error.get_or_insert(format!("publisher {p}: {e}"));
        }
    }
    let device_latency = sh.latency.merged();

    let secs = window.secs();
    let srv_used = used(srv0, srv1);
    let case = format!(
        "devices {} N={} rooms={} r={} qos={} P={}",
        plan.mode.name(),
        plan.devices,
        plan.rooms,
        plan.rate,
        plan.qos,
        plan.payload
    );
    let mut s = ctx.summary("devices", case);
    s.set("mode", plan.mode.name());
    s.set("mqtt", plan.mqtt.to_string().as_str());
    s.set("devices", plan.devices);
    s.set("rooms", plan.rooms);
    s.set("qos", u64::from(plan.qos));
    s.set("subscribers", if fan_in { n_sub } else { plan.devices });
    s.set("publishers", if fan_in { plan.devices } else { n_pub });
    s.set("rate_target", if fan_in { plan.rate * plan.devices as f64 } else { room_rate });
    s.set("payload_bytes", plan.payload);
    s.set("warmup_s", ctx.warmup.as_secs_f64());
    s.set("duration_s", secs);
    s.set("device_setup_s", setup_secs);
    s.set("device_setups_per_s", plan.devices as f64 / setup_secs);
    let setup_cpu = used(srv_s0, srv_s1);
    s.set("server_cpu_us_per_device_setup", setup_cpu.map(|u| u as f64 / plan.devices as f64));
    s.set("published", published);
    s.set("published_per_s", published_in_window as f64 / secs);
    s.set("expected_deliveries", expected_total);
    s.set("delivered", recv.unique);
    s.set("delivered_per_s", recv.in_window as f64 / secs);
    s.set("lost", lost);
    s.set("duplicated", recv.duplicated);
    s.set("reordered", recv.reordered);
    s.set("rejected", rejected);
    s.set("conn_errors", conn_errors);
    s.set("corrupt", recv.corrupt);
    if fan_in {
        s.latency("lat", &recv.latency);
        if plan.qos == 1 {
            s.latency("ack", &device_latency);
            s.set("acked", acked);
            s.set("acked_per_s", acked_in_window as f64 / secs);
            s.set("unacked", published.saturating_sub(acked));
        }
    } else {
        s.latency("lat", &device_latency);
    }
    s.set("server_cpu_us", srv_used);
    s.set("server_cpu_pct", cpu_pct(srv_used, secs));
    s.set("server_cpu_us_per_msg", srv_used.filter(|_| recv.in_window > 0).map(|u| u as f64 / recv.in_window as f64));
    s.set("client_cpu_pct", cpu_pct(used(cli0, cli1), secs));
    s.set("rss_before_devices_kib", rss_before);
    s.set("rss_devices_kib", rss_devices);
    s.set("rss_load_kib", rss_load);
    let per = rss_before.zip(rss_devices).map(|(a, b)| b.saturating_sub(a) as f64 / plan.devices as f64);
    s.set("kib_per_device", per);
    set_machine(&mut s, m0, m1, secs);
    let unacked_all = if fan_in && plan.qos == 1 { published.saturating_sub(acked) } else { 0 };
    let ok =
        lost == 0 && recv.duplicated == 0 && conn_errors == 0 && rejected == 0 && recv.corrupt == 0 && unacked_all == 0;
    s.set("ok", ok);
    if unacked_all > 0 {
        s.notes.push(format!("{unacked_all} of {published} QoS 1 publishes got no PUBACK"));
    }
    if let Some(r) = first_rejection {
        s.notes.push(format!("{rejected} publishes refused, e.g. {r:?}"));
    }
    if let Some(e) = first_error {
        s.notes.push(format!("{conn_errors} connections failed during the run, e.g. {e}"));
    }
    if ctx.server_pid.is_none() {
        s.notes.push("no --server-pid: RSS and CPU are not measured".into());
    }
    Ok(s)
}

/// One device until `stop`: publishes at the shared period from `first` (fan-in) or receives
/// its room's messages (fan-out), and sends `PINGREQ` every [`HEARTBEAT_EVERY`].
async fn run_device(
    mut d: Device,
    i: usize,
    sh: Arc<Shared>,
    first: Option<Instant>,
    mut stop: watch::Receiver<bool>,
) -> DevOutcome {
    enum Step {
        Stop,
        Read(usize),
        Tick,
        Beat,
    }
    let (room, local) = (i % sh.rooms, u32::try_from(i / sh.rooms).unwrap_or(u32::MAX));
    let mut o = DevOutcome::default();
    let mut sending = first.is_some();
    // A device that never publishes still needs an interval; it is never polled.
    let mut tick = interval_at(first.unwrap_or_else(Instant::now), sh.period);
    tick.set_missed_tick_behavior(MissedTickBehavior::Burst);
    let mut beat = interval_at(Instant::now() + HEARTBEAT_EVERY, HEARTBEAT_EVERY);
    let mut buf = [0u8; READ_BUF];
    let mut payload = if sending { payload::buffer(sh.payload) } else { Vec::new() };
    let mut pending: VecDeque<(u16, u64)> = VecDeque::new();
    let mut replies: Vec<Bytes> = Vec::new();
    let ping = Bytes::from_static(&[0xc0, 0x00]);
    o.error = loop {
        let step = tokio::select! {
            biased;
            _ = stop.changed() => Step::Stop,
            r = d.sock.read(&mut buf) => match r {
                Ok(0) => break Some("connection ended".into()),
                Ok(n) => Step::Read(n),
                Err(e) => break Some(e.to_string()),
            },
            _ = tick.tick(), if sending => Step::Tick,
            _ = beat.tick() => Step::Beat,
        };
        match step {
            Step::Stop => break None,
            Step::Read(n) => {
                let now = std::time::Instant::now();
                let in_window = sh.window.contains(now);
                let (seqs, acked, acked_in_window) = (&mut o.seqs, &mut o.acked, &mut o.acked_in_window);
                let r = d.decoder.feed(&buf[..n], &mut |e| match e {
                    Event::Payload(p) => {
                        if let Some(us) = seqs.record(p, now, &sh.window) {
                            sh.latency.record(i, us);
                        }
                    }
                    Event::Acked(id) => {
                        if let Some(k) = pending.iter().position(|&(p, _)| u64::from(p) == id)
                            && let Some((_, sent_ns)) = pending.remove(k)
                        {
                            *acked += 1;
                            if in_window {
                                *acked_in_window += 1;
                                let us = payload::instant_ns(now).saturating_sub(sent_ns) / 1000;
                                sh.latency.record(i, us.clamp(1, crate::track::MAX_LATENCY_US));
                            }
                        }
                    }
                    Event::Reply(r) => replies.push(r),
                    _ => {}
                });
                if let Err(e) = r {
                    break Some(format!("{e:#}"));
                }
                if let Some(u) = sh.unique.get(i) {
                    u.store(o.seqs.unique, Ordering::Relaxed);
                }
                let mut failed = None;
                for r in replies.drain(..) {
                    if let Err(e) = d.sock.write_all(&r).await {
                        failed = Some(e.to_string());
                        break;
                    }
                }
                if failed.is_some() {
                    break failed;
                }
            }
            Step::Tick => {
                let now = std::time::Instant::now();
                if now >= sh.window.end {
                    sending = false;
                    sh.done.fetch_add(1, Ordering::AcqRel);
                    continue;
                }
                let ns = payload::instant_ns(now);
                payload::write(&mut payload, Stamp { publisher: local, seq: o.sent, sent_ns: ns });
                let id = (sh.qos == 1).then(|| packet_id(o.sent));
                if let Some(id) = id {
                    // The oldest never gets its PUBACK counted: the run reports it as unacked.
                    if pending.len() >= MAX_PENDING {
                        pending.pop_front();
                    }
                    pending.push_back((id, ns));
                }
                if let Err(e) = d.sock.write_all(&device::publish(&sh.topics[room], &payload, id)).await {
                    break Some(e.to_string());
                }
                o.sent += 1;
                if sh.window.contains(now) {
                    o.sent_in_window += 1;
                }
                sh.room_sent[room].fetch_add(1, Ordering::AcqRel);
            }
            Step::Beat => {
                if let Err(e) = d.sock.write_all(&ping).await {
                    break Some(e.to_string());
                }
            }
        }
    };
    if sending {
        sh.done.fetch_add(1, Ordering::AcqRel);
    }
    let _ = tokio::time::timeout(Duration::from_secs(1), d.sock.write_all(&device::disconnect())).await;
    o
}

/// What one WebSocket publisher did (fan-out).
struct PubOutcome {
    sent: u64,
    sent_in_window: u64,
    rejected: u64,
    first_rejection: Option<String>,
    error: Option<String>,
}

/// One WebSocket publisher (fan-out): one message per `period` into its `rooms` in turn, from
/// `first` until the window's end; `qos1` asks for QoS 1 (MQTT over WebSocket).
#[allow(clippy::too_many_arguments)]
async fn ws_publisher(
    mut c: Conn,
    wire: Arc<dyn Wire>,
    id: u32,
    rooms: Vec<usize>,
    sh: Arc<Shared>,
    period: Duration,
    first: Instant,
    qos1: bool,
    mut stop: watch::Receiver<bool>,
) -> PubOutcome {
    let mut o = PubOutcome { sent: 0, sent_in_window: 0, rejected: 0, first_rejection: None, error: None };
    let mut tick = interval_at(first, period);
    tick.set_missed_tick_behavior(MissedTickBehavior::Burst);
    let mut beat = interval_at(Instant::now() + HEARTBEAT_EVERY, HEARTBEAT_EVERY);
    let mut buf = payload::buffer(sh.payload);
    let (mut sending, mut replies) = (true, Vec::new());
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
                let mut bad = None;
                let drained = ws.drain(&mut |frame| {
                    let r = decoder.feed(frame, &mut |e| match e {
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
            }
            _ = tick.tick(), if sending => {
                let now = std::time::Instant::now();
                if now >= sh.window.end {
                    sending = false;
                    sh.done.fetch_add(1, Ordering::AcqRel);
                    continue;
                }
                let room = rooms[(o.sent % rooms.len() as u64) as usize];
                payload::write(&mut buf, Stamp { publisher: id, seq: o.sent, sent_ns: payload::instant_ns(now) });
                ws.queue(&wire.publish(&sh.topics[room], &buf, qos1.then_some(o.sent)));
                o.sent += 1;
                if sh.window.contains(now) {
                    o.sent_in_window += 1;
                }
                sh.room_sent[room].fetch_add(1, Ordering::AcqRel);
            }
            _ = beat.tick() => ws.queue(&wire.heartbeat()),
        }
        if ws.has_pending()
            && let Err(e) = ws.flush().await
        {
            o.error = Some(e.to_string());
            break;
        }
    }
    if sending {
        sh.done.fetch_add(1, Ordering::AcqRel);
    }
    let _ = tokio::time::timeout(Duration::from_secs(1), c.ws.close()).await;
    o
}
