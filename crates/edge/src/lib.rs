//! Skua's WebSocket edge: the NoLag client protocol over axum, the WebSocket door of a node
//! over its [`skua_engine::Engine`].
//!
//! Depends on the slot *traits* of `skua-core`, the codec of `skua-protocol` and the broker core
//! of `skua-engine` (publish, fan-out, retained, durable delivery, history, hydration, members,
//! triggers, revalidation, liveness, the outbound queue, counters), never on a concrete backend.
//! Modules:
//! - [`front`]: the accept loop: connection slots, header timeout, TLS, PROXY header,
//!   per-address limits, the `Origin` allowlist;
//! - [`door`]: other doors (MQTT devices) driving the same session with their own packets;
//! - [`ws`]: HTTP routes, upgrades, each connection's reader loop and writer task;
//! - `contain`: a connection task's panic closes that connection only;
//! - `session`: the per-connection protocol state machine and its frame handlers;
//! - [`auth`]: access tokens and client tokens (JWT), the per-address auth back-off;
//! - [`prom`]: the `/metrics` rendering of the engine's counters and the door's gauges;
//! - [`fds`]: the open-file limit and the upgrade budget it leaves;
//! - [`process`]: process metrics;
//! - [`node`]: starting and stopping the node: the engine's tasks, the listeners, the drain;
//! - [`state`]: the door's shared data over the engine (no tasks).
//!
//! The engine's modules are re-exported under the edge's paths ([`publish`], [`hub`],
//! [`config`], ...), so `skua_edge::publish::Publisher` names `skua_engine::publish::Publisher`.

pub mod auth;
mod close_code;
mod contain;
pub mod door;
pub mod fds;
pub mod front;
mod ip;
pub mod node;
pub mod process;
pub mod prom;
mod session;
pub mod state;
pub mod ws;

// The broker core lives in `skua-engine`; its modules stay reachable under the edge's paths
// (`skua_edge::publish::...`) for the crates and branches that name them there.
pub use skua_engine::{
    clock, config, durable, history, hub, hydrate, idempotency, ids, liveness, members, metrics, outbound, publish,
    ratelimit, restore_prune, retained, revalidate, small_map, timed, trace, triggers,
};

pub use config::EdgeConfig;
pub use node::{EdgeNode, Listeners, serve, serve_metrics};
pub use state::{Backends, EdgeState};
pub use ws::ApiRoutes;
