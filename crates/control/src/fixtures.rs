//! Fixtures into the store: the objects of a fixtures file (or the `--dev` demo fixtures) are
//! written as one change set, exactly as the API writes, and so reach the edges the same way.
//! Loading is an upsert: objects with the same keys are replaced, others are kept, so every node
//! of a cluster may load the same file at start.

use skua_core::RegistryData;
use skua_core::registry_store::{ApplyError, Change};
use skua_core::{RegistryStore, StoreError};

/// How often a load is retried after losing a compare-and-set race to another node.
const MAX_ATTEMPTS: usize = 16;

/// Why fixtures could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The store failed.
    #[error("writing the fixtures to the store failed")]
    Store(#[from] StoreError),
    /// The fixtures and the stored registry together do not form a valid registry.
    #[error("the fixtures conflict with the stored registry: {0}")]
    Invalid(String),
    /// Other writers kept winning.
    #[error("the registry kept changing while the fixtures were loaded")]
    Contended,
}

/// Writes every object of `fixtures` to `store` (replacing objects with the same keys).
///
/// # Errors
/// [`LoadError`].
pub async fn load(store: &dyn RegistryStore, fixtures: &RegistryData) -> Result<(), LoadError> {
    let changes: Vec<Change> = fixtures.objects().into_iter().map(Change::Put).collect();
    if changes.is_empty() {
        return Ok(());
    }
    for _ in 0..MAX_ATTEMPTS {
        let snap = store.load().await?;
        let mut merged = snap.data.clone();
        merged.apply(&changes);
        if merged == snap.data {
            return Ok(());
        }
        merged.build().map_err(|e| LoadError::Invalid(e.0))?;
        match store.apply(snap.version, &changes).await {
            Ok(_) => return Ok(()),
            Err(ApplyError::Conflict { .. }) => {}
            Err(ApplyError::Store(e)) => return Err(e.into()),
            Err(e) => return Err(LoadError::Invalid(e.to_string())),
        }
    }
    Err(LoadError::Contended)
}
