//! The bus conformance suite against [`MqttBus`], plus what only the MQTT bus has: packet size
//! limits, namespaces, foreign messages on the broker, and riding out a broker restart.
//!
//! The suite and most tests need a broker: `SKUA_TEST_MQTT_URL` (e.g. `mqtt://127.0.0.1:1883`).
//! Unset, they print `SKIPPED: …` and pass, except under `CI=true`, where they fail. The
//! broker-restart test starts its own Mosquitto on a free loopback port instead, and skips (or
//! fails under CI) when `mosquitto` is not installed. Every harness uses its own namespace and
//! client id prefix, so parallel tests and earlier runs never see each other.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::{AsyncClient, MqttOptions};
use skua_bus::{MqttBus, MqttBusConfig, MqttError};
use skua_conformance::bus::BusHarness;
use skua_conformance::ports::{self, Listening};
use skua_conformance::skip::skip;
use skua_core::{
    ActorId, AppId, Bus, BusDelivery, BusError, BusSubscription, ConnId, Envelope, EnvelopeId, NodeId, PresenceChange,
    PresenceEvent, ProjectId, Publication, RoomKey, Route, TopicAddress,
};
use tokio::sync::mpsc::Receiver;
use tokio::sync::watch;

/// Small receivers, as for the in-process bus, so backpressure is exercised.
const CAPACITY: usize = 8;
/// How long a test waits for one expected event.
const DEADLINE: Duration = Duration::from_secs(10);

// ----------------------------------------------------------------------------------------------
// Harness.

struct MqttHarness {
    config: MqttBusConfig,
}

impl MqttHarness {
    /// A harness on the broker of `SKUA_TEST_MQTT_URL`, or `None` (after saying so) when unset.
    ///
    /// # Panics
    /// Under `CI=true` when the variable is unset: a missing service is a failure there.
    async fn from_env() -> Option<Self> {
        match std::env::var("SKUA_TEST_MQTT_URL") {
            Ok(url) if !url.trim().is_empty() => Some(Self::on(url.trim())),
            _ => {
                skip("SKUA_TEST_MQTT_URL not set (e.g. mqtt://127.0.0.1:1883); MQTT bus test not run");
                None
            }
        }
    }

    /// A harness with a fresh namespace and client id prefix on the broker at `url`.
    fn on(url: &str) -> Self {
        let unique = uuid::Uuid::new_v4().simple().to_string();
        let mut config = MqttBusConfig::new(url, format!("t{unique}"));
        config.client_id_prefix = format!("t{unique}");
        Self { config }
    }

    async fn open(&self, name: &str) -> (Arc<MqttBus>, Receiver<BusDelivery>) {
        open(self.config.clone(), name).await
    }
}

impl BusHarness for MqttHarness {
    async fn node(&self, name: &str) -> (Arc<dyn Bus>, Receiver<BusDelivery>) {
        let (bus, rx) = self.open(name).await;
        (bus, rx)
    }
}

async fn open(config: MqttBusConfig, name: &str) -> (Arc<MqttBus>, Receiver<BusDelivery>) {
    let node = NodeId::parse(name).expect("test node names are valid ids");
    MqttBus::open(config, node, CAPACITY).await.unwrap_or_else(|e| panic!("node {name} could not connect: {e:?}"))
}

skua_conformance::bus_conformance!(setup = MqttHarness::from_env());

// ----------------------------------------------------------------------------------------------
// MQTT-specific tests.

