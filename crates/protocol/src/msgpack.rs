//! A minimal MessagePack reader and writer for frame handling.
//!
//! The reader never builds a value tree: it reads scalars, array/map headers and skips values,
//! checking every length against the remaining input before using it, so a hostile frame
//! cannot make it allocate. Nesting is capped at [`MAX_DEPTH`].
//! The writer appends to a `Vec<u8>` and cannot fail.

/// Deepest nesting the reader accepts when skipping a value.
pub const MAX_DEPTH: usize = 64;

/// Why a byte sequence is not the MessagePack we expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The input ended inside a value.
    #[error("truncated msgpack")]
    Truncated,
    /// A marker that MessagePack reserves (0xc1).
    #[error("reserved msgpack marker")]
    Reserved,
    /// Nesting deeper than [`MAX_DEPTH`].
    #[error("msgpack nested too deeply")]
    TooDeep,
    /// A value of another type than the caller asked for.
    #[error("unexpected msgpack type")]
    Type,
    /// A `str` that is not valid UTF-8.
    #[error("invalid utf-8 in msgpack str")]
    Utf8,
}

/// The broad type of the next value, read from its marker without consuming it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `nil`.
    Nil,
    /// `true` / `false`.
    Bool,
    /// Any integer.
    Int,
    /// `float 32` / `float 64`.
    Float,
    /// `str`.
    Str,
    /// `bin`.
    Bin,
    /// An array.
    Array,
    /// A map.
    Map,
    /// An extension value.
    Ext,
}

