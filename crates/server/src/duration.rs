//! Human-readable durations: `500ms`, `5s`, `10m`, `2h`, `1d` ([`skua_core::duration`]).

pub use skua_core::duration::parse;
