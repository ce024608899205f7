//! OpenAPI documents and schema lookups for the built-in Kubernetes kinds.
//!
//! - [`builtin_kinds`]: the table of built-in kinds (names, scope, verbs, subresources, schema,
//!   typed decoding) that the API server's catalog, [`Definitions::builtin`] and
//!   [`builtin_resources`] are derived from.
//! - [`Definitions::builtin`]: every served kind's schema, generated from k8s-openapi and
//!   carrying upstream's `x-kubernetes-*` extensions; patch metadata for strategic merge patch
//!   ([`Definitions::patch_field`]) and unknown-field pruning for `fieldValidation`
//!   ([`Definitions::prune_unknown`]).
//! - [`InlineSchema`]: the same patch metadata for a CRD's inline `openAPIV3Schema`.
//! - [`v3_index`] and [`v3_document`]: `/openapi/v3` and `/openapi/v3/<path>`.
//! - [`v2_document`] and [`v2_protobuf`]: `/openapi/v2` as JSON and as gnostic protobuf.
//! - [`decode_k8s_protobuf`]: a `application/vnd.kubernetes.protobuf` request body as the JSON
//!   object a JSON client would have sent.
//!
//! This crate does no I/O and knows nothing about storage: callers describe what they serve
//! with [`ResourceDoc`]s.

#[cfg(test)]
mod apply_tests;
mod builtin;
mod definitions;
#[cfg(test)]
mod doc_tests;
mod docs;
mod error;
mod extensions;
mod gvk;
mod inline;
mod kinds;
mod operations;
mod params;
mod patch_info;
mod protobuf;
mod prune;
mod refs;
mod resource;
mod served;
mod subresource;
mod v2;
mod v3;

pub use definitions::Definitions;
pub use docs::content_hash;
pub use error::OpenApiError;
pub use fabrik_machinery::patch::{FieldPatchInfo, PatchSchema};
pub use inline::InlineSchema;
pub use kinds::{builtin_kinds, BuiltinKind, TypeCheck, Verbs};
pub use protobuf::{decode_k8s_protobuf, v2_protobuf, ProtobufDecodeError, K8S_PROTOBUF_MAGIC};
pub use resource::{ResourceDoc, SubresourceDoc};
pub use served::builtin_resources;
pub use subresource::Subresource;
pub use v2::v2_document;
pub use v3::{v3_document, v3_index, v3_path};
