//! `skua-chaos`: a randomized fault run with a history checker (docs/reliability.md).
//!
//! Starts private Mosquitto, Redis and Postgres instances and three `skua serve` nodes in
//! cluster mode on free ports (everything under one temporary directory; each node in a network
//! namespace of its own where the machine allows it, else all on loopback), runs a seeded
//! workload while a seeded nemesis kills, restarts, pauses and partitions, then checks the
//! recorded history and prints a verdict table. Exit status: 0 pass, 1 a violation, 2 the
//! harness itself failed.

mod check;
mod history;
mod rng;
mod workload;

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;

use crate::history::{Ev, History, Kind, Outcome};
use crate::rng::Rng;
use crate::workload::{ConsumerSpec, Ctx};
use skua_chaos::netns::{self, Netns};
use skua_chaos::procs::{self, Node, Service};

/// Command line.
#[derive(Debug, Parser)]
#[command(about = "Randomized faults against a Skua cluster (3 nodes by default), with a history checker")]
struct Args {
    /// The skua binary.
    #[arg(long, env = "SKUA_BIN", default_value = "target/debug/skua")]
    skua: PathBuf,
    /// Seed of the workload's choices and the fault schedule.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Seconds of workload (publishing); faults stop 25 s before its end.
    #[arg(long, default_value_t = 120)]
    duration: u64,
    /// Publishers (each alternates the logged and the plain topic).
    #[arg(long, default_value_t = 2)]
    publishers: usize,
    /// Milliseconds between one publisher's publishes.
    #[arg(long, default_value_t = 100)]
    interval_ms: u64,
    /// Durable groups (two members each).
    #[arg(long, default_value_t = 2)]
    groups: usize,
    /// No faults: the workload alone, for soaks (scripts/soak.sh).
    #[arg(long)]
    no_faults: bool,
    /// A check (by its key in the verdict table) whose violations are reported but do not fail
    /// the run: for known, documented issues (docs/reliability.md). Repeatable.
    #[arg(long)]
    tolerate: Vec<String>,
    /// Keep the run directory (logs, history.jsonl) even when the run passes.
    #[arg(long)]
    keep: bool,
    /// Nodes. 1: one node on its own (memory bus and presence: no Mosquitto or Redis is started,
    /// and their faults are left out), for the single-node soak.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=9))]
    nodes: u16,
    /// Run every node on loopback, without network namespaces (partitions are then left out of
    /// the fault schedule). Without this flag the harness still falls back to loopback, after
    /// saying why, where namespaces cannot be made (not root, no `ip`); that fallback is a skip
    /// (listed in scripts/test.sh's skip report, a failure under CI=true).
    #[arg(long)]
    no_netns: bool,
    /// Remove the network namespaces and links that runs whose process is gone left behind
    /// (a SIGKILLed run), then exit. Every run also does this when it starts.
    #[arg(long)]
    clean_netns: bool,
    /// Internal: connect to this address (TCP, 3 s) and exit 0 or 1; the harness runs it inside
    /// each node's namespace to check the namespaces reach the host before using them.
    #[arg(long, hide = true)]
    probe: Option<std::net::SocketAddr>,
}

const PLAIN_SUBSCRIBERS: usize = 2;
const PRESENCE_CLIENTS: usize = 3;
/// Faults end this long before the workload does (presence convergence is judged 15 s after
/// the last fault heals, while the publishers still run).
const QUIET_TAIL_S: u64 = 25;
/// How long the end of the run waits for acknowledged logged messages and their triggers.
const DRAIN_LIMIT: Duration = Duration::from_secs(120);
/// Presence must match the truth this long after the last fault healed.
const PRESENCE_WITHIN: Duration = Duration::from_secs(15);

