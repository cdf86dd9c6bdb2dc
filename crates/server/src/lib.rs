//! The `skua` binary's library: configuration layering, fixtures, backend selection and node
//! lifecycle. `main.rs` only parses the command line, installs logging and waits for signals;
//! tests start nodes through [`node::RunningNode`] directly.

pub mod admin;
pub mod cert_expiry;
pub mod config;
pub mod duration;
pub mod errors;
pub mod fixtures;
pub mod node;
pub mod telemetry;
pub mod tls;

pub use config::{ServerConfig, Settings};
pub use node::RunningNode;
