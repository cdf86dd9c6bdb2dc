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

impl RecvStats {
    /// Records one received payload at `now`.
    pub fn record(&mut self, payload: &[u8], now: Instant, window: &Window) {
        let Some(Stamp { publisher, seq, sent_ns }) = payload::read(payload) else {
            self.corrupt += 1;
            return;
        };
        if seq >= MAX_SEQ || publisher > 1_000_000 {
            self.corrupt += 1;
            return;
        }
        let p = publisher as usize;
        if p >= self.tracks.len() {
            self.tracks.resize(p + 1, Track::default());
        }
        let t = &mut self.tracks[p];
        let (word, bit) = ((seq / 64) as usize, 1u64 << (seq % 64));
        if word >= t.bits.len() {
            t.bits.resize(word + 1, 0);
        }
        if t.bits[word] & bit != 0 {
            self.duplicated += 1;
        } else {
            t.bits[word] |= bit;
            self.unique += 1;
            if seq < t.next {
                self.reordered += 1;
            } else {
                t.next = seq + 1;
            }
        }
        if window.contains(now) {
            self.in_window += 1;
            let us = payload::instant_ns(now).saturating_sub(sent_ns) / 1000;
            let _ = self.latency.record(us.clamp(1, MAX_LATENCY_US));
        }
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
}
