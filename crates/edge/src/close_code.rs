//! Close codes RFC 6455 forbids, caught before tungstenite sees them (issue 33, item 11).
//!
//! tungstenite answers a client close frame carrying such a code (1005, 999, …) by itself, 1002
//! with the reason `Protocol violation`, in the same call that hands Skua the frame; no setting
//! changes it. [`CloseCodeCheck`] sits between the upgraded socket and tungstenite and follows
//! the client's frame headers as the bytes pass (no copy, no allocation). When a close frame's
//! code is one tungstenite would refuse, the read fails with [`BadCloseCode`] instead of
//! delivering that code: tungstenite never sees the frame, its state stays open, and the reader
//! closes the connection 1002 `protocol_error` like every other framing violation.
//!
//! Everything else passes untouched, including close frames tungstenite rejects for another
//! reason (not final, reserved bits, unmasked, a payload of 1 or over 125 bytes): it fails
//! those itself, and they get 1002 `protocol_error` through the same path.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tungstenite::protocol::frame::coding::CloseCode;

/// The read error for a client close frame carrying a code RFC 6455 forbids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadCloseCode(pub u16);

impl std::fmt::Display for BadCloseCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "close frame with the forbidden code {}", self.0)
    }
}

impl std::error::Error for BadCloseCode {}

impl BadCloseCode {
    /// Whether `e` is the read error [`CloseCodeCheck`] returns.
    pub fn is(e: &io::Error) -> bool {
        e.get_ref().is_some_and(|inner| inner.is::<BadCloseCode>())
    }
}

/// An upgraded socket whose reads fail with [`BadCloseCode`] at a close frame carrying a code
/// tungstenite would refuse; writes go straight through.
#[derive(Debug)]
pub struct CloseCodeCheck<S> {
    inner: S,
    scan: Scan,
    /// A bad close code was found: every later read fails.
    failed: Option<BadCloseCode>,
}

impl<S> CloseCodeCheck<S> {
    /// Wraps a socket whose next byte starts a client frame.
    pub fn new(inner: S) -> Self {
        CloseCodeCheck { inner, scan: Scan::default(), failed: None }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for CloseCodeCheck<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if let Some(bad) = this.failed {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, bad)));
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        let Some((at, bad)) = this.scan.feed(&buf.filled()[before..]) else {
            return Poll::Ready(Ok(()));
        };
        // The bytes before the code's last byte go through (tungstenite handles the frames
        // before the close); the frame itself can never be completed.
        this.failed = Some(bad);
        buf.set_filled(before + at);
        if at == 0 {
            // An empty read would mean the end of the stream.
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, bad)));
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for CloseCodeCheck<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The longest frame header: 2 bytes, an 8-byte extended length, a 4-byte mask key.
const MAX_HEADER: usize = 14;

/// Where the client's byte stream is, frame-wise (RFC 6455 5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scan {
    /// In a frame header: its first `len` bytes are in `head`.
    Head { head: [u8; MAX_HEADER], len: u8 },
    /// In the payload of a close frame tungstenite would otherwise accept, before its code
    /// is complete: `got` bytes of it, unmasked, in `code`; `rest` payload bytes follow it.
    Code { mask: [u8; 4], code: [u8; 2], got: u8, rest: u8 },
    /// In a payload, `left` bytes of it still to pass.
    Payload { left: u64 },
}

impl Default for Scan {
    fn default() -> Self {
        Scan::Head { head: [0; MAX_HEADER], len: 0 }
    }
}

impl Scan {
    /// Follows `bytes`, the next ones of the stream; at a forbidden close code, the offset in
    /// `bytes` of its last byte, and the code. The scan stops there: nothing follows it.
    fn feed(&mut self, bytes: &[u8]) -> Option<(usize, BadCloseCode)> {
        let mut i = 0;
        while i < bytes.len() {
            match self {
                Scan::Payload { left } => {
                    let n = usize::try_from(*left).unwrap_or(usize::MAX).min(bytes.len() - i);
                    i += n;
                    *left -= n as u64;
                    if *left == 0 {
                        *self = Scan::default();
                    }
                }
                Scan::Head { head, len } => {
                    head[usize::from(*len)] = bytes[i];
                    *len += 1;
                    i += 1;
                    if let Some(next) = after_header(&head[..usize::from(*len)]) {
                        *self = next;
                    }
                }
                Scan::Code { mask, code, got, rest } => {
                    let k = usize::from(*got);
                    code[k] = bytes[i] ^ mask[k];
                    *got += 1;
                    if *got == 2 {
                        let value = u16::from_be_bytes(*code);
                        if !CloseCode::from(value).is_allowed() {
                            return Some((i, BadCloseCode(value)));
                        }
                        *self = if *rest == 0 { Scan::default() } else { Scan::Payload { left: u64::from(*rest) } };
                    }
                    i += 1;
                }
            }
        }
        None
    }
}

/// The state after a frame header, once `head` holds all of it; `None` while it is incomplete.
fn after_header(head: &[u8]) -> Option<Scan> {
    let [first, second, ..] = *head else { return None };
    let masked = second & 0x80 != 0;
    let ext = match second & 0x7f {
        126 => 2,
        127 => 8,
        _ => 0,
    };
    let full = 2 + ext + if masked { 4 } else { 0 };
    if head.len() < full {
        return None;
    }
    let payload = match ext {
        2 => u64::from(u16::from_be_bytes([head[2], head[3]])),
        8 => u64::from_be_bytes(head[2..10].try_into().unwrap_or_default()),
        _ => u64::from(second & 0x7f),
    };
    // A final close frame with no reserved bits, masked, with a code and at most 125 bytes:
    // the only close frames tungstenite hands on rather than failing.
    if first == 0x88 && masked && (2..=125).contains(&payload) {
        let mask = [head[full - 4], head[full - 3], head[full - 2], head[full - 1]];
        // At most 123: the payload fits a u8.
        let rest = u8::try_from(payload - 2).unwrap_or(u8::MAX);
        return Some(Scan::Code { mask, code: [0; 2], got: 0, rest });
    }
    Some(if payload == 0 { Scan::default() } else { Scan::Payload { left: payload } })
}

