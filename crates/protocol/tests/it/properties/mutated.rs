//! Structure-aware fuzzing of the client frame decoder and the filter parsers: valid encodings
//! (model frames, the Python SDK's golden frames, filter lists) mutated by [`super::mutate`]
//! (byte edits, truncations, duplicated spans, inflated and deflated length fields).
//!
//! Nothing may panic or allocate what a length field claims. A frame either decodes or is
//! refused with the protocol error (`invalid_frame` with a hint); where the mutated bytes are
//! still a canonically encoded msgpack map, the decoder agrees with the model of `decode.rs`.
//! Filter parsers return either well-formed keys or a `FilterError`, and valid filter lists
//! round-trip: parsing, re-encoding the parsed entries and parsing again changes nothing.

use proptest::collection::vec;
use proptest::prelude::*;
use rmpv::Value;
use skua_protocol::filters::{and_key, is_valid_value, parse_publish_filter, parse_subscription_filters};
use skua_protocol::{FilterError, FilterSpec};

use super::config;
use super::decode::{decoded_as_the_model_says, frame};
use super::filters::member;
use super::mutate::{apply, edits};
use crate::client_golden;
use crate::shape::{arr, pack, s};

/// A valid frame to mutate: a random model frame or one of the SDK's golden frames.
fn source() -> impl Strategy<Value = Vec<u8>> {
    let golden = client_golden::cases();
    prop_oneof![
        3 => frame().prop_map(|entries| pack(&Value::Map(entries))),
        1 => prop::sample::select(golden).prop_map(|(name, _)| client_golden::frame(name).to_vec()),
    ]
}

/// An entry of a subscription filter list: an OR string or an AND group.
#[derive(Debug, Clone)]
enum Entry {
    Or(String),
    And(Vec<String>),
}

fn filter_list() -> impl Strategy<Value = Vec<Entry>> {
    vec(prop_oneof![2 => member().prop_map(Entry::Or), 1 => vec(member(), 2..6).prop_map(Entry::And)], 0..12)
}

fn list_value(list: &[Entry]) -> Value {
    arr(list.iter().map(|e| match e {
        Entry::Or(m) => s(m),
        Entry::And(ms) => arr(ms.iter().map(|m| s(m))),
    }))
}

/// The encoding of parsed entries: OR strings as themselves, AND keys as their members.
fn specs_value(specs: &[FilterSpec]) -> Value {
    arr(specs.iter().map(|spec| match spec {
        FilterSpec::Or(x) => s(x),
        FilterSpec::And(key) => arr(key.split('|').map(s)),
    }))
}

/// Whether `key` is a normalised AND key of at least `min` members.
fn is_and_key(key: &str, min: usize) -> bool {
    let parts: Vec<&str> = key.split('|').collect();
    parts.len() >= min
        && parts.iter().all(|p| is_valid_value(p) && *p == p.to_lowercase())
        && parts.windows(2).all(|w| w[0] <= w[1])
}

fn check_subscription(got: &Result<Vec<FilterSpec>, FilterError>) -> Result<(), TestCaseError> {
    if let Ok(specs) = got {
        for spec in specs {
            match spec {
                FilterSpec::Or(x) => prop_assert!(is_valid_value(x), "invalid OR string {x:?}"),
                FilterSpec::And(k) => prop_assert!(is_and_key(k, 2), "malformed AND key {k:?}"),
            }
        }
    }
    Ok(())
}

fn check_publish(got: &Result<Option<String>, FilterError>, single: bool) -> Result<(), TestCaseError> {
    if let Ok(Some(k)) = got {
        let ok = if single { is_valid_value(k) } else { is_and_key(k, 1) };
        prop_assert!(ok, "malformed publish filter key {k:?}");
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(1024))]

    /// (a) Mutated frames decode or are refused, and agree with the model when still canonical.
    #[test]
    fn mutated_frames_decode_or_are_refused(src in source(), edits in edits(4)) {
        decoded_as_the_model_says(&apply(&src, &edits))?;
    }

    /// (b) Filter parsers on arbitrary bytes: a well-formed result or a `FilterError`.
    #[test]
    fn filter_parsers_give_well_formed_keys_or_errors_on_arbitrary_bytes(bytes in vec(any::<u8>(), 0..160)) {
        check_subscription(&parse_subscription_filters(&bytes))?;
        check_publish(&parse_publish_filter(None, Some(&bytes)), false)?;
        check_publish(&parse_publish_filter(Some(&bytes), None), true)?;
    }

    /// (b) Mutated filter lists: a well-formed result or a `FilterError`.
    #[test]
    fn mutated_filter_lists_parse_or_are_refused(list in filter_list(), edits in edits(4)) {
        let bytes = apply(&pack(&list_value(&list)), &edits);
        check_subscription(&parse_subscription_filters(&bytes))?;
        check_publish(&parse_publish_filter(None, Some(&bytes)), false)?;
        check_publish(&parse_publish_filter(Some(&bytes), None), true)?;
    }

    /// (b) Valid filter lists parse as written, and parsing is idempotent: re-encoding the
    /// parsed entries (AND keys as their members) parses to the same entries; each AND key
    /// is what a publish `filters` array of its members gives, each OR string what a
    /// publish `filter` gives.
    #[test]
    fn filter_lists_round_trip(list in filter_list()) {
        let expected: Vec<FilterSpec> = list
            .iter()
            .map(|e| match e {
                Entry::Or(m) => FilterSpec::Or(m.clone()),
                Entry::And(ms) => FilterSpec::And(and_key(ms.iter().map(String::as_str))),
            })
            .collect();
        let specs = parse_subscription_filters(&pack(&list_value(&list)));
        prop_assert_eq!(&specs, &Ok(expected.clone()));
        prop_assert_eq!(parse_subscription_filters(&pack(&specs_value(&expected))), Ok(expected.clone()));
        for spec in &expected {
            match spec {
                FilterSpec::Or(x) => prop_assert_eq!(parse_publish_filter(Some(&pack(&s(x))), None), Ok(Some(x.clone()))),
                FilterSpec::And(k) => {
                    let members = arr(k.split('|').map(s));
                    prop_assert_eq!(parse_publish_filter(None, Some(&pack(&members))), Ok(Some(k.clone())));
                }
            }
        }
    }
}
