//! A connection's outbound side: a queue bounded by messages and bytes, and a close request.
//!
//! Producers (the hub's dispatcher, the session) never wait: `push` either queues the frame or,
//! when either bound would be exceeded, marks the connection a slow consumer, which closes it
//! with 4008 (N28). The writer task drains the queue into the socket.
//!
//! The queue is a `VecDeque` behind a mutex with one waker, the writer's. Producers wake the
//! writer only when it is parked on an empty queue; the writer takes everything queued in one
//! lock (swapping buffers) and gives the counts back once per written batch. A queue that has
//! never held a frame allocates nothing, and buffers grown by a burst are shrunk when it ends.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use skua_core::ConnId;
use skua_protocol::codes::{close, reason};
use skua_protocol::{ServerFrame, ServerFrameKind};
use tokio::sync::Notify;

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
    /// 1002 `protocol_error`: the client broke RFC 6455 framing.
    pub const PROTOCOL_ERROR: Self = Self { code: close::PROTOCOL_ERROR, reason: reason::PROTOCOL_ERROR };
    /// 1007 `invalid_payload`: a text frame or close reason that is not UTF-8.
    pub const INVALID_PAYLOAD: Self = Self { code: close::INVALID_PAYLOAD, reason: reason::INVALID_PAYLOAD };
    /// 4009 `session_taken_over`: a newer connection claimed the clientId session.
    pub const TAKEN_OVER: Self = Self { code: close::SESSION_TAKEN_OVER, reason: reason::SESSION_TAKEN_OVER };
    /// 1008 `too_many_auth_failures`.
    pub const TOO_MANY_AUTH_FAILURES: Self =
        Self { code: close::POLICY_VIOLATION, reason: reason::TOO_MANY_AUTH_FAILURES };
    /// 1008 `auth_timeout`.
    pub const AUTH_TIMEOUT: Self = Self { code: close::POLICY_VIOLATION, reason: reason::AUTH_TIMEOUT };
    /// 1011 `internal_error`: a connection task panicked (a defect); the client may reconnect.
    pub const INTERNAL_ERROR: Self = Self { code: close::INTERNAL_ERROR, reason: reason::INTERNAL_ERROR };
    /// The peer is gone or closed first: no close frame of ours is sent.
    pub const GONE: Self = Self { code: 1006, reason: "" };
}

/// Frames a writer keeps capacity for between bursts; larger buffers are shrunk when idle.
const IDLE_CAPACITY: usize = 16;

#[derive(Debug, Default)]
struct Queue {
    frames: VecDeque<Bytes>,
    /// Frames and bytes queued and not yet written: those in `frames` plus those the writer
    /// has taken and not yet given back with [`ConnHandle::written`].
    count: usize,
    bytes: usize,
    /// The writer, while it waits on an empty queue.
    writer: Option<Waker>,
    close_request: Option<CloseRequest>,
    /// How many times the writer took frames: a frame queued while this is `n` is written in
    /// batch `n + 1` (receipts of history frames, issue 19).
    takes: u64,
    /// The queue's bytes were given back to the node's [`OutboundBudget`] when its close was
    /// requested (they are freed with the connection): later writes do not give them again.
    budget_released: bool,
}

/// The node-wide bound on the bytes waiting in every connection's outbound queue
/// (`outbound_budget_bytes`, issue 32 item 3): each connection is bounded by
/// `outbound_queue_bytes`, but many slow consumers together could still fill the pod's memory
/// limit, and an OOM kill drops every client at once without a 1012. Past the budget,
/// [`enforce_budget`] closes the largest queues 4008 `slow_consumer` first until the rest fits.
/// Counts the queues of connections that are not closing (a closing one's bytes are freed with
/// it).
#[derive(Debug)]
pub struct OutboundBudget {
    /// Bytes allowed in all; 0: no budget (nothing is closed for it).
    limit: usize,
    queued: AtomicUsize,
    over: Notify,
    closes: std::sync::atomic::AtomicU64,
}

