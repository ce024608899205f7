//! Revisioned key-value storage for Fabrik clusters — what etcd is to kube-apiserver.
//!
//! The [`Store`] trait is the contract: per-keyspace monotonically increasing revisions,
//! create / update / delete with compare-and-swap on a key's mod revision, lists at the
//! current or an older revision with pagination, and watches from a revision that replay
//! history and then follow live changes. History is bounded; asking for a revision older than
//! [`Store::compacted_revision`] fails with [`StoreError::Compacted`] (HTTP 410 Gone upstream).
//!
//! Backends: [`SledBackend`] (embedded, default) holds one sled database per process and one
//! keyspace per cluster ([`SledBackend::keyspace`]). An etcd backend is planned behind the
//! same trait.
//!
//! What this crate does *not* do: interpret values (they are opaque bytes, JSON upstream),
//! enforce tenancy beyond keyspace isolation, or expire keys (no leases yet).

mod error;
mod sled_backend;
mod store;
mod types;

pub use error::{Result, StoreError};
pub use sled_backend::{
    SledBackend, SledConfig, SledStore, DEFAULT_CACHE_BYTES, DEFAULT_HISTORY, INITIAL_REVISION,
};
pub use store::Store;
pub use types::{
    Event, EventKind, KeyValue, ListOptions, ListResult, Revision, WatchItem, WatchStream,
};
