//! Recovery of topics with history (issue 19, docs/recovery.md): what each subscription was
//! last delivered ([`Tracker`]), and the task that replays what a restored (or `since`)
//! subscription missed before its live messages.
//!
//! While a replay runs, the subscription's live messages are not queued: the tracker only
//! notes the highest offset seen. Every message of a history topic is in the history before
//! the bus carries it, so the replay reads on until it has passed that offset, then the
//! subscription goes live and skips live copies it already replayed (offset at or below the
//! replay's last). Nothing is delivered twice and nothing is lost in the hand-over.
//!
//! What a connection was delivered is what its client proved it received: each history frame
//! is queued with the writer's batch number, the writer pings after writing such frames, and
//! the pong (which every WebSocket client sends by itself) names the last batch received. The
//! offset kept with the restore record is the highest one of a proven batch, so frames lost in
//! a dying socket's buffers are replayed on reconnect.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use skua_core::history::{History, HistoryConfig, HistoryEntry, HistoryPos, ReadFrom};
use skua_core::{ActorId, Publication, TopicAddress};
use skua_protocol::{MessageFrame, ServerFrame, ServerFrameKind};

use crate::metrics::Metrics;
use crate::outbound::ConnHandle;

/// Entries read from the history per round trip of a replay.
const REPLAY_BATCH: usize = 256;

#[derive(Debug, Default)]
struct State {
    /// Epoch of the last delivered offset.
    epoch: Option<Arc<str>>,
    /// Highest offset delivered (live or replayed).
    last: u64,
    /// Live copies at or below this offset (of `epoch`) were replayed: skip them.
    floor: u64,
    /// While a replay runs: the highest live offset seen meanwhile.
    replaying: Option<u64>,
    /// Highest offset the client proved it received (of `epoch`).
    confirmed: u64,
    /// Offsets queued and not yet proven received, with the writer batch count at queueing.
    unproven: std::collections::VecDeque<(u64, u64)>,
}

/// Most queued offsets a tracker keeps waiting for their receipt; older ones are forgotten
/// (they then never count as received: a reconnect may replay them again).
const MAX_UNPROVEN: usize = 4096;

/// The batch number of a frame whose receipt is never proven (held by a hydration).
const UNPROVABLE: u64 = u64::MAX;

/// What one subscription of a history topic was delivered, shared by the hub (live), the
/// replay task and the session (restore record).
#[derive(Debug, Default)]
pub struct Tracker {
    // std Mutex: a few field updates per delivery, never across an await.
    state: Mutex<State>,
}

impl State {
    /// Whether `epoch` is this state's epoch: most often the very same allocation (every
    /// publication of a topic shares its history's epoch), so the bytes are compared only
    /// when the pointers differ.
    fn same_epoch(&self, epoch: &Arc<str>) -> bool {
        self.epoch.as_ref().is_some_and(|e| Arc::ptr_eq(e, epoch) || **e == **epoch)
    }

    /// See [`Tracker::admit_live`].
    fn admit(&mut self, h: &HistoryPos) -> bool {
        if let Some(seen) = &mut self.replaying {
            *seen = (*seen).max(h.offset);
            return false;
        }
        if self.same_epoch(&h.epoch) {
            if h.offset <= self.floor {
                return false;
            }
            self.last = self.last.max(h.offset);
        } else {
            self.epoch = Some(h.epoch.clone());
            self.last = h.offset;
            self.floor = 0;
            self.confirmed = 0;
            self.unproven.clear();
        }
        true
    }

    /// An offset queued in the writer's batch after `batch`. Offsets of one batch are proven
    /// together, so one entry per batch keeps the highest (a burst costs no queue growth).
    fn note_queued(&mut self, batch: u64, offset: u64) {
        if let Some(last) = self.unproven.back_mut()
            && last.0 == batch
        {
            last.1 = last.1.max(offset);
            return;
        }
        if self.unproven.len() >= MAX_UNPROVEN {
            self.unproven.pop_front();
        }
        self.unproven.push_back((batch, offset));
    }
}

