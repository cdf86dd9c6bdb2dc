//! Socket reads in large chunks for a reader whose own buffer is small.
//!
//! tungstenite keeps its read buffer for the whole life of a WebSocket and never reads more than
//! that buffer's configured size at once, so the size is a trade: every idle connection holds it,
//! and a large frame takes one read per buffer-full. [`SpillReader`] takes that trade apart:
//! tungstenite gets a small buffer ([`crate::ws`]), and a read smaller than [`CHUNK`] is served
//! from one socket read of up to [`CHUNK`] bytes into a stack buffer; what does not fit the
//! caller's buffer is kept in a heap *spill*, handed out by the next reads and freed as soon as it
//! is empty. An idle connection therefore holds no spill, and a large frame still costs one
//! system call per [`CHUNK`] bytes.

use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Bytes one socket read asks for on behalf of a small reader; reads of at least this many
/// go to the socket directly.
pub(crate) const CHUNK: usize = 16 * 1024;

/// A socket whose small reads are served from one large read (see the module docs).
#[derive(Debug)]
pub(crate) struct SpillReader<I> {
    io: I,
    /// Bytes read from the socket and not yet handed out, from `pos` on; empty (and without an
    /// allocation) whenever everything read was handed out.
    spill: Vec<u8>,
    pos: usize,
}

impl<I> SpillReader<I> {
    /// Wraps `io`.
    pub(crate) fn new(io: I) -> Self {
        Self { io, spill: Vec::new(), pos: 0 }
    }

    /// Bytes kept in the spill's allocation (0 once it was drained).
    #[cfg(test)]
    fn spill_capacity(&self) -> usize {
        self.spill.capacity()
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for SpillReader<I> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        if this.pos < this.spill.len() {
            let n = buf.remaining().min(this.spill.len() - this.pos);
            buf.put_slice(&this.spill[this.pos..this.pos + n]);
            this.pos += n;
            if this.pos == this.spill.len() {
                this.spill = Vec::new();
                this.pos = 0;
            }
            return Poll::Ready(Ok(()));
        }
        if buf.remaining() >= CHUNK {
            return Pin::new(&mut this.io).poll_read(cx, buf);
        }
        let mut stack = [MaybeUninit::<u8>::uninit(); CHUNK];
        let mut chunk = ReadBuf::uninit(&mut stack);
        ready!(Pin::new(&mut this.io).poll_read(cx, &mut chunk))?;
        let got = chunk.filled();
        let n = buf.remaining().min(got.len());
        buf.put_slice(&got[..n]);
        if n < got.len() {
            this.spill = got[n..].to_vec();
            this.pos = 0;
        }
        Poll::Ready(Ok(()))
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for SpillReader<I> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i % 251) as u8).collect()
    }

    /// Reads everything with reads of at most `size` bytes, checking after each read that a
    /// drained spill holds no memory.
    async fn read_all<I: AsyncRead + Unpin>(r: &mut SpillReader<I>, size: usize) -> Vec<u8> {
        let mut out = Vec::new();
        let mut buf = vec![0; size];
        loop {
            let n = r.read(&mut buf).await.unwrap();
            if n == 0 {
                return out;
            }
            out.extend_from_slice(&buf[..n]);
            if r.pos == r.spill.len() {
                assert_eq!(r.spill_capacity(), 0, "an emptied spill is freed at once");
            }
        }
    }

    #[tokio::test]
    async fn small_reads_get_every_byte_in_order_and_an_idle_reader_holds_no_spill() {
        let data = pattern(1 << 20);
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let sent = data.clone();
        let writer = tokio::spawn(async move {
            client.write_all(&sent).await.unwrap();
            client
        });
        let mut r = SpillReader::new(server);
        let mut got = Vec::new();
        let mut buf = vec![0; 1024];
        let mut spilled = false;
        while got.len() < data.len() {
            let n = r.read(&mut buf).await.unwrap();
            assert!(n > 0 && n <= 1024);
            got.extend_from_slice(&buf[..n]);
            spilled |= r.spill_capacity() > 0;
        }
        assert_eq!(got, data);
        assert!(spilled, "socket reads were larger than the caller's buffer");
        // Everything was handed out: the connection now waits holding no spill.
        assert_eq!(r.spill_capacity(), 0);
        let client = writer.await.unwrap();
        drop(client);
        assert_eq!(read_all(&mut r, 1024).await, Vec::<u8>::new());
    }

    #[tokio::test]
    async fn tiny_and_large_reads_mix_without_losing_bytes() {
        let data = pattern(300_000);
        let (mut client, server) = tokio::io::duplex(1 << 20);
        client.write_all(&data).await.unwrap();
        drop(client);
        let mut r = SpillReader::new(server);
        let mut got = vec![0; 14];
        r.read_exact(&mut got).await.unwrap();
        // A large read takes the spill first, then reads the socket directly.
        let mut big = vec![0; 2 * CHUNK];
        let n = r.read(&mut big).await.unwrap();
        got.extend_from_slice(&big[..n]);
        got.extend(read_all(&mut r, 3).await);
        assert_eq!(got, data);
    }

    #[tokio::test]
    async fn writes_pass_through() {
        let (client, mut server) = tokio::io::duplex(1024);
        let mut w = SpillReader::new(client);
        w.write_all(b"hello").await.unwrap();
        w.flush().await.unwrap();
        w.shutdown().await.unwrap();
        let mut got = Vec::new();
        server.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"hello");
    }
}
