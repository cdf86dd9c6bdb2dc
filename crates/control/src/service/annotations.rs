//! The free-form fields of apps, rooms and actors (`description`, `externalId`, `metadata`)
//! and of grants (`role`, `metadata`), issue 31: bounded, checked here, stored in the records
//! and returned, never interpreted. The REST API sets them; gRPC shows them.

use crate::service::Error;
use skua_core::registry_store::AnnotationsRecord;

use crate::pb;
use crate::validate;

/// A change to an object's annotations: `None` keeps a field, `Some(None)` clears it,
/// `Some(Some(v))` sets it. `metadata` is compact JSON text of an object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct AnnotationsUpdate {
    /// `description`.
    pub(crate) description: Option<Option<String>>,
    /// `externalId`.
    pub(crate) external_id: Option<Option<String>>,
    /// `metadata`.
    pub(crate) metadata: Option<Option<String>>,
}

impl AnnotationsUpdate {
    /// Whether it changes nothing.
    pub(crate) fn is_empty(&self) -> bool {
        self.description.is_none() && self.external_id.is_none() && self.metadata.is_none()
    }

    /// Checks every field it sets against the bounds.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` naming the field as the REST API spells it.
    pub(crate) fn check(&self) -> Result<(), Error> {
        if let Some(Some(d)) = &self.description {
            validate::description("description", d)?;
        }
        if let Some(Some(x)) = &self.external_id {
            validate::short_text("externalId", x, validate::MAX_EXTERNAL_ID_BYTES)?;
        }
        if let Some(Some(m)) = &self.metadata {
            validate::metadata("metadata", m)?;
        }
        Ok(())
    }

    /// Applies it to `r`.
    pub(crate) fn apply(&self, r: &mut AnnotationsRecord) {
        let set = |field: &mut Option<String>, to: &Option<Option<String>>| {
            if let Some(v) = to {
                field.clone_from(&v.clone().filter(|s| !s.is_empty()));
            }
        };
        set(&mut r.description, &self.description);
        set(&mut r.external_id, &self.external_id);
        set(&mut r.metadata, &self.metadata);
    }

    /// The record of a new object.
    pub(crate) fn record(&self) -> AnnotationsRecord {
        let mut r = AnnotationsRecord::default();
        self.apply(&mut r);
        r
    }
}

/// The gRPC message of `r` (`None` when every field is unset).
pub(crate) fn message(r: &AnnotationsRecord) -> Option<pb::Annotations> {
    (*r != AnnotationsRecord::default()).then(|| pb::Annotations {
        description: r.description.clone().unwrap_or_default(),
        external_id: r.external_id.clone().unwrap_or_default(),
        metadata_json: r.metadata.clone().unwrap_or_default(),
    })
}
