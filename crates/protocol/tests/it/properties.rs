//! Property tests (proptest): the decoder never panics and agrees with a model of N3/N31 on
//! random frames, payloads survive byte for byte (N2), filter keys normalise as N12 says, and
//! every encoded server frame is a map with `str` keys that matches the documented shape (N1).
//! The fuzz properties (random and structure-aware mutated input for the decoder and the filter
//! parsers) take their case count from `PROPTEST_CASES` when it is set: docs/security.md.

use proptest::prelude::ProptestConfig;

mod decode;
mod filters;
mod mutate;
mod mutated;
mod server;
mod values;

/// A property's number of cases: `PROPTEST_CASES` when set (a longer fuzz pass), otherwise
/// `default`, chosen so the whole suite stays well under a minute in CI.
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A proptest config with [`cases`] cases and no failure file (regressions are kept as named
/// tests instead).
pub fn config(default: u32) -> ProptestConfig {
    ProptestConfig { cases: cases(default), failure_persistence: None, ..ProptestConfig::default() }
}
