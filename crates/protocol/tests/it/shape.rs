//! Decoded MessagePack trees (`rmpv::Value`), built by hand from the reference documents and
//! compared with what a fixture or the encoder really holds. rmpv is an independent decoder, so
//! these checks do not trust `skua_protocol::msgpack`.

use rmpv::Value;

/// A msgpack `str`.
pub fn s(v: &str) -> Value {
    Value::from(v)
}

/// A non-negative integer (any width on the wire).
pub fn u(v: u64) -> Value {
    Value::from(v)
}

/// A boolean.
pub fn b(v: bool) -> Value {
    Value::from(v)
}

/// `nil`.
pub fn nil() -> Value {
    Value::Nil
}

/// An array.
pub fn arr(items: impl IntoIterator<Item = Value>) -> Value {
    Value::Array(items.into_iter().collect())
}

/// A map with `str` keys, in the given order.
pub fn map<const N: usize>(entries: [(&str, Value); N]) -> Value {
    Value::Map(entries.into_iter().map(|(k, v)| (s(k), v)).collect())
}

/// A map with `str` keys, from a runtime list.
pub fn map_of(entries: impl IntoIterator<Item = (String, Value)>) -> Value {
    Value::Map(entries.into_iter().map(|(k, v)| (Value::from(k), v)).collect())
}

/// Encodes a tree with rmpv (shortest forms, `str` for strings, `bin` for binaries).
pub fn pack(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    rmpv::encode::write_value(&mut out, v).expect("writing to a Vec cannot fail");
    out
}

/// Decodes exactly one value that spans all of `bytes`.
pub fn decode_exact(bytes: &[u8]) -> Result<Value, String> {
    let mut rest = bytes;
    let v = rmpv::decode::read_value(&mut rest).map_err(|e| format!("rmpv cannot decode: {e}"))?;
    if !rest.is_empty() {
        return Err(format!("{} trailing bytes after the value", rest.len()));
    }
    Ok(v)
}

/// The field `key` of a map whose keys are `str`.
pub fn field<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.as_map()?.iter().find(|(k, _)| k.as_str() == Some(key)).map(|(_, v)| v)
}

/// Every map key in the tree is a valid UTF-8 `str`, and no map repeats a key.
pub fn check_keys(v: &Value, path: &str) -> Result<(), String> {
    match v {
        Value::Map(entries) => {
            for (i, (k, val)) in entries.iter().enumerate() {
                let Some(key) = k.as_str() else {
                    return Err(format!("{path}: key #{i} is {}, not a str", kind(k)));
                };
                if entries[..i].iter().any(|(other, _)| other == k) {
                    return Err(format!("{path}: key {key:?} appears twice"));
                }
                check_keys(val, &format!("{path}.{key}"))?;
            }
            Ok(())
        }
        Value::Array(items) => items.iter().enumerate().try_for_each(|(i, x)| check_keys(x, &format!("{path}[{i}]"))),
        _ => Ok(()),
    }
}

/// The msgpack family of a value, for messages.
pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Nil => "nil",
        Value::Boolean(_) => "bool",
        Value::Integer(_) => "int",
        Value::F32(_) => "float32",
        Value::F64(_) => "float64",
        Value::String(x) if x.is_str() => "str",
        Value::String(_) => "str (invalid utf-8)",
        Value::Binary(_) => "bin",
        Value::Array(_) => "array",
        Value::Map(_) => "map",
        Value::Ext(..) => "ext",
    }
}

/// Compares two trees, maps as unordered key sets, everything else exactly (type and value;
/// floats bit for bit). Returns the first difference with its path.
pub fn diff(got: &Value, want: &Value, path: &str) -> Result<(), String> {
    match (got, want) {
        (Value::Map(g), Value::Map(w)) => {
            for (k, wv) in w {
                let name = k.as_str().map_or_else(|| k.to_string(), str::to_owned);
                match g.iter().find(|(gk, _)| gk == k) {
                    None => return Err(format!("{path}: missing key {name:?}")),
                    Some((_, gv)) => diff(gv, wv, &format!("{path}.{name}"))?,
                }
            }
            if let Some((extra, _)) = g.iter().find(|(gk, _)| !w.iter().any(|(wk, _)| wk == gk)) {
                return Err(format!("{path}: unexpected key {extra}"));
            }
            if g.len() != w.len() {
                return Err(format!("{path}: {} entries, expected {} (duplicate key?)", g.len(), w.len()));
            }
            Ok(())
        }
        (Value::Array(g), Value::Array(w)) => {
            if g.len() != w.len() {
                return Err(format!("{path}: array of {}, expected {}", g.len(), w.len()));
            }
            g.iter().zip(w).enumerate().try_for_each(|(i, (g, w))| diff(g, w, &format!("{path}[{i}]")))
        }
        (Value::F32(g), Value::F32(w)) if g.to_bits() == w.to_bits() => Ok(()),
        (Value::F64(g), Value::F64(w)) if g.to_bits() == w.to_bits() => Ok(()),
        (Value::F32(_) | Value::F64(_), _) => {
            Err(format!("{path}: {} {got}, expected {} {want}", kind(got), kind(want)))
        }
        _ if kind(got) == kind(want) && got == want => Ok(()),
        _ => Err(format!("{path}: {} {got}, expected {} {want}", kind(got), kind(want))),
    }
}

#[test]
fn diff_sees_type_value_and_key_differences() {
    let want = map([("type", s("x")), ("n", u(5)), ("blob", Value::Binary(vec![1]))]);
    let reordered = map([("n", u(5)), ("blob", Value::Binary(vec![1])), ("type", s("x"))]);
    assert_eq!(diff(&reordered, &want, "$"), Ok(()));
    let as_bin = map([("type", Value::Binary(b"x".to_vec())), ("n", u(5)), ("blob", Value::Binary(vec![1]))]);
    assert!(diff(&as_bin, &want, "$").unwrap_err().contains("bin"));
    let other_int = map([("type", s("x")), ("n", u(6)), ("blob", Value::Binary(vec![1]))]);
    assert!(diff(&other_int, &want, "$").is_err());
    let extra = map([("type", s("x")), ("n", u(5)), ("blob", Value::Binary(vec![1])), ("z", nil())]);
    assert!(diff(&extra, &want, "$").unwrap_err().contains("unexpected key"));
    assert!(diff(&Value::F32(1.0), &Value::F64(1.0), "$").is_err());
    let dup = Value::Map(vec![(s("a"), nil()), (s("a"), nil())]);
    assert!(check_keys(&dup, "$").unwrap_err().contains("twice"));
    assert!(check_keys(&Value::Map(vec![(u(1), nil())]), "$").is_err());
}
