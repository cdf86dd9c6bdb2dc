//! A minimal WebSocket client (RFC 6455) for the load generator.
//!
//! Why not tokio-tungstenite on this side: profiled at 1 M deliveries/s on the 2-core machine,
//! the tungstenite client spent ~1 µs of CPU per received message (a zeroed read buffer per
//! read, a `Message` and a wake-up per frame, a `select!` per frame), so the load generator
//! needed more CPU than the servers it measured and its own queueing dominated the latencies.
//! This client reads whatever the socket has in one call into a reused buffer and parses every
//! complete frame in place: one wake-up per read, no allocation per message. Servers are
//! unchanged: they all see ordinary, masked client frames.
//!
//! Scope: binary and text data frames (fragmented ones are reassembled), ping (answered),
//! pong (ignored) and close. No extensions, no TLS.

use std::io;

use anyhow::{bail, ensure};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest frame or reassembled message accepted from a server.
pub const MAX_MESSAGE: usize = 16 << 20;

/// A server's close frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closed {
    /// The close code, when the frame had one.
    pub code: Option<u16>,
    /// The reason text.
    pub reason: String,
}

impl std::fmt::Display for Closed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.code {
            Some(c) => write!(f, "closed by the server: {c} {}", self.reason),
            None => write!(f, "closed by the server"),
        }
    }
}

/// One client connection.
#[derive(Debug)]
pub struct WsClient {
    stream: TcpStream,
    rbuf: Vec<u8>,
    start: usize,
    chunk: usize,
    frag: Vec<u8>,
    in_fragment: bool,
    wbuf: Vec<u8>,
    mask: [u8; 4],
    /// Bytes arrived with the upgrade response and have not been offered to `drain` yet.
    unparsed: bool,
}

fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let n =
            (u32::from(c[0]) << 16) | (u32::from(*c.get(1).unwrap_or(&0)) << 8) | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A cheap per-connection random source for handshake keys and masks (not cryptographic:
/// masking exists for proxies, and there are none on loopback).
fn random_u64() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static STATE: AtomicU64 = AtomicU64::new(0x9e37_79b9_7f4a_7c15);
    let t =
        u64::try_from(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()))
            .unwrap_or(0);
    let mut x = STATE.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed) ^ t;
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

impl WsClient {
    /// Performs the HTTP/1.1 upgrade on `stream`. `chunk` is how much is read per call.
    ///
    /// # Errors
    /// I/O errors, or a response other than `101 Switching Protocols`.
    pub async fn handshake(
        mut stream: TcpStream,
        host: &str,
        path: &str,
        subprotocol: Option<&str>,
        chunk: usize,
    ) -> anyhow::Result<Self> {
        let mut key = [0u8; 16];
        key[..8].copy_from_slice(&random_u64().to_le_bytes());
        key[8..].copy_from_slice(&random_u64().to_le_bytes());
        let mut req = format!(
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: {}\r\nSec-WebSocket-Version: 13\r\n",
            base64(&key)
        );
        if let Some(p) = subprotocol {
            req.push_str(&format!("Sec-WebSocket-Protocol: {p}\r\n"));
        }
        req.push_str("\r\n");
        stream.write_all(req.as_bytes()).await?;
        let mut rbuf = Vec::with_capacity(chunk.max(1024));
        let end = loop {
            if let Some(i) = find(&rbuf, b"\r\n\r\n") {
                break i + 4;
            }
            ensure!(rbuf.len() < 16 * 1024, "upgrade response headers too long");
            rbuf.reserve(1024);
            if stream.read_buf(&mut rbuf).await? == 0 {
                bail!("the server closed the connection during the upgrade");
            }
        };
        let rbuf_len = rbuf.len();
        let status = std::str::from_utf8(&rbuf[..end]).unwrap_or("").lines().next().unwrap_or("").to_owned();
        ensure!(status.split(' ').nth(1) == Some("101"), "upgrade refused: {status}");
        Ok(Self {
            stream,
            rbuf,
            start: end,
            chunk: chunk.max(512),
            frag: Vec::new(),
            in_fragment: false,
            wbuf: Vec::with_capacity(256),
            mask: random_u64().to_le_bytes()[..4].try_into().unwrap_or([1, 2, 3, 4]),
            unparsed: end < rbuf_len,
        })
    }

