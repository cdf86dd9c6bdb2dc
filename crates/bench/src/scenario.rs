//! The scenarios, and what they share: the run context, bounded-concurrency connection setup
//! and CPU sampling.
//!
//! - [`traffic`]: `fanout`, `pairs` and `logged` — publishers at a fixed rate, subscribers that
//!   check every sequence number and time every delivery;
//! - [`idle`]: many logged-in, subscribed connections, then the server's RSS per connection;
//! - [`devices`]: N MQTT devices over TCP publishing into rooms with WebSocket subscribers
//!   (fan-in), or subscribed with WebSocket publishers (fan-out);
//! - [`churn`]: connect → login → subscribe → close at a target rate;
//! - [`rest`]: server-side publishes over `POST /v1/publish` from keep-alive HTTP clients;
//! - [`storm`]: a two-node cluster's reconnect storm: node A stops, every client restores on B.

pub mod churn;
pub mod devices;
pub mod idle;
pub mod rest;
pub mod storm;
pub mod traffic;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use crate::conn::{self, Conn, ConnOptions};
use crate::procfs;
use crate::summary::Summary;
use crate::target::Target;
use crate::wire::{Role, Wire};

/// Connections set up at the same time (each waits for its login and subscription acks).
pub const SETUP_CONCURRENCY: usize = 64;

/// Everything a scenario needs to know about where it runs.
#[derive(Clone)]
pub struct Ctx {
    /// The server's WebSocket URL.
    pub target: Target,
    /// The protocol adapter.
    pub wire: Arc<dyn Wire>,
    /// The server process, for CPU and RSS (none: those figures are `null`).
    pub server_pid: Option<u32>,
    /// Name of the server in results (`skua`, `bare`, `mosquitto`, `nats`…).
    pub label: String,
    /// Time before the measured window.
    pub warmup: Duration,
    /// Length of the measured window.
    pub duration: Duration,
    /// Most time to wait after the window for deliveries still in flight.
    pub drain: Duration,
    /// Further nodes of a cluster run (empty otherwise): subscriber `j` connects to node
    /// `j % (1 + peers.len())`, node 0 being `target`; publishers always connect to `target`.
    pub peers: Vec<Target>,
    /// The peers' processes, for their CPU.
    pub peer_pids: Vec<u32>,
    /// The MQTT broker between the nodes of a cluster run, for its CPU.
    pub broker_pid: Option<u32>,
    /// Run `CMD start` when the measured window opens and `CMD end` when it closes (for
    /// example `callgrind_control -z`/`-d` on the server, to count its instructions over the
    /// window); none: nothing runs.
    pub window_cmd: Option<std::path::PathBuf>,
    /// The counters of the bench's own trigger receiver (`--triggers`); none: no triggers
    /// are expected.
    pub triggers: Option<Arc<crate::receiver::Counts>>,
}

impl Ctx {
    /// A summary with the fields every scenario starts with.
    pub fn summary(&self, scenario: &str, case: String) -> Summary {
        let mut s = Summary::default();
        s.set("bench", "skua-bench");
        s.set("scenario", scenario);
        s.set("case", case);
        s.set("label", self.label.as_str());
        s.set("proto", self.wire.name());
        s.set("url", self.target.url.as_str());
        s.set("server_pid", self.server_pid.map(u64::from));
        let load = std::fs::read_to_string("/proc/loadavg").ok().and_then(|l| l.split(' ').next()?.parse::<f64>().ok());
        s.set("loadavg_1m_before", load);
        s
    }

    /// Runs the window command, if any, with `edge` (`start` or `end`) and waits for it to
    /// exit; a failure is reported on stderr and does not stop the run.
    pub async fn mark_window(&self, edge: &'static str) {
        let Some(cmd) = self.window_cmd.clone() else { return };
        let status =
            tokio::task::spawn_blocking(move || std::process::Command::new(&cmd).arg(edge).status().map(|s| (cmd, s)))
                .await;
        match status {
            Ok(Ok((_, s))) if s.success() => {}
            Ok(Ok((cmd, s))) => eprintln!("skua-bench: window command {} {edge}: {s}", cmd.display()),
            Ok(Err(e)) => eprintln!("skua-bench: window command {edge} did not run: {e}"),
            Err(e) => eprintln!("skua-bench: window command {edge}: {e}"),
        }
    }

