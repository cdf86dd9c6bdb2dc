//! `skua-bench`: a bounded, loopback-only load generator for Skua and the brokers people compare
//! it with, plus `skua-bare`, a broker-less WebSocket fan-out server that marks the floor.
//!
//! What it owns, and how it is laid out:
//! - [`wire`]: the one small trait a protocol adapter implements ([`wire::Wire`]) and the four
//!   adapters: NoLag (Skua), MQTT 3.1.1 over WebSocket, NATS over WebSocket, and `bare`;
//! - [`payload`]: the benchmark payload (publisher id, sequence number, send time);
//! - [`track`]: per-subscriber loss / duplicate / reorder tracking and latency histograms;
//! - [`procfs`]: server CPU time and RSS from `/proc`;
//! - [`target`]: loopback-only target parsing and `--spawn-skua`;
//! - [`ws`]: a minimal WebSocket client (the tungstenite client cost more CPU than the servers);
//! - [`conn`]: connecting, logging in and subscribing over any adapter;
//! - [`scenario`]: `fanout`, `pairs`, `logged` (one traffic engine), `idle`, `churn`, `rest`
//!   (`POST /v1/publish` over keep-alive HTTP/1.1, hyper's client) and `storm`;
//! - [`summary`]: the result of a run, as a human summary and one JSON line;
//! - [`report`]: turns collected JSON lines into the markdown tables of `docs/benchmarks.md`;
//! - [`fixtures`]: the bench fixtures TOML that `skua serve --fixtures` loads next to `--dev`;
//! - [`receiver`]: the always-ok trigger webhook receiver of `--triggers`;
//! - [`metrics`]: Skua's store operation counts from its `/metrics` (`logged`).
//!
//! It depends on `skua-protocol` for the MessagePack reader and writer only; nothing here knows
//! Skua's internals, so the same code measures every server the same way.

pub mod conn;
pub mod fixtures;
pub mod json;
pub mod metrics;
pub mod payload;
pub mod procfs;
pub mod receiver;
pub mod report;
pub mod scenario;
pub mod summary;
pub mod target;
pub mod track;
pub mod wire;
pub mod ws;