fn fixtures(args: &Args, webhook: &str) -> String {
    let mut f = format!(
        r#"[[projects]]
id = "chaos"

[[projects.apps]]
id = "chaos-app"
slug = "c"
topics = ["log", "plain"]
logged_topics = ["log"]
topic_configs.log.webhooks.on_publish = {{ url = "{webhook}" }}

[[projects.apps.rooms]]
slug = "r"
"#
    );
    let mut actor = |id: String, ty: &str| {
        f.push_str(&format!(
            "\n[[actors]]\nid = \"{id}\"\nproject = \"chaos\"\ntype = \"{ty}\"\ntokens = [\"tok-{id}\"]\n"
        ));
    };
    for p in 0..args.publishers {
        actor(format!("p{p}"), "user");
    }
    for g in 0..args.groups {
        actor(format!("a{g}"), "agent");
    }
    for s in 0..PLAIN_SUBSCRIBERS {
        actor(format!("s{s}"), "user");
    }
    for q in 0..PRESENCE_CLIENTS {
        actor(format!("q{q}"), "user");
    }
    actor("obs".into(), "user");
    f
}

struct Cluster {
    nodes: Vec<Node>,
    /// `None` with a single node (memory bus and presence).
    mosquitto: Option<Service>,
    redis: Option<Service>,
    postgres: Service,
    /// The nodes' namespaces, when partitions are possible.
    net: Option<Arc<Netns>>,
}

/// The kinds of fault, with their weights in the seeded choice. The order and weights of the
/// first five are those of the loopback schedule before partitions existed, so a loopback run
/// (`--no-netns`) of a seed has the same fault schedule as before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Kill,
    Pause,
    Mosquitto,
    Redis,
    Postgres,
    Partition,
}

const FAULTS: [(Fault, u64); 6] = [
    (Fault::Kill, 3),
    (Fault::Pause, 2),
    (Fault::Mosquitto, 2),
    (Fault::Redis, 2),
    (Fault::Postgres, 2),
    (Fault::Partition, 3),
];

/// Sleeps `ms` milliseconds, or less when the run is being aborted.
fn nap(ms: u64, abort: &AtomicBool) {
    let until = std::time::Instant::now() + Duration::from_millis(ms);
    while !abort.load(Ordering::Relaxed) {
        let left = until.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::sleep(left.min(Duration::from_millis(100)));
    }
}

/// The nemesis: from `start` until `until` (history ms), one fault at a time at seeded moments.
fn nemesis(
    cluster: &Mutex<Cluster>,
    hist: &History,
    seed: u64,
    until: u64,
    enabled: bool,
    abort: &AtomicBool,
) -> Result<()> {
    let mut rng = Rng::new(seed, 0xFA17);
    while !enabled && hist.now() < until && !abort.load(Ordering::Relaxed) {
        nap(200, abort);
    }
    let (faults, node_count) = {
        let c = cluster.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let available = |f: Fault| match f {
            Fault::Mosquitto => c.mosquitto.is_some(),
            Fault::Redis => c.redis.is_some(),
            Fault::Partition => c.net.is_some(),
            _ => true,
        };
        let faults: Vec<(Fault, u64)> = FAULTS.iter().copied().filter(|(f, _)| available(*f)).collect();
        (faults, c.nodes.len() as u64)
    };
    let total: u64 = faults.iter().map(|(_, w)| w).sum();
    loop {
        nap(rng.range(2_000, 6_000), abort);
        if hist.now() >= until || abort.load(Ordering::Relaxed) {
            return Ok(());
        }
        let mut c = cluster.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut pick = rng.below(total);
        let fault = faults
            .iter()
            .find(|(_, w)| {
                let hit = pick < *w;
                pick = pick.saturating_sub(*w);
                hit
            })
            .map_or(Fault::Kill, |(f, _)| *f);
        let down = match fault {
            Fault::Kill => rng.range(1_000, 4_000),
            Fault::Pause => rng.range(2_000, 6_000),
            Fault::Partition => rng.range(2_000, 8_000),
            _ => rng.range(500, 3_000),
        };
        let node = rng.below(node_count) as usize;
        // A partition cuts the node from one of the services it uses.
        let target = if fault == Fault::Partition {
            let mut targets = Vec::new();
            if let (Some(net), Some(s)) = (&c.net, &c.mosquitto) {
                targets.push(("mosquitto", s.host, net.clone()));
            }
            if let (Some(net), Some(s)) = (&c.net, &c.redis) {
                targets.push(("redis", s.host, net.clone()));
            }
            if let Some(net) = &c.net {
                targets.push(("postgres", c.postgres.host, net.clone()));
            }
            let i = rng.below(targets.len() as u64) as usize;
            targets.into_iter().nth(i)
        } else {
            None
        };
        let what = match (fault, &target) {
            (Fault::Kill, _) => format!("kill9 node {node}, restart after {down} ms"),
            (Fault::Pause, _) => format!("pause node {node} (SIGSTOP) for {down} ms"),
            (Fault::Mosquitto, _) => format!("mosquitto kill9, restart after {down} ms"),
            (Fault::Redis, _) => format!("redis kill9, restart after {down} ms"),
            (Fault::Postgres, _) => format!("postgres stop (fast shutdown), restart after {down} ms"),
            (Fault::Partition, Some((name, ..))) => format!("partition node {node} from {name}, heal after {down} ms"),
            (Fault::Partition, None) => continue,
        };
        eprintln!("[{:>7} ms] nemesis: {what}", hist.now());
        hist.push(Ev::FaultStart { what: what.clone(), t: hist.now() });
        match fault {
            Fault::Kill => {
                c.nodes[node].kill9();
                nap(down, abort);
                c.nodes[node].start()?;
            }
            Fault::Pause => {
                c.nodes[node].pause(true);
                nap(down, abort);
                c.nodes[node].pause(false);
            }
            Fault::Mosquitto | Fault::Redis => {
                let s = if fault == Fault::Mosquitto { &mut c.mosquitto } else { &mut c.redis };
                if let Some(s) = s {
                    s.stop();
                    nap(down, abort);
                    s.restart()?;
                }
            }
            Fault::Postgres => {
                c.postgres.stop();
                nap(down, abort);
                c.postgres.restart()?;
            }
            Fault::Partition => {
                if let Some((_, addr, net)) = &target {
                    net.partition(node, *addr)?;
                    nap(down, abort);
                    net.heal(node, *addr)?;
                }
            }
        }
        hist.push(Ev::FaultEnd { what, t: hist.now() });
        eprintln!("[{:>7} ms] nemesis: healed", hist.now());
    }
}