impl OutboundBudget {
    /// A budget of `limit` bytes (0: none).
    pub fn new(limit: usize) -> std::sync::Arc<Self> {
        std::sync::Arc::new(Self {
            limit,
            queued: AtomicUsize::new(0),
            over: Notify::new(),
            closes: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// The budget in bytes (0: none).
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes queued now in the connections that are not closing.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// Connections closed 4008 for the budget so far.
    pub fn closes(&self) -> u64 {
        self.closes.load(Ordering::Relaxed)
    }

    /// Adds `n` queued bytes; whether the total is now past the budget.
    fn add(&self, n: usize) -> bool {
        let now = self.queued.fetch_add(n, Ordering::Relaxed) + n;
        self.limit > 0 && now > self.limit
    }

    fn sub(&self, n: usize) {
        self.queued.fetch_sub(n, Ordering::Relaxed);
    }
}

/// Closes the largest outbound queues 4008 `slow_consumer` whenever the node's queued bytes pass
/// `outbound_budget_bytes`, until the rest fits; runs until `stop`. Woken by the push that went
/// past the budget, so it costs nothing below it. `handles` lists the node's connections (a
/// closure, so this module does not depend on the registry of connections that uses it).
pub async fn enforce_budget(
    budget: std::sync::Arc<OutboundBudget>,
    handles: impl Fn() -> Vec<std::sync::Arc<ConnHandle>>,
    stop: tokio_util::sync::CancellationToken,
) {
    if budget.limit == 0 {
        return;
    }
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = budget.over.notified() => {}
        }
        if budget.queued() <= budget.limit {
            continue;
        }
        let mut conns: Vec<(usize, std::sync::Arc<ConnHandle>)> =
            handles().into_iter().map(|h| (h.queued_bytes(), h)).collect();
        conns.sort_unstable_by_key(|c| std::cmp::Reverse(c.0));
        for (bytes, handle) in conns {
            if budget.queued() <= budget.limit || bytes == 0 {
                break;
            }
            if handle.overflow() {
                budget.closes.fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    conn = %handle.id,
                    queued_bytes = bytes,
                    budget = budget.limit,
                    "The node's outbound budget is exceeded; closing the largest queue as slow consumer."
                );
            }
        }
    }
}

/// The sending half of a connection, shared by the session and the hub.
#[derive(Debug)]
pub struct ConnHandle {
    /// The connection.
    pub id: ConnId,
    // std Mutex: a few field updates per operation, never held across an await.
    queue: Mutex<Queue>,
    max_messages: usize,
    max_bytes: usize,
    closing: AtomicBool,
    /// The close requested is the slow-consumer one: frames refused from then on are drops.
    slow: AtomicBool,
    close_notify: Notify,
    /// The reader loop's waker for a close request: polled on every inbound frame, so it is
    /// an atomic register rather than a `Notify` registration.
    reader: futures_util::task::AtomicWaker,
    /// Woken as frames are written while someone waits in [`Self::room`].
    drained: Notify,
    room_waiters: AtomicUsize,
    metrics: std::sync::Arc<Metrics>,
    /// The last batch the client proved it received (the payload of its latest pong).
    proven: std::sync::atomic::AtomicU64,
    /// A tracked frame was queued since the last receipt ping.
    receipt_wanted: AtomicBool,
    /// The session released its restore record (or had none): the close frame may go out
    /// (issue 36: a client reconnecting on a 1012 must find its record released).
    released: AtomicBool,
    released_notify: Notify,
    /// The node-wide budget its queued bytes count against, if any.
    budget: Option<std::sync::Arc<OutboundBudget>>,
}

impl Drop for ConnHandle {
    fn drop(&mut self) {
        let q = self.queue.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(b) = &self.budget
            && !q.budget_released
        {
            b.sub(q.bytes);
        }
    }
}

