//! `skua-bench`: bounded, loopback-only load runs against Skua (NoLag), Mosquitto (MQTT over
//! WebSocket), nats-server (NATS over WebSocket) or `skua-bare`. See `docs/benchmarks.md`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};
use skua_bench::scenario::{Ctx, churn, devices, idle, rest, storm, traffic};
use skua_bench::target::{SpawnOptions, SpawnedSkua, Target};
use skua_bench::wire::{self, TopicKey, nolag::Nolag};
use skua_bench::{fixtures, report};

#[derive(Parser)]
#[command(
    name = "skua-bench",
    version,
    about = "Load generator for Skua and the brokers it is compared with (loopback only)."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// S subscribers on one topic; publishers at ≤ --max-rate-per-conn each, R msg/s in total.
    Fanout {
        #[command(flatten)]
        t: TargetArgs,
        #[command(flatten)]
        run: RunArgs,
        /// Subscribers (S).
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        subscribers: u32,
        /// Total publish rate, msg/s (R).
        #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
        rate: u32,
        /// Payload bytes (P), at least 20 (the stamp).
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(20..=900_000))]
        payload: u32,
        /// Most msg/s per publisher connection (Skua's default rate limit is 50).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        max_rate_per_conn: u32,
        /// nolag: publish on the bench fixtures' topic bench/r0/t as bench-pub / bench-sub instead
        /// of demo/general/messages (what `--triggers` does; the run to compare it with).
        #[arg(long)]
        bench_app: bool,
        /// nolag: publish on demo/general/feed, a topic with history (issue 19, docs/recovery.md),
        /// instead of demo/general/messages (the run to compare it with).
        #[arg(long, conflicts_with = "bench_app")]
        history: bool,
    },
    /// N topics, each with one publisher and one subscriber, r msg/s per topic.
    Pairs {
        #[command(flatten)]
        t: TargetArgs,
        #[command(flatten)]
        run: RunArgs,
        /// Topics (N); NoLag needs the bench fixtures with at least N rooms.
        #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=50_000))]
        topics: u32,
        /// Publish rate per topic, msg/s (r).
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        rate: u32,
        /// Payload bytes, at least 20.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(20..=900_000))]
        payload: u32,
    },
    /// Publish throughput on the logged topic (demo/general/tasks), with `published` receipts timed.
    Logged {
        #[command(flatten)]
        t: TargetArgs,
        #[command(flatten)]
        run: RunArgs,
        /// Subscribers.
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        subscribers: u32,
        /// Total publish rate, msg/s.
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
        rate: u32,
        /// Payload bytes, at least 20.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(20..=900_000))]
        payload: u32,
        /// Most msg/s per publisher connection.
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        max_rate_per_conn: u32,
        /// nolag: subscribers are persistent sessions (the demo agent, --durable-token, each with
        /// its own clientId) with durable subscriptions, and ack every delivery (`batchAck`).
        #[arg(long)]
        durable: bool,
        /// Token of the durable subscribers (an agent or orchestrator of the demo project).
        #[arg(long, default_value = "dev-token-agent", requires = "durable")]
        durable_token: String,
    },
    /// MQTT devices (issue 37): N device connections over plain MQTT TCP (--mqtt) in R rooms,
    /// device i in room i % R. fan-in: each device publishes r msg/s into its room, WebSocket
    /// subscribers (--proto) on every room; fan-out: each device subscribed to its room,
    /// WebSocket publishers send r msg/s into every room. On Skua (nolag) device i logs in as
    /// the bench fixtures' device actor i (`fixtures --device-actors N`); elsewhere anonymously.
    Devices {
        #[command(flatten)]
        t: TargetArgs,
        #[command(flatten)]
        run: RunArgs,
        /// The server's MQTT (TCP) listener, loopback IP:PORT; with --spawn-skua, the spawned
        /// node's `--mqtt-listen 127.0.0.1:0`.
        #[arg(long, required_unless_present = "spawn_skua")]
        mqtt: Option<std::net::SocketAddr>,
        /// Which way messages go.
        #[arg(long, value_enum, default_value = "fan-in")]
        mode: DeviceMode,
        /// Device connections (N). Raise `ulimit -n` above this first.
        #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        devices: u32,
        /// Rooms (R), at most N; NoLag needs the bench fixtures with at least R rooms.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=50_000))]
        rooms: u32,
        /// WebSocket subscribers per room (fan-in).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1_000))]
        subscribers_per_room: u32,
        /// Messages per second of each device (fan-in) or into each room (fan-out).
        #[arg(long, default_value_t = 1.0, value_parser = rate(0.01, 1000.0))]
        rate: f64,
        /// QoS of the devices' publishes (fan-in) or subscriptions (fan-out).
        #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=1))]
        qos: u8,
        /// Payload bytes, at least 20.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(20..=900_000))]
        payload: u32,
        /// Most msg/s per WebSocket publisher connection (fan-out; Skua's default rate limit is 50).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        max_rate_per_conn: u32,
        /// nolag: device i logs in with bench-token-device-<i % K> [default: K = N, one actor
        /// per device]; the server's fixtures must hold K device actors.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        device_actors: Option<u32>,
        /// Seconds to wait after the last device's setup before reading RSS.
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(0..=60))]
        settle: u64,
    },
    /// C logged-in, subscribed connections; the server's RSS growth per connection.
    Idle {
        #[command(flatten)]
        t: TargetArgs,
        /// Connections (C). Raise `ulimit -n` above this first.
        #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        connections: u32,
        /// Seconds to wait after the last setup before reading RSS.
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(0..=60))]
        settle: u64,
    },
    /// connect → login → subscribe → close at a target rate.
    Churn {
        #[command(flatten)]
        t: TargetArgs,
        #[command(flatten)]
        run: RunArgs,
        /// Cycles started per second.
        #[arg(long, default_value_t = 6000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        rate: u32,
        /// Most cycles in flight.
        #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        concurrency: u32,
        /// Loopback source addresses to rotate over (127.0.0.1 …) when the target is 127.0.0.1.
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u8).range(1..=250))]
        source_ips: u8,
        /// Actors the cycles log in as, in turn. 1: the subscriber token (--sub-token, default
        /// dev-token-alice); N > 1 (nolag only): the bench fixtures' churn actors
        /// bench-token-churn-0 … N-1, which the server's fixtures must hold (`fixtures --churn-actors`).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        actors: u32,
    },
    /// Skua's server-side publish over REST: C keep-alive HTTP/1.1 clients each sending
    /// `POST /v1/publish` as soon as the previous answer came (the REST API shares the
    /// listener of --url). Raise the server's `rest_rate_limit` above the rate first.
    Rest {
        #[command(flatten)]
        t: TargetArgs,
        #[command(flatten)]
        run: RunArgs,
        /// Concurrent clients (C), one keep-alive connection each.
        #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        clients: u32,
        /// `app/room/topic` published to.
        #[arg(long, default_value = "demo/general/messages")]
        topic: String,
        /// Bytes of the JSON string sent as `data`.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(0..=900_000))]
        payload: u32,
        /// The project API key (`--dev` provisions skua-dev-api-key for the demo project).
        #[arg(long, default_value = "skua-dev-api-key")]
        api_key: String,
    },
    /// Prints the bench fixtures TOML (for `skua serve --dev --fixtures FILE`).
    Fixtures {
        /// Rooms r0 … r<N-1>.
        #[arg(long, default_value_t = fixtures::DEFAULT_ROOMS)]
        rooms: usize,
        /// Churn actors bench-churn-0 … N-1 (tokens bench-token-churn-<i>) for `churn --actors`.
        #[arg(long, default_value_t = fixtures::DEFAULT_CHURN_ACTORS as u32, value_parser = clap::value_parser!(u32).range(0..=10_000))]
        churn_actors: u32,
        /// Device actors bench-device-0 … N-1 (type device, tokens bench-token-device-<i>) for
        /// `devices`.
        #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=100_000))]
        device_actors: u32,
        /// Give the bench app this trigger webhook (and a webhook secret), e.g. the URL of a
        /// run's `--triggers --trigger-listen ADDR` receiver: http://ADDR/trigger.
        #[arg(long)]
        trigger_webhook: Option<String>,
    },
    /// Turns collected JSON lines into the markdown results section.
    Report {
        /// File holding the JSON lines (other lines are ignored).
        #[arg(long)]
        input: PathBuf,
        /// Document to update between its results markers; prints to stdout when absent.
        #[arg(long)]
        doc: Option<PathBuf>,
        /// A line put at the top of the section (machine, date).
        #[arg(long, default_value = "")]
        run_info: String,
    },
    /// Cross-node fanout: N Skua nodes joined by an MQTT broker, S subscribers spread over the
    /// nodes, publishers on node 0; CPU per delivered message per node and for the broker.
    Cluster {
        #[command(flatten)]
        run: RunArgs,
        /// The skua binary to start N times.
        #[arg(long)]
        spawn_skua: PathBuf,
        /// Extra argument for every spawned node (repeatable).
        #[arg(long, allow_hyphen_values = true)]
        skua_arg: Vec<String>,
        /// Nodes.
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(2..=8))]
        nodes: u32,
        /// MQTT broker URL (mqtt://127.0.0.1:PORT); default: start a private `mosquitto`.
        #[arg(long)]
        mqtt: Option<String>,
        /// PID of the broker given with --mqtt, for its CPU.
        #[arg(long, requires = "mqtt")]
        broker_pid: Option<u32>,
        /// Subscribers (S), split over the nodes.
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        subscribers: u32,
        /// Total publish rate, msg/s (R).
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
        rate: u32,
        /// Payload bytes (P), at least 20.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(20..=900_000))]
        payload: u32,
        /// Most msg/s per publisher connection.
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        max_rate_per_conn: u32,
        /// Append the JSON result line to this file.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Exit with status 3 unless the run was clean.
        #[arg(long)]
        strict: bool,
    },
    /// Reconnect storm (issue 36): N clients with two subscriptions each on node A, then SIGTERM
    /// to A; every client reconnects to node B with `reconnect: true` and must get both back.
    /// Both nodes share a store (Postgres: --pg-url reads its counters) and load the bench
    /// fixtures with at least N churn actors (`fixtures --churn-actors N`).
    Storm {
        /// Node A's WebSocket URL (where the clients start).
        #[arg(long)]
        node_a: String,
        /// Node B's WebSocket URL (where they reconnect; its /metrics is read there too).
        #[arg(long)]
        node_b: String,
        /// Node A's PID: the bench sends it SIGTERM once every client is set up. Without it
        /// someone else stops A and the times count from the first close.
        #[arg(long)]
        kill_pid: Option<u32>,
        /// Node B's PID, for its CPU.
        #[arg(long)]
        node_b_pid: Option<u32>,
        /// Clients (N), each its own actor (bench-token-churn-<i>).
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        connections: u32,
        /// Clients set up per second on node A.
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        setup_rate: u32,
        /// Seconds a client keeps trying to restore on B after its close.
        #[arg(long, default_value_t = 60.0, value_parser = secs(1.0, 600.0))]
        restore_timeout: f64,
        /// The nodes' Postgres store (postgres://…), for pg_stat_database (read with psql).
        #[arg(long)]
        pg_url: Option<String>,
        /// Name of the setup in results.
        #[arg(long, default_value = "skua-pg")]
        label: String,
        /// Append the JSON result line to this file.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Exit with status 3 unless the run was clean.
        #[arg(long)]
        strict: bool,
    },
    /// Prints N currently free loopback TCP ports.
    Ports {
        /// How many.
        #[arg(default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
        n: u16,
    },
}

