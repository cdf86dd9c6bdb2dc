//! A TCP proxy a test can cut and restore, to make a real service unreachable for a while
//! (no mocks: the service keeps running, only this node's path to it breaks), or stall, to make
//! it unresponsive while the connections stay open.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Forwards connections from [`Self::addr`] to a target until dropped.
#[derive(Debug)]
pub struct TcpProxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    cut: Arc<AtomicBool>,
    generation: watch::Sender<u64>,
    stalled: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl TcpProxy {
    /// Starts forwarding `127.0.0.1:0` to `target`.
    ///
    /// # Panics
    /// When no port can be bound.
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy address");
        let cut = Arc::new(AtomicBool::new(false));
        let (generation, _) = watch::channel(0u64);
        let (stalled, _) = watch::channel(false);
        let (flag, gen_tx, stall_tx) = (cut.clone(), generation.clone(), stalled.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((inbound, _)) = listener.accept().await else { return };
                if flag.load(Ordering::SeqCst) {
                    drop(inbound);
                    continue;
                }
                let mut cut_signal = gen_tx.subscribe();
                let (up, down) = (stall_tx.subscribe(), stall_tx.subscribe());
                tokio::spawn(async move {
                    let Ok(outbound) = TcpStream::connect(target).await else { return };
                    let (in_read, in_write) = inbound.into_split();
                    let (out_read, out_write) = outbound.into_split();
                    tokio::select! {
                        () = forward(in_read, out_write, up) => {}
                        () = forward(out_read, in_write, down) => {}
                        _ = cut_signal.changed() => {}
                    }
                });
            }
        });
        Self { addr, cut, generation, stalled, task }
    }

    /// Stops passing bytes either way while keeping every connection open (the service looks
    /// alive but never answers), until [`Self::resume`].
    pub fn stall(&self) {
        self.stalled.send_replace(true);
    }

    /// Passes bytes again after [`Self::stall`] (what was held back is delivered).
    pub fn resume(&self) {
        self.stalled.send_replace(false);
    }

    /// Drops every forwarded connection and refuses new ones until [`Self::restore`].
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        self.generation.send_modify(|g| *g += 1);
    }

    /// Forwards again.
    pub fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

/// Copies `from` to `to`, holding each chunk back while `stalled` is set; returns when either
/// side ends.
async fn forward(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    mut stalled: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if stalled.wait_for(|s| !*s).await.is_err() || to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.cut();
        self.task.abort();
    }
}