/// A cursor over a MessagePack byte slice.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// Starts reading at the beginning of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    /// Byte offset of the next value.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Whether every byte has been consumed.
    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], ReadError> {
        let end = self.pos.checked_add(n).ok_or(ReadError::Truncated)?;
        if end > self.buf.len() {
            return Err(ReadError::Truncated);
        }
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn byte(&mut self) -> Result<u8, ReadError> {
        Ok(self.take(1)?[0])
    }

    fn be(&mut self, n: usize) -> Result<u64, ReadError> {
        Ok(self.take(n)?.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b)))
    }

    fn len(&mut self, n: usize) -> Result<usize, ReadError> {
        usize::try_from(self.be(n)?).map_err(|_| ReadError::Truncated)
    }

    /// The kind of the next value, without consuming it.
    ///
    /// # Errors
    /// [`ReadError::Truncated`] at the end of input, [`ReadError::Reserved`] on 0xc1.
    pub fn peek_kind(&self) -> Result<Kind, ReadError> {
        let m = *self.buf.get(self.pos).ok_or(ReadError::Truncated)?;
        Ok(match m {
            0x00..=0x7f | 0xe0..=0xff | 0xcc..=0xd3 => Kind::Int,
            0x80..=0x8f | 0xde | 0xdf => Kind::Map,
            0x90..=0x9f | 0xdc | 0xdd => Kind::Array,
            0xa0..=0xbf | 0xd9..=0xdb => Kind::Str,
            0xc0 => Kind::Nil,
            0xc1 => return Err(ReadError::Reserved),
            0xc2 | 0xc3 => Kind::Bool,
            0xc4..=0xc6 => Kind::Bin,
            0xc7..=0xc9 | 0xd4..=0xd8 => Kind::Ext,
            0xca | 0xcb => Kind::Float,
        })
    }

    /// Reads a map header and returns its number of entries.
    ///
    /// # Errors
    /// [`ReadError::Type`] if the next value is not a map.
    pub fn read_map_len(&mut self) -> Result<usize, ReadError> {
        match self.peek_kind()? {
            Kind::Map => {}
            _ => return Err(ReadError::Type),
        }
        let m = self.byte()?;
        match m {
            0x80..=0x8f => Ok(usize::from(m & 0x0f)),
            0xde => self.len(2),
            _ => self.len(4),
        }
    }

    /// Reads an array header and returns its number of elements.
    ///
    /// # Errors
    /// [`ReadError::Type`] if the next value is not an array.
    pub fn read_array_len(&mut self) -> Result<usize, ReadError> {
        match self.peek_kind()? {
            Kind::Array => {}
            _ => return Err(ReadError::Type),
        }
        let m = self.byte()?;
        match m {
            0x90..=0x9f => Ok(usize::from(m & 0x0f)),
            0xdc => self.len(2),
            _ => self.len(4),
        }
    }

    /// Reads a `str` value.
    ///
    /// # Errors
    /// [`ReadError::Type`] if the next value is not a `str`, [`ReadError::Utf8`] if it is not UTF-8.
    pub fn read_str(&mut self) -> Result<&'a str, ReadError> {
        match self.peek_kind()? {
            Kind::Str => {}
            _ => return Err(ReadError::Type),
        }
        let m = self.byte()?;
        let n = match m {
            0xa0..=0xbf => usize::from(m & 0x1f),
            0xd9 => self.len(1)?,
            0xda => self.len(2)?,
            _ => self.len(4)?,
        };
        std::str::from_utf8(self.take(n)?).map_err(|_| ReadError::Utf8)
    }

    /// Reads a `nil`, returning whether the next value was one (and consuming it if so).
    ///
    /// # Errors
    /// [`ReadError::Truncated`] at the end of input.
    pub fn read_nil(&mut self) -> Result<bool, ReadError> {
        if self.peek_kind()? == Kind::Nil {
            self.pos += 1;
            Ok(true)
        } else {
            Ok(false)
        }
    }

    /// Reads a boolean.
    ///
    /// # Errors
    /// [`ReadError::Type`] if the next value is not a boolean.
    pub fn read_bool(&mut self) -> Result<bool, ReadError> {
        match self.peek_kind()? {
            Kind::Bool => Ok(self.byte()? == 0xc3),
            _ => Err(ReadError::Type),
        }
    }

    /// Reads any integer as `i128` (covers the whole u64 and i64 ranges).
    ///
    /// # Errors
    /// [`ReadError::Type`] if the next value is not an integer.
    pub fn read_int(&mut self) -> Result<i128, ReadError> {
        if self.peek_kind()? != Kind::Int {
            return Err(ReadError::Type);
        }
        let m = self.byte()?;
        Ok(match m {
            0x00..=0x7f => i128::from(m),
            0xe0..=0xff => i128::from(m as i8),
            0xcc => i128::from(self.be(1)?),
            0xcd => i128::from(self.be(2)?),
            0xce => i128::from(self.be(4)?),
            0xcf => i128::from(self.be(8)?),
            0xd0 => i128::from(self.be(1)? as u8 as i8),
            0xd1 => i128::from(self.be(2)? as u16 as i16),
            0xd2 => i128::from(self.be(4)? as u32 as i32),
            _ => i128::from(self.be(8)? as i64),
        })
    }

    /// Skips one value and returns the bytes it occupied.
    ///
    /// # Errors
    /// [`ReadError::Truncated`], [`ReadError::Reserved`] or [`ReadError::TooDeep`].
    pub fn skip_value(&mut self) -> Result<&'a [u8], ReadError> {
        let start = self.pos;
        self.skip_inner(0)?;
        Ok(&self.buf[start..self.pos])
    }

    fn skip_inner(&mut self, depth: usize) -> Result<(), ReadError> {
        if depth > MAX_DEPTH {
            return Err(ReadError::TooDeep);
        }
        // Containers are skipped element by element with an explicit count, so a claimed
        // length larger than the input fails as soon as the input runs out.
        match self.peek_kind()? {
            Kind::Map => {
                let n = self.read_map_len()?;
                for _ in 0..n {
                    self.skip_inner(depth + 1)?;
                    self.skip_inner(depth + 1)?;
                }
            }
            Kind::Array => {
                let n = self.read_array_len()?;
                for _ in 0..n {
                    self.skip_inner(depth + 1)?;
                }
            }
            _ => {
                let m = self.byte()?;
                let n = match m {
                    0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => 0,
                    0xa0..=0xbf => usize::from(m & 0x1f),
                    0xcc | 0xd0 => 1,
                    0xcd | 0xd1 => 2,
                    0xce | 0xd2 | 0xca => 4,
                    0xcf | 0xd3 | 0xcb => 8,
                    0xc4 | 0xd9 => self.len(1)?,
                    0xc5 | 0xda => self.len(2)?,
                    0xc6 | 0xdb => self.len(4)?,
                    0xd4 => 2,
                    0xd5 => 3,
                    0xd6 => 5,
                    0xd7 => 9,
                    0xd8 => 17,
                    0xc7 => self.len(1)? + 1,
                    0xc8 => self.len(2)? + 1,
                    0xc9 => self.len(4)?.checked_add(1).ok_or(ReadError::Truncated)?,
                    _ => return Err(ReadError::Reserved),
                };
                self.take(n)?;
            }
        }
        Ok(())
    }
}

