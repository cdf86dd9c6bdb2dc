//! Real processes for fault tests: `skua` nodes that can be SIGKILLed, and private Mosquitto
//! and Redis instances on free loopback ports that can be killed and restarted.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A free loopback port (bound and released; the small race is acceptable in tests).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
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
}

impl SkuaProcess {
    /// Spawns `bin serve --listen 127.0.0.1:0 <args>` and waits for its listening line.
    ///
    /// # Panics
    /// When it does not start.
    pub fn spawn(bin: &str, args: &[&str]) -> Self {
        let mut cmd = Command::new(bin);
        cmd.arg("serve").args(["--listen", "127.0.0.1:0"]).args(args);
        Self::start(cmd)
    }

    /// As [`Self::spawn`], with both the soft and the hard open-file limit (`RLIMIT_NOFILE`)
    /// set to `limit` by `sh -c 'ulimit -n …; exec …'` (the node raises soft to hard at start).
    ///
    /// # Panics
    /// When it does not start.
    pub fn spawn_with_open_file_limit(bin: &str, limit: u32, args: &[&str]) -> Self {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", &format!("ulimit -n {limit} && exec \"$0\" \"$@\""), bin, "serve", "--listen", "127.0.0.1:0"])
            .args(args);
        Self::start(cmd)
    }

    fn start(mut cmd: Command) -> Self {
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
        // Keep draining stdout so the child never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Self { child, addr }
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

/// A private service process (Mosquitto or Redis) on one port, restartable on the same port.
#[derive(Debug)]
pub struct ServiceProcess {
    program: &'static str,
    args: Vec<String>,
    child: Option<Child>,
    /// The port it listens on.
    pub port: u16,
}

impl ServiceProcess {
    /// A private Mosquitto (MQTT v5, anonymous, no persistence) on a free port.
    pub fn mosquitto() -> Self {
        let port = free_port();
        let conf = std::env::temp_dir().join(format!("skua-mosquitto-{port}.conf"));
        std::fs::write(&conf, format!("listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n"))
            .expect("write conf");
        Self::start("mosquitto", vec!["-c".into(), conf.display().to_string()], port)
    }

    /// A private Redis (no persistence) on a free port.
    pub fn redis() -> Self {
        let port = free_port();
        let args = ["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"];
        Self::start("redis-server", args.iter().map(|s| (*s).to_owned()).collect(), port)
    }

    /// A private Postgres (a fresh cluster in a temporary directory, trust auth, database
    /// `postgres`) on a free port, run as the `postgres` user through `setpriv` (the server
    /// refuses to run as root, and `setpriv` execs, so [`Self::kill9`] hits the server itself).
    /// `None` when Postgres' binaries or the `postgres` user are missing.
    pub fn postgres() -> Option<Self> {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(Result::ok)
            .map(|e| e.path().join("bin"))
            .next()?;
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("skua-pg-{port}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).ok()?;
        let chown = Command::new("chown").args(["-R", "postgres:postgres"]).arg(&dir).status().ok()?;
        let initdb = Command::new("setpriv")
            .args(["--reuid=postgres", "--regid=postgres", "--init-groups", "--"])
            .arg(bin.join("initdb"))
            .args(["-A", "trust", "-U", "postgres", "-D"])
            .arg(dir.join("data"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .ok()?;
        if !chown.success() || !initdb.success() {
            return None;
        }
        let postgres = bin.join("postgres").display().to_string();
        let args = vec![
            "--reuid=postgres".to_owned(),
            "--regid=postgres".to_owned(),
            "--init-groups".to_owned(),
            "--".to_owned(),
            postgres,
            "-D".to_owned(),
            dir.join("data").display().to_string(),
            "-p".to_owned(),
            port.to_string(),
            "-h".to_owned(),
            "127.0.0.1".to_owned(),
            "-k".to_owned(),
            dir.display().to_string(),
        ];
        Some(Self::start("setpriv", args, port))
    }

    fn start(program: &'static str, args: Vec<String>, port: u16) -> Self {
        let mut s = Self { program, args, child: None, port };
        s.restart();
        s
    }

    /// (Re)starts the process and waits until its port accepts connections.
    ///
    /// # Panics
    /// When it does not come up within 10 s.
    pub fn restart(&mut self) {
        let child = Command::new(self.program)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", self.program));
        self.child = Some(child);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(std::time::Instant::now() < deadline, "{} did not listen on {}", self.program, self.port);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGINT (Postgres' fast shutdown: sessions are ended, nothing is left behind) and wait.
    pub fn interrupt(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill").args(["-INT", &c.id().to_string()]).status();
            let _ = c.wait();
        }
    }

    /// SIGKILL.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// `mqtt://127.0.0.1:PORT`, `redis://127.0.0.1:PORT` or `postgres://postgres@127.0.0.1:PORT/postgres`.
    pub fn url(&self) -> String {
        match self.program {
            "mosquitto" => format!("mqtt://127.0.0.1:{}", self.port),
            "setpriv" => format!("postgres://postgres@127.0.0.1:{}/postgres", self.port),
            _ => format!("redis://127.0.0.1:{}", self.port),
        }
    }
}

impl Drop for ServiceProcess {
    fn drop(&mut self) {
        self.kill9();
    }
}
