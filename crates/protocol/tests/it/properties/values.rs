//! Strategies for MessagePack values: `rmpv::Value` trees, and raw encodings that use every
//! width a value may legally be written in (not only the shortest), to test N2 on bytes.

use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use rmpv::Value;

/// Strings: mostly identifier-like, some arbitrary Unicode, some long enough for str8/str16.
pub fn text() -> BoxedStrategy<String> {
    prop_oneof![
        6 => "[a-zA-Z0-9_:./-]{0,24}",
        2 => "\\PC{0,12}",
        1 => "[a-z]{30,300}",
    ]
    .boxed()
}

fn leaf() -> BoxedStrategy<Value> {
    prop_oneof![
        Just(Value::Nil),
        any::<bool>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (0u64..300).prop_map(Value::from),
        any::<f32>().prop_map(Value::F32),
        any::<f64>().prop_map(Value::F64),
        text().prop_map(Value::from),
        vec(any::<u8>(), 0..40).prop_map(Value::Binary),
        (any::<i8>(), vec(any::<u8>(), 0..20)).prop_map(|(t, d)| Value::Ext(t, d)),
    ]
    .boxed()
}

/// Any tree, keys of any type (client data is opaque, N2).
pub fn tree() -> BoxedStrategy<Value> {
    leaf()
        .prop_recursive(4, 48, 8, |inner| {
            prop_oneof![
                vec(inner.clone(), 0..20).prop_map(Value::Array),
                vec((inner.clone(), inner), 0..8).prop_map(Value::Map),
            ]
        })
        .boxed()
}

/// A tree whose maps have distinct `str` keys (what a JSON-like payload looks like).
pub fn str_key_tree() -> BoxedStrategy<Value> {
    leaf()
        .prop_recursive(4, 48, 8, |inner| {
            prop_oneof![
                vec(inner.clone(), 0..20).prop_map(Value::Array),
                btree_map(text(), inner, 0..18)
                    .prop_map(|m| Value::Map(m.into_iter().map(|(k, v)| (Value::from(k), v)).collect())),
            ]
        })
        .boxed()
}

/// A map with distinct `str` keys (presence payloads are maps).
pub fn str_key_map() -> BoxedStrategy<Value> {
    btree_map(text(), str_key_tree(), 0..6)
        .prop_map(|m| Value::Map(m.into_iter().map(|(k, v)| (Value::from(k), v)).collect()))
        .boxed()
}

fn pick(candidates: &[Vec<u8>], w: usize) -> Vec<u8> {
    candidates[w % candidates.len()].clone()
}

fn uint_in_width(v: u64, w: usize) -> Vec<u8> {
    let mut c = Vec::new();
    if v <= 0x7f {
        c.push(vec![v as u8]);
    }
    if let Ok(x) = u8::try_from(v) {
        c.push(vec![0xcc, x]);
    }
    if let Ok(x) = u16::try_from(v) {
        c.push([&[0xcd][..], &x.to_be_bytes()].concat());
    }
    if let Ok(x) = u32::try_from(v) {
        c.push([&[0xce][..], &x.to_be_bytes()].concat());
    }
    c.push([&[0xcf][..], &v.to_be_bytes()].concat());
    pick(&c, w)
}

fn int_in_width(v: i64, w: usize) -> Vec<u8> {
    let mut c = Vec::new();
    if (-32..=127).contains(&v) {
        c.push(vec![v as u8]);
    }
    if let Ok(x) = i8::try_from(v) {
        c.push([&[0xd0][..], &x.to_be_bytes()].concat());
    }
    if let Ok(x) = i16::try_from(v) {
        c.push([&[0xd1][..], &x.to_be_bytes()].concat());
    }
    if let Ok(x) = i32::try_from(v) {
        c.push([&[0xd2][..], &x.to_be_bytes()].concat());
    }
    c.push([&[0xd3][..], &v.to_be_bytes()].concat());
    pick(&c, w)
}

/// A length header: `fix` (when `fix_max` allows), then 8-, 16- and 32-bit forms.
fn header(n: usize, fix: Option<(u8, usize)>, m8: Option<u8>, m16: u8, m32: u8, w: usize) -> Vec<u8> {
    let mut c = Vec::new();
    if let Some((f, max)) = fix
        && n <= max
    {
        c.push(vec![f | n as u8]);
    }
    if let (Some(m), Ok(x)) = (m8, u8::try_from(n)) {
        c.push(vec![m, x]);
    }
    if let Ok(x) = u16::try_from(n) {
        c.push([&[m16][..], &x.to_be_bytes()].concat());
    }
    c.push([&[m32][..], &u32::try_from(n).expect("small").to_be_bytes()].concat());
    pick(&c, w)
}

fn ext_in_width(t: i8, d: &[u8], w: usize) -> Vec<u8> {
    let fixed = match d.len() {
        1 => Some(0xd4),
        2 => Some(0xd5),
        4 => Some(0xd6),
        8 => Some(0xd7),
        16 => Some(0xd8),
        _ => None,
    };
    let mut c = Vec::new();
    if let Some(m) = fixed {
        c.push(vec![m]);
    }
    c.push(header(d.len(), None, Some(0xc7), 0xc8, 0xc9, 0));
    c.push(header(d.len(), None, Some(0xc7), 0xc8, 0xc9, 1));
    c.push(header(d.len(), None, Some(0xc7), 0xc8, 0xc9, 2));
    [pick(&c, w), t.to_be_bytes().to_vec(), d.to_vec()].concat()
}

/// One valid msgpack value written with randomly chosen (often non-shortest) widths.
pub fn raw_value() -> BoxedStrategy<Vec<u8>> {
    let leaf = prop_oneof![
        Just(vec![0xc0]),
        Just(vec![0xc2]),
        Just(vec![0xc3]),
        (any::<u64>(), 0..5usize).prop_map(|(v, w)| uint_in_width(v, w)),
        (0u64..300, 0..5usize).prop_map(|(v, w)| uint_in_width(v, w)),
        (any::<i64>(), 0..5usize).prop_map(|(v, w)| int_in_width(v, w)),
        (-200i64..200, 0..5usize).prop_map(|(v, w)| int_in_width(v, w)),
        any::<f32>().prop_map(|f| [&[0xca][..], &f.to_be_bytes()].concat()),
        any::<f64>().prop_map(|f| [&[0xcb][..], &f.to_be_bytes()].concat()),
        (text(), 0..4usize).prop_map(|(s, w)| {
            [header(s.len(), Some((0xa0, 31)), Some(0xd9), 0xda, 0xdb, w), s.into_bytes()].concat()
        }),
        (vec(any::<u8>(), 0..40), 0..3usize)
            .prop_map(|(b, w)| [header(b.len(), None, Some(0xc4), 0xc5, 0xc6, w), b].concat()),
        (any::<i8>(), vec(any::<u8>(), 0..20), 0..4usize).prop_map(|(t, d, w)| ext_in_width(t, &d, w)),
    ];
    leaf.prop_recursive(4, 48, 8, |inner| {
        prop_oneof![
            (vec(inner.clone(), 0..20), 0..3usize).prop_map(|(items, w)| {
                [header(items.len(), Some((0x90, 15)), None, 0xdc, 0xdd, w), items.concat()].concat()
            }),
            (vec((inner.clone(), inner), 0..8), 0..3usize).prop_map(|(kv, w)| {
                let head = header(kv.len(), Some((0x80, 15)), None, 0xde, 0xdf, w);
                [head, kv.into_iter().flat_map(|(k, v)| [k, v].concat()).collect()].concat()
            }),
        ]
    })
    .boxed()
}
