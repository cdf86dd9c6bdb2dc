//! The workload: publishers, durable group members that ack, plain subscribers, presence
//! clients, the end-of-run presence observer, and the trigger webhook receiver. Every client
//! reconnects to the next node when its connection dies or goes silent, and records what it
//! did and saw in the [`History`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use futures_util::{SinkExt, StreamExt};
use rmpv::Value;
use tokio::net::TcpStream;
use tokio::time::{Instant, sleep, timeout};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::history::{Ev, History, Kind, MsgKey, Outcome, decode_key, encode_key};
use crate::rng::Rng;

/// The logged topic, as clients address it.
pub const LOGGED_TOPIC: &str = "c/r/log";
/// The plain topic.
pub const PLAIN_TOPIC: &str = "c/r/plain";
/// The room presence clients announce in.
pub const ROOM: &str = "r";
/// How long a connection may stay silent (heartbeats are sent every second) before the client
/// gives up on it and reconnects elsewhere.
const SILENCE: Duration = Duration::from_secs(4);
/// How long a publish waits for `published` or an error.
const PUBLISH_WAIT: Duration = Duration::from_secs(5);

/// What every client shares.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// The recorder.
    pub hist: History,
    /// The nodes' URLs.
    pub urls: Arc<Vec<String>>,
    /// Publishers stop.
    pub stop_publishing: Arc<AtomicBool>,
    /// Consumers and presence clients stop.
    pub stop_all: Arc<AtomicBool>,
    /// Presence clients stop changing their state (they still reconnect and re-announce).
    pub freeze_presence: Arc<AtomicBool>,
    /// Connection ids.
    pub conns: Arc<AtomicU64>,
}

impl Ctx {
    fn url(&self, base: usize, attempt: usize) -> (usize, &str) {
        let i = (base + attempt) % self.urls.len();
        (i, &self.urls[i])
    }
}

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

enum In {
    Frame(Value),
    Heartbeat,
}

fn get<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    match v {
        Value::Map(m) => m.iter().find(|(k, _)| k.as_str() == Some(key)).map(|(_, v)| v),
        _ => None,
    }
}

fn get_str<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    get(v, key).and_then(Value::as_str)
}

fn map(pairs: Vec<(&str, Value)>) -> Value {
    Value::Map(pairs.into_iter().map(|(k, v)| (Value::from(k), v)).collect())
}

async fn send(ws: &mut Ws, v: &Value) -> Result<()> {
    let mut buf = Vec::new();
    rmpv::encode::write_value(&mut buf, v)?;
    timeout(Duration::from_secs(3), ws.send(Message::Binary(buf.into()))).await.context("send timed out")??;
    Ok(())
}

async fn heartbeat(ws: &mut Ws) -> Result<()> {
    timeout(Duration::from_secs(3), ws.send(Message::Binary(Vec::new().into()))).await.context("send timed out")??;
    Ok(())
}

/// The next inbound frame within `wait` (`Ok(None)` on timeout); an error when the connection
/// ended.
async fn recv(ws: &mut Ws, wait: Duration) -> Result<Option<In>> {
    let deadline = Instant::now() + wait;
    loop {
        let msg = match tokio::time::timeout_at(deadline, ws.next()).await {
            Err(_) => return Ok(None),
            Ok(None) => bail!("connection ended"),
            Ok(Some(Err(e))) => bail!("connection failed: {e}"),
            Ok(Some(Ok(m))) => m,
        };
        match msg {
            Message::Binary(b) if b.is_empty() => return Ok(Some(In::Heartbeat)),
            Message::Binary(b) => return Ok(Some(In::Frame(rmpv::decode::read_value(&mut &b[..])?))),
            Message::Close(c) => {
                bail!("closed {}", c.map(|c| format!("{} {}", u16::from(c.code), c.reason)).unwrap_or_default())
            }
            _ => {}
        }
    }
}

/// Connects and authenticates (protocol version 2).
async fn open(url: &str, token: &str, client_id: Option<&str>) -> Result<Ws> {
    let (mut ws, _) =
        timeout(Duration::from_secs(3), tokio_tungstenite::connect_async(url)).await.context("connect timed out")??;
    let mut auth =
        vec![("type", Value::from("auth")), ("token", Value::from(token)), ("protocolVersion", Value::from(2))];
    if let Some(id) = client_id {
        auth.push(("clientId", Value::from(id)));
    }
    send(&mut ws, &map(auth)).await?;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match recv(&mut ws, left).await? {
            None => bail!("no auth reply"),
            Some(In::Frame(f)) if get_str(&f, "type") == Some("auth") => {
                if get(&f, "success").and_then(Value::as_bool) == Some(true) {
                    return Ok(ws);
                }
                bail!("auth refused: {f}");
            }
            Some(_) => {}
        }
    }
}

