//! Server-side apply and `metadata.managedFields` bookkeeping, as upstream's
//! structured-merge-diff and field manager do them, without I/O.
//!
//! - [`apply`]: merges an applied configuration into the live object, prunes what the manager
//!   stopped applying, detects [`Conflict`]s (or, with `force`, takes ownership), and records
//!   the manager's fields in `metadata.managedFields`.
//! - [`update_managed_fields`]: after a create, update or patch, gives the fields that changed
//!   to the writing manager (operation `Update`) and takes them from the others.
//! - [`FieldSet`]: sets of field [`Path`]s with the `fieldsV1` encoding; [`field_set`] computes
//!   the set of an object from its schema.
//! - [`ManagedFieldsEntry`]: reading ([`managed_fields_of`]) and writing managedFields.
//!
//! How fields merge comes from a [`PatchSchema`](crate::patch::PatchSchema): list types
//! (`atomic`, `set`, `map` with keys), map types (`atomic`, `granular`); unknown fields are
//! untyped (objects granular, lists atomic). Fields are compared across apiVersions as they
//! are: no conversion between versions is done.

mod conflict;
mod fieldset;
mod managed;
mod ops;
mod path;
mod typed;

#[cfg(test)]
mod tests;

pub use conflict::{conflict_message, Conflict};
pub use fieldset::{FieldSet, FieldsV1Error, MAX_FIELDS_DEPTH};
pub use managed::{
    managed_fields_of, parse_managed_fields, set_managed_fields, ManagedFieldsEntry,
    ManagedFieldsError, Operation,
};
pub use ops::{apply, field_set, update_managed_fields, WriteContext, BEFORE_FIRST_APPLY};
pub use path::{Path, PathElement};
pub use typed::{ShapeError, MAX_OBJECT_DEPTH};

/// Why an apply was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ApplyError {
    /// The configuration changes fields other managers own (upstream: 409 Conflict, reason
    /// `Conflict`, one `FieldManagerConflict` cause per conflict).
    #[error("{}", conflict_message(.0))]
    Conflicts(Vec<Conflict>),
    /// No field manager was given (upstream: 400).
    #[error("PATCH with apply requires a non-empty fieldManager")]
    MissingManager,
    /// The configuration is not an object, lacks `apiVersion` or `kind`, or sets
    /// `metadata.managedFields` (upstream: 400 Bad Request).
    #[error("{0}")]
    InvalidConfig(String),
    /// The configuration's apiVersion is not the one being served (upstream: 400).
    #[error("Incorrect version specified in apply patch. Specified patch version: {specified}, expected: {expected}")]
    IncorrectVersion {
        /// The configuration's apiVersion.
        specified: String,
        /// The apiVersion of the request.
        expected: String,
    },
    /// The configuration does not fit its schema, e.g. a list element without its key or
    /// duplicate keys (upstream: 400 Bad Request).
    #[error("failed to create typed patch object: {0}")]
    InvalidShape(ShapeError),
    /// The live object's managedFields cannot be read (upstream: 500).
    #[error("failed to decode managed fields: {0}")]
    ManagedFields(ManagedFieldsError),
    /// The live object is not a JSON object (a caller bug; 500).
    #[error("the live object is not a JSON object")]
    InvalidLive,
}

impl ApplyError {
    /// The HTTP status upstream answers with.
    pub fn status_code(&self) -> u16 {
        match self {
            ApplyError::Conflicts(_) => 409,
            ApplyError::MissingManager
            | ApplyError::InvalidConfig(_)
            | ApplyError::IncorrectVersion { .. }
            | ApplyError::InvalidShape(_) => 400,
            ApplyError::ManagedFields(_) | ApplyError::InvalidLive => 500,
        }
    }
}
