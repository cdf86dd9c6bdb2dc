//! Skua's broker core: everything a node does with a message once a door (the WebSocket edge,
//! the control plane's REST and gRPC APIs, later MQTT) has accepted it.
//!
//! Depends on the slot *traits* of `skua-core` and the codec of `skua-protocol`, never on a
//! concrete backend nor on a door's transport (no axum, hyper or tungstenite). Every webhook
//! request (trigger, hydration, wake) goes through one seam, `skua_core::webhook::Poster`,
//! given in [`Backends::webhooks`]. Modules:
//! - `engine`: the [`Engine`] handle every door holds, and [`Engine::start`], which builds it
//!   over the [`Backends`] and starts its node-level tasks ([`EngineTasks`]);
//! - `admin`: the control plane's node interface (`skua_core::node::NodeAdmin`), implemented
//!   by [`Engine`];
//! - [`publish`]: the publish pipeline every entry point uses, and its observer seam;
//! - [`hub`]: the node's local fan-out (the hot path) and its bus subscriptions;
//! - [`retained`]: the retained message of each topic and their byte budget;
//! - [`durable`]: durable delivery and node-to-node control (takeovers, kicks);
//! - `durable_writer`: the store writers behind durable claims and acks;
//! - [`history`]: topic history and replay;
//! - [`hydrate`]: hydration on subscribe (N43): the request through the node's webhook seam
//!   and holding a subscription's live frames until its `hydration` frame;
//! - [`idempotency`]: idempotent publish, the pipeline's gate over the idempotency slot;
//! - [`members`]: persistent presence members and their wake (N46–N48);
//! - [`revalidate`]: the table of authenticated connections and applying control-plane changes
//!   to them;
//! - [`liveness`]: node registration and healing the presence of lapsed nodes;
//! - [`triggers`]: trigger webhooks after accepted publishes: outbox, retries, dead letters;
//! - [`outbound`]: the bounded per-connection queue of encoded frames and close requests, for
//!   every door;
//! - [`metrics`]: counters and histograms (a door renders them, e.g. the edge's `/metrics`);
//! - [`timed`]: latency accounting around the bus, presence and store slots;
//! - [`trace`]: spans for OTLP export (free when no endpoint is configured);
//! - [`restore_prune`]: the periodic restore-record prune (never on a connection's release);
//! - [`clock`], [`ids`], [`config`], [`ratelimit`], [`small_map`].

mod admin;
mod backends;
pub mod clock;
pub mod config;
pub mod durable;
mod durable_writer;
mod engine;
pub mod history;
pub mod hub;
pub mod hydrate;
pub mod idempotency;
pub mod ids;
pub mod liveness;
pub mod members;
pub mod metrics;
pub mod outbound;
pub mod publish;
pub mod ratelimit;
pub mod readiness;
pub mod restore_prune;
pub mod retained;
pub mod revalidate;
pub mod small_map;
pub mod timed;
pub mod trace;
pub mod triggers;

pub use backends::Backends;
pub use config::EdgeConfig;
pub use engine::{Engine, EngineTasks, ProjectSlot};