fn all_delivered(h: &[Ev], groups: &[String]) -> (usize, usize) {
    use std::collections::HashSet;
    let acked: HashSet<_> = h
        .iter()
        .filter_map(|e| match e {
            Ev::Outcome { key, outcome: Outcome::Acked, .. } if key.0 == Kind::Logged => Some(*key),
            _ => None,
        })
        .collect();
    let mut got: HashSet<(String, history::MsgKey)> = HashSet::new();
    let mut trig: HashSet<history::MsgKey> = HashSet::new();
    for e in h {
        match e {
            Ev::Delivered { consumer, key: Some(k), .. } => {
                got.insert((consumer.split('/').next().unwrap_or("").to_owned(), *k));
            }
            Ev::Trigger { key: Some(k), .. } => {
                trig.insert(*k);
            }
            _ => {}
        }
    }
    let missing = acked
        .iter()
        .map(|k| groups.iter().filter(|g| !got.contains(&((*g).clone(), *k))).count() + usize::from(!trig.contains(k)))
        .sum();
    (acked.len(), missing)
}

async fn run(args: &Args, dir: &std::path::Path, net: Option<Arc<Netns>>, abort: Arc<AtomicBool>) -> Result<bool> {
    let hist = History::new();
    let node_count = usize::from(args.nodes);
    eprintln!(
        "skua-chaos: seed {}, duration {} s, {node_count} node(s) {}, run directory {}",
        args.seed,
        args.duration,
        if net.is_some() { "in network namespaces (partitions on)" } else { "on loopback (no partitions)" },
        dir.display()
    );
    let bin = std::fs::canonicalize(&args.skua).with_context(|| format!("skua binary {}", args.skua.display()))?;
    let host = |last: u8| net.as_ref().map_or(Ipv4Addr::LOCALHOST, |n| n.addr(last));
    let (mosquitto, redis, postgres) = {
        let dir = dir.to_owned();
        let (m, r, p) = (host(Netns::MOSQUITTO), host(Netns::REDIS), host(Netns::POSTGRES));
        let cluster = node_count > 1;
        tokio::task::spawn_blocking(move || -> Result<_> {
            let mosquitto = if cluster { Some(Service::mosquitto_at(&dir, m)?) } else { None };
            let redis = if cluster { Some(Service::redis_at(&dir, r)?) } else { None };
            Ok((mosquitto, redis, Service::postgres_at(&dir, p)?))
        })
        .await??
    };
    let store = postgres.url();
    {
        let (bin, store) = (bin.clone(), store.clone());
        tokio::task::spawn_blocking(move || procs::migrate(&bin, &store)).await??;
    }
    let webhook = workload::webhook_receiver(hist.clone(), host(Netns::HARNESS)).await?;
    let fixtures_path = dir.join("fixtures.toml");
    std::fs::write(&fixtures_path, fixtures(args, &webhook))?;
    let mut common: Vec<String> = Vec::new();
    if let (Some(m), Some(r)) = (&mosquitto, &redis) {
        common.extend(["--bus".to_owned(), m.url(), "--presence".to_owned(), r.url()]);
    }
    common.extend(
        [
            "--fixtures",
            &fixtures_path.display().to_string(),
            "--store",
            &store,
            "--namespace",
            "chaos",
            "--node-ttl",
            "4s",
            "--node-refresh",
            "1s",
            "--rate-limit",
            "1000",
            "--webhook-trigger-first-retry",
            "1s",
            // The harness scrapes nothing it has to authenticate to (issue 33, item 12).
            "--metrics-public",
            "true",
        ]
        .iter()
        .map(|s| (*s).to_owned()),
    );
    let mut nodes = Vec::new();
    for i in 0..node_count {
        let (addr, ns) = net.as_ref().map_or((Ipv4Addr::LOCALHOST, None), |n| (n.node_addr(i), Some(n.ns(i))));
        nodes.push(Node::new(i, &bin, &common, dir, addr, ns)?);
    }
    let cluster = Arc::new(Mutex::new(Cluster { nodes, mosquitto, redis, postgres, net }));
    // Each node's first start binds port 0 and says which port it got.
    let urls = {
        let cluster = cluster.clone();
        tokio::task::spawn_blocking(move || -> Result<Vec<String>> {
            let mut c = cluster.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            c.nodes.iter_mut().try_for_each(Node::start)?;
            Ok(c.nodes.iter().map(Node::url).collect())
        })
        .await??
    };
    let urls = Arc::new(urls);
    eprintln!("[{:>7} ms] cluster up: {urls:?}", hist.now());

    let ctx = Ctx {
        hist: hist.clone(),
        urls,
        stop_publishing: Arc::new(AtomicBool::new(false)),
        stop_all: Arc::new(AtomicBool::new(false)),
        freeze_presence: Arc::new(AtomicBool::new(false)),
        conns: Arc::new(AtomicU64::new(0)),
    };
    let groups: Vec<String> = (0..args.groups).map(|g| format!("g{g}")).collect();
    let mut consumers = Vec::new();
    let mut names = Vec::new();
    for (g, group) in groups.iter().enumerate() {
        for m in 0..2 {
            let spec = ConsumerSpec {
                name: format!("{group}/m{m}"),
                token: format!("tok-a{g}"),
                client_id: Some(format!("m{m}")),
                topic: workload::LOGGED_TOPIC,
                group: Some(group.clone()),
                ack: true,
                churn_secs: 20,
                base: g + m,
            };
            names.push(spec.name.clone());
            let rng = Rng::new(args.seed, 100 + (g * 2 + m) as u64);
            consumers.push(tokio::spawn(workload::consumer(ctx.clone(), spec, rng)));
        }
    }
    let plain_subscribers: Vec<String> = (0..PLAIN_SUBSCRIBERS).map(|s| format!("s{s}")).collect();
    for (s, name) in plain_subscribers.iter().enumerate() {
        let spec = ConsumerSpec {
            name: name.clone(),
            token: format!("tok-{name}"),
            client_id: None,
            topic: workload::PLAIN_TOPIC,
            group: None,
            ack: false,
            churn_secs: 0,
            base: s + 1,
        };
        names.push(name.clone());
        consumers.push(tokio::spawn(workload::consumer(ctx.clone(), spec, Rng::new(args.seed, 200 + s as u64))));
    }
    for q in 0..PRESENCE_CLIENTS {
        consumers.push(tokio::spawn(workload::presence_client(ctx.clone(), q, Rng::new(args.seed, 300 + q as u64))));
    }
    // Every consumer exists before the first publish (a group keeps what is published after
    // its consumer was created).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let h = hist.snapshot();
        let ready =
            names.iter().all(|n| h.iter().any(|e| matches!(e, Ev::Subscribed { consumer, .. } if consumer == n)));
        if ready {
            break;
        }
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "consumers did not subscribe within 60 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let start = hist.now();
    eprintln!("[{start:>7} ms] workload starts");
    let publishers: Vec<_> = (0..args.publishers)
        .map(|p| tokio::spawn(workload::publisher(ctx.clone(), p, Duration::from_millis(args.interval_ms))))
        .collect();
    let faults_until = start + args.duration.saturating_sub(QUIET_TAIL_S) * 1000;
    let nemesis_done = {
        let (cluster, hist, seed, enabled) = (cluster.clone(), hist.clone(), args.seed, !args.no_faults);
        tokio::task::spawn_blocking(move || nemesis(&cluster, &hist, seed, faults_until, enabled, &abort))
    };
    nemesis_done.await??;
    let healed = tokio::time::Instant::now();
    ctx.freeze_presence.store(true, Ordering::Relaxed);
    eprintln!("[{:>7} ms] faults over; presence frozen", hist.now());

    // Presence: poll every node until all agree with the truth, at most 15 s.
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let h = hist.snapshot();
        let mut truth: std::collections::BTreeMap<String, bool> = std::collections::BTreeMap::new();
        for e in &h {
            if let Ev::PresenceIntent { actor, joined, .. } = e {
                truth.insert(actor.clone(), *joined);
            }
        }
        let want: Vec<String> = truth.into_iter().filter(|(_, j)| *j).map(|(a, _)| a).collect();
        let mut seen = Vec::new();
        for (i, url) in ctx.urls.iter().enumerate() {
            let actors = workload::presence_snapshot(url).await.unwrap_or_else(|e| vec![format!("<error: {e}>")]);
            seen.push((i, actors));
        }
        let agree = seen.iter().all(|(_, a)| *a == want);
        if agree || healed.elapsed() >= PRESENCE_WITHIN {
            for (node, actors) in seen {
                hist.push(Ev::PresenceSeen { node, actors, t: hist.now() });
            }
            eprintln!(
                "[{:>7} ms] presence {} {:.1} s after the last fault",
                hist.now(),
                if agree { "converged" } else { "did NOT converge" },
                healed.elapsed().as_secs_f64()
            );
            break;
        }
    }

    let end = start + args.duration * 1000;
    while hist.now() < end {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    ctx.stop_publishing.store(true, Ordering::Relaxed);
    for p in publishers {
        let _ = p.await;
    }
    eprintln!("[{:>7} ms] publishing stopped; draining", hist.now());
    let deadline = tokio::time::Instant::now() + DRAIN_LIMIT;
    loop {
        let (acked, missing) = all_delivered(&hist.snapshot(), &groups);
        if missing == 0 || tokio::time::Instant::now() >= deadline {
            eprintln!(
                "[{:>7} ms] drained: {acked} acknowledged logged messages, {missing} deliveries or triggers missing",
                hist.now()
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    ctx.stop_all.store(true, Ordering::Relaxed);
    for c in consumers {
        let _ = tokio::time::timeout(Duration::from_secs(5), c).await;
    }

    let h = hist.snapshot();
    let mut lines = String::new();
    for e in &h {
        lines.push_str(&e.to_json().to_string());
        lines.push('\n');
    }
    std::fs::write(dir.join("history.jsonl"), lines)?;
    let setup = check::Setup {
        groups,
        plain_subscribers,
        presence_actors: (0..PRESENCE_CLIENTS).map(|q| format!("q{q}")).collect(),
    };
    let verdict = check::check(&h, &setup, &args.tolerate);
    let table = check::render(&verdict, args.seed);
    std::fs::write(dir.join("verdict.txt"), &table)?;
    println!("{table}");
    let cluster =
        Arc::try_unwrap(cluster).ok().map(|m| m.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner));
    tokio::task::spawn_blocking(move || drop(cluster)).await?;
    Ok(verdict.ok())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(addr) = args.probe {
        return match std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(3)) {
            Ok(_) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        };
    }
    if args.clean_netns {
        let n = netns::remove_stale();
        eprintln!("skua-chaos: removed the network namespaces and links of {n} finished run(s)");
        return ExitCode::SUCCESS;
    }
    let stale = netns::remove_stale();
    if stale > 0 {
        eprintln!(
            "skua-chaos: removed the network namespaces and links of {stale} earlier run(s) whose process is gone"
        );
    }
    let net = if args.no_netns {
        None
    } else {
        match Netns::create(usize::from(args.nodes)).and_then(|n| reachable(&n).map(|()| n)) {
            Ok(n) => Some(Arc::new(n)),
            Err(e) => {
                let why = format!("no network namespaces ({e:#}): nodes on loopback, no partitions");
                eprintln!("skua-chaos: {why}");
                if let Err(code) = report_skip(&why) {
                    return code;
                }
                None
            }
        }
    };
    let abort = Arc::new(AtomicBool::new(false));
    let dir = std::env::temp_dir().join(format!("skua-chaos-{}-{}", args.seed, std::process::id()));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("skua-chaos: cannot create {}: {e}", dir.display());
        return ExitCode::from(2);
    }
    let result = tokio::select! {
        r = run(&args, &dir, net.clone(), abort.clone()) => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
        _ = terminated() => Err(anyhow::anyhow!("terminated")),
    };
    // Stops the nemesis (it heals what it broke); the namespaces go with the last reference.
    abort.store(true, Ordering::Relaxed);
    drop(net);
    match result {
        Ok(true) => {
            if !args.keep {
                let _ = std::fs::remove_dir_all(&dir);
            }
            ExitCode::SUCCESS
        }
        Ok(false) => {
            eprintln!("skua-chaos: violations; history, node logs and verdict kept in {}", dir.display());
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("skua-chaos: the harness failed: {e:#} (logs in {})", dir.display());
            ExitCode::from(2)
        }
    }
}

