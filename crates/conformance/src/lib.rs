//! Behavioural suites for the backend slots (STYLE.md §2): one per slot trait, run against every
//! implementation of it, and the few test helpers the backend crates need besides. Depends on
//! `skua-core` only (never on the server, the edge or the control plane), so a backend crate's
//! tests build without the node.
//!
//! Each suite is a module of test *bodies*, `pub async fn case<H: Harness>(h: H)`, one per
//! sentence of the trait's contract, plus a macro that turns every body into a `#[tokio::test]`
//! for one implementation:
//!
//! - [`bus`]: [`BusHarness`](bus::BusHarness) and [`bus_conformance!`](crate::bus_conformance);
//! - [`presence`]: [`PresenceHarness`](presence::PresenceHarness) and
//!   [`presence_conformance!`](crate::presence_conformance);
//! - [`store`]: [`StoreHarness`](store::StoreHarness) and
//!   [`store_conformance!`](crate::store_conformance);
//! - [`registry`]: [`RegistryHarness`](registry::RegistryHarness) and
//!   [`registry_store_conformance!`](crate::registry_store_conformance).
//!
//! Each macro takes either a harness expression, evaluated once per test
//! (`bus_conformance!(InProcessHarness::new())`), or `setup = <future>` for a harness that needs
//! async set-up or an external service: the future yields `Option<H>`, and `None` skips the test
//! (the set-up prints why, and fails instead under `CI=true`, STYLE.md §8). The tests run on a
//! two-worker multi-thread runtime, so the calling crate needs `tokio` as a dev-dependency.
//!
//! Waiting is always on an event with a deadline ([`DEADLINE`]); "nothing else arrives" is shown
//! by publishing a sentinel afterwards and asserting that it is the next delivery.
//!
//! The helpers:
//! - [`skip`]: skipping a test whose service is missing, visibly (and failing under `CI=true`);
//! - [`ports`]: private services on free ports, restarted on another port when one was taken;
//! - `postgres` (feature `postgres`): a fresh Postgres database per test;
//! - `webhook` (feature `webhook-receiver`): a recording HTTP receiver for webhook tests and a
//!   URL that refuses connections.
//!
//! `skua-testkit` re-exports the helpers for the node's tests.

use std::fmt::Display;
use std::future::IntoFuture;
use std::time::Duration;

pub mod bus;
pub mod ports;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod presence;
pub mod registry;
pub mod skip;
pub mod store;
#[cfg(feature = "webhook-receiver")]
pub mod webhook;

#[cfg(feature = "webhook-receiver")]
pub use webhook::{Mode as ReceiverMode, RecordedRequest, WebhookReceiver, refusing_url};

/// How long a suite waits for one expected event before failing.
pub const DEADLINE: Duration = Duration::from_secs(5);

/// Awaits `fut`, panicking with `what` if it takes longer than [`DEADLINE`].
///
/// # Panics
/// When the deadline passes.
pub async fn within<F: IntoFuture>(what: impl Display, fut: F) -> F::Output {
    match tokio::time::timeout(DEADLINE, fut).await {
        Ok(out) => out,
        Err(_) => panic!("timed out after {DEADLINE:?} waiting for {what}"),
    }
}

/// Expands to one `#[tokio::test]` per case of `$suite`; used by the suite macros.
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_tests {
    ($suite:ident, make, $make:expr; $($case:ident),+ $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $case() {
            $crate::$suite::$case($make).await;
        }
    )+};
    ($suite:ident, setup, $setup:expr; $($case:ident),+ $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $case() {
            let Some(harness) = $setup.await else { return };
            $crate::$suite::$case(harness).await;
        }
    )+};
}