    /// The server's CPU microseconds now, if a server PID is known.
    pub fn server_cpu(&self) -> Option<u64> {
        self.server_pid.and_then(|p| procfs::cpu_us(p).ok())
    }

    /// CPU microseconds used so far by each peer node, then by the broker (cluster runs).
    pub fn cluster_cpu(&self) -> Vec<Option<u64>> {
        let pids = self.peer_pids.iter().copied().map(Some).chain(self.broker_pid.map(Some));
        pids.map(|p| p.and_then(|p| procfs::cpu_us(p).ok())).collect()
    }
}

/// Whole-machine busy and softirq CPU microseconds now.
pub fn machine_cpu() -> Option<(u64, u64)> {
    procfs::machine_cpu_us().ok()
}

/// Sets `machine_cpu_pct` and `softirq_pct` (percent of one core, so up to 100 × cores) from
/// two [`machine_cpu`] samples over `secs`.
/// Also sets `other_cpu_pct`: busy CPU that was neither the server, the bench nor softirq —
/// other processes competing for the cores (this machine is shared).
pub fn set_machine(s: &mut Summary, a: Option<(u64, u64)>, b: Option<(u64, u64)>, secs: f64) {
    let busy = a.zip(b).map(|(a, b)| b.0.saturating_sub(a.0));
    let soft = a.zip(b).map(|(a, b)| b.1.saturating_sub(a.1));
    s.set("machine_cpu_pct", cpu_pct(busy, secs));
    s.set("softirq_pct", cpu_pct(soft, secs));
    let others =
        match (s.num("machine_cpu_pct"), s.num("softirq_pct"), s.num("server_cpu_pct"), s.num("client_cpu_pct")) {
            (Some(m), Some(q), Some(srv), Some(cli)) => Some((m - q - srv - cli).max(0.0)),
            _ => None,
        };
    s.set("other_cpu_pct", others);
}

/// This process's CPU microseconds now.
pub fn client_cpu() -> Option<u64> {
    procfs::cpu_us(std::process::id()).ok()
}

/// Percent of one core used over `secs`.
pub fn cpu_pct(used_us: Option<u64>, secs: f64) -> Option<f64> {
    used_us.map(|u| u as f64 / (secs * 1e6) * 100.0)
}

/// Difference of two optional CPU samples.
pub fn used(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    Some(b?.saturating_sub(a?))
}

/// Opens `n` connections as `role`, at most [`SETUP_CONCURRENCY`] at a time; connection `i`
/// subscribes to `topic_of(i)` when that is `Some`. Returns them in index order, and the
/// failures separately.
pub async fn connect_all(
    ctx: &Ctx,
    n: usize,
    role: Role,
    topic_of: impl Fn(usize) -> Option<String>,
    opts: ConnOptions,
) -> (Vec<Conn>, Vec<anyhow::Error>) {
    let sem = Arc::new(Semaphore::new(SETUP_CONCURRENCY));
    let mut handles = Vec::with_capacity(n);
    for i in 0..n {
        let Ok(permit) = sem.clone().acquire_owned().await else { break };
        let node = if role == Role::Subscriber { i % (1 + ctx.peers.len()) } else { 0 };
        let target = if node == 0 { ctx.target.clone() } else { ctx.peers[node - 1].clone() };
        let (wire, topic) = (ctx.wire.clone(), topic_of(i));
        handles.push(tokio::spawn(async move {
            let _permit = permit;
            match topic {
                Some(t) => conn::subscriber(&target, wire.as_ref(), &t, opts).await,
                None => conn::login(&target, wire.as_ref(), role, opts).await,
            }
        }));
    }
    let (mut ok, mut failed) = (Vec::with_capacity(n), Vec::new());
    for h in handles {
        match h.await {
            Ok(Ok(c)) => ok.push(c),
            Ok(Err(e)) => failed.push(e),
            Err(e) => failed.push(anyhow::anyhow!("setup task failed: {e}")),
        }
    }
    (ok, failed)
}

/// Fails with the first error when any of `n` connections could not be set up.
///
/// # Errors
/// `failed` is not empty.
pub fn all_or_bail(what: &str, n: usize, failed: Vec<anyhow::Error>) -> anyhow::Result<()> {
    let count = failed.len();
    if let Some(first) = failed.into_iter().next() {
        anyhow::bail!("{count} of {n} {what} connections could not be set up; first failure: {first:#}");
    }
    Ok(())
}