async fn close(mut ws: Ws) {
    let _ = timeout(Duration::from_millis(500), ws.close(None)).await;
}

/// A publisher: alternates logged and plain publishes, one at a time, each with a `msgRef`.
pub async fn publisher(ctx: Ctx, index: usize, interval: Duration) {
    let token = format!("tok-p{index}");
    let mut seq = 0u64;
    let mut attempt = 0usize;
    while !ctx.stop_publishing.load(Ordering::Relaxed) {
        let (_, url) = ctx.url(index, attempt);
        attempt += 1;
        let conn = ctx.conns.fetch_add(1, Ordering::Relaxed);
        let Ok(mut ws) = open(url, &token, None).await else {
            sleep(Duration::from_millis(200)).await;
            continue;
        };
        while !ctx.stop_publishing.load(Ordering::Relaxed) {
            seq += 1;
            let kind = if seq.is_multiple_of(2) { Kind::Logged } else { Kind::Plain };
            let key: MsgKey = (kind, index, seq);
            let raw = encode_key(key);
            let topic = if kind == Kind::Logged { LOGGED_TOPIC } else { PLAIN_TOPIC };
            ctx.hist.push(Ev::Sent { key, conn, t: ctx.hist.now() });
            let frame = map(vec![
                ("type", Value::from("publish")),
                ("topic", Value::from(topic)),
                ("data", Value::from(raw.as_str())),
                ("msgRef", Value::from(raw.as_str())),
            ]);
            let outcome = match send(&mut ws, &frame).await {
                Err(_) => Outcome::Unknown,
                Ok(()) => wait_publish(&mut ws, &raw).await,
            };
            let alive = outcome != Outcome::Unknown;
            ctx.hist.push(Ev::Outcome { key, outcome, t: ctx.hist.now() });
            if !alive {
                break;
            }
            sleep(interval).await;
        }
        close(ws).await;
    }
}

async fn wait_publish(ws: &mut Ws, raw: &str) -> Outcome {
    let deadline = Instant::now() + PUBLISH_WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match recv(ws, left).await {
            Ok(Some(In::Frame(f))) if get_str(&f, "msgRef") == Some(raw) => {
                return match get_str(&f, "type") {
                    Some("published") => Outcome::Acked,
                    _ => Outcome::Refused(get_str(&f, "error").unwrap_or("?").to_owned()),
                };
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => return Outcome::Unknown,
        }
    }
}

/// What a consumer connection is.
#[derive(Debug, Clone)]
pub struct ConsumerSpec {
    /// Name in the history: `g0/m1` (group 0, member 1) or `s0`.
    pub name: String,
    /// Its static token.
    pub token: String,
    /// `clientId` (persistent sessions).
    pub client_id: Option<String>,
    /// The topic.
    pub topic: &'static str,
    /// The load-balancing group, for group members.
    pub group: Option<String>,
    /// Whether it acks (`msgId` messages).
    pub ack: bool,
    /// Mean seconds between deliberate drops (a member leaving with an unacked message); 0 = never.
    pub churn_secs: u64,
    /// Its node rotation offset.
    pub base: usize,
}

/// A consumer: subscribes, records every delivery, acks when told, reconnects elsewhere.
pub async fn consumer(ctx: Ctx, spec: ConsumerSpec, mut rng: Rng) {
    let mut attempt = 0usize;
    while !ctx.stop_all.load(Ordering::Relaxed) {
        let (node, url) = ctx.url(spec.base, attempt);
        attempt += 1;
        let conn = ctx.conns.fetch_add(1, Ordering::Relaxed);
        let Ok(mut ws) = open(url, &spec.token, spec.client_id.as_deref()).await else {
            sleep(Duration::from_millis(200)).await;
            continue;
        };
        let why = match consume(&ctx, &spec, &mut ws, node, conn, &mut rng).await {
            Ok(why) | Err(why) => why,
        };
        if why != "never subscribed" {
            ctx.hist.push(Ev::Disconnected { consumer: spec.name.clone(), conn, why, t: ctx.hist.now() });
        }
        close(ws).await;
        if !ctx.stop_all.load(Ordering::Relaxed) {
            sleep(Duration::from_millis(100)).await;
        }
    }
}