/// The receiving half, owned by the writer task: the frames it has taken from the queue.
#[derive(Debug, Default)]
pub struct Outbox {
    taken: VecDeque<Bytes>,
}

/// What [`Outbox::poll_take`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Take {
    /// Frames are in the outbox.
    Frames,
    /// A close was requested; the frames still queued stay there.
    Closing,
}

impl ConnHandle {
    /// A connection handle with a queue of at most `max_messages` frames and `max_bytes` bytes.
    pub fn new(id: ConnId, max_messages: usize, max_bytes: usize, metrics: std::sync::Arc<Metrics>) -> (Self, Outbox) {
        let handle = Self {
            id,
            queue: Mutex::new(Queue::default()),
            max_messages: max_messages.max(1),
            max_bytes,
            closing: AtomicBool::new(false),
            slow: AtomicBool::new(false),
            close_notify: Notify::new(),
            reader: futures_util::task::AtomicWaker::new(),
            drained: Notify::new(),
            room_waiters: AtomicUsize::new(0),
            metrics,
            proven: std::sync::atomic::AtomicU64::new(0),
            receipt_wanted: AtomicBool::new(false),
            released: AtomicBool::new(false),
            released_notify: Notify::new(),
            budget: None,
        };
        (handle, Outbox::default())
    }

