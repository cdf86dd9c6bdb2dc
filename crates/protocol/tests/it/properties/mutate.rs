//! Structure-aware mutations of MessagePack encodings, for fuzzing decoders with inputs that
//! are almost valid: byte flips, insertions, removals, truncations, duplicated spans, and
//! rewritten length fields (a `str`, `bin`, `ext`, array or map header declaring more or fewer
//! bytes or elements than follow, up to `u32::MAX`).
//!
//! Length headers are found by walking the encoding with `skua_protocol::msgpack::Reader`
//! (the walk stops at the first invalid byte; headers before it are still mutated).
//! crates/bus/src/mqtt/codec/tests.rs keeps a copy of the walker for the envelope codec.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;
use skua_protocol::msgpack::{Kind, Reader};

/// Which length a rewritten header declares.
#[derive(Debug, Clone, Copy)]
pub enum NewLen {
    /// The old length plus this much (more than follows: the decoder runs out of input).
    Plus(u8),
    /// The old length minus this much, saturating (what follows is read as the next value).
    Minus(u8),
    /// Twice the old length plus one.
    Double,
    /// A fixed length, from small to `u32::MAX` (allocation bombs).
    Exactly(u32),
}

/// One edit of an encoding.
#[derive(Debug, Clone)]
pub enum Edit {
    /// Overwrite one byte.
    Set(Index, u8),
    /// XOR one byte with a one-bit mask.
    FlipBit(Index, u8),
    /// Insert one byte.
    Insert(Index, u8),
    /// Remove one byte.
    Remove(Index),
    /// Cut the encoding at a position.
    Truncate(Index),
    /// Copy a span (start, length up to 32) to another position.
    Duplicate(Index, u8, Index),
    /// Rewrite the length of one header, in the 32-bit form of its family.
    SetLen(Index, NewLen),
}

fn new_len() -> impl Strategy<Value = NewLen> {
    prop_oneof![
        any::<u8>().prop_map(NewLen::Plus),
        (1u8..4).prop_map(NewLen::Minus),
        Just(NewLen::Double),
        prop_oneof![
            Just(0u32),
            1u32..300,
            Just(0xffff),
            Just(0x1_0000),
            Just(0x7fff_ffff),
            Just(0xffff_fff0),
            Just(u32::MAX),
        ]
        .prop_map(NewLen::Exactly),
    ]
}

/// One edit, weighted towards length rewrites.
pub fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        2 => (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Edit::Set(i, b)),
        2 => (any::<Index>(), 0u8..8).prop_map(|(i, b)| Edit::FlipBit(i, 1 << b)),
        1 => (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Edit::Insert(i, b)),
        1 => any::<Index>().prop_map(Edit::Remove),
        1 => any::<Index>().prop_map(Edit::Truncate),
        1 => (any::<Index>(), 1u8..32, any::<Index>()).prop_map(|(a, n, b)| Edit::Duplicate(a, n, b)),
        4 => (any::<Index>(), new_len()).prop_map(|(i, l)| Edit::SetLen(i, l)),
    ]
}

/// One to `max` edits.
pub fn edits(max: usize) -> impl Strategy<Value = Vec<Edit>> {
    vec(edit(), 1..=max)
}

/// A length-carrying header: where its marker is, how many bytes it takes (marker and length,
/// not an ext's type byte), the length it declares, and the marker of its 32-bit form.
#[derive(Debug, Clone, Copy)]
struct Header {
    at: usize,
    size: usize,
    len: u64,
    wide: u8,
}

fn header_at(bytes: &[u8], at: usize) -> Option<Header> {
    let m = *bytes.get(at)?;
    let be = |n: usize| bytes.get(at + 1..at + 1 + n).map(|b| b.iter().fold(0u64, |a, x| (a << 8) | u64::from(*x)));
    let (size, len, wide) = match m {
        0x80..=0x8f => (1, u64::from(m & 0x0f), 0xdf),
        0x90..=0x9f => (1, u64::from(m & 0x0f), 0xdd),
        0xa0..=0xbf => (1, u64::from(m & 0x1f), 0xdb),
        0xd9 | 0xc4 | 0xc7 => (2, be(1)?, [(0xd9, 0xdb), (0xc4, 0xc6), (0xc7, 0xc9)].iter().find(|p| p.0 == m)?.1),
        0xda | 0xc5 | 0xc8 | 0xdc | 0xde => {
            let wide = match m {
                0xda => 0xdb,
                0xc5 => 0xc6,
                0xc8 => 0xc9,
                0xdc => 0xdd,
                _ => 0xdf,
            };
            (3, be(2)?, wide)
        }
        0xdb | 0xc6 | 0xc9 | 0xdd | 0xdf => (5, be(4)?, m),
        _ => return None,
    };
    Some(Header { at, size, len, wide })
}

