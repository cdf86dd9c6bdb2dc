//! Opening connections through any [`Wire`]: TCP (with `TCP_NODELAY`, optionally from a chosen
//! loopback source address), the WebSocket upgrade, the login and the subscription, each
//! waiting for the server's acknowledgement with a deadline.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use bytes::Bytes;
use tokio::net::TcpSocket;

use crate::target::Target;
use crate::wire::{Decoder, Event, Role, Wire};
use crate::ws::WsClient;

/// How long a login or subscription may take before the connection counts as failed.
pub const SETUP_TIMEOUT: Duration = Duration::from_secs(15);

/// A connection that has logged in (and possibly subscribed), with its decoder.
pub struct Conn {
    /// The socket.
    pub ws: WsClient,
    /// Its protocol decoder (it may hold a partial packet).
    pub decoder: Box<dyn Decoder>,
}

/// Socket options of bench connections.
#[derive(Debug, Clone, Copy)]
pub struct ConnOptions {
    /// Bytes read per call: large for busy subscribers, small for idle crowds.
    pub read_buffer: usize,
    /// Loopback address to connect from (spreads ephemeral ports for churn).
    pub source: Option<IpAddr>,
}

impl Default for ConnOptions {
    fn default() -> Self {
        Self { read_buffer: 64 * 1024, source: None }
    }
}

/// TCP connect plus WebSocket upgrade.
///
/// # Errors
/// Connect or upgrade failures.
pub async fn open(target: &Target, wire: &dyn Wire, opts: ConnOptions) -> anyhow::Result<WsClient> {
    let sock = match target.addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    if let Some(ip) = opts.source {
        sock.bind(SocketAddr::new(ip, 0)).context("while binding the source address")?;
    }
    let stream = sock.connect(target.addr).await.context("while connecting")?;
    stream.set_nodelay(true)?;
    WsClient::handshake(stream, &target.addr.to_string(), &target.path, wire.subprotocol(), opts.read_buffer)
        .await
        .context("while upgrading to WebSocket")
}

/// What [`wait_for`] waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    Ready,
    Subscribed,
}

/// Sends `frames`, then reads until the decoder reports `want` (answering replies on the way).
async fn exchange(conn: &mut Conn, frames: Vec<Bytes>, want: Want) -> anyhow::Result<()> {
    for f in &frames {
        conn.ws.queue(f);
    }
    conn.ws.flush().await?;
    tokio::time::timeout(SETUP_TIMEOUT, wait_for(conn, want))
        .await
        .map_err(|_| anyhow!("no {want:?} acknowledgement within {SETUP_TIMEOUT:?}"))?
}

async fn wait_for(conn: &mut Conn, want: Want) -> anyhow::Result<()> {
    let Conn { ws, decoder } = conn;
    loop {
        if ws.fill().await? == 0 {
            bail!("the server closed the connection during setup");
        }
        let (mut hit, mut refused, mut replies, mut bad) = (false, None, Vec::new(), None);
        let closed = ws.drain(&mut |frame| {
            let r = decoder.feed(frame, &mut |e| match e {
                Event::Ready if want == Want::Ready => hit = true,
                Event::Subscribed if want == Want::Subscribed => hit = true,
                Event::Rejected(why) => refused = Some(why.to_owned()),
                Event::Reply(r) => replies.push(r),
                _ => {}
            });
            if let Err(e) = r {
                bad.get_or_insert(e);
            }
        })?;
        if let Some(e) = bad {
            return Err(e);
        }
        for r in &replies {
            ws.queue(r);
        }
        ws.flush().await?;
        if let Some(why) = refused {
            bail!("refused during setup: {why}");
        }
        if hit {
            return Ok(());
        }
        if let Some(c) = closed {
            bail!("{c} (during setup)");
        }
    }
}

/// Opens a connection and logs it in as `role`.
///
/// # Errors
/// Connect, upgrade or login failures (including a refused login).
pub async fn login(target: &Target, wire: &dyn Wire, role: Role, opts: ConnOptions) -> anyhow::Result<Conn> {
    let ws = open(target, wire, opts).await?;
    let mut conn = Conn { ws, decoder: wire.decoder() };
    let hello = wire.hello(role);
    if !hello.is_empty() {
        exchange(&mut conn, hello, Want::Ready).await.context("while logging in")?;
    }
    Ok(conn)
}

/// Subscribes a logged-in connection to `topic` and waits until it is in effect.
///
/// # Errors
/// The subscription is refused or never acknowledged.
pub async fn subscribe(conn: &mut Conn, wire: &dyn Wire, topic: &str) -> anyhow::Result<()> {
    exchange(conn, wire.subscribe(topic), Want::Subscribed)
        .await
        .with_context(|| format!("while subscribing to {topic}"))
}

/// A logged-in subscriber on `topic`.
///
/// # Errors
/// As [`login`] and [`subscribe`].
pub async fn subscriber(target: &Target, wire: &dyn Wire, topic: &str, opts: ConnOptions) -> anyhow::Result<Conn> {
    let mut c = login(target, wire, Role::Subscriber, opts).await?;
    subscribe(&mut c, wire, topic).await?;
    Ok(c)
}
