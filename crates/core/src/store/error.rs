//! The error every store slot operation returns: the floor under [`crate::store`],
//! [`crate::member_store`], [`crate::trigger_store`] and [`crate::registry_store`], which all
//! name it without naming each other.

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The backend is unreachable.
    #[error("store unavailable")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
}