    /// Counts this connection's queued bytes against the node-wide `budget`; before any push.
    #[must_use]
    pub fn with_budget(mut self, budget: std::sync::Arc<OutboundBudget>) -> Self {
        self.budget = Some(budget);
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Encodes `frame`, queues it and counts it (see [`Self::push`]).
    pub fn send(&self, frame: &ServerFrame<'_>) -> bool {
        self.push(frame.kind(), frame.encode())
    }

    /// Queues one encoded frame of `kind` and counts it in the `frames_out` metrics. Returns
    /// `false` when the frame was not queued: the connection is closing, or this push
    /// overflowed the queue (which starts the 4008 close).
    pub fn push(&self, kind: ServerFrameKind, frame: Bytes) -> bool {
        let queued = self.push_uncounted(frame);
        if queued {
            self.metrics.frames_out.fetch_add(1, Ordering::Relaxed);
            self.metrics.frames_out_by_type.inc(kind);
        }
        queued
    }

    /// Queues a heartbeat (an empty frame) and counts it.
    pub fn push_heartbeat(&self) -> bool {
        let queued = self.push_uncounted(Bytes::new());
        if queued {
            self.metrics.frames_out.fetch_add(1, Ordering::Relaxed);
            self.metrics.frames_out_by_type.inc_heartbeat();
        }
        queued
    }

    /// [`Self::push`] without the metrics: for the hub, which counts a whole fan-out at once.
    pub fn push_uncounted(&self, frame: Bytes) -> bool {
        self.push_batch(frame).is_some()
    }

    /// Queues a frame whose receipt matters (a history topic's message, issue 19), uncounted
    /// like [`Self::push_uncounted`]: returns the writer's take count at queueing (the frame
    /// goes out in the next batch), and asks the writer for a receipt ping after it.
    pub fn push_tracked(&self, frame: Bytes) -> Option<u64> {
        let batch = self.push_batch(frame)?;
        self.receipt_wanted.store(true, Ordering::Release);
        Some(batch)
    }

    /// Whether a receipt ping is wanted (and no longer, once asked).
    pub fn take_receipt_wanted(&self) -> bool {
        self.receipt_wanted.swap(false, Ordering::AcqRel)
    }

    /// How many batches the writer took so far.
    pub fn takes(&self) -> u64 {
        self.lock().takes
    }

    /// The client's pong carried `batch`: every frame of batches up to it was received.
    pub fn receipt(&self, batch: u64) {
        self.proven.fetch_max(batch, Ordering::AcqRel);
    }

    /// The last batch the client proved it received.
    pub fn proven(&self) -> u64 {
        self.proven.load(Ordering::Acquire)
    }

    fn push_batch(&self, frame: Bytes) -> Option<u64> {
        if self.closing.load(Ordering::Relaxed) {
            self.count_refused();
            return None;
        }
        let len = frame.len();
        let mut q = self.lock();
        if q.close_request.is_some() {
            drop(q);
            self.count_refused();
            return None;
        }
        if q.count >= self.max_messages || (q.bytes + len > self.max_bytes && q.bytes > 0) {
            drop(q);
            self.overflow();
            return None;
        }
        q.count += 1;
        q.bytes += len;
        // Under the lock, so a close requested meanwhile gives back exactly what was added.
        let over = self.budget.as_ref().is_some_and(|b| b.add(len));
        q.frames.push_back(frame);
        let batch = q.takes;
        let writer = q.writer.take();
        drop(q);
        if let Some(w) = writer {
            w.wake();
        }
        if over && let Some(b) = &self.budget {
            b.over.notify_one();
        }
        Some(batch)
    }

    /// A frame refused because the connection is closing: a drop when the close is the
    /// slow-consumer one (other closes are the connection ending, not a loss to count).
    fn count_refused(&self) {
        if self.slow.load(Ordering::Acquire) {
            self.metrics.slow_consumer_drops.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Starts the 4008 slow-consumer close (what a full queue does) for a frame that did not
    /// fit. That frame and every frame still queued or not yet written are dropped: the close
    /// is reported to the writer first (`skua_drops_total{reason="slow_consumer"}`).
    /// Returns whether this started the close.
    pub fn overflow(&self) -> bool {
        let queued = self.lock().count as u64;
        if self.request_close(CloseRequest::SLOW_CONSUMER) {
            self.slow.store(true, Ordering::Release);
            self.metrics.slow_consumer_closes.fetch_add(1, Ordering::Relaxed);
            self.metrics.slow_consumer_drops.fetch_add(queued + 1, Ordering::Relaxed);
            tracing::info!(conn = %self.id, "Outbound queue overflowed; closing as slow consumer.");
            true
        } else {
            self.count_refused();
            false
        }
    }

    /// Asks the writer to close the socket with `req`. The first request wins; returns whether
    /// this was it.
    pub fn request_close(&self, req: CloseRequest) -> bool {
        let mut q = self.lock();
        if q.close_request.is_some() {
            return false;
        }
        q.close_request = Some(req);
        if let Some(b) = &self.budget
            && !q.budget_released
        {
            q.budget_released = true;
            b.sub(q.bytes);
        }
        self.closing.store(true, Ordering::Release);
        let writer = q.writer.take();
        drop(q);
        if let Some(w) = writer {
            w.wake();
        }
        // Every waiter registered itself before checking `closing` (see `closed`).
        self.close_notify.notify_waiters();
        self.reader.wake();
        true
    }

    /// Ready once a close was requested: [`Self::closed`] for the connection's reader loop,
    /// which polls it on every inbound frame.
    pub fn poll_closed_reader(&self, cx: &mut Context<'_>) -> Poll<()> {
        self.reader.register(cx.waker());
        if self.is_closing() { Poll::Ready(()) } else { Poll::Pending }
    }

    /// The session has released (committed) what a reconnect claims, its restore record, or
    /// holds none: the writer may send the close frame now.
    pub fn mark_released(&self) {
        self.released.store(true, Ordering::Release);
        self.released_notify.notify_waiters();
    }

    /// Waits until [`Self::mark_released`].
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn released(&self) {
        let notified = self.released_notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.released.load(Ordering::Acquire) {
            return;
        }
        notified.await;
    }

    /// The close that was requested, if any.
    pub fn close_requested(&self) -> Option<CloseRequest> {
        self.lock().close_request
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

    /// Frames queued and not yet written.
    pub fn queued_frames(&self) -> usize {
        self.lock().count
    }

    /// Bytes queued and not yet written.
    pub fn queued_bytes(&self) -> usize {
        self.lock().bytes
    }

    /// The writer wrote `frames` frames of `bytes` bytes that it had taken.
    pub fn written(&self, frames: usize, bytes: usize) {
        {
            let mut q = self.lock();
            q.count = q.count.saturating_sub(frames);
            let freed = q.bytes.min(bytes);
            q.bytes -= freed;
            if let Some(b) = &self.budget
                && !q.budget_released
            {
                b.sub(freed);
            }
        }
        if self.room_waiters.load(Ordering::Acquire) > 0 {
            self.drained.notify_waiters();
        }
    }

    /// Whether the queue is at most half full (by frames and by bytes).
    pub fn has_room(&self) -> bool {
        let q = self.lock();
        q.count * 2 <= self.max_messages && q.bytes * 2 <= self.max_bytes
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
    /// Moves every queued frame into the outbox, or waits (registering the writer's waker)
    /// while the queue is empty. A requested close is reported first.
    pub fn poll_take(&mut self, handle: &ConnHandle, cx: &mut Context<'_>) -> Poll<Take> {
        let mut q = handle.lock();
        if q.close_request.is_some() {
            return Poll::Ready(Take::Closing);
        }
        if self.take_locked(&mut q) {
            return Poll::Ready(Take::Frames);
        }
        if !q.writer.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            q.writer = Some(cx.waker().clone());
        }
        Poll::Pending
    }

    /// Waits for frames (true) or a close request (false).
    ///
    /// # Cancel safety
    /// Cancel safe: frames taken stay in the outbox.
    pub async fn take(&mut self, handle: &ConnHandle) -> bool {
        std::future::poll_fn(|cx| self.poll_take(handle, cx)).await == Take::Frames
    }

    /// Moves what is queued into the outbox without waiting; false when nothing was queued.
    pub fn try_take(&mut self, handle: &ConnHandle) -> bool {
        self.take_locked(&mut handle.lock())
    }

    fn take_locked(&mut self, q: &mut Queue) -> bool {
        if q.frames.is_empty() {
            return false;
        }
        q.takes += 1;
        if self.taken.is_empty() {
            // One swap instead of a pop per frame; the emptied buffer goes back to producers.
            std::mem::swap(&mut self.taken, &mut q.frames);
        } else {
            self.taken.extend(q.frames.drain(..));
        }
        true
    }

    /// The next taken frame.
    pub fn pop(&mut self) -> Option<Bytes> {
        self.taken.pop_front()
    }

    /// Frames taken and not yet popped.
    pub fn len(&self) -> usize {
        self.taken.len()
    }

    /// Whether frames are taken and not yet popped.
    pub fn is_empty(&self) -> bool {
        self.taken.is_empty()
    }

    /// Gives back the memory a burst grew this buffer to; called when the writer goes idle.
    pub fn shrink(&mut self) {
        if self.taken.is_empty() && self.taken.capacity() > IDLE_CAPACITY {
            self.taken = VecDeque::new();
        }
    }

    /// The next frame, taking from the queue when the outbox is empty; for tests and for the
    /// final drain before a close.
    pub fn try_recv(&mut self, handle: &ConnHandle) -> Option<Bytes> {
        if self.taken.is_empty() {
            self.try_take(handle);
        }
        let f = self.taken.pop_front()?;
        handle.written(1, f.len());
        Some(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSG: ServerFrameKind = ServerFrameKind::Message;

    /// The node's budget counts what is queued and gives it back exactly once: as frames are
    /// written, when the close is requested (the rest is freed with the connection), or when
    /// the handle goes.
    #[test]
    fn the_outbound_budget_counts_queued_bytes_and_gives_them_back_once() {
        let m = std::sync::Arc::new(Metrics::default());
        let budget = OutboundBudget::new(10);
        let (a, mut out) = ConnHandle::new(ConnId(1), 100, 1000, m.clone());
        let a = a.with_budget(budget.clone());
        let (b, _rx) = ConnHandle::new(ConnId(2), 100, 1000, m);
        let b = b.with_budget(budget.clone());
        assert!(a.push(MSG, Bytes::from_static(b"12345")));
        assert!(b.push(MSG, Bytes::from_static(b"1234")));
        assert_eq!(budget.queued(), 9);
        assert!(!budget.add(0), "at 9 of 10 bytes the budget is not passed");
        assert!(out.try_take(&a));
        a.written(1, 5);
        assert_eq!(budget.queued(), 4, "written bytes are given back");
        assert!(b.push(MSG, Bytes::from_static(b"1234567")));
        assert_eq!(budget.queued(), 11);
        assert!(b.overflow());
        assert_eq!(budget.queued(), 0, "a closing connection's bytes are given back at once");
        b.written(1, 4);
        drop(b);
        assert!(a.push(MSG, Bytes::from_static(b"12")));
        drop(out);
        drop(a);
        assert_eq!(budget.queued(), 0, "nothing is given back twice, nothing is kept");
    }

    #[test]
    fn overflow_by_count_and_by_bytes_requests_slow_consumer_close() {
        let m = std::sync::Arc::new(Metrics::default());
        let (h, _rx) = ConnHandle::new(ConnId(1), 2, 1000, m.clone());
        assert!(h.push(MSG, Bytes::from_static(b"a")));
        assert!(h.push(MSG, Bytes::from_static(b"b")));
        assert!(!h.push(MSG, Bytes::from_static(b"c")));
        assert_eq!(h.close_requested(), Some(CloseRequest::SLOW_CONSUMER));
        assert!(!h.push(MSG, Bytes::from_static(b"d")), "closing connections take nothing");
        assert_eq!(m.slow_consumer_closes.load(Ordering::Relaxed), 1);
        // a and b (queued, never sent to a slow consumer), c (did not fit), d (refused after).
        assert_eq!(m.slow_consumer_drops.load(Ordering::Relaxed), 4, "drops count frames, not connections");
        let (other, _rx) = ConnHandle::new(ConnId(3), 2, 1000, m.clone());
        assert!(other.push(MSG, Bytes::from_static(b"a")));
        other.request_close(CloseRequest::GONE);
        assert!(!other.push(MSG, Bytes::from_static(b"b")));
        assert_eq!(m.slow_consumer_drops.load(Ordering::Relaxed), 4, "other closes drop nothing counted here");

        let (h, _rx) = ConnHandle::new(ConnId(2), 100, 10, m.clone());
        assert!(h.push(MSG, Bytes::from(vec![0; 8])));
        assert!(!h.push(MSG, Bytes::from(vec![0; 8])));
        assert_eq!(h.close_requested(), Some(CloseRequest::SLOW_CONSUMER));
    }

    #[test]
    fn one_frame_larger_than_the_byte_budget_still_goes_to_an_empty_queue() {
        let (h, mut rx) = ConnHandle::new(ConnId(1), 4, 10, std::sync::Arc::new(Metrics::default()));
        assert!(h.push(MSG, Bytes::from(vec![0; 50])));
        assert_eq!(rx.try_recv(&h).map(|b| b.len()), Some(50));
        assert_eq!(h.queued_bytes(), 0);
    }

    /// Counts wake-ups.
    #[derive(Default)]
    struct Wakes(AtomicUsize);

    impl std::task::Wake for Wakes {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counting_waker() -> (std::sync::Arc<Wakes>, Waker) {
        let w = std::sync::Arc::new(Wakes::default());
        (w.clone(), Waker::from(w))
    }

    #[test]
    fn a_parked_writer_is_woken_once_and_takes_every_queued_frame() {
        let (h, mut out) = ConnHandle::new(ConnId(1), 8, 1000, std::sync::Arc::new(Metrics::default()));
        let (wakes, waker) = counting_waker();
        let mut cx = Context::from_waker(&waker);
        assert_eq!(out.poll_take(&h, &mut cx), Poll::Pending);
        for b in [&b"a"[..], b"b", b"c"] {
            assert!(h.push(MSG, Bytes::copy_from_slice(b)));
        }
        assert_eq!(wakes.0.load(Ordering::SeqCst), 1, "only the first push finds the writer parked");
        assert_eq!(out.poll_take(&h, &mut cx), Poll::Ready(Take::Frames));
        let taken: Vec<Bytes> = std::iter::from_fn(|| out.pop()).collect();
        assert_eq!(taken, [&b"a"[..], b"b", b"c"]);
        // Taken but not yet written frames still count against the bounds.
        assert_eq!((h.queued_frames(), h.queued_bytes()), (3, 3));
        h.written(3, 3);
        assert_eq!((h.queued_frames(), h.queued_bytes()), (0, 0));
    }

    #[test]
    fn frames_taken_and_not_written_count_toward_the_slow_consumer_bound() {
        let (h, mut out) = ConnHandle::new(ConnId(1), 2, 1000, std::sync::Arc::new(Metrics::default()));
        assert!(h.push(MSG, Bytes::from_static(b"a")));
        assert!(h.push(MSG, Bytes::from_static(b"b")));
        assert!(out.try_take(&h));
        assert!(!h.push(MSG, Bytes::from_static(b"c")), "the writer has not written a or b yet");
        assert_eq!(h.close_requested(), Some(CloseRequest::SLOW_CONSUMER));
    }

    #[test]
    fn a_close_request_wakes_the_parked_writer_and_the_reader() {
        let (h, mut out) = ConnHandle::new(ConnId(1), 8, 1000, std::sync::Arc::new(Metrics::default()));
        let (writer_wakes, writer) = counting_waker();
        let (reader_wakes, reader) = counting_waker();
        assert_eq!(out.poll_take(&h, &mut Context::from_waker(&writer)), Poll::Pending);
        assert_eq!(h.poll_closed_reader(&mut Context::from_waker(&reader)), Poll::Pending);
        assert!(h.push(MSG, Bytes::from_static(b"bye")));
        // The push woke the writer; it parks again before the close.
        assert_eq!(out.poll_take(&h, &mut Context::from_waker(&writer)), Poll::Ready(Take::Frames));
        assert_eq!(out.pop().as_deref(), Some(&b"bye"[..]));
        assert_eq!(out.poll_take(&h, &mut Context::from_waker(&writer)), Poll::Pending);
        assert!(h.push(MSG, Bytes::from_static(b"last")));
        assert!(h.request_close(CloseRequest::TOKEN_EXPIRED));
        assert_eq!(writer_wakes.0.load(Ordering::SeqCst), 2);
        assert_eq!(reader_wakes.0.load(Ordering::SeqCst), 1);
        assert_eq!(out.poll_take(&h, &mut Context::from_waker(&writer)), Poll::Ready(Take::Closing));
        assert_eq!(h.poll_closed_reader(&mut Context::from_waker(&reader)), Poll::Ready(()));
        // What was queued before the close is still there for the final drain.
        assert_eq!(out.try_recv(&h).as_deref(), Some(&b"last"[..]));
        assert!(!h.push(MSG, Bytes::from_static(b"late")));
    }

    #[test]
    fn an_idle_writer_gives_back_what_a_burst_grew() {
        let (h, mut out) = ConnHandle::new(ConnId(1), 4096, 1 << 20, std::sync::Arc::new(Metrics::default()));
        for _ in 0..1000 {
            assert!(h.push(MSG, Bytes::from_static(b"x")));
        }
        assert!(out.try_take(&h));
        while out.pop().is_some() {}
        h.written(1000, 1000);
        out.shrink();
        assert_eq!(out.taken.capacity(), 0);
        assert!(h.lock().frames.capacity() <= IDLE_CAPACITY);
    }
}