/// The largest payload the edge accepts (921 600 bytes) fits the default packet limit (far
/// above rumqttc's 10 KiB default); a packet above the limit is refused up front, and the
/// connection survives it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_largest_payload_round_trips_and_larger_is_refused() {
    let Some(h) = MqttHarness::from_env().await else { return };
    let (a, _a_rx) = h.open("a").await;
    let (b, mut b_rx) = h.open("b").await;
    let t = topic("room-1", "files");
    b.subscribe(&BusSubscription::Topic(t.clone())).await.expect("subscribe");

    let data: Vec<u8> = (0..921_600u32).map(|i| (i % 251) as u8).collect();
    let big = publication("a", &t, None, Bytes::from(data));
    a.publish(big.clone()).await.expect("a 921600-byte payload is accepted");
    expect(&mut b_rx, &big, Route::Plain).await;

    let too_big = publication("a", &t, None, Bytes::from(vec![0u8; 1024 * 1024 + 64 * 1024]));
    match a.publish(too_big).await {
        Err(BusError::Backend(e)) => {
            assert!(matches!(e.downcast_ref::<MqttError>(), Some(MqttError::TooLarge { .. })), "{e:?}")
        }
        other => panic!("an oversized publication must be refused, got {other:?}"),
    }
    let after = publication("a", &t, None, Bytes::from_static(b"after"));
    a.publish(after.clone()).await.expect("the link survives");
    expect(&mut b_rx, &after, Route::Plain).await;
    assert!(a.is_available() && b.is_available());
}

/// Two namespaces on one broker never see each other's publications or groups.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_namespaces_isolate_clusters() {
    let Some(one) = MqttHarness::from_env().await else { return };
    let two = MqttHarness::on(&one.config.url);
    let (a1, _a1_rx) = one.open("a").await;
    let (b1, mut b1_rx) = one.open("b").await;
    let (a2, _a2_rx) = two.open("a").await;
    let t = topic("room-1", "chat");
    let g = skua_core::GroupKey { topic: t.clone(), group: Arc::from("workers") };
    b1.subscribe(&BusSubscription::Topic(t.clone())).await.expect("subscribe");
    b1.subscribe(&BusSubscription::Group(g.clone())).await.expect("subscribe");

    a2.publish(publication("a", &t, None, Bytes::from_static(b"other cluster"))).await.expect("publish");
    let mine = publication("a", &t, None, Bytes::from_static(b"mine"));
    a1.publish(mine.clone()).await.expect("publish");
    let mut got = [next(&mut b1_rx).await, next(&mut b1_rx).await];
    got.sort_by_key(|d| matches!(d.route, Route::Group(_)));
    assert_eq!((&*got[0].envelope, &got[0].route), (&*mine, &Route::Plain));
    assert_eq!((&*got[1].envelope, &got[1].route), (&*mine, &Route::Group(g)));
}

/// A message on the namespace that is not an envelope is counted and dropped; the node goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_foreign_messages_are_counted_and_dropped() {
    let Some(h) = MqttHarness::from_env().await else { return };
    let (b, mut b_rx) = h.open("b").await;
    let t = topic("room-1", "chat");
    b.subscribe(&BusSubscription::Topic(t.clone())).await.expect("subscribe");

    let internal = format!("{}/v1/m/proj/app/room-1/chat", h.config.namespace);
    let (client, mut eventloop) = raw_client(&h.config.url, &format!("{}-raw", h.config.client_id_prefix));
    let driver = tokio::spawn(async move { while eventloop.poll().await.is_ok() {} });
    for garbage in [&b"not msgpack"[..], &[0x92, 0x07, 0x00], &[0xc1]] {
        client.publish(internal.clone(), QoS::AtLeastOnce, false, garbage.to_vec()).await.expect("raw publish");
    }
    let (a, _a_rx) = h.open("a").await;
    let good = publication("a", &t, None, Bytes::from_static(b"good"));
    // Sent after the garbage on another connection: wait until all three were counted.
    within("three decode errors", async {
        while b.stats().decode_errors < 3 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    a.publish(good.clone()).await.expect("publish");
    expect(&mut b_rx, &good, Route::Plain).await;
    driver.abort();
}

/// Mosquitto sends one copy per matching subscription; the node delivers one plain copy and
/// counts the rest as duplicates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_overlapping_subscriptions_are_deduplicated() {
    let Some(h) = MqttHarness::from_env().await else { return };
    let (a, _a_rx) = h.open("a").await;
    let (b, mut b_rx) = h.open("b").await;
    let t = topic("room-1", "chat");
    b.subscribe(&BusSubscription::Topic(t.clone())).await.expect("subscribe");
    b.subscribe(&BusSubscription::TopicKey(t.clone(), "k".to_owned())).await.expect("subscribe");
    let keyed = publication("a", &t, Some("k"), Bytes::from_static(b"keyed"));
    let sentinel = publication("a", &t, None, Bytes::from_static(b"sentinel"));
    a.publish(keyed.clone()).await.expect("publish");
    a.publish(sentinel.clone()).await.expect("publish");
    expect(&mut b_rx, &keyed, Route::Plain).await;
    expect(&mut b_rx, &sentinel, Route::Plain).await;
    let stats = b.stats();
    // Exactly one: zero would mean the overlap (and so the deduplication) was never exercised.
    assert_eq!(stats.duplicates, 1, "Mosquitto sends a copy per matching subscription: {stats:?}");
}