/// `devices --mode`.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum DeviceMode {
    /// Devices publish; WebSocket subscribers on every room.
    FanIn,
    /// WebSocket publishers; devices subscribed.
    FanOut,
}

#[derive(Args, Clone)]
struct TargetArgs {
    /// Protocol adapter: nolag, mqtt-ws, nats-ws or bare.
    #[arg(long, default_value = "nolag")]
    proto: String,
    /// Server WebSocket URL (loopback only), e.g. ws://127.0.0.1:8080/ws.
    #[arg(long, required_unless_present = "spawn_skua")]
    url: Option<String>,
    /// PID of the server, for its CPU time and RSS.
    #[arg(long)]
    server_pid: Option<u32>,
    /// Start this skua binary (`serve --dev --listen 127.0.0.1:0 --fixtures <bench>`) and measure it.
    #[arg(long, conflicts_with_all = ["url", "server_pid"])]
    spawn_skua: Option<PathBuf>,
    /// Extra argument for the spawned skua (repeatable), e.g. --skua-arg=--rate-limit=1000.
    #[arg(long, allow_hyphen_values = true)]
    skua_arg: Vec<String>,
    /// Name of the server in results [default: skua, mosquitto, nats or bare by protocol].
    #[arg(long)]
    label: Option<String>,
    /// Append the JSON result line to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Exit with status 3 unless the run was clean (nothing lost, duplicated or refused; no
    /// connection errors).
    #[arg(long)]
    strict: bool,
    /// NoLag token of publishers [default: dev-token-bob; pairs: bench-token-pub].
    #[arg(long)]
    pub_token: Option<String>,
    /// NoLag token of subscribers [default: dev-token-alice; pairs: bench-token-sub].
    #[arg(long)]
    sub_token: Option<String>,
    /// Run `CMD start` when the measured window opens and `CMD end` when it closes, waiting for
    /// each (e.g. a script calling `callgrind_control -z` / `-d` on the server).
    #[arg(long)]
    window_cmd: Option<PathBuf>,
    /// fanout and pairs on Skua: run an always-ok trigger webhook receiver on loopback and
    /// count the triggers it gets (one per accepted publish, N44). With --spawn-skua the bench
    /// app's trigger webhook points at it (fanout then uses the bench app, as --bench-app);
    /// with --url the server's fixtures must name it (`fixtures --trigger-webhook`).
    #[arg(long)]
    triggers: bool,
    /// Where the trigger receiver listens (loopback; port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0", requires = "triggers")]
    trigger_listen: std::net::SocketAddr,
}

