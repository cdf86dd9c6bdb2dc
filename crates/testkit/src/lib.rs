//! Test harness for Skua (a dev-dependency, used only from `tests/`).
//!
//! - [`server`]: [`TestServer`], a real node in process on port 0, plus token helpers;
//! - [`cluster`]: [`TestCluster`], several nodes on shared embedded or external backends;
//! - [`client`]: [`WsClient`], a raw protocol client, and [`Frame`], a decoded server frame;
//! - [`http`]: plain HTTP requests (`/readyz`, `/metrics`) and a Prometheus text reader;
//! - [`process`]: real `skua`, Mosquitto and Redis processes for fault tests;
//! - [`proxy`]: a TCP proxy a test can cut, to make a real service unreachable;
//! - [`postgres`]: a fresh migrated Postgres database per test;
//! - [`skip`]: skipping a test whose service is missing, visibly (and failing under `CI=true`),
//!   from `skua-conformance`;
//! - [`control`]: control-plane gRPC clients and a deadline poller for propagation tests;
//! - [`webhook`]: a recording HTTP receiver for webhook tests (ok, slow, error, non-JSON, huge,
//!   hanging) and a URL that refuses connections, from `skua-conformance`.
//!
//! The slot conformance suites are in `skua-conformance`, which the backend crates' tests use
//! without building the node.

pub mod client;
pub mod cluster;
pub mod control;
pub mod http;
pub mod postgres;
pub mod process;
pub mod proxy;
pub mod server;

pub use client::{Event, Frame, WsClient, encode};
pub use cluster::TestCluster;
pub use server::{TEST_ADMIN_KEY, TestServer, dev_jwt, jwt_with_secret, now_s};
pub use skua_conformance::{ReceiverMode, RecordedRequest, WebhookReceiver, ports, refusing_url, skip, webhook};