/// An upgraded connection, as `/ws` and the doors served over WebSocket read it: tungstenite
/// over the socket, with forbidden close codes caught before tungstenite answers them itself.
pub(crate) type WebSocket =
    tokio_tungstenite::WebSocketStream<CloseCodeCheck<hyper_util::rt::TokioIo<hyper::upgrade::Upgraded>>>;

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A masked client frame with the given first header byte, mask key and payload.
    fn frame(first: u8, key: [u8; 4], payload: &[u8]) -> Vec<u8> {
        let mut out = vec![first];
        match payload.len() {
            n if n < 126 => out.push(0x80 | n as u8),
            n if n <= 0xffff => {
                out.push(0x80 | 126);
                out.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                out.push(0x80 | 127);
                out.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        out.extend_from_slice(&key);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
        out
    }

    fn close(code: u16, reason: &[u8]) -> Vec<u8> {
        frame(0x88, [0x37, 0xfa, 0x21, 0x3d], &[&code.to_be_bytes()[..], reason].concat())
    }

    /// Feeds `bytes` in pieces of `step`: the offset in `bytes` of the failing byte, if any.
    fn scan_in_steps(bytes: &[u8], step: usize) -> Option<(usize, BadCloseCode)> {
        let mut scan = Scan::default();
        for (n, piece) in bytes.chunks(step).enumerate() {
            if let Some((at, bad)) = scan.feed(piece) {
                return Some((n * step + at, bad));
            }
        }
        None
    }

    #[test]
    fn forbidden_codes_are_found_at_the_codes_last_byte_in_any_split() {
        let before = [
            frame(0x82, [1, 2, 3, 4], b"hello"),
            frame(0x82, [9, 9, 9, 9], &[0x88; 300]),
            frame(0x82, [5, 6, 7, 8], &vec![0x88; 70_000]),
            frame(0x89, [0, 0, 0, 0], b"ping"),
            frame(0x82, [0, 0, 0, 0], b""),
        ]
        .concat();
        for code in [0u16, 1, 999, 1004, 1005, 1006, 1014, 1015, 1016, 2999, 5000, 65535] {
            let bytes = [&before[..], &close(code, b"bye")[..], b"trailing bytes"].concat();
            // Header (2) and mask key (4), then the code's two bytes.
            let last = before.len() + 7;
            for step in [1, 2, 3, 7, 100, 1 << 20] {
                assert_eq!(scan_in_steps(&bytes, step), Some((last, BadCloseCode(code))), "{code} in steps of {step}");
            }
        }
    }

    #[test]
    fn valid_codes_and_other_frames_pass() {
        for code in [1000u16, 1001, 1002, 1003, 1007, 1011, 1012, 1013, 3000, 3999, 4000, 4999] {
            let bytes = [frame(0x82, [1, 2, 3, 4], b"x"), close(code, b"bye"), close(code, b"")].concat();
            for step in [1, 3, 1 << 20] {
                assert_eq!(scan_in_steps(&bytes, step), None, "{code}");
            }
        }
        // Close frames tungstenite fails by itself: not final, reserved bit, a 1-byte payload,
        // unmasked (no key: its payload is read as is), longer than 125 bytes.
        let unmasked = [&[0x88u8, 0x02][..], &5000u16.to_be_bytes()[..]].concat();
        for bytes in [
            frame(0x08, [0; 4], &5000u16.to_be_bytes()),
            frame(0xc8, [0; 4], &5000u16.to_be_bytes()),
            frame(0x88, [0; 4], &[0x13]),
            unmasked,
            frame(0x88, [0; 4], &[&5000u16.to_be_bytes()[..], &[b'x'; 200][..]].concat()),
        ] {
            assert_eq!(scan_in_steps(&bytes, 1), None, "{bytes:02x?}");
        }
    }

    #[tokio::test]
    async fn reads_deliver_the_bytes_before_the_bad_code_then_fail() {
        let (mut client, server) = tokio::io::duplex(64);
        let mut check = CloseCodeCheck::new(server);
        let first = frame(0x82, [1, 2, 3, 4], b"before");
        let bytes = [&first[..], &close(1005, b"")[..]].concat();
        client.write_all(&bytes).await.expect("write");
        let mut got = Vec::new();
        let err = loop {
            let mut buf = [0u8; 5];
            match check.read(&mut buf).await {
                Ok(0) => panic!("end of stream instead of an error"),
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) => break e,
            }
        };
        assert!(BadCloseCode::is(&err), "{err:?}");
        assert_eq!(got, bytes[..first.len() + 7], "everything before the code's last byte");
        // And again on every later read.
        let mut buf = [0u8; 8];
        assert!(BadCloseCode::is(&check.read(&mut buf).await.expect_err("still failed")));
        // Writes still go through: the close frame can be sent.
        check.write_all(b"\x88\x02\x03\xea").await.expect("write after the failure");
        let mut echo = [0u8; 4];
        client.read_exact(&mut echo).await.expect("read");
        assert_eq!(&echo, b"\x88\x02\x03\xea");
    }
}