    fn queue_frame(&mut self, opcode: u8, payload: &[u8]) {
        let n = payload.len();
        self.wbuf.push(0x80 | opcode);
        if n < 126 {
            self.wbuf.push(0x80 | n as u8);
        } else if let Ok(n) = u16::try_from(n) {
            self.wbuf.push(0x80 | 126);
            self.wbuf.extend_from_slice(&n.to_be_bytes());
        } else {
            self.wbuf.push(0x80 | 127);
            self.wbuf.extend_from_slice(&(n as u64).to_be_bytes());
        }
        self.wbuf.extend_from_slice(&self.mask);
        let m = self.mask;
        self.wbuf.extend(payload.iter().enumerate().map(|(i, b)| b ^ m[i & 3]));
    }

    /// Appends one binary frame to the write buffer (sent by [`Self::flush`]).
    pub fn queue(&mut self, payload: &[u8]) {
        self.queue_frame(2, payload);
    }

    /// Whether frames are waiting to be written.
    pub fn has_pending(&self) -> bool {
        !self.wbuf.is_empty()
    }

    /// Writes everything queued.
    ///
    /// # Errors
    /// I/O errors.
    pub async fn flush(&mut self) -> io::Result<()> {
        if !self.wbuf.is_empty() {
            self.stream.write_all(&self.wbuf).await?;
            self.wbuf.clear();
        }
        Ok(())
    }

    /// Queues and writes one binary frame.
    ///
    /// # Errors
    /// I/O errors.
    pub async fn send(&mut self, payload: &[u8]) -> io::Result<()> {
        self.queue(payload);
        self.flush().await
    }

    /// Waits until the socket has bytes and reads what it has; `Ok(0)` at end of stream.
    /// Returns at once when bytes that came with the upgrade response were not drained yet.
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is lost when the future is dropped before it completes.
    pub async fn fill(&mut self) -> io::Result<usize> {
        if std::mem::take(&mut self.unparsed) {
            return Ok(self.rbuf.len() - self.start);
        }
        if self.start == self.rbuf.len() {
            self.rbuf.clear();
            self.start = 0;
        } else if self.start > self.rbuf.capacity() / 2 {
            self.rbuf.drain(..self.start);
            self.start = 0;
        }
        if self.rbuf.capacity() - self.rbuf.len() < self.chunk / 2 {
            self.rbuf.reserve(self.chunk);
        }
        self.stream.read_buf(&mut self.rbuf).await
    }

    /// Hands every complete data message in the buffer to `on_data`, answers pings (queued:
    /// call [`Self::flush`]), and returns the close frame if one arrived.
    ///
    /// # Errors
    /// A protocol violation or an oversized message.
    pub fn drain(&mut self, on_data: &mut dyn FnMut(&[u8])) -> anyhow::Result<Option<Closed>> {
        loop {
            let buf = &mut self.rbuf[self.start..];
            if buf.len() < 2 {
                return Ok(None);
            }
            let (fin, opcode, masked, len7) = (buf[0] & 0x80 != 0, buf[0] & 0x0f, buf[1] & 0x80 != 0, buf[1] & 0x7f);
            let (mut hdr, len) = match len7 {
                126 if buf.len() >= 4 => (4, usize::from(u16::from_be_bytes([buf[2], buf[3]]))),
                127 if buf.len() >= 10 => {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(&buf[2..10]);
                    (10, usize::try_from(u64::from_be_bytes(b)).unwrap_or(usize::MAX))
                }
                126 | 127 => return Ok(None),
                n => (2, usize::from(n)),
            };
            ensure!(len <= MAX_MESSAGE, "frame of {len} bytes is larger than {MAX_MESSAGE}");
            let key = if masked {
                let Some(k) = buf.get(hdr..hdr + 4) else { return Ok(None) };
                let k = [k[0], k[1], k[2], k[3]];
                hdr += 4;
                Some(k)
            } else {
                None
            };
            if buf.len() < hdr + len {
                return Ok(None);
            }
            let payload = &mut buf[hdr..hdr + len];
            if let Some(k) = key {
                payload.iter_mut().enumerate().for_each(|(i, b)| *b ^= k[i & 3]);
            }
            self.start += hdr + len;
            match opcode {
                1 | 2 if fin && !self.in_fragment => on_data(payload),
                1 | 2 if !self.in_fragment => {
                    self.frag.clear();
                    self.frag.extend_from_slice(payload);
                    self.in_fragment = true;
                }
                0 if self.in_fragment => {
                    ensure!(
                        self.frag.len() + payload.len() <= MAX_MESSAGE,
                        "fragmented message larger than {MAX_MESSAGE}"
                    );
                    self.frag.extend_from_slice(payload);
                    if fin {
                        self.in_fragment = false;
                        on_data(&self.frag);
                    }
                }
                8 => {
                    let code = (payload.len() >= 2).then(|| u16::from_be_bytes([payload[0], payload[1]]));
                    let reason = String::from_utf8_lossy(payload.get(2..).unwrap_or_default()).into_owned();
                    return Ok(Some(Closed { code, reason }));
                }
                9 => {
                    let ping = payload.to_vec();
                    self.queue_frame(10, &ping);
                }
                10 => {}
                other => bail!("unexpected WebSocket opcode {other} (fragment state {})", self.in_fragment),
            }
        }
    }

