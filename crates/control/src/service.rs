//! [`ControlService`]: the control plane's service, which every door calls (gRPC, REST, the
//! dashboard). Reads come from the
//! node's registry snapshot (refreshed from the store first); writes are change sets computed
//! against that snapshot and applied with the store's compare-and-set on the registry version,
//! retried on a conflict, so concurrent control replicas never lose each other's writes and
//! every check (uniqueness, caps, references) holds against the data actually written.
//!
//! `grpc/rpc.rs` maps each RPC to its handler in one file per resource (`projects`, `apps`,
//! `rooms`, `actors`, `grants`, `lobbies`, `publish`, `connections`); what they share (look-ups,
//! checks, delete cascades, paging) is in `service/shared.rs`; conversions to protobuf in
//! `service/convert.rs`; a refusal is an [`Error`] (`service/error.rs`), mapped once by each
//! door.

pub(crate) mod actors;
pub(crate) mod annotations;
pub(crate) mod api_keys;
pub(crate) mod apps;
pub(crate) mod connections;
pub(crate) mod convert;
pub mod error;
pub(crate) mod grants;
pub(crate) mod lobbies;
pub(crate) mod projects;
pub(crate) mod publish;
pub(crate) mod rooms;
pub(crate) mod scopes;
pub(crate) mod shared;
pub(crate) mod webhooks;

pub use error::{Code, Error};

use std::sync::Arc;

use skua_core::registry_store::{ApplyError, Change};
use skua_core::{RegistryData, StoreError};

use crate::sync::Propagator;

/// How often a write is retried after losing a compare-and-set race.
const MAX_ATTEMPTS: usize = 8;

pub use crate::settings::ControlLimits;

/// The control-plane service of one node.
pub struct ControlService {
    pub(crate) sync: Arc<Propagator>,
    limits: ControlLimits,
    pub(crate) webhooks: crate::WebhookPolicy,
}

impl std::fmt::Debug for ControlService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlService")
            .field("limits", &self.limits)
            .field("webhooks", &self.webhooks)
            .finish_non_exhaustive()
    }
}

/// `UNAVAILABLE` for a store failure; the cause is logged, not sent.
pub(crate) fn unavailable(e: &StoreError) -> Error {
    tracing::warn!(error = e as &dyn std::error::Error, "Control-plane request failed in the store.");
    Error::unavailable("the store is unreachable; retry shortly")
}

impl ControlService {
    /// A service writing through `sync`'s store and serving `sync`'s node.
    pub fn new(sync: Arc<Propagator>, limits: ControlLimits) -> Self {
        Self { sync, limits, webhooks: crate::WebhookPolicy::default() }
    }

    /// Checks webhook URLs with `policy` instead of the default (no link-local, any host).
    #[must_use]
    pub fn with_webhook_policy(mut self, policy: crate::WebhookPolicy) -> Self {
        self.webhooks = policy;
        self
    }

    /// The registry as of now: the snapshot, refreshed from the store when it moved (a failing
    /// store serves the last snapshot).
    pub(crate) async fn read(&self) -> Arc<skua_core::RegistrySnapshot> {
        if let Err(e) = self.sync.refresh().await {
            tracing::debug!(error = &e as &dyn std::error::Error, "Serving a read from the last registry.");
        }
        self.sync.snapshot()
    }

    /// Computes a change set with `f` against the current registry and applies it; on a
    /// concurrent write, reloads and recomputes.
    pub(crate) async fn mutate<R>(
        &self,
        f: impl Fn(&RegistryData) -> Result<(Vec<Change>, R), Error>,
    ) -> Result<R, Error> {
        for _ in 0..MAX_ATTEMPTS {
            let snap = self.sync.snapshot();
            let (changes, r) = f(&snap.data)?;
            if changes.is_empty() {
                return Ok(r);
            }
            match self.sync.store().apply(snap.version, &changes).await {
                Ok(version) => {
                    self.sync.applied(&snap, &changes, version);
                    return Ok(r);
                }
                Err(ApplyError::Conflict { .. }) => {
                    self.sync.refresh().await.map_err(|e| unavailable(&e))?;
                }
                Err(ApplyError::Store(e)) => return Err(unavailable(&e)),
                Err(e) => return Err(Error::internal(e.to_string())),
            }
        }
        Err(Error::aborted("the registry kept changing concurrently; retry"))
    }

    /// The registry as last loaded (no store round trip), for the REST API's key checks.
    pub(crate) fn snapshot(&self) -> Arc<skua_core::RegistrySnapshot> {
        self.sync.snapshot()
    }

    /// The caps this service enforces.
    pub(crate) fn limits(&self) -> &ControlLimits {
        &self.limits
    }

    pub(crate) fn page_size(&self, requested: u32) -> usize {
        let max = self.limits.max_page_size.max(1);
        (if requested == 0 { max.min(100) } else { requested.min(max) }) as usize
    }
}
