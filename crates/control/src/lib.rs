//! Skua's control plane (issue 5): the `skua.control.v1` gRPC API over the registry store,
//! and the propagation of every change to every edge.
//!
//! Depends on `skua-core` only: what it needs from the node it runs in is the [`NodeAdmin`]
//! trait (`skua_core::node`), which the engine implements. Modules:
//! - [`pb`]: messages, client and server generated from `proto/skua/control/v1/control.proto`
//!   at build time (protox, no `protoc`);
//! - [`service`]: [`ControlService`], the RPC handlers, with [`validate`] for input checks;
//! - [`server`]: serving it with health, reflection, TLS and the admin-key check;
//! - [`throttle`]: backing off addresses that fail the admin-key check;
//! - [`sync`]: [`Propagator`], which keeps a node's registry in step with the store;
//! - [`fixtures`]: loading fixtures into the store through the same change sets;
//! - [`dashboard`]: the admin dashboard under `/admin` (issue 20);
//! - [`webhooks`]: the checks of webhook configuration and the secret's generation (N41).

pub mod dashboard;
pub mod fixtures;
pub mod rest;
pub mod server;
pub mod service;
pub mod settings;
pub mod sync;
pub mod throttle;
pub mod validate;
pub mod webhooks;

/// Generated from `proto/skua/control/v1/control.proto`; the proto documents every field.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod pb {
    tonic::include_proto!("skua.control.v1");
    /// Encoded descriptors of `skua.control.v1`, for the reflection service.
    pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/control_descriptor.bin"));
}

pub use service::{ControlLimits, ControlService};
pub use settings::ControlSettings;
pub use sync::{
    ConnectionInfo, NodeAdmin, NodeStats, Propagator, PublishRefused, RecentWebhook, ServerPublish, ServerPublished,
};
pub use webhooks::{WebhookConfigError, WebhookPolicy};