fn lock(m: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Tracker {
    /// A tracker positioned at `(offset, epoch)` (nothing after it delivered yet).
    pub fn at(offset: u64, epoch: Arc<str>) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                epoch: Some(epoch),
                last: offset,
                floor: offset,
                confirmed: offset,
                ..State::default()
            }),
        })
    }

    /// A tracker whose live messages wait for a replay (see the module docs).
    pub fn replaying() -> Arc<Self> {
        Arc::new(Self { state: Mutex::new(State { replaying: Some(0), ..State::default() }) })
    }

    /// The highest `(offset, epoch)` the client proved it received (`proven`: its
    /// connection's last receipt), if any.
    pub fn position(&self, proven: u64) -> Option<(u64, Arc<str>)> {
        let mut s = lock(&self.state);
        let mut confirmed = s.confirmed;
        while let Some(&(batch, offset)) = s.unproven.front() {
            // Queued while the writer had taken `batch` batches: it went out in batch + 1.
            if batch >= proven {
                break;
            }
            confirmed = confirmed.max(offset);
            s.unproven.pop_front();
        }
        s.confirmed = confirmed;
        s.epoch.clone().map(|e| (s.confirmed, e))
    }

    /// A frame of `offset` was queued in the writer's batch after `batch` (`None`: its
    /// receipt cannot be proven).
    pub fn queued(&self, batch: Option<u64>, offset: u64) {
        lock(&self.state).note_queued(batch.unwrap_or(UNPROVABLE), offset);
    }

    /// Whether a live publication should be queued now; notes its offset either way.
    pub fn admit_live(&self, p: &Publication) -> bool {
        let Some(h) = &p.history else { return true };
        lock(&self.state).admit(h)
    }

    /// A live publication at `pos`: when admitted (see [`Self::admit_live`]), queues it with
    /// `push` and notes the batch it went into, all under one lock. `push` returns `None` when
    /// the frame was not queued, `Some(None)` when its receipt cannot be proven (a hydration
    /// holds it), `Some(Some(batch))` with the writer's batch count otherwise. Returns whether
    /// the frame was queued.
    pub fn deliver_live(&self, pos: &HistoryPos, push: impl FnOnce() -> Option<Option<u64>>) -> bool {
        let mut s = lock(&self.state);
        if !s.admit(pos) {
            return false;
        }
        let Some(batch) = push() else { return false };
        s.note_queued(batch.unwrap_or(UNPROVABLE), pos.offset);
        true
    }

    fn replayed(&self, offset: u64, epoch: &Arc<str>) {
        let mut s = lock(&self.state);
        if s.epoch.as_deref() != Some(&**epoch) {
            s.epoch = Some(epoch.clone());
            s.last = 0;
            s.confirmed = 0;
            s.unproven.clear();
        }
        s.last = s.last.max(offset);
    }

    /// Ends the replay if no live message beyond `cursor` was seen meanwhile.
    fn try_finish(&self, cursor: u64, epoch: &Arc<str>) -> bool {
        let mut s = lock(&self.state);
        match s.replaying {
            Some(seen) if seen > cursor => false,
            _ => {
                s.replaying = None;
                if s.epoch.is_none() {
                    s.epoch = Some(epoch.clone());
                }
                s.floor = cursor;
                s.last = s.last.max(cursor);
                true
            }
        }
    }

    /// Ends the replay whatever was seen (the replay failed or the connection closes).
    fn abandon(&self) {
        lock(&self.state).replaying = None;
    }
}

/// Where a recovery starts.
#[derive(Debug, Clone)]
pub enum Start {
    /// After this offset of this epoch (a restore record, or `since`).
    After(u64, Arc<str>),
    /// Messages stamped at or after this unix ms (no offset known).
    Since(u64),
    /// After this offset of this epoch, but from the first message stamped at or after this
    /// unix ms when that comes later: the record was released for a node that died, so the
    /// offset is that of the last subscription change, older than what was delivered, and the
    /// time is when the node was last seen alive less the margin (docs/recovery.md).
    Lost(u64, Arc<str>, u64),
}

impl Start {
    /// Resolves [`Start::Lost`] into [`Start::After`]: the saved offset, or the offset before
    /// the first message stamped at or after the time if that is later (the head when every
    /// message kept is older). Another epoch than the saved one keeps the saved offset (the
    /// recovery then reports `recovered: false` and replays the new epoch's messages).
    async fn resolve(
        self,
        history: &dyn History,
        topic: &TopicAddress,
        config: &HistoryConfig,
        now: u64,
    ) -> Result<Self, skua_core::history::HistoryError> {
        let Self::Lost(offset, epoch, since_ms) = self else { return Ok(self) };
        let read = history.read(topic, config, ReadFrom::Since(since_ms), 1, now).await?;
        if *read.epoch != *epoch {
            return Ok(Self::After(offset, epoch));
        }
        let before_first_recent = read.entries.first().map_or(read.head, |e| e.offset.saturating_sub(1));
        Ok(Self::After(offset.max(before_first_recent), epoch))
    }
}

/// One recovery to run, for a subscription inserted with [`Tracker::replaying`].
#[derive(Debug)]
pub struct Recovery {
    /// The history slot.
    pub history: Arc<dyn History>,
    /// The topic.
    pub topic: TopicAddress,
    /// Its history settings.
    pub config: HistoryConfig,
    /// The subscription's connection.
    pub conn: Arc<ConnHandle>,
    /// The subscription's tracker.
    pub tracker: Arc<Tracker>,
    /// The topic string as the client sent it.
    pub echo: Arc<str>,
    /// The subscriber (never gets its own messages, N16).
    pub actor: ActorId,
    /// Its filter keys; empty: all.
    pub filters: Arc<[String]>,
    /// Where to start.
    pub start: Start,
    /// Most messages replayed.
    pub max: usize,
    /// Send `recovery` with `recovered: true` too (a `since` subscribe asked for it).
    pub report_success: bool,
}

