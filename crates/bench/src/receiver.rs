//! The always-ok trigger receiver of `--triggers`: a small HTTP server on loopback, inside the
//! bench process, that answers every request `200 {}` and counts what arrived, so a run can
//! point the bench app's trigger webhook (N44, docs/webhooks.md) at it and report triggers
//! received next to publishes. It does no work per request beyond counting, so the server's
//! side of a trigger is what the run measures.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, ensure};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::IntoResponse;

/// What the receiver has seen so far.
#[derive(Debug, Default)]
pub struct Counts {
    requests: AtomicU64,
    signed: AtomicU64,
    bytes: AtomicU64,
}

impl Counts {
    /// Requests answered.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Acquire)
    }

    /// Requests that carried an `X-NoLag-Signature` header.
    pub fn signed(&self) -> u64 {
        self.signed.load(Ordering::Acquire)
    }

    /// Body bytes received.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Acquire)
    }
}

/// A running receiver; stopped when dropped.
pub struct Receiver {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its counters.
    pub counts: Arc<Counts>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    /// Listens on `addr` (loopback only; port 0 picks a free one) and serves until dropped.
    ///
    /// # Errors
    /// `addr` is not loopback or cannot be bound.
    pub async fn start(addr: SocketAddr) -> anyhow::Result<Self> {
        ensure!(addr.ip().is_loopback(), "the trigger receiver listens on loopback only, not {}", addr.ip());
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("while binding the trigger receiver to {addr}"))?;
        let addr = listener.local_addr()?;
        let counts = Arc::new(Counts::default());
        let app = Router::new().fallback(hit).with_state(Arc::clone(&counts));
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                eprintln!("skua-bench: the trigger receiver stopped: {e}");
            }
        });
        Ok(Self { addr, counts, task })
    }

    /// The URL to configure as the trigger webhook.
    pub fn url(&self) -> String {
        url(self.addr)
    }
}

/// The trigger webhook URL of a receiver listening on `addr`.
pub fn url(addr: SocketAddr) -> String {
    format!("http://{addr}/trigger")
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn hit(State(counts): State<Arc<Counts>>, headers: HeaderMap, body: Bytes) -> impl IntoResponse {
    counts.bytes.fetch_add(body.len() as u64, Ordering::Relaxed);
    if headers.contains_key("x-nolag-signature") {
        counts.signed.fetch_add(1, Ordering::Relaxed);
    }
    // Counted last, with release ordering: a reader that sees the request sees its bytes too.
    counts.requests.fetch_add(1, Ordering::Release);
    ([(header::CONTENT_TYPE, "application/json")], "{}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn answers_ok_and_counts() {
        let r = Receiver::start("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let mut s = tokio::net::TcpStream::connect(r.addr).await.unwrap();
        let body = "{\"a\":1}";
        let req = format!(
            "POST /trigger HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-NoLag-Signature: sha256=00\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        tokio::io::AsyncWriteExt::write_all(&mut s, req.as_bytes()).await.unwrap();
        let mut answer = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut s, &mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("{}"), "{answer}");
        assert_eq!((r.counts.requests(), r.counts.signed(), r.counts.bytes()), (1, 1, body.len() as u64));
        assert!(Receiver::start("10.0.0.1:0".parse().unwrap()).await.is_err());
    }
}
