//! The error type of this crate.

/// What can go wrong while encoding an OpenAPI document.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenApiError {
    /// A part of the document does not have the shape Swagger 2.0 requires.
    #[error("invalid openapi document at {path}: {reason}")]
    InvalidDocument {
        /// JSON-pointer-like location of the offending value.
        path: String,
        /// What was expected there.
        reason: &'static str,
    },
    /// A vendor extension or example value could not be serialised.
    #[error("failed to serialise value at {path}: {source}")]
    Serialize {
        /// Location of the value.
        path: String,
        /// The serialiser's error.
        #[source]
        source: serde_json::Error,
    },
}
