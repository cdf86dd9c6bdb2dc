//! Where the bench connects: a `ws://` URL that must resolve to a loopback address, and the
//! server process whose CPU and memory are measured (given by PID, or spawned with
//! `--spawn-skua`).

use std::io::{BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{Context, bail, ensure};

/// A parsed, loopback-only WebSocket URL.
#[derive(Debug, Clone)]
pub struct Target {
    /// The URL as used in the upgrade request.
    pub url: String,
    /// The socket address it names.
    pub addr: SocketAddr,
    /// The request path (`/ws`, `/mqtt`, `/`).
    pub path: String,
}

impl Target {
    /// Parses `ws://HOST:PORT/PATH`. HOST must be a loopback IP or `localhost`.
    ///
    /// # Errors
    /// Not `ws://`, no port, or not loopback: the bench never sends load off this machine.
    pub fn parse(url: &str) -> anyhow::Result<Self> {
        let rest = url.strip_prefix("ws://").context("the target URL must start with ws:// (no TLS, loopback only)")?;
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let addr = if let Some(port) = authority.strip_prefix("localhost:") {
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port.parse().context("bad port")?)
        } else {
            authority
                .parse::<SocketAddr>()
                .with_context(|| format!("{authority:?} is not IP:PORT or localhost:PORT"))?
        };
        ensure!(
            addr.ip().is_loopback(),
            "refusing non-loopback target {}: skua-bench only loads loopback servers",
            addr.ip()
        );
        let path = if path.is_empty() { "/" } else { path };
        Ok(Self { url: format!("ws://{addr}{path}"), addr, path: path.to_owned() })
    }
}

/// What a spawned node's bench fixtures hold ([`crate::fixtures::toml`]), and whether it opens
/// its MQTT door.
#[derive(Debug, Clone, Default)]
pub struct SpawnOptions {
    /// Rooms of the bench app.
    pub rooms: usize,
    /// Churn actors.
    pub churn_actors: usize,
    /// Device actors (`devices`).
    pub device_actors: usize,
    /// The bench app's trigger webhook.
    pub trigger_webhook: Option<String>,
    /// Add `--mqtt-listen 127.0.0.1:0` and wait for its `skua mqtt listening on ADDR` line.
    pub mqtt: bool,
}

/// Lines of skua's stdout read while looking for the MQTT listener's line (it comes right
/// after the client listener's, before the dev banner).
const MAX_START_LINES: usize = 8;

/// A Skua node started by the bench (`--spawn-skua`); killed when dropped.
#[derive(Debug)]
pub struct SpawnedSkua {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
    /// Where its MQTT door listens (plain TCP), when [`SpawnOptions::mqtt`] asked for it.
    pub mqtt_addr: Option<SocketAddr>,
    /// Its stderr log (removed with the server).
    pub log: PathBuf,
    /// Its working directory (fresh, so relative default paths such as the store start empty).
    dir: PathBuf,
}

