//! The benchmark payload: every published message carries, in its first [`HEADER_LEN`] bytes,
//! the publisher's id, its sequence number and the send time; the rest is padding up to the
//! payload size asked for. All adapters carry these bytes unchanged, so one parser serves all.

use std::sync::OnceLock;
use std::time::Instant;

/// Bytes of the stamp at the start of each payload: id (4), sequence (8), send time (8).
pub const HEADER_LEN: usize = 20;

static EPOCH: OnceLock<Instant> = OnceLock::new();

/// The process-wide origin of payload timestamps. Publishers and subscribers live in the same
/// process, so a monotonic clock is enough and wall-clock steps cannot skew latencies.
pub fn epoch() -> Instant {
    *EPOCH.get_or_init(Instant::now)
}

/// Nanoseconds from [`epoch`] to `t` (0 before the epoch).
pub fn instant_ns(t: Instant) -> u64 {
    u64::try_from(t.saturating_duration_since(epoch()).as_nanos()).unwrap_or(u64::MAX)
}

/// Nanoseconds from [`epoch`] to now.
pub fn now_ns() -> u64 {
    instant_ns(Instant::now())
}

/// What a payload says about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// Which publisher sent it (0-based, unique within a run).
    pub publisher: u32,
    /// That publisher's sequence number, from 0.
    pub seq: u64,
    /// Send time, nanoseconds since [`epoch`].
    pub sent_ns: u64,
}

/// A payload buffer of `len` bytes (at least [`HEADER_LEN`]) with its padding filled in.
pub fn buffer(len: usize) -> Vec<u8> {
    vec![b'x'; len.max(HEADER_LEN)]
}

/// Writes `s` into the first [`HEADER_LEN`] bytes of `buf`.
///
/// # Panics
/// If `buf` is shorter than [`HEADER_LEN`]; [`buffer`] never makes one.
pub fn write(buf: &mut [u8], s: Stamp) {
    buf[0..4].copy_from_slice(&s.publisher.to_le_bytes());
    buf[4..12].copy_from_slice(&s.seq.to_le_bytes());
    buf[12..20].copy_from_slice(&s.sent_ns.to_le_bytes());
}

/// Reads the stamp of a received payload; `None` if it is too short to be one of ours.
pub fn read(p: &[u8]) -> Option<Stamp> {
    let h = p.get(..HEADER_LEN)?;
    let mut id = [0u8; 4];
    let mut seq = [0u8; 8];
    let mut ts = [0u8; 8];
    id.copy_from_slice(&h[0..4]);
    seq.copy_from_slice(&h[4..12]);
    ts.copy_from_slice(&h[12..20]);
    Some(Stamp { publisher: u32::from_le_bytes(id), seq: u64::from_le_bytes(seq), sent_ns: u64::from_le_bytes(ts) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamp_round_trips_and_keeps_padding() {
        let mut b = buffer(100);
        let s = Stamp { publisher: 7, seq: 1 << 40, sent_ns: 123_456_789 };
        write(&mut b, s);
        assert_eq!(read(&b), Some(s));
        assert_eq!(b.len(), 100);
        assert!(b[HEADER_LEN..].iter().all(|&c| c == b'x'));
        assert_eq!(read(&b[..10]), None);
    }
}
