//! What one subscriber saw: per publisher, which sequence numbers arrived (a bitmap, so a
//! duplicate is told apart from a late arrival), and a latency histogram of the deliveries
//! received inside the measured window.

use std::time::Instant;

use hdrhistogram::Histogram;

use crate::payload::{self, Stamp};

/// Highest latency the histograms hold, in microseconds (60 s); larger values are clamped.
pub const MAX_LATENCY_US: u64 = 60_000_000;

/// Highest sequence number accepted from a payload; anything above is a corrupt payload (it
/// would make the bitmap huge). A run is bounded far below this.
pub const MAX_SEQ: u64 = 1 << 32;

/// A latency histogram in microseconds, 1 µs … 60 s. Two significant digits (1 %) keep one
/// histogram at about 20 KiB, which matters with a thousand subscribers each holding one.
pub fn histogram() -> Histogram<u64> {
    // Bounds and precision are constants that satisfy hdrhistogram's preconditions.
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 2).expect("valid histogram bounds")
}

/// The measured window: deliveries received inside it count for rate and latency.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    /// Start (after warm-up).
    pub start: Instant,
    /// End.
    pub end: Instant,
}

impl Window {
    /// Whether `t` falls inside.
    pub fn contains(&self, t: Instant) -> bool {
        t >= self.start && t < self.end
    }

    /// Length in seconds.
    pub fn secs(&self) -> f64 {
        (self.end - self.start).as_secs_f64()
    }
}

#[derive(Debug, Default, Clone)]
struct Track {
    bits: Vec<u64>,
    next: u64,
}

/// Counts and latencies of one subscriber (merged across subscribers at the end).
#[derive(Debug, Clone)]
pub struct RecvStats {
    /// End-to-end latency of in-window deliveries, µs.
    pub latency: Histogram<u64>,
    /// Deliveries received inside the window (duplicates included).
    pub in_window: u64,
    /// Distinct (publisher, sequence) pairs received.
    pub unique: u64,
    /// Deliveries of a pair already received.
    pub duplicated: u64,
    /// Deliveries that arrived after a later sequence number of the same publisher.
    pub reordered: u64,
    /// Payloads that were not ours (too short or impossible sequence numbers).
    pub corrupt: u64,
    /// Deliveries that came from the message store (NoLag `requiresAck`).
    pub stored: u64,
    tracks: Vec<Track>,
}

impl Default for RecvStats {
    fn default() -> Self {
        Self {
            latency: histogram(),
            in_window: 0,
            unique: 0,
            duplicated: 0,
            reordered: 0,
            corrupt: 0,
            stored: 0,
            tracks: Vec::new(),
        }
    }
}

/// What one delivery was to its receiver's bookkeeping.
enum Seen {
    /// Not one of our payloads.
    Corrupt,
    /// A pair already received.
    Duplicate,
    /// A new pair; `true` when a later sequence number of its publisher came first.
    New(bool),
}

/// Marks (publisher, seq) of `payload` in `tracks`; its send time with what it was.
fn mark(tracks: &mut Vec<Track>, payload: &[u8]) -> (Seen, u64) {
    let Some(Stamp { publisher, seq, sent_ns }) = payload::read(payload) else {
        return (Seen::Corrupt, 0);
    };
    if seq >= MAX_SEQ || publisher > 1_000_000 {
        return (Seen::Corrupt, 0);
    }
    let p = publisher as usize;
    if p >= tracks.len() {
        tracks.resize(p + 1, Track::default());
    }
    let t = &mut tracks[p];
    let (word, bit) = ((seq / 64) as usize, 1u64 << (seq % 64));
    if word >= t.bits.len() {
        t.bits.resize(word + 1, 0);
    }
    if t.bits[word] & bit != 0 {
        return (Seen::Duplicate, sent_ns);
    }
    t.bits[word] |= bit;
    let late = seq < t.next;
    if !late {
        t.next = seq + 1;
    }
    (Seen::New(late), sent_ns)
}

/// Latency in µs of a delivery sent at `sent_ns` and received at `now`, for a histogram.
fn latency_us(sent_ns: u64, now: Instant) -> u64 {
    (payload::instant_ns(now).saturating_sub(sent_ns) / 1000).clamp(1, MAX_LATENCY_US)
}