/// The partitions this run leaves out, reported as a skip (issue 35: no skip passes silently):
/// appended to the skip report of scripts/test.sh (`SKUA_TEST_SKIP_LOG`), which lists it and
/// fails on it under CI=true; and a failure at once under CI=true (`--no-netns` is the way to
/// choose loopback there).
fn report_skip(why: &str) -> Result<(), ExitCode> {
    if let Some(log) = std::env::var_os("SKUA_TEST_SKIP_LOG") {
        use std::io::Write;
        let line = format!("chaos run: partitions left out: {why}\n");
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written {
            eprintln!("skua-chaos: cannot append to the skip report {}: {e}", std::path::Path::new(&log).display());
            return Err(ExitCode::from(2));
        }
    }
    if std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true")) {
        eprintln!("skua-chaos: CI=true requires the partitions (run as root with iproute2, or pass --no-netns)");
        return Err(ExitCode::from(2));
    }
    Ok(())
}

/// Checks that a process in each node's namespace can open a TCP connection to the harness's
/// address on the bridge (a host whose firewall filters bridged traffic fails here, and the run
/// falls back to loopback instead of failing).
fn reachable(net: &Netns) -> Result<()> {
    let listener = std::net::TcpListener::bind((net.addr(Netns::HARNESS), 0))?;
    let addr = listener.local_addr()?.to_string();
    let exe = std::env::current_exe()?;
    for i in 0..net.nodes() {
        let out = std::process::Command::new(netns::ip_program())
            .args(["netns", "exec", &net.ns(i)])
            .arg(&exe)
            .args(["--probe", &addr])
            .output()?;
        anyhow::ensure!(
            out.status.success(),
            "namespace {} cannot reach {addr}: {}",
            net.ns(i),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Resolves on SIGTERM (never, where it cannot be watched).
async fn terminated() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut s) => {
            s.recv().await;
        }
        Err(_) => std::future::pending().await,
    }
}
