//! [`RedisPresence`] against real Redis servers:
//!
//! - the presence conformance suite, against the Redis at `SKUA_TEST_REDIS_URL` (for example
//!   `redis://127.0.0.1:6379`), each test under its own key prefix `skua-test-<uuid>`, whose
//!   keys the harness deletes when the test ends;
//! - a restart test against a private `redis-server` this file starts on a free loopback port and
//!   kills with SIGKILL.
//!
//! A missing URL or `redis-server` skips with a loud line on stderr, and fails under `CI=true`
//! (STYLE.md §8).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use skua_conformance::ports::{self, Listening};
use skua_conformance::presence::PresenceHarness;
use skua_conformance::skip::skip;
use skua_core::{ActorId, AppId, ConnId, ConnRef, NodeId, Presence, PresenceChange, PresenceError, ProjectId, RoomKey};
use skua_presence::RedisPresence;
use tokio::process::{Child, Command};

const URL_VAR: &str = "SKUA_TEST_REDIS_URL";

// ----------------------------------------------------------------------------------------------
// The conformance suite.

/// Handles onto the Redis at `SKUA_TEST_REDIS_URL`, all under one fresh key prefix.
struct RedisHarness {
    url: String,
    prefix: String,
}

impl RedisHarness {
    /// `None` (after saying so) when `SKUA_TEST_REDIS_URL` is unset.
    async fn from_env() -> Option<Self> {
        let Some(url) = std::env::var(URL_VAR).ok().filter(|u| !u.is_empty()) else {
            skip(&format!("{URL_VAR} not set"));
            return None;
        };
        Some(Self { url, prefix: format!("skua-test-{}", uuid::Uuid::new_v4().simple()) })
    }
}

impl PresenceHarness for RedisHarness {
    async fn open(&self) -> Arc<dyn Presence> {
        let presence = RedisPresence::connect(&self.url, &self.prefix)
            .await
            .unwrap_or_else(|e| panic!("connecting to {URL_VAR}={}: {e:?}", self.url));
        Arc::new(presence)
    }
    // `wait_past` keeps the default: Redis expires registrations on its own clock.
}

impl Drop for RedisHarness {
    /// Deletes the test's keys (`SCAN` + `DEL` by prefix), best effort: `Drop` cannot await, so
    /// this uses a blocking connection, and it gives up quietly when Redis is gone (the keys
    /// are a few bytes each, and the prefix is never reused).
    fn drop(&mut self) {
        let Ok(client) = redis::Client::open(self.url.as_str()) else { return };
        let Ok(mut conn) = client.get_connection_with_timeout(Duration::from_secs(1)) else { return };
        let pattern = format!("{}:*", self.prefix);
        let mut cursor = 0_u64;
        loop {
            let Ok((next, keys)): redis::RedisResult<(u64, Vec<Vec<u8>>)> =
                redis::cmd("SCAN").arg(cursor).arg("MATCH").arg(&pattern).arg("COUNT").arg(1000).query(&mut conn)
            else {
                return;
            };
            if !keys.is_empty() && redis::cmd("DEL").arg(&keys).query::<i64>(&mut conn).is_err() {
                return;
            }
            if next == 0 {
                return;
            }
            cursor = next;
        }
    }
}

skua_conformance::presence_conformance!(setup = RedisHarness::from_env());

// ----------------------------------------------------------------------------------------------
// Redis restarts.

/// How long a call may take while Redis is down before the test calls it hung: the response
/// timeout plus a round of reconnect attempts, with room to spare.
const DOWN_BOUND: Duration = Duration::from_secs(10);

/// How long Redis may take to come up, and the manager to reconnect to it.
const UP_BOUND: Duration = Duration::from_secs(10);

/// A `redis-server` of this test's own, without persistence, on a free loopback port.
struct PrivateRedis {
    port: u16,
    child: Child,
}

impl PrivateRedis {
    /// `None` (after saying so) when `redis-server` is not on `PATH`.
    /// On a free port; one another process took before Redis bound it is given up for a fresh
    /// one (issue 35).
    async fn start() -> Option<Self> {
        for _ in 0..5 {
            let port = ports::free_port().unwrap_or_else(|e| panic!("a free port: {e}"));
            let child = match spawn_redis(port) {
                Ok(child) => child,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    skip("redis-server not on PATH");
                    return None;
                }
                Err(e) => panic!("starting redis-server: {e}"),
            };
            let mut server = Self { port, child };
            match server.listening() {
                Listening::Yes => return Some(server),
                Listening::Taken | Listening::Exited => server.kill_9().await,
                Listening::TimedOut => panic!("redis-server on port {port} not listening after {UP_BOUND:?}"),
            }
        }
        panic!("redis-server found no free port in 5 tries");
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// SIGKILL, as a crash would (`Child::kill` sends SIGKILL), and reaps the process.
    async fn kill_9(&mut self) {
        self.child.kill().await.unwrap_or_else(|e| panic!("killing redis-server: {e}"));
    }

