//! A connection's outbound side: a queue bounded by messages and bytes, and a close request.
//!
//! Producers (the hub's dispatcher, the session) never wait: `push` either queues the frame or,
//! when either bound would be exceeded, marks the connection a slow consumer, which closes it
//! with 4008 (N28). The writer task drains the queue into the socket.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use bytes::Bytes;
use skua_core::ConnId;
use skua_protocol::codes::{close, reason};
use tokio::sync::{Notify, mpsc};

use crate::metrics::Metrics;

/// How a connection is being closed: WebSocket close code and reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CloseRequest {
    /// Close code.
    pub code: u16,
    /// Close reason.
    pub reason: &'static str,
}

impl CloseRequest {
    /// 4008 `slow_consumer`.
    pub const SLOW_CONSUMER: Self = Self { code: close::SLOW_CONSUMER, reason: reason::SLOW_CONSUMER };
    /// 1012 `server_restart`.
    pub const SERVER_RESTART: Self = Self { code: close::SERVER_RESTART, reason: reason::SERVER_RESTART };
    /// 4000 `idle_timeout`.
    pub const IDLE_TIMEOUT: Self = Self { code: close::IDLE_TIMEOUT, reason: reason::IDLE_TIMEOUT };
    /// 4003 `token_expired`.
    pub const TOKEN_EXPIRED: Self = Self { code: close::TOKEN_EXPIRED, reason: reason::TOKEN_EXPIRED };
    /// 1009 `message_too_big`.
    pub const TOO_BIG: Self = Self { code: close::MESSAGE_TOO_BIG, reason: reason::MESSAGE_TOO_BIG };
    /// 4009 `session_taken_over`: a newer connection claimed the clientId session.
    pub const TAKEN_OVER: Self = Self { code: close::SESSION_TAKEN_OVER, reason: reason::SESSION_TAKEN_OVER };
    /// The peer is gone or closed first: no close frame of ours is sent.
    pub const GONE: Self = Self { code: 1006, reason: "" };
}

/// The sending half of a connection, shared by the session and the hub.
#[derive(Debug)]
pub struct ConnHandle {
    /// The connection.
    pub id: ConnId,
    tx: mpsc::Sender<Bytes>,
    queued_bytes: AtomicUsize,
    max_bytes: usize,
    closing: AtomicBool,
    // std Mutex: set once, read once by the writer; never held across an await.
    close_request: Mutex<Option<CloseRequest>>,
    close_notify: Notify,
    /// Woken as frames leave the queue while someone waits in [`Self::room`].
    drained: Notify,
    room_waiters: AtomicUsize,
    max_messages: usize,
    metrics: std::sync::Arc<Metrics>,
}

/// The receiving half, owned by the writer task.
#[derive(Debug)]
pub struct Outbox {
    rx: mpsc::Receiver<Bytes>,
}

impl ConnHandle {
    /// A connection handle with a queue of at most `max_messages` frames and `max_bytes` bytes.
    pub fn new(id: ConnId, max_messages: usize, max_bytes: usize, metrics: std::sync::Arc<Metrics>) -> (Self, Outbox) {
        let (tx, rx) = mpsc::channel(max_messages.max(1));
        let handle = Self {
            id,
            tx,
            queued_bytes: AtomicUsize::new(0),
            max_bytes,
            closing: AtomicBool::new(false),
            close_request: Mutex::new(None),
            close_notify: Notify::new(),
            drained: Notify::new(),
            room_waiters: AtomicUsize::new(0),
            max_messages: max_messages.max(1),
            metrics,
        };
        (handle, Outbox { rx })
    }