/// While connected, a full publish buffer makes `publish` wait for the broker's
/// acknowledgements instead of failing; `close` flushes what is still held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_full_buffer_waits_while_connected_and_close_flushes() {
    const N: usize = 300;
    let Some(h) = MqttHarness::from_env().await else { return };
    let mut tiny = h.config.clone();
    tiny.publish_buffer = 1;
    let (a, _a_rx) = open(tiny, "a").await;
    let (b, mut b_rx) = h.open("b").await;
    let t = topic("room-1", "chat");
    b.subscribe(&BusSubscription::Topic(t.clone())).await.expect("subscribe");

    let sent: Vec<_> = (0..N).map(|i| publication("a", &t, None, Bytes::from(format!("m-{i}")))).collect();
    let publish_all = async {
        for envelope in &sent {
            a.publish(envelope.clone()).await.expect("a full buffer waits while connected");
        }
        a.close(Duration::from_secs(5)).await;
    };
    let receive_all = async {
        for envelope in &sent {
            expect(&mut b_rx, envelope, Route::Plain).await;
        }
    };
    tokio::join!(publish_all, receive_all);
    assert_eq!((a.stats().refused, a.stats().held), (0, 0));
}

/// A node that does not drain its receiver stops reading from the broker (backpressure); what
/// the broker queued meanwhile arrives complete and in order once it drains.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_slow_receiver_loses_nothing_within_the_broker_queue() {
    const N: usize = 300;
    let Some(h) = MqttHarness::from_env().await else { return };
    let (a, _a_rx) = h.open("a").await;
    let (b, mut b_rx) = h.open("b").await;
    let t = topic("room-1", "chat");
    b.subscribe(&BusSubscription::Topic(t.clone())).await.expect("subscribe");
    let sent: Vec<_> = (0..N).map(|i| publication("a", &t, None, Bytes::from(format!("m-{i}")))).collect();
    for envelope in &sent {
        a.publish(envelope.clone()).await.expect("publish");
    }
    for envelope in &sent {
        expect(&mut b_rx, envelope, Route::Plain).await;
    }
    assert_eq!(b.stats().duplicates, 0);
}

