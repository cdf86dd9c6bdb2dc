//! `skua-bare`: the practical floor for WebSocket fan-out on Skua's stack (axum 0.8 ws, tokio).
//! No auth, no parsing beyond a topic prefix, no broker logic: a frame `[n] topic payload` is
//! forwarded as the same shared `Bytes` to every other connection subscribed to `topic`;
//! `[0] topic` subscribes (answered `[0]`); an empty frame is echoed. Each connection has a
//! bounded queue (full: the frame is dropped for that connection) and a writer task that feeds
//! up to 64 frames and flushes once — the same write batching Skua uses.
//!
//! Prints `skua-bare listening on ADDR` as its first stdout line.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use axum::Router;
use axum::extract::State;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::response::Response;
use axum::routing::any;
use axum::serve::ListenerExt;
use bytes::Bytes;
use clap::Parser;
use futures_util::{SinkExt, StreamExt};
use tokio::sync::mpsc;

/// Most frames fed to the socket before one flush (as Skua's writer).
const WRITE_BATCH: usize = 64;

#[derive(Parser)]
#[command(name = "skua-bare", about = "Broker-less WebSocket fan-out reference server (benchmark floor).")]
struct Args {
    /// Listen address (loopback).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Outbound queue per connection, frames; a full queue drops the frame for that connection.
    #[arg(long, default_value_t = 1024)]
    queue: usize,
    /// Leave Nagle's algorithm on (axum::serve's default); by default sockets get TCP_NODELAY,
    /// as NATS (Go's default) and the private Mosquitto (`set_tcp_nodelay true`) do.
    #[arg(long)]
    nagle: bool,
    /// WebSocket read buffer per connection, bytes (16 KiB was Skua's edge setting until it moved
    /// to 4 KiB; the default keeps comparisons with earlier runs valid).
    #[arg(long, default_value_t = 16 * 1024)]
    read_buffer: usize,
}

/// Subscribers per topic: (connection id, its outbound queue).
type Subs = HashMap<Bytes, Vec<(u64, mpsc::Sender<Bytes>)>>;

struct Hub {
    // std RwLock: held only to look up or edit a list, never across an await.
    subs: RwLock<Subs>,
    next_id: AtomicU64,
    queue: usize,
    read_buffer: usize,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(args.listen.ip().is_loopback(), "skua-bare listens on loopback only");
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(args.listen).await?;
        println!("skua-bare listening on {}", listener.local_addr()?);
        let hub = Arc::new(Hub {
            subs: RwLock::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            queue: args.queue.max(1),
            read_buffer: args.read_buffer.max(64),
        });
        let app = Router::new().route("/ws", any(upgrade)).with_state(hub);
        let nodelay = !args.nagle;
        let listener = listener.tap_io(move |tcp| {
            if nodelay {
                let _ = tcp.set_nodelay(true);
            }
        });
        axum::serve(listener, app).await?;
        Ok(())
    })
}

async fn upgrade(State(hub): State<Arc<Hub>>, ws: WebSocketUpgrade) -> Response {
    // The same socket limits as Skua's edge, so memory per connection compares fairly.
    ws.max_message_size(1 << 20)
        .max_frame_size(1 << 20)
        .read_buffer_size(hub.read_buffer)
        .write_buffer_size(16 * 1024)
        .max_write_buffer_size(2 << 20)
        .on_upgrade(move |socket| serve(socket, hub))
}

async fn serve(socket: WebSocket, hub: Arc<Hub>) {
    let id = hub.next_id.fetch_add(1, Ordering::Relaxed);
    let (tx, mut rx) = mpsc::channel::<Bytes>(hub.queue);
    let (mut sink, mut stream) = socket.split();
    let writer = tokio::spawn(async move {
        'outer: while let Some(first) = rx.recv().await {
            if sink.feed(Message::Binary(first)).await.is_err() {
                break;
            }
            for _ in 1..WRITE_BATCH {
                let Ok(f) = rx.try_recv() else { break };
                if sink.feed(Message::Binary(f)).await.is_err() {
                    break 'outer;
                }
            }
            if sink.flush().await.is_err() {
                break;
            }
        }
        let _ = sink.close().await;
    });
    let mut mine: Vec<Bytes> = Vec::new();
    while let Some(Ok(msg)) = stream.next().await {
        let b = match msg {
            Message::Binary(b) => b,
            Message::Close(_) => break,
            _ => continue,
        };
        match b.first().copied() {
            None => {
                let _ = tx.try_send(Bytes::new());
            }
            Some(0) => {
                let topic = b.slice(1..);
                let mut subs = hub.subs.write().unwrap_or_else(std::sync::PoisonError::into_inner);
                subs.entry(topic.clone()).or_default().push((id, tx.clone()));
                mine.push(topic);
                let _ = tx.try_send(Bytes::from_static(&[0]));
            }
            Some(n) => {
                let Some(topic) = b.get(1..1 + usize::from(n)) else { continue };
                let subs = hub.subs.read().unwrap_or_else(std::sync::PoisonError::into_inner);
                for (sid, q) in subs.get(topic).into_iter().flatten() {
                    if *sid != id {
                        let _ = q.try_send(b.clone());
                    }
                }
            }
        }
    }
    {
        let mut subs = hub.subs.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        for t in mine {
            if let Some(list) = subs.get_mut(&t) {
                list.retain(|(sid, _)| *sid != id);
                if list.is_empty() {
                    subs.remove(&t);
                }
            }
        }
    }
    drop(tx);
    let _ = writer.await;
}
