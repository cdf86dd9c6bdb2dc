//! Filter normalisation (N12, N32): AND keys ignore member order and (ASCII) case, and a
//! publish's `filters` array meets a subscription's AND group of the same strings.
//!
//! Case is flipped on ASCII letters only: full Unicode lowercasing is context dependent
//! (`"ΑΣ"` lowercases to `"ας"`, `"Ασ"` to `"ασ"`), so "case-insensitive" cannot hold for every
//! script; members are still lowercased with `str::to_lowercase` as N12 says.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::{Index, select};
use rmpv::Value;
use skua_protocol::filters::{MAX_FILTERS, RESERVED_CHARS, and_key, parse_publish_filter, parse_subscription_filters};
use skua_protocol::{FilterError, FilterSpec};

use super::config;
use crate::shape::{arr, pack, s};

/// A valid filter value: mostly ASCII, sometimes any non-reserved Unicode.
pub(super) fn member() -> BoxedStrategy<String> {
    prop_oneof![4 => "[a-zA-Z0-9:_.-]{1,12}", 1 => "[^/#+|]{1,8}"].boxed()
}

fn strs(members: &[String]) -> Value {
    arr(members.iter().map(|m| s(m)))
}

fn flip_ascii_case(v: &str, mask: &[bool], offset: usize) -> String {
    v.chars()
        .enumerate()
        .map(|(i, c)| {
            if mask.get(offset + i).copied().unwrap_or(false) {
                if c.is_ascii_lowercase() { c.to_ascii_uppercase() } else { c.to_ascii_lowercase() }
            } else {
                c
            }
        })
        .collect()
}

/// `members` plus a shuffled copy with some ASCII letters' case flipped.
fn group(sizes: std::ops::RangeInclusive<usize>) -> impl Strategy<Value = (Vec<String>, Vec<String>)> {
    vec(member(), sizes).prop_flat_map(|m| (Just(m.clone()), Just(m).prop_shuffle(), vec(any::<bool>(), 200))).prop_map(
        |(m, shuffled, mask)| {
            let mut offset = 0;
            let other = shuffled
                .iter()
                .map(|x| {
                    offset += x.chars().count();
                    flip_ascii_case(x, &mask, offset - x.chars().count())
                })
                .collect();
            (m, other)
        },
    )
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn and_key_ignores_order_and_case((members, variant) in group(1..=12)) {
        let key = and_key(members.iter().map(String::as_str));
        prop_assert_eq!(&key, &and_key(variant.iter().map(String::as_str)));
        // The key is the members lowercased, sorted and joined with `|`.
        let parts: Vec<&str> = key.split('|').collect();
        prop_assert_eq!(parts.len(), members.len());
        prop_assert!(parts.windows(2).all(|w| w[0] <= w[1]), "not sorted: {key}");
        let mut lowered: Vec<String> = members.iter().map(|m| m.to_lowercase()).collect();
        lowered.sort();
        prop_assert_eq!(parts, lowered.iter().map(String::as_str).collect::<Vec<_>>());
    }

    /// A publish `filters` array and a subscription AND group (≥ 2 members) of the same
    /// strings, in any order and case, produce one key, so the message is delivered.
    #[test]
    fn publish_filters_meet_subscription_and_groups((members, variant) in group(2..=40)) {
        let key = and_key(members.iter().map(String::as_str));
        let sub = parse_subscription_filters(&pack(&arr([strs(&members)])));
        prop_assert_eq!(sub, Ok(vec![FilterSpec::And(key.clone())]));
        prop_assert_eq!(parse_publish_filter(None, Some(&pack(&strs(&members)))), Ok(Some(key.clone())));
        prop_assert_eq!(parse_publish_filter(None, Some(&pack(&strs(&variant)))), Ok(Some(key)));
    }

    /// OR strings are kept verbatim, in order.
    #[test]
    fn or_strings_are_verbatim(members in vec(member(), 0..=40)) {
        let got = parse_subscription_filters(&pack(&strs(&members)));
        prop_assert_eq!(got, Ok(members.into_iter().map(FilterSpec::Or).collect::<Vec<_>>()));
    }

    /// A reserved character anywhere, in an OR string, an AND member or a publish member, is
    /// `invalid_filter_chars` on every path.
    #[test]
    fn reserved_characters_are_refused_everywhere(
        members in vec(member(), 2..=10),
        which in any::<Index>(),
        at in any::<Index>(),
        bad in select(&RESERVED_CHARS[..]),
    ) {
        let mut members = members;
        let i = which.index(members.len());
        let chars: Vec<char> = members[i].chars().collect();
        let pos = at.index(chars.len() + 1);
        members[i] = chars[..pos].iter().chain([bad].iter()).chain(chars[pos..].iter()).collect();
        let invalid = Err(FilterError::InvalidChars);
        prop_assert_eq!(parse_subscription_filters(&pack(&strs(&members))), invalid.clone());
        prop_assert_eq!(parse_subscription_filters(&pack(&arr([strs(&members)]))), invalid.clone());
        prop_assert_eq!(parse_publish_filter(None, Some(&pack(&strs(&members)))), Err(FilterError::InvalidChars));
        prop_assert_eq!(parse_publish_filter(Some(&pack(&s(&members[i]))), None), Err(FilterError::InvalidChars));
    }
}

#[test]
fn limits_are_one_hundred_entries() {
    let list = |n: usize| (0..n).map(|i| format!("Tag{i}")).collect::<Vec<_>>();
    let hundred = list(MAX_FILTERS);
    let key = and_key(hundred.iter().map(String::as_str));
    assert_eq!(parse_publish_filter(None, Some(&pack(&strs(&hundred)))), Ok(Some(key.clone())));
    assert_eq!(parse_subscription_filters(&pack(&arr([strs(&hundred)]))), Ok(vec![FilterSpec::And(key)]));
    let over = list(MAX_FILTERS + 1);
    assert_eq!(parse_publish_filter(None, Some(&pack(&strs(&over)))), Err(FilterError::TooMany));
    assert_eq!(parse_subscription_filters(&pack(&strs(&over))), Err(FilterError::TooMany));
}