    /// A fresh server on the same port: the data is gone, as after a crash without persistence.
    async fn restart(&mut self) {
        self.child = spawn_redis(self.port).unwrap_or_else(|e| panic!("restarting redis-server: {e}"));
        assert_eq!(self.listening(), Listening::Yes, "redis-server on port {} after a restart", self.port);
    }

    /// Waits until this redis-server (not another process) listens on its port.
    fn listening(&self) -> Listening {
        let pid = self.child.id().unwrap_or_else(|| panic!("redis-server on port {} already ended", self.port));
        ports::wait_listening(pid, self.port, UP_BOUND)
    }
}

fn spawn_redis(port: u16) -> std::io::Result<Child> {
    Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .args(["--daemonize", "no"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
}

/// Awaits `fut`, which must fail with a [`PresenceError`] (not hang, not panic).
async fn fails<T: std::fmt::Debug>(what: &str, fut: impl Future<Output = Result<T, PresenceError>>) {
    match tokio::time::timeout(DOWN_BOUND, fut).await {
        Ok(Err(PresenceError::Unavailable(_))) => {}
        Ok(Err(e)) => panic!("{what} while Redis is down: unexpected error {e:?}"),
        Ok(Ok(v)) => panic!("{what} succeeded while Redis is down: {v:?}"),
        Err(_) => panic!("{what} still pending after {DOWN_BOUND:?} while Redis is down"),
    }
}

/// Retries `op` until it succeeds, for at most [`UP_BOUND`]: right after a restart the manager
/// may still fail a call or two on the connection it is replacing.
async fn once_back<T, F: Future<Output = Result<T, PresenceError>>>(what: &str, mut op: impl FnMut() -> F) -> T {
    let deadline = Instant::now() + UP_BOUND;
    loop {
        match op().await {
            Ok(v) => return v,
            Err(_) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(e) => panic!("{what} still failing {UP_BOUND:?} after Redis came back: {e:?}"),
        }
    }
}

/// While Redis is down every operation fails with [`PresenceError::Unavailable`]; once it is
/// back (empty) the same handle works again, and `refresh_node` reports the lost registration
/// so the node re-announces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_fail_while_redis_is_down_and_recover_after_a_restart() {
    let Some(mut redis) = PrivateRedis::start().await else { return };
    let p = RedisPresence::connect(&redis.url(), "restart").await.unwrap_or_else(|e| panic!("connect: {e:?}"));
    let (n1, r, alice, c1) =
        (node("n1"), room("room-1"), actor("alice"), ConnRef { node: node("n1"), conn: ConnId(1) });
    let data = || Bytes::from_static(b"\x81\xa4mood\xa5happy");

    assert!(p.refresh_node(&n1, 0, 60, true).await.unwrap_or_else(|e| panic!("refresh: {e:?}")));
    let change = p.announce(&r, &alice, &c1, data(), 100).await.unwrap_or_else(|e| panic!("announce: {e:?}"));
    assert_eq!(change, PresenceChange::Join);
    assert!(!p.refresh_node(&n1, 0, 60, true).await.unwrap_or_else(|e| panic!("refresh: {e:?}")), "still live");

    redis.kill_9().await;
    fails("announce", p.announce(&r, &alice, &c1, data(), 200)).await;
    fails("list", p.list(&r)).await;
    fails("remove", p.remove(&r, &alice, &c1)).await;
    fails("refresh_node", p.refresh_node(&n1, 0, 60, true)).await;
    fails("expired_nodes", p.expired_nodes(0)).await;
    fails("remove_node", p.remove_node(&node("n2"))).await;
    fails("connect", RedisPresence::connect(&redis.url(), "restart")).await;

    redis.restart().await;
    let entries = once_back("list", || p.list(&r)).await;
    assert_eq!(entries, [], "the restarted Redis has no data");
    assert!(
        once_back("refresh_node", || p.refresh_node(&n1, 0, 60, true)).await,
        "the registration was lost with the data: the node must re-announce"
    );
    let change = once_back("announce", || p.announce(&r, &alice, &c1, data(), 300)).await;
    assert_eq!(change, PresenceChange::Join, "re-announcing joins afresh");
    let entries = once_back("list", || p.list(&r)).await;
    assert_eq!(entries.len(), 1);
    assert_eq!((&entries[0].actor, &entries[0].data[..], entries[0].joined_at), (&alice, &data()[..], 300));
}

fn room(name: &str) -> RoomKey {
    RoomKey {
        project: ProjectId::parse("proj").unwrap_or_else(|e| panic!("{e}")),
        app: AppId::parse("app").unwrap_or_else(|e| panic!("{e}")),
        room: Arc::from(name),
    }
}

fn actor(name: &str) -> ActorId {
    ActorId::parse(name).unwrap_or_else(|e| panic!("{e}"))
}

fn node(name: &str) -> NodeId {
    NodeId::parse(name).unwrap_or_else(|e| panic!("{e}"))
}
