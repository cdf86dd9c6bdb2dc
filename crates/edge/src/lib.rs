//! Skua's WebSocket edge: the NoLag client protocol over axum.
//!
//! Depends on the slot *traits* of `skua-core` and the codec of `skua-protocol`, never on a
//! concrete backend. Modules:
//! - [`front`]: the accept loop: connection slots, header timeout, TLS, PROXY header,
//!   per-address limits, the `Origin` allowlist;
//! - [`door`]: other doors (MQTT devices) driving the same session with their own packets;
//! - [`ws`]: HTTP routes, upgrades, each connection's reader loop and writer task;
//! - `session`: the per-connection protocol state machine and its frame handlers;
//! - [`hub`]: the node's local fan-out (the hot path) and its bus subscriptions;
//! - [`hydrate`]: hydration on subscribe (N43): the [`hydrate::Hydrator`] seam and holding a
//!   subscription's live frames until its `hydration` frame;
//! - [`idempotency`]: idempotent publish, the pipeline's gate over the idempotency slot;
//! - [`publish`]: the publish pipeline every entry point uses, and its observer seam;
//! - [`outbound`]: the bounded per-connection queue and close requests;
//! - [`auth`]: access tokens and client tokens (JWT);
//! - [`liveness`]: node registration and healing the presence of lapsed nodes;
//! - [`members`]: persistent presence members and their wake (N46–N48);
//! - [`revalidate`]: applying control-plane changes to open connections;
//! - [`metrics`] and [`prom`]: counters and histograms, and their `/metrics` rendering;
//! - [`timed`]: latency accounting around the bus, presence and store slots;
//! - [`trace`]: spans for OTLP export (free when no endpoint is configured);
//! - `tls`: the client listener over TLS (`wss://`);
//! - [`node`]: starting and stopping the node: every task and listener, the drain;
//! - [`state`]: the shared data every connection sees (no tasks);
//! - [`durable`]: durable delivery and node-to-node control (takeovers, kicks);
//! - `restore_prune`: the periodic restore-record prune (never on a connection's release);
//! - [`triggers`]: trigger webhooks after accepted publishes: outbox, retries, dead letters;
//! - [`clock`], [`ids`], [`config`], [`ratelimit`].

pub mod auth;
pub mod clock;
pub mod config;
pub mod door;
pub mod durable;
mod durable_writer;
pub mod fds;
pub mod front;
pub mod history;
pub mod hub;
pub mod hydrate;
pub mod idempotency;
pub mod ids;
pub mod liveness;
pub mod members;
pub mod metrics;
pub mod node;
pub mod outbound;
pub mod process;
pub mod prom;
pub mod publish;
pub mod ratelimit;
mod restore_prune;
pub mod retained;
pub mod revalidate;
mod session;
pub mod small_map;
pub mod state;
pub mod timed;
pub mod trace;
pub mod triggers;
pub mod ws;

pub use config::EdgeConfig;
pub use node::{EdgeNode, Listeners, serve, serve_metrics};
pub use state::{Backends, EdgeState};