/// Appends MessagePack to a byte vector. Writing to memory cannot fail.
#[derive(Debug, Default)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    /// An empty writer with room for `cap` bytes.
    pub fn with_capacity(cap: usize) -> Self {
        Self { buf: Vec::with_capacity(cap) }
    }

    /// The bytes written so far.
    pub fn into_vec(self) -> Vec<u8> {
        self.buf
    }

    /// Number of bytes written so far.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether nothing was written yet.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    fn header(&mut self, n: usize, fix: u8, fix_max: usize, m16: u8, m32: u8) {
        if n <= fix_max {
            self.buf.push(fix | n as u8);
        } else if let Ok(n) = u16::try_from(n) {
            self.buf.push(m16);
            self.buf.extend_from_slice(&n.to_be_bytes());
        } else {
            self.buf.push(m32);
            // Frames are capped far below 4 GiB; saturate rather than wrap.
            self.buf.extend_from_slice(&u32::try_from(n).unwrap_or(u32::MAX).to_be_bytes());
        }
    }

    /// Writes a map header of `n` entries.
    pub fn map(&mut self, n: usize) -> &mut Self {
        self.header(n, 0x80, 15, 0xde, 0xdf);
        self
    }

    /// Writes an array header of `n` elements.
    pub fn array(&mut self, n: usize) -> &mut Self {
        self.header(n, 0x90, 15, 0xdc, 0xdd);
        self
    }

    /// Writes a `str`.
    pub fn str(&mut self, s: &str) -> &mut Self {
        let n = s.len();
        if n <= 31 {
            self.buf.push(0xa0 | n as u8);
        } else if let Ok(n) = u8::try_from(n) {
            self.buf.push(0xd9);
            self.buf.push(n);
        } else if let Ok(n) = u16::try_from(n) {
            self.buf.push(0xda);
            self.buf.extend_from_slice(&n.to_be_bytes());
        } else {
            self.buf.push(0xdb);
            self.buf.extend_from_slice(&u32::try_from(n).unwrap_or(u32::MAX).to_be_bytes());
        }
        self.buf.extend_from_slice(s.as_bytes());
        self
    }

    /// Writes a non-negative integer in its shortest form.
    pub fn uint(&mut self, v: u64) -> &mut Self {
        if v <= 0x7f {
            self.buf.push(v as u8);
        } else if let Ok(v) = u8::try_from(v) {
            self.buf.extend_from_slice(&[0xcc, v]);
        } else if let Ok(v) = u16::try_from(v) {
            self.buf.push(0xcd);
            self.buf.extend_from_slice(&v.to_be_bytes());
        } else if let Ok(v) = u32::try_from(v) {
            self.buf.push(0xce);
            self.buf.extend_from_slice(&v.to_be_bytes());
        } else {
            self.buf.push(0xcf);
            self.buf.extend_from_slice(&v.to_be_bytes());
        }
        self
    }

    /// Writes a boolean.
    pub fn bool(&mut self, v: bool) -> &mut Self {
        self.buf.push(if v { 0xc3 } else { 0xc2 });
        self
    }

    /// Writes `nil`.
    pub fn nil(&mut self) -> &mut Self {
        self.buf.push(0xc0);
        self
    }

    /// Appends bytes that already are one encoded MessagePack value.
    pub fn raw(&mut self, encoded: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(encoded);
        self
    }

    /// Writes `s` as a `str`, or `nil` when absent.
    pub fn opt_str(&mut self, s: Option<&str>) -> &mut Self {
        match s {
            Some(s) => self.str(s),
            None => self.nil(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skip_rejects_lengths_beyond_input() {
        // array32 claiming 4 billion elements in 5 bytes
        let mut r = Reader::new(&[0xdd, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(r.skip_value(), Err(ReadError::Truncated));
        let mut r = Reader::new(&[0xdb, 0xff, 0xff, 0xff, 0xff, b'a']);
        assert_eq!(r.skip_value(), Err(ReadError::Truncated));
    }

    #[test]
    fn skip_caps_depth() {
        let v = vec![0x91u8; MAX_DEPTH + 5];
        assert_eq!(Reader::new(&v).skip_value(), Err(ReadError::TooDeep));
    }

    #[test]
    fn writer_uses_shortest_forms() {
        let mut w = Writer::default();
        w.uint(5).uint(200).uint(70_000).str("ab").map(16).array(3).bool(true).nil();
        assert_eq!(
            w.into_vec(),
            vec![5, 0xcc, 200, 0xce, 0, 1, 0x11, 0x70, 0xa2, b'a', b'b', 0xde, 0, 16, 0x93, 0xc3, 0xc0]
        );
    }

    #[test]
    fn ints_of_every_width_read_back() {
        let cases: &[(&[u8], i128)] = &[
            (&[0x05], 5),
            (&[0xff], -1),
            (&[0xd0, 0x80], -128),
            (&[0xcd, 0x01, 0x00], 256),
            (&[0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff], u64::MAX as i128),
            (&[0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0], i64::MIN as i128),
        ];
        for (bytes, want) in cases {
            assert_eq!(Reader::new(bytes).read_int().unwrap(), *want, "{bytes:x?}");
        }
    }
}
