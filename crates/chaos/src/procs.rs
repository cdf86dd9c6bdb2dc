//! The processes the harness owns: `skua serve` nodes and private Mosquitto, Redis and Postgres
//! instances on free ports, in one temporary directory. Services listen on loopback or on an
//! address of the run's bridge, nodes on loopback or in a network namespace of their own
//! ([`crate::netns`]). Nothing here touches a service the harness did not start; every child is
//! killed when its handle drops.

use std::io::{BufRead, BufReader};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use skua_conformance::ports::Listening;

/// A free loopback port (bound and released; [`Service`] restarts a service on another one
/// when it was taken meanwhile).
pub fn free_port() -> Result<u16> {
    Ok(skua_conformance::ports::free_port()?)
}

/// Starts of a service on a fresh port, when the port picked was taken before it bound it.
const PORT_ATTEMPTS: u32 = 5;

fn wait_port(host: Ipv4Addr, port: u16, what: &str, within: Duration) -> Result<()> {
    let deadline = Instant::now() + within;
    while std::net::TcpStream::connect_timeout(&(host, port).into(), Duration::from_secs(1)).is_err() {
        if Instant::now() > deadline {
            bail!("{what} did not listen on {host}:{port} within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill").args([sig, &pid.to_string()]).stdout(Stdio::null()).stderr(Stdio::null()).status();
}

/// Why a service did not come up on its port.
#[derive(Debug)]
struct PortLost(String);

/// Which private service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServiceKind {
    /// Mosquitto (the cluster's MQTT bus).
    Mosquitto,
    /// Redis (presence).
    Redis,
    /// Postgres (the store).
    Postgres,
}

/// A private service, restartable on its port.
#[derive(Debug)]
pub struct Service {
    /// What it is.
    pub kind: ServiceKind,
    program: PathBuf,
    args: Vec<String>,
    child: Option<Child>,
    /// The address it listens on.
    pub host: Ipv4Addr,
    /// Its port (0 until its first start).
    pub port: u16,
    log: PathBuf,
}

impl Service {
    /// Starts a private Mosquitto (anonymous, no persistence) under `dir` on loopback.
    pub fn mosquitto(dir: &Path) -> Result<Self> {
        Self::mosquitto_at(dir, Ipv4Addr::LOCALHOST)
    }

    /// As [`Self::mosquitto`], listening on `host`.
    pub fn mosquitto_at(dir: &Path, host: Ipv4Addr) -> Result<Self> {
        let program = which("mosquitto", &["/usr/sbin/mosquitto"])?;
        let conf = dir.join("mosquitto.conf");
        Self::start(ServiceKind::Mosquitto, host, dir, |port| {
            std::fs::write(
                &conf,
                format!(
                    "listener {port} {host}\nallow_anonymous true\npersistence false\nmax_queued_messages 100000\n"
                ),
            )?;
            Ok((program.clone(), vec!["-c".into(), conf.display().to_string()]))
        })
    }

    /// Starts a private Redis (no persistence) on loopback.
    pub fn redis(dir: &Path) -> Result<Self> {
        Self::redis_at(dir, Ipv4Addr::LOCALHOST)
    }

    /// As [`Self::redis`], listening on `host` (protected mode off: it has no password, and
    /// only the run's namespaces reach a bridge address).
    pub fn redis_at(dir: &Path, host: Ipv4Addr) -> Result<Self> {
        let program = which("redis-server", &["/usr/bin/redis-server"])?;
        Self::start(ServiceKind::Redis, host, dir, |port| {
            let (port_s, host_s) = (port.to_string(), host.to_string());
            let args =
                ["--port", &port_s, "--bind", &host_s, "--save", "", "--appendonly", "no", "--protected-mode", "no"];
            Ok((program.clone(), args.iter().map(|s| (*s).to_owned()).collect()))
        })
    }

    /// Initialises and starts a private Postgres cluster under `dir` (trust auth, socket in
    /// `dir`) on loopback. As root, the server runs as the `postgres` user through `setpriv`.
    pub fn postgres(dir: &Path) -> Result<Self> {
        Self::postgres_at(dir, Ipv4Addr::LOCALHOST)
    }

    /// As [`Self::postgres`], listening on `host`.
    pub fn postgres_at(dir: &Path, host: Ipv4Addr) -> Result<Self> {
        let bin = postgres_bin()?;
        let data = dir.join("pgdata");
        let root = running_as_root();
        if root {
            let ok = Command::new("chown").args(["-R", "postgres:postgres"]).arg(dir).status()?.success();
            if !ok {
                bail!("chown {} to postgres failed", dir.display());
            }
        }
        let mut initdb = if root {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=postgres", "--regid=postgres", "--init-groups", "--"]).arg(bin.join("initdb"));
            c
        } else {
            Command::new(bin.join("initdb"))
        };
        let out = initdb.args(["-A", "trust", "-U", "postgres", "--no-sync", "-D"]).arg(&data).output()?;
        if !out.status.success() {
            bail!("initdb failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        if !host.is_loopback() {
            // initdb trusts loopback only; the run's bridge /24 holds the harness and the nodes.
            use std::io::Write;
            let mut hba = std::fs::OpenOptions::new().append(true).open(data.join("pg_hba.conf"))?;
            writeln!(hba, "host all all {host}/24 trust")?;
        }
        Self::start(ServiceKind::Postgres, host, dir, |port| {
            let mut args = Vec::new();
            let program = if root {
                args.extend(["--reuid=postgres", "--regid=postgres", "--init-groups", "--"].map(String::from));
                args.push(bin.join("postgres").display().to_string());
                PathBuf::from("setpriv")
            } else {
                bin.join("postgres")
            };
            args.extend([
                "-D".to_owned(),
                data.display().to_string(),
                "-p".to_owned(),
                port.to_string(),
                "-h".to_owned(),
                host.to_string(),
                "-k".to_owned(),
                dir.display().to_string(),
                "-c".to_owned(),
                "fsync=off".to_owned(),
                "-c".to_owned(),
                "max_connections=200".to_owned(),
            ]);
            Ok((program, args))
        })
    }

    /// Starts it on a free port, with the program and arguments `build` gives for that port. A
    /// port another process took after it was picked (the service exits, or someone else
    /// listens there) is given up for a fresh one, [`PORT_ATTEMPTS`] times (issue 35).
    fn start(
        kind: ServiceKind,
        host: Ipv4Addr,
        dir: &Path,
        build: impl Fn(u16) -> Result<(PathBuf, Vec<String>)>,
    ) -> Result<Self> {
        let log = dir.join(format!("{kind:?}.log").to_lowercase());
        let mut attempt = 1;
        loop {
            let port = free_port()?;
            let (program, args) = build(port)?;
            let mut s = Self { kind, program, args, child: None, host, port, log: log.clone() };
            match s.start_once() {
                Ok(()) => return Ok(s),
                Err(PortLost(why)) if attempt < PORT_ATTEMPTS => {
                    eprintln!("{kind:?} on port {port}: {why}; trying another port");
                    s.kill9();
                    attempt += 1;
                }
                Err(PortLost(why)) => bail!("{kind:?}: {why}, {PORT_ATTEMPTS} times"),
            }
        }
    }

    /// (Re)starts it on its port and waits until it listens there (it, not another process).
    pub fn restart(&mut self) -> Result<()> {
        self.start_once().map_err(|PortLost(why)| anyhow::anyhow!("{:?} on port {}: {why}", self.kind, self.port))
    }

    fn start_once(&mut self) -> std::result::Result<(), PortLost> {
        let spawned = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).and_then(|log| {
            Command::new(&self.program)
                .args(&self.args)
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .spawn()
        });
        let child = spawned.map_err(|e| PortLost(format!("spawn {}: {e}", self.program.display())))?;
        let pid = child.id();
        self.child = Some(child);
        match skua_conformance::ports::wait_listening(pid, self.port, Duration::from_secs(30)) {
            Listening::Yes => {}
            Listening::Taken => return Err(PortLost("another process listens on it".into())),
            Listening::Exited => return Err(PortLost(format!("it exited (log: {})", self.log.display()))),
            Listening::TimedOut => return Err(PortLost("it did not listen within 30 s".into())),
        }
        wait_port(self.host, self.port, &format!("{:?}", self.kind), Duration::from_secs(30))
            .map_err(|e| PortLost(format!("{e:#}")))
    }

    /// Stops it: SIGKILL for Mosquitto and Redis, a fast shutdown (SIGINT) for Postgres (a
    /// SIGKILLed postmaster leaves its backends holding the shared memory).
    pub fn stop(&mut self) {
        if self.kind == ServiceKind::Postgres { self.interrupt() } else { self.kill9() }
    }

    /// SIGINT (Postgres' fast shutdown: sessions are ended, nothing is left behind), and waits.
    pub fn interrupt(&mut self) {
        if let Some(mut c) = self.child.take() {
            signal(c.id(), "-INT");
            let _ = c.wait();
        }
    }

    /// SIGKILL (as root, Postgres runs under `setpriv`, which execs: the server itself), and
    /// waits.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGKILL to the server and, at the same moment, to every process it started (for
    /// Postgres: the backends, WAL writer, checkpointer): a crash of the whole server, as
    /// `kill -9` of a machine's Postgres processes, or the OOM killer, leaves it. What the
    /// server only held in its shared memory (WAL not yet written) is gone; what it had
    /// written is in the kernel and survives, as after a real crash. Waits for the server;
    /// once its children are gone too, it restarts cleanly on the same data directory
    /// (crash recovery), which [`Self::restart`] waits for.
    pub fn crash(&mut self) {
        if let Some(mut c) = self.child.take() {
            let pid = c.id();
            let mut all: Vec<String> = children(pid).iter().map(u32::to_string).collect();
            all.push(pid.to_string());
            let _ = Command::new("kill").arg("-KILL").args(&all).stdout(Stdio::null()).stderr(Stdio::null()).status();
            let _ = c.wait();
            // The children are reaped by init: wait until none is left (their shared memory
            // would make the restart refuse the data directory).
            let deadline = Instant::now() + Duration::from_secs(10);
            while !children_gone(&all) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }

    /// Its URL as the nodes take it.
    pub fn url(&self) -> String {
        let (host, port) = (self.host, self.port);
        match self.kind {
            ServiceKind::Mosquitto => format!("mqtt://{host}:{port}"),
            ServiceKind::Redis => format!("redis://{host}:{port}"),
            ServiceKind::Postgres => format!("postgres://postgres@{host}:{port}/postgres"),
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The processes whose parent is `pid` (from `/proc/*/stat`).
fn children(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter(|p| parent_of(*p) == Some(pid))
        .collect()
}

/// The parent of process `pid`: the field after the state, past the command's closing `)`
/// (the command may hold spaces and parentheses).
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Whether none of `pids` is still a live process (a zombie counts as gone).
fn children_gone(pids: &[String]) -> bool {
    pids.iter().all(|p| {
        std::fs::read_to_string(format!("/proc/{p}/stat"))
            .ok()
            .and_then(|s| s.rfind(')').map(|i| s[i + 1..].trim_start().starts_with('Z')))
            .unwrap_or(true)
    })
}

fn running_as_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn which(name: &str, fallbacks: &[&str]) -> Result<PathBuf> {
    let found = Command::new("sh").args(["-c", &format!("command -v {name}")]).output()?;
    if found.status.success() {
        return Ok(PathBuf::from(String::from_utf8_lossy(&found.stdout).trim()));
    }
    fallbacks.iter().map(PathBuf::from).find(|p| p.exists()).with_context(|| format!("{name} is not installed"))
}

fn postgres_bin() -> Result<PathBuf> {
    if let Ok(dir) = std::env::var("SKUA_CHAOS_PG_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| d.filter_map(Result::ok).map(|e| e.path().join("bin")).collect())
        .unwrap_or_default();
    dirs.sort();
    dirs.push(PathBuf::from("/usr/local/bin"));
    dirs.into_iter().find(|d| d.join("initdb").exists() && d.join("postgres").exists()).context(
        "no Postgres binaries (initdb, postgres) in /usr/lib/postgresql/*/bin or /usr/local/bin; set SKUA_CHAOS_PG_BIN",
    )
}

/// One `skua serve` node, restartable under the same node id on the port its first start bound
/// (the first start listens on port 0, so no picked port can be taken before it binds: issue 35).
#[derive(Debug)]
pub struct Node {
    /// Index (node id `chaos-<i>`).
    pub index: usize,
    /// The address it listens on.
    pub host: Ipv4Addr,
    /// Its port (0 until its first start).
    pub port: u16,
    /// The network namespace it runs in (`ip netns exec`), if any.
    pub netns: Option<String>,
    bin: PathBuf,
    args: Vec<String>,
    child: Option<Child>,
    log: PathBuf,
    /// Whether it is SIGSTOPped.
    pub paused: bool,
}

impl Node {
    /// Prepares node `index` (does not start it), to listen on `host`, inside `netns` when
    /// given (the namespace must exist and hold `host`).
    pub fn new(
        index: usize,
        bin: &Path,
        common: &[String],
        dir: &Path,
        host: Ipv4Addr,
        netns: Option<String>,
    ) -> Result<Self> {
        let mut args = vec!["serve".to_owned(), "--listen".to_owned(), format!("{host}:0")];
        args.extend(common.iter().cloned());
        args.extend(["--node-id".to_owned(), format!("chaos-{index}")]);
        let log = dir.join(format!("node-{index}.log"));
        Ok(Self { index, host, port: 0, netns, bin: bin.to_owned(), args, child: None, log, paused: false })
    }

    /// `ws://HOST:PORT/ws` (known once it started).
    pub fn url(&self) -> String {
        format!("ws://{}:{}/ws", self.host, self.port)
    }

    /// Starts it and waits for its listening line (at most 60 s); the first start learns the
    /// port from that line and every restart listens on it again.
    pub fn start(&mut self) -> Result<()> {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log)?;
        // `ip netns exec` execs the program: the child's pid is the node's (signals reach it).
        let mut command = match &self.netns {
            Some(ns) => {
                let mut c = Command::new(crate::netns::ip_program());
                c.args(["netns", "exec", ns]).arg(&self.bin);
                c
            }
            None => Command::new(&self.bin),
        };
        let mut child = command
            .args(&self.args)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .with_context(|| format!("spawn {}", self.bin.display()))?;
        let stdout = child.stdout.take().context("piped stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        let mut out = std::fs::OpenOptions::new().create(true).append(true).open(&self.log)?;
        std::thread::spawn(move || {
            use std::io::Write;
            let mut said = false;
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = writeln!(out, "{line}");
                if let Some(addr) = line.strip_prefix("skua listening on ").filter(|_| !said) {
                    said = true;
                    let _ = tx.send(addr.trim().to_owned());
                }
            }
        });
        self.child = Some(child);
        self.paused = false;
        let Ok(addr) = rx.recv_timeout(Duration::from_secs(60)) else {
            bail!("node {} did not print its listening line within 60 s (log: {})", self.index, self.log.display());
        };
        if self.port == 0 {
            let bound: std::net::SocketAddr =
                addr.parse().with_context(|| format!("node {}'s listening address {addr:?}", self.index))?;
            self.port = bound.port();
            self.args[2] = format!("{}:{}", self.host, self.port);
        }
        Ok(())
    }

    /// SIGKILL.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            if self.paused {
                signal(c.id(), "-CONT");
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        self.paused = false;
    }

    /// SIGSTOP (`true`) or SIGCONT (`false`).
    pub fn pause(&mut self, stop: bool) {
        if let Some(c) = &self.child {
            signal(c.id(), if stop { "-STOP" } else { "-CONT" });
            self.paused = stop;
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// `skua migrate --store URL`, retried while the fresh server warms up.
pub fn migrate(bin: &Path, store: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = Command::new(bin).args(["migrate", "--store", store]).output()?;
        if out.status.success() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("skua migrate failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}