#[derive(Args, Clone, Copy)]
struct RunArgs {
    /// Measured window, seconds.
    #[arg(long, default_value_t = 10.0, value_parser = secs(0.5, 600.0))]
    duration: f64,
    /// Load before the window, seconds.
    #[arg(long, default_value_t = 2.0, value_parser = secs(0.0, 120.0))]
    warmup: f64,
    /// Most seconds to wait after the window for deliveries in flight.
    #[arg(long, default_value_t = 5.0, value_parser = secs(0.0, 60.0))]
    drain: f64,
}

fn secs(lo: f64, hi: f64) -> impl Fn(&str) -> Result<f64, String> + Clone {
    move |s| match s.parse::<f64>() {
        Ok(v) if (lo..=hi).contains(&v) => Ok(v),
        _ => Err(format!("expected seconds between {lo} and {hi}")),
    }
}

fn rate(lo: f64, hi: f64) -> impl Fn(&str) -> Result<f64, String> + Clone {
    move |s| match s.parse::<f64>() {
        Ok(v) if (lo..=hi).contains(&v) => Ok(v),
        _ => Err(format!("expected a rate between {lo} and {hi} per second")),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("skua-bench: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cli.cmd)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("skua-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The server under test: found by URL (+ PID) or spawned.
struct Setup {
    ctx: Ctx,
    /// The spawned node's MQTT listener (`devices` with --spawn-skua).
    mqtt: Option<std::net::SocketAddr>,
    _spawned: Option<SpawnedSkua>,
    _receiver: Option<skua_bench::receiver::Receiver>,
    json: Option<PathBuf>,
    strict: bool,
}

/// Which fixtures a run uses: the bench app's actors (pairs, `fanout --bench-app`) and its
/// topic for fanout.
#[derive(Clone, PartialEq)]
enum Fixture {
    /// The demo fixtures' actors and topics.
    Demo,
    /// The bench actors; pairs topics.
    BenchPairs,
    /// The bench actors; fanout on bench/r0/t.
    BenchFanout,
    /// The demo fixtures' actors; fanout on demo/general/feed (a topic with history).
    DemoHistory,
    /// The demo fixtures; subscribers log in with this token and a clientId each (persistent
    /// sessions, `logged --durable`).
    DemoDurable(String),
}

async fn setup(
    t: &TargetArgs,
    run: Option<RunArgs>,
    fixture: Fixture,
    rooms: usize,
    churn_actors: usize,
    device_actors: usize,
) -> anyhow::Result<Setup> {
    let mut nolag = Nolag::default();
    if fixture == Fixture::DemoHistory {
        nolag.fanout_topic = "demo/general/feed".into();
    } else if let Fixture::DemoDurable(token) = &fixture {
        nolag.sub_token.clone_from(token);
        // Unique per run, so a reused server's consumers of earlier runs are not reopened.
        let started = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        nolag.sub_client_ids = Some(format!("bench-{}-{}-", std::process::id(), started.as_millis()));
    } else if fixture != Fixture::Demo {
        nolag.pub_token = fixtures::PUB_TOKEN.into();
        nolag.sub_token = fixtures::SUB_TOKEN.into();
    }
    if fixture == Fixture::BenchFanout {
        nolag.fanout_topic = fixtures::FANOUT_TOPIC.into();
    }
    let receiver = if t.triggers {
        if t.proto != "nolag" {
            bail!("--triggers needs --proto nolag (trigger webhooks are Skua's)");
        }
        let r = skua_bench::receiver::Receiver::start(t.trigger_listen).await?;
        eprintln!("skua-bench: trigger receiver on {}", r.url());
        Some(r)
    } else {
        None
    };
    let trigger_url = receiver.as_ref().map(skua_bench::receiver::Receiver::url);
    if let Some(tok) = &t.pub_token {
        nolag.pub_token.clone_from(tok);
    }
    if let Some(tok) = &t.sub_token {
        nolag.sub_token.clone_from(tok);
    }
    let wire = wire::by_name(&t.proto, nolag)?;
    let (spawned, url, pid) = match &t.spawn_skua {
        Some(path) => {
            if t.proto != "nolag" {
                bail!("--spawn-skua starts Skua, which speaks nolag; use --url for {}", t.proto);
            }
            let opts = SpawnOptions {
                rooms: rooms.max(fixtures::DEFAULT_ROOMS),
                churn_actors: churn_actors.max(fixtures::DEFAULT_CHURN_ACTORS),
                device_actors,
                trigger_webhook: trigger_url.clone(),
                mqtt: device_actors > 0,
            };
            let s = SpawnedSkua::start(path, &opts, &t.skua_arg)?;
            eprintln!(
                "skua-bench: started {} (pid {}) on {}; log {}",
                path.display(),
                s.pid(),
                s.addr,
                s.log.display()
            );
            let (url, pid) = (s.url(), s.pid());
            (Some(s), url, Some(pid))
        }
        None => {
            if let Some(u) = &trigger_url {
                eprintln!(
                    "skua-bench: the server's bench app must have the trigger webhook {u} (fixtures --trigger-webhook)"
                );
            }
            (None, t.url.clone().context("--url is required")?, t.server_pid)
        }
    };
    if let Some(pid) = pid
        && !skua_bench::procfs::alive(pid)
    {
        bail!("no process with pid {pid}");
    }
    let label = t.label.clone().unwrap_or_else(|| {
        match t.proto.as_str() {
            "nolag" if t.triggers => "skua+triggers",
            "nolag" => "skua",
            "mqtt-ws" => "mosquitto",
            "nats-ws" => "nats",
            other => other,
        }
        .to_owned()
    });
    let run = run.unwrap_or(RunArgs { duration: 10.0, warmup: 0.0, drain: 0.0 });
    let ctx = Ctx {
        target: Target::parse(&url)?,
        wire: Arc::clone(&wire),
        server_pid: pid,
        label,
        warmup: Duration::from_secs_f64(run.warmup),
        duration: Duration::from_secs_f64(run.duration),
        drain: Duration::from_secs_f64(run.drain),
        peers: Vec::new(),
        peer_pids: Vec::new(),
        broker_pid: None,
        window_cmd: t.window_cmd.clone(),
        triggers: receiver.as_ref().map(|r| Arc::clone(&r.counts)),
    };
    let mqtt = spawned.as_ref().and_then(|s| s.mqtt_addr);
    Ok(Setup { ctx, mqtt, _spawned: spawned, _receiver: receiver, json: t.json.clone(), strict: t.strict })
}

/// The login adapters of `churn --actors N`: none for one actor (the run's own adapter), else
/// one NoLag adapter per bench churn actor.
fn churn_logins(t: &TargetArgs, actors: usize) -> anyhow::Result<Vec<Arc<dyn wire::Wire>>> {
    if actors <= 1 {
        return Ok(Vec::new());
    }
    if t.proto != "nolag" {
        bail!("--actors {actors} needs --proto nolag (the other protocols have no actors)");
    }
    if t.sub_token.is_some() {
        bail!("--sub-token names one actor; with --actors {actors} the cycles use the bench churn tokens");
    }
    (0..actors)
        .map(|i| wire::by_name("nolag", Nolag { sub_token: fixtures::churn_token(i), ..Nolag::default() }))
        .collect()
}

/// One topic, `subscribers` subscribers, `rate` msg/s spread over publishers of ≤ `per_conn` msg/s.
fn fanout_plan(scenario: &'static str, subscribers: u32, rate: u32, payload: u32, per_conn: u32) -> traffic::Plan {
    let pubs = rate.div_ceil(per_conn).max(1);
    traffic::Plan {
        scenario,
        // Logged runs name their publisher count: one connection and many are different targets (issue 21).
        case: if scenario == "logged" {
            format!("{scenario} S={subscribers} R={rate} P={payload} publishers={pubs}")
        } else {
            format!("{scenario} S={subscribers} R={rate} P={payload}")
        },
        topics: 1,
        subs_per_topic: subscribers as usize,
        pubs_per_topic: pubs as usize,
        rate_per_pub: f64::from(rate) / f64::from(pubs),
        payload: payload as usize,
        topic: |_| TopicKey::Fanout,
        acks: false,
        ack_stored: false,
        store_ops: false,
    }
}

async fn run(cmd: Cmd) -> anyhow::Result<ExitCode> {
    let (setup, summary) = match cmd {
        Cmd::Fixtures { rooms, churn_actors, device_actors, trigger_webhook } => {
            print!(
                "{}",
                fixtures::toml(rooms, churn_actors as usize, device_actors as usize, trigger_webhook.as_deref())
            );
            return Ok(ExitCode::SUCCESS);
        }
        Cmd::Report { input, doc, run_info } => {
            report::run(&input, doc.as_deref(), &run_info)?;
            return Ok(ExitCode::SUCCESS);
        }
        Cmd::Ports { n } => {
            let ls: Vec<_> = (0..n).map(|_| std::net::TcpListener::bind("127.0.0.1:0")).collect::<Result<_, _>>()?;
            for l in &ls {
                println!("{}", l.local_addr()?.port());
            }
            return Ok(ExitCode::SUCCESS);
        }
        Cmd::Fanout { t, run, subscribers, rate, payload, max_rate_per_conn, bench_app, history } => {
            let fixture = if bench_app || t.triggers {
                Fixture::BenchFanout
            } else if history {
                Fixture::DemoHistory
            } else {
                Fixture::Demo
            };
            let st = setup(&t, Some(run), fixture, 0, 0, 0).await?;
            let plan = fanout_plan("fanout", subscribers, rate, payload, max_rate_per_conn);
            let s = traffic::run(&st.ctx, &plan).await?;
            (st, s)
        }
        Cmd::Cluster {
            run,
            spawn_skua,
            skua_arg,
            nodes,
            mqtt,
            broker_pid,
            subscribers,
            rate,
            payload,
            max_rate_per_conn,
            json,
            strict,
        } => {
            let cluster = skua_bench::target::SpawnedCluster::start(&spawn_skua, nodes as usize, mqtt, &skua_arg)?;
            eprintln!(
                "skua-bench: started {nodes} nodes ({}) over {} (broker pid {:?})",
                cluster.nodes.iter().map(|n| n.addr.to_string()).collect::<Vec<_>>().join(", "),
                cluster.mqtt,
                cluster.broker_pid().or(broker_pid)
            );
            let wire = wire::by_name("nolag", Nolag::default())?;
            let ctx = Ctx {
                target: Target::parse(&cluster.nodes[0].url())?,
                wire,
                server_pid: Some(cluster.nodes[0].pid()),
                label: "skua".into(),
                warmup: Duration::from_secs_f64(run.warmup),
                duration: Duration::from_secs_f64(run.duration),
                drain: Duration::from_secs_f64(run.drain),
                peers: cluster.nodes[1..].iter().map(|n| Target::parse(&n.url())).collect::<Result<_, _>>()?,
                peer_pids: cluster.nodes[1..].iter().map(SpawnedSkua::pid).collect(),
                broker_pid: cluster.broker_pid().or(broker_pid),
                window_cmd: None,
                triggers: None,
            };
            let mut plan = fanout_plan("cluster", subscribers, rate, payload, max_rate_per_conn);
            plan.case = format!("cluster nodes={nodes} S={subscribers} R={rate} P={payload}");
            let s = traffic::run(&ctx, &plan).await?;
            let code = finish(&s, json.as_deref(), strict)?;
            drop(cluster);
            return Ok(code);
        }
        Cmd::Storm {
            node_a,
            node_b,
            kill_pid,
            node_b_pid,
            connections,
            setup_rate,
            restore_timeout,
            pg_url,
            label,
            json,
            strict,
        } => {
            let ctx = Ctx {
                target: Target::parse(&node_a)?,
                wire: wire::by_name("nolag", Nolag::default())?,
                server_pid: kill_pid,
                label,
                warmup: Duration::ZERO,
                duration: Duration::ZERO,
                drain: Duration::ZERO,
                peers: vec![Target::parse(&node_b)?],
                peer_pids: node_b_pid.into_iter().collect(),
                broker_pid: None,
                window_cmd: None,
                triggers: None,
            };
            let plan = storm::Plan {
                connections: connections as usize,
                node_b: Target::parse(&node_b)?,
                node_b_pid,
                kill_pid,
                setup_rate: f64::from(setup_rate),
                restore_timeout: Duration::from_secs_f64(restore_timeout),
                pg_url,
            };
            let s = storm::run(&ctx, &plan).await?;
            return finish(&s, json.as_deref(), strict);
        }
        Cmd::Logged { t, run, subscribers, rate, payload, max_rate_per_conn, durable, durable_token } => {
            no_triggers(&t, "logged")?;
            if durable && t.proto != "nolag" {
                bail!("--durable needs --proto nolag (durable subscriptions are Skua's)");
            }
            let fixture = if durable { Fixture::DemoDurable(durable_token) } else { Fixture::Demo };
            let st = setup(&t, Some(run), fixture, 0, 0, 0).await?;
            let mut plan = fanout_plan("logged", subscribers, rate, payload, max_rate_per_conn);
            plan.topic = |_| TopicKey::Logged;
            plan.acks = st.ctx.wire.name() == "nolag";
            plan.ack_stored = durable;
            plan.store_ops = plan.acks;
            if durable {
                // Its own case name, which no plain `logged …` case prefix matches (the report's targets).
                plan.case = plan.case.replacen("logged ", "logged-durable ", 1);
            }
            let mut s = traffic::run(&st.ctx, &plan).await?;
            let stored = s.num("stored_deliveries").unwrap_or(0.0);
            s.notes.push(if stored == 0.0 {
                "no delivery carried msgId/requiresAck: this build does not put the message store in the publish path, \
                 so the logged topic measured the same path as fanout; rerun when stored delivery lands"
                    .into()
            } else {
                if durable {
                    format!("{stored:.0} deliveries came from the store (msgId + requiresAck) to durable subscriptions; each was acked")
                } else {
                    format!("{stored:.0} deliveries came from the store (msgId + requiresAck); the bench does not ack them")
                }
            });
            (st, s)
        }
        Cmd::Pairs { t, run, topics, rate, payload } => {
            let st = setup(&t, Some(run), Fixture::BenchPairs, topics as usize, 0, 0).await?;
            let plan = traffic::Plan {
                scenario: "pairs",
                case: format!("pairs N={topics} r={rate} P={payload}"),
                topics: topics as usize,
                subs_per_topic: 1,
                pubs_per_topic: 1,
                rate_per_pub: f64::from(rate),
                payload: payload as usize,
                topic: TopicKey::Pair,
                acks: false,
                ack_stored: false,
                store_ops: false,
            };
            let s = traffic::run(&st.ctx, &plan).await?;
            (st, s)
        }
        Cmd::Rest { t, run, clients, topic, payload, api_key } => {
            no_triggers(&t, "rest")?;
            if t.proto != "nolag" {
                bail!("rest measures Skua's REST API (--proto nolag)");
            }
            let st = setup(&t, Some(run), Fixture::Demo, 0, 0, 0).await?;
            let plan = rest::Plan { clients: clients as usize, topic, payload: payload as usize, api_key };
            let s = rest::run(&st.ctx, &plan).await?;
            (st, s)
        }
        Cmd::Devices {
            t,
            run,
            mqtt,
            mode,
            devices,
            rooms,
            subscribers_per_room,
            rate,
            qos,
            payload,
            max_rate_per_conn,
            device_actors,
            settle,
        } => {
            no_triggers(&t, "devices")?;
            let nolag = t.proto == "nolag";
            let actors = nolag.then(|| device_actors.unwrap_or(devices) as usize);
            // Only a spawned node needs the device actors written into its fixtures.
            let spawn_actors = if t.spawn_skua.is_some() { actors.unwrap_or(0).max(1) } else { 0 };
            let st = setup(&t, Some(run), Fixture::BenchPairs, rooms as usize, 0, spawn_actors).await?;
            let mqtt = st.mqtt.or(mqtt).context("--mqtt is required")?;
            if !mqtt.ip().is_loopback() {
                bail!("refusing non-loopback MQTT target {mqtt}: skua-bench only loads loopback servers");
            }
            let plan = devices::Plan {
                mode: match mode {
                    DeviceMode::FanIn => devices::Mode::FanIn,
                    DeviceMode::FanOut => devices::Mode::FanOut,
                },
                mqtt,
                devices: devices as usize,
                rooms: rooms as usize,
                subs_per_room: subscribers_per_room as usize,
                rate,
                qos,
                payload: payload as usize,
                max_rate_per_conn: f64::from(max_rate_per_conn),
                device_actors: actors,
                settle: Duration::from_secs(settle),
            };
            let s = devices::run(&st.ctx, &plan).await?;
            (st, s)
        }
        Cmd::Idle { t, connections, settle } => {
            no_triggers(&t, "idle")?;
            let st = setup(&t, None, Fixture::Demo, 0, 0, 0).await?;
            let s = idle::run(&st.ctx, connections as usize, Duration::from_secs(settle)).await?;
            (st, s)
        }
        Cmd::Churn { t, run, rate, concurrency, source_ips, actors } => {
            no_triggers(&t, "churn")?;
            let st = setup(&t, Some(run), Fixture::Demo, 0, actors as usize, 0).await?;
            let logins = churn_logins(&t, actors as usize)?;
            let plan = churn::Plan { rate: f64::from(rate), concurrency: concurrency as usize, source_ips };
            let s = churn::run(&st.ctx, plan, &logins).await?;
            (st, s)
        }
    };
    finish(&summary, setup.json.as_deref(), setup.strict)
}

/// Refuses `--triggers` for a scenario without trigger support.
fn no_triggers(t: &TargetArgs, scenario: &str) -> anyhow::Result<()> {
    if t.triggers {
        bail!("--triggers works with fanout and pairs (the bench app's topics), not {scenario}");
    }
    Ok(())
}

/// Prints (and appends) the summary; exit status 3 for an unclean `--strict` run.
fn finish(
    summary: &skua_bench::summary::Summary,
    json: Option<&std::path::Path>,
    strict: bool,
) -> anyhow::Result<ExitCode> {
    summary.emit(json)?;
    let clean = matches!(summary.get("ok"), Some(skua_bench::json::Val::Bool(true)));
    Ok(if strict && !clean { ExitCode::from(3) } else { ExitCode::SUCCESS })
}
