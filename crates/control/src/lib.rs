//! Skua's control plane (issue 5): the `skua.control.v1` gRPC API over the registry store,
//! and the propagation of every change to every edge.
//!
//! Depends on `skua-core` and `skua-protocol` only: what it needs from the node it runs in is
//! the [`NodeAdmin`] trait (`skua_core::node`), which the engine implements. Modules:
//! - [`pb`]: messages, client and server generated from `proto/skua/control/v1/control.proto`
//!   at build time (protox, no `protoc`);
//! - [`service`]: [`ControlService`], one handler module per resource, with [`validate`] for
//!   input checks, and the typed refusal [`service::Error`] each door maps once; every door
//!   below calls these;
//! - [`grpc`]: the gRPC door: the RPC mapping, serving it with health, reflection, TLS and the
//!   admin-key check ([`server`]), and the back-off of failing keys ([`throttle`]);
//! - [`rest`]: the REST API under `/v1`;
//! - [`dashboard`]: the admin dashboard under `/admin` (issue 20), one module per page;
//! - [`node`]: the node interface ([`NodeAdmin`]) and the types it passes, re-exported from
//!   `skua_core::node`;
//! - [`sync`]: [`Propagator`], which keeps a node's registry in step with the store;
//! - [`settings`]: the control plane's settings, checked into its typed configurations;
//! - [`fixtures`]: loading fixtures into the store through the same change sets;
//! - [`webhooks`]: the checks of webhook configuration and the secret's generation (N41).

pub mod dashboard;
pub mod fixtures;
pub mod grpc;
pub mod node;
pub mod rest;
pub mod service;
pub mod settings;
pub mod sync;
pub mod validate;
pub mod webhooks;

/// Generated from `proto/skua/control/v1/control.proto`; the proto documents every field.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod pb {
    tonic::include_proto!("skua.control.v1");
    /// Encoded descriptors of `skua.control.v1`, for the reflection service.
    pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/control_descriptor.bin"));
}

pub use grpc::{server, throttle};
pub use node::{ConnectionInfo, NodeAdmin, NodeStats, PublishRefused, RecentWebhook, ServerPublish, ServerPublished};
pub use service::{ControlLimits, ControlService};
pub use settings::ControlSettings;
pub use sync::Propagator;
pub use webhooks::{WebhookConfigError, WebhookPolicy};