/// The broker is killed with SIGKILL and restarted on the same port: both nodes notice,
/// publications are buffered (and refused once the buffer is full), subscriptions made before
/// and during the outage are re-made, and the buffered publications arrive in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_broker_restart_buffers_publications_and_restores_subscriptions() {
    const BUFFER: usize = 8;
    let Some(binary) = mosquitto_binary() else { return };
    let mut broker = Broker::start(&binary).await;
    let h = MqttHarness::on(&broker.url());
    // Sessions are clean, so a node that has not resubscribed yet when another flushes its buffer
    // misses those publications. The subscriber reconnects fast, the publisher slowly (2-4 s
    // after the outage), so the test does not depend on which of them the broker sees first.
    let mut fast = h.config.clone();
    fast.reconnect_backoff_min = Duration::from_millis(50);
    fast.reconnect_backoff_max = Duration::from_millis(200);
    let mut slow = h.config.clone();
    slow.reconnect_backoff_min = Duration::from_secs(4);
    slow.reconnect_backoff_max = Duration::from_secs(4);
    slow.publish_buffer = BUFFER;
    let (a, mut a_rx) = open(slow, "a").await;
    let (b, mut b_rx) = open(fast, "b").await;
    let (t, t2) = (topic("room-1", "chat"), topic("room-1", "news"));
    let room = t.room.clone();
    b.subscribe(&BusSubscription::Topic(t.clone())).await.expect("subscribe");
    a.subscribe(&BusSubscription::Presence(room.clone())).await.expect("subscribe");
    let before = publication("a", &t, None, Bytes::from_static(b"before"));
    a.publish(before.clone()).await.expect("publish");
    expect(&mut b_rx, &before, Route::Plain).await;
    within("a's buffer to drain", async {
        while a.stats().held > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;

    broker.kill();
    wait_for(a.availability(), false, "a to notice the outage").await;
    wait_for(b.availability(), false, "b to notice the outage").await;
    assert!(!a.is_available() && !b.is_available());
    // Recorded now, made on reconnect.
    b.subscribe(&BusSubscription::TopicKey(t2.clone(), "k".to_owned())).await.expect("subscribe while down");
    let buffered: Vec<_> =
        (0..BUFFER).map(|i| publication("a", &t, None, Bytes::from(format!("buffered-{i}")))).collect();
    for envelope in &buffered {
        a.publish(envelope.clone()).await.expect("buffered while the broker is down");
    }
    let overflow = a.publish(publication("a", &t, None, Bytes::from_static(b"overflow"))).await;
    assert!(matches!(overflow, Err(BusError::Unavailable)), "a full buffer refuses: {overflow:?}");
    assert_eq!((a.stats().held, a.stats().refused), (BUFFER, 1));

    broker.restart().await;
    wait_for(b.availability(), true, "b to reconnect").await;
    wait_for(a.availability(), true, "a to reconnect").await;
    for envelope in &buffered {
        expect(&mut b_rx, envelope, Route::Plain).await;
    }
    let after = publication("a", &t, None, Bytes::from_static(b"after"));
    let keyed = publication("a", &t2, Some("k"), Bytes::from_static(b"keyed"));
    a.publish(after.clone()).await.expect("publish");
    a.publish(keyed.clone()).await.expect("publish");
    expect(&mut b_rx, &after, Route::Plain).await;
    expect(&mut b_rx, &keyed, Route::Plain).await;
    let join = Arc::new(Envelope::Presence(PresenceEvent {
        room,
        actor: ActorId::parse("bob").expect("actor"),
        change: PresenceChange::Join,
        data: Bytes::from_static(b"\x80"),
        node: NodeId::parse("b").expect("node"),
        persistent: None,
    }));
    b.publish(join.clone()).await.expect("publish");
    expect(&mut a_rx, &join, Route::Plain).await;
    assert_eq!((a.stats().connects, b.stats().connects), (2, 2));
    a.close(Duration::from_secs(1)).await;
    assert!(matches!(a.publish(after).await, Err(BusError::Closed)));
}

// ----------------------------------------------------------------------------------------------
// Helpers.

fn topic(room: &str, name: &str) -> TopicAddress {
    TopicAddress {
        room: RoomKey {
            project: ProjectId::parse("proj").expect("project"),
            app: AppId::parse("app").expect("app"),
            room: Arc::from(room),
        },
        topic: Arc::from(name),
    }
}

fn publication(node: &str, topic: &TopicAddress, filter: Option<&str>, data: Bytes) -> Arc<Envelope> {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let run = u128::from(uuid::Uuid::new_v4().as_u64_pair().0);
    Arc::new(Envelope::Publication(Publication {
        history: None,
        id: EnvelopeId((run << 64) | u128::from(NEXT.fetch_add(1, Ordering::Relaxed))),
        topic: topic.clone(),
        filter: filter.map(str::to_owned),
        publisher: ActorId::parse("publisher").expect("actor"),
        publisher_conn: ConnId(1),
        node: NodeId::parse(node).expect("node"),
        timestamp_ms: 1_700_000_000_000,
        msg_id: None,
        retain: false,
        qos: 1,
        data,
    }))
}

async fn within<F: std::future::IntoFuture>(what: &str, fut: F) -> F::Output {
    tokio::time::timeout(DEADLINE, fut)
        .await
        .unwrap_or_else(|_| panic!("timed out after {DEADLINE:?} waiting for {what}"))
}

async fn next(rx: &mut Receiver<BusDelivery>) -> BusDelivery {
    within("a delivery", rx.recv()).await.expect("the delivery receiver stays open")
}

async fn expect(rx: &mut Receiver<BusDelivery>, envelope: &Arc<Envelope>, route: Route) {
    let got = next(rx).await;
    assert_eq!((&got.route, got.retained_replay), (&route, false));
    assert!(
        *got.envelope == **envelope,
        "unexpected delivery {:?}, wanted {:?}",
        summary(&got.envelope),
        summary(envelope)
    );
}

fn summary(envelope: &Envelope) -> String {
    match envelope {
        Envelope::Publication(p) => {
            format!("{:?} ({} bytes)", String::from_utf8_lossy(&p.data[..p.data.len().min(32)]), p.data.len())
        }
        Envelope::Presence(e) => format!("presence {:?}", e.change),
        Envelope::Control(c) => format!("control {:?}", c.message),
    }
}

async fn wait_for(mut availability: watch::Receiver<bool>, want: bool, what: &str) {
    within(what, availability.wait_for(|up| *up == want)).await.expect("the bus is running");
}

fn raw_client(url: &str, client_id: &str) -> (AsyncClient, rumqttc::v5::EventLoop) {
    let rest = url.strip_prefix("mqtt://").expect("an mqtt:// url");
    let (host, port) = rest.rsplit_once(':').map_or((rest, 1883), |(h, p)| (h, p.parse().expect("port")));
    AsyncClient::new(MqttOptions::new(client_id, host, port), 10)
}

/// Where Mosquitto is installed, or `None` (after saying so).
///
/// # Panics
/// Under `CI=true` when it is not installed.
fn mosquitto_binary() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).map(|dir| dir.join("mosquitto")).collect::<Vec<_>>())
        .unwrap_or_default();
    let found = on_path.into_iter().chain([PathBuf::from("/usr/sbin/mosquitto")]).find(|p| p.is_file());
    if found.is_none() {
        skip("mosquitto not on PATH; the broker-restart test needs it (apt-get install mosquitto)");
    }
    found
}

