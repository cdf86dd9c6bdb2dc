//! Integration tests: the real server in process on port 0, driven over WebSockets.

mod abuse;
mod backend_tls;
mod bounds;
mod closes;
mod cluster;
mod control;
mod durable;
mod errors;
mod filters;
mod front;
mod fuzz;
mod limits;
mod lobby;
mod members;
mod ops;
mod presence;
mod promises;
mod propagation;
mod pubsub;
mod reconnect;
mod rest;
mod retained;
mod tls;
mod tokens;
mod triggers;
mod webhooks;
