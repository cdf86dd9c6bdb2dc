//! The flat JSON objects of the result lines: written by every run, read back by `report`.
//! Flat (no nesting) on purpose, so the writer and reader stay a few lines each and the lines
//! are easy to grep and to load elsewhere.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// A JSON scalar.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    /// A string.
    Str(String),
    /// A number.
    Num(f64),
    /// A boolean.
    Bool(bool),
    /// `null`: not measured.
    Null,
}

impl Val {
    /// The number, if this is one.
    pub fn num(&self) -> Option<f64> {
        match self {
            Self::Num(n) => Some(*n),
            _ => None,
        }
    }

    /// The string, if this is one.
    pub fn str(&self) -> Option<&str> {
        match self {
            Self::Str(s) => Some(s),
            _ => None,
        }
    }
}

impl From<&str> for Val {
    fn from(s: &str) -> Self {
        Self::Str(s.to_owned())
    }
}
impl From<String> for Val {
    fn from(s: String) -> Self {
        Self::Str(s)
    }
}
impl From<f64> for Val {
    fn from(n: f64) -> Self {
        if n.is_finite() { Self::Num(n) } else { Self::Null }
    }
}
impl From<u64> for Val {
    fn from(n: u64) -> Self {
        Self::Num(n as f64)
    }
}
impl From<usize> for Val {
    fn from(n: usize) -> Self {
        Self::Num(n as f64)
    }
}
impl From<bool> for Val {
    fn from(b: bool) -> Self {
        Self::Bool(b)
    }
}
impl<T: Into<Val>> From<Option<T>> for Val {
    fn from(v: Option<T>) -> Self {
        v.map_or(Self::Null, Into::into)
    }
}

fn escape(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// One JSON object on one line, keys in the given order.
pub fn line(fields: &[(String, Val)]) -> String {
    let mut out = String::from("{");
    for (i, (k, v)) in fields.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        escape(&mut out, k);
        out.push(':');
        match v {
            Val::Str(s) => escape(&mut out, s),
            Val::Num(n) if n.fract() == 0.0 && n.abs() < 1e15 => {
                let _ = write!(out, "{}", *n as i64);
            }
            Val::Num(n) => {
                let _ = write!(out, "{n:.4}");
            }
            Val::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Val::Null => out.push_str("null"),
        }
    }
    out.push('}');
    out
}

/// Parses one flat JSON object (string, number, boolean and null values only).
///
/// # Errors
/// Anything else, with what was expected.
pub fn parse(text: &str) -> Result<BTreeMap<String, Val>, String> {
    let mut p = Parser { s: text.trim().as_bytes(), i: 0 };
    let mut out = BTreeMap::new();
    p.expect(b'{')?;
    p.ws();
    if p.peek() == Some(b'}') {
        return Ok(out);
    }
    loop {
        p.ws();
        let k = p.string()?;
        p.ws();
        p.expect(b':')?;
        p.ws();
        let v = p.value()?;
        out.insert(k, v);
        p.ws();
        match p.next() {
            Some(b',') => continue,
            Some(b'}') => return Ok(out),
            _ => return Err(format!("expected , or }} at byte {}", p.i)),
        }
    }
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }
    fn next(&mut self) -> Option<u8> {
        let c = self.peek();
        self.i += 1;
        c
    }
    fn ws(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_whitespace()) {
            self.i += 1;
        }
    }
    fn expect(&mut self, c: u8) -> Result<(), String> {
        if self.next() == Some(c) { Ok(()) } else { Err(format!("expected {:?} at byte {}", c as char, self.i - 1)) }
    }
    fn string(&mut self) -> Result<String, String> {
        self.expect(b'"')?;
        let mut out = String::new();
        loop {
            match self.next().ok_or("unterminated string")? {
                b'"' => return Ok(out),
                b'\\' => match self.next().ok_or("bad escape")? {
                    b'n' => out.push('\n'),
                    b'u' => {
                        let hex = self.s.get(self.i..self.i + 4).ok_or("bad \\u escape")?;
                        let code = u32::from_str_radix(std::str::from_utf8(hex).map_err(|e| e.to_string())?, 16)
                            .map_err(|e| e.to_string())?;
                        out.push(char::from_u32(code).unwrap_or('?'));
                        self.i += 4;
                    }
                    c => out.push(c as char),
                },
                _ => {
                    // Copy one UTF-8 character.
                    let start = self.i - 1;
                    while self.peek().is_some_and(|c| c & 0xc0 == 0x80) {
                        self.i += 1;
                    }
                    out.push_str(std::str::from_utf8(&self.s[start..self.i]).map_err(|e| e.to_string())?);
                }
            }
        }
    }
    fn value(&mut self) -> Result<Val, String> {
        match self.peek().ok_or("missing value")? {
            b'"' => self.string().map(Val::Str),
            b't' | b'f' | b'n' => {
                for (word, v) in [("true", Val::Bool(true)), ("false", Val::Bool(false)), ("null", Val::Null)] {
                    if self.s[self.i..].starts_with(word.as_bytes()) {
                        self.i += word.len();
                        return Ok(v);
                    }
                }
                Err(format!("bad literal at byte {}", self.i))
            }
            _ => {
                let start = self.i;
                while self.peek().is_some_and(|c| c.is_ascii_digit() || b"+-.eE".contains(&c)) {
                    self.i += 1;
                }
                let t = std::str::from_utf8(&self.s[start..self.i]).map_err(|e| e.to_string())?;
                t.parse().map(Val::Num).map_err(|_| format!("bad number {t:?}"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_read_back() {
        let fields = vec![
            ("case".to_string(), Val::from("fanout \"S\"=1 µs")),
            ("n".to_string(), Val::from(42u64)),
            ("x".to_string(), Val::from(0.125)),
            ("ok".to_string(), Val::from(true)),
            ("none".to_string(), Val::from(None::<u64>)),
        ];
        let l = line(&fields);
        let m = parse(&l).unwrap();
        assert_eq!(m.len(), 5);
        for (k, v) in fields {
            assert_eq!(m[&k], v, "{k} in {l}");
        }
    }
}
