//! Real processes for fault tests: `skua` nodes that can be SIGKILLed, and private Mosquitto,
//! Redis and Postgres instances on free loopback ports that can be killed and restarted (the
//! chaos harness's, `skua_chaos::procs`).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use skua_chaos::procs::Service;

/// A free loopback port (bound and released; the small race is acceptable in tests).
///
/// # Panics
/// When none can be bound.
pub fn free_port() -> u16 {
    skua_chaos::procs::free_port().expect("a free port")
}

/// Whether `program` is on PATH; under CI=true a missing program fails the test.
///
/// # Panics
/// When it is missing and `CI=true`.
pub fn have(program: &str) -> bool {
    let found =
        Command::new("sh").args(["-c", &format!("command -v {program}")]).output().is_ok_and(|o| o.status.success());
    if !found {
        crate::skip::skip(&format!("{program} is not installed"));
    }
    found
}

/// A `skua serve` child process.
#[derive(Debug)]
pub struct SkuaProcess {
    child: Child,
    /// Its HTTP address.
    pub addr: SocketAddr,
    /// Its gRPC address, when its arguments ask for a gRPC listener (`--grpc-listen
    /// 127.0.0.1:0` takes a free port with no race: the node prints the one it bound).
    pub grpc: Option<SocketAddr>,
}

/// Whether `args` ask for a gRPC listener (`--grpc-listen` with a non-empty address).
fn grpc_requested(args: &[&str]) -> bool {
    args.windows(2).any(|w| w[0] == "--grpc-listen" && !w[1].is_empty())
}

/// `--dev` binds the gRPC listener on the fixed 127.0.0.1:50051, which every node of every test
/// (and of other runs on the machine) would race for (issue 35): a node whose arguments name no
/// `--grpc-listen` gets none.
fn no_default_grpc(args: &[&str]) -> &'static [&'static str] {
    if args.contains(&"--dev") && !args.contains(&"--grpc-listen") { &["--grpc-listen", ""] } else { &[] }
}

impl SkuaProcess {
    /// Spawns `bin serve --listen 127.0.0.1:0 <args>` and waits for its listening line.
    ///
    /// # Panics
    /// When it does not start.
    pub fn spawn(bin: &str, args: &[&str]) -> Self {
        let mut cmd = Command::new(bin);
        cmd.arg("serve").args(["--listen", "127.0.0.1:0"]).args(args).args(no_default_grpc(args));
        Self::start(cmd, grpc_requested(args))
    }

    /// As [`Self::spawn`], with both the soft and the hard open-file limit (`RLIMIT_NOFILE`)
    /// set to `limit` by `sh -c 'ulimit -n …; exec …'` (the node raises soft to hard at start).
    ///
    /// # Panics
    /// When it does not start.
    pub fn spawn_with_open_file_limit(bin: &str, limit: u32, args: &[&str]) -> Self {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", &format!("ulimit -n {limit} && exec \"$0\" \"$@\""), bin, "serve", "--listen", "127.0.0.1:0"])
            .args(args)
            .args(no_default_grpc(args));
        Self::start(cmd, grpc_requested(args))
    }

    fn start(mut cmd: Command, grpc_requested: bool) -> Self {
        let mut child = cmd
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn skua");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let addr = loop {
            match lines.next() {
                Some(Ok(l)) => {
                    if let Some(a) = l.strip_prefix("skua listening on ") {
                        break a.trim().parse().expect("listening address");
                    }
                }
                _ => panic!("skua exited before listening: {:?}", child.wait()),
            }
        };
        // The gRPC line follows the HTTP one (crates/server/src/main.rs).
        let grpc = grpc_requested.then(|| {
            loop {
                match lines.next() {
                    Some(Ok(l)) => {
                        if let Some(a) = l.strip_prefix("skua grpc listening on ") {
                            break a.trim().parse().expect("gRPC listening address");
                        }
                    }
                    _ => panic!("skua exited before its gRPC listener was up: {:?}", child.wait()),
                }
            }
        });
        // Keep draining stdout so the child never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Self { child, addr, grpc }
    }

    /// `ws://…/ws`.
    pub fn url(&self) -> String {
        format!("ws://{}/ws", self.addr)
    }

    /// SIGTERM, then waits for the process to exit (it drains first); returns its exit status.
    ///
    /// # Panics
    /// When the signal cannot be sent or the process cannot be waited for.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status().expect("run kill");
        assert!(sent.success(), "kill -TERM {pid}");
        self.child.wait().expect("wait for skua")
    }

    /// SIGKILL: no drain, no cleanup.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for SkuaProcess {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A private service process (Mosquitto, Redis or Postgres) on one port, restartable on the
/// same port: the chaos harness's [`Service`], in a temporary directory of its own (removed
/// with this value), with a test's API (it panics where the harness returns an error).
#[derive(Debug)]
pub struct ServiceProcess {
    service: Service,
    dir: PathBuf,
    /// The port it listens on.
    pub port: u16,
}

impl ServiceProcess {
    /// A private Mosquitto (MQTT v5, anonymous, no persistence) on a free port.
    ///
    /// # Panics
    /// When it does not start.
    pub fn mosquitto() -> Self {
        Self::start(Service::mosquitto).unwrap_or_else(|e| panic!("private Mosquitto: {e:#}"))
    }

    /// A private Redis (no persistence) on a free port.
    ///
    /// # Panics
    /// When it does not start.
    pub fn redis() -> Self {
        Self::start(Service::redis).unwrap_or_else(|e| panic!("private Redis: {e:#}"))
    }

    /// A private Postgres (a fresh cluster, trust auth, database `postgres`) on a free port; as
    /// root, run as the `postgres` user through `setpriv` (the server refuses to run as root,
    /// and `setpriv` execs, so [`Self::kill9`] hits the server itself). `None` (after saying
    /// why) when Postgres' binaries or the `postgres` user are missing, or it does not start.
    pub fn postgres() -> Option<Self> {
        Self::start(Service::postgres).map_err(|e| eprintln!("private Postgres: {e:#}")).ok()
    }

    fn start(service: impl FnOnce(&Path) -> anyhow::Result<Service>) -> anyhow::Result<Self> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("skua-service-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let service = service(&dir)?;
        Ok(Self { port: service.port, service, dir })
    }

    /// (Re)starts the process and waits until its port accepts connections.
    ///
    /// # Panics
    /// When it does not come up.
    pub fn restart(&mut self) {
        self.service.restart().unwrap_or_else(|e| panic!("restarting {:?}: {e:#}", self.service.kind));
    }

    /// SIGINT (Postgres' fast shutdown: sessions are ended, nothing is left behind) and wait.
    pub fn interrupt(&mut self) {
        self.service.interrupt();
    }

    /// SIGKILL.
    pub fn kill9(&mut self) {
        self.service.kill9();
    }

    /// SIGKILL to the process and every process it started, at once: for Postgres a crash of
    /// the whole server (its backends and WAL writer too), after which [`Self::restart`]
    /// runs crash recovery on the same data directory (the harness's `Service::crash`).
    pub fn crash(&mut self) {
        self.service.crash();
    }

    /// `mqtt://127.0.0.1:PORT`, `redis://127.0.0.1:PORT` or `postgres://postgres@127.0.0.1:PORT/postgres`.
    pub fn url(&self) -> String {
        self.service.url()
    }
}

impl Drop for ServiceProcess {
    fn drop(&mut self) {
        // Postgres gets its fast shutdown, so no shared memory is left behind.
        self.service.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