async fn consume(
    ctx: &Ctx,
    spec: &ConsumerSpec,
    ws: &mut Ws,
    node: usize,
    conn: u64,
    rng: &mut Rng,
) -> Result<String, String> {
    let mut sub = vec![("type", Value::from("subscribe")), ("topic", Value::from(spec.topic))];
    if let Some(g) = &spec.group {
        sub.push(("loadBalance", Value::from(true)));
        sub.push(("loadBalanceGroup", Value::from(g.as_str())));
    }
    send(ws, &map(sub)).await.map_err(|_| "never subscribed".to_owned())?;
    let mut subscribed = false;
    let mut last_in = Instant::now();
    let mut last_out = Instant::now();
    let drop_at =
        (spec.churn_secs > 0).then(|| Instant::now() + Duration::from_millis(rng.below(spec.churn_secs * 2000)));
    loop {
        if ctx.stop_all.load(Ordering::Relaxed) {
            return Ok("stopped".into());
        }
        // A heartbeat every second whatever arrives: a subscriber that only receives (a plain
        // one sends no acks) would otherwise be closed by the server's idle timeout.
        if last_out.elapsed() >= Duration::from_secs(1) {
            heartbeat(ws).await.map_err(|e| if subscribed { e.to_string() } else { "never subscribed".into() })?;
            last_out = Instant::now();
        }
        let ev = recv(ws, Duration::from_secs(1)).await;
        let frame = match ev {
            Err(e) if subscribed => return Err(e.to_string()),
            Err(_) => return Err("never subscribed".into()),
            Ok(None) => {
                if last_in.elapsed() > SILENCE {
                    return Err(if subscribed { "silent".into() } else { "never subscribed".into() });
                }
                continue;
            }
            Ok(Some(In::Heartbeat)) => {
                last_in = Instant::now();
                continue;
            }
            Ok(Some(In::Frame(f))) => f,
        };
        last_in = Instant::now();
        match get_str(&frame, "type") {
            Some("subscribed") if get_str(&frame, "topic") == Some(spec.topic) => {
                subscribed = true;
                ctx.hist.push(Ev::Subscribed { consumer: spec.name.clone(), conn, node, t: ctx.hist.now() });
            }
            Some("error") if !subscribed => return Err("never subscribed".into()),
            Some("message") => {
                let raw = get(&frame, "data")
                    .map(|d| d.as_str().map_or_else(|| d.to_string(), str::to_owned))
                    .unwrap_or_default();
                let msg_id = get_str(&frame, "msgId").map(str::to_owned);
                let replay = get(&frame, "isReplay").and_then(Value::as_bool) == Some(true);
                ctx.hist.push(Ev::Delivered {
                    consumer: spec.name.clone(),
                    conn,
                    key: decode_key(&raw),
                    raw,
                    msg_id: msg_id.clone(),
                    replay,
                    t: ctx.hist.now(),
                });
                if let Some(at) = drop_at
                    && Instant::now() >= at
                    && msg_id.is_some()
                {
                    // Leave with this message unacked: it must come back as a redelivery.
                    return Ok("churn (left with an unacked message)".into());
                }
                if spec.ack
                    && let Some(id) = msg_id
                {
                    send(ws, &map(vec![("type", Value::from("ack")), ("msgId", Value::from(id))]))
                        .await
                        .map_err(|e| e.to_string())?;
                }
            }
            _ => {}
        }
    }
}

