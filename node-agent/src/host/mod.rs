//! Talking to the host API server: the Node (registration, labels, annotations, status,
//! taint and cordon), the DRA ResourceSlice, Events, the pods on the node (listing and
//! eviction), and the Tenants and Nodes the segment reconciliation reads. Thin wrappers over kube-rs; the decisions are made by the pure modules.

pub mod events;
pub mod node;
pub mod pods;
pub mod slices;
pub mod tenants;

use thiserror::Error;

/// Errors of host API calls.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// An API call failed.
    #[error("{op}: {source}")]
    Api {
        /// What was being done.
        op: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
    /// An object could not be built or read.
    #[error("{op}: {source}")]
    Json {
        /// What was being done.
        op: String,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
}

/// Result of host calls.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Wraps a kube error with what was being done.
pub(crate) fn api(op: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let op = op.into();
    move |source| Error::Api { op, source }
}

/// The HTTP status of an API error, if it is one.
pub fn status_code(e: &Error) -> Option<u16> {
    match e {
        Error::Api {
            source: kube::Error::Api(s),
            ..
        } => Some(s.code),
        _ => None,
    }
}