/// A private Mosquitto on a free loopback port, killed on drop.
struct Broker {
    binary: PathBuf,
    dir: PathBuf,
    port: u16,
    child: Option<Child>,
}

impl Broker {
    /// On a free port; one another process took before the broker bound it is given up for a
    /// fresh one (issue 35).
    async fn start(binary: &Path) -> Self {
        let dir = std::env::temp_dir().join(format!("skua-mosquitto-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        for _ in 0..5 {
            let port = ports::free_port().expect("a free port");
            let conf = format!(
                "listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\nlog_dest file {}\n",
                dir.join("mosquitto.log").display()
            );
            std::fs::write(dir.join("mosquitto.conf"), conf).expect("write mosquitto.conf");
            let mut broker = Self { binary: binary.to_owned(), dir: dir.clone(), port, child: None };
            match broker.spawn() {
                Listening::Yes => return broker,
                Listening::Taken | Listening::Exited => broker.kill(),
                Listening::TimedOut => panic!("the private mosquitto did not listen within 10 s"),
            }
        }
        panic!("the private mosquitto found no free port in 5 tries");
    }

    fn url(&self) -> String {
        format!("mqtt://127.0.0.1:{}", self.port)
    }

    /// Starts the broker and waits until it listens on its port (it, not another process).
    fn spawn(&mut self) -> Listening {
        let child = Command::new(&self.binary)
            .arg("-c")
            .arg(self.dir.join("mosquitto.conf"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start mosquitto");
        let pid = child.id();
        self.child = Some(child);
        ports::wait_listening(pid, self.port, Duration::from_secs(10))
    }

    /// Starts the broker again, on its port.
    async fn restart(&mut self) {
        let got = self.spawn();
        assert_eq!(got, Listening::Yes, "the private mosquitto on port {} after a restart", self.port);
    }

    /// SIGKILL, and reap it.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