    /// Queues one encoded frame. Returns `false` when the frame was not queued: the connection
    /// is closing, or this push overflowed the queue (which starts the 4008 close).
    pub fn push(&self, frame: Bytes) -> bool {
        if self.closing.load(Ordering::Relaxed) {
            return false;
        }
        let len = frame.len();
        let before = self.queued_bytes.fetch_add(len, Ordering::AcqRel);
        if before + len > self.max_bytes && before > 0 {
            self.queued_bytes.fetch_sub(len, Ordering::AcqRel);
            self.overflow();
            return false;
        }
        let ty = crate::metrics::frame_type_index(&frame);
        match self.tx.try_send(frame) {
            Ok(()) => {
                self.metrics.frames_out.fetch_add(1, Ordering::Relaxed);
                self.metrics.frames_out_by_type.inc_index(ty);
                true
            }
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.queued_bytes.fetch_sub(len, Ordering::AcqRel);
                self.overflow();
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.queued_bytes.fetch_sub(len, Ordering::AcqRel);
                false
            }
        }
    }

    fn overflow(&self) {
        if self.request_close(CloseRequest::SLOW_CONSUMER) {
            self.metrics.slow_consumer_closes.fetch_add(1, Ordering::Relaxed);
            tracing::info!(conn = %self.id, "Outbound queue overflowed; closing as slow consumer.");
        }
    }

    /// Asks the writer to close the socket with `req`. The first request wins; returns whether
    /// this was it.
    pub fn request_close(&self, req: CloseRequest) -> bool {
        let mut slot = self.close_request.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if slot.is_some() {
            return false;
        }
        *slot = Some(req);
        self.closing.store(true, Ordering::Release);
        drop(slot);
        // Every waiter registered itself before checking `closing` (see `closed`).
        self.close_notify.notify_waiters();
        true
    }

    /// The close that was requested, if any.
    pub fn close_requested(&self) -> Option<CloseRequest> {
        *self.close_request.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether a close was requested.
    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    /// Waits until a close is requested.
    ///
    /// # Cancel safety
    /// Cancel safe; the request stays readable through [`Self::close_requested`].
    pub async fn closed(&self) {
        // Registered before the check, so a close requested in between still wakes this
        // waiter; the reader, the writer and durable delivery all wait here at once.
        let notified = self.close_notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.is_closing() {
            return;
        }
        notified.await;
    }

    /// Counts the connection's close in the `closes` metric, by reason (`peer_gone` when the
    /// client closed or vanished first).
    pub fn count_close(&self, req: CloseRequest) {
        self.metrics.closes.inc(if req == CloseRequest::GONE { "peer_gone" } else { req.reason });
    }

    /// Frames currently queued.
    pub fn queued_frames(&self) -> usize {
        self.max_messages.saturating_sub(self.tx.capacity())
    }

    /// Bytes currently queued.
    pub fn queued_bytes(&self) -> usize {
        self.queued_bytes.load(Ordering::Acquire)
    }

    fn popped(&self, len: usize) {
        self.queued_bytes.fetch_sub(len, Ordering::AcqRel);
        if self.room_waiters.load(Ordering::Acquire) > 0 {
            self.drained.notify_waiters();
        }
    }

    fn has_room(&self) -> bool {
        self.tx.capacity() * 2 >= self.max_messages && self.queued_bytes() * 2 <= self.max_bytes
    }

    /// Waits until the queue is at most half full (by frames and by bytes), or the connection
    /// is closing: producers that can wait (durable delivery) use it to never overflow.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn room(&self) {
        if self.has_room() || self.is_closing() {
            return;
        }
        self.room_waiters.fetch_add(1, Ordering::AcqRel);
        loop {
            let drained = self.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if self.has_room() || self.is_closing() {
                break;
            }
            tokio::select! {
                () = drained => {}
                () = self.closed() => break,
            }
        }
        self.room_waiters.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Outbox {
    /// Waits for the next frame; `None` once every handle is gone.
    ///
    /// # Cancel safety
    /// Cancel safe (as `mpsc::Receiver::recv`).
    pub async fn recv(&mut self, handle: &ConnHandle) -> Option<Bytes> {
        let f = self.rx.recv().await?;
        handle.popped(f.len());
        Some(f)
    }

    /// The next frame if one is queued.
    pub fn try_recv(&mut self, handle: &ConnHandle) -> Option<Bytes> {
        let f = self.rx.try_recv().ok()?;
        handle.popped(f.len());
        Some(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflow_by_count_and_by_bytes_requests_slow_consumer_close() {
        let m = std::sync::Arc::new(Metrics::default());
        let (h, _rx) = ConnHandle::new(ConnId(1), 2, 1000, m.clone());
        assert!(h.push(Bytes::from_static(b"a")));
        assert!(h.push(Bytes::from_static(b"b")));
        assert!(!h.push(Bytes::from_static(b"c")));
        assert_eq!(h.close_requested(), Some(CloseRequest::SLOW_CONSUMER));
        assert!(!h.push(Bytes::from_static(b"d")), "closing connections take nothing");
        assert_eq!(m.slow_consumer_closes.load(Ordering::Relaxed), 1);

        let (h, _rx) = ConnHandle::new(ConnId(2), 100, 10, m.clone());
        assert!(h.push(Bytes::from(vec![0; 8])));
        assert!(!h.push(Bytes::from(vec![0; 8])));
        assert_eq!(h.close_requested(), Some(CloseRequest::SLOW_CONSUMER));
    }

    #[test]
    fn one_frame_larger_than_the_byte_budget_still_goes_to_an_empty_queue() {
        let (h, mut rx) = ConnHandle::new(ConnId(1), 4, 10, std::sync::Arc::new(Metrics::default()));
        assert!(h.push(Bytes::from(vec![0; 50])));
        assert_eq!(rx.try_recv(&h).map(|b| b.len()), Some(50));
        assert_eq!(h.queued_bytes(), 0);
    }
}