fn matches(actor: &ActorId, filters: &[String], e: &HistoryEntry) -> bool {
    if e.publisher == *actor {
        return false;
    }
    match &e.filter {
        None => filters.is_empty(),
        Some(k) => filters.is_empty() || filters.iter().any(|f| f == k),
    }
}

/// The `message` frame of a replayed entry.
pub fn replay_frame(echo: &str, e: &HistoryEntry, epoch: &str) -> Bytes {
    ServerFrame::Message(MessageFrame {
        topic: echo,
        data: &e.data,
        filter: e.filter.as_deref(),
        from: e.publisher.as_str(),
        timestamp: e.timestamp_ms,
        msg_id: e.msg_id.as_deref(),
        is_replay: true,
        history: Some((e.offset, epoch)),
    })
    .encode()
}

impl Recovery {
    /// Replays what was missed, oldest first, then lets the subscription go live; sends
    /// `recovery` with `recovered: false` when history no longer reached back far enough.
    pub async fn run(self, metrics: Arc<Metrics>) {
        let now = crate::clock::now_unix_ms();
        let start = match self.start.clone().resolve(&*self.history, &self.topic, &self.config, now).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "Reading history failed; the subscription goes live without recovery.");
                self.tracker.abandon();
                return;
            }
        };
        let mut from = match &start {
            Start::After(o, _) | Start::Lost(o, _, _) => ReadFrom::After(*o),
            Start::Since(t) => ReadFrom::Since(*t),
        };
        let mut recovered = true;
        let mut first_read = true;
        let mut replayed = 0usize;
        let mut cursor = 0u64;
        let mut epoch: Arc<str>;
        loop {
            let read = match self.history.read(&self.topic, &self.config, from, REPLAY_BATCH, now).await {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(error = %e, "Reading history failed; the subscription goes live without recovery.");
                    self.tracker.abandon();
                    return;
                }
            };
            epoch = read.epoch.clone();
            if first_read {
                first_read = false;
                match &start {
                    Start::After(o, e) | Start::Lost(o, e, _) if read.reaches_back_to(*o, e) => cursor = *o,
                    Start::After(o, e) | Start::Lost(o, e, _) => {
                        recovered = false;
                        // Same epoch: what is kept after the offset; another epoch: all of it.
                        cursor = if **e != *read.epoch {
                            0
                        } else if *o > read.head {
                            read.head
                        } else {
                            (*o).max(read.first.saturating_sub(1))
                        };
                        if cursor != *o {
                            from = ReadFrom::After(cursor);
                            continue;
                        }
                    }
                    Start::Since(_) => {
                        // Everything kept from then on; incomplete when the oldest kept message
                        // is among those (older ones after the start may have been dropped).
                        let oldest = read.entries.first().map(|e| e.offset);
                        if read.first > 1 && oldest == Some(read.first) {
                            recovered = false;
                        }
                        cursor = oldest.map_or(read.head, |o| o - 1);
                    }
                }
            } else if read.first > cursor + 1 && read.head > cursor {
                recovered = false;
            }
            // More than `max` to replay: the newest `max` of them, so the replay still runs
            // without a gap into the live messages (before, the oldest `max` were replayed and
            // the rest up to the head skipped, a gap the client could not place).
            let max = u64::try_from(self.max).unwrap_or(u64::MAX);
            if replayed == 0 && read.head.saturating_sub(cursor) > max {
                recovered = false;
                cursor = read.head - max;
                from = ReadFrom::After(cursor);
                continue;
            }
            let n = read.entries.len();
            let mut batch = 0u64;
            for e in read.entries {
                if e.offset <= cursor {
                    continue;
                }
                if replayed >= self.max {
                    recovered = false;
                    cursor = read.head;
                    break;
                }
                cursor = e.offset;
                if matches(&self.actor, &self.filters, &e) {
                    self.conn.room().await;
                    if self.conn.is_closing() {
                        self.tracker.abandon();
                        return;
                    }
                    self.tracker.replayed(e.offset, &epoch);
                    let Some(b) = self.conn.push_tracked(replay_frame(&self.echo, &e, &epoch)) else {
                        self.tracker.abandon();
                        return;
                    };
                    self.tracker.queued(Some(b), e.offset);
                    metrics.frames_out.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    metrics.frames_out_by_type.inc(ServerFrameKind::Message);
                    replayed += 1;
                    batch += 1;
                }
            }
            metrics.replays_by_kind.add("history", batch);
            if (n < REPLAY_BATCH || replayed >= self.max) && self.tracker.try_finish(cursor, &epoch) {
                break;
            }
            from = ReadFrom::After(cursor);
        }
        if !recovered || self.report_success {
            let frame = ServerFrame::Recovery { topic: &self.echo, recovered, epoch: &epoch, offset: cursor };
            self.conn.push(ServerFrameKind::Recovery, frame.encode());
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use skua_core::history::HistoryPos;
    use skua_core::{AppId, ConnId, EnvelopeId, NodeId, ProjectId, RoomKey};

    use super::*;

    fn publication(offset: u64, epoch: &str) -> Publication {
        Publication {
            history: Some(HistoryPos { offset, epoch: Arc::from(epoch) }),
            id: EnvelopeId(u128::from(offset)),
            topic: TopicAddress {
                room: RoomKey {
                    project: ProjectId::parse("p").unwrap(),
                    app: AppId::parse("a").unwrap(),
                    room: Arc::from("r"),
                },
                topic: Arc::from("feed"),
            },
            filter: None,
            publisher: ActorId::parse("bob").unwrap(),
            publisher_conn: ConnId(1),
            node: NodeId::parse("n").unwrap(),
            timestamp_ms: 0,
            msg_id: None,
            retain: false,
            qos: 0,
            data: Bytes::new(),
        }
    }

    #[test]
    fn the_saved_offset_is_the_highest_one_the_client_proved_it_received() {
        let t = Tracker::at(5, Arc::from("e1"));
        assert_eq!(t.position(0), Some((5, Arc::from("e1"))));
        // Offset 6 goes out in the writer's batch 1 (queued while it had taken 0 batches).
        assert!(t.admit_live(&publication(6, "e1")));
        t.queued(Some(0), 6);
        assert!(t.admit_live(&publication(7, "e1")));
        t.queued(Some(1), 7);
        assert_eq!(t.position(0).unwrap().0, 5, "nothing proven: both may be lost");
        assert_eq!(t.position(1).unwrap().0, 6, "batch 1 proven: 6 arrived, 7 may not have");
        assert_eq!(t.position(2).unwrap().0, 7);
        // A frame held by a hydration is never proven.
        assert!(t.admit_live(&publication(8, "e1")));
        t.queued(None, 8);
        assert_eq!(t.position(u64::MAX).unwrap().0, 7);
    }

    #[test]
    fn offsets_of_one_batch_are_proven_together_and_a_refused_frame_is_never_noted() {
        let t = Tracker::at(5, Arc::from("e1"));
        let pos = |offset| publication(offset, "e1").history.unwrap();
        // 6 and 7 go out in batch 1, 8 in batch 2: one entry per batch.
        assert!(t.deliver_live(&pos(6), || Some(Some(0))));
        assert!(t.deliver_live(&pos(7), || Some(Some(0))));
        assert!(t.deliver_live(&pos(8), || Some(Some(1))));
        assert_eq!(lock(&t.state).unproven.len(), 2);
        assert_eq!(t.position(0).unwrap().0, 5);
        assert_eq!(t.position(1).unwrap().0, 7, "batch 1 proven: 6 and 7 arrived");
        // A frame the queue refused is not noted; one the tracker refuses is never pushed.
        assert!(!t.deliver_live(&pos(9), || None));
        assert!(!t.deliver_live(&pos(5), || panic!("offset 5 is at the floor: not pushed")));
        assert_eq!(t.position(u64::MAX).unwrap().0, 8);
        // The same epoch in another allocation is still the same epoch.
        assert!(!t.deliver_live(&HistoryPos { offset: 5, epoch: Arc::from("e1") }, || Some(Some(9))));
    }

    #[test]
    fn live_messages_wait_for_the_replay_and_are_not_delivered_twice() {
        let t = Tracker::replaying();
        let epoch: Arc<str> = Arc::from("e1");
        // Live 11 and 12 arrive while the replay has reached 10: held back, not queued.
        assert!(!t.admit_live(&publication(11, "e1")));
        assert!(!t.admit_live(&publication(12, "e1")));
        t.replayed(10, &epoch);
        assert!(!t.try_finish(10, &epoch), "12 was seen live: the replay reads on");
        t.replayed(12, &epoch);
        assert!(t.try_finish(12, &epoch));
        // Live copies the replay already gave are skipped, newer ones go out.
        assert!(!t.admit_live(&publication(12, "e1")));
        assert!(t.admit_live(&publication(13, "e1")));
        // A new epoch (history lost) starts over: its offsets are not compared with the old.
        assert!(t.admit_live(&publication(1, "e2")));
        assert_eq!(t.position(0), Some((0, Arc::from("e2"))));
    }
}