    /// Closes politely: a close frame (1000), then waits (bounded) for the server to end the
    /// TCP connection, so the server side keeps the TIME_WAIT state, not our ephemeral port.
    pub async fn close(mut self) {
        self.queue_frame(8, &1000u16.to_be_bytes());
        if self.flush().await.is_err() {
            return;
        }
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), async {
            let mut sink = [0u8; 4096];
            while matches!(self.stream.read(&mut sink).await, Ok(n) if n > 0) {}
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_known_vectors() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"the sample nonce"), "dGhlIHNhbXBsZSBub25jZQ==");
    }

    #[tokio::test]
    async fn frames_round_trip_through_a_real_socket() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut req = vec![0u8; 4096];
            let n = s.read(&mut req).await.unwrap();
            assert!(std::str::from_utf8(&req[..n]).unwrap().contains("Sec-WebSocket-Protocol: mqtt"));
            // Upgrade, then: a split (fragmented) text message, a ping, a 300-byte binary, close.
            let mut out = b"HTTP/1.1 101 Switching Protocols\r\n\r\n".to_vec();
            out.extend_from_slice(&[0x01, 2, b'h', b'e', 0x80, 1, b'y']);
            out.extend_from_slice(&[0x89, 1, b'p']);
            out.extend_from_slice(&[0x82, 126, 1, 44]);
            out.extend_from_slice(&[7u8; 300]);
            out.extend_from_slice(&[0x88, 2, 0x0f, 0xa0]);
            s.write_all(&out).await.unwrap();
            let mut got = vec![0u8; 64];
            let n = s.read(&mut got).await.unwrap();
            got.truncate(n);
            got
        });
        let stream = TcpStream::connect(addr).await.unwrap();
        let mut ws = WsClient::handshake(stream, &addr.to_string(), "/ws", Some("mqtt"), 4096).await.unwrap();
        let mut msgs: Vec<Vec<u8>> = Vec::new();
        let read_all = async {
            loop {
                assert!(ws.fill().await.unwrap() > 0);
                if let Some(c) = ws.drain(&mut |m| msgs.push(m.to_vec())).unwrap() {
                    break c;
                }
            }
        };
        let closed =
            tokio::time::timeout(std::time::Duration::from_secs(5), read_all).await.expect("no close frame within 5 s");
        assert_eq!(msgs, vec![b"hey".to_vec(), vec![7u8; 300]]);
        assert_eq!(closed.code, Some(4000));
        ws.flush().await.unwrap(); // the pong
        let pong =
            tokio::time::timeout(std::time::Duration::from_secs(5), server).await.expect("server stuck").unwrap();
        assert_eq!(pong[0], 0x8a);
        assert_eq!(pong[1], 0x81);
        assert_eq!(pong[6] ^ pong[2], b'p');
    }
}
