//! A door's WebSocket as a byte stream: binary messages in, bytes out as binary messages.
//! What MQTT over WebSocket needs (MQTT 5.0 §6, 3.1.1 §6): packets travel in binary messages,
//! with no alignment between packets and messages, so the door reads the messages' bytes as
//! it reads a TCP socket's.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{Sink, Stream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tungstenite::Message;

use crate::close_code::WebSocket;

/// The reading half: the bytes of the binary messages, in order. A close (or the socket's end)
/// is the end of the stream; a text message is an error (MQTT-6.0.0-1: the connection closes).
pub struct WsReader {
    stream: SplitStream<WebSocket>,
    /// What is left of the last binary message.
    pending: Bytes,
    closed: bool,
}

/// The writing half: each write is one binary message. Flush to put it on the socket;
/// shutting down sends the WebSocket close.
pub struct WsWriter {
    sink: SplitSink<WebSocket, Message>,
}

/// Both halves of one upgraded door connection.
pub struct WsIo {
    /// Bytes from the client.
    pub reader: WsReader,
    /// Bytes to the client.
    pub writer: WsWriter,
}

impl std::fmt::Debug for WsIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WsIo").finish_non_exhaustive()
    }
}

impl WsIo {
    pub(crate) fn new(socket: WebSocket) -> Self {
        use futures_util::StreamExt;
        let (sink, stream) = socket.split();
        Self { reader: WsReader { stream, pending: Bytes::new(), closed: false }, writer: WsWriter { sink } }
    }
}

fn io_error(e: tungstenite::Error) -> io::Error {
    match e {
        tungstenite::Error::Io(e) => e,
        e => io::Error::other(e),
    }
}

impl AsyncRead for WsReader {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if !this.pending.is_empty() {
                let n = this.pending.len().min(buf.remaining());
                buf.put_slice(&this.pending.split_to(n));
                return Poll::Ready(Ok(()));
            }
            if this.closed || buf.remaining() == 0 {
                return Poll::Ready(Ok(()));
            }
            match ready!(Pin::new(&mut this.stream).poll_next(cx)) {
                Some(Ok(Message::Binary(b))) => this.pending = b,
                // Answered by tungstenite itself (pongs go out with the next read or write).
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
                Some(Ok(Message::Text(_))) => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "a text message on an MQTT WebSocket (binary messages only)",
                    )));
                }
                Some(Ok(Message::Close(_))) | None => {
                    this.closed = true;
                    return Poll::Ready(Ok(()));
                }
                Some(Err(e)) => return Poll::Ready(Err(io_error(e))),
            }
        }
    }
}

impl AsyncWrite for WsWriter {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let sink = Pin::new(&mut self.sink);
        ready!(Sink::<Message>::poll_ready(sink, cx)).map_err(io_error)?;
        Pin::new(&mut self.sink).start_send(Message::Binary(Bytes::copy_from_slice(buf))).map_err(io_error)?;
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.sink).poll_flush(cx).map_err(io_error)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.sink).poll_close(cx).map_err(io_error)
    }
}