/// A presence client: joins, updates, leaves and disconnects at seeded moments until frozen;
/// after a lost connection it reconnects elsewhere and announces again if it meant to be in.
pub async fn presence_client(ctx: Ctx, index: usize, mut rng: Rng) {
    let actor = format!("q{index}");
    let token = format!("tok-q{index}");
    let mut joined = false;
    let mut attempt = 0usize;
    let mut n = 0u64;
    while !ctx.stop_all.load(Ordering::Relaxed) {
        let (node, url) = ctx.url(index, attempt);
        attempt += 1;
        let Ok(mut ws) = open(url, &token, None).await else {
            sleep(Duration::from_millis(200)).await;
            continue;
        };
        let announce = |n: u64| {
            map(vec![
                ("type", Value::from("presence")),
                ("roomId", Value::from(ROOM)),
                ("data", map(vec![("n", Value::from(n))])),
            ])
        };
        if joined && send(&mut ws, &announce(n)).await.is_err() {
            continue;
        }
        let mut next_change = Instant::now() + Duration::from_millis(500 + rng.below(3000));
        let mut last_in = Instant::now();
        let reason: &str = loop {
            if ctx.stop_all.load(Ordering::Relaxed) {
                break "stopped";
            }
            if !ctx.freeze_presence.load(Ordering::Relaxed) && Instant::now() >= next_change {
                next_change = Instant::now() + Duration::from_millis(500 + rng.below(3000));
                match rng.below(10) {
                    0..=4 => {
                        n += 1;
                        if send(&mut ws, &announce(n)).await.is_err() {
                            break "send failed";
                        }
                        if !joined {
                            joined = true;
                            let (how, t) = ("announce", ctx.hist.now());
                            ctx.hist.push(Ev::PresenceIntent { actor: actor.clone(), joined, how, node, t });
                        }
                    }
                    5..=7 => {
                        let leave = map(vec![
                            ("type", Value::from("presence")),
                            ("roomId", Value::from(ROOM)),
                            ("data", Value::Nil),
                        ]);
                        if send(&mut ws, &leave).await.is_err() {
                            break "send failed";
                        }
                        if joined {
                            joined = false;
                            let (how, t) = ("leave", ctx.hist.now());
                            ctx.hist.push(Ev::PresenceIntent { actor: actor.clone(), joined, how, node, t });
                        }
                    }
                    _ => {
                        if joined {
                            joined = false;
                            let (how, t) = ("disconnect", ctx.hist.now());
                            ctx.hist.push(Ev::PresenceIntent { actor: actor.clone(), joined, how, node, t });
                        }
                        break "disconnect";
                    }
                }
            }
            match recv(&mut ws, Duration::from_millis(500)).await {
                Err(_) => break "connection lost",
                Ok(None) => {
                    if last_in.elapsed() > SILENCE {
                        break "silent";
                    }
                    if heartbeat(&mut ws).await.is_err() {
                        break "send failed";
                    }
                }
                Ok(Some(_)) => last_in = Instant::now(),
            }
        };
        let _ = reason;
        close(ws).await;
    }
}

/// Asks one node for the room's presence (`getPresence`) as the observer actor.
pub async fn presence_snapshot(url: &str) -> Result<Vec<String>> {
    let mut ws = open(url, "tok-obs", None).await?;
    send(&mut ws, &map(vec![("type", Value::from("getPresence")), ("roomId", Value::from(ROOM))])).await?;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match recv(&mut ws, left).await? {
            None => bail!("no presenceList"),
            Some(In::Frame(f)) if get_str(&f, "type") == Some("presenceList") => {
                let mut actors: Vec<String> = match get(&f, "data") {
                    Some(Value::Array(a)) => {
                        a.iter().filter_map(|e| get_str(e, "actorTokenId").map(str::to_owned)).collect()
                    }
                    _ => Vec::new(),
                };
                actors.sort();
                close(ws).await;
                return Ok(actors);
            }
            Some(In::Frame(f)) if get_str(&f, "type") == Some("error") => bail!("getPresence refused: {f}"),
            Some(_) => {}
        }
    }
}

/// Starts the trigger receiver on a free port of `host`; returns its URL.
pub async fn webhook_receiver(hist: History, host: std::net::Ipv4Addr) -> Result<String> {
    let listener = tokio::net::TcpListener::bind((host, 0)).await?;
    let addr = listener.local_addr()?;
    let app = axum::Router::new().fallback(move |body: axum::body::Bytes| {
        let hist = hist.clone();
        async move {
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            let raw =
                v.get("data").map(|d| d.as_str().map_or_else(|| d.to_string(), str::to_owned)).unwrap_or_default();
            let delivery_id = v.get("deliveryId").and_then(|d| d.as_str()).unwrap_or_default().to_owned();
            hist.push(Ev::Trigger { key: decode_key(&raw), raw, delivery_id, t: hist.now() });
            ([(axum::http::header::CONTENT_TYPE, "application/json")], "{}")
        }
    });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(format!("http://{addr}/trigger"))
}