/// Every length header of the values in `bytes`, in order, as far as the walk gets.
fn headers(bytes: &[u8]) -> Vec<Header> {
    fn walk(r: &mut Reader<'_>, bytes: &[u8], out: &mut Vec<Header>, depth: usize) -> Option<()> {
        if depth > 80 {
            return None;
        }
        let at = r.position();
        let kind = r.peek_kind().ok()?;
        if let Some(h) = header_at(bytes, at) {
            out.push(h);
        }
        match kind {
            Kind::Map | Kind::Array => {
                let n = if kind == Kind::Map { r.read_map_len().ok()? * 2 } else { r.read_array_len().ok()? };
                for _ in 0..n {
                    walk(r, bytes, out, depth + 1)?;
                }
            }
            _ => {
                r.skip_value().ok()?;
            }
        }
        Some(())
    }
    let mut out = Vec::new();
    let mut r = Reader::new(bytes);
    while !r.is_empty() && walk(&mut r, bytes, &mut out, 0).is_some() {}
    out
}

/// `bytes` with `edits` applied in order (each on the result of the previous one).
pub fn apply(bytes: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut b = bytes.to_vec();
    for e in edits {
        match *e {
            Edit::Set(i, v) if !b.is_empty() => {
                let i = i.index(b.len());
                b[i] = v;
            }
            Edit::FlipBit(i, mask) if !b.is_empty() => {
                let i = i.index(b.len());
                b[i] ^= mask;
            }
            Edit::Insert(i, v) => {
                let i = i.index(b.len() + 1);
                b.insert(i, v);
            }
            Edit::Remove(i) if !b.is_empty() => {
                let i = i.index(b.len());
                b.remove(i);
            }
            Edit::Truncate(i) => {
                let i = i.index(b.len() + 1);
                b.truncate(i);
            }
            Edit::Duplicate(from, n, to) if !b.is_empty() => {
                let from = from.index(b.len());
                let end = (from + usize::from(n)).min(b.len());
                let span = b[from..end].to_vec();
                let to = to.index(b.len() + 1);
                b.splice(to..to, span);
            }
            Edit::SetLen(which, new) => {
                let hs = headers(&b);
                if !hs.is_empty() {
                    set_len(&mut b, hs[which.index(hs.len())], new);
                }
            }
            _ => {}
        }
    }
    b
}

/// Rewrites `h` in its 32-bit form, declaring the length `new` asks for.
fn set_len(b: &mut Vec<u8>, h: Header, new: NewLen) {
    let len = match new {
        NewLen::Plus(n) => h.len.saturating_add(u64::from(n)),
        NewLen::Minus(n) => h.len.saturating_sub(u64::from(n)),
        NewLen::Double => h.len.saturating_mul(2).saturating_add(1),
        NewLen::Exactly(n) => u64::from(n),
    };
    let len = u32::try_from(len).unwrap_or(u32::MAX);
    let wide = [&[h.wide][..], &len.to_be_bytes()].concat();
    b.splice(h.at..h.at + h.size, wide);
}

#[test]
fn headers_are_found_and_rewritten() {
    // {"a": [1, "xy"], "b": bin8(2)}
    let bytes = [0x82, 0xa1, b'a', 0x92, 0x01, 0xa2, b'x', b'y', 0xa1, b'b', 0xc4, 0x02, 0, 0];
    let at: Vec<usize> = headers(&bytes).iter().map(|h| h.at).collect();
    assert_eq!(at, [0, 1, 3, 5, 8, 10]);
    let hs = headers(&bytes);
    let mut grown = bytes.to_vec();
    set_len(&mut grown, hs[0], NewLen::Exactly(u32::MAX));
    assert_eq!(grown[..5], [0xdf, 0xff, 0xff, 0xff, 0xff]);
    assert_eq!(grown[5..], bytes[1..]);
    let mut bin = bytes.to_vec();
    set_len(&mut bin, hs[5], NewLen::Plus(1));
    assert_eq!(bin[10..], [0xc6, 0, 0, 0, 3, 0, 0]);
}