/// The counts of [`RecvStats`] without its latency histogram (about 20 KiB): for receivers
/// counted in thousands (the `devices` scenario's devices), which share histograms instead.
#[derive(Debug, Default, Clone)]
pub struct Seqs {
    /// Deliveries received inside the window (duplicates included).
    pub in_window: u64,
    /// Distinct (publisher, sequence) pairs received.
    pub unique: u64,
    /// Deliveries of a pair already received.
    pub duplicated: u64,
    /// Deliveries that arrived after a later sequence number of the same publisher.
    pub reordered: u64,
    /// Payloads that were not ours.
    pub corrupt: u64,
    tracks: Vec<Track>,
}

impl Seqs {
    /// Records one received payload at `now`; its latency in µs when `now` is in the window.
    pub fn record(&mut self, payload: &[u8], now: Instant, window: &Window) -> Option<u64> {
        let (seen, sent_ns) = mark(&mut self.tracks, payload);
        match seen {
            Seen::Corrupt => {
                self.corrupt += 1;
                return None;
            }
            Seen::Duplicate => self.duplicated += 1,
            Seen::New(late) => {
                self.unique += 1;
                self.reordered += u64::from(late);
            }
        }
        window.contains(now).then(|| {
            self.in_window += 1;
            latency_us(sent_ns, now)
        })
    }
}

impl RecvStats {
    /// Records one received payload at `now`.
    pub fn record(&mut self, payload: &[u8], now: Instant, window: &Window) {
        let (seen, sent_ns) = mark(&mut self.tracks, payload);
        match seen {
            Seen::Corrupt => {
                self.corrupt += 1;
                return;
            }
            Seen::Duplicate => self.duplicated += 1,
            Seen::New(late) => {
                self.unique += 1;
                self.reordered += u64::from(late);
            }
        }
        if window.contains(now) {
            self.in_window += 1;
            let _ = self.latency.record(latency_us(sent_ns, now));
        }
    }

    /// Adds a [`Seqs`]'s counts to these (its latencies went to a histogram of their own).
    pub fn merge_seqs(&mut self, other: &Seqs) {
        self.in_window += other.in_window;
        self.unique += other.unique;
        self.duplicated += other.duplicated;
        self.reordered += other.reordered;
        self.corrupt += other.corrupt;
    }

    /// Adds `other`'s counts and latencies to these (bitmaps are per subscriber and dropped).
    pub fn merge(&mut self, other: &RecvStats) {
        let _ = self.latency.add(&other.latency);
        self.in_window += other.in_window;
        self.unique += other.unique;
        self.duplicated += other.duplicated;
        self.reordered += other.reordered;
        self.corrupt += other.corrupt;
        self.stored += other.stored;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payload::{buffer, write};
    use std::time::Duration;

    fn p(publisher: u32, seq: u64) -> Vec<u8> {
        let mut b = buffer(32);
        write(&mut b, Stamp { publisher, seq, sent_ns: payload::now_ns() });
        b
    }

    #[test]
    fn duplicates_and_late_arrivals_are_told_apart() {
        let now = Instant::now();
        let w = Window { start: now - Duration::from_secs(1), end: now + Duration::from_secs(60) };
        let mut s = RecvStats::default();
        for (publisher, seq) in [(0, 0), (0, 2), (0, 1), (0, 2), (1, 0), (1, 200)] {
            s.record(&p(publisher, seq), Instant::now(), &w);
        }
        assert_eq!((s.unique, s.duplicated, s.reordered, s.in_window), (5, 1, 1, 6));
        s.record(b"short", Instant::now(), &w);
        assert_eq!(s.corrupt, 1);
    }

    #[test]
    fn seqs_count_as_recv_stats_do_and_hand_back_latencies() {
        let now = Instant::now();
        let w = Window { start: now - Duration::from_secs(1), end: now + Duration::from_secs(60) };
        let mut s = Seqs::default();
        let lat: Vec<_> =
            [(0, 0), (0, 2), (0, 1), (0, 2)].iter().map(|&(a, b)| s.record(&p(a, b), Instant::now(), &w)).collect();
        assert!(lat.iter().all(Option::is_some));
        assert_eq!((s.unique, s.duplicated, s.reordered, s.in_window), (3, 1, 1, 4));
        assert_eq!(s.record(b"short", Instant::now(), &w), None);
        let mut r = RecvStats::default();
        r.merge_seqs(&s);
        assert_eq!((r.unique, r.duplicated, r.corrupt), (3, 1, 1));
    }
}