impl SpawnedSkua {
    /// Starts `path serve --dev --listen 127.0.0.1:0 --fixtures <bench fixtures> [extra…]` in a
    /// fresh temporary directory (removed on drop, with the default store file in it) and waits
    /// for its `skua listening on ADDR` line (and, with `opts.mqtt`, its MQTT listener's).
    ///
    /// # Errors
    /// The binary does not start or never prints its address.
    pub fn start(path: &Path, opts: &SpawnOptions, extra: &[String]) -> anyhow::Result<Self> {
        let path = std::fs::canonicalize(path).with_context(|| format!("no skua binary at {}", path.display()))?;
        static SPAWNED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = SPAWNED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("skua-bench-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).context("while creating the server's directory")?;
        let fixtures = dir.join("bench-fixtures.toml");
        let toml =
            crate::fixtures::toml(opts.rooms, opts.churn_actors, opts.device_actors, opts.trigger_webhook.as_deref());
        std::fs::write(&fixtures, toml).context("while writing the bench fixtures")?;
        let log = std::env::temp_dir().join(format!("skua-bench-{}-{n}-skua.log", std::process::id()));
        let stderr = std::fs::File::create(&log).context("while creating the skua log")?;
        let mut child = Command::new(&path)
            .current_dir(&dir)
            .args(["serve", "--dev", "--listen", "127.0.0.1:0", "--fixtures"])
            .arg(&fixtures)
            .args(if opts.mqtt { &["--mqtt-listen", "127.0.0.1:0"][..] } else { &[] })
            .args(extra)
            // Every bench connection comes from loopback: the per-address limits (on by
            // default) would measure themselves. As variables, so `--skua-arg` flags still win.
            .env("SKUA_MAX_CONNECTIONS_PER_IP", "0")
            .env("SKUA_MAX_NEW_CONNECTIONS_PER_IP_PER_SECOND", "0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("while starting {}", path.display()))?;
        let spawned_dir = dir.clone();
        let stdout = child.stdout.take().context("no stdout")?;
        let mut lines = BufReader::new(stdout);
        let mut first = String::new();
        lines.read_line(&mut first).context("while reading skua's first line")?;
        let mut mqtt_addr = None;
        if opts.mqtt {
            let mut line = String::new();
            for _ in 0..MAX_START_LINES {
                line.clear();
                if lines.read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                if let Some(a) = line.trim().strip_prefix("skua mqtt listening on ") {
                    mqtt_addr = a.parse::<SocketAddr>().ok();
                    break;
                }
            }
        }
        // Keep draining stdout (the dev banner) so the server can never block on it.
        std::thread::spawn(move || {
            let mut sink = String::new();
            while lines.read_line(&mut sink).is_ok_and(|n| n > 0) {
                sink.clear();
            }
        });
        let Some(addr) = first.trim().strip_prefix("skua listening on ") else {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_dir_all(&spawned_dir);
            bail!("skua did not print its address (first line {first:?}); see {}", log.display());
        };
        let addr: SocketAddr = addr.parse().context("bad address in skua's first line")?;
        if opts.mqtt && mqtt_addr.is_none() {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_dir_all(&spawned_dir);
            bail!("skua did not print its MQTT listener's address; see {}", log.display());
        }
        Ok(Self { child, addr, mqtt_addr, log, dir: spawned_dir })
    }

    /// The node's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its WebSocket URL.
    pub fn url(&self) -> String {
        format!("ws://{}/ws", self.addr)
    }
}

impl Drop for SpawnedSkua {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
        // The log is only needed when the server did not start (then there is no `Self`).
        let _ = std::fs::remove_file(&self.log);
    }
}

/// Skua nodes joined by an MQTT broker (a private `mosquitto` unless one is given), for the
/// `cluster` scenario. Everything is stopped on drop.
pub struct SpawnedCluster {
    /// The nodes; node 0 gets the publishers.
    pub nodes: Vec<SpawnedSkua>,
    /// The broker's URL.
    pub mqtt: String,
    broker: Option<(Child, PathBuf)>,
}

impl SpawnedCluster {
    /// Starts a broker (when `mqtt` is `None`) and `n` nodes on it, in a fresh namespace.
    ///
    /// # Errors
    /// The broker or a node does not start.
    pub fn start(path: &Path, n: usize, mqtt: Option<String>, extra: &[String]) -> anyhow::Result<Self> {
        let (mqtt, broker) = match mqtt {
            Some(url) => (url, None),
            None => {
                let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
                let conf = std::env::temp_dir().join(format!("skua-bench-{}-mosquitto.conf", std::process::id()));
                std::fs::write(&conf, format!("listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n"))?;
                let child = Command::new("mosquitto")
                    .arg("-c")
                    .arg(&conf)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .context("while starting mosquitto (Debian package mosquitto)")?;
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
                while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                    if std::time::Instant::now() > deadline {
                        bail!("mosquitto did not listen on {port}");
                    }
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                (format!("mqtt://127.0.0.1:{port}"), Some((child, conf)))
            }
        };
        let namespace = format!("bench{}", std::process::id());
        let mut cluster = Self { nodes: Vec::with_capacity(n), mqtt, broker };
        for i in 0..n {
            let mut args = vec![
                "--bus".to_owned(),
                cluster.mqtt.clone(),
                "--namespace".to_owned(),
                namespace.clone(),
                "--node-id".to_owned(),
                format!("bench-{i}"),
                "--store".to_owned(),
                "memory".to_owned(),
            ];
            args.extend(extra.iter().cloned());
            let opts = SpawnOptions {
                rooms: crate::fixtures::DEFAULT_ROOMS,
                churn_actors: crate::fixtures::DEFAULT_CHURN_ACTORS,
                ..SpawnOptions::default()
            };
            cluster.nodes.push(SpawnedSkua::start(path, &opts, &args)?);
        }
        Ok(cluster)
    }

    /// The private broker's process id.
    pub fn broker_pid(&self) -> Option<u32> {
        self.broker.as_ref().map(|(c, _)| c.id())
    }
}

impl Drop for SpawnedCluster {
    fn drop(&mut self) {
        self.nodes.clear();
        if let Some((mut c, conf)) = self.broker.take() {
            let _ = c.kill();
            let _ = c.wait();
            let _ = std::fs::remove_file(conf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_targets_are_accepted() {
        assert_eq!(Target::parse("ws://127.0.0.1:80/ws").unwrap().addr.port(), 80);
        assert_eq!(Target::parse("ws://localhost:9").unwrap().url, "ws://127.0.0.1:9/");
        assert!(Target::parse("ws://[::1]:9/x").is_ok());
        assert!(Target::parse("ws://10.0.0.1:80/ws").is_err());
        assert!(Target::parse("ws://example.com:80/ws").is_err());
        assert!(Target::parse("wss://127.0.0.1:80/ws").is_err());
    }
}
