//! Integration tests of `skua-protocol`: golden fixtures in both directions, malformed input
//! and property tests (STYLE §3, §8). Fixtures live in `tests/fixtures/`; `SKUA_BLESS=1`
//! rewrites the server-frame fixtures, `tests/fixtures/gen_client_fixtures.py` the client ones.

mod client_golden;
mod fixtures;
mod malformed;
mod properties;
mod server_golden;
mod shape;
