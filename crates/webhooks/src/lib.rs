//! Skua's webhook delivery engine (N41–N45): one pooled HTTP/1.1 client (hyper's client
//! connection API, rustls with ring for `https`) that POSTs signed JSON bodies with timeouts, retries with
//! backoff, a concurrency limit per target, a bounded response read, metrics per kind and
//! outcome, and a tracing span per delivery. Every delivery runs on its caller's task; the
//! queue of triggers is the engine's (`skua_engine::triggers`).
//!
//! Depends on `skua-core` only (for [`WebhookCall`], the address rule and the
//! [`skua_core::webhook::Poster`] seam it implements); it knows nothing of
//! the edge, the store or the wire. Modules:
//! - [`request`]: [`WebhookRequest`], the body with `deliveryId` and `timestamp`, and signing;
//! - [`config`]: [`WebhookConfig`], the engine's checked configuration, and [`RetrySchedule`];
//! - [`outcome`]: how a delivery ends, [`WebhookResponse`] or [`DeliveryError`];
//! - [`sender`]: [`WebhookSender`], the node's [`skua_core::webhook::Poster`]: calls with
//!   retries within a deadline ([`WebhookSender::call`]) and single attempts
//!   ([`WebhookSender::post_once`]);
//! - `client`: the HTTP/1.1 client (keep-alive pool per origin, address rules, bounded answers);
//! - [`resolve`]: the DNS resolver that refuses link-local and metadata addresses at send time;
//! - `rule`: the address rule each kind adds (hydration, triggers, wake), read by both;
//! - [`metrics`]: [`WebhookMetrics`], rendered in the Prometheus text format;
//! - [`settings`]: [`WebhookSettings`], the engine's settings as flags, variables and keys.
//!
//! `https` uses ring explicitly (whatever provider the process installed) and the system's
//! root certificates.

mod client;
pub mod config;
pub mod metrics;
pub mod outcome;
pub mod recent;
pub mod request;
pub mod resolve;
mod rule;
pub mod sender;
pub mod settings;

pub use config::{RetrySchedule, WebhookConfig};
pub use metrics::WebhookMetrics;
pub use outcome::{DeliveryError, WebhookResponse};
pub use recent::{RecentDeliveries, RecentDelivery};
pub use request::{SIGNATURE_HEADER, SIGNATURE_V2_HEADER, WebhookRequest, sign, sign_v2};
pub use sender::WebhookSender;
pub use settings::WebhookSettings;
pub use skua_core::webhook::{WebhookCall, WebhookKind, WebhookTarget};
